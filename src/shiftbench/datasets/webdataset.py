"""WebDataset reader: tar shards of records grouped by key (``<key>.jpg`` + ``<key>.cls`` / ``<key>.json``
[+ ``<key>.txt``]), read by random access: the shards are indexed once, ``load(i)`` seeks into one shard.

Why not the ``webdataset`` package: it is a sequential streaming pipeline (an ``IterableDataset`` that
decodes shards front to back); shiftbench needs random access by index, so that a work unit can read any
range of sample ids and a resumed run only the records it has not done. The format is plain POSIX tar,
which the standard library's :mod:`tarfile` reads: iterating the headers gives each member's data offset
and size without extracting or reading the data, so the index costs one header read per member and
``load(i)`` one ``seek`` + ``read`` of that record's members. No dependency is added.

Layout: ``root`` is one ``.tar`` file or a folder of them (found recursively, sorted by relative path,
e.g. ``shard-000000.tar``, ``shard-000001.tar``). Within a shard, a member ``dir/0001.seg.png`` has the key
``dir/0001`` and the extension ``seg.png`` (the key ends at the first dot of the base name, as in the
WebDataset convention). A record is the members of one key:

- the image: exactly one of ``jpg jpeg png webp bmp gif tif tiff ppm pgm``;
- the label: ``<key>.cls`` (an integer, or a class name, as text) or ``<key>.json`` (its ``label``,
  ``cls``, ``class``, ``class_name`` or ``wnid`` field, or a bare integer / string; a ``class_name`` or
  ``wnid`` string is a name exactly as written, never read as a number);
- optional caption: ``<key>.txt`` (or the json's ``caption``). Other members are ignored.

Class names come from ``classes=`` (a list, or a file), else ``classes.txt`` / ``classes.json`` beside the
shards; see :mod:`shiftbench.datasets.streaming` for how labels become a label space. Ids are
``<shard path without .tar>/<key>`` (``shard-000000/0001``). Member names that are absolute or contain
``..`` are refused (shiftbench never extracts, but such a shard is not trustworthy); compressed shards
(``.tar.gz``) are refused with a hint, since they cannot be read by offset. A record with a member that is
not a regular file (a symbolic or hard link, a device, a sparse file) or a label member that cannot be
read (malformed or too deeply nested JSON, a label that is a float, NaN, a list ...) is a bad record
named ``<shard>.tar:<key>`` with the member and the reason.

>>> # root/shard-000000.tar: 0001.png 0001.cls ... -> Sample(label=340, class_name="zebra", id="shard-000000/0001")
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..registry import DATASETS
from ..sample import Sample
from .common import IMAGE_EXTENSIONS, ON_ERROR, VERIFY, ReaderDataset, check_choice, check_root, parse_json, shown
from .streaming import LabelCoder, check_image_bytes, coded, decode_image_bytes, read_classes_file, report_bad

IMAGE_EXTS = tuple(e.lstrip(".") for e in IMAGE_EXTENSIONS)
LABEL_FIELDS = ("label", "cls", "class", "class_name", "wnid")
NAME_FIELDS = ("class_name", "wnid")  # their strings are names as written (never read as numbers)
CLASS_FILES = ("classes.txt", "classes.json")
_JSON_LIMIT = 1 << 20  # a label record larger than this is not a label record


def _check_end(path: Path, offset: int) -> None:
    """Refuse a shard whose member headers stop before its end: :mod:`tarfile` ends its listing quietly at
    a truncated or damaged header, which would drop every later record without a word. After the last
    member only the end-of-archive zero blocks (and zero padding) may follow."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        while chunk := fh.read(1 << 16):
            if chunk.strip(b"\0"):
                raise ShiftbenchError(f"webdataset: {shown(path)} is not a readable tar file (bytes at offset "
                                      f"{offset} are no member header: a truncated or damaged shard)")


def _kind(member: tarfile.TarInfo) -> str:
    """What a non-regular tar member is, in words (for the message that refuses its record)."""
    if member.issym():
        return f"a symbolic link (to {member.linkname!r:.60})"
    if member.islnk():
        return f"a hard link (to {member.linkname!r:.60})"
    if member.issparse():
        return "a sparse file"
    return {tarfile.CHRTYPE: "a character device", tarfile.BLKTYPE: "a block device",
            tarfile.FIFOTYPE: "a FIFO"}.get(member.type, f"of tar type {member.type!r}")


def _split_member(name: str) -> tuple[str, str]:
    """(key, extension) of a member name: the key ends at the first dot of the base name."""
    folder, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), (ext.lower() if dot else "")


def _check_member(shard: str, name: str) -> None:
    if ".." not in name and not name.startswith(("/", "\\")) and ":" not in name[:3]:
        return  # the common case, decided without building path objects (a shard has 1000s of members)
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or name.startswith(("/", "\\")):
        raise ShiftbenchError(f"webdataset: {shown(shard)}: member {name!r} has an absolute name; refusing the shard")
    if ".." in posix.parts or ".." in windows.parts:
        raise ShiftbenchError(f"webdataset: {shown(shard)}: member {name!r} escapes the shard (contains '..'); "
                              "refusing the shard")


def _label_value(text: str) -> Any:
    """A label written as text: an integer, else a class name."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        return text or None


def _json_label(data: Any) -> tuple[Any, str | None]:
    """(label, caption) of a json member: a bare value, or the first label field of an object.

    ValueError (the reason) for a label that is neither an integer nor a name: a float (NaN and infinities
    too), true / false, a list or an object in a label field, or a bare float or boolean; JSON ``null``, a
    blank string and a bare list (metadata, not a label) are no label.
    """
    if isinstance(data, dict):
        caption = data.get("caption") if isinstance(data.get("caption"), str) else None
        for field in LABEL_FIELDS:
            value = data.get(field)
            if value is None or (isinstance(value, str) and not value.strip()):
                continue
            if isinstance(value, str) and field in NAME_FIELDS:
                return value, caption
            return _json_value(value, f"field {field!r}"), caption
        return None, caption
    if data is None or isinstance(data, list) or (isinstance(data, str) and not data.strip()):
        return None, None
    return _json_value(data, "value"), None


def _json_value(value: Any, what: str) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _label_value(value)
    raise ValueError(f"label {what} is {json.dumps(value, allow_nan=True)[:40]}, neither an integer nor a class name")


@DATASETS.register("webdataset", description="WebDataset tar shards (<key>.jpg + <key>.cls/.json [+ .txt]), "
                   "indexed once and read by offset", reader=True, annotations=("label", "caption"))
class WebDatasetShards(ReaderDataset):
    """Records of WebDataset tar shards in shard order, then member order; ids ``<shard>/<key>``.

    ``classes``: None (``classes.txt`` / ``classes.json`` beside the shards if present), a list of names
    or the path of such a file. ``on_error`` / ``verify`` as for every reader: a record whose image is
    missing, ambiguous (two images), unreadable, or whose label is missing or unknown is a bad record
    named ``<shard>:<key>``.
    """

    def __init__(self, root: Any = None, classes: Sequence[str] | str | None = None, on_error: str = "fail",
                 verify: str = "header"):
        self.root = check_root(root, "webdataset", want_dir=False)
        self.on_error = check_choice("on_error", on_error, ON_ERROR)
        check_choice("verify", verify, VERIFY)
        folder = self.root if self.root.is_dir() else self.root.parent
        if self.root.is_dir():
            shards = sorted(p for p in self.root.rglob("*.tar") if p.is_file()
                            and not any(part.startswith(".") for part in p.relative_to(self.root).parts))
        else:
            shards = [self.root]
        if not shards:
            hint = " (compressed shards: decompress them, .tar.gz cannot be read by offset)" \
                if any(self.root.rglob("*.tar.gz")) or any(self.root.rglob("*.tgz")) else ""
            raise ShiftbenchError(f"webdataset: no .tar shards under {self.root}{hint}")
        self._shards = shards
        self._shard_names = [p.relative_to(folder).as_posix()[: -len(".tar")] if p.name.endswith(".tar")
                             else p.name for p in shards]
        self._classes_source = None
        names: list[str] | None = None
        if isinstance(classes, (str, Path)):
            names = read_classes_file(Path(classes).expanduser())
            self._classes_source = str(classes)
        elif classes is not None:
            names = [str(c) for c in classes]
            self._classes_source = "classes="
        else:
            for candidate in CLASS_FILES:
                if (folder / candidate).is_file():
                    names = read_classes_file(folder / candidate)
                    self._classes_source = candidate
                    break

        # one pass over the headers: per record its shard, key, image (offset, size), caption (offset, size)
        bad: list[tuple[str, str]] = []
        records: list[tuple[int, str, int, int, int, int, Any, str | None]] = []
        for s, shard in enumerate(shards):
            records.extend(self._index_shard(s, shard, bad))
        labelled = any(r[6] is not None for r in records)
        kept = []
        for r in records:
            if labelled and r[6] is None:
                bad.append((self._where(r[0], r[1]), "no label (.cls or .json member)"))
            else:
                kept.append(r)
        records = kept
        if labelled:
            raw = [r[6] for r in records]
            self._coder = LabelCoder.build(raw, names, name=f"webdataset:{folder.name}")
            labels = coded(raw, self._coder, lambda i: self._where(records[i][0], records[i][1]), bad)
            keep = [i for i, v in enumerate(labels) if v is not None]
            records, labels = [records[i] for i in keep], [labels[i] for i in keep]
            self.label_space = self._coder.space
            self.num_classes = self.label_space.num_classes
            self.class_names = self._coder.class_names
        else:
            self._coder = None
            labels = [-1] * len(records)
            self.annotations = ("caption",)
        if verify != "none":
            records, labels = self._verify(records, labels, verify, bad)
        report_bad(bad, self.root, on_error)
        self.skipped = list(bad)
        if not records:
            raise ShiftbenchError(f"webdataset: no usable records under {self.root}")
        # compact columns: a million records cost tens of MB here, the images stay in the shards
        self._shard = np.array([r[0] for r in records], dtype=np.int32)
        self._keys = [r[1] for r in records]
        self._offset = np.array([r[2] for r in records], dtype=np.int64)
        self._size = np.array([r[3] for r in records], dtype=np.int64)
        self._text = np.array([(r[4], r[5]) for r in records], dtype=np.int64).reshape(-1, 2)
        self._captions = {i: r[7] for i, r in enumerate(records) if r[7] is not None}
        self._labels = np.array(labels, dtype=np.int64)
        self.label_source = self._coder.source if self._coder else "none"
        self.description = (f"webdataset {self.root} ({len(shards)} shard(s), {len(records)} records, "
                            f"{self.label_source} labels)")

    def _where(self, shard: int, key: str) -> str:
        return f"{self._shard_names[shard]}.tar:{key}"

    def _index_shard(self, s: int, path: Path, bad: list[tuple[str, str]]) -> list[tuple]:
        name = self._shard_names[s]
        with open(path, "rb") as fh:
            magic = fh.read(2)
        if magic == b"\x1f\x8b":
            raise ShiftbenchError(f"webdataset: {shown(path)} is gzip-compressed; decompress the shards (gunzip), "
                                  "a compressed tar cannot be read by offset")
        groups: dict[str, dict[str, tarfile.TarInfo]] = {}
        broken: set[str] = set()  # keys with a member that is not a regular file: bad records already
        try:
            with tarfile.open(path, mode="r:") as tar:
                for member in tar:
                    _check_member(f"{name}.tar", member.name)
                    base = member.name.rpartition("/")[2]
                    if member.isdir() or base.startswith("."):
                        continue  # macOS resource forks (._x) and other hidden files are not records
                    key, ext = _split_member(member.name)
                    if not member.isfile() or member.issparse():
                        bad.append((f"{name}.tar:{key}", f"member {shown(member.name)} is {_kind(member)}, "
                                    "not a regular file; refusing its record"))
                        broken.add(key)  # the record is bad, whatever else it holds
                        continue
                    group = groups.setdefault(key, {})
                    if ext in group:
                        bad.append((f"{name}.tar:{key}", f"member {shown(member.name)} appears twice"))
                    group[ext] = member
                _check_end(path, tar.offset)
                # the small label members are read now (the label space needs every label)
                records = []
                for key, group in groups.items():
                    if key in broken:
                        continue
                    images = [e for e in group if e in IMAGE_EXTS]
                    if len(images) != 1:
                        why = "no image member" if not images else f"several images ({', '.join(sorted(images))})"
                        if images or any(e in ("cls", "json") for e in group):
                            bad.append((f"{name}.tar:{key}", why))
                        continue  # a key of other members only (.seg.png, .depth ...) is not a record
                    image = group[images[0]]
                    try:
                        label, caption = self._read_label(tar, group)
                    except (ShiftbenchError, ValueError, UnicodeDecodeError) as exc:
                        bad.append((f"{name}.tar:{key}", str(exc)))
                        continue
                    text = group.get("txt")
                    if text is not None and text.size > _JSON_LIMIT:
                        bad.append((f"{name}.tar:{key}", f"caption member {shown(text.name)} is {text.size} bytes, "
                                    f"more than {_JSON_LIMIT} for a caption"))
                        continue
                    records.append((s, key, image.offset_data, image.size,
                                    text.offset_data if text else -1, text.size if text else 0, label, caption))
        except tarfile.TarError as exc:
            raise ShiftbenchError(f"webdataset: {shown(path)} is not a readable tar file ({exc})") from None
        return records

    @classmethod
    def _read_label(cls, tar: tarfile.TarFile, group: dict[str, tarfile.TarInfo]) -> tuple[Any, str | None]:
        """(label, caption) of a record's ``.cls`` / ``.json`` members; an unreadable one raises the reason
        naming the member (ValueError or ShiftbenchError)."""
        label, caption = None, None
        if "cls" in group:
            label = _label_value(cls._member_text(tar, group["cls"]))
        if "json" in group:
            member = group["json"]
            data = parse_json(cls._member_text(tar, member), f"unreadable label member {shown(member.name)}")
            try:
                j_label, caption = _json_label(data)
            except ValueError as exc:
                raise ValueError(f"label member {shown(member.name)}: {exc}") from None
            label = label if label is not None else j_label
        return label, caption

    @staticmethod
    def _member_text(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
        if member.size > _JSON_LIMIT:
            raise ValueError(f"unreadable label member {shown(member.name)} ({member.size} bytes, more than "
                             f"{_JSON_LIMIT} for a label)")
        handle = tar.extractfile(member)
        assert handle is not None  # a regular file member
        try:
            return handle.read().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"unreadable label member {shown(member.name)} (not UTF-8: {exc.reason})") from None

    def _verify(self, records: list[tuple], labels: list, verify: str, bad: list[tuple[str, str]]):
        kept_r, kept_l = [], []
        handle, current = None, -1
        try:
            for r, label in zip(records, labels):
                if r[0] != current:
                    if handle is not None:
                        handle.close()
                    handle, current = open(self._shards[r[0]], "rb"), r[0]
                handle.seek(r[2])
                reason = check_image_bytes(handle.read(r[3]), verify)
                if reason is None:
                    kept_r.append(r)
                    kept_l.append(label)
                else:
                    bad.append((self._where(r[0], r[1]), reason))
        finally:
            if handle is not None:
                handle.close()
        return kept_r, kept_l

    @staticmethod
    def detect(path: Path) -> bool:
        """A ``.tar`` file, or a folder with ``.tar`` files at its top level."""
        path = Path(path)
        if path.is_file():
            return path.suffix == ".tar"
        return path.is_dir() and any(p.is_file() for p in path.glob("*.tar"))

    def __len__(self) -> int:
        return len(self._keys)

    def sample_id(self, index: int) -> str:
        return f"{self._shard_names[self._shard[index]]}/{self._keys[index]}"

    def load(self, index: int) -> Sample:
        s = int(self._shard[index])
        where = self._where(s, self._keys[index])
        caption = self._captions.get(index)
        with open(self._shards[s], "rb") as fh:  # one shard opened, two reads: the image and its caption
            fh.seek(int(self._offset[index]))
            data = fh.read(int(self._size[index]))
            t_off, t_size = (int(v) for v in self._text[index])
            if t_off >= 0:
                fh.seek(t_off)
                caption = fh.read(t_size).decode("utf-8", errors="replace").strip()
        image = decode_image_bytes(data, shown(where))
        label = int(self._labels[index])
        meta = {"shard": self._shard_names[s], "key": self._keys[index]}
        if self._coder is None:
            return Sample(image=image, caption=caption, id=self.sample_id(index), meta=meta)
        return Sample(image=image, label=label, class_name=self._coder.class_name(label), caption=caption,
                      id=self.sample_id(index), meta=meta)

    def info(self) -> dict[str, Any]:
        info = super().info()
        info["shards"] = len(self._shards)
        info["labels"] = self.label_source
        if self._classes_source:
            info["classes"] = self._classes_source
        return info
