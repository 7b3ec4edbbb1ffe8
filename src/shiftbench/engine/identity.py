"""Run identity: fingerprints of what decides a run's numbers (version, weights, ids file, dataset).

A run resumes only when its identity is unchanged; otherwise the store names what changed in one line
(:func:`shiftbench.results.identity.describe_changes`). A single input file (an ids list, a contexts table, a
COCO annotation json, any file-valued dataset parameter) is identified by the SHA-256 of its bytes, read on
every run (:func:`file_sha256`): no cache keyed by its size and times, which an edit in place that keeps both
(``os.utime``, a copy with ``cp -p``, a coarse clock) would leave stale, so an edited file never resumes an
old run. Weight files alone are hashed once and the digest cached (:func:`weights_sha256`), so a 500 MB
checkpoint is read on the first run only; the cache is keyed by the file's size, mtime and ctime, device and
inode, and ctime is set by the system on every write and on every change of the times. A dataset folder is
fingerprinted from its file list, sizes and mtimes (``stat`` only, no image is read).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

from ..datasets.generated import generated_origin
from ..files import write_atomic
from .provenance import package_version

__all__ = ["file_sha256", "weights_sha256", "tree_fingerprint", "path_fingerprint", "model_fingerprint",
           "dataset_fingerprint", "run_identity"]

_CHUNK = 1 << 20
_MEMO: dict[tuple[Any, ...], str] = {}


def _cache_dir() -> Path:
    return Path(os.environ.get("SHIFTBENCH_CACHE", Path.home() / ".cache" / "shiftbench")) / "hashes"


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, read now (what ``sha256sum`` prints): the identity of an input file."""
    digest = hashlib.sha256()
    with open(Path(path), "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def weights_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a weight file, cached in memory and on disk by (absolute path, size, mtime_ns, ctime_ns,
    device, inode): an edit in place changes ctime even when it restores the size and mtime."""
    path = Path(path).resolve()
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_dev, st.st_ino)
    if key in _MEMO:
        return _MEMO[key]
    slot = _cache_dir() / (hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32] + ".txt")
    try:
        cached = slot.read_text().strip()
    except OSError:
        cached = ""
    if len(cached) == 64:
        _MEMO[key] = cached
        return cached
    value = file_sha256(path)
    _MEMO[key] = value
    try:  # the cache is an optimisation: a read-only home must not stop a run
        slot.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(slot, value)
    except OSError:
        pass
    return value


def tree_fingerprint(root: str | os.PathLike) -> dict[str, Any]:
    """A folder's file list with sizes and mtimes, hashed (hidden entries skipped, no file is read)."""
    root = Path(root)
    digest = hashlib.sha256()
    files = total = 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = Path(folder) / name
            try:
                st = path.stat()
            except OSError:
                continue  # a dangling link: the reader reports it, the fingerprint need not
            rel = path.relative_to(root).as_posix()
            digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            files += 1
            total += st.st_size
    return {"files": files, "bytes": total, "sha256": digest.hexdigest()}


def path_fingerprint(path: str | os.PathLike) -> dict[str, Any] | None:
    """``tree_fingerprint`` for a folder, the SHA-256 of a file, None for anything else."""
    path = Path(path)
    if path.is_dir():
        return tree_fingerprint(path)
    if path.is_file():
        return {"files": 1, "bytes": path.stat().st_size, "sha256": file_sha256(path)}
    return None


def _combined(paths: Iterable[str | os.PathLike]) -> str:
    """One file: its own SHA-256 (what ``sha256sum`` prints); several: a digest of (name, SHA-256) pairs."""
    paths = list(paths)
    if len(paths) == 1:
        return weights_sha256(paths[0])
    digest = hashlib.sha256()
    for p in sorted(str(Path(p).resolve()) for p in paths):
        digest.update(f"{Path(p).name}\0{weights_sha256(p)}\n".encode())
    return digest.hexdigest()


def model_fingerprint(model: Any) -> dict[str, Any]:
    """What identifies a model's weights: the SHA-256 of the files it loaded (``model.weight_files()``),
    else of its torch module's parameters and buffers, else its name only (a model without weights); with the
    generation settings of a model that generates its answers (``generation``: greedy or not, tokens at most)."""
    out = _weights_fingerprint(model)
    generation = getattr(model, "generation", None)
    if isinstance(generation, dict) and generation:
        out["generation"] = {str(k): generation[k] for k in sorted(generation)}
    return out


def _weights_fingerprint(model: Any) -> dict[str, Any]:
    files = getattr(model, "weight_files", None)
    paths = [Path(p) for p in (files() if callable(files) else [])]
    paths = [p for p in paths if p.is_file()]
    if paths:
        return {"weights": _combined(paths), "from": "files", "files": sorted(p.name for p in paths)}
    module = getattr(model, "module", None)
    if module is not None and hasattr(module, "state_dict"):
        import torch

        digest = hashlib.sha256()
        for key, tensor in sorted(module.state_dict().items()):
            digest.update(f"{key}\0{tuple(tensor.shape)}\0{tensor.dtype}\n".encode())
            # raw bytes whatever the dtype (bfloat16 has no NumPy twin)
            digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        return {"weights": digest.hexdigest(), "from": "parameters"}
    return {"weights": None, "from": "none"}


def dataset_fingerprint(name: str, params: dict[str, Any], dataset: Any) -> dict[str, Any]:
    """A dataset's identity: its files (for a path and any path-valued parameter) and the sample ids
    the run reads; a registered dataset's own ``fingerprint()`` when it has one (built-in data is
    versioned with shiftbench itself); for a folder written by ``shiftbench generate``, ``generated``: the
    shift and severity it was made under (``datasets.generated.generated_origin``), so that the report
    labels the run's unshifted condition with them rather than as clean."""
    out: dict[str, Any] = {"name": name}
    own = getattr(dataset, "fingerprint", None)
    if callable(own):
        out["own"] = own()
    sources = {"root": name, **{k: v for k, v in params.items() if isinstance(v, (str, os.PathLike))}}
    for key, value in sources.items():
        try:
            fp = path_fingerprint(value) if str(value) and Path(value).exists() else None
        except OSError:
            fp = None
        if fp is not None:
            out[key] = fp
        origin = generated_origin(value) if str(value) and "generated" not in out else None
        if origin is not None:  # a generate output read back: the shift and severity its images were made under
            out["generated"] = origin
    ids = hashlib.sha256("\n".join(str(dataset.sample_id(i)) for i in range(len(dataset))).encode())
    out["samples"] = len(dataset)
    out["sample_ids"] = ids.hexdigest()
    return out


def run_identity(spec: Any, dataset: Any, models: dict[str, Any]) -> dict[str, Any]:
    """Everything besides the spec text that decides a run's numbers."""
    ids = None
    if getattr(spec, "ids", None):
        ids_path = Path(spec.ids)
        ids = {"path": str(spec.ids), "sha256": file_sha256(ids_path)} if ids_path.is_file() else None
    decision = getattr(dataset, "decision_map", None)
    return {
        "shiftbench": package_version("shiftbench"),
        "dataset": dataset_fingerprint(spec.dataset, dict(spec.dataset_params), dataset),
        "ids": ids,
        "models": {label: model_fingerprint(model) for label, model in models.items()},
        # how the outputs decide the dataset's categories (the 16-class mapping and its aggregation, defaults
        # included): absent for a dataset without one, so other runs keep their identity
        **({"decision": decision.as_dict()} if decision is not None else {}),
    }
