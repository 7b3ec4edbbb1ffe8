"""tools/example_folder.py: each layout it writes reads back through shiftbench's readers with the classes,
masks and boxes of the objects samples it was written from."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.datasets.coco import annotation_to_mask
from shiftbench.datasets.objects import object_info
from shiftbench.datasets.voc import VOC_CLASSES

TOOL = Path(__file__).resolve().parent.parent / "tools" / "example_folder.py"
spec = importlib.util.spec_from_file_location("example_folder", TOOL)
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)

OBJECTS = sb.load_dataset("objects")


def written_samples(format: str, classes: int, per_class: int) -> dict[str, tuple[str, object]]:
    """The objects samples the tool writes, by file stem: (class name written, sample)."""
    def class_of(oid: str) -> str | None:
        info = object_info(oid)
        return tool.VOC_CLASS.get(info.imagenet_name) if format == "voc" else info.wnid

    chosen = tool.choose(OBJECTS, classes, per_class, class_of)
    expected = {}
    for name, indices in chosen.items():
        for i in indices:
            sample = OBJECTS.load(i)
            expected[tool.stem(sample)] = (name if format == "voc" else sample.class_name, sample)
    return expected


def box_of(mask: np.ndarray) -> list[float]:
    ys, xs = np.nonzero(mask)
    return [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]


def test_imagefolder_reads_back_labels(tmp_path):
    out = tmp_path / "photos"
    written = tool.write_folder(out, classes=2, per_class=4)  # hen's 4th sample repeats a scene: its own name
    expected = written_samples("imagefolder", 2, 4)
    data = sb.load_dataset(out)
    assert type(data).__name__ == "ImageFolder" and len(data) == len(written) == len(expected) == 8
    for k in range(len(data)):
        sample = data.load(k)
        name, source = expected[Path(sample.id).stem]
        assert sample.class_name == name and sample.label == source.label
        assert Path(sample.id).parent.name == source.meta["wnid"]


def test_coco_detected_with_exact_masks_and_boxes(tmp_path):
    out = tmp_path / "my_coco"
    written = tool.write_folder(out, classes=3, per_class=2, format="coco")
    assert (out / "annotations" / "instances_val.json").is_file() and all(p.parent == out / "val" for p in written)
    expected = written_samples("coco", 3, 2)
    data = sb.load_dataset(out)  # no format=: the layout is detected
    assert type(data).__name__ == "CocoInstances" and len(data) == len(expected) == 6
    assert sorted(data.categories) == [1, 2, 3]
    for k in range(len(data)):
        sample = data.load(k)
        name, source = expected[Path(sample.meta["path"]).stem]
        assert sample.meta["category_names"] == [name] and data.categories[int(sample.box_labels[0])] == name
        (mask,) = np.asarray(sample.meta["instance_masks"])
        iou = (mask & source.mask).sum() / (mask | source.mask).sum()
        assert iou >= 0.95
        assert np.array_equal(mask, source.mask)  # the polygons are exact, not only close
        assert np.abs(sample.boxes[0] - source.boxes[0]).max() <= 1
        assert np.array_equal(sample.boxes[0], box_of(source.mask))
        assert sample.meta["area"] == [source.mask.sum()] and sample.meta["iscrowd"] == [0]
        assert np.array_equal(sample.image.shape[:2], source.mask.shape)


def test_coco_polygons_keep_holes_and_specks():
    mask = np.zeros((20, 30), dtype=bool)
    mask[2:15, 3:20] = True
    mask[5:9, 6:10] = False  # a hole
    mask[6:8, 7:9] = True  # an island in the hole
    mask[17, 25] = mask[18, 26] = True  # single pixels touching at a corner
    ann = tool.coco_annotation(mask)
    assert np.array_equal(annotation_to_mask(ann["segmentation"], 20, 30), mask)
    assert ann["bbox"] == [3, 2, 24, 17] and ann["area"] == mask.sum()


def test_voc_reads_back_class_masks_and_boxes(tmp_path):
    out = tmp_path / "my_voc"
    written = tool.write_folder(out, classes=3, per_class=2, format="voc")
    expected = written_samples("voc", 3, 2)
    assert {name for name, _ in expected.values()} == {"bird", "cow", "sheep"}
    data = sb.load_dataset(out, format="voc", split="val")
    assert len(data) == len(written) == len(expected) == 6
    for k in range(len(data)):
        sample = data.load(k)
        name, source = expected[sample.id]
        index = VOC_CLASSES.index(name)
        assert np.array_equal(sample.mask, np.where(source.mask, index, 0))
        assert sample.box_labels.tolist() == [index]
        assert np.array_equal(sample.boxes[0], box_of(source.mask))


def test_existing_folder_refused(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    for format in tool.FORMATS:
        with pytest.raises(SystemExit) as exc:
            tool.main([str(out), "--format", format])
        assert exc.value.code == 2 and "exists" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"


def test_main_writes_each_format(tmp_path, capsys):
    for format in tool.FORMATS:
        assert tool.main([str(tmp_path / format), "--format", format, "--classes", "1", "--per-class", "1"]) == 0
        assert len(sb.load_dataset(tmp_path / format, **({"format": "voc"} if format == "voc" else {}))) == 1
    assert capsys.readouterr().out.count("wrote 1 photos") == 3
    with pytest.raises(SystemExit) as exc:
        tool.main([str(tmp_path / "too_many"), "--format", "voc", "--classes", "7"])
    assert exc.value.code == 2 and not (tmp_path / "too_many").exists()
