"""Dataset readers and built-in datasets (registered on import; see datasets.base for the protocol)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ShiftbenchError
from ..registry import DATASETS
from .base import Dataset, Subset

# Importing the reader and dataset modules registers them in DATASETS (they import numpy and the
# standard library only; Pillow is imported when an image is read).
from . import coco, cue_conflict, cue_conflict_folder, imagefolder, objects, objects_cir, photos, retrieval, voc  # noqa: E402,F401
from . import parquet, webdataset  # noqa: E402,F401  (pyarrow is imported when a table is read)

__all__ = ["Dataset", "Subset", "load", "reader_kwargs"]


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
    if (path / "generate.json").is_file() and (path / "manifest.jsonl").is_file():
        # the root of `shiftbench generate` output: the datasets are one per shift and severity below it
        made = sorted(f"{p.parent.name}/{p.name}" for p in path.glob("*/*") if p.is_dir() and p.name.isdigit())
        example = f" (e.g. {path / made[0]})" if made else ""
        raise ShiftbenchError(f"{path}: a shiftbench generate output; read one of its <shift>/<severity> folders"
                              f"{example}: {', '.join(made[:8])}" + (" ..." if len(made) > 8 else ""))
    formats = ", ".join(e.name for e in readers) or "none registered"
    raise ShiftbenchError(f"{path}: cannot tell the dataset format; pass format= one of: {formats}")


def reader_kwargs(name_or_path: str, params: dict[str, Any], on_error: str = "fail",
                  verify: str = "full") -> dict[str, Any]:
    """The keyword arguments to ``load`` a dataset with the corrupt-image policy ``on_error``.

    Readers are asked to check every file up front with ``verify`` (by default a full decode, as
    ``load`` does), so an unreadable image stops a run before any work (``"fail"``, naming every bad
    file at once) or is left out before any work (``"skip"``), never half-way through. An explicit
    ``verify`` in ``params`` wins. Built-in datasets hold no user files and take no such arguments.
    A policy that contradicts ``params`` is refused.
    """
    if on_error not in ("fail", "skip"):
        raise ShiftbenchError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    kwargs = dict(params)
    name = str(name_or_path)
    if "format" not in kwargs and name in DATASETS and not DATASETS.entry(name).meta.get("reader"):
        return kwargs
    if on_error == "skip":
        if kwargs.get("on_error", "skip") != "skip":
            raise ShiftbenchError(f"on_error 'skip' contradicts dataset_params on_error {kwargs['on_error']!r}")
        kwargs["on_error"] = "skip"
    kwargs.setdefault("verify", verify)
    return kwargs
