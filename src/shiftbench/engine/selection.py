"""Which samples a run reads: the spec's dataset opened (unreadable files screened with ``on_error``), its
``ids`` list and ``limit`` applied, and every sample id checked unique before any work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..console import plural
from ..datasets import Subset, load, reader_kwargs
from ..datasets.base import Dataset
from ..errors import ShiftbenchError
from .spec import Spec

__all__ = ["open_dataset", "ids_are_cheap", "unique_ids", "read_id_list", "select_ids"]


def open_dataset(spec: Spec, verify: str = "full") -> tuple[Any, list[tuple[str, str]]]:
    """The run's dataset, and the (file, reason) of the files the reader left out (``on_error: skip``).

    With skip, unreadable files are found before any work (a full decode, as load does, unless ``verify``
    says the driver already did), so a run never stops half-way on one; they are logged by the reader and
    recorded in the store. Two samples with one id would share a random stream and their per-sample
    records: refused before any work, over the whole dataset where ids are cheap (or an id list needs
    them all anyway), else over the samples the run reads."""
    kwargs = reader_kwargs(spec.dataset, spec.dataset_params, spec.on_error, verify=verify)
    dataset = load(spec.dataset, **kwargs)
    skipped = list(getattr(dataset, "skipped", []))
    where = f"dataset {spec.dataset!r}"
    index = unique_ids(dataset, where) if spec.ids or ids_are_cheap(dataset) else None
    if spec.ids:
        dataset = select_ids(dataset, Path(spec.ids), index)
    if spec.limit is not None and spec.limit < len(dataset):
        dataset = Subset(dataset, list(range(spec.limit)))
    if index is None:  # ids that cost a decode each: only the samples the run reads
        unique_ids(dataset, where)
    if len(dataset) == 0:
        raise ShiftbenchError(f"dataset {spec.dataset!r} has no samples")
    return dataset, skipped


def ids_are_cheap(dataset: Any) -> bool:
    """Whether the dataset (below any Subset) names its samples without decoding them."""
    while isinstance(dataset, Subset):
        dataset = dataset.base
    return getattr(type(dataset), "sample_id", None) is not Dataset.sample_id


def unique_ids(dataset: Any, where: str) -> dict[str, int]:
    """Every sample's position by id; ShiftbenchError naming the first id two samples share."""
    index: dict[str, int] = {}
    for i in range(len(dataset)):
        sid = str(dataset.sample_id(i))
        first = index.setdefault(sid, i)
        if first != i:
            paths = [getattr(dataset, "source_path", lambda k: None)(k) for k in (first, i)]
            note = f" ({paths[0]} and {paths[1]})" if all(paths) else ""
            raise ShiftbenchError(f"{where}: samples {first} and {i}{note} have the same id {sid!r}; ids must be "
                                  "unique (each names a sample's records and random stream)")
    return index


def read_id_list(path: Path) -> list[str]:
    """The ids of an id list in file order (blank lines and '#' lines skipped); an id listed twice is refused
    with both line numbers (it would be scored, and counted in n, twice)."""
    if not path.is_file():
        raise ShiftbenchError(f"{path}: id list not found")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ShiftbenchError(f"{path}: cannot read the id list ({type(exc).__name__})") from None
    seen: dict[str, int] = {}
    for n, line in enumerate(lines, start=1):
        sid = line.strip()
        if not sid or line.startswith("#"):
            continue
        if sid in seen:
            raise ShiftbenchError(f"{path}:{n}: id {sid!r} is listed twice (lines {seen[sid]} and {n}); list each "
                                  "sample once")
        seen[sid] = n
    return list(seen)


def select_ids(dataset, path: Path, index: dict[str, int] | None = None):
    wanted = read_id_list(path)
    if index is None:
        index = unique_ids(dataset, "dataset")
    missing = [w for w in wanted if w not in index]
    if missing:
        raise ShiftbenchError(f"{path}: {plural(len(missing), 'id')} {'is' if len(missing) == 1 else 'are'} not in the "
                              f"dataset (first: {missing[:3]})")
    return Subset(dataset, [index[w] for w in wanted])
