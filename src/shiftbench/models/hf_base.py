"""What every transformers adapter shares (hf.py, vlm.py): loading a model and its processor on a device and
dtype with no weight gradients, the weight files of a folder or of the hub cache's snapshot (for a run's
identity), the batch of pixels, and the :class:`Preprocess` a processor's config declares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ShiftbenchError
from .base import Preprocess, parse_dtype

__all__ = ["HFBase", "preprocess_from_processor", "WEIGHT_SUFFIXES"]

WEIGHT_SUFFIXES = {".safetensors", ".bin", ".pt", ".pth", ".onnx", ".msgpack", ".h5"}
_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "area", 5: "hamming"}  # PIL codes


def _size_fields(value: Any) -> dict[str, int]:
    """The set fields of a processor size: a dict (transformers 4) or a SizeDict (transformers 5)."""
    if value is None:
        return {}
    if isinstance(value, int):
        return {"height": value, "width": value}
    out = {}
    for key in ("height", "width", "shortest_edge", "longest_edge"):
        item = value.get(key) if isinstance(value, dict) else getattr(value, key, None)
        if item is not None:
            out[key] = int(item)
    return out


def _size_pair(value: Any) -> tuple[int, int] | None:
    fields = _size_fields(value)
    if "height" in fields and "width" in fields:
        return fields["height"], fields["width"]
    if "shortest_edge" in fields:
        return fields["shortest_edge"], fields["shortest_edge"]
    return None


def preprocess_from_processor(processor: Any) -> Preprocess:
    """The :class:`Preprocess` that an image processor's config declares (size, crop, mean/std)."""
    ip = getattr(processor, "image_processor", processor)
    size = _size_pair(getattr(ip, "size", None))
    crop = _size_pair(getattr(ip, "crop_size", None)) if getattr(ip, "do_center_crop", False) else None
    shortest = "shortest_edge" in _size_fields(getattr(ip, "size", None))
    mean = tuple(getattr(ip, "image_mean", None) or (0.0, 0.0, 0.0))
    std = tuple(getattr(ip, "image_std", None) or (1.0, 1.0, 1.0))
    if not getattr(ip, "do_normalize", True):
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    rescale = float(getattr(ip, "rescale_factor", 1 / 255)) if getattr(ip, "do_rescale", True) else 1.0
    resample = getattr(ip, "resample", 2)
    interpolation = _RESAMPLE.get(int(getattr(resample, "value", resample) or 2), "bilinear")
    if crop is not None and size is not None:
        return Preprocess(size=crop, mean=mean, std=std, resize="shorter" if shortest else "exact",
                          resize_size=size[0] if shortest else size, interpolation=interpolation,
                          value_range=rescale * 255.0)
    return Preprocess(size=size or (224, 224), mean=mean, std=std, resize="shorter" if shortest else "exact",
                      crop_fraction=1.0, interpolation=interpolation, value_range=rescale * 255.0)


class HFBase:
    """Shared loading: torch dtype/device, the processor, eval mode, no weight gradients."""

    def _load(self, source: str, loader: Any, device: str, dtype: Any, processor_cls: str = "AutoImageProcessor",
              revision: str | None = None) -> None:
        import torch
        import transformers

        self.device = str(torch.device(device))
        self.dtype = parse_dtype(dtype)
        self._torch_dtype = getattr(torch, self.dtype)
        kwargs = {"revision": revision} if revision else {}
        try:
            self.module = loader.from_pretrained(source, **kwargs).to(device=self.device, dtype=self._torch_dtype).eval()
            self.processor = getattr(transformers, processor_cls).from_pretrained(source, **kwargs)
        except OSError as exc:
            raise ShiftbenchError(f"cannot load transformers model {source!r}: {str(exc).splitlines()[0]}") from None
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.source = source
        self.revision = revision
        self.preprocess = preprocess_from_processor(self.processor)

    def weight_files(self) -> list[str]:
        """The weight files of a local folder, or of the hub cache's snapshot of a hub id (for a run's
        identity); empty when they cannot be found (the identity then hashes the loaded parameters)."""
        folder = Path(self.source)
        if not folder.is_dir():
            try:
                from huggingface_hub import snapshot_download

                folder = Path(snapshot_download(self.source, revision=self.revision, local_files_only=True))
            except Exception:  # not cached as a snapshot (or no hub client): fall back to the parameters
                return []
        return sorted(str(p) for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())

    def _pixels(self, images: list[np.ndarray]) -> dict[str, Any]:
        batch = self.processor(images=images, return_tensors="pt")
        return {k: (v.to(self.device, self._torch_dtype) if v.is_floating_point() else v.to(self.device))
                for k, v in batch.items() if hasattr(v, "to")}
