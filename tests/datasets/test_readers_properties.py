"""Every reader but COCO over generated inputs (Hypothesis): image folder, Pascal VOC, CIRR, FashionIQ,
WebDataset tar shards, Parquet and Hugging Face ``save_to_disk`` folders.

The promise: given arbitrary file, class and image names (unicode, spaces, line breaks, markup, a leading
``-`` or ``.``), hostile members and paths (``..``, absolute names, symbolic and hard links, deep nesting,
huge members) and malformed, missing or non-finite fields, a reader either gives exactly the samples the
input holds (ids, labels, class names, pixels) or refuses it with one line naming the file or the record
(a ShiftbenchError; through the CLI ``error: ...``, exit 2, no traceback). Each test builds its expectation
from what it wrote, then reads it back: ``test_<reader>_gives_its_samples`` over generated valid inputs, and
one hostile variant at a time (parametrized, so each runs) written into generated valid inputs; each reader
also goes through the CLI once as a user runs it. Strategies and writers: ``readers_strategies.py``.
"""

from __future__ import annotations

import ast
import gzip
import json
import tarfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import shiftbench as sb
from readers_strategies import (add_member, cli_ok, cli_refused, encode, fresh, image_folders, images, names,
                                palette_png, path_refusal, props, refused, table_of, tables, voc_sets,
                                write_image_folder, write_table, write_voc)
from shiftbench.datasets.common import BadImagesError, shown
from shiftbench.errors import ShiftbenchError

pa = pytest.importorskip("pyarrow")


def assert_samples(ds, expected: list[tuple[str, int | None, str | None, np.ndarray]]) -> None:
    """``ds`` holds exactly ``expected``: (id, label, class name, pixels), in order."""
    assert [ds.sample_id(i) for i in range(len(ds))] == [e[0] for e in expected]
    for i, (sid, label, class_name, image) in enumerate(expected):
        s = ds.load(i)
        assert (s.id, s.label, s.class_name) == (sid, label, class_name)
        assert s.image.dtype == np.uint8 and np.array_equal(s.image, image)


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` pixels (a decompression bomb's first bytes)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")

    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


# -- image folder ------------------------------------------------------------------------------------------

def _folder_variant(root: Path, kind: str, outside: Path, first: str) -> tuple[str | None, tuple]:
    """Adds a hostile file to a class folder ``first``: (needle of the refusal or None, extra sample if read)."""
    folder = root / first
    image = np.full((9, 11, 3), 7, np.uint8)
    if kind == "garbage":
        (folder / "bad\n<b>.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a png")
        return shown(f"{first}/bad\n<b>.png"), ()
    if kind == "empty":
        (folder / "-empty.png").write_bytes(b"")
        return shown(f"{first}/-empty.png"), ()
    if kind == "bomb":
        (folder / "bomb.png").write_bytes(png_header(40000, 40000))
        return "decompression-bomb", ()
    if kind == "escape":
        (outside / "secret.png").write_bytes(encode(image))
        (folder / "link.png").symlink_to(outside / "secret.png")
        return "escapes the dataset root", ()
    if kind == "loop":
        (folder / "loop.png").symlink_to(folder / "loop.png")
        return "cannot be resolved", ()
    if kind == "inside":  # a link to a file inside the root is read as a file of its own
        (root / ".store").mkdir(exist_ok=True)
        (root / ".store" / "x.png").write_bytes(encode(image))
        (folder / "~inside.png").symlink_to(root / ".store" / "x.png")
        return None, (f"{first}/~inside.png", image)
    deep = folder.joinpath(*["d"] * 60)  # deep nesting: read, with the whole path as its id
    deep.mkdir(parents=True)
    (deep / "~deep.png").write_bytes(encode(image))
    (folder / "~dir.png").mkdir()  # a folder named like an image is not an image
    return None, (f"{first}/" + "d/" * 60 + "~deep.png", image)


FOLDER_VARIANTS = ["none", "garbage", "empty", "bomb", "escape", "loop", "inside", "deep"]


@props(60)
@given(tree=image_folders())
def test_image_folder_gives_its_samples(tmp_path, tree):
    check_image_folder(tmp_path, tree, "none")


@pytest.mark.parametrize("variant", FOLDER_VARIANTS[1:])
@props(10)
@given(tree=image_folders())
def test_image_folder_refuses_hostile_files_or_reads_benign_ones(tmp_path, tree, variant):
    check_image_folder(tmp_path, tree, variant)


def check_image_folder(tmp_path, tree, variant) -> None:
    work = fresh(tmp_path)
    root, outside = work / "data", work / "outside"
    root.mkdir()
    outside.mkdir()
    expected = write_image_folder(root, tree)
    classes = sorted(c for c in tree if not c.startswith("."))
    needle = None
    if variant != "none" and classes:
        needle, extra = _folder_variant(root, variant, outside, classes[0])
        if extra:
            expected = sorted(expected + [(extra[0], 0, classes[0], extra[1])], key=lambda e: (e[1], e[0].split("/")))
    if needle is None and not classes:
        refused(lambda: sb.load_dataset(str(root), format="imagefolder"), "has no class sub-folders")
    elif needle is None and not expected:
        refused(lambda: sb.load_dataset(str(root), format="imagefolder"), "no images")
    elif needle is None:
        ds = sb.load_dataset(str(root), format="imagefolder")
        assert ds.class_names == classes and ds.label_space.class_names == tuple(classes)
        assert_samples(ds, expected)
        try:  # detection: the same reader, or one line saying it cannot tell
            detected = sb.load_dataset(str(root))
        except ShiftbenchError as exc:
            assert "\n" not in str(exc)
        else:
            assert type(detected).__name__ == "ImageFolder" and len(detected) == len(ds)
    else:
        refused(lambda: sb.load_dataset(str(root), format="imagefolder", verify="full"), needle)


def test_image_folder_through_the_cli(tmp_path, capsys):
    root = tmp_path / "data"
    tree = {"<b>cat&amp;": [("-x.png", np.full((8, 8, 3), 1, np.uint8))], "dog\nhound": [(".hidden.png", None)],
            "émeu 🐦": [("a b.png", np.full((9, 8, 3), 2, np.uint8))]}
    for c, files in tree.items():
        (root / c).mkdir(parents=True)
        for name, image in files:
            (root / c / name).write_bytes(encode(image) if image is not None else b"junk")
    cli_ok(capsys, ["generate", "--dataset", str(root), "--shift", "clean", "--severity", "0", "--out",
                    str(tmp_path / "out")])
    back = sb.load_dataset(str(tmp_path / "out" / "clean" / "0"))
    assert back.class_names == ["<b>cat&amp;", "dog\nhound", "émeu 🐦"]  # the empty class is kept
    assert [(s.id, s.label) for s in back] == [("<b>cat&amp;/-x.png", 0), ("émeu 🐦/a b.png", 2)]
    (root / "dog\nhound" / "broken.png").write_bytes(b"junk")
    cli_refused(capsys, ["generate", "--dataset", str(root), "--shift", "clean", "--severity", "0", "--out",
                         str(tmp_path / "out2")], "'dog\\nhound/broken.png'")


# -- Pascal VOC --------------------------------------------------------------------------------------------

def _voc_variant(root: Path, spec: dict, kind: str) -> str:
    """Breaks a VOC folder one way; returns the needle of its one-line refusal."""
    first = spec["ids"][0]
    listing = root / "ImageSets" / "Segmentation" / "val.txt"
    if kind == "value":
        bad = spec["records"][0][1].copy()
        bad[0, 0] = 57
        (root / "SegmentationClass" / f"{first}.png").write_bytes(palette_png(bad))
        return "holds value 57"
    if kind == "size":
        (root / "SegmentationClass" / f"{first}.png").write_bytes(palette_png(np.zeros((5, 5), np.uint8)))
        return "differs from image"
    if kind == "garbage":
        (root / "SegmentationClass" / f"{first}.png").write_bytes(b"<xml>not a png")
        return shown(f"SegmentationClass/{first}.png")
    if kind == "missing":
        (root / "JPEGImages" / f"{first}.png").unlink()
        return "file not found"
    root.joinpath("ImageSets", "Segmentation").mkdir(parents=True, exist_ok=True)
    if kind == "twice":
        listing.write_text("x\nx\n")
        return "line 2 lists x again"
    if kind == "escape":
        listing.write_text("../../etc/passwd\n")
        return "escapes the dataset root"
    listing.write_bytes(b"\xff\xfe\x00bad\n")  # not UTF-8
    return "cannot read"


VOC_VARIANTS = ["none", "value", "size", "garbage", "missing", "twice", "escape", "encoding"]


def expected_boxes(classes: np.ndarray, objects: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    boxes, labels = [], []
    for k in np.unique(objects):
        if k in (0, 255):
            continue
        ys, xs = np.nonzero(objects == k)
        boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
        cls = classes[ys, xs]
        cls = cls[(cls != 0) & (cls != 255)]
        labels.append(int(np.bincount(cls).argmax()) if cls.size else 0)
    return np.array(boxes, np.float32).reshape(-1, 4), np.array(labels, np.int64)


@props(40)
@given(spec=voc_sets())
def test_voc_gives_its_samples(tmp_path, spec):
    check_voc(tmp_path, spec, "none")


@pytest.mark.parametrize("variant", VOC_VARIANTS[1:])
@props(8)
@given(spec=voc_sets())
def test_voc_refuses_hostile_files(tmp_path, spec, variant):
    check_voc(tmp_path, spec, variant)


def check_voc(tmp_path, spec, variant) -> None:
    root = fresh(tmp_path) / "VOC2012"
    write_voc(root, spec)
    ways = [path_refusal(f"JPEGImages/{i}.jpg") for i in spec["ids"] if path_refusal(f"JPEGImages/{i}.jpg")]
    if ways and variant in ("none", "value", "size", "garbage", "missing"):  # an id Windows reads as escaping
        refused(lambda: sb.load_dataset(str(root), format="voc"), "escapes the dataset root")
        return
    if variant == "none":
        ds = sb.load_dataset(str(root.parent), format="voc")
        order = spec["ids"] if spec["list"] else sorted(spec["ids"])
        assert [ds.sample_id(i) for i in range(len(ds))] == order
        for i, image_id in enumerate(order):
            image, classes, objects = spec["records"][spec["ids"].index(image_id)]
            s = ds.load(i)
            assert s.id == image_id and np.array_equal(s.image, image) and np.array_equal(s.mask, classes)
            if spec["objects"]:
                boxes, labels = expected_boxes(classes, objects)
                assert np.array_equal(s.boxes, boxes) and np.array_equal(s.box_labels, labels)
        return

    def read() -> None:
        ds = sb.load_dataset(str(root), format="voc")
        for i in range(len(ds)):
            ds.load(i)

    refused(read, _voc_variant(root, spec, variant))


def test_voc_through_the_cli(tmp_path, capsys):
    spec = {"ids": ["-2008 <b>", "é\nx"], "list": False, "objects": True,
            "records": [(np.full((8, 9, 3), k, np.uint8), np.full((8, 9), k, np.uint8), np.ones((8, 9), np.uint8))
                        for k in (3, 15)]}
    root = tmp_path / "VOC2012"
    write_voc(root, spec)
    cli_ok(capsys, ["generate", "--dataset", str(root), "--shift", "clean", "--severity", "0", "--out",
                    str(tmp_path / "out")])
    back = sb.load_dataset(str(tmp_path / "out" / "clean" / "0"), format="voc")
    assert [s.id for s in back] == sorted(spec["ids"]) and back.load(1).mask[0, 0] == 15
    (root / "SegmentationClass" / "é\nx.png").write_bytes(b"junk")
    cli_refused(capsys, ["generate", "--dataset", str(root), "--shift", "clean", "--severity", "0", "--out",
                         str(tmp_path / "out2")], "'SegmentationClass/é\\nx.png'")


# -- WebDataset tar shards ---------------------------------------------------------------------------------

def _name_label(name: str) -> bool:
    """Whether a .cls text member of ``name`` reads back as that name (not stripped, not a number)."""
    try:
        int(name)
        return False
    except ValueError:
        return name == name.strip() and bool(name)


@st.composite
def shard_sets(draw) -> dict:
    """1-2 shards of 1-3 records: keys and shard names drawn freely (a key ends at the first dot of its
    base name, so keys have none), labels as ints with a classes.json, as .cls names or as json class names."""
    mode = draw(st.sampled_from(["int", "cls-name", "json-name"]))
    pool = names().filter(_name_label) if mode == "cls-name" else names().filter(lambda n: n.strip())
    classes = draw(st.lists(pool, min_size=1, max_size=4, unique=True))
    key = names(2).filter(lambda n: "." not in n)
    shard_names = draw(st.lists(names(2).filter(lambda n: not n.startswith(".")), min_size=1, max_size=2,
                                unique=True))
    shards = []
    for shard in shard_names:
        keys = draw(st.lists(key, min_size=1, max_size=3, unique=True))
        shards.append((shard, [(k, draw(images()), draw(st.integers(0, len(classes) - 1))) for k in keys]))
    return {"mode": mode, "classes": classes, "shards": shards, "nested": draw(st.booleans())}


def write_shards(root: Path, spec: dict, extra=None) -> list[tuple]:
    """Writes ``shard.tar`` files (members sorted, fixed metadata); returns the samples the reader must give."""
    mode, classes = spec["mode"], spec["classes"]
    if mode == "int":
        (root / "classes.json").write_text(json.dumps(classes))
    folder = "deep/" * 40 if spec["nested"] else ""
    expected = []
    space = classes if mode == "int" else sorted(set(classes[c] for _, records in spec["shards"]
                                                      for _, _, c in records))
    for shard, records in sorted(spec["shards"]):
        with tarfile.open(root / f"{shard}.tar", "w", format=tarfile.PAX_FORMAT) as tar:
            for key, image, c in sorted(records, key=lambda r: r[0]):
                add_member(tar, f"{folder}{key}.png", encode(image))
                if mode == "int":
                    add_member(tar, f"{folder}{key}.cls", f"{c}\n".encode())
                elif mode == "cls-name":
                    add_member(tar, f"{folder}{key}.cls", classes[c].encode("utf-8"))
                else:
                    add_member(tar, f"{folder}{key}.json", json.dumps({"class_name": classes[c]}).encode())
                expected.append((f"{shard}/{folder}{key}", space.index(classes[c]), classes[c], image))
            for name, data, kind, link in (extra or {}).get(shard, []):
                add_member(tar, name, data, kind, link)
    return expected


def _shard_variant(kind: str, key: str) -> tuple[list, str]:
    """Members that make a shard hostile, and the needle of the refusal."""
    reg = tarfile.REGTYPE
    variants = {
        "dotdot": ([("x/../../evil.png", b"x", reg, "")], "escapes the shard"),
        "absolute": ([("/etc/evil.png", b"x", reg, "")], "absolute name"),
        "symlink": ([(f"{key}.txt", b"", tarfile.SYMTYPE, "/etc/passwd")], "symbolic link"),
        "hardlink": ([(f"{key}.txt", b"", tarfile.LNKTYPE, f"{key}.png")], "hard link"),
        "fifo": ([(f"{key}.txt", b"", tarfile.FIFOTYPE, "")], "a FIFO"),
        "deepjson": ([("zz/z.png", encode(np.zeros((8, 8, 3), np.uint8)), reg, ""),
                      ("zz/z.json", b"[" * 200_000 + b"]" * 200_000, reg, "")], "zz/z.json: JSON nested too deeply"),
        "nan": ([("zz/z.png", encode(np.zeros((8, 8, 3), np.uint8)), reg, ""),
                 ("zz/z.json", b'{"label": NaN}', reg, "")],
                "label field 'label' is NaN"),
        "float": ([("zz/z.png", encode(np.zeros((8, 8, 3), np.uint8)), reg, ""), ("zz/z.json", b"1.5", reg, "")],
                  "neither an integer nor a class name"),
        "big-json": ([("zz/z.png", encode(np.zeros((8, 8, 3), np.uint8)), reg, ""),
                      ("zz/z.json", b" " * (1 << 20) + b"1", reg, "")], "more than 1048576"),
        "huge-label": ([("zz/z.png", encode(np.zeros((8, 8, 3), np.uint8)), reg, ""),
                        ("zz/z.cls", b"99999999999", reg, "")],
                       "label 99999999999"),
        "twice": ([(f"{key}.png", encode(np.zeros((8, 8, 3), np.uint8)), reg, "")], "appears twice"),
        "utf8": ([("zz/z.png", encode(np.zeros((8, 8, 3), np.uint8)), reg, ""), ("zz/z.cls", b"\xff\xfe", reg, "")],
                 "not UTF-8"),
    }
    return variants[kind]


SHARD_VARIANTS = ["none", "dotdot", "absolute", "symlink", "hardlink", "fifo", "deepjson", "nan", "float",
                  "big-json", "huge-label", "twice", "utf8", "gzip", "truncated"]


@props(60)
@given(spec=shard_sets())
def test_webdataset_gives_its_samples(tmp_path, spec):
    check_webdataset(tmp_path, spec, "none")


@pytest.mark.parametrize("variant", SHARD_VARIANTS[1:])
@props(6)
@given(spec=shard_sets())
def test_webdataset_refuses_hostile_shards(tmp_path, spec, variant):
    check_webdataset(tmp_path, spec, variant)


def check_webdataset(tmp_path, spec, variant) -> None:
    root = fresh(tmp_path)
    shard, records = sorted(spec["shards"])[0]
    folder = "deep/" * 40 if spec["nested"] else ""
    extra, needle = ({}, "") if variant in ("none", "gzip", "truncated") else _shard_variant(variant, records[0][0])
    if extra:
        if variant in ("symlink", "hardlink", "fifo", "twice"):
            extra = [(folder + name, *rest) for name, *rest in extra]
        extra = {shard: extra}
    assume(variant != "huge-label" or spec["mode"] == "int")  # names and integers mixed: refused as a whole
    expected = write_shards(root, spec, extra)
    windows = [path_refusal(folder + k) for shard_, records_ in sorted(spec["shards"])
               for k, _, _ in sorted(records_, key=lambda r: r[0]) if path_refusal(folder + k)]
    if windows and variant not in ("dotdot", "absolute", "gzip", "truncated"):
        # a member name Windows reads as absolute ("\\x", "c:x") or escaping is refused like a POSIX one
        refused(lambda: sb.load_dataset(str(root)), {"absolute": "absolute name", "escapes": "escapes the shard"}[
            windows[0]])
        return
    if variant == "none":
        ds = sb.load_dataset(str(root))
        assert type(ds).__name__ == "WebDatasetShards" and ds.skipped == []
        if spec["mode"] == "int":
            assert ds.class_names == spec["classes"]
        assert_samples(ds, expected)
        return
    path = root / f"{shard}.tar"
    if variant == "gzip":
        path.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
        needle = "gzip-compressed"
    elif variant == "truncated":
        path.write_bytes(path.read_bytes()[:700])
        needle = shown(path)
    elif variant not in ("dotdot", "absolute"):  # a bad record, named with its shard
        needle = needle if variant != "twice" else "appears twice"
        refused(lambda: sb.load_dataset(str(root)), f"{shown(shard)}.tar" if shown(shard) == shard else "", needle)
        return
    refused(lambda: sb.load_dataset(str(root)), needle)


def test_webdataset_labels_that_mix_or_overflow(tmp_path):
    root = tmp_path / "mix"
    root.mkdir()
    with tarfile.open(root / "a.tar", "w") as tar:
        for key, label in (("k0", b"cat"), ("k1", b"3")):
            add_member(tar, f"{key}.png", encode(np.zeros((8, 8, 3), np.uint8)))
            add_member(tar, f"{key}.cls", label)
    refused(lambda: sb.load_dataset(str(root)), "labels mix integers (3) and names ('cat')")
    ok = sb.load_dataset(str(root), classes=["cat", "a", "b", "dog"])  # with the names, both read
    assert [(s.label, s.class_name) for s in ok] == [(0, "cat"), (3, "dog")]
    # a json class_name is a name exactly as written, never a number
    with tarfile.open(root / "a.tar", "w") as tar:
        add_member(tar, "k0.png", encode(np.zeros((8, 8, 3), np.uint8)))
        add_member(tar, "k0.json", json.dumps({"class_name": "1"}).encode())
    named = sb.load_dataset(str(root), classes=["0", "x", "1"])
    assert (named.load(0).label, named.load(0).class_name) == (2, "1")


def test_webdataset_through_the_cli(tmp_path, capsys):
    spec = {"mode": "json-name", "classes": ["a\nb", "<i>c</i>"], "nested": False,
            "shards": [("-shard 0", [("k\n1", np.full((8, 8, 3), 5, np.uint8), 0),
                                     ("k2", np.full((8, 8, 3), 9, np.uint8), 1)])]}
    root = tmp_path / "wds"
    root.mkdir()
    write_shards(root, spec)
    cli_ok(capsys, ["generate", "--dataset", str(root), "--shift", "clean", "--severity", "0", "--format",
                    "webdataset", "--out", str(tmp_path / "out")])
    back = sb.load_dataset(str(tmp_path / "out" / "clean" / "0"))
    assert [(s.label, s.class_name) for s in back] == [(1, "a\nb"), (0, "<i>c</i>")]  # sorted: "<" < "a"
    deep = tmp_path / "deep"
    deep.mkdir()
    write_shards(deep, spec, {"-shard 0": [("zz/z.png", encode(np.zeros((8, 8, 3), np.uint8)), tarfile.REGTYPE, ""),
                                           ("zz/z.json", b"{\"a\":" * 100_000, tarfile.REGTYPE, "")]})
    cli_refused(capsys, ["generate", "--dataset", str(deep), "--shift", "clean", "--severity", "0", "--out",
                         str(tmp_path / "out2")], "-shard 0.tar:zz/z", "zz/z.json")


# -- Parquet and save_to_disk ------------------------------------------------------------------------------

def _table_variant(root: Path, spec: dict, kind: str) -> str:
    """Writes a hostile table (or folder); returns the needle of its refusal."""
    n = len(spec["rows"])
    if kind == "null-label":
        labels = [None] + ([c for _, _, c in spec["rows"]][1:] if spec["labels"] == "classlabel"
                           else [spec["classes"][c] for _, _, c in spec["rows"]][1:])
        write_table(root, spec, table_of(spec, labels=pa.array(labels, pa.int64() if spec["labels"] == "classlabel"
                                                                 else pa.string())))
        return "row 0 (no label"
    if kind == "null-id":
        write_table(root, spec, table_of(spec, ids=[None] + [r[0] for r in spec["rows"]][1:]))
        return "holds None"
    if kind == "dup-id":
        write_table(root, spec, table_of(spec, ids=["same"] * n)) if n > 1 else \
            write_table(root, spec, table_of(spec, ids=[None]))
        return "repeats the id 'same'" if n > 1 else "holds None"
    if kind == "far-label":
        write_table(root, spec, table_of(spec, labels=[10**12] * n, features={"label": {"_type": "Value"}}))
        return "label 1000000000000 is too large"
    if kind == "names-string":
        write_table(root, spec, table_of(spec, labels=[0] * n, features={"label": {"_type": "ClassLabel",
                                                                                     "names": "abc"}}))
        return "ClassLabel names must be a list of strings"
    if kind == "escape":
        write_table(root, spec, table_of(spec, images=[{"bytes": None, "path": "../../x.png"}] * n))
        return "escapes the dataset root"
    if kind == "nul":
        write_table(root, spec, table_of(spec, images=[{"bytes": None, "path": "a\x00.png"}] * n))
        return "NUL character"
    if kind == "garbage":
        write_table(root, spec, table_of(spec, images=[{"bytes": b"\xff\xd8junk", "path": None}] * n))
        return "row 0 (not a readable image"
    deep = b"[" * 200_000 + b"]" * 200_000
    if spec["layout"] == "parquet":  # metadata that is not JSON: its class names would be lost
        table = table_of(spec).replace_schema_metadata({b"huggingface": deep})
        write_table(root, spec, table)
        return "schema metadata 'huggingface': JSON nested too deeply"
    write_table(root, spec, table_of(spec))
    (root / "state.json").write_bytes(deep if kind == "deep-meta" else b'["data-00000-of-00001.arrow"]')
    return "state.json: JSON nested too deeply" if kind == "deep-meta" else "state.json holds list"


TABLE_VARIANTS = ["none", "null-label", "null-id", "dup-id", "far-label", "names-string", "escape", "nul",
                  "garbage", "deep-meta", "state-list"]


@props(60)
@given(spec=tables())
def test_parquet_and_arrow_give_their_samples(tmp_path, spec):
    check_table(tmp_path, spec, "none")


@pytest.mark.parametrize("variant", TABLE_VARIANTS[1:])
@props(6)
@given(spec=tables())
def test_parquet_and_arrow_refuse_hostile_tables(tmp_path, spec, variant):
    check_table(tmp_path, spec, variant)


def check_table(tmp_path, spec, variant) -> None:
    root = fresh(tmp_path)
    if variant == "state-list" and spec["layout"] == "parquet":
        variant = "deep-meta"
    if variant != "none":
        refused(lambda: sb.load_dataset(str(root), id_column="id"), _table_variant(root, spec, variant))
        return
    write_table(root, spec, table_of(spec))
    ds = sb.load_dataset(str(root), id_column="id")
    classes = spec["classes"]
    if spec["labels"] == "classlabel":
        space = classes
    else:
        space = sorted({classes[c] for _, _, c in spec["rows"]})
    assert ds.class_names == space
    assert_samples(ds, [(sid, space.index(classes[c]), classes[c], img) for sid, img, c in spec["rows"]])


def test_parquet_and_save_to_disk_through_the_cli(tmp_path, capsys):
    spec = {"rows": [("<b>1<i>", np.full((8, 8, 3), 3, np.uint8), 1), ("-x\ny", np.full((8, 9, 3), 4, np.uint8), 0)],
            "classes": ["a b", "\nc"], "labels": "classlabel", "files": 1, "group": 1}
    for layout in ("parquet", "arrow"):
        root = tmp_path / layout
        root.mkdir()
        write_table(root, dict(spec, layout=layout), table_of(spec, ids=None))
        out = tmp_path / f"out-{layout}"
        cli_ok(capsys, ["generate", "--dataset", str(root), "--shift", "clean", "--severity", "0", "--format",
                        "parquet", "--out", str(out)])
        back = sb.load_dataset(str(out / "clean" / "0"))
        assert [(s.label, s.class_name) for s in back] == [(1, "\nc"), (0, "a b")]
    (tmp_path / "arrow" / "state.json").write_text("[" * 100_000)
    cli_refused(capsys, ["generate", "--dataset", str(tmp_path / "arrow"), "--shift", "clean", "--severity", "0",
                         "--out", str(tmp_path / "out2")], "state.json: JSON nested too deeply")


# -- CIRR and FashionIQ ------------------------------------------------------------------------------------

@st.composite
def cirr_sets(draw) -> dict:
    """Image names (free), their files (free names under dev/), queries with free captions."""
    image_names = draw(st.lists(names(), min_size=2, max_size=4, unique=True))
    files = draw(st.lists(names(2), min_size=len(image_names), max_size=len(image_names), unique=True))
    pixels = [draw(images()) for _ in image_names]
    queries = []
    for pairid in draw(st.lists(st.integers(0, 10**6), min_size=1, max_size=3, unique=True)):
        reference, target = draw(st.permutations(image_names))[:2]
        members = draw(st.lists(st.sampled_from(image_names), max_size=3, unique=True))
        queries.append({"pairid": pairid, "reference": reference, "target_hard": target,
                        "caption": draw(st.text(max_size=20)), "img_set": {"members": members}})
    return {"names": image_names, "files": files, "pixels": pixels, "queries": queries}


def write_cirr(root: Path, spec: dict, queries=None, paths=None) -> None:
    (root / "captions").mkdir(parents=True)
    (root / "image_splits").mkdir()
    (root / "dev").mkdir()
    for file, image in zip(spec["files"], spec["pixels"]):
        (root / "dev" / f"{file}.png").write_bytes(encode(image))
    split = paths or {n: f"./dev/{f}.png" for n, f in zip(spec["names"], spec["files"])}
    (root / "image_splits" / "split.rc2.val.json").write_text(json.dumps(split))
    text = queries if isinstance(queries, str) else json.dumps(queries if queries is not None else spec["queries"])
    (root / "captions" / "cap.rc2.val.json").write_text(text)


def _cirr_variant(spec: dict, kind: str) -> tuple[Any, dict | None, str]:
    """(captions, split map or None, needle) of a hostile CIRR split."""
    q = dict(spec["queries"][0])
    split = {n: f"./dev/{f}.png" for n, f in zip(spec["names"], spec["files"])}
    first = spec["names"][0]
    cases = {
        "deep": ("[" * 100_000, None, "JSON nested too deeply"),
        "img-set-list": ([dict(q, img_set=["x"])], None, "img_set must be an object"),
        "members-int": ([dict(q, img_set={"members": 5})], None, "members must be a list"),
        "target-list": ([dict(q, target_hard=[first])], None, "target_hard must be an image name"),
        "caption-int": ([dict(q, caption=5)], None, "caption must be a string"),
        "caption-missing": ([{"pairid": 1, "reference": first}], None, "query 0: query without"),
        "dup": ([q, dict(q)], None, "query 1: pairid"),
        "nan-id": ('[{"pairid": NaN, "reference": %s, "caption": "x"}]' % json.dumps(first), None,
                   "pairid must be an integer or a string"),
        "unknown": ([dict(q, reference="\u2028nope")], None, "'\\u2028nope', which is not in split.rc2.val.json"),
        "escape": (spec["queries"], dict(split, **{first: "../../etc/passwd"}), "escapes the dataset root"),
        "absolute": (spec["queries"], dict(split, **{first: "/etc/passwd"}), "is absolute"),
        "nul": (spec["queries"], dict(split, **{first: "./dev/a\x00.png"}), "NUL character"),
        "missing": (spec["queries"], dict(split, **{first: "./dev/none\n.png"}), "'dev/none\\n.png' (file not found"),
    }
    return cases[kind]


CIRR_VARIANTS = ["none", "deep", "img-set-list", "members-int", "target-list", "caption-int", "caption-missing",
                 "dup", "nan-id", "unknown", "escape", "absolute", "nul", "missing"]


@props(40)
@given(spec=cirr_sets())
def test_cirr_gives_its_queries(tmp_path, spec):
    check_cirr(tmp_path, spec, "none")


@pytest.mark.parametrize("variant", CIRR_VARIANTS[1:])
@props(5)
@given(spec=cirr_sets())
def test_cirr_refuses_hostile_files(tmp_path, spec, variant):
    check_cirr(tmp_path, spec, variant)


def check_cirr(tmp_path, spec, variant) -> None:
    root = fresh(tmp_path)
    ways = [path_refusal(f"./dev/{f}.png") for f in spec["files"] if path_refusal(f"./dev/{f}.png")]
    if ways and variant in ("none", "deep", "missing"):  # a file name Windows reads as escaping
        write_cirr(root, spec)
        refused(lambda: sb.load_dataset(str(root), format="cirr"), "escapes")
        return
    if variant != "none":
        queries, split, needle = _cirr_variant(spec, variant)
        write_cirr(root, spec, queries, split)
        if variant == "missing" and spec["names"][0] not in {n for q in spec["queries"]
                                                             for n in [q["reference"], q["target_hard"]]}:
            needle = "file not found"
        refused(lambda: sb.load_dataset(str(root), format="cirr"), needle)
        return
    write_cirr(root, spec)
    ds = sb.load_dataset(str(root))
    assert type(ds).__name__ == "Cirr" and len(ds) == len(spec["queries"])
    pixels = dict(zip(spec["names"], spec["pixels"]))
    for i, q in enumerate(spec["queries"]):
        got = ds.load(i)
        subset = [m for m in q["img_set"]["members"] if m != q["reference"]] or None
        if subset is not None and q["target_hard"] not in subset:
            subset = None
        assert (got.id, got.text, got.target_id) == (str(q["pairid"]), q["caption"], q["target_hard"])
        assert got.subset_ids == (tuple(subset) if subset else None)
        assert got.reference.id == q["reference"] and np.array_equal(got.reference.image, pixels[q["reference"]])
    assert ds.gallery_ids() == sorted(spec["names"])


@st.composite
def fashioniq_sets(draw) -> dict:
    image_names = draw(st.lists(names(2).filter(lambda n: not n.endswith((".png", ".jpg", ".jpeg"))), min_size=2,
                                max_size=4, unique=True))
    pixels = [draw(images()) for _ in image_names]
    queries = []
    for _ in range(draw(st.integers(1, 3))):
        candidate, target = draw(st.permutations(image_names))[:2]
        queries.append({"candidate": candidate, "target": target,
                        "captions": draw(st.lists(st.text(max_size=12), min_size=2, max_size=2))})
    return {"names": image_names, "pixels": pixels, "queries": queries, "category": draw(st.sampled_from(
        ["dress", "shirt", "toptee"]))}


def write_fashioniq(root: Path, spec: dict, queries=None, split=None) -> None:
    c = spec["category"]
    for folder in ("captions", "image_splits", "images"):
        (root / folder).mkdir(parents=True)
    for name, image in zip(spec["names"], spec["pixels"]):
        (root / "images" / f"{name}.png").write_bytes(encode(image))
    (root / "image_splits" / f"split.{c}.val.json").write_text(json.dumps(split or spec["names"]))
    text = queries if isinstance(queries, str) else json.dumps(queries if queries is not None else spec["queries"])
    (root / "captions" / f"cap.{c}.val.json").write_text(text)


FASHIONIQ_VARIANTS = ["none", "deep", "captions-string", "captions-int", "candidate-dict", "split-dict", "long",
                      "escape"]


@props(40)
@given(spec=fashioniq_sets())
def test_fashioniq_gives_its_queries(tmp_path, spec):
    check_fashioniq(tmp_path, spec, "none")


@pytest.mark.parametrize("variant", FASHIONIQ_VARIANTS[1:])
@props(6)
@given(spec=fashioniq_sets())
def test_fashioniq_refuses_hostile_files(tmp_path, spec, variant):
    check_fashioniq(tmp_path, spec, variant)


def check_fashioniq(tmp_path, spec, variant) -> None:
    root = fresh(tmp_path)
    q = spec["queries"][0]
    ways = [path_refusal(f"{n}.png") for n in spec["names"] if path_refusal(f"{n}.png")]
    if ways and variant not in ("deep",):  # a name Windows reads as absolute ("\\x") is refused, named
        write_fashioniq(root, spec)
        refused(lambda: sb.load_dataset(str(root), format="fashioniq"), {"absolute": "is absolute",
                                                                          "escapes": "escapes"}[ways[0]])
        return
    hostile = {
        "deep": ("{\"a\":" * 100_000, None, "JSON nested too deeply"),
        "captions-string": ([dict(q, captions="two words")], None, "captions must be a list of strings"),
        "captions-int": ([dict(q, captions=["a", 3])], None, "captions must be a list of strings"),
        "candidate-dict": ([dict(q, candidate={"a": 1})], None, "candidate must be an image name"),
        "split-dict": (None, spec["names"] + [{"x": 1}], f"entry {len(spec['names'])}: the entry must be"),
        "long": (None, spec["names"] + ["x" * 5000], "cannot be a file"),
        "escape": (None, spec["names"] + ["../../etc/passwd"], "escapes the dataset root"),
    }
    if variant != "none":
        queries, split, needle = hostile[variant]
        write_fashioniq(root, spec, queries, split)
        refused(lambda: sb.load_dataset(str(root), format="fashioniq"), needle)
        return
    write_fashioniq(root, spec)
    ds = sb.load_dataset(str(root))
    assert type(ds).__name__ == "FashionIQ" and len(ds) == len(spec["queries"])
    pixels = dict(zip(spec["names"], spec["pixels"]))
    for i, q in enumerate(spec["queries"]):
        got = ds.load(i)
        texts = [t.strip() for t in q["captions"]]
        assert got.id == f"{spec['category']}/val/{i}" and got.target_id == q["target"]
        assert got.text == " and ".join(t.rstrip(".") for t in texts if t) and got.meta["captions"] == texts
        assert got.reference.id == q["candidate"] and np.array_equal(got.reference.image, pixels[q["candidate"]])


def test_retrieval_readers_through_the_cli(tmp_path, capsys):
    spec = {"names": ["<b>a<i>", "-b\nc"], "files": ["a", ".b"], "pixels": [np.zeros((8, 8, 3), np.uint8)] * 2,
            "queries": [{"pairid": 7, "reference": "<b>a<i>", "target_hard": "-b\nc", "caption": "one\ntwo three",
                         "img_set": {"members": ["<b>a<i>", "-b\nc"]}}]}
    write_cirr(tmp_path / "cirr", spec)
    cli_ok(capsys, ["generate", "--dataset", str(tmp_path / "cirr"), "--shift", "text_swap", "--severity", "1",
                    "--out", str(tmp_path / "out")])
    record = json.loads((tmp_path / "out" / "manifest.jsonl").read_text())
    assert record["id"] == "7"
    write_cirr(tmp_path / "bad", spec, [dict(spec["queries"][0], img_set=["x"])])
    cli_refused(capsys, ["generate", "--dataset", str(tmp_path / "bad"), "--shift", "text_swap", "--severity", "1",
                         "--out", str(tmp_path / "out2")], "cap.rc2.val.json: query 0", "img_set must be an object")
    fiq = {"names": ["x\ny", "z"], "pixels": [np.zeros((8, 8, 3), np.uint8)] * 2, "category": "dress",
           "queries": [{"candidate": "x\ny", "target": "z", "captions": ["is red.", "<b>longer"]}]}
    write_fashioniq(tmp_path / "fiq", fiq)
    cli_ok(capsys, ["generate", "--dataset", str(tmp_path / "fiq"), "--shift", "text_swap", "--severity", "1",
                    "--out", str(tmp_path / "out3")])
    write_fashioniq(tmp_path / "fiq2", fiq, [dict(fiq["queries"][0], captions="one string")])
    cli_refused(capsys, ["generate", "--dataset", str(tmp_path / "fiq2"), "--shift", "text_swap", "--severity", "1",
                         "--out", str(tmp_path / "out4")], "cap.dress.val.json: query 0", "captions must be a list")


# -- the messages themselves -------------------------------------------------------------------------------

@props(30)
@given(name=names(4))
def test_a_bad_record_name_is_shown_on_one_line(name):
    message = str(BadImagesError([(name, "why\nnot")], "/data"))
    assert "\n" not in message and "\r" not in message and "\u2028" not in message
    assert shown(name) in message
    assert shown(name) == name or ast.literal_eval(shown(name)) == name  # quoted only when needed, losslessly


def test_the_corpus_round_trip_cases_read_back(tmp_path, monkeypatch, capsys):
    """The corpus runner checks exit status and message; here the output of a round-trip case is read back."""
    from corpus.cases_readers import CASES

    cases = [case for case in CASES if "read_back" in case.extra]
    assert cases
    for case in cases:
        work, out = fresh(tmp_path), fresh(tmp_path)
        case.build(work)
        monkeypatch.chdir(work)
        cli_ok(capsys, [arg.replace("{out}", str(out)) for arg in case.argv])
        back = sb.load_dataset(str(out / case.extra["read_back"]["folder"]))
        assert [[s.label, s.class_name] for s in back] == case.extra["read_back"]["labels"]
