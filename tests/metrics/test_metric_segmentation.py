"""Confusion matrix, per-class / mean IoU and foreground IoU against scikit-learn and brute force."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.segmentation import ForegroundIoU, MeanIoU, confusion_matrix, foreground_iou, iou_from_confusion


def _maps(seed: int, c: int = 5, n: int = 3):
    rng = np.random.default_rng(seed)
    targets = [rng.integers(0, c, (20 + i, 17)) for i in range(n)]
    preds = [np.where(rng.random(t.shape) < 0.6, t, rng.integers(0, c, t.shape)) for t in targets]
    targets[0][:3] = 255  # ignored pixels
    return preds, targets


def test_confusion_and_iou_match_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    preds, targets = _maps(0)
    p = np.concatenate([x.ravel() for x in preds])
    t = np.concatenate([x.ravel() for x in targets])
    keep = t != 255
    cm = sum(confusion_matrix(a, b, 5) for a, b in zip(preds, targets))
    assert np.array_equal(cm, metrics.confusion_matrix(t[keep], p[keep], labels=range(5)))
    iou = iou_from_confusion(cm)
    assert np.allclose(iou, metrics.jaccard_score(t[keep], p[keep], labels=range(5), average=None))
    metric = sb.create_metric("miou", num_classes=5)
    metric.update(preds[:2], targets[:2])
    metric.update(preds[2:], targets[2:])
    assert metric.compute()["miou"] == pytest.approx(metrics.jaccard_score(t[keep], p[keep], average="macro"))
    assert np.allclose(metric.state()["per_class_iou"], iou)


def test_absent_classes_are_left_out_of_the_mean():
    cm = confusion_matrix(np.array([0, 0, 1]), np.array([0, 1, 1]), num_classes=4)
    iou = iou_from_confusion(cm)
    assert np.isnan(iou[2:]).all() and iou[0] == pytest.approx(0.5) and iou[1] == pytest.approx(0.5)
    metric = MeanIoU(num_classes=4)
    metric.update([np.array([0, 0, 1])], [np.array([0, 1, 1])])
    assert metric.compute()["miou"] == pytest.approx(0.5)
    assert metric.state()["per_class_iou"][3] is None


def test_foreground_iou_brute_force():
    rng = np.random.default_rng(1)
    probs = [rng.random((30, 40)).astype(np.float32) for _ in range(3)]
    masks = [rng.random((30, 40)) < 0.4 for _ in range(3)]
    expected = []
    for p, m in zip(probs, masks):
        inter = sum(1 for a, b in zip((p >= 0.5).ravel(), m.ravel()) if a and b)
        union = sum(1 for a, b in zip((p >= 0.5).ravel(), m.ravel()) if a or b)
        expected.append(inter / union)
    metric = ForegroundIoU()
    metric.update(probs, masks)
    assert metric.compute()["foreground_iou"] == pytest.approx(np.mean(expected))
    assert foreground_iou(np.zeros((2, 2)), np.zeros((2, 2), bool)) == 1.0
    assert 0 < metric.state()["pooled_iou"] < 1


def test_bad_inputs():
    with pytest.raises(ShiftbenchError, match="predicted label 7 is outside the label space of 3"):
        confusion_matrix(np.array([7]), np.array([0]), 3)
    # a target value outside the space (an ADE mask scored in VOC's 21 classes) names the value; 255 is void
    with pytest.raises(ShiftbenchError, match="target label 40 is outside .* \\(0..20 or 255\\)"):
        confusion_matrix(np.array([0, 1, 2]), np.array([255, 40, 1]), 21)
    assert confusion_matrix(np.array([0, 1]), np.array([255, 1]), 2).tolist() == [[0, 0], [0, 1]]
    with pytest.raises(ShiftbenchError, match="needs the size of the label space"):
        MeanIoU().update([np.zeros((2, 2), int)], [np.zeros((2, 2), int)])
    with pytest.raises(ShiftbenchError, match="shape"):
        foreground_iou(np.zeros((2, 2)), np.zeros((3, 2)))
    with pytest.raises(ShiftbenchError, match="label maps"):
        MeanIoU(num_classes=2).update([np.zeros((2, 2), np.float32)], [np.zeros((2, 2), int)])
