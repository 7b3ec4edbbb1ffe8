"""Caption similarity: cosine between text embeddings of two captions (of the clean and the shifted image).

The encoder is a model with ``encode_texts``: by default the registered ``minilm`` (the bundled
all-MiniLM-L6-v2, :mod:`shiftbench.models.text_encoders`); a zero-shot model's text tower (e.g. an ``hf:``
CLIP) can be given instead, as ObjectCompose scores captions with CLIP.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..registry import MODELS
from .base import Metric, exact_add, exact_value

__all__ = ["cosine_similarity", "TextSimilarity"]

Encoder = Callable[[Sequence[str]], np.ndarray]


def cosine_similarity(a: Any, b: Any) -> np.ndarray:
    """Row-wise cosine of two (N, D) arrays (zero vectors give 0)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 2:
        raise ShiftbenchError(f"embeddings must be two (N, D) arrays of one shape, got {a.shape} and {b.shape}")
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = (a * b).sum(axis=1)
    return np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)


class TextSimilarity(Metric):
    """Mean cosine similarity between predicted and reference captions (``text_similarity``).

    ``encoder``: a registered model's name (``"minilm"``, the default, or ``"hf:openai/clip-vit-base-patch32"``),
    a model with ``encode_texts`` (a zero-shot CLIP), or any callable list[str] -> (N, D) array.
    """

    name = "text_similarity"
    task = "captioning"
    needs = "a reference caption (sample.caption or meta['reference_caption'])"
    # the encoder and what names it (a model object or a callable is no data): never saved, set by the
    # constructor; two parts merge only with the same one, as cosines of two encoders do not add up
    resources = ("_encoder", "encoder_spec")
    config = ("encoder_spec",)
    higher_is_better = True

    def __init__(self, encoder: Any = "minilm"):
        self.encoder_spec = encoder
        self._encoder: Encoder | None = None
        super().__init__()

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if self._encoder is None:
            spec = self.encoder_spec
            if isinstance(spec, str):  # a registered model: "minilm" (default), "hf:...", ...
                model = MODELS.create(spec)
                if not hasattr(model, "encode_texts"):
                    raise ShiftbenchError(f"text_similarity encoder {spec!r} has no text encoder (encode_texts)")
                self._encoder = model.encode_texts
            elif hasattr(spec, "encode_texts"):
                self._encoder = spec.encode_texts
            elif callable(spec):
                self._encoder = spec
            else:
                raise ShiftbenchError(f"text_similarity encoder must be 'minilm', a model or a callable, got {spec!r}")
        return self._encoder(list(texts))

    def reset(self) -> None:
        self.n = 0
        self._sum: list[float] = []  # exact sum of the cosines (base.exact_add): merges round like one pass
        self._cosines: list[float] = []  # per caption, in data order (the report's bootstrap)

    def update(self, predictions: Sequence[str], targets: Sequence[str]) -> None:
        if isinstance(predictions, str) or isinstance(targets, str):
            raise ShiftbenchError("text_similarity takes lists of captions, not single strings")
        if len(predictions) != len(targets):
            raise ShiftbenchError(f"text_similarity: {len(predictions)} captions for {len(targets)} references")
        if not len(predictions):
            return
        embeddings = self._encode([str(t) for t in predictions] + [str(t) for t in targets])
        n = len(predictions)
        sims = cosine_similarity(embeddings[:n], embeddings[n:])
        self._sum = exact_add(self._sum, sims.tolist())
        self._cosines.extend(sims.tolist())
        self.n += n

    def sample_targets(self, samples: Sequence[Any]) -> list[str]:
        references = [s.meta.get("reference_caption", s.caption) for s in samples]
        missing = next((s for s, r in zip(samples, references) if r is None), None)
        if missing is not None:
            raise ShiftbenchError("text_similarity needs a reference caption on every sample (sample.caption or "
                                  f"meta['reference_caption']); sample {str(missing.id)!r} has none")
        return references

    def merge(self, other: "TextSimilarity") -> "TextSimilarity":
        self.check_mergeable(other)
        self._sum = exact_add(self._sum, other._sum)
        self._cosines = self._cosines + list(other._cosines)
        self.n += other.n
        return self

    def per_sample(self) -> dict[str, tuple[str, np.ndarray]]:
        """``mean`` of the per-caption cosines."""
        if not self.n or len(self._cosines) != self.n:
            return {}
        return {self.name: ("mean", np.asarray(self._cosines, np.float64))}

    def compute(self) -> dict[str, float]:
        return {self.name: exact_value(self._sum) / self.n if self.n else float("nan")}
