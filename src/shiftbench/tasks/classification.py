"""Classification: logits in, top-1 / top-5 / confidence per sample; labels mapped into the model's space."""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np

from ..metrics.stability import sequence_of
from ..models.base import as_image_list, check_outputs
from ..sample import Sample
from .base import Task

__all__ = ["Classification"]


class Classification(Task):
    """Classifiers and zero-shot classifiers: ``predict_logits`` (N, C), scored by top-k and calibration."""

    name: ClassVar[str] = "classification"
    default_metrics: ClassVar[tuple[str, ...]] = ("top1", "ece")
    record_keys: ClassVar[frozenset[str]] = frozenset({"label", "pred", "pred_name", "confidence", "correct", "top5"})

    def predict(self, model: Any, samples: Sequence[Sample]) -> np.ndarray:
        """Logits of each sample's image, or, for the frames of perturbation sequences (``Sample.frames``), of every
        frame in order: (N x T, C), predicted ``len(samples)`` frames at a time (the batch's size in images)."""
        if not samples or samples[0].frames is None:
            return self.predict_images(model, [s.image for s in samples])
        frames = [f for s in samples for f in _frames(s)]
        size = len(samples)
        return np.concatenate([self.predict_images(model, frames[k:k + size]) for k in range(0, len(frames), size)])

    def predict_images(self, model: Any, images: Sequence[Any]) -> np.ndarray:
        """``predict_logits``: float32 (N, C), C the model's label space when it has one."""
        images = as_image_list(images)
        out = model.predict_logits(images)
        space = getattr(model, "label_space", None)
        check_outputs(out, getattr(model, "name", type(model).__name__),
                      num_classes=space.num_classes if space else None, batch_size=len(images))
        return out

    def record(self, logits: np.ndarray, i: int, s: Sample, model, space=None) -> dict[str, Any]:
        """Sample ``i``'s record; for a perturbation sequence, of its last frame (what its thumbnail shows), with
        every frame's top-1 in ``frame_preds``."""
        seq = sequence_of(s)
        if seq is not None:
            t = seq[0]  # every sequence of a condition has the same number of frames
            block = logits[i * t:(i + 1) * t]
            rec = self.record(block, t - 1, s.replace(frames=None, meta={}), model, space)
            rec["frame_preds"] = [int(k) for k in np.argsort(-block, axis=1, kind="stable")[:, 0]]
            return rec
        z = logits[i].astype(np.float64)
        p = np.exp(z - z.max())
        p /= p.sum()
        top = np.argsort(-p, kind="stable")[:5]
        names = (space or model.label_space).class_names  # the plan's space: a class subset, a decision map's
        return {"label": s.label, "pred": int(top[0]), "pred_name": names[int(top[0])],
                "confidence": round(float(p[top[0]]), 6), "correct": bool(int(top[0]) == s.label),
                "top5": [int(t) for t in top]}


def _frames(sample: Sample) -> list[np.ndarray]:
    return list(sample.frames) if sample.frames is not None else [sample.image]
