"""Shard writers for ``generate --format webdataset|parquet``: deterministic tar and Parquet shards of shifted
samples, each with its manifest records inside, written atomically by the driver.

Output shard ``k`` of a (shift, severity) holds the samples of dataset indices ``k*N .. k*N+N-1``
(``N`` = ``shard_samples``), in index order, so a shard's content depends on neither the engine, the worker
count nor the order in which work units finish. A shard is written whole (temporary file + rename) once
every sample of its range is done; a killed run leaves no half shard and redoes only unfinished ones.

WebDataset (``<shift>/<severity>/shard-000000.tar`` ...): per sample ``<key>.png`` (or ``.jpg``),
``<key>.cls`` (the label value, as text) and ``<key>.json`` (the manifest record: source id, label,
class name, shift, severity, seed, the shift's config and sampled params), ``<key>.txt`` when the sample
has a caption; ``classes.txt`` beside the shards lists the label space's identifiers (ImageNet wnids,
else class names) so the reader rebuilds the same label space; when a name would not read back as one line
of it (a line break, surrounding spaces, an empty name) the list is ``classes.json`` (a JSON list) instead.
Keys are the sample ids with ``/`` replaced by ``__`` and any other character outside ``[A-Za-z0-9_-]``
(dots included) by ``_``, and two ids with one key are refused before any work; the
reader's id of a record is ``shard-000000/<key>``, and the record's ``.json`` (and ``manifest.jsonl``,
whose ``output`` and ``key`` fields name the shard and the key) map it back to the source id. Tar members
carry fixed metadata (mtime 0, uid/gid 0, no user names, mode 0644).

Parquet (``<shift>/<severity>/part-000000.parquet`` ...): columns ``image`` (Hugging Face ``Image``
struct: PNG bytes, path = the key), ``label`` (int64), ``class_name``, ``id`` (the source sample id),
``caption`` and ``manifest`` (the record as JSON), row groups of 100 rows, writer settings fixed here
(zstd level 3, no dictionary, no statistics); the schema's ``huggingface`` metadata declares ``label`` a
``ClassLabel`` of the label space's identifiers, and its ``shiftbench`` metadata names ``id`` as the id
column, so the parquet reader gives the source ids back unchanged, whatever they are (two ids with one key
are fine here: the key is only the image's ``path``).
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any, Sequence

from ..errors import ShiftbenchError
from ..files import write_atomic as replace_atomically
from ..install import install_command

LAYOUTS = ("folder", "webdataset", "parquet")
ROW_GROUP = 100
CLASSES_FILE = "classes.txt"
CLASSES_JSON = "classes.json"  # when a name is not one plain line of classes.txt


def shard_name(layout: str, number: int) -> str:
    return f"shard-{number:06d}.tar" if layout == "webdataset" else f"part-{number:06d}.parquet"


def sample_key(sample_id: str) -> str:
    """A tar-safe key of a sample id: no ``/`` (``__``), no ``.`` nor other odd characters (``_``).

    >>> sample_key("n01440764/ILSVRC2012_val_00000293.JPEG")
    'n01440764__ILSVRC2012_val_00000293_JPEG'
    """
    return re.sub(r"[^A-Za-z0-9_-]", "_", str(sample_id).replace("/", "__")) or "_"


def check_keys(dataset: Any) -> None:
    """Refuse, before any work, two samples whose keys would be equal (naming both ids)."""
    taken: dict[str, str] = {}
    for i in range(len(dataset)):
        sid = str(dataset.sample_id(i))
        key = sample_key(sid)
        if key in taken:
            raise ShiftbenchError(f"generate: samples {taken[key]!r} and {sid!r} would both get the shard key "
                                  f"{key!r}; rename one of them or use --format folder")
        taken[key] = sid


def class_identifiers(dataset: Any) -> list[str] | None:
    """What ``classes.txt`` / the ClassLabel names hold: wnids for ImageNet-1k (the readers then rebuild
    ImageNet-1k, slot for slot), else the class names; None for a dataset without labels."""
    space = getattr(dataset, "label_space", None)
    if space is None:
        names = getattr(dataset, "class_names", None)
        return [str(n) for n in names] if names else None
    if space.id_kind == "wnid" and space.ids:
        return list(space.ids)
    return [str(n) for n in space.class_names]


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` to ``path`` through a temporary name of shiftbench's own (files.py) and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(path, data)


def line_safe(name: str) -> bool:
    """Whether ``name`` reads back unchanged as one line of ``classes.txt`` (which is split into lines, each
    stripped): not empty, no line break of any kind, no surrounding spaces.

    >>> line_safe("tabby cat"), line_safe("a\\nb"), line_safe(" a"), line_safe("a\\u2028b")
    (True, False, False, False)
    """
    return bool(name) and name == name.strip() and name.splitlines() == [name]


def write_classes(folder: Path, classes: Sequence[str] | None) -> None:
    """The label space's names beside the shards: ``classes.txt`` (one a line) when every name is
    :func:`line_safe`, else ``classes.json`` (a JSON list: any name, exactly)."""
    if not classes:
        return
    if all(line_safe(c) for c in classes):
        write_atomic(folder / CLASSES_FILE, ("\n".join(classes) + "\n").encode("utf-8"))
    else:
        write_atomic(folder / CLASSES_JSON, (json.dumps(list(classes)) + "\n").encode("ascii"))


def manifest_of(record: dict[str, Any]) -> dict[str, Any]:
    """The record as stored inside a shard: without the image bytes and the shard's own position."""
    return {k: v for k, v in record.items() if k not in ("_image", "output", "key", "row")}


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def webdataset_bytes(records: Sequence[dict[str, Any]], suffix: str) -> bytes:
    """One tar shard of ``records`` (in the given order), byte-for-byte reproducible."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for r in records:
            key = r["key"]
            _member(tar, f"{key}{suffix}", r["_image"])
            if r.get("label") is not None:
                _member(tar, f"{key}.cls", f"{int(r['label'])}\n".encode())
            _member(tar, f"{key}.json", json.dumps(manifest_of(r), sort_keys=True).encode("utf-8"))
            if r.get("caption"):
                _member(tar, f"{key}.txt", str(r["caption"]).encode("utf-8"))
    return buf.getvalue()


def parquet_bytes(records: Sequence[dict[str, Any]], classes: Sequence[str] | None) -> bytes:
    """One Parquet file of ``records`` with fixed writer settings (row groups of 100, no statistics)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ShiftbenchError(f"generate --format parquet needs pyarrow: {install_command('stream')}") from None
    features: dict[str, Any] = {"image": {"_type": "Image"}, "label": {"_type": "Value", "dtype": "int64"},
                                "class_name": {"_type": "Value", "dtype": "string"},
                                "id": {"_type": "Value", "dtype": "string"},
                                "caption": {"_type": "Value", "dtype": "string"},
                                "manifest": {"_type": "Value", "dtype": "string"}}
    if classes:
        features["label"] = {"_type": "ClassLabel", "names": list(classes)}
    schema = pa.schema([
        ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        ("label", pa.int64()), ("class_name", pa.string()), ("id", pa.string()), ("caption", pa.string()),
        ("manifest", pa.string()),
    ], metadata={b"huggingface": json.dumps({"info": {"features": features}}, sort_keys=True).encode(),
                 b"shiftbench": json.dumps({"id_column": "id"}).encode()})
    columns = {
        "image": [{"bytes": r["_image"], "path": r["key"]} for r in records],
        "label": [r.get("label") for r in records],
        "class_name": [r.get("class_name") for r in records],
        "id": [str(r["id"]) for r in records],
        "caption": [r.get("caption") for r in records],
        "manifest": [json.dumps(manifest_of(r), sort_keys=True) for r in records],
    }
    table = pa.Table.from_pydict(columns, schema=schema)
    buf = pa.BufferOutputStream()
    # fixed settings: the same table gives the same bytes (no timestamps are written by pyarrow)
    pq.write_table(table, buf, row_group_size=ROW_GROUP, compression="zstd", compression_level=3,
                   use_dictionary=False, write_statistics=False, version="2.6")
    return buf.getvalue().to_pybytes()
