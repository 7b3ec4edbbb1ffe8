"""Corruptions on the models' device: the runner's pixel path when every model takes tensors.

With ``engine: {pixels: auto}`` (the default) a condition whose shift is a corruption runs it on the
GPU that the run's classifiers use: the loader reads the clean images and draws each one's params on
the CPU as always (the same generators, so the same params are recorded), then the clean uint8 batch
goes to the device once, is corrupted there (``Corruption.apply_tensor``) and preprocessed there
(``Preprocess.tensor``), and only logits come back. ``pixels: device`` takes this path on any device
(the CPU included, which is how the tests run it); ``pixels: cpu`` never does.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..sample import Sample
from ..shifts.corruptions._torch import TORCH_CORRUPTIONS
from .spec import PIXELS as PIXEL_MODES

__all__ = ["DeviceBatch", "tensor_path", "PIXEL_MODES", "is_sequence"]


def is_sequence(shift: Any) -> bool:
    """Whether ``shift`` makes perturbation sequences (ImageNet-P's ``p_*``, shifts/perturbations)."""
    return getattr(shift, "role", None) == "perturbation" and callable(getattr(shift, "frames_tensor", None))


def takes_tensors(model: Any) -> bool:
    """Whether ``model`` can score uint8 tensors on its own device (the torch classifiers)."""
    return getattr(model, "task", None) == "classification" and callable(getattr(model, "predict_logits_tensor", None))


def tensor_path(mode: str, shift: Any, models: Sequence[Any]) -> bool:
    """Whether a condition of ``shift`` scored by ``models`` runs its pixels on the models' device."""
    if mode == "cpu" or shift is None or not models:
        return False
    if is_sequence(shift):
        if not type(shift).runs_on_tensors():
            return False
    elif not callable(getattr(shift, "apply_tensor", None)) or shift.name not in TORCH_CORRUPTIONS:
        return False
    if not all(takes_tensors(m) for m in models):
        return False
    if mode == "device":
        return True
    return all(not str(getattr(m, "tensor_device", "cpu")).startswith("cpu") for m in models)


class DeviceBatch:
    """One batch's clean samples and params; corrupted on a device once, shared by every model there."""

    def __init__(self, shift: Any, samples: Sequence[Sample], params: Sequence[dict[str, Any]]):
        self.shift = shift
        self.samples = list(samples)
        self.params = list(params)
        self._position = {id(s): i for i, s in enumerate(self.samples)}
        self._shifted: dict[str, list[tuple[list[int], Any]]] = {}  # device -> [(positions, tensor)]

    def __len__(self) -> int:
        return len(self.samples)

    def groups(self, device: str) -> list[tuple[list[int], Any]]:
        """The batch corrupted on ``device``: (positions, uint8 (n, 3, H, W)) per image size."""
        cached = self._shifted.get(device)
        if cached is not None:
            return cached
        import torch

        by_size: dict[tuple[int, ...], list[int]] = {}
        for i, s in enumerate(self.samples):
            by_size.setdefault(s.image.shape, []).append(i)
        out = []
        for positions in by_size.values():
            clean = torch.from_numpy(np.stack([self.samples[i].image for i in positions]))
            x = clean.to(device).permute(0, 3, 1, 2).contiguous()  # uint8 over the bus: 1 byte per value
            params = [self.params[i] for i in positions]
            if is_sequence(self.shift):  # (n, T, 3, h, w): each sample's frames, in order
                out.append((positions, self.shift.frames_tensor(x, params)))
            else:
                out.append((positions, self.shift.apply_tensor(x, params)))
        self._shifted = {device: out}  # one device at a time: models on another device redo it
        return out

    def predict(self, model: Any, samples: Sequence[Sample]) -> np.ndarray:
        """``model``'s logits for ``samples`` (all from this batch), in their order; for perturbation sequences
        every frame's, sample by sample ((N x T, C), as ``Classification.predict`` gives them)."""
        wanted = [self._position[id(s)] for s in samples]
        rank = {p: k for k, p in enumerate(wanted)}
        out: np.ndarray | None = None
        for positions, x in self.groups(str(model.tensor_device)):
            keep = [k for k, p in enumerate(positions) if p in rank]
            if not keep:
                continue
            part = x if len(keep) == len(positions) else x[keep]
            t = part.shape[1] if part.ndim == 5 else 1
            if part.ndim == 5:  # frames predicted len(samples) images at a time, as on the CPU path
                flat = part.reshape(-1, *part.shape[2:])
                logits = np.concatenate([model.predict_logits_tensor(flat[k:k + len(samples)])
                                         for k in range(0, flat.shape[0], max(len(samples), 1))])
            else:
                logits = model.predict_logits_tensor(part)
            if out is None:
                out = np.empty((len(wanted) * t, logits.shape[1]), dtype=logits.dtype)
            rows = np.concatenate([np.arange(rank[positions[k]] * t, rank[positions[k]] * t + t) for k in keep])
            out[rows] = logits
        assert out is not None
        return out

    def shifted_samples(self, count: int) -> list[Sample]:
        """The first ``count`` samples with their corrupted images on the CPU (the report's thumbnails)."""
        device = next(iter(self._shifted), "cpu")
        images: dict[int, np.ndarray] = {}
        for positions, x in self.groups(device):
            for k, p in enumerate(positions):
                if p < count:  # a sequence shows its last frame, as on the CPU path
                    images[p] = (x[k, -1] if x.ndim == 5 else x[k]).permute(1, 2, 0).cpu().numpy()
        return [s.replace(image=images[i]) if images[i].shape == s.image.shape
                else s.replace(image=images[i], mask=None, boxes=None, box_labels=None)  # a cropped sequence
                for i, s in enumerate(self.samples[:count])]
