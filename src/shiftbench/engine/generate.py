"""Write shifted copies of a dataset: images (lossless PNG by default) and a manifest of every draw.

Layout: ``OUT/<shift>/<severity>/<source relative path with the output suffix>``, and
``OUT/manifest.jsonl`` with one record per output (source id, shift, severity, seed, the shift's
config and the sampled params, the output path and format). Text shifts write no images; their
records carry the corrupted text.

The source tree is mirrored: ``root/class/x.jpg`` gives ``OUT/<shift>/<severity>/class/x.png``, so
``OUT/<shift>/<severity>`` of an image folder is an image folder again (same classes, same labels),
and the manifest and settings stay one level above, out of the readers' way. A format with
annotation files is written in that format (the reader's ``mirror_*`` hooks, datasets/base.py): a COCO
input gives ``<shift>/<severity>/annotations/instances_<split>.json`` (file names rewritten) with the
images under ``<split>/``; a VOC input gives ``JPEGImages/<id>.png`` with each image's label files
copied unchanged and the split's id list. A shift that does not keep what those annotations describe
(``keeps``: boxes, masks) is refused before any work. Nothing is ever
overwritten: two sources that would give one output (``x.jpg`` and ``x.png``) are refused before
any work, naming both files.

Unreadable images: ``on_error="fail"`` (default) stops on the first one (files whose header is broken
are all named before any work); ``"skip"`` leaves them out with one log line each batch and a manifest
record ``{"skipped": reason, ...}`` in place of the output.

Resumable and worker-invariant: each output is a pure function of (sample, shift, severity, seed),
written to a temporary file and renamed; its record goes to ``manifest.partial.jsonl`` after the
file is in place. A restarted run skips what the journal lists and redoes the rest. At the end the
manifest is written in a canonical order, so neither an interruption nor the number of workers
changes a single byte of the output.

Preprocessing (``resize``, ``crop``, ``interpolation``; datasets/preprocess.py) is applied to every sample as
it is read, before the shift, through the same loader as a run's ``preprocess:`` section; it is recorded in the
settings file and in every record. ``protocol="imagenet-c"`` is ImageNet-C's procedure (hendrycks/robustness,
``ImageNet-C/create_c/make_imagenet_c.py``): resize the shorter side to 256 (bilinear, Pillow, as
torchvision's ``Resize(256)`` on a PIL image), centre crop 224, the shift, then JPEG at quality 85 with
``optimize=True`` (Pillow's other defaults, 4:2:0 chroma subsampling), written to
``OUT/<shift>/<severity>/<class folder>/<original file name>``, the name kept when its extension is a JPEG one
(a ``.png`` source becomes ``.jpg``). ``image_format`` (png, jpeg, webp) and ``quality`` set the encoding with
or without the preset. Before any work, ``announce`` (the CLI prints it) is told the number of files and
their estimated size, from encoding the first sample under each shift.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..files import atomic_path, check_apart, make_folder, remove_stale_temps, write_atomic
from ..registry import SHIFTS
from ..seeds import check_seed
from ..severity import Severity, check, label, parse
from .spec import EngineSection, PreprocessSection, preprocess_section
from .kernel import Condition, Loader

MANIFEST = "manifest.jsonl"
JOURNAL = "manifest.partial.jsonl"
CONFIG = "generate.json"
CHUNK = 16
log = logging.getLogger("shiftbench.generate")

IMAGE_FORMATS = ("png", "jpeg", "webp")
SUFFIX = {"png": ".png", "jpeg": ".jpg", "webp": ".webp"}
_NAMED = {"png": (".png",), "jpeg": (".jpg", ".jpeg", ".jpe"), "webp": (".webp",)}  # suffixes kept by a preset
# the published procedures generate reproduces: preprocessing, encoding, and the file naming of the layout
PROTOCOLS = {
    # hendrycks/robustness ImageNet-C/create_c/make_imagenet_c.py: trn.Resize(256), trn.CenterCrop(224), the
    # corruption, Image.fromarray(np.uint8(img)).save(<corruption>/<severity>/<wnid>/<file name>, quality=85,
    # optimize=True)
    "imagenet-c": {"resize": 256, "crop": 224, "interpolation": "bilinear", "image_format": "jpeg", "quality": 85},
}



def parse_severities(text: str | float | Sequence[float], where: str = "severity") -> list[Severity]:
    """'3' -> [3]; '1-5' -> [1..5]; '1,3,5' -> [1, 3, 5]; '1-2:0.5' -> [1, 1.5, 2] (a grid, ends included),
    read by the one parser of written severities (``shiftbench.severity.parse``); sorted, a severity given
    twice ('1-3,2') run once. Each shift's range and dial are checked by :func:`generate`.

    >>> parse_severities("1-2:0.5"), parse_severities("3,1-2")
    ([1, 1.5, 2], [1, 2, 3])
    """
    if isinstance(text, str):  # each comma part on its own: an overlap of parts is run once, as always
        return sorted({v for part in text.split(",") for v in parse(part.strip(), where)})
    return sorted(set(parse(text, where)))


def resolve_shifts(items: Iterable[str]) -> list[str]:
    """Expand shift names, comma lists, globs and groups.

    Groups (``shifts.groups``): ``all`` (ImageNet-C's 19), ``common`` (its 15), ``noise``, ``blur``,
    ``weather``, ``digital``, ``extra``, ``cbar`` (ImageNet-C-bar's 10); any other ``group`` of the registry
    (``text``, ``background``, ``attribute``) works the same way.
    """
    from ..shifts.groups import group_members

    names: list[str] = []
    for item in items:
        for word in (w.strip() for w in str(item).split(",")):
            if not word:
                continue
            members = group_members(word)
            if members is not None:
                found = members
            elif any(ch in word for ch in "*?["):
                found = SHIFTS.names(word)
                if not found:
                    raise ShiftbenchError(f"no shift matches {word!r}")
            else:
                SHIFTS.entry(word)  # unknown names raise with "did you mean"
                found = [word]
            names.extend(n for n in found if n not in names)
    if not names:
        raise ShiftbenchError("no shift given")
    return names


@dataclass(frozen=True)
class _Job:
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
    if dot and stem and f".{ext.lower()}" in _NAMED.get(fmt or "", ()):
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
            from ..datasets.common import shown  # names from the data, on one line

            raise ShiftbenchError(
                f"generate: {shown(a or dataset.sample_id(j))} and {shown(b or dataset.sample_id(i))} would both be "
                f"written to {shown(rel)}; rename one of them (outputs are never overwritten)")
        taken[key] = i
        rels.append(rel)
    return rels


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


def _encode(path: Path, image: np.ndarray, fmt: str, quality: int, protocol: str | None = None) -> None:
    from PIL import Image

    img = Image.fromarray(image)
    with atomic_path(path) as tmp:  # a temporary name of shiftbench's own, removed if the write fails
        img.save(tmp, **save_options(fmt, quality, protocol))


def _encoded(image: np.ndarray, fmt: str, quality: int, protocol: str | None = None) -> bytes:
    """The bytes ``_encode`` would write, in memory (same encoder settings: a shard's PNG is the folder's PNG)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, **save_options(fmt, quality, protocol))
    return buf.getvalue()


def _copy(source: Path, target: Path) -> None:
    """Copy a file's bytes through a temporary file, so a kill never leaves half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, Path(source).read_bytes())


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


_worker_cache: dict[tuple, Any] = {}


def _open_dataset(name: str, kwargs: dict[str, Any], limit: int | None):
    from ..datasets import load

    key = (name, json.dumps(kwargs, sort_keys=True, default=str), limit)
    if key not in _worker_cache:
        _worker_cache.clear()
        _worker_cache[key] = load(name, limit=limit, **kwargs)
    return _worker_cache[key]


def _run_job(job: _Job) -> list[dict[str, Any]]:
    """Shift one chunk of samples and write their outputs; returns their manifest records."""
    import importlib

    for module in job.modules:  # a fresh (Ray) worker registers the user's shift or dataset this way
        importlib.import_module(module)
    dataset = _open_dataset(job.dataset, job.dataset_kwargs, job.limit)
    shift = SHIFTS.create(job.shift, **job.shift_params)
    # the run kernel's loader, as evaluation reads (same per-sample generators, the same narrowing of a
    # failed batch); with on_error: skip a file that does not decode or a sample the shift fails on gets a
    # {"skipped": reason} record
    loader = Loader(dataset, job.seed, job.on_error, "cpu", (), "generate", log_skips=False, preprocess=job.preprocess)
    read = loader.read(job.indices)
    if shift.kind != "text":
        for x in read.samples:
            if getattr(x, "image", None) is None:
                raise ShiftbenchError(f"shift {job.shift!r} needs images; record {x.id} has none")
    batch = loader.shift(Condition(job.shift, dict(job.shift_params), job.severity, shift), read)
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
            from .shards import sample_key

            record["_image"] = _encoded(out.image, job.fmt, job.jpeg_quality, job.protocol)
            record["key"] = sample_key(item.id)
            if getattr(out, "label", None) is not None and int(out.label) >= 0:
                record["label"] = int(out.label)
                record["class_name"] = out.class_name
            if getattr(out, "caption", None):
                record["caption"] = out.caption
            record["format"] = encoding
        else:
            rel = relpath(dataset, index, suffix)
            path = base / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            _encode(path, out.image, job.fmt, job.jpeg_quality, job.protocol)
            for source_file, target in (dataset.mirror_files(index) if hasattr(dataset, "mirror_files") else []):
                _copy(source_file, base / target)  # the format's annotation files, unchanged
            record["output"] = f"{job.shift}/{label(job.severity)}/{rel}"
            record["format"] = encoding
        records.append(record)
    return sorted(records, key=lambda r: r["index"])


def _read_journal(path: Path) -> list[dict[str, Any]]:
    """Records of a journal; a torn last line (killed mid-write) is dropped and truncated away."""
    if not path.exists():
        return []
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(keep)
    records = []
    for number, line in enumerate(data[:keep].decode("utf-8", errors="replace").splitlines(), 1):
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:
            record = ""
        if record is None:
            continue
        if not isinstance(record, dict):
            raise ShiftbenchError(f"{path}: line {number} is not a manifest record; the folder's outputs cannot be "
                                  f"resumed: use another --out")
        records.append(record)
    return records


def data_paths(dataset: Any) -> list[Path]:
    """The files and folders a dataset reads (its root, a COCO annotation file): no output may go there."""
    paths = []
    for reader in dict.fromkeys((dataset, base_of(dataset)), None):
        for attr in ("root", "annotation_file"):
            value = getattr(reader, attr, None)
            if isinstance(value, (str, os.PathLike)) and str(value):
                paths.append(Path(value))
    return paths


@dataclass(frozen=True)
class _Claim:
    """What a run made of its out folder before any output: undone by :func:`_release` if it writes none."""
    out: Path
    made_out: bool  # the out folder did not exist
    fresh: bool  # the settings file is this run's: no earlier run wrote here
    folders: tuple[Path, ...]  # OUT/<shift> folders, none of which existed


def _claim_out(out: Path, config: dict[str, Any], folders: Sequence[str]) -> _Claim:
    """Make ``out`` this run's: the settings file of an earlier run must equal ``config`` (it resumes); a folder
    without one must not hold any name generate writes (the manifest, the journal, a shift's folder), so no
    file of the user's is ever replaced. Refusals come before anything is written."""
    made = make_folder(out, "generate")
    config_path = out / CONFIG
    if config_path.exists() or config_path.is_symlink():
        previous = _read_settings(config_path)
        if previous != config:
            raise ShiftbenchError(
                f"{out}: holds outputs generated with other settings ({_diff(previous, config)}); use another --out"
            )
        return _Claim(out, made, False, ())
    taken = [name for name in dict.fromkeys([MANIFEST, JOURNAL, *folders])
             if (out / name).exists() or (out / name).is_symlink()]
    if taken:
        raise ShiftbenchError(f"generate: {out} already holds {', '.join(taken)} but no {CONFIG} of an earlier "
                              f"generate run; files are never replaced: use a new or empty --out")
    try:
        write_atomic(config_path, json.dumps(config, sort_keys=True, indent=1))
    except OSError as exc:
        if made:
            out.rmdir()
        raise ShiftbenchError(f"generate: cannot write {config_path} ({exc.strerror or type(exc).__name__})") from None
    return _Claim(out, made, True, tuple(out / name for name in dict.fromkeys(folders)))


def _read_settings(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ShiftbenchError(f"{path}: not a generate settings file ({type(exc).__name__}); use another "
                              f"--out") from None
    if not isinstance(value, dict):
        raise ShiftbenchError(f"{path}: not a generate settings file (not a JSON object); use another --out")
    return value


def _release(claim: _Claim) -> None:
    """After a failed run that journaled no output: remove what it made (its settings file, empty journal,
    shift folders, the out folder it created), so that a retry with any settings starts afresh. A run that
    journaled outputs keeps everything for its resume. Never raises: the run's own error is the one to see."""
    out = claim.out
    if not claim.fresh:
        return
    try:
        journal = out / JOURNAL
        if (out / MANIFEST).exists() or (journal.exists() and journal.read_bytes().strip()):
            return
        for folder in claim.folders:  # none existed before this run: every file in them is its own
            if folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder)
        journal.unlink(missing_ok=True)
        (out / CONFIG).unlink(missing_ok=True)
        remove_stale_temps(out, recursive=False)
        if claim.made_out and not any(out.iterdir()):
            out.rmdir()
    except OSError:
        pass


def generate(
    dataset: str, shifts: Sequence[str], severities: Sequence[float], out: str | os.PathLike,
    workers: int = 1, seed: int = 0, limit: int | None = None, fmt: str = "png", jpeg_quality: int = 95,
    shift_params: dict[str, Any] | None = None, dataset_kwargs: dict[str, Any] | None = None,
    progress: bool = False, on_error: str = "fail", engine: str = "local", address: str | None = None,
    shard_size: int = CHUNK, layout: str = "folder", shard_samples: int = 1000,
    resize: int | None = None, crop: int | Sequence[int] | None = None, interpolation: str | None = None,
    protocol: str | None = None, image_format: str | None = None, quality: int | None = None,
    announce: Callable[[str], None] | None = None,
) -> dict[str, int]:
    """Apply each shift at each severity to every sample of ``dataset``; see the module docstring.

    ``engine``: ``"local"`` (this machine, ``workers`` processes) or ``"ray"`` (Ray tasks per shard of
    ``shard_size`` sample indices, model-loading shifts on a pool of actors; ``address`` joins an existing
    cluster, none starts a local one on ``workers`` CPUs). The bytes written do not depend on the engine,
    the worker count or the shard size.

    ``layout``: ``"folder"`` (the mirrored tree above), ``"webdataset"`` (tar shards) or ``"parquet"``
    (Parquet files) of at most ``shard_samples`` samples each, with the manifest records inside; see
    :mod:`shiftbench.engine.shards`. ``image_format`` (png, jpeg or webp; ``fmt`` its older name) and ``quality``
    (``jpeg_quality``) set the encoding in every layout; ``resize``, ``crop``, ``interpolation``, ``protocol``
    and ``announce``: see the module docstring.

    Returns counts: ``written`` (outputs made now), ``skipped`` (already done by an earlier,
    interrupted run), ``total`` (manifest records) and ``unreadable`` (source files, and samples the
    shift failed on, left out by ``on_error="skip"``).
    """
    seed = check_seed(seed)  # the one seed domain (seeds.py); the manifest records this int
    preprocess, fmt, jpeg_quality = _encoding_and_preprocess(protocol, resize, crop, interpolation, fmt, jpeg_quality,
                                                             image_format, quality, layout)
    _check_options(engine, address, shard_size, fmt, layout, shard_samples)
    out = Path(out)
    shift_params = dict(shift_params or {})
    ds, dataset_kwargs = _open_source(dataset, dataset_kwargs, limit, on_error, out)
    n = len(ds)
    plan, uses_model, user_modules = _plan(ds, shifts, severities, shift_params)
    _check_outputs_fit(ds, shifts, str(dataset), layout, fmt, preprocess, protocol)
    base = base_of(ds)  # a limit wraps the reader; its screen saw every file
    unreadable = [{"source": name, "skipped": reason} for name, reason in getattr(base, "skipped", [])]
    config = _settings(str(dataset), dataset_kwargs, limit, seed, fmt, jpeg_quality, shift_params, layout,
                       shard_samples, preprocess, protocol)
    folders = [name for name in shifts if _writes_files(name)]  # text shifts write none
    if announce is not None and folders:
        announce(expected_output(ds, plan, uses_model, shift_params, seed, preprocess, fmt, jpeg_quality, protocol,
                                 on_error))
    claim = _claim_out(out, config, folders)
    try:
        done = _resume(out, folders)
        sharded_plan = {(name, severity) for name, severity in plan if layout != "folder" and _writes_files(name)}
        todo, skipped = _todo(plan, sharded_plan, n, shard_samples, done, out)
        jobs = [_Job(str(dataset), dataset_kwargs, limit, name, shift_params, severity,
                     tuple(indices[start:start + shard_size]), seed, str(out), fmt, jpeg_quality, on_error,
                     user_modules, layout if (name, severity) in sharded_plan else "folder", preprocess, protocol)
                for name, severity, indices in todo for start in range(0, len(indices), shard_size)]
        classes = _class_lists(ds, out, layout, sharded_plan)
        # records of shards not yet complete, by (shift, severity, shard number): written whole when complete
        pending: dict[tuple[str, Severity, int], dict[int, dict]] = {}

        def collect(records: list[dict]) -> list[dict]:
            return _collect_shards(records, pending, out, layout, sharded_plan, n, shard_samples, fmt, classes)

        written = _run_and_journal(jobs, uses_model, collect, done, out / JOURNAL, progress, engine, workers, address)
        if pending:  # every job returned, so every shard is complete; anything left is a bug, never silently lost
            raise ShiftbenchError(f"generate: {len(pending)} shard(s) incomplete after every job returned")
        _write_indexes(ds, out, [p for p in plan if p not in sharded_plan], done)  # shards hold their own
        _finalise_manifest(out, done, unreadable)
        failed = {r["index"] for r in done.values() if "skipped" in r}
        return {"written": written, "skipped": skipped, "total": len(done) + len(unreadable),
                "unreadable": len(unreadable) + len(failed)}
    except BaseException:
        _release(claim)
        raise


def _writes_files(shift: str) -> bool:
    """Whether a shift writes output files: every kind but text (a text shift's record carries its text)."""
    return SHIFTS.entry(shift).resolve().kind != "text"


def _check_options(engine: str, address: str | None, shard_size: int, fmt: str, layout: str,
                   shard_samples: int) -> None:
    """Refuse a bad engine, address, shard size, image format or layout before the data is read."""
    from .shards import LAYOUTS

    EngineSection().with_overrides(name=engine, address=address)  # a known engine; an address only for ray
    if engine == "ray" and address and address != "auto":
        from .engines import check_reachable

        check_reachable(address)  # before any work: a wrong address is one line in seconds
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise ShiftbenchError(f"shard_size must be a positive int, got {shard_size!r}")
    if fmt not in IMAGE_FORMATS:
        raise ShiftbenchError(f"image format {fmt!r}: expected one of {', '.join(IMAGE_FORMATS)}")
    if layout not in LAYOUTS:
        raise ShiftbenchError(f"output format {layout!r}: expected one of {', '.join(LAYOUTS)}")
    if isinstance(shard_samples, bool) or not isinstance(shard_samples, int) or shard_samples < 1:
        raise ShiftbenchError(f"shard_samples must be a positive int, got {shard_samples!r}")


def _open_source(dataset: str, dataset_kwargs: dict[str, Any] | None, limit: int | None, on_error: str,
                 out: Path) -> tuple[Any, dict[str, Any]]:
    """The dataset, opened afresh, and the reader arguments it was opened with; refused when empty or when
    ``out`` overlaps the data."""
    from ..datasets import reader_kwargs

    given = Path(str(dataset)).expanduser()
    if given.exists():  # before the data is even read: outputs never land in (or around) the source
        check_apart(out, [given], "generate")
    # skip mode screens headers up front (cheap); a file that fails only when decoded is skipped by its job
    dataset_kwargs = reader_kwargs(str(dataset), dict(dataset_kwargs or {}), on_error, verify="header")
    _worker_cache.clear()  # a folder may have changed since an earlier call in this process: list it afresh
    ds = _open_dataset(str(dataset), dataset_kwargs, limit)
    if len(ds) == 0:
        raise ShiftbenchError(f"dataset {dataset!r} has no samples")
    check_apart(out, data_paths(ds), "generate")  # a registered dataset's own folder too
    return ds, dataset_kwargs


def _plan(ds: Any, shifts: Sequence[str], severities: Sequence[float],
          shift_params: dict[str, Any]) -> tuple[list[tuple[str, Severity]], dict[str, bool], tuple[str, ...]]:
    """Every (shift, severity) to run, each severity checked against the shift's range and, when fractional,
    its dial (``shiftbench.severity.check``) and kept canonical (3, 2.5); whether each shift loads a model;
    the modules a worker must import to find the dataset's and shifts' classes."""
    plan: list[tuple[str, Severity]] = []
    uses_model: dict[str, bool] = {}
    modules = {m for m in (type(ds).__module__, type(base_of(ds)).__module__)}
    for name in shifts:
        shift = SHIFTS.create(name, **shift_params) if shift_params else SHIFTS.create(name)
        uses_model[name] = shift.uses_model
        modules.add(type(shift).__module__)
        lo, hi = shift.severities
        for severity in check(severities, lo, hi, bool(getattr(shift, "continuous", False)), "generate", name):
            plan.append((name, shift.check_severity(severity)))
    # only modules a worker can import by name; shiftbench's own register themselves on import
    user_modules = tuple(sorted(m for m in modules if m != "__main__" and not m.startswith("shiftbench.")))
    return plan, uses_model, user_modules


def _check_outputs_fit(ds: Any, shifts: Sequence[str], dataset: str, layout: str, fmt: str,
                      preprocess: PreprocessSection | None = None, protocol: str | None = None) -> None:
    """Before any work: a shard layout holds no annotation files and no two samples share a shard key; a folder
    run overwrites nothing and keeps what the annotations describe, which preprocessing would not (the files
    are copied as they are); a protocol's layout has a class folder and file name for every image. Text shifts
    write no files."""
    if not any(_writes_files(name) for name in shifts):
        return
    if preprocess is not None and getattr(ds, "mirror_keeps", frozenset()):
        raise ShiftbenchError(f"generate --resize/--crop: {dataset} has annotation files (boxes, masks) that generate "
                              f"copies unchanged, so they would not match the resized images; preprocess it in a "
                              f"run's spec instead (preprocess:), where the annotations follow the image")
    if protocol is not None:
        check_collisions(ds, SUFFIX[fmt], protocol_relpath)  # every image named, none overwritten
        return
    if layout != "folder":
        from .shards import check_keys

        if getattr(ds, "mirror_keeps", frozenset()):
            raise ShiftbenchError(f"generate --format {layout}: {dataset} has annotation files (boxes, masks) that a "
                                  f"{layout} shard does not hold (image + label only); use --format folder")
        if layout == "webdataset":  # a member's name is the key; a Parquet row keeps the id itself, whatever it is
            check_keys(ds)  # before any work: two samples never share a shard key
    else:
        check_collisions(ds, SUFFIX[fmt])  # before any work: never overwrite
        check_annotations_kept(ds, shifts, dataset)


def _settings(dataset: str, dataset_kwargs: dict[str, Any], limit: int | None, seed: int, fmt: str,
              jpeg_quality: int, shift_params: dict[str, Any], layout: str, shard_samples: int,
              preprocess: PreprocessSection | None = None, protocol: str | None = None) -> dict[str, Any]:
    """The run's settings file (generate.json): a later run resumes only with equal settings."""
    config = {"dataset": dataset, "dataset_kwargs": dataset_kwargs, "limit": limit, "seed": seed,
              "format": fmt, "jpeg_quality": jpeg_quality if fmt == "jpeg" else None, "shift_params": shift_params}
    if fmt == "webp":
        config["quality"] = jpeg_quality
    if layout != "folder":  # a folder run's settings file stays as it was
        config.update(layout=layout, shard_samples=shard_samples)
    # absent when unset, so that an earlier run's folder still resumes with the same options
    if preprocess is not None:
        config["preprocess"] = preprocess.as_dict()
    if protocol is not None:
        config["protocol"] = protocol
    return config


def _encoding_and_preprocess(protocol: str | None, resize: Any, crop: Any, interpolation: Any, fmt: str,
                             jpeg_quality: int, image_format: str | None, quality: int | None,
                             layout: str) -> tuple[PreprocessSection | None, str, int]:
    """The preprocessing, image format and quality a generate call asks for: a protocol's (PROTOCOLS), with
    ``image_format`` and ``quality`` on top when given; else ``resize`` / ``crop`` / ``interpolation`` and the
    format (``image_format``, or the older ``fmt``) with ``quality`` (or the older ``jpeg_quality``). Checked
    with a spec's messages (``generate.resize: ...``)."""
    from ..errors import SpecError

    given = {k: v for k, v in (("resize", resize), ("crop", crop), ("interpolation", interpolation)) if v is not None}
    if isinstance(given.get("crop"), tuple):
        given["crop"] = list(given["crop"])
    if protocol is not None:
        if protocol not in PROTOCOLS:
            raise ShiftbenchError(f"protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        preset = PROTOCOLS[protocol]
        def norm(key: str, value: Any) -> Any:  # a crop of 224 and of [224, 224] are the same
            return ([value, value] if isinstance(value, int) else list(value)) if key == "crop" else value

        for key, value in given.items():
            if norm(key, value) != norm(key, preset[key]):
                raise ShiftbenchError(f"--{key} {value}: the {protocol} protocol fixes --resize {preset['resize']} "
                                      f"--crop {preset['crop']} --interpolation {preset['interpolation']}; drop --{key}, "
                                      f"or drop --protocol and give all three")
        if layout != "folder":
            raise ShiftbenchError(f"--protocol {protocol} writes {protocol}'s folder layout; drop --format {layout}")
        given = {"resize": preset["resize"], "crop": preset["crop"], "interpolation": preset["interpolation"]}
        fmt, jpeg_quality = image_format or preset["image_format"], preset["quality"] if quality is None else quality
    else:
        fmt = image_format or fmt
        jpeg_quality = jpeg_quality if quality is None else quality
    try:
        section = preprocess_section(given, "generate")
    except SpecError as exc:
        raise ShiftbenchError(str(exc)) from None
    if isinstance(jpeg_quality, bool) or not isinstance(jpeg_quality, int) or not 1 <= jpeg_quality <= 100:
        raise ShiftbenchError(f"quality {jpeg_quality!r}: expected an integer in 1..100")
    return section, fmt, jpeg_quality


def expected_output(ds: Any, plan: Sequence[tuple[str, int]], uses_model: dict[str, bool], shift_params: dict[str, Any],
                    seed: int, preprocess: PreprocessSection | None, fmt: str, quality: int,
                    protocol: str | None = None, on_error: str = "fail") -> str:
    """One line saying, before any work, how many files the plan writes and about how many bytes: the first
    sample, preprocessed, encoded under each shift at its middle planned severity (a shift that loads a model
    is estimated by the clean image's encoding), times the samples and severities."""
    files = [(name, severity) for name, severity in plan if _writes_files(name)]
    severities: dict[str, list[Severity]] = {}
    for name, severity in files:
        severities.setdefault(name, []).append(severity)
    # with on_error: fail a first image the preprocessing refuses (a crop larger than it) stops here, before any work
    read = Loader(ds, seed, on_error, "cpu", (), "generate", log_skips=False, preprocess=preprocess).read([0])
    first = read.samples[0] if read.samples else None
    n_sev = len({severity for _, severity in files})
    count = (f"{len(ds)} image(s) x {len(severities)} shift(s) x {n_sev} severit{'y' if n_sev == 1 else 'ies'} = "
             f"{len(files) * len(ds)} files")
    how = format_label(fmt, quality, protocol) + (f"; {preprocess.describe()}" if preprocess is not None else "")
    if first is None:
        return f"generate: {count} ({how}); size not estimated (the first image could not be read)"
    clean = len(_encoded(first.image, fmt, quality, protocol))
    total = 0
    for name, sevs in severities.items():
        size = clean
        if not uses_model.get(name):
            severity = sorted(sevs)[len(sevs) // 2]
            shift = SHIFTS.create(name, **shift_params) if shift_params else SHIFTS.create(name)
            try:
                out = Loader(ds, seed, "skip", "cpu", (), "generate", log_skips=False).shift(
                    Condition(name, dict(shift_params), severity, shift), read)
                if out.samples:
                    size = len(_encoded(out.samples[0].image, fmt, quality, protocol))
            except ShiftbenchError:
                pass
        total += size * len(sevs) * len(ds)
    h, w = first.image.shape[:2]
    return (f"generate: {count}, about {_human_bytes(total)} (estimated from the first image, {w}x{h}, encoded "
            f"under each shift); {how}")


def _human_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def _resume(out: Path, folders: Sequence[str]) -> dict[tuple[str, Severity, int], dict]:
    """Remove a killed run's temporary files where generate writes, and return the records an earlier run
    finished (manifest and journal) by (shift, severity, index)."""
    for folder in [out, *(out / name for name in folders)]:  # where generate writes, and nowhere else
        remove_stale_temps(folder, recursive=folder != out)  # a killed run's temporary files, by their name
    done: dict[tuple[str, Severity, int], dict] = {}
    for record in _read_journal(out / MANIFEST) + _read_journal(out / JOURNAL):
        if "shift" in record:  # not the screen's records of unreadable files: the screen redoes those
            done[(record["shift"], record["severity"], record["index"])] = record
    return done


def _todo(plan: Sequence[tuple[str, int]], sharded_plan: set[tuple[str, int]], n: int, shard_samples: int,
          done: dict[tuple[str, Severity, int], dict], out: Path) -> tuple[list[tuple[str, Severity, list[int]]], int]:
    """The sample indices still to do for each (shift, severity) of the plan, and how many are done already
    (journaled, with their output file in place)."""
    def is_done(name: str, severity: Severity, i: int) -> bool:
        record = done.get((name, severity, i))
        return record is not None and ("output" not in record or (out / record["output"]).exists())

    todo: list[tuple[str, int, list[int]]] = []
    skipped = 0
    for name, severity in plan:
        indices: list[int] = []
        if (name, severity) in sharded_plan:  # a shard is redone whole unless every sample of it is done
            for start in range(0, n, shard_samples):
                block = range(start, min(n, start + shard_samples))
                if all(is_done(name, severity, i) for i in block):
                    skipped += len(block)
                else:
                    indices.extend(block)
        else:
            for i in range(n):
                if is_done(name, severity, i):
                    skipped += 1
                else:
                    indices.append(i)
        todo.append((name, severity, indices))
    return todo, skipped


def _class_lists(ds: Any, out: Path, layout: str, sharded_plan: set[tuple[str, int]]) -> list[str] | None:
    """The class identifiers a sharded run stores (None without shards); written beside each webdataset folder's
    shards, where the tar reader finds the label space (Parquet keeps it in its schema)."""
    if not sharded_plan:
        return None
    from .shards import class_identifiers, write_classes

    classes = class_identifiers(ds)
    if layout == "webdataset":
        for name, severity in sorted(sharded_plan):
            write_classes(out / name / label(severity), classes)
    return classes


def _run_and_journal(jobs: Sequence[_Job], uses_model: dict[str, bool],
                     collect: Callable[[list[dict]], list[dict]], done: dict[tuple[str, Severity, int], dict],
                     journal_path: Path, progress: bool, engine: str, workers: int, address: str | None) -> int:
    """Run the jobs, CPU shifts before model-loading ones, and journal every finished record (once ``collect``
    has written its shard, if any) into ``done``; returns how many outputs were written."""
    written = 0
    total = sum(len(j.indices) for j in jobs)
    with _progress(progress, total, "generate") as advance, open(journal_path, "a", encoding="utf-8") as journal:
        def record_all(records: list[dict]) -> None:
            nonlocal written
            advance(len(records))  # the unit is done, although its shard may be written later
            written += _journal(journal, collect(records), done)

        if jobs:
            from .engines import make_engine

            # the driver (this process) is the only writer of the journal and the manifest; the engine's
            # workers write only their own output files, each through a temporary file and a rename
            with make_engine(engine, workers=workers, address=address) as runner:
                for stage in ("cpu", "model"):
                    staged = [j for j in jobs if uses_model[j.shift] == (stage == "model")]
                    for _, records in runner.imap(_run_job, staged, stage=stage):
                        record_all(records)
    return written


def _journal(journal: Any, records: list[dict], done: dict[tuple[str, Severity, int], dict]) -> int:
    """Append records to the open journal, synced to disk, and to ``done``; returns how many are outputs."""
    for record in records:
        if "skipped" in record:  # logged here, not by the worker: a Ray worker's log never reaches the user
            log.warning(f"skipped sample {record['id']} (shift {record['shift']!r}, severity "
                        f"{record['severity']}): {record['skipped']}")
        journal.write(json.dumps(record, sort_keys=True) + "\n")
        done[(record["shift"], record["severity"], record["index"])] = record
    journal.flush()
    os.fsync(journal.fileno())
    return sum("skipped" not in r for r in records)


def _collect_shards(records: list[dict], pending: dict[tuple[str, Severity, int], dict[int, dict]], out: Path,
                    layout: str, sharded_plan: set[tuple[str, int]], n: int, shard_samples: int, fmt: str,
                    classes: Sequence[str] | None) -> list[dict]:
    """Hold a work unit's records of sharded (shift, severity) pairs until their shard is complete, then write
    the shard (temporary file + rename) and return its records for the journal; other records pass through.

    Only the driver runs this, so it is the only writer of shards. Records are journaled after their shard is
    in place, so a killed run's journal lists only complete shards (a resume redoes the others whole).
    """
    from .shards import parquet_bytes, shard_name, webdataset_bytes, write_atomic

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


def base_of(dataset: Any) -> Any:
    """The reader below a ``limit`` wrapper (the wrapper keeps it as ``base``)."""
    return getattr(dataset, "base", dataset)


def _write_indexes(dataset: Any, out: Path, plan: Sequence[tuple[str, int]],
                   done: dict[tuple[str, Severity, int], dict]) -> None:
    """Each image (shift, severity) folder's annotation index (COCO json, VOC list), from its written records.

    Rewritten whole by every run, resumed or not, before the manifest: a folder with a final manifest is complete.
    """
    if not hasattr(dataset, "write_mirror_index"):
        return
    for name, severity in plan:
        if not _writes_files(name):
            continue  # a text shift writes no folder
        prefix = f"{name}/{label(severity)}/"
        written = {k[2]: r["output"][len(prefix):] for k, r in done.items()
                   if k[0] == name and k[1] == severity and "output" in r}
        dataset.write_mirror_index(out / name / label(severity), written)


def _finalise_manifest(out: Path, done: dict[tuple[str, Severity, int], dict], unreadable: Sequence[dict] = ()) -> None:
    """The manifest in canonical order: files the screen left out first, then every (shift, severity, index)."""
    records = sorted(unreadable, key=lambda r: r["source"])
    records += [done[k] for k in sorted(done, key=lambda k: (k[0], k[1], k[2]))]
    with atomic_path(out / MANIFEST) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    journal = out / JOURNAL
    if journal.exists():
        journal.unlink()


def _diff(a: dict, b: dict) -> str:
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys)


class _progress:
    """A rich progress bar when asked (and more than a handful of items), else a no-op."""

    def __init__(self, enabled: bool, total: int, label: str):
        self.enabled = enabled and total > 0
        self.total, self.label = total, label

    def __enter__(self):
        if not self.enabled:
            return lambda k: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), transient=False)
        self._bar.__enter__()
        task = self._bar.add_task(self.label, total=self.total, rate="")

        def advance(k: int) -> None:
            self._bar.update(task, advance=k)
            speed = self._bar.tasks[0].speed
            if speed:
                self._bar.update(task, rate=f"{speed:.1f}/s")

        return advance

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self._bar.__exit__(*exc)
