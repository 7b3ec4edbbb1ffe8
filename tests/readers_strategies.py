"""Hypothesis strategies and writers shared by the reader property tests and the generate round trips:
hostile names, small images, and deterministic tar members."""

from __future__ import annotations

import io
import json
import re
import tarfile
import tempfile
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from PIL import Image

from shiftbench.datasets.voc import VOC_CLASSES, voc_colormap
from shiftbench.errors import ShiftbenchError

# names a user's files and classes may have: markup, line breaks, quotes, leading '-' or '.', accents,
# wide characters, emoji, separators that str.splitlines() breaks on; never '/' nor NUL (no file has them)
TOKENS = ["<b>", "<i>", "\n", "\r\n", " ", "  ", "\t", "-", "--x", ".", "é", "猫", "🐈", "\u2028", "\x1c", "&amp;",
          "'", '"', "\\", "%s", "{}", "[red]", "$HOME", "0", "12", "a", "Z", "_", ":"]
CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00")
WNID = re.compile(r"^n\d{8}$")
LOSSLESS = [".png", ".PNG", ".bmp", ".ppm"]


def props(n: int):
    """The settings of every property test here: ``n`` examples, the same ones every run, no clock."""
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


def _file_name_ok(name: str) -> bool:
    return name not in (".", "..") and 0 < len(name.encode("utf-8")) <= 80 and not WNID.match(name)


def names(max_parts: int = 3) -> st.SearchStrategy[str]:
    """A file or class name: a few tokens and random characters (no '/', no NUL, not '.' or '..')."""
    part = st.one_of(st.sampled_from(TOKENS), st.text(CHARS, min_size=1, max_size=3))
    return st.lists(part, min_size=1, max_size=max_parts).map("".join).filter(_file_name_ok)


@st.composite
def images(draw, lo: int = 8, hi: int = 24) -> np.ndarray:
    """A small RGB uint8 image (8x8 to 24x24) of seeded noise."""
    h, w, seed = draw(st.integers(lo, hi)), draw(st.integers(lo, hi)), draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def path_refusal(name: str) -> str | None:
    """How a reader refuses ``name`` as a path written in an annotation file or a tar member (absolute, or
    holding '..', read the POSIX or the Windows way), or None when it is a plain relative path."""
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or name.startswith(("\\", "/")):
        return "absolute"
    if ".." in posix.parts or ".." in windows.parts:
        return "escapes"
    return None


def encode(image: np.ndarray, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format=fmt)
    return buf.getvalue()


def fresh(tmp_path: Path) -> Path:
    """A new empty folder for one example (Hypothesis reuses the function's tmp_path)."""
    return Path(tempfile.mkdtemp(dir=tmp_path))


def add_member(tar: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE,
               link: str = "", size: int | None = None) -> None:
    """A tar member with fixed metadata (mtime 0, uid/gid 0, no user names, mode 0644)."""
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if size is None else size
    info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = 0, 0o644, 0, 0, "", ""
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE and data else None)


def refused(action, *needles: str) -> str:
    """``action()`` raises one ShiftbenchError of one line holding every needle; returns the message."""
    with pytest.raises(ShiftbenchError) as err:
        action()
    message = str(err.value)
    assert "\n" not in message and "\r" not in message, message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def cli_refused(capsys, argv: list[str], *needles: str) -> str:
    """The command exits 2 with one ``error: ...`` line holding every needle, and no traceback."""
    from shiftbench.cli import main

    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def cli_ok(capsys, argv: list[str]) -> str:
    from shiftbench.cli import main

    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


# -- the inputs of each reader, drawn and written ------------------------------------------------------

@st.composite
def image_folders(draw, lo: int = 8, hi: int = 24) -> dict[str, list[tuple[str, np.ndarray]]]:
    """{class folder: [(file name, pixels)]}: 1-3 classes of 0-3 lossless images (sides ``lo``..``hi``),
    names drawn freely."""
    classes = draw(st.lists(names(), min_size=1, max_size=3, unique=True))
    tree = {}
    for c in classes:
        files = draw(st.lists(st.tuples(names(2), st.sampled_from(LOSSLESS)), max_size=3, unique=True))
        tree[c] = [(stem + ext, draw(images(lo, hi))) for stem, ext in files]
    return tree


def write_image_folder(root: Path, tree: dict[str, list[tuple[str, np.ndarray]]]) -> list[tuple]:
    """Writes the tree; returns what the reader must give: hidden folders and files are not read."""
    formats = {".png": "PNG", ".bmp": "BMP", ".ppm": "PPM"}
    for c, files in tree.items():
        (root / c).mkdir(parents=True)
        for name, image in files:
            (root / c / name).write_bytes(encode(image, formats[Path(name).suffix.lower()]))
    classes = sorted(c for c in tree if not c.startswith("."))
    return [(f"{c}/{name}", classes.index(c), c, image)
            for c in classes for name, image in sorted(tree[c]) if not name.startswith(".")]


VOC_VALUES = np.array(list(range(len(VOC_CLASSES))) + [255], np.uint8)


@st.composite
def voc_sets(draw) -> dict:
    """Ids (free names, or names without spaces when a split list names them), images, class and object maps."""
    with_list, with_objects = draw(st.booleans()), draw(st.booleans())
    ids = draw(st.lists(names(2).filter(lambda n: not with_list or n.split() == [n]), min_size=1, max_size=3,
                        unique=True))
    records = []
    for _ in ids:
        image = draw(images())
        rng = np.random.default_rng(draw(st.integers(0, 1000)))
        classes = VOC_VALUES[rng.integers(0, len(VOC_VALUES), image.shape[:2])]
        objects = rng.integers(0, 4, image.shape[:2]).astype(np.uint8)
        records.append((image, classes, objects))
    return {"ids": ids, "records": records, "list": with_list, "objects": with_objects}


def palette_png(values: np.ndarray) -> bytes:
    from PIL import Image

    img = Image.frombytes("P", values.shape[::-1], np.ascontiguousarray(values, np.uint8).tobytes())
    img.putpalette(voc_colormap().reshape(-1).tolist())
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def write_voc(root: Path, spec: dict) -> None:
    for folder in ("JPEGImages", "SegmentationClass") + (("SegmentationObject",) if spec["objects"] else ()):
        (root / folder).mkdir(parents=True)
    for image_id, (image, classes, objects) in zip(spec["ids"], spec["records"]):
        (root / "JPEGImages" / f"{image_id}.png").write_bytes(encode(image))
        (root / "SegmentationClass" / f"{image_id}.png").write_bytes(palette_png(classes))
        if spec["objects"]:
            (root / "SegmentationObject" / f"{image_id}.png").write_bytes(palette_png(objects))
    if spec["list"]:
        (root / "ImageSets" / "Segmentation").mkdir(parents=True)
        (root / "ImageSets" / "Segmentation" / "val.txt").write_text("".join(f"{i}\n" for i in spec["ids"]))


@st.composite
def tables(draw) -> dict:
    """Rows of (id, pixels, label): ids drawn freely (unique), labels ints with ClassLabel names or strings;
    one to three files (or one save_to_disk folder), row groups of 1-3."""
    n = draw(st.integers(1, 6))
    ids = draw(st.lists(names(), min_size=n, max_size=n, unique=True))
    label_kind = draw(st.sampled_from(["classlabel", "strings"]))
    classes = draw(st.lists(names(), min_size=1, max_size=4, unique=True))
    rows = [(ids[i], draw(images()), draw(st.integers(0, len(classes) - 1))) for i in range(n)]
    layout = draw(st.sampled_from(["parquet", "arrow"]))
    return {"rows": rows, "classes": classes, "labels": label_kind, "layout": layout,
            "files": draw(st.integers(1, 3)), "group": draw(st.integers(1, 3))}


def table_of(spec: dict, images=None, labels=None, ids=None, features=None):
    """The spec's rows as an Arrow table (Hugging Face Image structs, labels, ids) with its features metadata;
    any column can be replaced to make it hostile."""
    import pyarrow as pa

    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rows, classes = spec["rows"], spec["classes"]
    images = images if images is not None else [{"bytes": encode(img), "path": None} for _, img, _ in rows]
    if labels is None:
        labels = [c for _, _, c in rows] if spec["labels"] == "classlabel" else [classes[c] for _, _, c in rows]
    table = pa.table({"image": pa.array(images, type=image_type), "label": pa.array(labels),
                      "id": pa.array(ids if ids is not None else [r[0] for r in rows])})
    if features is None:
        features = {"image": {"_type": "Image"}, "id": {"_type": "Value", "dtype": "string"}}
        if spec["labels"] == "classlabel":
            features["label"] = {"_type": "ClassLabel", "names": classes}
    meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()} if features != "raw" else {}
    return table.replace_schema_metadata(meta)


def write_table(root: Path, spec: dict, table) -> None:
    """Parquet files (``spec["files"]`` of them) or a ``save_to_disk`` folder (IPC stream, state.json)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if spec["layout"] == "parquet":
        per = -(-table.num_rows // spec["files"])
        for f in range(spec["files"]):
            pq.write_table(table.slice(f * per, per), root / f"part {f} <x>.parquet", row_group_size=spec["group"])
        return
    with pa.OSFile(str(root / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=spec["group"]):
                writer.write_batch(batch)
    (root / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    info = json.loads(table.schema.metadata[b"huggingface"])["info"] if table.schema.metadata else {}
    (root / "dataset_info.json").write_text(json.dumps(info))
