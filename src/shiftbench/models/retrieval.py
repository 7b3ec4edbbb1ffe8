"""Composed image retrieval: the `ComposedRetriever` protocol, bundled encoders and four retrievers.

A composed retriever maps (reference image, modification text) to a query vector and scores gallery
images against it::

    q = model.compose(model.image_features(ref_images), model.text_features(texts))   # (N, D), unit norm
    g = model.gallery_features(gallery_images)                                        # (G, D), unit norm
    scores = model.similarity(q, g)                                                   # (N, G)

Gallery features depend only on the image encoder (``model.gallery_key``), so the runner computes them
once per encoder and condition and shares them across retrievers.

Retrievers (registered with ``task="retrieval"``):

- ``image_only``: the reference image's features; the text is ignored.
- ``text_only``: the text mapped into the image space by a learned linear projection.
- ``sum_fusion``: normalise(image + text). For encoders that share one space (a CLIP adapter:
  ``encoder="hf:..."`` or any model with ``encode_images`` / ``encode_texts``) the text goes in as is;
  with the bundled encoders, whose spaces differ, the text first goes through ``text_only``'s projection.
- ``combiner``: a learned fusion in the style of CLIP4CIR on frozen encoders: projected image and text
  features are concatenated, a gate ``lambda`` mixes the (projected) text and the image, and an MLP adds
  a residual; output in the image space.

Bundled encoders (:mod:`shiftbench.models.retrieval_encoders`, re-exported here): EfficientNet-Lite0 pooled
penultimate features (1280-d, input 128 px by default) and the all-MiniLM-L6-v2 sentence encoder (384-d).
The learned parts load from a safetensors checkpoint with a JSON config beside it (shipped in the package;
``shiftbench train-retriever`` makes a new one). Imports go one way: this module uses
:mod:`shiftbench.models.retrieval_training` (the combiner's module, training on first use), never the reverse.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..resize import check_shorter
from .retrieval_encoders import (
    EfficientNetImageEncoder, MiniLMTextEncoder, SharedSpaceEncoder, bundled_image_encoder, bundled_text_encoder,
    normalize, torch_threads,
)
from .retrieval_training import CombinerNet, train_retrievers

__all__ = [
    "ComposedRetriever", "ImageOnly", "TextOnly", "SumFusion", "Combiner", "EfficientNetImageEncoder",
    "MiniLMTextEncoder", "SharedSpaceEncoder", "normalize", "torch_threads", "default_checkpoint", "load_checkpoint",
    "RETRIEVERS", "bundled_image_encoder", "bundled_text_encoder",
]

RETRIEVERS = ("image_only", "text_only", "sum_fusion", "combiner")
CHECKPOINT_NAME = "cir_combiner"


def _encoders(image_encoder: Any, text_encoder: Any, image_size: int) -> tuple[Any, Any]:
    """Resolve encoder arguments: "efficientnet_lite0" / "minilm" (shared instances) or objects with
    ``key``, ``dim`` and ``encode``."""
    if image_encoder is None or isinstance(image_encoder, str):
        name = image_encoder or "efficientnet_lite0"
        variants = {f"efficientnet_lite{v}": v for v in (0, 1, 2)}
        if name not in variants:
            raise ShiftbenchError(f"image_encoder must be one of {', '.join(variants)} or an encoder object, got {name!r}")
        # a size x size input, within the one limit on image sizes (resize.LIMIT)
        image_encoder = bundled_image_encoder(variants[name], check_shorter(image_size, "image_size"))
    if text_encoder is None or text_encoder == "minilm":
        text_encoder = bundled_text_encoder()
    elif isinstance(text_encoder, str):
        raise ShiftbenchError(f"text_encoder must be 'minilm' or an encoder object, got {text_encoder!r}")
    for role, enc in (("image", image_encoder), ("text", text_encoder)):
        if not all(hasattr(enc, a) for a in ("key", "encode")):
            raise ShiftbenchError(f"{role} encoder {enc!r} needs a key and an encode method")
    return image_encoder, text_encoder


# -- checkpoints ------------------------------------------------------------------------------------
def packaged_checkpoint() -> Path:
    """The checkpoint shipped inside the package (may be absent in a development tree)."""
    from importlib import resources

    return Path(str(resources.files("shiftbench").joinpath(f"data/retrieval/{CHECKPOINT_NAME}.safetensors")))


def cache_dir() -> Path:
    return Path(os.environ.get("SHIFTBENCH_CACHE", Path.home() / ".cache" / "shiftbench")) / "retrieval"


def default_checkpoint() -> Path:
    """The packaged checkpoint if present, else the one ``train-retriever`` caches in the user cache."""
    packaged = packaged_checkpoint()
    return packaged if packaged.exists() else cache_dir() / f"{CHECKPOINT_NAME}.safetensors"


def load_checkpoint(path: Any, image_key: str, text_key: str, train_if_missing: bool = True) -> tuple[dict, dict]:
    """(tensors as float32 numpy arrays, config) of a retriever checkpoint; checks its encoders.

    With ``train_if_missing`` and the default path, a missing checkpoint is trained now (a few minutes
    on a CPU) and cached, as ``shiftbench train-retriever`` would.
    """
    from safetensors.numpy import load_file

    default = path is None
    path = Path(path) if path is not None else default_checkpoint()
    if not path.exists():
        if not (default and train_if_missing):
            raise ShiftbenchError(f"{path}: retriever checkpoint not found (make one with shiftbench train-retriever)")
        import sys

        print(f"no retriever checkpoint at {path}: training one now (a few minutes on a CPU)", file=sys.stderr)
        train_retrievers(path, log=lambda message: print(message, file=sys.stderr),
                         command="shiftbench evaluate (trained on first use)")
    config_path = path.with_suffix(".json")
    if not config_path.exists():
        raise ShiftbenchError(f"{config_path}: the checkpoint's config is missing")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if (config.get("image_encoder"), config.get("text_encoder")) != (image_key, text_key):
        raise ShiftbenchError(
            f"{path}: trained for encoders {config.get('image_encoder')!r} + {config.get('text_encoder')!r}, "
            f"not {image_key!r} + {text_key!r}"
        )
    tensors = {k: v.astype(np.float32) for k, v in load_file(str(path)).items()}
    return tensors, config


# -- the protocol -----------------------------------------------------------------------------------
class ComposedRetriever:
    """Protocol: ``image_features``, ``text_features``, ``compose``, ``similarity`` (+ ``gallery_features``).

    ``gallery_key`` names what the gallery features depend on (the image encoder), so the runner can
    compute them once and share them across retrievers.
    """

    task = "retrieval"
    kind = "composed_retriever"
    name = "retriever"
    device = "cpu"
    dtype = "float32"
    label_space = None
    preprocess = None

    def __init__(self, image_encoder: Any = None, text_encoder: Any = None, image_size: int = 128):
        self.image_encoder, self.text_encoder = _encoders(image_encoder, text_encoder, image_size)

    @property
    def gallery_key(self) -> str:
        return self.image_encoder.key

    @property
    def text_key(self) -> str:
        return self.text_encoder.key

    def image_features(self, images: Sequence[np.ndarray]) -> np.ndarray:
        return normalize(self.image_encoder.encode(list(images)))

    def text_features(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise ShiftbenchError("text_features takes a list of texts, not one string")
        return normalize(self.text_encoder.encode(list(texts)))

    def gallery_features(self, images: Sequence[np.ndarray]) -> np.ndarray:
        return self.image_features(images)

    def compose(self, image_features: np.ndarray, text_features: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def similarity(self, queries: np.ndarray, gallery: np.ndarray) -> np.ndarray:
        """Cosine similarity (Q, G) of unit-norm query and gallery features."""
        return np.asarray(queries, np.float32) @ np.asarray(gallery, np.float32).T

    def _check_pair(self, image_features: np.ndarray, text_features: np.ndarray) -> None:
        if len(image_features) != len(text_features):
            raise ShiftbenchError(f"{self.name}: {len(image_features)} images but {len(text_features)} texts")

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "task": self.task, "kind": self.kind, "image_encoder": self.image_encoder.key,
                "text_encoder": self.text_encoder.key}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.image_encoder.key} + {self.text_encoder.key})"


class ImageOnly(ComposedRetriever):
    """The reference image's features alone (the text is ignored)."""

    name = "image_only"

    def compose(self, image_features: np.ndarray, text_features: np.ndarray) -> np.ndarray:
        self._check_pair(image_features, text_features)
        return normalize(image_features)


class TextOnly(ComposedRetriever):
    """The modification text, mapped into the image space by a learned linear projection."""

    name = "text_only"

    def __init__(self, checkpoint: Any = None, image_encoder: Any = None, text_encoder: Any = None,
                 image_size: int = 128, weights: dict[str, np.ndarray] | None = None):
        super().__init__(image_encoder, text_encoder, image_size)
        if weights is None:
            weights, self.config = load_checkpoint(checkpoint, self.gallery_key, self.text_key)
        else:
            self.config = {}
        try:
            self.weight, self.bias = weights["text_only.weight"], weights["text_only.bias"]
        except KeyError:
            raise ShiftbenchError(f"{self.name}: the checkpoint has no text_only projection") from None

    def project(self, text_features: np.ndarray) -> np.ndarray:
        return normalize(np.asarray(text_features, np.float32) @ self.weight.T + self.bias)

    def compose(self, image_features: np.ndarray, text_features: np.ndarray) -> np.ndarray:
        self._check_pair(image_features, text_features)
        return self.project(text_features)


class SumFusion(ComposedRetriever):
    """normalise(image + text) in one space: a shared-space encoder's, or the bundled encoders' with the
    text brought into the image space by ``text_only``'s projection."""

    name = "sum_fusion"

    def __init__(self, encoder: Any = None, checkpoint: Any = None, image_encoder: Any = None,
                 text_encoder: Any = None, image_size: int = 128, weights: dict[str, np.ndarray] | None = None):
        self.projection: TextOnly | None = None
        if encoder is not None:  # one model with both towers: the spaces are shared by construction
            shared = encoder if isinstance(encoder, SharedSpaceEncoder) else SharedSpaceEncoder(encoder)
            self.image_encoder = shared
            self.text_encoder = _SharedText(shared)
            return
        self.projection = TextOnly(checkpoint, image_encoder, text_encoder, image_size, weights)
        self.image_encoder, self.text_encoder = self.projection.image_encoder, self.projection.text_encoder

    def compose(self, image_features: np.ndarray, text_features: np.ndarray) -> np.ndarray:
        self._check_pair(image_features, text_features)
        text = self.projection.project(text_features) if self.projection else normalize(text_features)
        if text.shape[1] != np.shape(image_features)[1]:
            raise ShiftbenchError(f"sum_fusion: image features are {np.shape(image_features)[1]}-d but text "
                                  f"features {text.shape[1]}-d; the encoders must share one space")
        return normalize(normalize(image_features) + text)


class _SharedText:
    def __init__(self, shared: SharedSpaceEncoder):
        self.shared, self.key = shared, shared.key

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self.shared.encode_text(texts)


class Combiner(ComposedRetriever):
    """CLIP4CIR-style learned fusion on frozen encoders (weights from a safetensors checkpoint).

    ``hi = relu(W_i x)``, ``ht = relu(W_t t)``, ``h = [hi, ht]``; gate ``lambda = sigmoid(g(h))``;
    output ``normalise(mlp(h) + lambda * normalise(A t) + (1 - lambda) * x)`` in the image space.
    """

    name = "combiner"

    def __init__(self, checkpoint: Any = None, image_encoder: Any = None, text_encoder: Any = None,
                 image_size: int = 128, weights: dict[str, np.ndarray] | None = None, config: dict | None = None):
        super().__init__(image_encoder, text_encoder, image_size)
        if weights is None:
            weights, config = load_checkpoint(checkpoint, self.gallery_key, self.text_key)
        self.config = dict(config or {})
        self.net = CombinerNet.from_weights(weights)

    def compose(self, image_features: np.ndarray, text_features: np.ndarray) -> np.ndarray:
        self._check_pair(image_features, text_features)
        import torch

        with torch_threads(), torch.inference_mode():
            out = self.net(torch.from_numpy(normalize(image_features)), torch.from_numpy(normalize(text_features)))
        return normalize(out.numpy())
