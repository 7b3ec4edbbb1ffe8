"""Failure points on ImageNet-C-bar's own level scale (issue 36): a measured level 0 stays a measured point
(never replaced by clean), and a failure point always says its scale, never sharing a table, a ranking, the
headline's "breaks at" or an export field with the 1..5 severities without saying which it is."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import shiftbench as sb
from shiftbench.cli import main
from shiftbench.report import export as ex
from shiftbench.report import run_headline
from shiftbench.report.failure import breaks_at, failure_blocks, failure_entries, severity_scale
from shiftbench.results.records import Samples, load

N = 10  # images per condition
LEVELS = [0, 0.5, 1, 2, 2.5, 3, 4, 5, 6, 7, 7.5, 8, 9, 10]
LEVEL_PARAMS = {"scale": "level"}


def _sample(shift, severity, hits, params=None, model="m"):
    values = np.zeros(N)
    values[:hits] = 1
    return Samples(model, "d", shift, params or {}, severity, metric="top1", kind="mean",
                   ids=[f"i{k}" for k in range(N)], values=values)


@st.composite
def runs(draw):
    """A run's per-sample top-1 on a C-bar level curve (any subset of 0..10, level 0 in it or not), a
    severity-scale curve of the same corruption, an ImageNet-C curve, with or without clean."""
    levels = sorted(draw(st.sets(st.sampled_from(LEVELS), min_size=1, max_size=6)))
    severities = sorted(draw(st.sets(st.sampled_from([1, 2, 3, 4, 5]), min_size=1, max_size=5)))
    with_clean = draw(st.booleans())
    hits = st.integers(0, N)
    samples = [_sample("clean", 0, draw(hits))] if with_clean else []
    level_hits = {lv: draw(hits) for lv in levels}
    samples += [_sample("sparkles", lv, h, LEVEL_PARAMS) for lv, h in level_hits.items()]
    samples += [_sample("sparkles", s, draw(hits)) for s in severities]
    samples += [_sample("gaussian_noise", s, draw(hits)) for s in severities]
    return samples, with_clean, level_hits, severities


@given(runs())
def test_level_curves_keep_every_measured_level_and_never_mix_with_severities(run):
    """Promise: nothing silently wrong. A failure point on C-bar's level scale is computed from exactly the
    levels measured (level 0 kept as a measured point, clean never put in its place), lies on a measured
    segment, is labelled "level", and no table, ranking or "breaks at" puts it beside a 1..5 severity."""
    samples, with_clean, level_hits, severities = run
    entries = failure_entries(samples, "top1")
    levels = sorted(level_hits)
    on_levels = [e for e in entries if e["params"] == LEVEL_PARAMS]
    assert len(on_levels) == (1 if with_clean and len(levels) >= 2 else 0)
    assert all(e["scale"] == ("level" if e["params"] == LEVEL_PARAMS else "severity") for e in entries)
    for e in on_levels:
        p = e["point"]
        assert e["severities"] == levels  # level 0, when measured, is one of them
        assert list(p.curve) == pytest.approx([level_hits[lv] / N for lv in levels])  # measured, not clean
        if p.crossed:
            below = [i for i, lv in enumerate(levels) if level_hits[lv] / N <= p.target]
            j = below[0]
            low = levels[max(j - 1, 0)]
            assert low <= p.severity <= levels[j]  # on the segment that meets the target, never before level[0]
            if j == 0:
                assert p.severity == levels[0]
    for e in entries:
        if e["scale"] == "severity":
            assert set(e["severities"]) <= set(severities) and min(e["severities"]) >= 1
    # ranked per scale: every severity entry before every level entry
    scales = [e["scale"] for e in entries]
    assert scales == sorted(scales, key=["severity", "level"].index)
    # the report's tables: one scale each, named in the header
    tables = [b for b in failure_blocks(entries, "top1") if b["kind"] == "table"]
    for t in tables:
        kind = "level" if "(level where" in t["head"][3] else "severity"
        assert f"top1 at each {kind}" in t["head"][5]
        assert all(("scale" in row[2]) == (kind == "level") for row in t["rows"])
        assert [row[0] for row in t["rows"]] == [str(i) for i in range(1, len(t["rows"]) + 1)]
    assert len(tables) == len(set(scales))
    found = breaks_at(entries, "m")
    assert found is None or found["entry"]["scale"] == "severity"


def test_the_scale_of_a_condition():
    """Promise: a failure point says its scale. Only a C-bar corruption asked for its level scale (alone or as a
    chain's free step) is on levels; every other shift, and C-bar on severities, is on 1..5."""
    assert severity_scale("sparkles", {"scale": "level"}) == "level"
    assert severity_scale("sparkles", {"scale": "severity"}) == severity_scale("sparkles", {}) == "severity"
    assert severity_scale("gaussian_noise", {"scale": "level"}) == "severity"  # no level scale of its own
    chain = {"shifts": [{"name": "sparkles", "params": {"scale": "level"}}, {"name": "fog", "params": {}}]}
    assert severity_scale("chain", chain) == "level"
    fixed = {"shifts": [{"name": "sparkles", "params": {"scale": "level"}, "severity": 3}, {"name": "fog", "params": {}}]}
    assert severity_scale("chain", fixed) == "severity"


def test_level_zero_below_half_of_clean_breaks_at_level_zero():
    """Promise: nothing silently wrong. A curve already below half of clean at its measured level 0 breaks at
    level 0 (said "≤ 0.00"), not somewhere later read from clean placed at 0."""
    samples = [_sample("clean", 0, 9), _sample("sparkles", 0, 0, LEVEL_PARAMS), _sample("sparkles", 5, 7, LEVEL_PARAMS),
               _sample("sparkles", 10, 1, LEVEL_PARAMS)]
    (entry,) = failure_entries(samples, "top1")
    assert entry["severities"] == [0, 5, 10] and entry["point"].severity == 0.0
    table = failure_blocks([entry], "top1")[1]
    assert table["rows"][0][3].startswith("≤ 0.00") and table["rows"][0][5] == "0: 0.0, 5: 70.0, 10: 10.0"
    assert breaks_at([entry], "m") is None  # no severity-scale curve: the headline has no point to give


def test_evaluate_store_report_and_export_keep_level_zero_and_the_scale(tmp_path, capsys):
    """Promise: nothing silently wrong, through sb.evaluate -> store -> `shiftbench report` / `export`. A run
    measuring sparkles on its level scale at 0, 5, 10 beside gaussian_noise at 1, 3, 5: the report ranks the
    level curve in a table of its own from the measured level 0, the headline's "breaks at" reads severities
    only, and the results export names each point's scale and validates against its schema."""
    spec = {"dataset": "objects", "models": ["efficientnet_lite0"], "metrics": ["top1"], "limit": 8, "seed": 0,
            "shifts": ["clean", {"name": "sparkles", "params": LEVEL_PARAMS, "severities": [0, 5, 10]},
                       {"name": "gaussian_noise", "severities": [1, 3, 5]}]}
    db = tmp_path / "r.db"
    rows = sb.evaluate(spec, store=db)
    level0 = next(r["value"] for r in rows if r["shift"] == "sparkles" and r["severity"] == 0)
    assert main(["report", "--store", str(db), "--out", str(tmp_path / "report")]) == 0
    md = (tmp_path / "report" / "failure_points.md").read_text(encoding="utf-8")
    severity_part, level_part = md.split("### On the level scale")
    assert "gaussian_noise" in severity_part and "sparkles" not in severity_part
    assert "sparkles" in level_part and "gaussian_noise" not in level_part
    assert f"| 0: {100 * level0:.1f}, 5: " in level_part  # the measured level 0, where clean used to be
    loaded, = load(db, None, ("samples",))
    run, entries = loaded.run_id, failure_entries(loaded.samples, "top1")
    assert breaks_at(entries, "efficientnet_lite0")["entry"]["shift"] == "gaussian_noise"
    head = run_headline(db, run)
    col = [c.head for c in head.columns].index("breaks at")
    assert head.rows[0].cells[col].text.endswith("(gaussian_noise)")  # never a level read as a severity
    assert main(["export", "--store", str(db), "--format", "results", "--out", str(tmp_path / "export")]) == 0
    doc = json.loads((tmp_path / "export" / f"{run}.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(ex.schema("results")).validate(doc)
    by_shift = {p["shift"]: p for p in doc["failure_points"]}
    assert by_shift["sparkles"]["scale"] == "level" and by_shift["sparkles"]["severities"] == [0, 5, 10]
    assert by_shift["sparkles"]["curve"][0] == pytest.approx(level0)
    assert by_shift["gaussian_noise"]["scale"] == "severity" and by_shift["gaussian_noise"]["severities"] == [1, 3, 5]
    capsys.readouterr()
