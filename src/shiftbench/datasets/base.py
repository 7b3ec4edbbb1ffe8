"""The Dataset protocol: a sized, indexable, streaming source of Samples (or Queries) with stable ids."""

from __future__ import annotations

from typing import Any, Iterator

from ..labelspace import LabelSpace
from ..sample import Sample


class Dataset:
    """Base class for readers and built-in datasets.

    Subclasses implement ``__len__`` and ``load(index)``; iteration streams one record at a time,
    so a dataset never holds all its images in memory. ``ids`` are stable across runs and machines:
    they seed the per-sample generators of shifts.
    """

    name: str = "dataset"
    description: str = ""
    annotations: tuple[str, ...] = ()  # e.g. ("label", "mask", "boxes", "caption")
    num_classes: int | None = None
    class_names: list[str] | None = None
    # what the labels mean (shiftbench.labelspace): class / box labels, and the values of class masks
    # (None when the masks are instance maps or there are none)
    label_space: LabelSpace | None = None
    mask_space: LabelSpace | None = None

    def __len__(self) -> int:
        raise NotImplementedError

    def load(self, index: int) -> Sample:
        """The record at ``index`` (0 <= index < len)."""
        raise NotImplementedError

    def sample_id(self, index: int) -> str:
        """The stable id of record ``index`` without reading its image (override when cheap)."""
        return self.load(index).id

    def source_path(self, index: int) -> str | None:
        """The image file of record ``index``, relative to the dataset root (POSIX), or None.

        ``generate`` mirrors this tree in its output; records without a file fall back to their id.
        """
        return None

    def __getitem__(self, index: int) -> Any:
        if not isinstance(index, int):
            raise TypeError("dataset index must be an int")
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"index {index} out of range for {self.name} of {n} records")
        return self.load(index)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self.load(i)

    def info(self) -> dict[str, Any]:
        """A one-line summary for ``shiftbench list datasets``."""
        return {"name": self.name, "size": len(self), "annotations": list(self.annotations),
                "description": self.description}


class Subset(Dataset):
    """The first ``limit`` records, or the records at ``indices``, of another dataset."""

    def __init__(self, base: Dataset, indices: list[int]):
        self.base = base
        self.indices = list(indices)
        self.name = base.name
        self.description = base.description
        self.annotations = base.annotations
        self.num_classes = base.num_classes
        self.class_names = base.class_names
        self.label_space = base.label_space
        self.mask_space = base.mask_space

    def __len__(self) -> int:
        return len(self.indices)

    def load(self, index: int) -> Any:
        return self.base.load(self.indices[index])

    def sample_id(self, index: int) -> str:
        return self.base.sample_id(self.indices[index])

    def source_path(self, index: int) -> str | None:
        return self.base.source_path(self.indices[index])
