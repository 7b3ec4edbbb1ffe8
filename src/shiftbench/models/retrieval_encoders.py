"""The encoders of composed image retrieval: the bundled EfficientNet-Lite image encoder and MiniLM text
encoder, a CLIP-style model's two towers as one shared space, and the helpers their users share
(``normalize``, ``torch_threads``).

Below both :mod:`shiftbench.models.retrieval` (the retrievers) and :mod:`shiftbench.models.retrieval_training`
(which trains their learned parts on these encoders' features): neither imports the other through here.
An encoder has a ``key`` (what its features depend on), ``dim`` and ``encode``.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..registry import MODELS
from .efficientnet import EfficientNetLite
from .text_encoders import minilm_encoder

__all__ = ["EfficientNetImageEncoder", "MiniLMTextEncoder", "SharedSpaceEncoder", "normalize", "torch_threads",
           "bundled_image_encoder", "bundled_text_encoder"]

@contextmanager
def torch_threads():
    """Run torch with ``SHIFTBENCH_RETRIEVAL_THREADS`` intra-op threads (default 1), then restore.

    Why 1: on a shared, oversubscribed CPU (2 cores, load 10) torch's spinning worker threads made
    EfficientNet features 3x and combiner training 8x slower with 2 threads than with 1 (measured here).
    Set the variable to 0 to keep torch's own choice on a machine of your own.
    """
    import torch

    wanted = int(os.environ.get("SHIFTBENCH_RETRIEVAL_THREADS", "1"))
    old = torch.get_num_threads()
    if wanted > 0:
        torch.set_num_threads(wanted)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def normalize(x: Any, axis: int = -1) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), float32."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=axis, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


# -- encoders ---------------------------------------------------------------------------------------
class EfficientNetImageEncoder:
    """EfficientNet-Lite pooled penultimate features (bundled weights), unit norm.

    Images are resized (area) to ``size`` x ``size`` and normalised with mean 127 / std 128, as the
    classifier is. 128 px rather than the native 224 keeps a full robustness run within minutes on a CPU.
    """

    def __init__(self, variant: int = 0, size: int = 128, batch_size: int = 64):
        self.variant, self.size, self.batch_size = int(variant), int(size), int(batch_size)
        self.model = EfficientNetLite(self.variant)
        self.key = f"efficientnet_lite{self.variant}@{self.size}"
        self.dim = 1280

    def encode(self, images: Sequence[np.ndarray]) -> np.ndarray:
        import cv2
        import torch

        if not len(images):
            return np.zeros((0, self.dim), np.float32)
        out = []
        for start in range(0, len(images), self.batch_size):
            batch = [im if im.shape[:2] == (self.size, self.size)
                     else cv2.resize(im, (self.size, self.size), interpolation=cv2.INTER_AREA)
                     for im in images[start:start + self.batch_size]]
            x = (np.stack(batch).astype(np.float32) - 127.0) / 128.0
            with torch_threads(), torch.inference_mode():
                f = self.model.module.extract_features(torch.from_numpy(x.transpose(0, 3, 1, 2).copy()))
                out.append(f.mean(dim=(2, 3)).numpy())
        return normalize(np.concatenate(out))


class MiniLMTextEncoder:
    """The bundled all-MiniLM-L6-v2 sentence encoder (384-d), unit norm."""

    key = "minilm"
    dim = 384

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not len(texts):
            return np.zeros((0, self.dim), np.float32)
        with torch_threads():
            return normalize(minilm_encoder()(list(texts)))


class SharedSpaceEncoder:
    """Both towers of a model with ``encode_images`` / ``encode_texts`` (a CLIP adapter): one space."""

    def __init__(self, model: Any):
        if isinstance(model, str):
            name = model
            model = MODELS.create(model)
        else:
            name = getattr(model, "name", type(model).__name__)
        if not (hasattr(model, "encode_images") and hasattr(model, "encode_texts")):
            raise ShiftbenchError(f"encoder {name!r} needs encode_images and encode_texts (a CLIP-style model)")
        self.model, self.key = model, f"shared:{name}"

    def encode(self, images: Sequence[np.ndarray]) -> np.ndarray:
        return normalize(self.model.encode_images(list(images)))

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        return normalize(self.model.encode_texts(list(texts)))


@lru_cache(maxsize=4)
def bundled_image_encoder(variant: int, size: int) -> EfficientNetImageEncoder:
    """The shared EfficientNet-Lite image encoder (one per variant and size per process)."""
    return EfficientNetImageEncoder(variant, size)


@lru_cache(maxsize=1)
def bundled_text_encoder() -> MiniLMTextEncoder:
    """The shared MiniLM text encoder (one per process)."""
    return MiniLMTextEncoder()
