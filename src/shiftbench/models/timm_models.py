"""timm image classifiers (``timm:NAME``): a timm model name, ``hf-hub:org/repo`` or a local folder.

``timm:resnet50.a1_in1k`` loads pretrained weights through timm (hub cache; ``HF_HUB_OFFLINE=1``
forbids downloads); ``timm:/path/to/folder`` loads a folder holding timm's ``config.json`` and
``model.safetensors`` (``local-dir:``). Preprocessing comes from the model's own pretrained config
(``timm.data.resolve_model_data_config``): input size, crop_pct, interpolation, mean/std.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from ..errors import ShiftbenchError
from .base import LabelSpace, Preprocess, TorchClassifier

__all__ = ["TimmClassifier", "create", "preprocess_from_data_config", "label_space_from_config"]


def preprocess_from_data_config(config: Mapping[str, Any]) -> Preprocess:
    """timm data config (``input_size``, ``crop_pct``, ``crop_mode``, ``interpolation``, mean/std) -> Preprocess."""
    _, height, width = config["input_size"]
    crop_mode = config.get("crop_mode", "center")
    if crop_mode not in ("center", "squash"):
        raise ShiftbenchError(f"timm crop_mode {crop_mode!r} is not supported (center or squash)")
    interpolation = config.get("interpolation", "bicubic")
    if interpolation not in ("bicubic", "bilinear", "nearest", "lanczos", "area"):
        interpolation = "bicubic"
    return Preprocess(
        size=(height, width), mean=tuple(config["mean"]), std=tuple(config["std"]),
        resize="exact" if crop_mode == "squash" else "shorter",
        crop_fraction=float(config.get("crop_pct", 0.875) or 1.0), interpolation=interpolation, value_range=1.0,
    )


def label_space_from_config(num_classes: int, pretrained_cfg: Mapping[str, Any] | None, name: str) -> LabelSpace:
    """The config's ``label_names`` (a built-in space when they are its names); ImageNet-1k when the
    pretrained tag says the head was trained on it (``*in1k``, ``label_type: imagenet-1k``); else
    numbered classes that only a ``label_map`` can tie to a dataset. Never decided by the class count alone."""
    from ..labelspace import recognize

    cfg = dict(pretrained_cfg or {})
    names = cfg.get("label_names")
    if names and len(names) == num_classes:
        return recognize([str(n) for n in names], str(cfg.get("label_space", name)))
    tag = str(cfg.get("tag") or "")
    if num_classes == 1000 and (tag.endswith("in1k") or cfg.get("label_type") in ("imagenet", "imagenet-1k")):
        return LabelSpace.imagenet1k()
    return LabelSpace.numbered(name, num_classes)


class TimmClassifier(TorchClassifier):
    """A timm classifier (or any torch module with a timm-style data config)."""

    def __init__(self, module: Any, data_config: Mapping[str, Any], name: str, label_space: LabelSpace | None = None,
                 device: str = "cpu", dtype: str = "float32"):
        self.name = name
        self.preprocess = preprocess_from_data_config(data_config)
        num_classes = int(getattr(module, "num_classes", 0) or 0)
        if label_space is None:
            if not num_classes:
                raise ShiftbenchError(f"model {name!r} has no classification head (num_classes=0)")
            label_space = label_space_from_config(num_classes, getattr(module, "pretrained_cfg", None), name)
        self.label_space = label_space
        self._setup(module, device, dtype)


def create(source: str, device: str = "cpu", dtype: str = "float32", pretrained: bool = True,
           **model_kwargs: Any) -> TimmClassifier:
    """``timm:NAME`` factory: NAME is a timm model name, ``hf-hub:org/repo`` or a local folder."""
    try:
        import timm
        import timm.data
    except ImportError as exc:
        from ..install import install_command

        raise ShiftbenchError(f"timm: models need timm (and torchvision): {install_command('timm')} ({exc})") from None
    if not source:
        raise ShiftbenchError("timm: needs a model name or folder, e.g. timm:resnet50.a1_in1k")
    name = source
    if os.path.isdir(source):
        name = f"local-dir:{source}"
    try:
        module = timm.create_model(name, pretrained=pretrained, **model_kwargs)
    except RuntimeError as exc:
        raise ShiftbenchError(f"timm cannot create {source!r}: {str(exc).splitlines()[0]}") from None
    data_config = timm.data.resolve_model_data_config(module)
    return TimmClassifier(module, data_config, f"timm:{source}", device=device, dtype=dtype)
