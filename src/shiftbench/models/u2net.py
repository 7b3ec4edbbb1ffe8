"""U2-Net-p class-agnostic salient-object segmenter (ONNX, onnxruntime), shipped with shiftbench.

``u2netp.onnx`` lies in shiftbench's package data (``data/u2netp/``, Apache-2.0 weights; source,
licences and SHA-256 in ``data/u2netp/SOURCES.md``), so the README's install makes ``mask: u2netp``
work; ``$SHIFTBENCH_U2NETP`` or ``path=`` point at another copy. Preprocessing follows the U2-Net
convention: 320x320 stretch, divide by the image maximum, ImageNet mean/std. The model's first output
is the fused side output after a sigmoid: a foreground probability, resized back to the input size.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ShiftbenchError
from .base import LabelSpace, Preprocess, Segmenter, as_image_list, check_outputs

__all__ = ["U2NetP", "find_u2netp"]

ENV_VAR = "SHIFTBENCH_U2NETP"
SHIPPED = Path(__file__).resolve().parent.parent / "data" / "u2netp" / "u2netp.onnx"


def find_u2netp() -> Path:
    """Location of ``u2netp.onnx``: ``$SHIFTBENCH_U2NETP`` when set (a user's copy), else the shipped file."""
    if os.environ.get(ENV_VAR):
        path = Path(os.environ[ENV_VAR])
        if not path.is_file():
            raise ShiftbenchError(f"{ENV_VAR}={path} is not a file")
        return path
    if not SHIPPED.is_file():  # only a damaged install gets here: the file is package data
        raise ShiftbenchError(f"{SHIPPED} is missing: reinstall shiftbench (or set {ENV_VAR} to a u2netp.onnx)")
    return SHIPPED


class U2NetP(Segmenter):
    """U2-Net-p salient-object segmenter: foreground probability per pixel (class-agnostic)."""

    class_agnostic = True

    def __init__(self, path: str | None = None, device: str = "cpu", dtype: str = "float32", threads: int | None = None):
        if device != "cpu" or dtype != "float32":
            raise ShiftbenchError("u2netp runs on onnxruntime's CPU provider in float32 only")
        import onnxruntime as ort

        self.name = "u2netp"
        self.path = str(path or find_u2netp())
        if not Path(self.path).is_file():
            raise ShiftbenchError(f"u2netp: {self.path} is not a file")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
        self._session = ort.InferenceSession(self.path, options, providers=["CPUExecutionProvider"])
        inp = self._session.get_inputs()[0]
        self._input_name = inp.name
        size = (int(inp.shape[2]), int(inp.shape[3]))  # the graph is exported for a fixed 1x3x320x320
        self.label_space = LabelSpace.foreground()
        self.preprocess = Preprocess(
            size=size, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), resize="exact",
            interpolation="lanczos", scale_by_max=True, recipe="tf",
        )

    def weight_files(self) -> list[str]:
        """The ONNX graph this model loaded (hashed into a run's identity)."""
        return [self.path]

    def predict(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Foreground probability, float32 (H, W) in [0, 1], at each input image's size."""
        import cv2

        out = []
        for image in as_image_list(images):
            x = self.preprocess([image])
            # the exported graph has a fixed batch of 1, so images go through one by one
            prob = self._session.run(None, {self._input_name: x})[0][0, 0]
            check_outputs(prob, self.name)
            h, w = image.shape[:2]
            prob = cv2.resize(prob.astype(np.float32), (w, h), interpolation=cv2.INTER_LINEAR)
            out.append(np.clip(prob, 0.0, 1.0))
        return out
