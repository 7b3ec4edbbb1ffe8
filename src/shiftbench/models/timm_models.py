"""timm image classifiers (``timm:NAME``): a timm model name, ``hf-hub:org/repo`` or a local folder.

``timm:resnet50.a1_in1k`` loads pretrained weights through timm (hub cache; ``HF_HUB_OFFLINE=1``
forbids downloads); ``timm:/path/to/folder`` loads a folder holding timm's ``config.json`` and
``model.safetensors`` (``local-dir:``). Preprocessing comes from the model's own pretrained config
(``timm.data.resolve_model_data_config``): input size, crop_pct, interpolation, mean/std.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping

from ..errors import ShiftbenchError
from ..install import install_command
from ..labelspace import recognize
from .base import LabelSpace, Preprocess, TorchClassifier

__all__ = ["TimmClassifier", "create", "preprocess_from_data_config", "label_space_from_config"]


# timm's interpolation names -> shiftbench.resize's ("box" is Pillow's BOX filter, "area" here)
_TIMM_INTERPOLATIONS = {"bicubic": "bicubic", "bilinear": "bilinear", "nearest": "nearest", "lanczos": "lanczos",
                        "hamming": "hamming", "box": "area"}


def preprocess_from_data_config(config: Mapping[str, Any]) -> Preprocess:
    """timm data config (``input_size``, ``crop_pct``, ``crop_mode``, ``interpolation``, mean/std) -> the
    :class:`Preprocess` that gives the tensor of ``timm.data.create_transform(**config)`` (its eval transform):
    ``center`` resizes to ``floor(size / crop_pct)`` (the shorter side; timm's ResizeKeepRatio for non-square
    inputs) then centre-crops; ``squash`` stretches to ``floor(size / crop_pct)`` per axis then centre-crops."""
    _, height, width = config["input_size"]
    crop_mode = config.get("crop_mode") or "center"
    if crop_mode not in ("center", "squash"):
        raise ShiftbenchError(f"timm crop_mode {crop_mode!r} is not supported (center or squash)")
    interpolation = config.get("interpolation") or "bilinear"
    if interpolation not in _TIMM_INTERPOLATIONS:
        raise ShiftbenchError(f"timm interpolation {interpolation!r} is not supported "
                              f"({', '.join(_TIMM_INTERPOLATIONS)})")
    crop_pct = float(config.get("crop_pct") or 0.875)
    squash = (int(math.floor(height / crop_pct)), int(math.floor(width / crop_pct)))
    return Preprocess(
        size=(height, width), mean=tuple(config["mean"]), std=tuple(config["std"]),
        resize="exact" if crop_mode == "squash" else "shorter", resize_size=squash if crop_mode == "squash" else None,
        crop_fraction=crop_pct, interpolation=_TIMM_INTERPOLATIONS[interpolation], value_range=1.0,
    )


def label_space_from_config(num_classes: int, pretrained_cfg: Mapping[str, Any] | None, name: str) -> LabelSpace:
    """The config's ``label_names`` (a built-in space when they are its names); ImageNet-1k when the
    pretrained tag says the head was trained on it (``*in1k``, ``label_type: imagenet-1k``); else
    numbered classes that only a ``label_map`` can tie to a dataset. Never decided by the class count alone."""
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

    weights_folder: str | None = None  # the local folder the weights came from (create sets it)

    def weight_files(self) -> list[str]:
        """The weight files of the local folder the model was loaded from (hashed into a run's identity); none
        for a hub name or a random initialisation (the identity then hashes the loaded parameters)."""
        return _folder_weight_files(self.weights_folder)


_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt", ".tar")


def _folder_weight_files(folder: str | None) -> list[str]:
    if not folder or not os.path.isdir(folder):
        return []
    return sorted(str(p) for p in Path(folder).iterdir() if p.is_file() and p.name.endswith(_WEIGHT_SUFFIXES))


def create(source: str, device: str = "cpu", dtype: str = "float32", pretrained: bool = True,
           **model_kwargs: Any) -> TimmClassifier:
    """``timm:NAME`` factory: NAME is a timm model name, ``hf-hub:org/repo`` or a local folder."""
    try:
        import timm
        import timm.data
    except ImportError as exc:
        raise ShiftbenchError(f"timm: models need timm (and torchvision): {install_command('timm')} ({exc})") from None
    if not source:
        raise ShiftbenchError("timm: needs a model name or folder, e.g. timm:resnet50.a1_in1k")
    name = source
    if os.path.isdir(source):
        name = f"local-dir:{source}"
    try:
        module = timm.create_model(name, pretrained=pretrained, **model_kwargs)
    except (RuntimeError, FileNotFoundError, ValueError) as exc:
        # a state dict that does not fit is a paragraph of keys: one line, the start of it
        text = " ".join(str(exc).split())
        raise ShiftbenchError(f"timm cannot create {source!r}: {text[:300]}{'...' if len(text) > 300 else ''}") from None
    data_config = timm.data.resolve_model_data_config(module)
    model = TimmClassifier(module, data_config, f"timm:{source}", device=device, dtype=dtype)
    model.weights_folder = os.path.abspath(source) if pretrained and os.path.isdir(source) else None
    return model
