"""Failure points in the report: ranked entries from per-sample values, the same numbers as
metrics.failure.failure_point on the same arrays, and the section in a real run's report."""

from __future__ import annotations

import numpy as np

from shiftbench.cli import main
from shiftbench.metrics.failure import failure_point
from shiftbench.report.failure import failure_blocks, failure_entries
from shiftbench.results.records import Samples, load


def _sample(model, shift, severity, values, ids=None, params=None):
    values = np.asarray(values, dtype=float)
    return Samples(model, "d", shift, params or {}, severity, metric="top1", kind="mean",
                   ids=ids or [f"i{k}" for k in range(len(values))], values=values)


def _exact(n: int, share: float, rng: np.random.Generator) -> np.ndarray:
    """n per-image 0/1 values whose mean is exactly ``share`` (n * share whole), in a random order."""
    out = np.zeros(n)
    out[: round(n * share)] = 1
    return rng.permutation(out)


def test_entries_are_ranked_and_equal_the_metric_on_the_same_arrays():
    rng = np.random.default_rng(0)
    n = 200
    clean = _exact(n, 0.8, rng)
    early = [_exact(n, a, rng) for a in (0.5, 0.3, 0.2)]        # breaks between 1 and 2
    late = [_exact(n, a, rng) for a in (0.7, 0.6, 0.35)]        # between 2 and 3
    never = [_exact(n, a, rng) for a in (0.8, 0.75, 0.7)]       # stays above 0.4
    samples = [_sample("m", "clean", 0, clean)]
    for shift, curve in (("late", late), ("early", early), ("never", never)):
        samples += [_sample("m", shift, s, v) for s, v in zip((1, 3, 5), curve)]
    entries = failure_entries(samples, "top1")
    assert [e["shift"] for e in entries] == ["early", "late", "never"]
    for e, curve in zip(entries, (early, late, never)):
        want = failure_point([1, 3, 5], clean, np.stack(curve), 0.5, seed=0)
        assert e["point"] == want
    assert entries[0]["point"].severity == 1 + 2 * (0.5 - 0.4) / (0.5 - 0.3)
    assert not entries[2]["point"].crossed
    table = failure_blocks(entries, "top1")[1]
    assert [row[2] for row in table["rows"]] == ["early", "late", "never"]
    assert table["rows"][2][3] == "not within 1-5"
    assert table["rows"][0][3].startswith("2.00 [")


def test_a_curve_over_other_images_or_a_single_severity_gets_no_entry():
    clean = [1, 1, 0, 1]
    samples = [_sample("m", "clean", 0, clean), _sample("m", "fog", 1, [1, 0, 0, 1]),
               _sample("m", "fog", 2, [0, 0, 0, 1], ids=["i0", "i1", "i2", "other"]),
               _sample("m", "snow", 3, [0, 0, 0, 0])]
    assert failure_entries(samples, "top1") == []
    assert failure_blocks([], "top1") == []


def test_a_real_runs_report_ranks_where_the_model_breaks(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("dataset: objects\nmodels: [efficientnet_lite0]\nshifts: [clean, {name: gaussian_noise, "
                    "severities: 1-5}, {name: fog, severities: 1-5}]\nmetrics: [top1]\nlimit: 12\n")
    db = tmp_path / "r.db"
    assert main(["evaluate", "--config", str(spec), "--store", str(db)]) == 0
    assert main(["report", "--store", str(db), "--out", str(tmp_path / "report")]) == 0
    html = (tmp_path / "report" / "report.html").read_text()
    md = (tmp_path / "report" / "failure_points.md").read_text()
    assert "Failure points" in html and "breaks at" in md
    samples = load(db, None, ("samples",))[0].samples
    entries = failure_entries(samples, "top1")
    assert sorted(e["shift"] for e in entries) == ["fog", "gaussian_noise"]
    for e in entries:  # the report's line is the metric on the store's own per-sample values
        clean = next(s for s in samples if s["shift"] == "clean")
        rows = [next(s for s in samples if s["shift"] == e["shift"] and s["severity"] == k) for k in range(1, 6)]
        order = [dict(zip(r["ids"], r["values"])) for r in rows]
        want = failure_point(range(1, 6), clean["values"], np.array([[o[i] for i in clean["ids"]] for o in order]), 0.5)
        assert e["point"] == want
        assert e["shift"] in md
    capsys.readouterr()
