"""`shiftbench generate` keeps the input's format: a COCO set gives COCO folders, a VOC set VOC folders.

Each generated ``<shift>/<severity>`` folder is read back by the reader of the input, its images are the
shift on the fly pixel for pixel (PNG), its annotations are the source's, and evaluating it gives the rows
of the same shift evaluated on the fly (box/mask AP for COCO, mIoU for VOC). Sample ids are unchanged, so an
``ids:`` file written against the source selects the same samples. Resume after a kill and the worker count
change no byte.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import coco_synth
import shiftbench as sb
from shiftbench.datasets.voc import VOC_CLASSES, voc_colormap
from shiftbench.engine.generate import generate
from shiftbench.errors import ShiftbenchError
from shiftbench.labelspace import LabelSpace
from shiftbench.models.dummy import DummySegmenter
from shiftbench.registry import MODELS

TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _rows(rows: list[dict], shift: str) -> dict[str, tuple]:
    return {r["metric"]: (r["value"], r["n"]) for r in rows if r["shift"] == shift}


# -- COCO ------------------------------------------------------------------------------------------------

def _coco_spec(dataset: Path, shifts: list, **extra) -> dict:
    return {"dataset": str(dataset), "models": [coco_synth.DETECTOR], "shifts": shifts,
            "metrics": ["box_ap", "mask_ap"], "seed": 3, "batch_size": 2, **extra}


def test_coco_input_gives_a_coco_folder_that_evaluates_like_the_shift_on_the_fly(tmp_path):
    root = coco_synth.write_coco_set(tmp_path / "coco", n_images=6)
    summary = generate(str(root), ["gaussian_noise"], [2], tmp_path / "out", seed=3, workers=2)
    assert summary["written"] == 6
    folder = tmp_path / "out" / "gaussian_noise" / "2"
    assert sorted(tree_bytes(folder)) == ["annotations/instances_val.json"] + [f"val/img_{k:02d}.png" for k in range(6)]

    source, back = sb.load_dataset(str(root)), sb.load_dataset(str(folder))
    assert type(back).__name__ == "CocoInstances"
    assert [back.sample_id(i) for i in range(len(back))] == [source.sample_id(i) for i in range(len(source))]
    shift = sb.create_shift("gaussian_noise")
    for i in range(len(source)):
        a, b = source.load(i), back.load(i)
        assert np.array_equal(b.image, shift(a, severity=2, seed=3).image)  # lossless
        assert np.array_equal(b.boxes, a.boxes) and np.array_equal(b.box_labels, a.box_labels)
        assert np.array_equal(b.mask, a.mask) and b.meta["area"] == a.meta["area"]
        assert b.meta["iscrowd"] == a.meta["iscrowd"] and b.meta["ann_ids"] == a.meta["ann_ids"]

    # the annotation file is the source's, value for value, but for each image's file_name
    original = json.loads((root / "annotations" / "instances_val.json").read_text())
    copied = json.loads((folder / "annotations" / "instances_val.json").read_text())
    assert [img.pop("file_name") for img in copied["images"]] == [f"img_{k:02d}.png" for k in range(6)]
    for img in original["images"]:
        img.pop("file_name")
    assert copied == original and list(copied) == list(original)

    fly = sb.evaluate(_coco_spec(root, [{"name": "gaussian_noise", "severities": [2]}]), store=tmp_path / "fly.db")
    read = sb.evaluate(_coco_spec(folder, ["clean"]), store=tmp_path / "read.db")
    on_the_fly, from_disk = _rows(fly, "gaussian_noise"), _rows(read, "clean")
    assert on_the_fly == from_disk and {"box_ap", "mask_ap"} <= set(on_the_fly)
    assert 0 < on_the_fly["box_ap"][0] < 1 and on_the_fly["box_ap"][1] == 6
    assert _rows(fly, "clean") != from_disk  # the noise does change the numbers: the comparison can fail

    # an ids file written against the source selects the same samples in the generated folder
    ids = tmp_path / "ids.txt"
    ids.write_text("114\n100\n")
    fly_ids = sb.evaluate(_coco_spec(root, [{"name": "gaussian_noise", "severities": [2]}], ids=str(ids)),
                          store=tmp_path / "fly_ids.db")
    read_ids = sb.evaluate(_coco_spec(folder, ["clean"], ids=str(ids)), store=tmp_path / "read_ids.db")
    assert _rows(fly_ids, "gaussian_noise") == _rows(read_ids, "clean")
    assert _rows(read_ids, "clean")["box_ap"][1] == 2


def test_coco_limit_keeps_only_the_generated_images_and_their_annotations(tmp_path):
    root = coco_synth.write_coco_set(tmp_path / "coco", n_images=5)
    generate(str(root), ["pixelate"], [1], tmp_path / "out", limit=2)
    copied = json.loads((tmp_path / "out" / "pixelate" / "1" / "annotations" / "instances_val.json").read_text())
    original = json.loads((root / "annotations" / "instances_val.json").read_text())
    kept = {img["id"] for img in original["images"][:2]}
    assert [img["id"] for img in copied["images"]] == [img["id"] for img in original["images"][:2]]
    assert copied["annotations"] == [a for a in original["annotations"] if a["image_id"] in kept]
    assert len(sb.load_dataset(str(tmp_path / "out" / "pixelate" / "1"))) == 2


def test_coco_generate_resumed_after_a_kill_gives_the_same_bytes(tmp_path):
    root = coco_synth.write_coco_set(tmp_path / "coco", n_images=4)
    reference = tmp_path / "ref"
    generate(str(root), ["gaussian_noise"], [1, 2, 3, 4, 5], reference, seed=1, workers=2)
    out = tmp_path / "killed"
    code = (
        "import sys, time; sys.path[:0] = [%r]\n"
        "import shiftbench.engine.generate as g\n"
        "import shiftbench.engine.generate.journal as j; orig = j.run_job\n"
        "def slow(job):\n    time.sleep(0.3); return orig(job)\n"
        "j.run_job = slow\n"
        "g.generate(%r, ['gaussian_noise'], [1, 2, 3, 4, 5], %r, seed=1)\n"
    ) % (str(TESTS.parent / "src"), str(root), str(out))
    proc = subprocess.Popen([sys.executable, "-c", code])
    journal = out / "manifest.partial.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not journal.exists() or journal.read_text().count("\n") < 8):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert journal.exists() and not (out / "manifest.jsonl").exists()
    summary = generate(str(root), ["gaussian_noise"], [1, 2, 3, 4, 5], out, seed=1)
    assert summary["skipped"] >= 8 and summary["skipped"] + summary["written"] == 20
    assert tree_bytes(out) == tree_bytes(reference)  # images, annotation files and manifest
    assert len(sb.load_dataset(str(out / "gaussian_noise" / "5"))) == 4


def test_a_shift_that_breaks_the_annotations_is_refused_before_any_work(tmp_path):
    root = coco_synth.write_coco_set(tmp_path / "coco", n_images=2)
    with pytest.raises(ShiftbenchError) as err:
        generate(str(root), ["gaussian_noise", "background_only"], [1], tmp_path / "out")
    msg = str(err.value)
    assert "\n" not in msg and "'background_only' does not keep boxes and mask valid" in msg
    assert not (tmp_path / "out").exists()
    voc = _write_voc(tmp_path / "VOC2012", n=2)
    with pytest.raises(ShiftbenchError, match="'background_only' does not keep boxes and mask valid"):
        generate(str(voc), ["background_only"], [1], tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- VOC -------------------------------------------------------------------------------------------------

VOC_SEGMENTER = "_test_voc_bands"


class VocBands(DummySegmenter):
    """The dummy segmenter's brightness bands, declared over VOC-21 (a stand-in for a VOC-trained model)."""

    def __init__(self, device: str = "cpu", dtype: str = "float32"):
        super().__init__(num_classes=len(VOC_CLASSES))
        self.name = VOC_SEGMENTER
        self.label_space = LabelSpace.voc21()


if VOC_SEGMENTER not in MODELS:
    MODELS.add(VOC_SEGMENTER, VocBands, description="brightness bands over VOC-21, for tests", task="segmentation")


def _write_voc(root: Path, n: int = 4) -> Path:
    """JPEGImages/*.jpg, SegmentationClass and SegmentationObject palette PNGs, Annotations/*.xml and two
    ImageSets/Segmentation lists: two rectangles per image, of two classes, ringed by the void label."""
    from PIL import Image

    rng = np.random.default_rng(7)
    for folder in ("JPEGImages", "SegmentationClass", "SegmentationObject", "Annotations", "ImageSets/Segmentation"):
        (root / folder).mkdir(parents=True)
    palette = voc_colormap().reshape(-1).tolist()
    ids = []
    for k in range(n):
        h, w = 56 + 4 * k, 72
        image = np.clip(rng.normal(120, 30, (h, w, 3)), 0, 255)
        classes = np.zeros((h, w), np.uint8)
        objects = np.zeros((h, w), np.uint8)
        for j, (y, x, cls) in enumerate([(6, 8, 1 + k % 20), (26 + k, 36, 1 + (5 * k + 3) % 20)]):
            classes[y - 2:y + 22, x - 2:x + 26] = 255
            objects[y - 2:y + 22, x - 2:x + 26] = 255
            classes[y:y + 20, x:x + 22] = cls
            objects[y:y + 20, x:x + 22] = j + 1
            image[y:y + 20, x:x + 22] = rng.integers(0, 256, 3)
        image_id = f"2008_{k:06d}"
        Image.fromarray(image.astype(np.uint8)).save(root / "JPEGImages" / f"{image_id}.jpg", quality=90)
        for folder, values in (("SegmentationClass", classes), ("SegmentationObject", objects)):
            png = Image.fromarray(values, mode="P")
            png.putpalette(palette)
            png.save(root / folder / f"{image_id}.png")
        (root / "Annotations" / f"{image_id}.xml").write_text(f"<annotation><filename>{image_id}.jpg</filename>"
                                                              f"<size><width>{w}</width><height>{h}</height></size>"
                                                              "</annotation>\n")
        ids.append(image_id)
    (root / "ImageSets" / "Segmentation" / "val.txt").write_text("\n".join(ids[::-1]) + "\n")  # not sorted
    (root / "ImageSets" / "Segmentation" / "train.txt").write_text(ids[0] + "\n")
    return root


def test_voc_input_gives_a_voc_folder_that_evaluates_like_the_shift_on_the_fly(tmp_path):
    root = _write_voc(tmp_path / "devkit" / "VOC2012", n=4)
    # a VOCdevkit-like parent works; the out folder beside it (one inside the data is refused)
    generate(str(tmp_path / "devkit"), ["gaussian_noise"], [3], tmp_path / "out", seed=2)
    folder = tmp_path / "out" / "gaussian_noise" / "3"
    source, made = tree_bytes(root), tree_bytes(folder)
    ids = (root / "ImageSets" / "Segmentation" / "val.txt").read_text().split()
    assert sorted(made) == sorted([f"JPEGImages/{i}.png" for i in ids] + ["ImageSets/Segmentation/val.txt"]
                                  + [f"{d}/{i}{e}" for i in ids for d, e in (("SegmentationClass", ".png"),
                                     ("SegmentationObject", ".png"), ("Annotations", ".xml"))])
    for name, data in made.items():  # label files and the split's list: the source's bytes
        if not name.startswith("JPEGImages/"):
            assert data == source[name], name

    original, back = sb.load_dataset(str(root)), sb.load_dataset(str(folder))
    assert type(back).__name__ == "VocSegmentation"
    assert [back.sample_id(i) for i in range(len(back))] == ids == [original.sample_id(i) for i in range(len(original))]
    shift = sb.create_shift("gaussian_noise")
    for i in range(len(original)):
        a, b = original.load(i), back.load(i)
        assert np.array_equal(b.image, shift(a, severity=3, seed=2).image)
        assert np.array_equal(b.mask, a.mask) and np.array_equal(b.boxes, a.boxes)
        assert np.array_equal(b.box_labels, a.box_labels)

    def spec(dataset, shifts):
        return {"dataset": str(dataset), "models": [VOC_SEGMENTER], "shifts": shifts, "metrics": ["miou"],
                "seed": 2, "batch_size": 2}

    fly = sb.evaluate(spec(root, [{"name": "gaussian_noise", "severities": [3]}]), store=tmp_path / "fly.db")
    read = sb.evaluate(spec(folder, ["clean"]), store=tmp_path / "read.db")
    assert _rows(fly, "gaussian_noise") == _rows(read, "clean") and _rows(read, "clean")["miou"][1] == 4
    assert _rows(fly, "clean") != _rows(read, "clean")  # the noise changes the number: the check can fail


def test_voc_limit_lists_the_generated_ids_and_the_reader_takes_png_but_not_both(tmp_path):
    root = _write_voc(tmp_path / "VOC2012", n=3)
    generate(str(root), ["contrast"], [2], tmp_path / "out", limit=2, workers=2)
    folder = tmp_path / "out" / "contrast" / "2"
    listed = (folder / "ImageSets" / "Segmentation" / "val.txt").read_text().split()
    assert listed == (root / "ImageSets" / "Segmentation" / "val.txt").read_text().split()[:2]
    assert len(sb.load_dataset(str(folder))) == 2
    assert sorted(p.name for p in (folder / "JPEGImages").iterdir()) == sorted(f"{i}.png" for i in listed)

    (folder / "JPEGImages" / f"{listed[0]}.jpg").write_bytes((root / "JPEGImages" / f"{listed[0]}.jpg").read_bytes())
    with pytest.raises(ShiftbenchError, match=f"holds both {listed[0]}.jpg and {listed[0]}.png"):
        sb.load_dataset(str(folder))
    (folder / "ImageSets" / "Segmentation" / "val.txt").write_text("../../escape\n")
    with pytest.raises(ShiftbenchError) as err:
        sb.load_dataset(str(folder))
    assert "\n" not in str(err.value) and "escape" in str(err.value)
