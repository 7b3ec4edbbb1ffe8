"""ShiftTransform: a policy as a transform in the style of torchvision.transforms.v2 (image, mask, boxes kept together).

The transform takes a Sample, a dict ``{"image", "mask", "boxes", "label", ...}`` (a v2 sample or a Hugging
Face row) or a bare image, and gives back the same kind: a numpy image for a numpy image, a PIL image for a
PIL image, a CHW tensor of the same dtype for a tensor. Annotations are taken from the shifted Sample; a shift
the task allows keeps them valid, so they come back as the very objects that went in unless a shift changed
their values.

What it refuses, at construction, in one line: a task it does not know, a shift that does not keep valid
what the task reads (``keeps``), a text shift. At the first call: a sample without a mask when a shift
reads the sample's mask (the error names the sample).
"""

from __future__ import annotations

import importlib.util
import numbers
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import ShiftbenchError
from ..sample import Sample, to_rgb_uint8
from .policy import ShiftPolicy

__all__ = ["ShiftTransform", "SharedEpoch"]


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _is_pil(x: Any) -> bool:
    return type(x).__module__.startswith("PIL")


class SharedEpoch:
    """The current epoch, visible to DataLoader worker processes after ``set``, persistent workers included.

    With torch installed the value lives in a one-element int64 tensor in shared memory: forked workers
    share its pages, spawned ones receive it through torch's multiprocessing reductions, and a plain pickle
    copies it. Without torch it is a plain int (there are then no DataLoader workers to tell).
    """

    def __init__(self, epoch: int = 0):
        self._tensor = None
        self._value = 0
        if importlib.util.find_spec("torch") is not None:
            import torch

            self._tensor = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.set(epoch)

    def get(self) -> int:
        return int(self._tensor[0]) if self._tensor is not None else self._value

    def set(self, epoch: int) -> None:
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or epoch < 0:
            raise ShiftbenchError(f"epoch must be a non-negative int, got {epoch!r}")
        if self._tensor is not None:
            self._tensor[0] = int(epoch)
        else:
            self._value = int(epoch)


# -- conversions between what callers hold and a Sample ------------------------------------------------
def image_to_array(image: Any, where: str) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """HxWx3 uint8 and a function that turns an HxWx3 uint8 result back into the caller's kind."""
    if _is_tensor(image):
        import torch

        if image.ndim != 3 or image.shape[0] not in (1, 3):
            raise ShiftbenchError(f"{where}: an image tensor must be CxHxW with C 1 or 3 (one image), "
                                  f"got shape {tuple(image.shape)}")
        arr = image.detach().cpu().permute(1, 2, 0).numpy()
        dtype = image.dtype

        def back(out: np.ndarray) -> Any:
            t = torch.from_numpy(np.ascontiguousarray(out.transpose(2, 0, 1)))
            return t if dtype == torch.uint8 else t.to(dtype) / 255.0

        return to_rgb_uint8(arr, source=where), back
    if _is_pil(image):
        from PIL import Image

        return to_rgb_uint8(image, source=where), lambda out: Image.fromarray(out)
    return to_rgb_uint8(image, source=where), lambda out: out


def _like(original: Any, value: np.ndarray) -> Any:
    """``value`` (a changed mask or boxes) in the kind of ``original``."""
    if _is_tensor(original):
        import torch

        return torch.as_tensor(value, dtype=original.dtype)
    if _is_pil(original):
        from PIL import Image

        return Image.fromarray(value.astype(np.uint8) * (255 if value.dtype == np.bool_ else 1))
    if isinstance(original, (list, tuple)):
        return value.tolist()
    return value


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Whether an annotation came out as it went in (a Sample re-validates its fields, so not by identity)."""
    if a is b:
        return True
    return a is not None and b is not None and a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


def _array(x: Any) -> np.ndarray:
    if _is_tensor(x):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _label(x: Any) -> int | None:
    if x is None:
        return None
    if _is_tensor(x) or isinstance(x, np.ndarray):
        if _array(x).size != 1:
            return None  # a multi-label target travels through untouched; no shift reads it
        x = x.item()
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        return None
    return int(x)


class ShiftTransform:
    """Apply a :class:`ShiftPolicy` on the fly; ``task`` is "classification", "segmentation" or "detection".

    ``transform(x, index=None, epoch=None)`` returns the shifted ``x`` (same kind); ``augment`` also
    returns the record (``policy.replay`` rebuilds the output from it). The choice is seeded by
    ``(seed, epoch, index)``; without an index (a plain ``transform(x)``) the sample's id stands in for it:
    a Sample's ``id``, a dict's ``"id"``, else the content id of the image (the same image then gets the
    same shift in an epoch). ``set_epoch(e)`` sets the epoch of calls that do not give one.
    """

    def __init__(self, policy: ShiftPolicy, *, task: str, seed: int = 0, epoch: int = 0):
        if not isinstance(policy, ShiftPolicy):
            raise ShiftbenchError(f"ShiftTransform takes a ShiftPolicy, got {type(policy).__name__}; "
                                  f"wrap shifts as ShiftPolicy([...])")
        where = f"ShiftTransform(task={task!r})"
        policy.check_task(task, where)
        for k, entry in enumerate(policy.entries):
            if entry.shift.kind == "text":
                raise ShiftbenchError(f"{where}: shift {entry.name!r} (policy shifts[{k}]) corrupts captions only; "
                                      f"an image task has nothing for it to change")
        policy.choose(0, 0, seed)  # a bad seed fails now
        self.policy, self.task, self.seed = policy, task, int(seed)
        self._epoch = SharedEpoch(epoch)

    @property
    def epoch(self) -> int:
        return self._epoch.get()

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` from now on, in this process and in DataLoader workers (see SharedEpoch)."""
        self._epoch.set(epoch)

    def augment(self, x: Any, index: int | str | None = None, epoch: int | None = None) -> tuple[Any, dict[str, Any]]:
        """(shifted x, record) for a Sample, a dict with an ``"image"`` or a bare image."""
        epoch = self.epoch if epoch is None else epoch
        if isinstance(x, Sample):
            return self.policy.sample(x, epoch, x.id if index is None else index, self.seed)
        if isinstance(x, Mapping):
            return self._augment_dict(x, index, epoch)
        if isinstance(x, np.ndarray) or _is_pil(x) or _is_tensor(x):
            image, back = image_to_array(x, "ShiftTransform")
            sample = Sample(image=image)
            out, record = self.policy.sample(sample, epoch, sample.id if index is None else index, self.seed)
            return back(out.image), record
        raise ShiftbenchError(f"ShiftTransform takes a Sample, a dict with an 'image' or an image; "
                              f"got {type(x).__name__}")

    def __call__(self, x: Any, index: int | str | None = None, epoch: int | None = None) -> Any:
        return self.augment(x, index, epoch)[0]

    def _augment_dict(self, row: Mapping[str, Any], index: Any, epoch: int) -> tuple[dict[str, Any], dict[str, Any]]:
        if "image" not in row:
            raise ShiftbenchError(f"ShiftTransform: the dict has no 'image' (keys: {', '.join(map(str, row))})")
        sid = row.get("id")
        where = f"sample {sid}" if sid is not None else "ShiftTransform"
        image, back = image_to_array(row["image"], where)
        fields: dict[str, Any] = {"image": image, "id": None if sid is None else str(sid),
                                  "label": _label(row.get("label"))}
        if row.get("mask") is not None:
            fields["mask"] = _array(row["mask"])
        if row.get("boxes") is not None:
            fields["boxes"] = _array(row["boxes"])
            if row.get("box_labels") is not None:
                fields["box_labels"] = _array(row["box_labels"])
        for key in ("class_name", "caption"):
            if isinstance(row.get(key), str):
                fields[key] = row[key]
        sample = Sample(**fields)
        out, record = self.policy.sample(sample, epoch, sample.id if index is None else index, self.seed)
        result = dict(row)
        result["image"] = back(out.image)
        for key in ("mask", "boxes", "box_labels"):
            before, after = getattr(sample, key), getattr(out, key)
            if row.get(key) is not None and not _same(before, after):  # a shift changed it: hand it back in kind
                result[key] = _like(row[key], after)
        return result, record

    def __repr__(self) -> str:
        return f"ShiftTransform({self.policy!r}, task={self.task!r}, seed={self.seed})"
