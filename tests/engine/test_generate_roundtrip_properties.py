"""`generate` in every output format, read back (Hypothesis): folder (PNG, JPEG), WebDataset shards and
Parquet files, from image folders, Parquet tables and Pascal VOC folders with arbitrary names.

What comes back is what went in: the same ids (WebDataset: ``shard-NNNNNN/<key>``, the key of the source id),
labels, class names and label space, and the pixels of the shift (PNG exactly; JPEG exactly the decoded JPEG
encoding of the shifted image). Two samples that one output would merge (``x.png`` and ``x.bmp``; ids with
one shard key) are refused before any work with one line naming both.
"""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from PIL import Image

import shiftbench as sb
from readers_strategies import (cli_ok, fresh, image_folders, props, refused, table_of, tables, voc_sets,
                                write_image_folder, write_table, write_voc)
from shiftbench.engine.generate import generate
from shiftbench.engine.shards import sample_key

pytest.importorskip("pyarrow")

LAYOUTS = ("folder", "webdataset", "parquet")
SHIFTS = [("clean", 0), ("brightness", 3), ("pixelate", 2)]


def stored(image: np.ndarray, fmt: str) -> np.ndarray:
    """The pixels an output of ``fmt`` holds: the image itself (PNG), or its JPEG encoding decoded."""
    if fmt == "png":
        return image
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=95, subsampling=0)
    return np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))


def shifted(source, shift: str, severity: int, seed: int, indices) -> dict[str, np.ndarray]:
    """Each source sample's image under the shift applied on the fly (what generate must have written)."""
    fn = sb.create_shift(shift)
    return {source.sample_id(i): fn(source.load(i), severity=severity, seed=seed).image for i in indices}


def output_key(layout: str, sid: str, suffix: str) -> str:
    """Where a source id goes: its mirrored path with the output suffix (folder) or its shard key."""
    if layout == "folder":
        stem, _, _ = sid.rpartition(".")
        return f"{stem}{suffix}".casefold()
    return sample_key(sid)


def collision(layout: str, ids: list[str], suffix: str) -> tuple[str, str] | None:
    """The first two ids one output would merge, or None (a Parquet row keeps its id, whatever it is)."""
    if layout == "parquet":
        return None
    seen: dict[str, str] = {}
    for sid in ids:
        key = output_key(layout, sid, suffix)
        if key in seen:
            return seen[key], sid
        seen[key] = sid
    return None


def read_back(folder, layout: str):
    return sb.load_dataset(str(folder), format="imagefolder") if layout == "folder" else sb.load_dataset(str(folder))


def check_round_trip(out, source, layout: str, fmt: str, shift: str, severity: int, pixels: dict,
                     n: int, shard_samples: int) -> None:
    """The generated (shift, severity) folder holds the source's first ``n`` samples, unchanged but for the shift."""
    back = read_back(out / shift / str(severity), layout)
    assert len(back) == n and back.class_names == source.class_names
    assert back.label_space.class_names == source.label_space.class_names
    for i in range(n):
        sid, want = source.sample_id(i), source.load(i)
        got = back.load(i)
        if layout == "folder":
            stem, _, _ = sid.rpartition(".")
            assert got.id == stem + (".png" if fmt == "png" else ".jpg")
        elif layout == "webdataset":
            assert got.id == f"shard-{i // shard_samples:06d}/{sample_key(sid)}"
        else:
            assert got.id == sid
        assert (got.label, got.class_name) == (want.label, want.class_name)
        assert np.array_equal(got.image, stored(pixels[sid], fmt))


@props(60)
@given(data=st.data(), fmt=st.sampled_from(["png", "jpeg"]), shift=st.sampled_from(SHIFTS),
       seed=st.integers(0, 2**63 - 1), limit=st.none() | st.integers(1, 3), shard_samples=st.integers(1, 3))
def test_image_folder_round_trips_in_every_format(tmp_path, data, fmt, shift, seed, limit, shard_samples):
    work = fresh(tmp_path)
    tree = data.draw(image_folders() if shift[0] == "clean" else image_folders(32, 36))  # corruptions need 32 px
    expected = write_image_folder(work / "src", tree)
    kwargs = {"format": "imagefolder"}
    name, severity = shift
    for layout in LAYOUTS:
        out = work / f"out-{layout}"

        def run():
            return generate(str(work / "src"), [name], [severity], out, seed=seed, limit=limit, fmt=fmt,
                            layout=layout, shard_samples=shard_samples, dataset_kwargs=kwargs)

        if not expected:  # no class folder or no image: refused, in one line, before any output
            event("no image: refused")
            refused(run, "imagefolder")
            continue
        n = min(limit or len(expected), len(expected))
        ids = [e[0] for e in expected[:n]]
        pair = collision(layout, ids, ".png" if fmt == "png" else ".jpg")
        if pair:
            event(f"{layout}: two samples, one output: refused")
            refused(run, "would both")
            assert not out.exists() or not any(out.rglob("*.png"))
            continue
        run()
        event(f"{layout}: round trip")
        source = sb.load_dataset(str(work / "src"), format="imagefolder")
        check_round_trip(out, source, layout, fmt, name, severity, shifted(source, name, severity, seed, range(n)),
                         n, shard_samples)


@props(50)
@given(spec=tables(), fmt=st.sampled_from(["png", "jpeg"]), layout=st.sampled_from(["webdataset", "parquet"]))
def test_tables_round_trip_through_shards(tmp_path, spec, fmt, layout):
    """Parquet / save_to_disk sources, their ids and class names free, through both shard formats."""
    work = fresh(tmp_path)
    (work / "src").mkdir()
    write_table(work / "src", spec, table_of(spec))
    kwargs = {"format": "parquet", "id_column": "id"}
    out = work / "out"

    def run():
        return generate(str(work / "src"), ["clean"], [0], out, fmt=fmt, layout=layout, shard_samples=2,
                        dataset_kwargs=kwargs)

    source = sb.load_dataset(str(work / "src"), **kwargs)
    ids = [source.sample_id(i) for i in range(len(source))]
    if layout == "webdataset" and collision(layout, ids, ""):
        event("webdataset: two ids, one key: refused")
        refused(run, "would both get the shard key")
        return
    event(f"{layout}: round trip")
    run()
    check_round_trip(out, source, layout, fmt, "clean", 0, {s.id: s.image for s in source}, len(source), 2)


@props(30)
@given(spec=voc_sets())
def test_voc_round_trips_as_a_voc_folder(tmp_path, spec):
    work = fresh(tmp_path)
    write_voc(work / "VOC2012", spec)
    source = sb.load_dataset(str(work / "VOC2012"), format="voc")
    generate(str(work / "VOC2012"), ["clean"], [0], work / "out", dataset_kwargs={"format": "voc"})
    back = sb.load_dataset(str(work / "out" / "clean" / "0"), format="voc")
    assert [back.sample_id(i) for i in range(len(back))] == [source.sample_id(i) for i in range(len(source))]
    for a, b in zip(source, back):
        assert a.id == b.id and np.array_equal(a.image, b.image) and np.array_equal(a.mask, b.mask)
        assert np.array_equal(a.boxes if a.boxes is not None else [], b.boxes if b.boxes is not None else [])


# -- the defects a user found, and the CLI as a user runs it ----------------------------------------------

def test_a_class_name_with_a_line_break_round_trips_through_webdataset(tmp_path):
    """Written to classes.txt, "a\\nb" read back as two classes and shifted every later label."""
    src = tmp_path / "src"
    for k, c in enumerate(["a\nb", " padded ", "z"]):
        (src / c).mkdir(parents=True)
        Image.fromarray(np.full((8, 8, 3), 40 * k, np.uint8)).save(src / c / "x.png")
    generate(str(src), ["clean"], [0], tmp_path / "out", layout="webdataset", dataset_kwargs={"format": "imagefolder"})
    folder = tmp_path / "out" / "clean" / "0"
    assert json.loads((folder / "classes.json").read_text()) == [" padded ", "a\nb", "z"]
    assert not (folder / "classes.txt").exists()
    back = sb.load_dataset(str(folder))
    assert back.class_names == [" padded ", "a\nb", "z"]
    assert [(s.label, s.class_name) for s in back] == [(0, " padded "), (1, "a\nb"), (2, "z")]


def test_plain_class_names_keep_classes_txt(tmp_path):
    src = tmp_path / "src"
    for c in ("cat", "tabby cat"):
        (src / c).mkdir(parents=True)
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(src / c / "x.png")
    generate(str(src), ["clean"], [0], tmp_path / "out", layout="webdataset")
    assert (tmp_path / "out" / "clean" / "0" / "classes.txt").read_text() == "cat\ntabby cat\n"


def test_a_class_without_output_keeps_its_folder(tmp_path):
    """A class with no output image (no file, a limit, a skipped one) keeps its folder: later labels stay."""
    src = tmp_path / "src"
    for c in ("a", "b", "c"):
        (src / c).mkdir(parents=True)
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(src / c / "x.png")
    (src / "b" / "x.png").unlink()
    generate(str(src), ["clean"], [0], tmp_path / "out")
    back = sb.load_dataset(str(tmp_path / "out" / "clean" / "0"))
    assert back.class_names == ["a", "b", "c"] and [s.label for s in back] == [0, 2]
    generate(str(src), ["clean"], [0], tmp_path / "shards", layout="webdataset")  # no class folders among shards
    assert sorted(p.name for p in (tmp_path / "shards" / "clean" / "0").iterdir()) == ["classes.txt",
                                                                                      "shard-000000.tar"]


@pytest.mark.parametrize("layout", ["folder", "webdataset", "parquet"])
@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_generate_round_trips_through_the_cli(tmp_path, capsys, layout, fmt):
    src = tmp_path / "src"
    names = {"<b>bold": ["-1.png", "a\nb.png"], ".hidden": ["x.png"], "猫 🐈": [" sp .png"]}
    for k, (c, files) in enumerate(names.items()):
        (src / c).mkdir(parents=True)
        for j, f in enumerate(files):
            Image.fromarray(np.full((9, 10, 3), 30 * k + j, np.uint8)).save(src / c / f, format="PNG")
    out = tmp_path / "out"
    cli_ok(capsys, ["generate", "--dataset", str(src), "--shift", "clean", "--severity", "0", "--out", str(out),
                    "--format", layout, "--image-format", fmt, "--shard-samples", "2"])
    source = sb.load_dataset(str(src))
    check_round_trip(out, source, layout, fmt, "clean", 0, {s.id: s.image for s in source}, len(source), 2)
    if layout == "webdataset":  # the shard is deterministic: members sorted by index, fixed metadata
        with tarfile.open(out / "clean" / "0" / "shard-000000.tar") as tar:
            assert {(m.mtime, m.uid, m.gid, m.uname) for m in tar} == {(0, 0, 0, "")}
