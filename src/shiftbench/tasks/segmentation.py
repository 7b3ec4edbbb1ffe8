"""Segmentation: label maps (or foreground probabilities) in, foreground fraction and IoU per sample."""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np

from ..models.base import as_image_list, check_outputs
from ..sample import Sample
from .base import Task

__all__ = ["Segmentation"]


class Segmentation(Task):
    """Semantic segmenters (label maps, scored by ``miou``) and class-agnostic ones (foreground probabilities,
    scored by ``foreground_iou``)."""

    name: ClassVar[str] = "segmentation"
    default_metrics: ClassVar[tuple[str, ...]] = ("miou",)
    agnostic_metrics: ClassVar[tuple[str, ...]] = ("foreground_iou",)
    record_keys: ClassVar[frozenset[str]] = frozenset({"foreground_fraction"})  # and "iou" where the sample has a mask

    def predict_images(self, model: Any, images: Sequence[Any]) -> list[np.ndarray]:
        """float32 (H, W) foreground probabilities of a class-agnostic segmenter (``predict``), int64 (H, W)
        label maps of a semantic one (``predict_masks``)."""
        images = as_image_list(images)
        out = model.predict(images) if getattr(model, "class_agnostic", False) else model.predict_masks(images)
        out = list(out)
        check_outputs(out, getattr(model, "name", type(model).__name__), batch_size=len(images))
        return out

    def record(self, outputs: list[np.ndarray], i: int, s: Sample, model, space=None) -> dict[str, Any]:
        out = np.asarray(outputs[i])
        pred = out >= 0.5 if out.dtype.kind == "f" else out > 0  # probabilities or label maps
        record: dict[str, Any] = {"foreground_fraction": round(float(pred.mean()), 6)}
        if s.mask is not None:
            t = np.asarray(s.mask) > 0
            union = np.logical_or(t, pred).sum()
            record["iou"] = round(float(np.logical_and(t, pred).sum() / union), 6) if union else 1.0
        return record

    def metrics_for(self, model: Any) -> tuple[str, ...]:
        return self.agnostic_metrics if getattr(model, "class_agnostic", False) else self.default_metrics
