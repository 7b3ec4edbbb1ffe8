"""The store's per-sample statistics (mean, ratio, iou, ece:B) against plain-loop references and against
the metrics they must reproduce (ECE, confusion-matrix mIoU), resample by resample."""

from __future__ import annotations

import numpy as np
import pytest

from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.classification import expected_calibration_error
from shiftbench.metrics.segmentation import confusion_matrix, mean_iou
from shiftbench.metrics.uncertainty import sample_statistic, sample_statistic_batch


def brute(kind: str, values: np.ndarray) -> float:
    """The statistic with plain Python loops, from its definition."""
    rows = [np.asarray(v, dtype=float) for v in values]
    if kind == "mean":
        return sum(float(v) for v in rows) / len(rows)
    if kind == "ratio":
        return sum(v[0] for v in rows) / sum(v[1] for v in rows)
    if kind == "iou":
        ious = []
        for c in range(rows[0].shape[1]):
            union = sum(v[1, c] for v in rows)
            if union > 0:
                ious.append(sum(v[0, c] for v in rows) / union)
        return sum(ious) / len(ious)
    bins = int(kind.split(":")[1])
    total = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        # (lo, hi], confidence 0 in the first bin
        members = [v for v in rows if (lo < v[0] <= hi) or (b == 0 and v[0] == 0)]
        if members:
            acc = sum(v[1] for v in members) / len(members)
            conf = sum(v[0] for v in members) / len(members)
            total += len(members) / len(rows) * abs(acc - conf)
    return total


def random_values(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "mean":
        return rng.random(n)
    if kind == "ratio":
        den = rng.integers(1, 100, n).astype(float)
        return np.stack([np.floor(den * rng.random(n)), den], 1)
    if kind == "iou":
        union = rng.integers(0, 50, (n, 5)).astype(float)
        union[:, 4] = 0
        union[rng.random((n, 5)) < 0.3] = 0  # classes missing from some images
        return np.stack([np.floor(union * rng.random((n, 5))), union], 1)
    confidence = rng.random(n)
    confidence[:3] = [0.0, 1.0, 0.4]  # the bin edges
    return np.stack([confidence, (rng.random(n) < confidence).astype(float)], 1)


@pytest.mark.parametrize("kind", ["mean", "ratio", "iou", "ece:15", "ece:1", "ece:7"])
def test_batch_equals_the_plain_loop_on_every_resample(kind):
    rng = np.random.default_rng(11)
    values = random_values(kind, 37, rng)
    index = rng.integers(0, 37, (60, 37))
    got = sample_statistic_batch(kind, values, index)
    expected = [brute(kind, values[row]) for row in index]
    assert got.shape == (60,)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert sample_statistic(kind, values) == pytest.approx(brute(kind, values), rel=1e-12, abs=1e-12)


def test_resamples_of_another_size_and_chunking_do_not_change_the_result(monkeypatch):
    import shiftbench.metrics.uncertainty as unc

    rng = np.random.default_rng(2)
    values = random_values("iou", 20, rng)
    index = rng.integers(0, 20, (50, 9))  # resamples of 9 rows drawn from 20
    whole = sample_statistic_batch("iou", values, index)
    np.testing.assert_allclose(whole, [brute("iou", values[r]) for r in index], rtol=1e-12)
    monkeypatch.setattr(unc, "_CHUNK_CELLS", 40)  # two resamples per chunk
    np.testing.assert_array_equal(sample_statistic_batch("iou", values, index), whole)


@pytest.mark.parametrize("bins", [1, 10, 15])
def test_ece_kind_equals_expected_calibration_error(bins):
    rng = np.random.default_rng(bins)
    logits = rng.standard_normal((300, 12)) * 3
    probabilities = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    labels = rng.integers(0, 12, 300)
    values = np.stack([probabilities.max(1), (probabilities.argmax(1) == labels).astype(float)], 1)
    expected = expected_calibration_error(probabilities, labels, n_bins=bins)
    assert sample_statistic(f"ece:{bins}", values) == pytest.approx(expected, abs=1e-12)
    # and each resample equals ECE of the resampled images
    index = rng.integers(0, 300, (5, 300))
    for row, got in zip(index, sample_statistic_batch(f"ece:{bins}", values, index)):
        assert got == pytest.approx(expected_calibration_error(probabilities[row], labels[row], n_bins=bins), abs=1e-12)


def test_iou_kind_equals_mean_iou_of_the_summed_confusion_matrix():
    rng = np.random.default_rng(4)
    classes, cms, values = 6, [], []
    for _ in range(12):
        target = rng.integers(0, classes - 1, (20, 24))  # the last class never appears in a target ...
        prediction = np.where(rng.random((20, 24)) < 0.6, target, rng.integers(0, classes - 2, (20, 24)))
        target[:2] = 255  # ignored pixels
        cm = confusion_matrix(prediction, target, classes)
        cms.append(cm)
        inter = np.diag(cm).astype(float)
        values.append([inter, cm.sum(0) + cm.sum(1) - inter])
    values = np.asarray(values)
    assert sample_statistic("iou", values) == pytest.approx(mean_iou(sum(cms)), abs=1e-12)
    index = rng.integers(0, 12, (8, 12))
    for row, got in zip(index, sample_statistic_batch("iou", values, index)):
        assert got == pytest.approx(mean_iou(sum(cms[i] for i in row)), abs=1e-12)


def test_mistakes_name_the_kind_and_the_shape():
    with pytest.raises(ShiftbenchError, match="unknown per-sample statistic kind 'median'"):
        sample_statistic("median", [1.0])
    with pytest.raises(ShiftbenchError, match="unknown per-sample statistic kind 'ece:0'"):
        sample_statistic("ece:0", [[0.5, 1.0]])
    with pytest.raises(ShiftbenchError, match=r"kind 'ratio' must have shape \(n, 2\), got \(3,\)"):
        sample_statistic("ratio", [1.0, 2.0, 3.0])
    with pytest.raises(ShiftbenchError, match="finite"):
        sample_statistic("mean", [1.0, float("nan")])
    with pytest.raises(ShiftbenchError, match=r"outside 0\.\.2"):
        sample_statistic_batch("mean", [1.0, 0.0, 1.0], np.array([[0, 3, 1]]))
