"""Where outputs go: the mirrored folder tree (or a protocol's class folder and file name), the checks before
any work that nothing is overwritten and the copied annotations stay right, the shards a driver writes once
all of their samples are back, and each folder's annotation index."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ...datasets.common import shown
from ...errors import ShiftbenchError
from ...registry import SHIFTS
from ...severity import Severity, label
from ..shards import (check_keys, class_identifiers, parquet_bytes, shard_name, webdataset_bytes, write_atomic,
                      write_classes)
from ..spec import PreprocessSection

if TYPE_CHECKING:
    from .plan import GeneratePlan

SUFFIX = {"png": ".png", "jpeg": ".jpg", "webp": ".webp"}
NAMED = {"png": (".png",), "jpeg": (".jpg", ".jpeg", ".jpe"), "webp": (".webp",)}  # suffixes kept by a preset

def output_relpath(dataset: Any, index: int, suffix: str) -> str:
    """Where record ``index``'s output goes below OUT/<shift>/<severity>/ (POSIX, with ``suffix``).

    The reader's ``mirror_path``: the record's source file path when the dataset has one (the tree is
    mirrored, names kept as they are so class folders keep their names; COCO puts it below ``<split>/``),
    else its id with each ``/``-separated part made file-safe.
    """
    if hasattr(dataset, "mirror_path"):
        source = dataset.mirror_path(index)
    else:
        source = dataset.source_path(index) if hasattr(dataset, "source_path") else None
    if source:
        # POSIX: a backslash belongs to the file name (a file `\x.png` on Linux), never a separator to rewrite
        parts = [p for p in str(source).split("/") if p not in ("", ".", "..")]
    else:
        parts = [re.sub(r"[^A-Za-z0-9._-]+", "_", p) for p in str(dataset.sample_id(index)).split("/")]
        parts = [p for p in parts if p.strip(".")]
    rel = "/".join(parts) or "sample"
    stem, dot, ext = rel.rpartition(".")
    base = stem if dot and "/" not in ext and stem and not stem.endswith("/") else rel
    return base + suffix


def protocol_relpath(dataset: Any, index: int, suffix: str) -> str:
    """Where record ``index``'s output goes below OUT/<shift>/<severity>/ under a protocol: the dataset's
    ``class_file_path`` (``<class folder>/<file name>``: an image folder's class and file name, deeper folders
    dropped as make_imagenet_c.py drops them; imagenet-photos' wnid), the file name kept when its extension
    already names the output's format (any case: ``.JPEG`` for JPEG), else its stem with ``suffix``."""
    rel = dataset.class_file_path(index) if hasattr(dataset, "class_file_path") else None
    if rel is None:
        raise ShiftbenchError("generate --protocol: the dataset gives no class folder and file name per image; "
                              "use an image folder (<class>/<file>) or imagenet-photos")
    folder, _, name = rel.rpartition("/")
    stem, dot, ext = name.rpartition(".")
    fmt = next((f for f, s in SUFFIX.items() if s == suffix), None)
    if dot and stem and f".{ext.lower()}" in NAMED.get(fmt or "", ()):
        return rel
    return f"{folder}/{stem if dot and stem else name}{suffix}"


def check_collisions(dataset: Any, suffix: str, relpath: Callable[[Any, int, str], str] | None = None) -> list[str]:
    """Every record's output path (``relpath``, default :func:`output_relpath`); refuses (naming both sources)
    two records that would share one."""
    relpath = relpath or output_relpath
    taken: dict[str, int] = {}
    rels = []
    for i in range(len(dataset)):
        rel = relpath(dataset, i, suffix)
        key = rel.casefold()  # case-insensitive file systems (macOS, Windows) would merge these too
        if key in taken:
            j = taken[key]
            a = dataset.source_path(j) if hasattr(dataset, "source_path") else None
            b = dataset.source_path(i) if hasattr(dataset, "source_path") else None
            raise ShiftbenchError(
                f"generate: {shown(a or dataset.sample_id(j))} and {shown(b or dataset.sample_id(i))} would both be "
                f"written to {shown(rel)}; rename one of them (outputs are never overwritten)")
        taken[key] = i
        rels.append(rel)
    return rels


def check_annotations_kept(dataset: Any, shifts: Sequence[str], source: str) -> None:
    """Refuse, before any work, a shift that does not keep valid what the format's copied annotations
    describe (a COCO box around an object that ``background_only`` removed would be a wrong label)."""
    needs = frozenset(getattr(dataset, "mirror_keeps", frozenset()))
    for name in shifts:
        shift = SHIFTS.entry(name).resolve()
        missing = sorted(needs - shift.keeps) if shift.kind != "text" else []
        if missing:
            raise ShiftbenchError(
                f"generate: shift {name!r} does not keep {' and '.join(missing)} valid, so the annotations copied "
                f"from {source} would be wrong for its images; use a shift that keeps {' and '.join(sorted(needs))}, "
                f"or generate from an image folder of the same images")


def data_paths(dataset: Any) -> list[Path]:
    """The files and folders a dataset reads (its root, a COCO annotation file): no output may go there."""
    paths = []
    for reader in dict.fromkeys((dataset, base_of(dataset)), None):
        for attr in ("root", "annotation_file"):
            value = getattr(reader, attr, None)
            if isinstance(value, (str, os.PathLike)) and str(value):
                paths.append(Path(value))
    return paths


def is_sequence(shift: str) -> bool:
    """Whether a shift writes perturbation sequences (ImageNet-P's ``p_*``): a folder of frames per image."""
    return SHIFTS.entry(shift).resolve().role == "perturbation"


def check_sequences(shifts: Sequence[str], layout: str, protocol: str | None) -> None:
    """Sequences are written as folders of frames (never shards); the imagenet-p protocol writes sequences only,
    the imagenet-c protocol none."""
    seqs = [s for s in shifts if is_sequence(s)]
    others = [s for s in shifts if not is_sequence(s) and writes_files(s)]
    if seqs and layout != "folder":
        raise ShiftbenchError(f"generate --format {layout}: {', '.join(seqs)} write a folder of frames per image; "
                              "use --format folder")
    if protocol == "imagenet-p" and others:
        raise ShiftbenchError(f"generate --protocol imagenet-p writes perturbation sequences (p_* shifts); "
                              f"{', '.join(others)} {'is' if len(others) == 1 else 'are'} not one")
    if protocol is not None and protocol != "imagenet-p" and seqs:
        raise ShiftbenchError(f"generate --protocol {protocol}: {', '.join(seqs)} are ImageNet-P sequences; "
                              "use --protocol imagenet-p")


def sequence_frames(rel: str, suffix: str, count: int) -> list[str]:
    """The frame files of a sequence whose image would go to ``rel``: ``<rel without suffix>/<i>`` + suffix,
    i zero-padded to three digits (000 ... 040), in frame order."""
    stem = rel[: -len(suffix)] if rel.endswith(suffix) else rel
    return [f"{stem}/{i:03d}{suffix}" for i in range(count)]


def base_of(dataset: Any) -> Any:
    """The reader below a ``limit`` wrapper (the wrapper keeps it as ``base``)."""
    return getattr(dataset, "base", dataset)


def writes_files(shift: str) -> bool:
    """Whether a shift writes output files: every kind but text (a text shift's record carries its text)."""
    return SHIFTS.entry(shift).resolve().kind != "text"


def check_outputs_fit(ds: Any, shifts: Sequence[str], dataset: str, layout: str, fmt: str,
                      preprocess: PreprocessSection | None = None, protocol: str | None = None) -> None:
    """Before any work: a shard layout holds no annotation files and no two samples share a shard key; a folder
    run overwrites nothing and keeps what the annotations describe, which preprocessing would not (the files
    are copied as they are); a protocol's layout has a class folder and file name for every image. Text shifts
    write no files."""
    if not any(writes_files(name) for name in shifts):
        return
    check_sequences(shifts, layout, protocol)
    if preprocess is not None and getattr(ds, "mirror_keeps", frozenset()):
        raise ShiftbenchError(f"generate --resize/--crop: {dataset} has annotation files (boxes, masks) that generate "
                              f"copies unchanged, so they would not match the resized images; preprocess it in a "
                              f"run's spec instead (preprocess:), where the annotations follow the image")
    if protocol is not None:
        check_collisions(ds, SUFFIX[fmt], protocol_relpath)  # every image named, none overwritten
        return
    if layout != "folder":
        if getattr(ds, "mirror_keeps", frozenset()):
            raise ShiftbenchError(f"generate --format {layout}: {dataset} has annotation files (boxes, masks) that a "
                                  f"{layout} shard does not hold (image + label only); use --format folder")
        if layout == "webdataset":  # a member's name is the key; a Parquet row keeps the id itself, whatever it is
            check_keys(ds)  # before any work: two samples never share a shard key
    else:
        check_collisions(ds, SUFFIX[fmt])  # before any work: never overwrite
        check_annotations_kept(ds, shifts, dataset)


def class_lists(ds: Any, out: Path, layout: str, sharded_plan: set[tuple[str, int]]) -> list[str] | None:
    """The class identifiers a sharded run stores (None without shards); written beside each webdataset folder's
    shards, where the tar reader finds the label space (Parquet keeps it in its schema)."""
    if not sharded_plan:
        return None
    classes = class_identifiers(ds)
    if layout == "webdataset":
        for name, severity in sorted(sharded_plan):
            write_classes(out / name / label(severity), classes)
    return classes


def collect_shards(records: list[dict], pending: dict[tuple[str, Severity, int], dict[int, dict]], plan: GeneratePlan,
                   classes: Sequence[str] | None) -> list[dict]:
    """Hold a work unit's records of sharded (shift, severity) pairs until their shard is complete, then write
    the shard (temporary file + rename) and return its records for the journal; other records pass through.

    Only the driver runs this, so it is the only writer of shards. Records are journaled after their shard is
    in place, so a killed run's journal lists only complete shards (a resume redoes the others whole).
    """
    out, layout, sharded_plan, n = plan.out, plan.options.layout, plan.sharded, len(plan.dataset)
    shard_samples, fmt = plan.options.shard_samples, plan.options.image_format
    ready = [r for r in records if (r["shift"], r["severity"]) not in sharded_plan]
    touched = []
    for record in records:
        if (record["shift"], record["severity"]) in sharded_plan:
            key = (record["shift"], record["severity"], record["index"] // shard_samples)
            pending.setdefault(key, {})[record["index"]] = record
            touched.append(key)
    for key in dict.fromkeys(touched):
        name, severity, number = key
        held = pending[key]
        if len(held) < min(n, (number + 1) * shard_samples) - number * shard_samples:
            continue
        shard = [held[i] for i in sorted(held)]
        images = [r for r in shard if "_image" in r]
        if images:  # a shard whose every sample was skipped (on_error="skip") has no file
            rel = f"{name}/{label(severity)}/{shard_name(layout, number)}"
            for row, record in enumerate(images):
                record["output"] = rel
                if layout == "parquet":
                    record["row"] = row
            data = (webdataset_bytes(images, SUFFIX[fmt]) if layout == "webdataset"
                    else parquet_bytes(images, classes))
            write_atomic(out / rel, data)
            for record in images:
                del record["_image"]
        del pending[key]
        ready.extend(shard)
    return ready


def write_indexes(dataset: Any, out: Path, plan: Sequence[tuple[str, int]],
                   done: dict[tuple[str, Severity, int], dict]) -> None:
    """Each image (shift, severity) folder's annotation index (COCO json, VOC list), from its written records.

    Rewritten whole by every run, resumed or not, before the manifest: a folder with a final manifest is complete.
    """
    if not hasattr(dataset, "write_mirror_index"):
        return
    for name, severity in plan:
        if not writes_files(name):
            continue  # a text shift writes no folder
        prefix = f"{name}/{label(severity)}/"
        written = {k[2]: r["output"][len(prefix):] for k, r in done.items()
                   if k[0] == name and k[1] == severity and "output" in r}
        dataset.write_mirror_index(out / name / label(severity), written)
