"""Corpus cases for the dataset readers (all but COCO): a hostile input gives one line naming the file or the
record, and a class name with a line break survives a webdataset round trip.

Before, a ``../`` or symbolic-link member in a tar shard was refused (or silently ignored), a deeply nested
JSON member raised RecursionError, a damaged tar header silently dropped every later record, a class name
holding a line break was written to ``classes.txt`` and read back as two classes (every later label moved),
a VOC class map with a value outside the palette was read as it was, and a CIRR ``img_set`` that was not an
object raised AttributeError. Tar shards are built deterministically: members sorted by name, mtime 0,
uid/gid 0, no user names, mode 0644, PAX format.

``extra["read_back"]`` (read by tests/datasets/test_readers_properties.py): the generated folder below ``{out}`` and
the (label, class name) of each record read back from it.
"""

from __future__ import annotations

from dataclasses import replace

import io
import json
import tarfile
from pathlib import Path
from typing import Callable

from corpus.case import Case, png_bytes, image, write_json, write_png, write_text

GENERATE = ["generate", "--dataset", "data", "--shift", "clean", "--severity", "0", "--out", "{out}"]
REFUSED = {"out_empty": True}  # refused before anything is written


def write_tar(path: Path, members: dict[str, bytes | tuple[bytes, str]]) -> None:
    """A tar of ``members`` (name -> data, or (tar type, link target) for a link), sorted, fixed metadata."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            value = members[name]
            info = tarfile.TarInfo(name)
            info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = 0, 0o644, 0, 0, "", ""
            if isinstance(value, tuple):
                info.type, info.linkname = value
                tar.addfile(info)
            else:
                info.size = len(value)
                tar.addfile(info, io.BytesIO(value))
    path.write_bytes(buf.getvalue())


def _record(key: str, seed: int, label: bytes | None = None, meta: dict | None = None) -> dict:
    members: dict = {f"{key}.png": png_bytes(image(16, 16, seed))}
    if label is not None:
        members[f"{key}.cls"] = label
    if meta is not None:
        members[f"{key}.json"] = json.dumps(meta, sort_keys=True).encode()
    return members


def _shard(extra: dict) -> Callable[[Path], None]:
    """A builder: ``data/shard-000000.tar`` of two good records plus ``extra`` members."""

    def build(root: Path) -> None:
        write_tar(root / "data" / "shard-000000.tar", {**_record("k0", 1, b"0"), **_record("k1", 2, b"1"), **extra})

    return build


def _damaged_header(root: Path) -> None:
    """Three records; the header of the second record's image is overwritten (a bad sector, a bad copy)."""
    path = root / "data" / "shard-000000.tar"
    write_tar(path, {**_record("k0", 1, b"0"), **_record("k1", 2, b"1"), **_record("k2", 3, b"0")})
    data = bytearray(path.read_bytes())
    with tarfile.open(path) as tar:
        second = [m for m in tar.getmembers() if m.name == "k1.cls"][0]
    data[second.offset:second.offset + 16] = b"\xde\xad\xbe\xef" * 4
    path.write_bytes(bytes(data))


def _line_break_classes(root: Path) -> None:
    """Records whose json names their class: one name holds a line break, one starts with spaces."""
    write_tar(root / "data" / "shard-000000.tar", {**_record("k0", 1, meta={"class_name": "a\nb"}),
                                                   **_record("k1", 2, meta={"class_name": "  c"})})


def _image_folder_with_broken_file(root: Path) -> None:
    write_png(root / "data" / "cat" / "ok.png", 16, 16, seed=1)
    write_png(root / "data" / "dog" / "ok.png", 16, 16, seed=2)
    write_text(root / "data" / "dog" / "broken.png", "not an image\n")


def _voc(value: int) -> Callable[[Path], None]:
    """A builder: a VOC folder of one 16x16 image whose class map holds ``value`` in one pixel."""

    def build(root: Path) -> None:
        from PIL import Image

        from shiftbench.datasets.voc import voc_colormap

        voc = root / "data" / "VOC2012"
        write_png(voc / "JPEGImages" / "2007_000001.png", 16, 16, seed=3)
        values = bytearray(16 * 16)
        values[0] = value
        label = Image.frombytes("P", (16, 16), bytes(values))
        label.putpalette(voc_colormap().reshape(-1).tolist())
        buf = io.BytesIO()
        label.save(buf, format="PNG", compress_level=6)
        (voc / "SegmentationClass").mkdir(parents=True)
        (voc / "SegmentationClass" / "2007_000001.png").write_bytes(buf.getvalue())

    return build


def _cirr(root: Path) -> None:
    write_png(root / "data" / "dev" / "a.png", 16, 16, seed=4)
    write_png(root / "data" / "dev" / "b.png", 16, 16, seed=5)
    write_json(root / "data" / "image_splits" / "split.rc2.val.json", {"a": "./dev/a.png", "b": "./dev/b.png"})
    write_json(root / "data" / "captions" / "cap.rc2.val.json",
               [{"pairid": 1, "reference": "a", "target_hard": "b", "caption": "is red", "img_set": ["a", "b"]}])


CASES = [
    Case("webdataset-member-escapes-the-shard", _shard({"../evil.png": b"x"}), GENERATE, 2,
         "member '../evil.png' escapes the shard",
         "a tar member named ../ must refuse the shard, naming it", "paths", REFUSED),
    Case("webdataset-symlink-member", _shard({"k2.png": (tarfile.SYMTYPE, "/etc/passwd"), "k2.cls": b"0"}),
         GENERATE, 2, "shard-000000.tar:k2 (member k2.png is a symbolic link (to '/etc/passwd')",
         "a symbolic-link member was dropped as 'no image member'; it is named as a link now", "paths", REFUSED),
    Case("webdataset-deeply-nested-json", _shard({**_record("k2", 3), "k2.json": b"[" * 5000 + b"]" * 5000}),
         GENERATE, 2, "shard-000000.tar:k2 (unreadable label member k2.json: JSON nested too deeply",
         "a deeply nested JSON member raised RecursionError", "traceback", REFUSED),
    Case("webdataset-damaged-header", _damaged_header, GENERATE, 2, "(bytes at offset",
         "a damaged member header ended the listing quietly: every later record was dropped", "numbers", REFUSED),
    Case("webdataset-class-name-with-line-break", _line_break_classes, GENERATE + ["--format", "webdataset"], 0,
         "wrote 2 outputs",
         "a class name with a line break, written to classes.txt, read back as two classes", "numbers",
         extra={"read_back": {"folder": "clean/0", "labels": [[1, "a\nb"], [0, "  c"]]}}),
    Case("imagefolder-unreadable-image", _image_folder_with_broken_file, GENERATE, 2,
         "dog/broken.png (not a readable image", "an unreadable image is named, on one line", "traceback", REFUSED),
    Case("imagefolder-unreadable-image-names-the-flag", _image_folder_with_broken_file, GENERATE, 2,
         "corrupt format)) (pass --on-error skip to leave them out and report them)",
         "the way out was said as Python's on_error='skip' to command-line users; the CLI names its flag",
         "hint", REFUSED),
    Case("voc-class-map-value-outside-palette", _voc(57), GENERATE, 2,
         "label map holds value 57, not a VOC class (0..20) nor void (255)",
         "a class-map value outside the 21 VOC classes was read as a label", "numbers", REFUSED),
    Case("cirr-img-set-not-an-object", _cirr, GENERATE[:3] + ["--shift", "text_swap", "--severity", "1", "--out",
                                                             "{out}"], 2,
         "cap.rc2.val.json: query 0: img_set must be an object",
         "an img_set that is a list raised AttributeError", "traceback", REFUSED),
]

# the issue-25 class of each case (files-lost, numbers silently wrong, traceback, dry-run promise)
KINDS = {
    "webdataset-member-escapes-the-shard": "numbers",
    "webdataset-symlink-member": "numbers",
    "webdataset-deeply-nested-json": "traceback",
    "webdataset-damaged-header": "numbers",
    "webdataset-class-name-with-line-break": "numbers",
    "imagefolder-unreadable-image": "traceback",
    "imagefolder-unreadable-image-names-the-flag": "hint",
    "voc-class-map-value-outside-palette": "numbers",
    "cirr-img-set-not-an-object": "traceback",
}
CASES = [replace(case, kind=KINDS[case.name]) for case in CASES]
