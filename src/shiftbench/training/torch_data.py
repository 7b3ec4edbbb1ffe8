"""ShiftDataset: a torch Dataset that shifts each sample on the fly, seeded by (seed, epoch, index); and a collate.

This module imports torch; ``shiftbench.training`` loads it only when ``ShiftDataset``, ``collate`` or
``to_tensors`` is asked for, so the rest of the package works without torch.
"""

from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from ..errors import ShiftbenchError
from ..sample import Sample
from .policy import ShiftPolicy
from .transform import ShiftTransform

__all__ = ["ShiftDataset", "collate", "to_tensors", "OUTPUTS"]

OUTPUTS = ("tensors", "uint8", "samples")
LIST_KEYS = ("boxes", "box_labels", "record", "id")  # variable length or text: always lists in a batch


def to_tensors(sample: Sample, image_dtype: str = "float32") -> dict[str, Any]:
    """A Sample as tensors: ``image`` 3xHxW (float32 in [0, 1], or uint8), ``label`` int64, ``mask`` HxW
    (uint8 0/1 for a binary mask, int64 for an instance map), ``boxes`` Nx4 float32 (x0, y0, x1, y1 pixels),
    ``box_labels`` int64; keys whose field is None are left out."""
    image = torch.from_numpy(np.ascontiguousarray(sample.image.transpose(2, 0, 1)))
    out: dict[str, Any] = {"image": image.float().div_(255.0) if image_dtype == "float32" else image}
    if sample.label is not None:
        out["label"] = torch.tensor(sample.label, dtype=torch.int64)
    if sample.mask is not None:
        mask = sample.mask
        out["mask"] = torch.from_numpy(mask.astype(np.uint8) if mask.dtype == np.bool_ else mask.astype(np.int64))
    if sample.boxes is not None:
        out["boxes"] = torch.from_numpy(np.asarray(sample.boxes, np.float32).reshape(-1, 4))
        if sample.box_labels is not None:
            out["box_labels"] = torch.from_numpy(np.asarray(sample.box_labels).astype(np.int64))
    return out


class ShiftDataset(Dataset):
    """A map-style torch Dataset over ``dataset`` (a shiftbench dataset or any sequence of Samples) that applies
    ``policy`` to item ``i`` as told by ``(seed, epoch, i)``.

    ``task``: "classification", "segmentation" or "detection"; shifts that do not keep what it reads are
    refused here (see ``ShiftPolicy.check_task``). ``output``: "tensors" (a dict: ``image`` float32 3xHxW in
    [0, 1], ``label``, ``mask``, ``boxes``, ``box_labels`` where the sample has them, ``index``, ``id``),
    "uint8" (the same with a uint8 image) or "samples" (the shifted Sample). ``return_record``: also give the
    record of what was applied, the dict ``ShiftPolicy.replay`` takes (under ``record``, or ``(Sample, record)``);
    batch such items with :func:`collate`, which keeps the records as a list (torch's default collate would
    merge the records' keys across the batch).

    Seeding: the shift chosen for item ``i`` and its random params come from ``(seed, epoch, i)`` and the
    sample's id only, never from a global generator, the worker id or the order of calls, so a
    DataLoader gives the same bytes with 0, 2 or 16 workers, and no ``worker_init_fn`` is needed (nor would
    one change anything). Call ``set_epoch(e)`` before each epoch, as with DistributedSampler: the epoch is
    kept in shared memory, so workers see it even when ``persistent_workers=True``.
    """

    def __init__(self, dataset: Any, policy: ShiftPolicy, *, task: str, seed: int = 0, output: str = "tensors",
                 return_record: bool = False, epoch: int = 0):
        if output not in OUTPUTS:
            raise ShiftbenchError(f"ShiftDataset: output must be one of {', '.join(OUTPUTS)}, got {output!r}")
        if not hasattr(dataset, "__len__") or not (hasattr(dataset, "load") or hasattr(dataset, "__getitem__")):
            raise ShiftbenchError(f"ShiftDataset: dataset must be sized and indexable, got {type(dataset).__name__}")
        self.dataset = dataset
        self.transform = ShiftTransform(policy, task=task, seed=seed, epoch=epoch)
        self.output = output
        self.return_record = bool(return_record)

    @property
    def policy(self) -> ShiftPolicy:
        return self.transform.policy

    @property
    def epoch(self) -> int:
        return self.transform.epoch

    def set_epoch(self, epoch: int) -> None:
        """The epoch of the items given from now on (also in DataLoader workers, persistent or not)."""
        self.transform.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def load(self, index: int) -> Sample:
        """Item ``index`` of the wrapped dataset, unshifted."""
        sample = self.dataset.load(index) if hasattr(self.dataset, "load") else self.dataset[index]
        if not isinstance(sample, Sample):
            raise ShiftbenchError(f"ShiftDataset: item {index} of the dataset is a {type(sample).__name__}, "
                                  f"not a Sample; apply ShiftTransform in your own Dataset instead")
        return sample

    def __getitem__(self, index: int) -> Any:
        n = len(self)
        i = operator.index(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for ShiftDataset of {n} items")
        out, record = self.transform.augment(self.load(i), index=i)
        if self.output == "samples":
            return (out, record) if self.return_record else out
        item = to_tensors(out, "float32" if self.output == "tensors" else "uint8")
        item["index"] = i
        item["id"] = out.id
        if self.return_record:
            item["record"] = record  # a dict, as output="samples" and ShiftTransform.augment give it
        return item

    def __repr__(self) -> str:
        return (f"ShiftDataset({len(self)} items, {self.policy!r}, task={self.transform.task!r}, "
                f"seed={self.transform.seed}, output={self.output!r})")


def collate(batch: Sequence[Any]) -> Any:
    """Batch ShiftDataset items whose images may differ in size (``DataLoader(..., collate_fn=collate)``).

    Dicts: ``image`` and ``mask`` are stacked when all have one shape, else kept as lists; ``boxes``,
    ``box_labels``, ``id`` and ``record`` are always lists (their lengths vary); numbers become a tensor.
    Samples give a list; ``(Sample, record)`` pairs give ``(samples, records)``.
    """
    if not batch:
        raise ShiftbenchError("collate: empty batch")
    first = batch[0]
    if isinstance(first, Sample):
        return list(batch)
    if isinstance(first, tuple) and len(first) == 2 and isinstance(first[0], Sample):
        return [b[0] for b in batch], [b[1] for b in batch]
    if not isinstance(first, dict):
        raise ShiftbenchError(f"collate: expected dicts or Samples, got {type(first).__name__}")
    keys = list(first)
    out: dict[str, Any] = {}
    for n, item in enumerate(batch):
        if list(item) != keys:
            raise ShiftbenchError(f"collate: item {n} has keys {sorted(item)}, item 0 {sorted(keys)}; "
                                  f"every sample of a batch needs the same annotations")
    for key in keys:
        values = [item[key] for item in batch]
        if key in LIST_KEYS:
            out[key] = values
        elif all(isinstance(v, torch.Tensor) for v in values):
            same = all(v.shape == values[0].shape for v in values)
            out[key] = torch.stack(values) if same else values
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[key] = torch.tensor(values)
        else:
            out[key] = values
    return out
