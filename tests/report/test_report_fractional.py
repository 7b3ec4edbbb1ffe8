"""Fractional severities in the report (severities as a continuous dial): 1.5 is its own row, column and
point, never merged into 1 or 2; mCE and the other published 1..5 protocols read only the whole severities;
failure points use every measured severity; the headline's "breaks at" and one failure figure per
corruption family. Result rows and per-sample records are fabricated (as a store holds them) and the
report is written from them, so nothing here runs a model."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from shiftbench.metrics.failure import failure_point
from shiftbench.metrics.robustness import IMAGENET_C_CORRUPTIONS, mean_corruption_error, relative_mean_corruption_error
from shiftbench.report.build import _write_report
from shiftbench.report.failure import breaks_at, failure_entries
from shiftbench.report.headline import headline, imagenet_c_coverage
from shiftbench.report.stats import Uncertainty, row_conditions
from shiftbench.report.tables import build_tables, to_markdown
from shiftbench.results.records import Row, Run, Samples

N = 40  # images; every accuracy below is a whole number of them
GRID = [1 + 0.5 * k for k in range(9)]  # 1, 1.5, 2, ..., 5 as a store returns them (whole ones as ints)
GRID = [int(s) if float(s).is_integer() else s for s in GRID]


def steep(severity: float) -> float:
    """Clean 1.0, falling linearly: 0.5 (half of clean) exactly at severity 2.5."""
    return 1.0 - 0.2 * severity


def gentle(severity: float) -> float:
    """Clean 1.0, half of clean at severity 5."""
    return 1.0 - 0.1 * severity


def flat(severity: float) -> float:
    return 0.9


CURVES = {"steep": {"zoom_blur": steep, "gaussian_noise": gentle},  # breaks at 2.5 under zoom_blur
          "flat": {"zoom_blur": flat, "gaussian_noise": flat}}  # never
CLEAN_ACC = {"steep": 1.0, "flat": 0.9}


def _values(acc: float) -> np.ndarray:
    k = round(acc * N)
    assert abs(k - acc * N) < 1e-9, acc
    return np.array([1.0] * k + [0.0] * (N - k))


def _row(model, shift, severity, value, metric="top1", params=None):
    return Row(model, "d", shift, params or {}, severity, run_id="r", metric=metric, value=value, n=N, extra={})


def _sample(model, shift, severity, values):
    return Samples(model, "d", shift, {}, severity, metric="top1", kind="mean", ids=[f"i{k}" for k in range(N)],
                   values=np.asarray(values, dtype=float))


def fabricated(grid=GRID):
    """Rows and per-sample records of two models under zoom_blur (blur) and gaussian_noise (noise) at ``grid``."""
    rows, samples = [], []
    for model, curves in CURVES.items():
        clean = _values(CLEAN_ACC[model])
        rows.append(_row(model, "clean", 0, float(clean.mean())))
        samples.append(_sample(model, "clean", 0, clean))
        for shift, curve in curves.items():
            for s in grid:
                v = _values(curve(s))
                rows.append(_row(model, shift, s, float(v.mean())))
                samples.append(_sample(model, shift, s, v))
    return rows, samples


def _run(rows, samples):
    return Run("r", {"metrics": ["top1"]}, {"shiftbench": "test"}, 0, 0.0, 1.0, "done", identity={}, name="fractional",
               host="test", rows=rows, samples=samples)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fractional")
    rows, samples = fabricated()
    _write_report(out, [_run(rows, samples)])
    return out


def test_per_severity_rows_keep_each_fractional_severity_apart_and_in_order():
    rows, _ = fabricated()
    detail = build_tables(rows, ["top1"], per_severity=True)[0]
    blur = [r for r in detail.rows if r.startswith("zoom_blur")]
    assert blur == [f"zoom_blur s{s}" for s in ("1", "1.5", "2", "2.5", "3", "3.5", "4", "4.5", "5")]
    for s in GRID:  # nothing merged: each row is the value at its own severity
        assert detail.cells[(f"zoom_blur s{s}", "steep")].value == pytest.approx(steep(s))
        assert [(c.shift, c.params, c.severity) for c in row_conditions(detail, f"zoom_blur s{s}")] == [("zoom_blur", {}, s)]
    main = build_tables(rows, ["top1"])[0]  # the mean over all nine measured severities
    assert main.cells[("zoom_blur", "steep")].value == pytest.approx(np.mean([steep(s) for s in GRID]))
    assert main.row_meta["zoom_blur"]["severities"] == GRID


def test_a_severity_given_as_a_float_is_the_same_condition_as_the_int():
    rows, _ = fabricated()
    as_floats = [dataclasses.replace(r, severity=float(r.severity)) for r in rows]
    a = to_markdown(build_tables(rows, ["top1"], per_severity=True)[0])
    b = to_markdown(build_tables(as_floats, ["top1"], per_severity=True)[0])
    assert a == b and "s3.0" not in a and "| zoom_blur s2.5 |" in a


def test_intervals_of_fractional_rows_come_from_their_own_samples():
    rows, samples = fabricated()
    detail = build_tables(rows, ["top1"], per_severity=True)[0]
    Uncertainty(samples).annotate(detail)
    for s in (1.5, 2, 2.5):
        cell = detail.cells[(f"zoom_blur s{s}", "steep")]
        assert cell.low <= cell.value <= cell.high and cell.delta == pytest.approx(steep(s) - 1.0)
        assert cell.p_value is not None


def test_report_files_show_fractional_labels_distinct_from_whole_ones(report):
    md = (report / "tables.md").read_text()
    for s in ("1", "1.5", "2", "2.5", "5"):
        assert f"| zoom_blur s{s} |" in md
    assert not re.search(r"s\d\.0\b", md)
    csv_text = (report / "tables.csv").read_text()
    assert "top1,zoom_blur s1.5,steep," in csv_text and "top1,zoom_blur s2,steep," in csv_text
    html = (report / "report.html").read_text()
    assert "zoom_blur s1.5" in html


def protocol_rows(grid, models=("a", "b")):
    rows = []
    for k, m in enumerate(models):
        rows.append(_row(m, "clean", 0, 0.8))
        rows += [_row(m, c, s, 0.75 - 0.1 * s - 0.01 * k) for c in IMAGENET_C_CORRUPTIONS for s in grid]
    return rows


def _head(rows):
    return headline(rows, build_tables(rows, ["top1"]), ["top1"])


def test_mce_reads_only_the_whole_severities_of_a_finer_grid():
    fine, whole = protocol_rows(GRID), protocol_rows([1, 2, 3, 4, 5])
    assert imagenet_c_coverage(fine).full
    head, base = _head(fine), _head(whole)
    heads = [c.head for c in head.columns]
    assert heads == [c.head for c in base.columns] == ["top1 (%)", "mean of 15 corruptions", "mCE", "rel. mCE"]
    for row, want in zip(head.rows, base.rows):  # the protocol's numbers: identical to the whole-only run
        assert [c.text for c in row.cells] == [c.text for c in want.cells]
    errors = {c: [1 - (0.75 - 0.1 * s) for s in range(1, 6)] for c in IMAGENET_C_CORRUPTIONS}
    assert head.rows[0].cells[2].text == f"{100 * mean_corruption_error(errors):.1f}"
    assert head.rows[0].cells[3].text == f"{100 * relative_mean_corruption_error(errors, 0.2):.1f}"
    assert "75 corruption-severity pairs" in head.rows[0].cells[2].title


def test_a_grid_without_the_whole_severities_is_not_the_protocol():
    rows = protocol_rows([1.25, 2.25, 3.25, 4.25])  # int() would have made them 1..4
    cov = imagenet_c_coverage(rows)
    assert not cov.full and cov.severities == [1.25, 2.25, 3.25, 4.25]
    head = _head(rows)
    assert "mCE" not in [c.head for c in head.columns]
    assert "at severities 1.25, 2.25, 3.25, 4.25" in head.note


def test_failure_points_use_every_measured_severity():
    _, samples = fabricated()
    entries = failure_entries(samples, "top1")
    steep_blur = next(e for e in entries if e["model"] == "steep" and e["shift"] == "zoom_blur")
    assert steep_blur["severities"] == GRID and steep_blur["group"] == "blur"
    assert steep_blur["point"].severity == pytest.approx(2.5)
    assert steep_blur["point"] == failure_point(GRID, _values(1.0), np.stack([_values(steep(s)) for s in GRID]))
    # a coarser grid reads the same straight line between whole severities: the same point, less finely
    coarse = failure_entries([s for s in samples if float(s["severity"]).is_integer()], "top1")
    coarse_blur = next(e for e in coarse if e["model"] == "steep" and e["shift"] == "zoom_blur")
    assert coarse_blur["severities"] == [1, 2, 3, 4, 5] and coarse_blur["point"].severity == pytest.approx(2.5)
    found = breaks_at(entries, "steep")
    assert found["crossed"] and found["entry"]["shift"] == "zoom_blur"
    assert not breaks_at(entries, "flat")["crossed"]


def test_headline_breaks_at_gives_the_known_point_and_never(report):
    rows, samples = fabricated()
    entries = failure_entries(samples, "top1")
    head = headline(rows, build_tables(rows, ["top1"]), ["top1"], failures=entries)
    assert head.columns[-1].head == "breaks at" and head.groups[-1] == ("failure point", 1)
    cells = {r.model: r.cells[-1] for r in head.rows}
    m = re.fullmatch(r"(\d+\.\d) \(zoom_blur\)", cells["steep"].text)
    assert m and abs(float(m.group(1)) - 2.5) <= 0.05, cells["steep"]
    assert cells["flat"].text == "never"
    assert "Breaks at" in head.note
    # no failure points given (or none of a corruption): no column
    assert "breaks at" not in [c.head for c in _head(rows).columns]
    html = (report / "report.html").read_text()
    assert "breaks at" in html and "2.5 (zoom_blur)" in html and ">never<" in html


def test_one_failure_figure_per_corruption_family_and_the_html_embeds_them(report):
    for family in ("noise", "blur"):
        path = report / f"failure_{family}.png"
        assert path.stat().st_size > 0 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in report.glob("failure_*.png")) == ["failure_blur.png", "failure_noise.png"]
    html = (report / "report.html").read_text()
    for family in ("noise", "blur"):
        assert f"Failure points: {family}" in html and f"failure_{family}.png" in html
    assert html.count('<img src="data:image/png;base64,') >= 2 + 2  # the curves and heat map, and the two families
    md = (report / "failure_points.md").read_text()
    assert "1: 80.0, 1.5: 70.0, 2: 60.0, 2.5: 50.0" in md  # each value after its severity on a fractional grid
    assert "2.50 [" in md


def test_whole_severities_keep_their_labels(tmp_path):
    """A store with whole severities only reads as before: rows 's1'..'s5' (never 's1.0'), the failure table's
    curve as bare values, the coverage's severities ints."""
    rows, samples = fabricated([1, 2, 3, 4, 5])
    _write_report(tmp_path, [_run(rows, samples)])
    md = (tmp_path / "tables.md").read_text()
    labels = re.findall(r"\| zoom_blur (s[^ |]+) \|", md)
    assert labels == ["s1", "s2", "s3", "s4", "s5"]
    fp = (tmp_path / "failure_points.md").read_text()
    assert "| 80.0 60.0 40.0 20.0 0.0 |" in fp and "not within 1-5" in fp
    floats = [dataclasses.replace(r, severity=float(r.severity)) for r in protocol_rows([1, 2, 3, 4, 5])]
    assert imagenet_c_coverage(floats).severities == [1, 2, 3, 4, 5]
    assert all(isinstance(s, int) for s in imagenet_c_coverage(floats).severities)
