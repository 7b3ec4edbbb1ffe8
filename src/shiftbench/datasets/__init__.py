"""Dataset readers and built-in datasets (registered on import; see datasets.base for the protocol)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ShiftbenchError
from ..registry import DATASETS
from .base import Dataset, Subset

# Importing the reader and dataset modules registers them in DATASETS (they import numpy and the
# standard library only; Pillow is imported when an image is read).
from . import coco, imagefolder, objects, photos, retrieval, voc  # noqa: E402,F401

__all__ = ["Dataset", "Subset", "load"]


def load(name_or_path: str, format: str | None = None, limit: int | None = None, **kwargs: Any) -> Dataset:
    """A registered dataset by name, or a reader applied to a path (``format`` picks the reader).

    Readers are registered in DATASETS with ``reader=True`` meta and a ``detect(path)`` static method.
    """
    path = Path(str(name_or_path)).expanduser()
    if format is not None:
        dataset = DATASETS.create(format, root=path, **kwargs)
    elif str(name_or_path) in DATASETS and not DATASETS.entry(str(name_or_path)).meta.get("reader"):
        dataset = DATASETS.create(str(name_or_path), **kwargs)
    elif path.exists():
        dataset = _detect(path, **kwargs)
    else:
        names = [e.name for e in DATASETS.entries() if not e.meta.get("reader")]
        raise ShiftbenchError(
            f"dataset {name_or_path!r} is neither a registered dataset nor an existing path"
            + (f" (registered: {', '.join(names)})" if names else "")
        )
    if limit is not None:
        if limit < 0:
            raise ShiftbenchError(f"limit must be >= 0, got {limit}")
        dataset = Subset(dataset, list(range(min(limit, len(dataset)))))
    return dataset


def _detect(path: Path, **kwargs: Any) -> Dataset:
    readers = [e for e in DATASETS.entries() if e.meta.get("reader")]
    for entry in readers:
        reader = entry.resolve()
        detect = getattr(reader, "detect", None)
        if detect is not None and detect(path):
            return reader(root=path, **kwargs)
    formats = ", ".join(e.name for e in readers) or "none registered"
    raise ShiftbenchError(f"{path}: cannot tell the dataset format; pass format= one of: {formats}")
