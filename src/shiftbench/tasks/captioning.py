"""Captioning: captions in, the caption and the sample's reference caption per sample; no labels to map."""

from __future__ import annotations

from typing import Any, ClassVar

from ..sample import Sample
from .base import Task

__all__ = ["Captioning"]


class Captioning(Task):
    """Captioners: one string per image, scored against the sample's caption."""

    name: ClassVar[str] = "captioning"
    default_metrics: ClassVar[tuple[str, ...]] = ("text_similarity",)
    record_keys: ClassVar[frozenset[str]] = frozenset({"caption", "reference"})

    def record(self, outputs: list[str], i: int, s: Sample, model, space=None) -> dict[str, Any]:
        return {"caption": outputs[i], "reference": s.caption}
