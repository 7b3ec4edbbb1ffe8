"""benchmarks/results_scale.py (issue 38): its synthetic store reads back as written, and its ``--quick`` smoke
run measures every step (report, each export format, leaderboard) in a fresh process and prints the table.
No assertion on a time or a memory figure: only that each was measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shiftbench.report.export import FORMATS
from shiftbench.results import records

from conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "results_scale.py"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("results_scale")


@pytest.fixture(scope="module")
def filled(bench, tmp_path_factory):
    path = tmp_path_factory.mktemp("filled") / "store.db"
    return path, bench.fill_store(path, 23, models=2, corruptions=2, seed=5, keep=True)


def test_the_per_sample_records_read_back_as_the_filler_wrote_them(bench, filled) -> None:
    path, out = filled
    (run,) = records.load(path, parts=("results", "samples"))
    assert run.run_id == out["run_id"] and run.status == "done"
    conditions = 1 + 5 * 2
    assert out["conditions"] == conditions and out["predictions"] == 23 * conditions * 2
    got = {(s.model, s.shift, int(s.severity), s.metric): s for s in run.samples}
    assert set(got) == set(out["written"]) and len(got) == 2 * conditions * 2
    ids = bench.image_ids(23)
    for key, (kind, written_ids, values) in out["written"].items():
        record = got[key]
        assert record.kind == kind == {"top1": "mean", "ece": "ece:15"}[key[3]]
        assert list(record.ids) == list(written_ids) == ids  # every image scored, in the folder's order
        np.testing.assert_array_equal(np.asarray(record.values, np.float64), values)


def test_the_rows_are_what_the_metrics_give_on_the_per_sample_values(filled) -> None:
    path, out = filled
    (run,) = records.load(path, parts=("results",))
    rows = {(r.model, r.shift, int(r.severity), r.metric): r for r in run.rows}
    assert set(rows) == set(out["written"])
    for key, (kind, ids, values) in out["written"].items():
        row = rows[key]
        assert row.n == 23 and row.extra["metric"] == key[3]
        if key[3] == "top1":
            assert row.higher_is_better and set(np.unique(values)) <= {0.0, 1.0}
            assert row.value == pytest.approx(values.mean())
        else:  # ece: |accuracy - confidence| summed over 15 equal bins, weighted by their counts
            confidence, right = values[:, 0], values[:, 1]
            bins = np.clip(np.ceil(confidence * 15).astype(int) - 1, 0, 14)  # (b/15, (b+1)/15] is bin b
            gap = sum(abs(right[bins == b].sum() - confidence[bins == b].sum()) for b in range(15)) / len(values)
            assert not row.higher_is_better and row.value == pytest.approx(gap, abs=1e-9)
            assert sum(row.extra["counts"]) == 23 and len(row.extra["edges"]) == 16


def test_the_filler_is_deterministic_from_its_seed(bench, filled, tmp_path) -> None:
    _, out = filled
    again = bench.fill_store(tmp_path / "again.db", 23, models=2, corruptions=2, seed=5, keep=True)
    other = bench.fill_store(tmp_path / "other.db", 23, models=2, corruptions=2, seed=6, keep=True)
    assert again["written"].keys() == out["written"].keys()
    for key, (_, _, values) in out["written"].items():
        np.testing.assert_array_equal(again["written"][key][2], values)
    assert any(not np.array_equal(other["written"][k][2], v) for k, (_, _, v) in out["written"].items())


def test_synthetic_accuracy_falls_with_severity_from_a_realistic_clean_one(bench) -> None:
    synthetic = bench.Synthetic(100, models=4, seed=0)
    for m in range(4):
        clean = synthetic.accuracy(m, "clean", 0, 0)
        assert 0.7 <= clean <= 0.82
        for c, shift in enumerate(bench.corruption_names(15)):
            curve = [synthetic.accuracy(m, shift, s, 1 + 5 * c + s - 1) for s in range(1, 6)]
            assert clean > curve[0] and all(a > b for a, b in zip(curve, curve[1:])), (shift, curve)
    worst = [synthetic.accuracy(0, shift, 5, 5 + 5 * c) for c, shift in enumerate(bench.corruption_names(15))]
    assert 0.2 <= np.mean(worst) <= 0.4 and min(worst) < np.mean(worst) < max(worst)


def test_image_ids_are_an_image_folders_in_reading_order(bench) -> None:
    ids = bench.image_ids(25)
    assert ids[:3] == ["c0/img00000.png", "c0/img00010.png", "c0/img00020.png"] and len(set(ids)) == 25
    assert ids == sorted(ids)  # the reader's order: class folder, then file name


def test_quick_measures_every_step_and_prints_the_table(tmp_path) -> None:
    out = tmp_path / "quick.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    steps = ["report", *(f"export {fmt}" for fmt in FORMATS), "leaderboard"]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| step | 20 images |")
    names = [line.split(" | ")[0][2:] for line in table[1:]]
    assert names[0] == "store (synthetic)" and names[-1] == "leaderboard (one store)"
    assert sorted(names[1:-1]) == sorted(steps[:-1])  # report and one row per export format
    result = json.loads(out.read_text())["quick"]
    assert result["code"].endswith("shiftbench/__init__.py") and result["formats"] and set(result["formats"]) == set(FORMATS)
    (size,) = result["sizes"]
    assert size["images"] == 20 and size["models"] == 2 and size["conditions"] == 6
    assert "evaluate" not in size  # no evaluate in the smoke run
    for step in steps:
        row = size[step]
        assert row["rc"] == 0 and row["seconds"] > 0 and row["peak_rss_mb"] > 0, (step, row)
    assert size["export jsonl"]["lines"] > 0 and size["store"]["bytes_per_prediction"] > 0
