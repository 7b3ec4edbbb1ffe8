"""Detection: ``Detections`` in, the count and the five best boxes per sample, named in the dataset's space."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..sample import Sample
from .base import Task

__all__ = ["Detection"]


class Detection(Task):
    """Detectors: boxes (and optional masks), scored as COCOeval scores them."""

    name: ClassVar[str] = "detection"
    default_metrics: ClassVar[tuple[str, ...]] = ("box_ap",)
    record_keys: ClassVar[frozenset[str]] = frozenset({"detections", "top"})

    def record(self, outputs: list[Any], i: int, s: Sample, model, space=None) -> dict[str, Any]:
        det = outputs[i]
        order = np.argsort(-det.scores, kind="stable")[:5]
        # after the label plan, detections carry the dataset's labels: name them from that space
        space = space or model.label_space
        names = space.class_names if space else None
        return {"detections": len(det), "top": [
            {"box": [round(float(v), 2) for v in det.boxes[k]], "score": round(float(det.scores[k]), 4),
             "label": int(det.labels[k]), **({"name": names[int(det.labels[k])]} if names else {})}
            for k in order]}
