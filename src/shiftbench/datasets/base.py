"""The Dataset protocol: a sized, indexable, streaming source of Samples (or Queries) with stable ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

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
    # how an ImageNet-1k classifier's outputs decide the labels, when they are coarser categories
    # (shiftbench.decisions.DecisionMap: the cue-conflict stimuli's 16 entry-level categories); None: its own
    decision_map: Any = None

    def __len__(self) -> int:
        raise NotImplementedError

    def labels_used(self) -> set[int] | None:
        """The label values the samples carry, when the reader knows them without reading an image (an image
        folder: its class folders); None when it does not (every class of ``label_space`` then counts). A class
        subset must hold them all (tasks/labels.py)."""
        return None

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

    def class_file_path(self, index: int) -> str | None:
        """``<class folder>/<file name>`` of record ``index``, as ImageNet's layout (and ``generate --protocol
        imagenet-c``) names an image, or None: by default the first folder and the file name of its source
        path (an image folder's), None when that path has no folder."""
        parts = [p for p in str(self.source_path(index) or "").split("/") if p not in ("", ".", "..")]
        return f"{parts[0]}/{parts[-1]}" if len(parts) >= 2 else None

    # -- how `generate` writes a shifted copy in this dataset's own format ---------------------------
    # An image folder needs nothing more than its mirrored tree; a format with annotation files (COCO,
    # VOC) names where its images go, which files travel with each image, and writes its index last.
    mirror_keeps: frozenset[str] = frozenset()  # what a shift must keep valid for the copied annotations

    def mirror_path(self, index: int) -> str | None:
        """Where ``generate`` writes record ``index``'s image below ``<shift>/<severity>/`` (POSIX; the
        suffix is replaced by the output's). The source path by default: the tree is mirrored."""
        return self.source_path(index)

    def mirror_files(self, index: int) -> list[tuple[Path, str]]:
        """Annotation files copied unchanged beside record ``index``'s image: (source file, relative target)."""
        return []

    def write_mirror_index(self, folder: Path, written: Mapping[int, str]) -> None:
        """Write the annotation index of a generated ``folder`` holding the records ``written``
        (index -> image path relative to ``folder``), so this format's reader reads it. Nothing by default."""

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
        self.decision_map = getattr(base, "decision_map", None)

    def labels_used(self) -> set[int] | None:
        # the whole dataset's: a limit or an id list does not change which classes a class subset must hold
        used = getattr(self.base, "labels_used", None)
        return used() if callable(used) else None

    def __len__(self) -> int:
        return len(self.indices)

    def load(self, index: int) -> Any:
        return self.base.load(self.indices[index])

    def sample_id(self, index: int) -> str:
        return self.base.sample_id(self.indices[index])

    def source_path(self, index: int) -> str | None:
        return self.base.source_path(self.indices[index])

    def class_file_path(self, index: int) -> str | None:
        return self.base.class_file_path(self.indices[index])

    @property
    def mirror_keeps(self) -> frozenset[str]:  # type: ignore[override]
        return self.base.mirror_keeps

    def mirror_path(self, index: int) -> str | None:
        return self.base.mirror_path(self.indices[index])

    def mirror_files(self, index: int) -> list[tuple[Path, str]]:
        return self.base.mirror_files(self.indices[index])

    def write_mirror_index(self, folder: Path, written: Mapping[int, str]) -> None:
        self.base.write_mirror_index(folder, {self.indices[i]: rel for i, rel in written.items()})
