"""The headline's ImageNet-C numbers and the RobustBench export equal the published formulas, computed here
independently over generated accuracy grids: RobustBench's ``corruptions_acc`` is the plain mean of the 75
(corruption, severity) accuracies (``robustbench/eval.py``: ``model_results.values.mean()``); Hendrycks &
Dietterich's ``CE_c = sum_s E_{s,c} / sum_s E^AlexNet_{s,c}``, mCE their mean over the 15 corruptions, relative
``CE_c = (sum_s E_{s,c} - E_clean) / (sum_s E^AlexNet_{s,c} - E^AlexNet_clean)`` with AlexNet's errors as
published (``ImageNet-C/test.py``, typed again below rather than imported)."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shiftbench.report.export import robustbench_files
from shiftbench.report.headline import headline
from shiftbench.report.tables import build_tables
from shiftbench.results.records import Row, Run

# AlexNet's top-1 errors on ImageNet-C, mean over severities 1-5 (hendrycks/robustness, ImageNet-C/test.py)
ALEXNET = {"gaussian_noise": 0.886428, "shot_noise": 0.894468, "impulse_noise": 0.922640, "defocus_blur": 0.819880,
           "glass_blur": 0.826268, "motion_blur": 0.785948, "zoom_blur": 0.798360, "snow": 0.866816,
           "frost": 0.826572, "fog": 0.819324, "brightness": 0.564592, "contrast": 0.853204,
           "elastic_transform": 0.646056, "pixelate": 0.717840, "jpeg_compression": 0.606500}
ALEXNET_CLEAN = 0.435


def _rows(clean: float, grid: np.ndarray, model: str = "m") -> list[dict]:
    rows = [Row(model, "d", "clean", {}, 0, metric="top1", value=clean, n=1000, extra={})]
    for i, corruption in enumerate(ALEXNET):
        for s in range(1, 6):
            rows.append(Row(model, "d", corruption, {}, s, metric="top1", value=float(grid[i, s - 1]), n=1000, extra={}))
    return rows


accuracy = st.floats(0.0, 1.0, allow_nan=False).map(lambda v: round(v, 4))


@settings(max_examples=40, deadline=None)
@given(clean=st.floats(0.5, 1.0).map(lambda v: round(v, 4)),
       grid=st.lists(accuracy, min_size=75, max_size=75).map(lambda v: np.array(v).reshape(15, 5)))
def test_mce_relative_mce_and_corruptions_acc_follow_the_published_formulas(clean, grid):
    rows = _rows(clean, grid)
    errors = 1.0 - grid
    ce = [errors[i].sum() / (5 * ALEXNET[c]) for i, c in enumerate(ALEXNET)]
    rel = [(errors[i].sum() - 5 * (1 - clean)) / (5 * ALEXNET[c] - 5 * ALEXNET_CLEAN) for i, c in enumerate(ALEXNET)]
    head = headline(rows, build_tables(rows, ["top1"]), ["top1"])
    heads = [c.head for c in head.columns]
    cells = head.rows[0].cells
    assert cells[heads.index("mCE")].text == f"{100 * np.mean(ce):.1f}"
    assert cells[heads.index("rel. mCE")].text == f"{100 * np.mean(rel):.1f}"

    files, notes, _ = robustbench_files(Run("r", {}, {}, 0, 0.0, None, "done", rows=rows))
    info = json.loads(files["model_info/d/corruptions/m.json"])
    assert info["corruptions_acc"] == f"{100 * grid.mean():.2f}" and info["clean_acc"] == f"{100 * clean:.2f}"
    assert not notes
