"""Segmentation metrics: confusion matrix, per-class and mean IoU, and foreground IoU for class-agnostic masks.

>>> cm = confusion_matrix(np.array([[0, 1], [1, 1]]), np.array([[0, 1], [0, 1]]), num_classes=2)
>>> cm.tolist()
[[1, 1], [0, 2]]
>>> iou_from_confusion(cm).round(3).tolist()
[0.5, 0.667]
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from .base import Metric, exact_add, exact_value

__all__ = ["confusion_matrix", "iou_from_confusion", "mean_iou", "foreground_iou", "MeanIoU", "ForegroundIoU"]


def confusion_matrix(prediction: Any, target: Any, num_classes: int, ignore_index: int | None = 255) -> np.ndarray:
    """int64 (C, C) counts: rows = target class, columns = predicted class; ``ignore_index`` pixels skipped.

    Labels outside 0..C-1 (other than ``ignore_index``) are an error naming the value: a mask or model
    from another label space would otherwise give a number instead of a mismatch.
    """
    prediction = np.asarray(prediction)
    target = np.asarray(target)
    if prediction.shape != target.shape:
        raise ShiftbenchError(f"prediction shape {prediction.shape} does not match target shape {target.shape}")
    t = target.reshape(-1).astype(np.int64)
    p = prediction.reshape(-1).astype(np.int64)
    keep = t != ignore_index if ignore_index is not None else np.ones_like(t, dtype=bool)
    t, p = t[keep], p[keep]
    for kind, values in (("target", t), ("predicted", p)):
        bad = values[(values < 0) | (values >= num_classes)]
        if bad.size:
            allowed = f"0..{num_classes - 1}" + (f" or {ignore_index}" if kind == "target" and ignore_index is not None else "")
            raise ShiftbenchError(f"{kind} label {int(bad[0])} is outside the label space of {num_classes} classes "
                                  f"({allowed})")
    return np.bincount(t * num_classes + p, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def iou_from_confusion(cm: Any) -> np.ndarray:
    """Per-class IoU = TP / (TP + FP + FN); NaN for classes absent from both target and prediction."""
    cm = np.asarray(cm, dtype=np.float64)
    tp = np.diag(cm)
    union = cm.sum(axis=0) + cm.sum(axis=1) - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, tp / union, np.nan)


def mean_iou(cm: Any) -> float:
    """Mean of the per-class IoUs over classes present in target or prediction."""
    iou = iou_from_confusion(cm)
    return float(np.nanmean(iou)) if np.isfinite(iou).any() else float("nan")


def foreground_iou(prediction: Any, target: Any, threshold: float = 0.5) -> float:
    """IoU of one binary mask pair; float predictions are thresholded (``>= threshold``). 1.0 if both empty."""
    pred = _binary(prediction, threshold)
    tgt = np.asarray(target).astype(bool)
    if pred.shape != tgt.shape:
        raise ShiftbenchError(f"prediction shape {pred.shape} does not match target shape {tgt.shape}")
    union = np.logical_or(pred, tgt).sum()
    return float(np.logical_and(pred, tgt).sum() / union) if union else 1.0


def _binary(mask: Any, threshold: float) -> np.ndarray:
    mask = np.asarray(mask)
    if mask.dtype.kind == "f":
        if not np.isfinite(mask).all():
            raise ShiftbenchError("foreground probabilities contain NaN/inf")
        return mask >= threshold
    return mask.astype(bool) if mask.dtype == bool else mask > 0


class MeanIoU(Metric):
    """Mean IoU from a confusion matrix accumulated over all pixels of all images (Pascal VOC / ADE style).

    The confusion matrix is sized by the label space (``num_classes``, or ``use_num_classes`` which the
    runner calls with the model's space), never by the labels that happen to occur: a value outside the
    space is an error. ``compute`` gives ``miou``; ``state()`` the per-class IoU and the confusion matrix.
    """

    name = "miou"
    task = "segmentation"
    needs = "a label map (sample.mask or meta['segmentation']), and a segmenter that predicts classes"
    higher_is_better = True
    config = ("num_classes", "ignore_index")

    def __init__(self, num_classes: int | None = None, ignore_index: int | None = 255):
        self.num_classes = num_classes
        self.ignore_index = ignore_index
        super().__init__()

    def reset(self) -> None:
        self.n = 0
        self._cm = None if self.num_classes is None else np.zeros((self.num_classes, self.num_classes), np.int64)
        # per image, in data order, sparse: the classes present in its target or prediction (union > 0)
        # with their intersection and union pixel counts (the report's bootstrap; summed, they give the
        # confusion matrix's diagonal and unions exactly)
        self._img_classes: list[list[int]] = []
        self._img_inter: list[list[int]] = []
        self._img_union: list[list[int]] = []

    def use_num_classes(self, num_classes: int) -> None:
        """Size the confusion matrix for a label space of ``num_classes`` slots (clears any state)."""
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ShiftbenchError(f"miou: num_classes must be a positive int, got {num_classes!r}")
        self.num_classes = num_classes
        self.reset()

    def update(self, predictions: Sequence[Any], targets: Sequence[Any]) -> None:
        if len(predictions) != len(targets):
            raise ShiftbenchError(f"miou: {len(predictions)} predictions for {len(targets)} targets")
        for pred, tgt in zip(predictions, targets):
            pred = np.asarray(pred)
            if pred.dtype.kind == "f":
                raise ShiftbenchError("miou takes integer label maps; use Segmenter.predict_masks, not scores")
            if self._cm is None:
                raise ShiftbenchError("miou needs the size of the label space: MeanIoU(num_classes=...) "
                                      "(the runner sets it from the model's label space)")
            cm = confusion_matrix(pred, np.asarray(tgt).astype(np.int64), self._cm.shape[0], self.ignore_index)
            self._cm += cm
            tp = np.diag(cm)
            union = cm.sum(axis=0) + cm.sum(axis=1) - tp
            present = np.flatnonzero(union > 0)
            self._img_classes.append(present.tolist())
            self._img_inter.append(tp[present].tolist())
            self._img_union.append(union[present].tolist())
            self.n += 1

    def merge(self, other: "MeanIoU") -> "MeanIoU":
        self.check_mergeable(other)
        if other._cm is not None:
            self._cm = other._cm.copy() if self._cm is None else self._cm + other._cm
        self._img_classes = self._img_classes + list(other._img_classes)
        self._img_inter = self._img_inter + list(other._img_inter)
        self._img_union = self._img_union + list(other._img_union)
        self.n += other.n
        return self

    def per_sample(self) -> dict[str, tuple[str, np.ndarray]]:
        """``iou``: (n, 2, C) intersection and union pixels per image and class (dense, from the sparse state)."""
        if self._cm is None or not self.n or len(self._img_classes) != self.n:
            return {}
        values = np.zeros((self.n, 2, self._cm.shape[0]), np.float64)
        for i, (classes, inter, union) in enumerate(zip(self._img_classes, self._img_inter, self._img_union)):
            values[i, 0, classes] = inter
            values[i, 1, classes] = union
        return {self.name: ("iou", values)}

    def sample_targets(self, samples: Sequence[Any]) -> list[Any]:
        targets = [s.meta.get("segmentation", s.mask) for s in samples]
        missing = next((s for s, t in zip(samples, targets) if t is None), None)
        if missing is not None:
            raise ShiftbenchError("miou needs a label map on every sample (sample.mask or meta['segmentation']); "
                                  f"sample {str(missing.id)!r} has none")
        return targets

    def check_model(self, model: Any) -> None:
        if getattr(model, "class_agnostic", False):
            raise ShiftbenchError(f"miou scores label maps, but {getattr(model, 'name', '?')!r} is a class-agnostic "
                                  "segmenter (foreground probabilities): score it with foreground_iou")
        if self._cm is None:
            raise ShiftbenchError("miou needs the size of the label space: MeanIoU(num_classes=...) "
                                  "(the runner sets it from the model's label space)")

    def compute(self) -> dict[str, float]:
        if self._cm is None or not self.n:
            return {self.name: float("nan")}
        return {self.name: mean_iou(self._cm)}

    def state(self) -> dict[str, Any]:
        if self._cm is None:
            return {}
        iou = iou_from_confusion(self._cm)
        return {"per_class_iou": [None if np.isnan(v) else float(v) for v in iou], "confusion": self._cm.tolist()}


class ForegroundIoU(Metric):
    """Class-agnostic foreground IoU, averaged over images (``foreground_iou``); ``state()`` adds the
    pooled IoU (all pixels together)."""

    name = "foreground_iou"
    task = "segmentation"
    needs = "a foreground mask (sample.mask)"
    higher_is_better = True
    config = ("threshold",)

    def __init__(self, threshold: float = 0.5):
        self.threshold = float(threshold)
        super().__init__()

    def reset(self) -> None:
        self.n = 0
        self._sum: list[float] = []  # exact sum of the per-image IoUs (base.exact_add)
        self._inter = 0
        self._union = 0
        self._ious: list[float] = []  # per image, in data order (the report's bootstrap)

    def update(self, predictions: Sequence[Any], targets: Sequence[Any]) -> None:
        if len(predictions) != len(targets):
            raise ShiftbenchError(f"foreground_iou: {len(predictions)} predictions for {len(targets)} targets")
        for pred, tgt in zip(predictions, targets):
            p = _binary(pred, self.threshold)
            t = np.asarray(tgt).astype(bool) if np.asarray(tgt).dtype.kind != "f" else np.asarray(tgt) >= 0.5
            if p.shape != t.shape:
                raise ShiftbenchError(f"prediction shape {p.shape} does not match target shape {t.shape}")
            iou = foreground_iou(p, t)
            self._sum = exact_add(self._sum, [iou])
            self._ious.append(iou)
            self._inter += int(np.logical_and(p, t).sum())
            self._union += int(np.logical_or(p, t).sum())
            self.n += 1

    def sample_targets(self, samples: Sequence[Any]) -> list[np.ndarray]:
        missing = next((s for s in samples if s.mask is None), None)
        if missing is not None:
            raise ShiftbenchError(f"foreground_iou needs a mask on every sample; sample {str(missing.id)!r} has none")
        return [np.asarray(s.mask) > 0 for s in samples]

    def merge(self, other: "ForegroundIoU") -> "ForegroundIoU":
        self.check_mergeable(other)
        self._sum = exact_add(self._sum, other._sum)
        self._inter += other._inter
        self._union += other._union
        self._ious = self._ious + list(other._ious)
        self.n += other.n
        return self

    def per_sample(self) -> dict[str, tuple[str, np.ndarray]]:
        """``mean`` of the per-image IoUs (the row value averages images; the pooled IoU is ``state()``'s)."""
        if not self.n or len(self._ious) != self.n:
            return {}
        return {self.name: ("mean", np.asarray(self._ious, np.float64))}

    def compute(self) -> dict[str, float]:
        return {self.name: exact_value(self._sum) / self.n if self.n else float("nan")}

    def state(self) -> dict[str, Any]:
        return {"pooled_iou": self._inter / self._union if self._union else None}
