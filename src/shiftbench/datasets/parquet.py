"""Parquet and Hugging Face ``datasets`` (saved to disk) reader: an image column of encoded bytes and a label
column, read lazily with pyarrow (the ``stream`` extra).

Layouts (``root``):

- a ``.parquet`` file, or a folder of them (found recursively, sorted by relative path; the layout of a
  Hugging Face hub dataset's ``data/train-00000-of-00004.parquet``);
- a ``datasets`` ``save_to_disk`` folder: ``dataset_info.json``, ``state.json`` (which lists the
  ``data-*.arrow`` files) and the Arrow IPC stream files; a ``DatasetDict`` folder (``dataset_dict.json``,
  one sub-folder per split) with ``split=`` (or its only split);
- one ``.arrow`` file (IPC stream or file format).

Columns: the image column holds encoded image bytes (``binary``) or Hugging Face's ``Image`` struct
``{"bytes": ..., "path": ...}`` (a path without bytes is read relative to the dataset folder and must
stay inside it); the label column holds integers (with ``ClassLabel`` names in the Hugging Face features
metadata, when present) or class names. Both are detected, from the features metadata (``Image`` /
``ClassLabel``), else by type and name (``image``, ``img``; ``label``, ``labels``, ``class`` ...), and can
be named (``image_column=``, ``label_column=``; ``label_column=False`` reads images without labels). An
optional ``id_column`` gives the ids (unique values; files written by ``shiftbench generate --format parquet``
name theirs in the schema's ``shiftbench`` metadata, used when none is given), else ids are ``<file without suffix>/<row>``
(``train-00000-of-00004/17``, ``data-00000-of-00001/17``); ``caption_column`` a caption.

Memory: only the label (and id) columns are read at construction. Arrow files are memory-mapped, so a
``load(i)`` touches one row's bytes; a Parquet ``load(i)`` decodes the image column of one row group
(the smallest unit Parquet can read), and keeps that one row group until a load needs another, so a
sequential pass reads each row group once. Class names come from ``classes=`` (a list, or a
``classes.txt`` / ``.json`` file), else the ``ClassLabel`` feature; see
:mod:`shiftbench.datasets.streaming` for the label space.
"""

from __future__ import annotations

import json
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import DatasetError, ImageError, ShiftbenchError
from ..install import install_command
from ..registry import DATASETS
from ..sample import Sample
from .common import (ON_ERROR, VERIFY, ReaderDataset, check_choice, check_root, parse_json, read_json,
                     resolve_inside, shown)
from .streaming import LabelCoder, check_image_bytes, coded, decode_image_bytes, read_classes_file, report_bad

IMAGE_NAMES = ("image", "img", "images", "jpg", "png", "webp", "image_bytes")
LABEL_NAMES = ("label", "labels", "class", "cls", "class_name", "fine_label", "target")


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ShiftbenchError(f"reading Parquet / Arrow datasets needs pyarrow: {install_command('stream')}") \
            from None
    return pyarrow


def _json(path: Path) -> dict[str, Any]:
    """A JSON file of a ``save_to_disk`` folder, which must hold an object; one line naming it otherwise."""
    value = read_json(path, "parquet")
    if not isinstance(value, dict):
        raise DatasetError(f"parquet: {shown(path)} holds {type(value).__name__}, not a JSON object")
    return value


def _hf_features(metadata: dict[bytes, bytes] | None, where: Path) -> dict[str, Any]:
    """The Hugging Face features a Parquet / Arrow schema carries in its ``huggingface`` metadata; metadata
    that is not JSON (or too deeply nested) is refused naming the file, as its class names would be lost."""
    raw = (metadata or {}).get(b"huggingface")
    if not raw:
        return {}
    value = parse_json(raw, f"parquet: {shown(where)}: schema metadata 'huggingface'")
    info = value.get("info") if isinstance(value, dict) else None
    features = info.get("features") if isinstance(info, dict) else None
    return features if isinstance(features, dict) else {}


def _class_label_names(feature: Any, where: str) -> list[str] | None:
    """The ``names`` of a ``ClassLabel`` feature (None for another feature); names that are not a list of
    strings are refused (a string would otherwise be read as one class per character)."""
    if not isinstance(feature, dict) or feature.get("_type") != "ClassLabel" or not feature.get("names"):
        return None
    names = feature["names"]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise DatasetError(f"parquet: {where}: ClassLabel names must be a list of strings, got {names!r:.60}")
    return names


class _Part:
    """One file of the table: its name for ids and messages, its row count, and lazy readers."""

    def __init__(self, path: Path, name: str, kind: str):
        self.path, self.name, self.kind = path, name, kind
        pa = _pyarrow()
        if kind == "parquet":
            try:
                handle = pa.parquet.ParquetFile(path, memory_map=True)
            except (pa.ArrowException, OSError) as exc:
                raise ShiftbenchError(f"parquet: {path} is not a readable Parquet file ({exc})") from None
            self.schema = handle.schema_arrow
            meta = handle.metadata
            self.group_rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            self.num_rows = meta.num_rows
        else:
            table = self.arrow_table()
            self.schema, self.num_rows = table.schema, table.num_rows

    def arrow_table(self) -> Any:
        """The Arrow file as a table over a memory map (no buffer is copied; pages are read when touched)."""
        pa = _pyarrow()
        try:
            source = pa.memory_map(str(self.path), "r")
            try:
                return pa.ipc.open_stream(source).read_all()  # datasets writes the IPC stream format
            except pa.ArrowInvalid:
                source.seek(0)
                return pa.ipc.open_file(source).read_all()
        except (pa.ArrowException, OSError) as exc:
            raise ShiftbenchError(f"parquet: {self.path} is not a readable Arrow file ({exc})") from None

    def column(self, name: str) -> list[Any]:
        """A whole (small) column as Python values: labels or ids."""
        pa = _pyarrow()
        if self.kind == "parquet":
            return pa.parquet.read_table(self.path, columns=[name], memory_map=True).column(name).to_pylist()
        return self.arrow_table().column(name).to_pylist()


@dataclass(frozen=True)
class Reading:
    """What a reader does with bad records, checked once: ``on_error`` fail or skip, ``verify`` header, full or none."""

    on_error: str = "fail"
    verify: str = "header"

    def __post_init__(self) -> None:
        check_choice("on_error", self.on_error, ON_ERROR)
        check_choice("verify", self.verify, VERIFY)


@DATASETS.register("parquet", description="Parquet files or a Hugging Face datasets save_to_disk folder: an "
                   "image-bytes column and a label column, read lazily (pyarrow)", reader=True,
                   annotations=("label",))
class ParquetImages(ReaderDataset):
    """Rows of Parquet / Arrow files in file order, then row order; see the module docstring."""

    option_groups = (Reading,)  # what ``reading`` takes: on_error, verify (the registry checks the names)

    def __init__(self, root: Any = None, image_column: str | None = None, label_column: str | bool | None = None,
                 id_column: str | None = None, caption_column: str | None = None,
                 classes: Sequence[str] | str | None = None, split: str | None = None, **reading: str):
        self.root = check_root(root, "parquet", want_dir=False)
        self.on_error, verify = astuple(Reading(**reading))
        _pyarrow()
        self._folder, files, kind, features = self._layout(self.root, split)
        self._parts = [_Part(path, name, kind) for path, name in files]
        self._kind = kind
        for part in self._parts:
            features = features or _hf_features(part.schema.metadata, part.path)
        columns = self._parts[0].schema
        for part in self._parts[1:]:
            if part.schema.names != columns.names:
                raise ShiftbenchError(f"parquet: {part.path} has columns {', '.join(part.schema.names)}, "
                                      f"{self._parts[0].path} has {', '.join(columns.names)}")
        if id_column is None:  # files written by ``generate --format parquet`` name their id column
            id_column = self._declared_id_column(columns)
        self.image_column = self._image_column(image_column, columns, features)
        self.label_column = self._label_column(label_column, columns, features)
        for name, what in ((id_column, "id_column"), (caption_column, "caption_column")):
            if name is not None and name not in columns.names:
                raise ShiftbenchError(f"parquet: {what} {name!r} is not a column of {self._parts[0].path} "
                                      f"(columns: {self._describe(columns)})")
        self.id_column, self.caption_column = id_column, caption_column
        names = self._class_names(classes, features)
        # the index: (part, row) of every usable record, its label; labels and ids are small columns
        bad: list[tuple[str, str]] = []
        where, labels = self._labelled_rows(names, bad)
        self._ids = self._read_ids(id_column, where) if id_column is not None else None
        self._cache: tuple[tuple[int, int], Any] | None = None  # ((part, row group), image column) of the last read
        self._table: tuple[int, Any] | None = None  # (part, memory-mapped Arrow table) of the last read
        self._part = np.array([k for k, _ in where], dtype=np.int32)
        self._row = np.array([r for _, r in where], dtype=np.int64)
        self._labels = np.array(labels, dtype=np.int64)
        if verify != "none":
            self._verify(verify, bad)
        report_bad(bad, self.root, self.on_error)
        self.skipped = list(bad)
        if not len(self._part):
            raise ShiftbenchError(f"parquet: no usable rows under {self.root}")
        self.label_source = self._coder.source if self._coder else "none"
        self.description = (f"{kind} {self.root} ({len(self._parts)} file(s), {len(self)} rows, "
                            f"{self.label_source} labels)")

    def _class_names(self, classes: Sequence[str] | str | None, features: dict[str, Any]) -> list[str] | None:
        """The class names given (a file, a list) or declared by a Hugging Face ClassLabel, or None; sets where
        they came from."""
        names: list[str] | None = None
        self._classes_source = None
        if isinstance(classes, (str, Path)):
            names, self._classes_source = read_classes_file(Path(classes).expanduser()), str(classes)
        elif classes is not None:
            names, self._classes_source = [str(c) for c in classes], "classes="
        elif self.label_column is not None:
            names = _class_label_names(features.get(self.label_column), f"{shown(self._parts[0].path)} features "
                                       f"of {self.label_column!r}")
            self._classes_source = "ClassLabel" if names else None
        return names

    def _labelled_rows(self, names: list[str] | None,
                       bad: list[tuple[str, str]]) -> tuple[list[tuple[int, int]], list[int]]:
        """(part, row) of every record with a usable label, and its label (-1 without a label column); sets the
        label coder and space. A null or unknown label leaves the index and joins ``bad``."""
        where = [(k, r) for k, part in enumerate(self._parts) for r in range(part.num_rows)]
        if self.label_column is None:
            self._coder: LabelCoder | None = None
            self.annotations = ()
            return where, [-1] * len(where)
        raw: list[Any] = []
        for part in self._parts:
            raw.extend(part.column(self.label_column))
        keep = []
        for i, value in enumerate(raw):
            if value is None:
                bad.append((self._where(*where[i]), f"no label (null {self.label_column})"))
            else:
                keep.append(i)
        where, raw = [where[i] for i in keep], [raw[i] for i in keep]
        self._coder = LabelCoder.build(raw, names, name=f"parquet:{self._folder.name}")
        labels = coded(raw, self._coder, lambda i: self._where(*where[i]), bad)
        keep = [i for i, v in enumerate(labels) if v is not None]
        where, labels = [where[i] for i in keep], [labels[i] for i in keep]
        self.label_space = self._coder.space
        self.num_classes = self.label_space.num_classes
        self.class_names = self._coder.class_names
        return where, labels

    def _verify(self, verify: str, bad: list[tuple[str, str]]) -> None:
        """Check every record's image bytes by ``verify``; a bad one leaves the index and joins ``bad``."""
        keep = []
        for i in range(len(self._part)):
            try:
                data, _ = self._read(i)
                reason = check_image_bytes(data, verify)
            except ShiftbenchError as exc:  # an image path outside the folder, a missing file
                reason = str(exc)
            if reason is None:
                keep.append(i)
            else:
                bad.append((self._where(int(self._part[i]), int(self._row[i])), reason))
        self._part, self._row, self._labels = self._part[keep], self._row[keep], self._labels[keep]
        if self._ids is not None:
            self._ids = [self._ids[i] for i in keep]
        self._cache = self._table = None

    def _read_ids(self, id_column: str, where: list[tuple[int, int]]) -> list[str]:
        """The ids of the records at ``where`` ((part, row) pairs): strings or integers, unique, never null;
        a bad one is refused naming its file and row (both rows for a repeated id)."""
        ids: list[str] = []
        first: dict[str, tuple[int, int]] = {}
        values = [part.column(id_column) for part in self._parts]
        for k, r in where:
            value = values[k][r]
            if value is None or isinstance(value, (bool, bytes, dict, list, float)):
                raise DatasetError(f"parquet: {shown(self._where(k, r))}: id_column {id_column!r} holds {value!r:.40}; "
                                   "ids are strings or integers")
            sid = str(value)
            if sid in first:
                raise DatasetError(f"parquet: id_column {id_column!r} repeats the id {sid!r} ("
                                   f"{shown(self._where(*first[sid]))} and {shown(self._where(k, r))}); ids must be "
                                   "unique")
            first[sid] = (k, r)
            ids.append(sid)
        return ids

    # -- layout and columns ---------------------------------------------------------------------------
    @staticmethod
    def _layout(root: Path, split: str | None) -> tuple[Path, list[tuple[Path, str]], str, dict[str, Any]]:
        """(folder, [(file, name)], "parquet" | "arrow", Hugging Face features) of a root."""
        if root.is_file():
            if root.suffix not in (".parquet", ".arrow"):
                raise ShiftbenchError(f"parquet: {root} is neither a .parquet nor an .arrow file")
            return root.parent, [(root, root.stem)], root.suffix.lstrip("."), {}
        if (root / "dataset_dict.json").is_file():
            splits = _json(root / "dataset_dict.json").get("splits") or []
            if not isinstance(splits, list) or not all(isinstance(x, str) for x in splits):
                raise DatasetError(f"parquet: {shown(root / 'dataset_dict.json')}: splits must be a list of names, "
                                   f"got {splits!r:.60}")
            if split is None and len(splits) == 1:
                split = splits[0]
            if split not in splits:
                raise ShiftbenchError(f"parquet: {root} is a DatasetDict; pass split= one of: {', '.join(splits)}"
                                      + (f" (got {split!r})" if split is not None else ""))
            root = resolve_inside(root, str(split), "split")
        if (root / "state.json").is_file():
            state = _json(root / "state.json")
            data_files = state.get("_data_files") or []
            if not isinstance(data_files, list):
                raise DatasetError(f"parquet: {shown(root / 'state.json')}: _data_files must be a list, "
                                   f"got {data_files!r:.60}")
            names = [f.get("filename") for f in data_files if isinstance(f, dict)]
            if not names:
                raise ShiftbenchError(f"parquet: {root / 'state.json'} lists no _data_files")
            files = [(resolve_inside(root, n, "state.json _data_files"), Path(n).stem) for n in names]
            for path, _ in files:
                if not path.is_file():
                    raise ShiftbenchError(f"parquet: {path} (listed in {root / 'state.json'}) is missing")
            info = _json(root / "dataset_info.json") if (root / "dataset_info.json").is_file() else {}
            features = info.get("features") if isinstance(info.get("features"), dict) else {}
            return root, files, "arrow", features
        files = sorted(p for p in root.rglob("*.parquet") if p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(root).parts))
        if files:
            return root, [(p, p.relative_to(root).as_posix()[: -len(".parquet")]) for p in files], "parquet", {}
        arrows = sorted(root.glob("*.arrow"))
        if len(arrows) == 1:
            return root, [(arrows[0], arrows[0].stem)], "arrow", {}
        raise ShiftbenchError(f"parquet: no .parquet files, datasets save_to_disk folder (state.json) or single "
                              f".arrow file under {root}")

    @staticmethod
    def _declared_id_column(schema: Any) -> str | None:
        """The id column a ``shiftbench`` schema metadata entry names (``{"id_column": "id"}``), if it exists."""
        raw = (schema.metadata or {}).get(b"shiftbench")
        try:
            name = json.loads(raw).get("id_column") if raw else None
        except (ValueError, AttributeError, RecursionError):
            return None  # not shiftbench's own metadata: no declared id column
        return name if isinstance(name, str) and name in schema.names else None

    @staticmethod
    def _describe(schema: Any) -> str:
        return ", ".join(f"{f.name} ({f.type})" for f in schema)

    def _image_column(self, name: str | None, schema: Any, features: dict[str, Any]) -> str:
        pa = _pyarrow()

        def image_like(field: Any) -> bool:
            t = field.type
            if pa.types.is_binary(t) or pa.types.is_large_binary(t):
                return True
            return pa.types.is_struct(t) and t.get_field_index("bytes") >= 0

        if name is not None:
            if name not in schema.names:
                raise ShiftbenchError(f"parquet: image_column {name!r} is not a column of {self._parts[0].path} "
                                      f"(columns: {self._describe(schema)})")
            if not image_like(schema.field(name)):
                raise ShiftbenchError(f"parquet: image_column {name!r} is {schema.field(name).type}, not image bytes "
                                      "(binary, or a struct with a 'bytes' field)")
            return name
        typed = [c for c, f in features.items() if isinstance(f, dict) and f.get("_type") == "Image"
                 and c in schema.names]
        candidates = typed or [f.name for f in schema if image_like(f)]
        named = [c for c in candidates if c.lower() in IMAGE_NAMES]
        if len(candidates) == 1 or len(named) == 1:
            return candidates[0] if len(candidates) == 1 else named[0]
        why = "no column of image bytes" if not candidates else f"several image columns ({', '.join(candidates)})"
        raise ShiftbenchError(f"parquet: {why} in {self._parts[0].path}; pass image_column= "
                              f"(columns: {self._describe(schema)})")

    def _label_column(self, name: str | bool | None, schema: Any, features: dict[str, Any]) -> str | None:
        pa = _pyarrow()

        def label_like(field: Any) -> bool:
            t = field.type
            return pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)

        if name is False:
            return None
        if isinstance(name, str):
            if name not in schema.names:
                raise ShiftbenchError(f"parquet: label_column {name!r} is not a column of {self._parts[0].path} "
                                      f"(columns: {self._describe(schema)})")
            if not label_like(schema.field(name)):
                raise ShiftbenchError(f"parquet: label_column {name!r} is {schema.field(name).type}; labels are "
                                      "integers or class names (strings)")
            return name
        if name is not None:
            raise ShiftbenchError(f"parquet: label_column must be a column name or False, got {name!r}")
        typed = [c for c, f in features.items() if isinstance(f, dict) and f.get("_type") == "ClassLabel"
                 and c in schema.names]
        if typed:
            return typed[0]
        named = [f.name for f in schema if f.name.lower() in LABEL_NAMES and label_like(f)]
        if named:
            return named[0]
        raise ShiftbenchError(f"parquet: no label column in {self._parts[0].path}; pass label_column= (or "
                              f"label_column=False for images without labels) (columns: {self._describe(schema)})")

    @staticmethod
    def detect(path: Path) -> bool:
        """A .parquet / .arrow file, a folder with .parquet files, or a datasets save_to_disk folder."""
        path = Path(path)
        if path.is_file():
            return path.suffix in (".parquet", ".arrow")
        if not path.is_dir():
            return False
        if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
            return True
        if (path / "dataset_dict.json").is_file():
            return True
        return any(path.glob("*.parquet")) or any(path.glob("*/*.parquet"))

    # -- reading ------------------------------------------------------------------------------------
    def _where(self, part: int, row: int) -> str:
        p = self._parts[part]
        return f"{p.path.relative_to(self._folder).as_posix() if p.path != self._folder else p.path.name} row {row}"

    def _row_values(self, index: int, columns: list[str]) -> dict[str, Any]:
        """Values of ``columns`` in record ``index``, reading one row of an Arrow map or one Parquet row group."""
        k, row = int(self._part[index]), int(self._row[index])
        part = self._parts[k]
        if part.kind == "arrow":
            if self._table is None or self._table[0] != k:
                self._table = (k, part.arrow_table())
            table = self._table[1]
            return {c: table.column(c)[row].as_py() for c in columns}
        starts = np.cumsum([0] + part.group_rows)
        group = int(np.searchsorted(starts, row, side="right") - 1)
        if self._cache is None or self._cache[0] != (k, group):
            pa = _pyarrow()
            self._cache = None  # drop the previous row group before reading the next
            handle = pa.parquet.ParquetFile(part.path, memory_map=True)
            self._cache = ((k, group), handle.read_row_group(group, columns=columns))
        table = self._cache[1]
        return {c: table.column(c)[row - int(starts[group])].as_py() for c in columns}

    def _read(self, index: int) -> tuple[bytes | None, str | None]:
        """(image bytes, caption) of record ``index``."""
        columns = [self.image_column] + ([self.caption_column] if self.caption_column else [])
        values = self._row_values(index, columns)
        value = values[self.image_column]
        caption = values.get(self.caption_column) if self.caption_column else None
        if isinstance(value, dict):  # Hugging Face Image: {"bytes": ..., "path": ...}
            data, path = value.get("bytes"), value.get("path")
            if data is None and path:
                file = resolve_inside(self._folder, str(path), f"{self._where(int(self._part[index]), int(self._row[index]))} image path")
                try:
                    data = file.read_bytes()
                except OSError as exc:
                    raise ShiftbenchError(f"{shown(file)}: cannot read ({exc.strerror or exc})") from None
            return data, caption
        return value, caption

    def __len__(self) -> int:
        return len(self._part)

    def sample_id(self, index: int) -> str:
        if self._ids is not None:
            return self._ids[index]
        return f"{self._parts[int(self._part[index])].name}/{int(self._row[index])}"

    def load(self, index: int) -> Sample:
        where = self._where(int(self._part[index]), int(self._row[index]))
        data, caption = self._read(index)
        if data is None:
            raise ImageError(f"{shown(where)}: no image bytes")
        image = decode_image_bytes(data, shown(where))
        meta = {"file": self._parts[int(self._part[index])].name, "row": int(self._row[index])}
        if self._coder is None:
            return Sample(image=image, caption=caption, id=self.sample_id(index), meta=meta)
        label = int(self._labels[index])
        return Sample(image=image, label=label, class_name=self._coder.class_name(label), caption=caption,
                      id=self.sample_id(index), meta=meta)

    def info(self) -> dict[str, Any]:
        info = super().info()
        info.update(files=len(self._parts), image_column=self.image_column, label_column=self.label_column,
                    labels=self.label_source)
        if self._classes_source:
            info["classes"] = self._classes_source
        return info
