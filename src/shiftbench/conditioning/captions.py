"""Scene captions for caption prompts: a ``template`` captioner (class name + scene) and ``blip2`` (transformers).

A captioner never returns a placeholder: when it cannot caption an image it raises.

>>> import numpy as np
>>> from shiftbench.sample import Sample
>>> s = Sample(image=np.zeros((8, 8, 3), np.uint8), class_name="zebra", meta={"scene_id": "meadow"})
>>> TemplateCaptioner()([s])
['a photo of a zebra in a green meadow']
"""

from __future__ import annotations

from typing import Any, Sequence

from ..datasets import objects
from ..errors import ShiftbenchError
from ..models.hf import HFCaptioner
from ..sample import Sample

__all__ = ["TemplateCaptioner", "Blip2Captioner", "create_captioner", "CAPTIONERS"]


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


class TemplateCaptioner:
    """``a photo of a {class name} {scene phrase}``: the scene phrase comes from the objects dataset's scene
    table when the sample names its scene (``meta['scene_id']``), else the phrase is left out."""

    name = "template"

    def __init__(self, template: str = "a photo of {article} {class_name}{scene}"):
        if "{class_name}" not in template:
            raise ShiftbenchError("a caption template needs a {class_name} field")
        self.template = template

    def caption(self, sample: Sample) -> str:
        name = (sample.class_name or "").split(",")[0].strip()
        if not name:
            raise ShiftbenchError(f"sample {sample.id}: the template captioner needs a class name")
        scene = ""
        scene_id = (sample.meta or {}).get("scene_id")
        if scene_id:
            try:
                scene = " " + objects.scene_info(scene_id).phrase
            except ShiftbenchError:
                scene = ""
        return self.template.format(article=_article(name), class_name=name, scene=scene)

    def __call__(self, samples: Sequence[Sample]) -> list[str]:
        return [self.caption(s) for s in samples]


class Blip2Captioner:
    """BLIP-2 (or any transformers image-to-text model) from a hub id / local folder, or a ready
    ``shiftbench.models.hf.HFCaptioner``. Empty captions are errors, not placeholders."""

    name = "blip2"

    def __init__(self, model: Any = "Salesforce/blip2-opt-2.7b", device: str = "cpu", dtype: str = "float32",
                 max_new_tokens: int = 30):
        self.source, self.device, self.dtype, self.max_new_tokens = model, device, dtype, max_new_tokens
        self._model = None if isinstance(model, str) else model

    def load(self) -> None:
        """Load the captioning model now (a dry run's check)."""
        self._load()

    def _load(self):
        if self._model is None:
            try:
                self._model = HFCaptioner(self.source, device=self.device, dtype=self.dtype,
                                          max_new_tokens=self.max_new_tokens)
            except (OSError, ValueError) as exc:
                raise ShiftbenchError(f"cannot load captioner {self.source!r}: {str(exc).splitlines()[0]}") from None
        return self._model

    def __call__(self, samples: Sequence[Sample]) -> list[str]:
        model = self._load()
        texts = model.predict([s.image for s in samples])
        for s, t in zip(samples, texts):
            if not isinstance(t, str) or not t.strip():
                raise ShiftbenchError(f"sample {s.id}: the captioner {self.source!r} returned an empty caption")
        return [t.strip() for t in texts]


CAPTIONERS = {"template": TemplateCaptioner, "blip2": Blip2Captioner}


def create_captioner(name: Any = "template", **kwargs: Any) -> Any:
    """A captioner by name (``template``, ``blip2``) or a callable ``samples -> list[str]`` passed through."""
    if callable(name) and not isinstance(name, str):
        return name
    if name not in CAPTIONERS:
        raise ShiftbenchError(f"unknown captioner {name!r}; choose from {', '.join(CAPTIONERS)}")
    return CAPTIONERS[name](**kwargs)
