"""open_clip zero-shot classifiers (``open_clip:ARCH/PRETRAINED``), ImageNet-1k with the 80 templates by default.

``open_clip:ViT-B-32/laion2b_s34b_b79k`` loads a registered pretrained tag (hub cache);
``open_clip:ViT-B-32//path/weights.safetensors`` a local weight file for an architecture;
``open_clip:hf-hub:org/repo`` or ``open_clip:/path/to/folder`` (``open_clip_config.json`` + weights) a
hub repo or local folder. Preprocessing comes from the model's ``visual.preprocess_cfg``.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..install import install_command
from .base import LabelSpace, Preprocess, ZeroShotClassifier, as_image_list, check_outputs, parse_dtype
from .labels import imagenet_templates

__all__ = ["OpenClipZeroShot", "create", "parse_source", "preprocess_from_open_clip"]

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


def parse_source(source: str) -> tuple[str, str | None]:
    """``ARCH/PRETRAINED`` -> (ARCH, PRETRAINED); hub repos and folders -> (model name, None)."""
    if source.startswith(("hf-hub:", "local-dir:")):
        return source, None
    if os.path.isdir(source):
        return f"local-dir:{source}", None
    arch, sep, pretrained = source.partition("/")
    if not sep or not arch or not pretrained:
        raise ShiftbenchError(
            f"open_clip: expected ARCH/PRETRAINED (e.g. ViT-B-32/laion2b_s34b_b79k), hf-hub:org/repo or a folder, got {source!r}"
        )
    return arch, pretrained


def preprocess_from_open_clip(cfg: Mapping[str, Any] | None) -> Preprocess:
    """open_clip ``preprocess_cfg`` (size, mean, std, interpolation, resize_mode) -> the :class:`Preprocess` that
    gives the tensor of open_clip's eval transform (``image_transform(..., is_train=False)``): ``shortest``
    resizes the shorter side to the size and centre-crops, ``squash`` stretches to it."""
    cfg = dict(cfg or {})
    size = cfg.get("size", 224)
    size = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
    mode = cfg.get("resize_mode") or "shortest"
    if mode not in ("shortest", "squash"):
        raise ShiftbenchError(f"open_clip resize_mode {mode!r} is not supported (shortest or squash)")
    interpolation = cfg.get("interpolation") or "bicubic"
    if interpolation not in ("bicubic", "bilinear", "nearest", "lanczos"):
        raise ShiftbenchError(f"open_clip interpolation {interpolation!r} is not supported")
    return Preprocess(
        size=size, mean=tuple(cfg.get("mean") or OPENAI_MEAN), std=tuple(cfg.get("std") or OPENAI_STD),
        resize="exact" if mode == "squash" else "shorter", crop_fraction=1.0, interpolation=interpolation,
        value_range=1.0,
    )


class OpenClipZeroShot(ZeroShotClassifier):
    """Zero-shot classifier over an open_clip model (``encode_image`` / ``encode_text`` / ``logit_scale``)."""

    def __init__(self, model: Any, tokenizer: Callable[[list[str]], Any], name: str, device: str = "cpu",
                 dtype: str = "float32", classes: Sequence[str] | None = None, templates: Sequence[str] | None = None):
        import torch

        self.name = name
        self.device = str(torch.device(device))
        self.dtype = parse_dtype(dtype)
        self._torch_dtype = getattr(torch, self.dtype)
        self.module = model.to(device=self.device, dtype=self._torch_dtype).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.tokenizer = tokenizer
        self.preprocess = preprocess_from_open_clip(getattr(getattr(model, "visual", None), "preprocess_cfg", None))
        self.logit_scale = float(model.logit_scale.exp().item())
        bias = getattr(model, "logit_bias", None)
        self.logit_bias = float(bias.reshape(-1)[0].item()) if bias is not None else 0.0
        if classes is None:
            self.set_classes(LabelSpace.imagenet1k(), templates or imagenet_templates())
        else:
            self.set_classes(list(classes), templates or imagenet_templates())

    weights_files: tuple[str, ...] = ()  # the local files the weights came from (create sets them)

    def weight_files(self) -> list[str]:
        """The local weight file (``ARCH//path``) or the weight files of the local folder the model was loaded
        from (hashed into a run's identity); none for a pretrained tag or hub repo (the identity then hashes the
        loaded parameters)."""
        return list(self.weights_files)

    def preprocess_tensor(self, images: Sequence[np.ndarray]) -> Any:
        import torch

        return torch.from_numpy(self.preprocess(images)).to(self.device, self._torch_dtype)

    def encode_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        import torch

        images = as_image_list(images)
        with torch.inference_mode():
            feats = self.module.encode_image(self.preprocess_tensor(images)).float()
        feats = torch.nn.functional.normalize(feats, dim=-1).cpu().numpy()
        check_outputs(feats, self.name, batch_size=len(images))
        return feats

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        tokens = self.tokenizer([str(t) for t in texts]).to(self.device)
        with torch.inference_mode():
            feats = self.module.encode_text(tokens).float()
        feats = torch.nn.functional.normalize(feats, dim=-1).cpu().numpy()
        check_outputs(feats, self.name, batch_size=len(texts))
        return feats

    def predict_logits(self, images: Sequence[np.ndarray]) -> np.ndarray:
        return super().predict_logits(images) + np.float32(self.logit_bias)


def create(source: str, device: str = "cpu", dtype: str = "float32", classes: Sequence[str] | None = None,
           templates: Sequence[str] | None = None) -> OpenClipZeroShot:
    """``open_clip:ARCH/PRETRAINED`` factory (see the module docstring for the accepted forms)."""
    try:
        import open_clip
    except ImportError as exc:
        raise ShiftbenchError(f"open_clip: models need open_clip_torch (and torchvision): {install_command('open_clip')} ({exc})") from None
    arch, pretrained = parse_source(source)
    try:
        model = open_clip.create_model(arch, pretrained=pretrained or None)
    except (RuntimeError, FileNotFoundError, ValueError) as exc:
        # a state dict that does not fit is a paragraph of keys: one line, the start of it
        text = " ".join(str(exc).split())
        raise ShiftbenchError(f"open_clip cannot create {source!r}: {text[:300]}{'...' if len(text) > 300 else ''}") from None
    tokenizer = open_clip.get_tokenizer(arch)
    out = OpenClipZeroShot(model, tokenizer, f"open_clip:{source}", device=device, dtype=dtype,
                           classes=classes, templates=templates)
    if pretrained and os.path.isfile(pretrained):
        out.weights_files = (os.path.abspath(pretrained),)
    elif arch.startswith("local-dir:"):
        folder = os.path.abspath(arch[len("local-dir:"):])
        out.weights_files = tuple(sorted(os.path.join(folder, f) for f in os.listdir(folder)
                                         if f.endswith(_WEIGHT_SUFFIXES) and os.path.isfile(os.path.join(folder, f))))
    return out


_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")
