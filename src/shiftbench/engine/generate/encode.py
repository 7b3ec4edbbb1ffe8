"""Encoding and the work unit: a :class:`Job` (a chunk of sample indices of one shift and severity) run on a
worker (:func:`run_job`) reads through the run kernel's loader, shifts, and writes each output through a
temporary file (or returns its bytes for a shard); the encoder settings of every format."""

from __future__ import annotations

import importlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...condition import Condition
from ...datasets import load
from ...errors import ShiftbenchError
from ...files import write_atomic
from ...registry import SHIFTS
from ...severity import Severity, label
from ..kernel import Loader, Planned
from ..shards import sample_key
from ..spec import PreprocessSection
from .layout import SUFFIX, output_relpath, protocol_relpath, sequence_frames


def loader_of(dataset: Any, seed: int, on_error: str, preprocess: PreprocessSection | None) -> Loader:
    """generate's reader of ``dataset``: the run kernel's loader, as evaluation reads (same per-sample generators,
    the same narrowing of a failed batch), on the CPU, skips said by the driver."""
    return Loader(dataset, seed, on_error=on_error, pixels="cpu", step="generate", log_skips=False,
                  preprocess=preprocess)


@dataclass(frozen=True)
class Job:
    dataset: str
    dataset_kwargs: dict[str, Any]
    limit: int | None
    shift: str
    shift_params: dict[str, Any]
    severity: Severity  # canonical (shiftbench.severity): 3, 2.5
    indices: tuple[int, ...]
    seed: int
    out: str
    fmt: str
    jpeg_quality: int
    on_error: str = "fail"
    modules: tuple[str, ...] = ()  # where the shift and dataset classes live: imported first on a fresh worker
    layout: str = "folder"  # folder: the worker writes each file; webdataset/parquet: it returns encoded bytes
    preprocess: PreprocessSection | None = None  # resize / crop before the shift
    protocol: str | None = None  # a published procedure (PROTOCOLS): its encoding and its file names


def save_options(fmt: str, quality: int, protocol: str | None = None) -> dict[str, Any]:
    """Pillow's ``Image.save`` arguments of an output: PNG at compression level 6; JPEG at ``quality`` with full
    chroma (4:4:4); WebP (lossy) at ``quality``; under ``protocol="imagenet-c"`` a JPEG is saved exactly as
    make_imagenet_c.py saves it: ``quality=85, optimize=True`` and Pillow's other defaults (4:2:0)."""
    name = {"png": "PNG", "jpeg": "JPEG", "webp": "WEBP"}[fmt]
    if fmt == "png":
        return {"format": name, "compress_level": 6}
    if protocol is not None:
        return {"format": name, "quality": quality, "optimize": True}
    if fmt == "jpeg":
        return {"format": name, "quality": quality, "subsampling": 0}
    return {"format": name, "quality": quality}


def format_label(fmt: str, quality: int, protocol: str | None = None) -> str:
    """The manifest's ``format`` of an output: ``png``, ``jpeg (lossy, quality 95)``, ..."""
    if fmt == "png":
        return "png"
    return f"{fmt} (lossy, quality {quality}{', optimize' if protocol and fmt == 'jpeg' else ''})"


def encoded(image: np.ndarray, fmt: str, quality: int, protocol: str | None = None) -> bytes:
    """An output's bytes, what a folder's file and a shard's member hold alike (a shard's PNG is the folder's PNG)."""
    from PIL import Image  # heavy: on first encode

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, **save_options(fmt, quality, protocol))
    return buf.getvalue()


def copy_file(source: Path, target: Path) -> None:
    """Copy a file's bytes through a temporary file, so a kill never leaves half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, Path(source).read_bytes())


_worker_cache: dict[tuple, Any] = {}


def open_dataset(name: str, kwargs: dict[str, Any], limit: int | None, fresh: bool = False):
    """The dataset a job reads, opened once per process (``fresh``: listed afresh, a folder may have changed)."""
    if fresh:
        _worker_cache.clear()
    key = (name, json.dumps(kwargs, sort_keys=True, default=str), limit)
    if key not in _worker_cache:
        _worker_cache.clear()
        _worker_cache[key] = load(name, limit=limit, **kwargs)
    return _worker_cache[key]


def run_job(job: Job) -> list[dict[str, Any]]:
    """Shift one chunk of samples and write their outputs; returns their manifest records."""
    for module in job.modules:  # a fresh (Ray) worker registers the user's shift or dataset this way
        importlib.import_module(module)
    dataset = open_dataset(job.dataset, job.dataset_kwargs, job.limit)
    shift = SHIFTS.create(job.shift, **job.shift_params)
    # with on_error: skip a file that does not decode or a sample the shift fails on gets a {"skipped": reason} record
    loader = loader_of(dataset, job.seed, job.on_error, job.preprocess)
    read = loader.read(job.indices)
    if shift.kind != "text":
        for x in read.samples:
            if getattr(x, "image", None) is None:
                raise ShiftbenchError(f"shift {job.shift!r} needs images; record {x.id} has none")
    batch = loader.shift(Planned(Condition("", "", job.shift, dict(job.shift_params), job.severity), shift), read)
    records = [{"index": i, "id": sid, "shift": job.shift, "severity": job.severity, "seed": job.seed,
                "skipped": reason} for i, (sid, reason) in zip(batch.skipped_indices, batch.skipped)]
    by_index = dict(zip(read.indices, read.samples))
    indices, outs, params = batch.indices, batch.samples, batch.params
    items = [by_index[i] for i in indices]
    base = Path(job.out) / job.shift / label(job.severity)
    suffix = SUFFIX[job.fmt]
    relpath = protocol_relpath if job.protocol else output_relpath
    encoding = format_label(job.fmt, job.jpeg_quality, job.protocol)
    for index, item, out, p in zip(indices, items, outs, params):
        record: dict[str, Any] = {
            "index": index, "id": item.id, "shift": job.shift, "severity": job.severity, "seed": job.seed,
            "config": shift.config, "params": p,
        }
        if job.preprocess is not None:  # absent without one: records of earlier runs read the same
            record["preprocess"] = job.preprocess.as_dict()
        if job.protocol:
            record["protocol"] = job.protocol
        source = dataset.source_path(index) if hasattr(dataset, "source_path") else None
        if source:
            record["source"] = str(source)
        meta = getattr(item, "meta", {}) or {}
        if meta.get("converted_from"):
            record["converted_from"] = meta["converted_from"]
        if shift.kind == "text":
            record["text"] = getattr(out, "text", None) if hasattr(out, "reference") else out.caption
        elif job.layout != "folder":  # the driver writes the shard once all of its samples are back
            record["_image"] = encoded(out.image, job.fmt, job.jpeg_quality, job.protocol)
            record["key"] = sample_key(item.id)
            if getattr(out, "label", None) is not None and int(out.label) >= 0:
                record["label"] = int(out.label)
                record["class_name"] = out.class_name
            if getattr(out, "caption", None):
                record["caption"] = out.caption
            record["format"] = encoding
        else:
            rel = relpath(dataset, index, suffix)
            frames = getattr(out, "frames", None)
            if frames is not None:  # a perturbation sequence: a folder of frames, the folder the record's output
                names = sequence_frames(rel, suffix, len(frames))
                for name, frame in zip(names, frames):
                    (base / name).parent.mkdir(parents=True, exist_ok=True)
                    write_atomic(base / name, encoded(frame, job.fmt, job.jpeg_quality, job.protocol))
                rel = names[0].rpartition("/")[0]
                record["frames"] = len(frames)
                record["sequence"] = dict(out.meta.get("sequence") or {})
            else:
                path = base / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(path, encoded(out.image, job.fmt, job.jpeg_quality, job.protocol))  # through a temp file
            for source_file, target in (dataset.mirror_files(index) if hasattr(dataset, "mirror_files") else []):
                copy_file(source_file, base / target)  # the format's annotation files, unchanged
            record["output"] = f"{job.shift}/{label(job.severity)}/{rel}"
            record["format"] = encoding
        records.append(record)
    return sorted(records, key=lambda r: r["index"])
