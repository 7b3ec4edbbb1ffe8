"""Dataset readers on tiny fixtures built here: image folder, COCO, Pascal VOC, CIRR, FashionIQ."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shiftbench as sb
from shiftbench.datasets.coco import CocoInstances, annotation_to_mask, decode_rle, encode_rle_string, polygon_to_mask
from shiftbench.datasets.common import BadImagesError, resolve_inside
from shiftbench.datasets.imagenet import imagenet_classes
from shiftbench.datasets.voc import VOC_CLASSES, voc_colormap
from shiftbench.errors import ImageError, ShiftbenchError
from shiftbench.registry import DATASETS

from cirr_synth import make_cirr, write_image


def write_corrupt(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n this is not a png")


# -- paths -------------------------------------------------------------------------------------------
def test_resolve_inside_refuses_escapes(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    outside = tmp_path / "secret.png"
    outside.write_bytes(b"x")
    (root / "link.png").symlink_to(outside)
    (root / "inner.png").symlink_to(root / "a")
    assert resolve_inside(root, "a/b.png") == root / "a" / "b.png"
    assert resolve_inside(root, "./a/b.png") == root / "a" / "b.png"
    assert resolve_inside(root, "inner.png") == root / "inner.png"  # a symlink that stays inside is fine
    for bad, word in [("../secret.png", "'..'"), ("a/../../secret.png", "'..'"), ("/etc/passwd", "absolute"),
                      ("C:\\x.png", "absolute"), ("\\\\server\\x.png", "absolute"), ("link.png", "symlink"),
                      ("a\\..\\..\\secret.png", "'..'")]:
        with pytest.raises(ShiftbenchError, match=word):
            resolve_inside(root, bad)
    with pytest.raises(ShiftbenchError, match="non-empty string"):
        resolve_inside(root, None)


# -- image folder ------------------------------------------------------------------------------------
def make_folder(root: Path, names: list[str], per_class: int = 2) -> dict[str, np.ndarray]:
    arrays = {}
    for c, name in enumerate(names):
        for i in range(per_class):
            arrays[f"{name}/img{i}.png"] = write_image(root / name / f"img{i}.png", seed=10 * c + i)
    return arrays


def test_imagefolder_wnid_folders_get_imagenet_labels(tmp_path):
    arrays = make_folder(tmp_path, ["n02391049", "n01440764"])  # zebra 340, tench 0
    (tmp_path / "n01440764" / "notes.txt").write_text("ignored: not an image")
    (tmp_path / ".hidden").mkdir()
    ds = sb.load_dataset(str(tmp_path))  # detected
    assert type(ds).__name__ == "ImageFolder" and ds.num_classes == 1000 and len(ds.class_names) == 1000
    assert len(ds) == 4
    assert [ds.sample_id(i) for i in range(4)] == sorted(arrays)
    by_id = {s.id: s for s in ds}
    assert by_id["n02391049/img0.png"].label == 340 and by_id["n02391049/img0.png"].class_name == "zebra"
    assert by_id["n01440764/img1.png"].label == 0 and by_id["n01440764/img1.png"].class_name == "tench"
    for rel, arr in arrays.items():
        np.testing.assert_array_equal(by_id[rel].image, arr)


def test_imagefolder_plain_folders(tmp_path):
    make_folder(tmp_path, ["dog", "cat"], per_class=1)
    ds = sb.load_dataset(str(tmp_path), format="imagefolder")
    assert ds.class_names == ["cat", "dog"] and ds.num_classes == 2
    assert [(s.id, s.label, s.class_name) for s in ds] == [("cat/img0.png", 0, "cat"), ("dog/img0.png", 1, "dog")]
    with pytest.raises(ShiftbenchError, match="not ImageNet-1k wnids: cat"):
        sb.load_dataset(str(tmp_path), format="imagefolder", classes="imagenet")


def test_imagefolder_symlink_out_is_refused(tmp_path):
    root = tmp_path / "data"
    make_folder(root, ["n02391049"], per_class=1)
    write_image(tmp_path / "outside.png", seed=3)
    (root / "n02391049" / "evil.png").symlink_to(tmp_path / "outside.png")
    with pytest.raises(ShiftbenchError, match="evil.png.*escapes"):
        sb.load_dataset(str(root), format="imagefolder")


def test_imagefolder_corrupt_images_fail_by_default_and_skip_on_request(tmp_path, caplog):
    make_folder(tmp_path, ["a", "b"])
    write_corrupt(tmp_path / "a" / "broken.png")
    (tmp_path / "b" / "empty.jpg").write_bytes(b"")
    with pytest.raises(BadImagesError) as info:
        sb.load_dataset(str(tmp_path), format="imagefolder")
    assert sorted(name for name, _ in info.value.files) == ["a/broken.png", "b/empty.jpg"]
    assert "a/broken.png" in str(info.value) and "b/empty.jpg" in str(info.value)
    with caplog.at_level("WARNING", logger="shiftbench"):
        ds = sb.load_dataset(str(tmp_path), format="imagefolder", on_error="skip")
    assert [r.getMessage().startswith("skipped 2 unreadable") for r in caplog.records] == [True]
    assert len(ds) == 4 and sorted(n for n, _ in ds.skipped) == ["a/broken.png", "b/empty.jpg"]
    assert ds.info()["skipped"] == 2


def test_truncated_image_passing_header_check_is_reported_when_decoded(tmp_path, caplog):
    make_folder(tmp_path, ["a"], per_class=2)
    good = (tmp_path / "a" / "img1.png").read_bytes()
    (tmp_path / "a" / "img1.png").write_bytes(good[: len(good) // 2])  # header fine, data cut
    ds = sb.load_dataset(str(tmp_path), format="imagefolder")  # cheap header check passes
    with pytest.raises(ImageError, match="img1.png"):
        ds.load(1)
    with pytest.raises(BadImagesError, match="img1.png"):
        sb.load_dataset(str(tmp_path), format="imagefolder", verify="full")
    ds = sb.load_dataset(str(tmp_path), format="imagefolder", on_error="skip")
    with caplog.at_level("WARNING", logger="shiftbench"):
        samples = list(ds)
    assert len(caplog.records) == 1 and "img1.png" in caplog.records[0].getMessage()
    assert [s.id for s in samples] == ["a/img0.png"] and ds.skipped[0][0] == "a/img1.png"


# -- COCO --------------------------------------------------------------------------------------------

def random_polygon(rng: np.random.Generator, h: int, w: int, k: int) -> list[float]:
    centre = np.array([rng.uniform(0, w), rng.uniform(0, h)])
    angles = np.sort(rng.uniform(0, 2 * np.pi, k))
    radius = rng.uniform(0.5, max(h, w) / 2 + 1, k)
    pts = centre + np.column_stack([np.cos(angles), np.sin(angles)]) * radius[:, None]
    return [float(v) for v in np.round(pts, 2).ravel()]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pycocotools on numpy 2
def test_coco_masks_match_pycocotools():
    mask_utils = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(0)
    for trial in range(300):
        h, w = (int(v) for v in rng.integers(1, 48, 2))
        polys = [random_polygon(rng, h, w, int(rng.integers(3, 10))) for _ in range(int(rng.integers(1, 3)))]
        if trial % 4 == 0:  # coordinates outside the image and on exact half pixels
            polys = [[v * 1.3 - 3 for v in polys[0]]]
            polys[0] = [round(v * 2) / 2 for v in polys[0]]
        ref = mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(polys, h, w))).astype(bool)
        np.testing.assert_array_equal(annotation_to_mask(polys, h, w), ref)
        m = rng.random((h, w)) < rng.uniform(0.1, 0.9)
        rle = mask_utils.encode(np.asfortranarray(m.astype(np.uint8)))
        assert encode_rle_string(m)["counts"] == rle["counts"].decode()
        np.testing.assert_array_equal(decode_rle(rle), m)
        flat = m.T.reshape(-1)
        runs = np.diff(np.r_[0, np.flatnonzero(flat[1:] != flat[:-1]) + 1, flat.size]).tolist()
        uncompressed = {"size": [h, w], "counts": ([0] if flat[0] else []) + runs}
        np.testing.assert_array_equal(annotation_to_mask(uncompressed, h, w), m)
        ref_un = mask_utils.decode(mask_utils.frPyObjects(uncompressed, h, w)).astype(bool)
        np.testing.assert_array_equal(ref_un, m)


def test_polygon_mask_of_a_rectangle_without_reference():
    # pycocotools convention: pixel centres inside [x0, x1) x [y0, y1) of a pixel-aligned rectangle
    mask = polygon_to_mask([2, 1, 6, 1, 6, 4, 2, 4], 6, 8)
    expected = np.zeros((6, 8), bool)
    expected[1:4, 2:6] = True
    np.testing.assert_array_equal(mask, expected)
    with pytest.raises(ShiftbenchError, match="sum to"):
        decode_rle({"size": [2, 2], "counts": [1, 1]})


def make_coco(root: Path, corrupt: bool = False, file_name: str | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    images = {"000001.png": write_image(root / "val2017" / "000001.png", 1, (20, 30)),
              "000002.png": write_image(root / "val2017" / "000002.png", 2, (16, 16))}
    if corrupt:
        write_corrupt(root / "val2017" / "000003.png")
    box_mask = np.zeros((20, 30), bool)
    box_mask[2:9, 10:25] = True
    data = {
        "images": [{"id": 1, "file_name": file_name or "000001.png", "height": 20, "width": 30},
                   {"id": 2, "file_name": "000002.png", "height": 16, "width": 16}]
        + ([{"id": 3, "file_name": "000003.png", "height": 16, "width": 16}] if corrupt else []),
        "annotations": [
            {"id": 11, "image_id": 1, "category_id": 18, "bbox": [1.0, 1.0, 8.0, 10.0], "iscrowd": 0,
             "segmentation": [[1, 1, 9, 1, 9, 11, 1, 11]]},
            {"id": 12, "image_id": 1, "category_id": 1, "bbox": [10.0, 2.0, 15.0, 7.0], "iscrowd": 1,
             "segmentation": {"size": [20, 30], "counts": encode_rle_string(box_mask)["counts"]}},
        ],
        "categories": [{"id": 1, "name": "person"}, {"id": 18, "name": "dog"}],
    }
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(data))
    return data, images


def test_coco_reader(tmp_path):
    _, images = make_coco(tmp_path)
    ds = sb.load_dataset(str(tmp_path))  # detected from annotations/instances_*.json
    assert isinstance(ds, CocoInstances) and len(ds) == 2 and [ds.sample_id(i) for i in range(2)] == ["1", "2"]
    assert ds.class_names[18] == "dog" and ds.class_names[1] == "person"
    s = ds.load(0)
    np.testing.assert_array_equal(s.image, images["000001.png"])
    np.testing.assert_allclose(s.boxes, [[1, 1, 9, 11], [10, 2, 25, 9]])
    assert s.box_labels.tolist() == [18, 1] and s.meta["iscrowd"] == [0, 1] and s.meta["ann_ids"] == [11, 12]
    assert s.mask.dtype == np.int32 and set(np.unique(s.mask)) == {0, 1, 2}
    assert (s.mask == 2).sum() == 7 * 15 and (s.mask == 1).sum() == 8 * 10
    stack = ds.instance_masks(0)
    assert stack.shape == (2, 20, 30)
    np.testing.assert_array_equal(stack[1], s.mask == 2)
    empty = ds.load(1)
    assert empty.boxes.shape == (0, 4) and not empty.mask.any()
    # the json file itself as root gives the same reader
    same = sb.load_dataset(str(tmp_path / "annotations" / "instances_val2017.json"), format="coco")
    assert len(same) == 2 and same.root == tmp_path / "val2017"
    assert sb.load_dataset(str(tmp_path), format="coco", masks=False).load(0).mask is None


def _overlapping_coco(root: Path) -> dict:
    """One 40x50 image: a triangle (polygon) partly under a later rectangle (RLE), a crowd region (RLE),
    an annotation without an area field; areas in the file differ from box areas, as in real COCO."""
    write_image(root / "val2017" / "a.png", 3, (40, 50))
    rect = np.zeros((40, 50), bool)
    rect[5:25, 15:40] = True
    crowd = np.zeros((40, 50), bool)
    crowd[28:38, 2:48:3] = True  # a comb of thin stripes: a crowd's mask is not its box
    data = {
        "images": [{"id": 7, "file_name": "a.png", "height": 40, "width": 50}],
        "annotations": [
            {"id": 1, "image_id": 7, "category_id": 3, "bbox": [2.0, 2.0, 30.0, 30.0], "iscrowd": 0,
             "area": 450.0, "segmentation": [[2, 2, 32, 2, 2, 32]]},
            {"id": 2, "image_id": 7, "category_id": 18, "bbox": [15.0, 5.0, 25.0, 20.0], "iscrowd": 0,
             "area": 500.0, "segmentation": encode_rle_string(rect)},
            {"id": 3, "image_id": 7, "category_id": 1, "bbox": [2.0, 28.0, 46.0, 10.0], "iscrowd": 1,
             "area": float(crowd.sum()),
             "segmentation": {"size": [40, 50], "counts": _uncompressed_counts(crowd)}},
            {"id": 4, "image_id": 7, "category_id": 1, "bbox": [40.0, 2.0, 6.0, 4.0], "iscrowd": 0,
             "segmentation": [[40, 2, 46, 2, 46, 6, 40, 6]]},
        ],
        "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 18, "name": "dog"}],
    }
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(data))
    return data


def _uncompressed_counts(mask: np.ndarray) -> list[int]:
    flat = mask.T.reshape(-1)
    bounds = np.concatenate([[0], np.flatnonzero(flat[1:] != flat[:-1]) + 1, [flat.size]])
    counts = np.diff(bounds).tolist()
    return ([0] + counts) if flat[0] else counts


def test_coco_reader_keeps_areas_crowd_and_overlapping_instances(tmp_path):
    data = _overlapping_coco(tmp_path)
    ds = sb.load_dataset(str(tmp_path), format="coco")
    s = ds.load(0)
    assert s.box_labels.tolist() == [3, 18, 1, 1] and s.meta["iscrowd"] == [0, 0, 1, 0]
    # the file's areas, not the box areas (900, 500, 460, 24); without the field, the mask's pixel count
    assert s.meta["area"][:3] == [450.0, 500.0, float(data["annotations"][2]["area"])]
    assert s.meta["area"][3] == 24.0
    stack = np.asarray(s.meta["instance_masks"])  # decoded only now
    assert stack.shape == (4, 40, 50) and stack.dtype == bool
    for k, ann in enumerate(data["annotations"]):
        np.testing.assert_array_equal(stack[k], annotation_to_mask(ann["segmentation"], 40, 50))
    np.testing.assert_array_equal(stack, ds.instance_masks(0))
    # the triangle keeps the pixels the later rectangle covers in the instance map
    hidden = stack[0] & stack[1]
    assert hidden.sum() > 50 and not (s.mask[hidden] == 1).any() and (s.mask[hidden] == 2).all()
    assert stack[0].sum() == (s.mask == 1).sum() + (stack[0] & stack[1:].any(axis=0)).sum()  # none lost
    assert stack[2].sum() == data["annotations"][2]["area"] and (s.mask == 3).sum() == stack[2].sum()
    # lazily decoded: the sample holds the segmentations, not four full masks
    assert s.meta["instance_masks"].shape == (4, 40, 50) and len(s.meta["instance_masks"]) == 4
    assert "instance_masks" not in sb.load_dataset(str(tmp_path), format="coco", masks=False).load(0).meta


def test_coco_reader_masks_and_areas_equal_pycocotools(tmp_path):
    import contextlib
    import io

    pytest.importorskip("pycocotools")
    from pycocotools.coco import COCO

    data = _overlapping_coco(tmp_path)
    with contextlib.redirect_stdout(io.StringIO()):
        ref = COCO(str(tmp_path / "annotations" / "instances_val2017.json"))
    s = sb.load_dataset(str(tmp_path), format="coco").load(0)
    stack = np.asarray(s.meta["instance_masks"])
    for k, ann in enumerate(data["annotations"]):
        np.testing.assert_array_equal(stack[k], ref.annToMask(ref.anns[ann["id"]]).astype(bool))
        if "area" in ann:
            assert s.meta["area"][k] == ref.anns[ann["id"]]["area"]


def test_coco_reader_refuses_a_non_numeric_area(tmp_path):
    data = _overlapping_coco(tmp_path)
    data["annotations"][1]["area"] = "big"
    (tmp_path / "annotations" / "instances_val2017.json").write_text(json.dumps(data))
    with pytest.raises(ShiftbenchError, match="instances_val2017.json: annotation 2: area 'big' is not a number"):
        sb.load_dataset(str(tmp_path), format="coco")


@pytest.mark.parametrize("bad_name", ["../outside.png", "/etc/hostname", "sub/../../outside.png", "link.png"])
def test_coco_path_escape_is_refused(tmp_path, bad_name):
    write_image(tmp_path / "outside.png", 5)
    make_coco(tmp_path / "coco", file_name=bad_name)
    (tmp_path / "coco" / "val2017" / "link.png").symlink_to(tmp_path / "outside.png")
    with pytest.raises(ShiftbenchError, match="escapes|absolute"):
        sb.load_dataset(str(tmp_path / "coco"), format="coco")


def test_coco_corrupt_image(tmp_path, caplog):
    make_coco(tmp_path, corrupt=True)
    with pytest.raises(BadImagesError, match="000003.png"):
        sb.load_dataset(str(tmp_path), format="coco")
    with caplog.at_level("WARNING", logger="shiftbench"):
        ds = sb.load_dataset(str(tmp_path), format="coco", on_error="skip")
    assert len(caplog.records) == 1 and "000003.png" in caplog.records[0].getMessage()
    assert len(ds) == 2 and ds.skipped[0][0] == "000003.png"


def test_coco_bad_json_is_a_clear_error(tmp_path):
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "instances_val.json").write_text('{"images": 3}')
    with pytest.raises(ShiftbenchError, match="not a COCO instances file"):
        sb.load_dataset(str(tmp_path), format="coco", images=".")
    bad = {"images": [], "annotations": [{"id": 1, "image_id": 7, "category_id": 1, "bbox": [0, 0, 1, 1]}]}
    (tmp_path / "annotations" / "instances_val.json").write_text(json.dumps(bad))
    with pytest.raises(ShiftbenchError, match="annotation 1: image_id 7 is not in 'images'"):
        sb.load_dataset(str(tmp_path), format="coco", images=".")
    bad["annotations"][0]["bbox"] = [0, 0]
    (tmp_path / "annotations" / "instances_val.json").write_text(json.dumps(bad))
    with pytest.raises(ShiftbenchError, match="4-number bbox"):
        sb.load_dataset(str(tmp_path), format="coco", images=".")


# -- Pascal VOC --------------------------------------------------------------------------------------
def write_palette_png(path: Path, indices: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    img = Image.fromarray(indices.astype(np.uint8), mode="P")
    img.putpalette(voc_colormap().reshape(-1).tolist())
    img.save(path)


def make_voc(root: Path, ids: list[str], split_ids: list[str] | None = None) -> dict[str, np.ndarray]:
    classes = {}
    for n, image_id in enumerate(ids):
        (root / "JPEGImages").mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((12, 16, 3), 40 * n, np.uint8)).save(root / "JPEGImages" / f"{image_id}.jpg")
        cls = np.zeros((12, 16), np.uint8)
        obj = np.zeros((12, 16), np.uint8)
        cls[2:6, 3:9] = 13  # horse
        obj[2:6, 3:9] = 1
        cls[7:11, 10:15] = 15  # person
        obj[7:11, 10:15] = 2
        cls[6, :] = obj[6, :] = 255  # void boundary
        write_palette_png(root / "SegmentationClass" / f"{image_id}.png", cls)
        write_palette_png(root / "SegmentationObject" / f"{image_id}.png", obj)
        classes[image_id] = cls
    sets = root / "ImageSets" / "Segmentation"
    sets.mkdir(parents=True, exist_ok=True)
    (sets / "val.txt").write_text("\n".join(split_ids if split_ids is not None else ids) + "\n")
    return classes


def test_voc_colormap_known_entries():
    cmap = voc_colormap()
    assert cmap[0].tolist() == [0, 0, 0] and cmap[1].tolist() == [128, 0, 0] and cmap[15].tolist() == [192, 128, 128]
    assert cmap[255].tolist() == [224, 224, 192] and len(VOC_CLASSES) == 21


def test_voc_reader(tmp_path):
    root = tmp_path / "VOCdevkit" / "VOC2012"
    classes = make_voc(root, ["2007_000001", "2007_000002"])
    ds = sb.load_dataset(str(tmp_path / "VOCdevkit"))  # detected, year folder found
    assert type(ds).__name__ == "VocSegmentation" and len(ds) == 2 and ds.num_classes == 21
    s = ds.load(1)
    assert s.id == "2007_000002" and s.image.shape == (12, 16, 3)
    np.testing.assert_array_equal(s.mask, classes["2007_000002"])
    assert s.meta["mask_type"] == "semantic" and s.meta["instance_mask"].max() == 255
    np.testing.assert_allclose(s.boxes, [[3, 2, 9, 6], [10, 7, 15, 11]])
    assert s.box_labels.tolist() == [13, 15]
    # an RGB-saved label image is mapped back through the palette
    rgb = voc_colormap()[classes["2007_000001"]]
    Image.fromarray(rgb).save(root / "SegmentationClass" / "2007_000001.png")
    np.testing.assert_array_equal(ds.load(0).mask, classes["2007_000001"])
    rgb[0, 0] = [1, 2, 3]
    Image.fromarray(rgb).save(root / "SegmentationClass" / "2007_000001.png")
    with pytest.raises(ImageError, match="outside the VOC palette"):
        ds.load(0)


def test_voc_split_id_escaping_is_refused(tmp_path):
    make_voc(tmp_path, ["a"], split_ids=["a", "../../etc/passwd"])
    with pytest.raises(ShiftbenchError, match="escapes"):
        sb.load_dataset(str(tmp_path), format="voc")


def test_voc_corrupt_label_png(tmp_path, caplog):
    make_voc(tmp_path, ["a", "b"])
    write_corrupt(tmp_path / "SegmentationClass" / "b.png")
    with pytest.raises(BadImagesError, match="SegmentationClass/b.png"):
        sb.load_dataset(str(tmp_path), format="voc")
    with caplog.at_level("WARNING", logger="shiftbench"):
        ds = sb.load_dataset(str(tmp_path), format="voc", on_error="skip")
    assert len(caplog.records) == 1 and "SegmentationClass/b.png" in caplog.records[0].getMessage()
    assert [ds.sample_id(i) for i in range(len(ds))] == ["a"]
    with pytest.raises(ShiftbenchError, match="no split 'train'"):
        sb.load_dataset(str(tmp_path), format="voc", split="train")


# -- CIRR --------------------------------------------------------------------------------------------
def test_cirr_reader(tmp_path):
    arrays = make_cirr(tmp_path)
    ds = sb.load_dataset(str(tmp_path))  # detected
    assert type(ds).__name__ == "Cirr" and len(ds) == 2
    q = ds.load(0)
    assert isinstance(q, sb.Query) and q.id == "12" and q.text == "make it red"
    assert q.target_id == "dev-1-0-img1" and q.reference.id == "dev-0-0-img0"
    assert q.subset_ids == tuple(f"dev-{i}-0-img{i}" for i in range(1, 6))  # members without the reference
    np.testing.assert_array_equal(q.reference.image, arrays["dev-0-0-img0"])
    assert ds.gallery_ids() == sorted(arrays) and ds.sample_id(1) == "13"
    np.testing.assert_array_equal(ds.load_gallery("dev-3-0-img3").image, arrays["dev-3-0-img3"])


@pytest.mark.parametrize("bad", ["../../outside.png", "/tmp/outside.png", "./dev/../../../outside.png"])
def test_cirr_path_escape_is_refused(tmp_path, bad):
    make_cirr(tmp_path, {"dev-0-0-img0": bad})
    with pytest.raises(ShiftbenchError, match="escapes|absolute"):
        sb.load_dataset(str(tmp_path), format="cirr")


def test_cirr_corrupt_image_fails_or_skips_its_queries(tmp_path, caplog):
    make_cirr(tmp_path)
    write_corrupt(tmp_path / "img_raw" / "dev" / "dev-2-0-img2.png")
    with pytest.raises(BadImagesError, match="dev-2-0-img2.png"):
        sb.load_dataset(str(tmp_path), format="cirr")
    with caplog.at_level("WARNING", logger="shiftbench"):
        ds = sb.load_dataset(str(tmp_path), format="cirr", on_error="skip")
    assert len(caplog.records) == 1 and "dev-2-0-img2.png" in caplog.records[0].getMessage()
    assert len(ds) == 1 and ds.sample_id(0) == "12"
    assert ("query 13", "uses unreadable image dev-2-0-img2") in ds.skipped
    assert "dev-2-0-img2" not in ds.gallery_ids()


# -- FashionIQ ---------------------------------------------------------------------------------------
def make_fashioniq(root: Path, bad_name: str | None = None) -> dict[str, np.ndarray]:
    arrays = {}
    for c, category in enumerate(["dress", "shirt"]):
        names = [f"B00{c}{i}" for i in range(3)]
        for i, n in enumerate(names):
            arrays[n] = write_image(root / "images" / f"{n}.png", 10 * c + i, (8, 6))
        (root / "image_splits").mkdir(parents=True, exist_ok=True)
        (root / "captions").mkdir(parents=True, exist_ok=True)
        (root / "image_splits" / f"split.{category}.val.json").write_text(json.dumps(names + ([bad_name] if bad_name and c == 0 else [])))
        caps = [{"candidate": names[0], "target": names[1], "captions": ["is longer", "has no sleeves."]},
                {"candidate": names[2], "target": names[0], "captions": ["is blue", "is darker"]}]
        (root / "captions" / f"cap.{category}.val.json").write_text(json.dumps(caps))
    return arrays


def test_fashioniq_reader(tmp_path):
    arrays = make_fashioniq(tmp_path)
    ds = sb.load_dataset(str(tmp_path))  # detected
    assert type(ds).__name__ == "FashionIQ" and len(ds) == 4 and ds.categories == ["dress", "shirt"]
    q = ds.load(0)
    assert q.id == "dress/val/0" and q.category == "dress" and q.text == "is longer and has no sleeves"
    assert q.target_id == "B0001" and q.subset_ids is None and q.meta["captions"] == ["is longer", "has no sleeves."]
    np.testing.assert_array_equal(q.reference.image, arrays["B0000"])
    assert len(sb.load_dataset(str(tmp_path), format="fashioniq", categories="shirt")) == 2
    with pytest.raises(ShiftbenchError, match="category must be one of"):
        sb.load_dataset(str(tmp_path), format="fashioniq", categories=["hat"])


def test_fashioniq_path_escape_and_corrupt(tmp_path):
    make_fashioniq(tmp_path, bad_name="../../outside")
    with pytest.raises(ShiftbenchError, match="escapes"):
        sb.load_dataset(str(tmp_path), format="fashioniq")
    clean = tmp_path / "clean"
    make_fashioniq(clean)
    write_corrupt(clean / "images" / "B0010.png")
    with pytest.raises(BadImagesError, match="images/B0010.png"):
        sb.load_dataset(str(clean), format="fashioniq")


# -- registry ----------------------------------------------------------------------------------------
def test_every_reader_is_registered_with_detect_and_description():
    readers = [e for e in DATASETS.entries() if e.meta.get("reader")]
    assert {e.name for e in readers} == {"imagefolder", "coco", "voc", "cirr", "fashioniq", "webdataset", "parquet",
                                         "cue-conflict-folder"}
    for entry in readers:
        assert entry.description and entry.meta.get("annotations")
        assert callable(entry.resolve().detect)


def test_unknown_path_and_format(tmp_path):
    with pytest.raises(ShiftbenchError, match="cannot tell the dataset format"):
        sb.load_dataset(str(tmp_path))
    with pytest.raises(ShiftbenchError, match="does not exist"):
        sb.load_dataset(str(tmp_path / "nope"), format="voc")


def test_imagenet_class_file():
    classes = imagenet_classes()
    assert len(classes) == 1000 and len({c.wnid for c in classes}) == 1000
    assert classes[0].wnid == "n01440764" and classes[0].name == "tench"
    assert classes[999].name == "toilet tissue" and classes[134].name == classes[517].name == "crane"
    assert [c.wnid for c in classes] == sorted(c.wnid for c in classes)  # the standard index order


def test_readers_do_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, shiftbench as sb; sb.list_datasets(); import shiftbench.datasets; "
            "print('torch' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"
