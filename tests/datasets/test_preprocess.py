"""Preprocessing (datasets/preprocess.py): torchvision's resize and centre crop on a PIL image, to the byte, with
every annotation following the image exactly: masks by the same nearest mapping as the image's, boxes scaled,
shifted and clipped (dropped when wholly outside the crop), labels and captions unchanged."""

from __future__ import annotations

import doctest
import importlib.util

import numpy as np
import pytest
from hypothesis import given, strategies as st
from PIL import Image

import coco_synth
from shiftbench.datasets import load
from shiftbench.datasets import preprocess as preprocess_module
from shiftbench.datasets.preprocess import (INTERPOLATIONS, Preprocessing, PreprocessedMasks, crop_corner,
                                            resized_size)
from shiftbench.errors import ImageError, ShiftbenchError
from shiftbench.sample import Sample

from conftest import make_image, make_sample


def test_module_doctest():
    assert doctest.testmod(preprocess_module).failed == 0


# -- torchvision's procedure, to the byte ----------------------------------------------------------------------
# (height, width) -> (resized height, width) by torchvision's rule (short = 256, long = int(256 * long / short)),
# and the crop's corner by its int(round((h - 224) / 2.0)) (Python rounds halves to even): written out here
# rather than computed, so that the rule itself is what is tested
SIZES = {(375, 500): ((256, 341), (16, 58)), (500, 375): ((341, 256), (58, 16)), (333, 500): ((256, 384), (16, 80)),
         (257, 300): ((256, 298), (16, 37)), (256, 256): ((256, 256), (16, 16)), (512, 683): ((256, 341), (16, 58)),
         (1000, 257): ((996, 256), (386, 16)), (300, 227): ((338, 256), (57, 16))}


@pytest.mark.parametrize("size", sorted(SIZES))
def test_sizes_and_crop_corner_follow_torchvision_rule(size):
    resized, corner = SIZES[size]
    assert resized_size(*size, 256) == resized
    assert crop_corner(*resized, 224, 224) == corner


def test_crop_corner_rounds_halves_to_even_as_python_round():
    # (h - crop) / 2 = 0.5 -> 0, 1.5 -> 2, 2.5 -> 2: torchvision's int(round(...)), not floor or half-up
    assert [crop_corner(224 + d, 224 + d, 224, 224)[0] for d in (1, 3, 5, 7)] == [0, 2, 2, 4]


def _reference(image: np.ndarray, interpolation: str) -> np.ndarray:
    """torchvision's Resize(256) + CenterCrop(224) on a PIL image (the suite's environment has torchvision)."""
    from torchvision import transforms as T

    mode = {"bilinear": T.InterpolationMode.BILINEAR, "bicubic": T.InterpolationMode.BICUBIC,
            "nearest": T.InterpolationMode.NEAREST, "area": T.InterpolationMode.BOX,
            "lanczos": T.InterpolationMode.LANCZOS, "hamming": T.InterpolationMode.HAMMING}[interpolation]
    return np.asarray(T.Compose([T.Resize(256, interpolation=mode), T.CenterCrop(224)])(Image.fromarray(image)))


@pytest.mark.parametrize("interpolation", list(INTERPOLATIONS))
@pytest.mark.parametrize("size", [(375, 500), (500, 375), (333, 500), (256, 256), (300, 227), (227, 300)])
def test_resize_and_crop_are_torchvisions_to_the_byte(size, interpolation):
    image = make_image(*size, seed=sum(size))
    got = Preprocessing(256, (224, 224), interpolation).apply_image(image)
    assert got.shape == (224, 224, 3) and got.dtype == np.uint8
    np.testing.assert_array_equal(got, _reference(image, interpolation))


def test_imagenet_photos_under_the_imagenet_procedure():
    pytest.importorskip("foolbox")
    ds = load("imagenet-photos")
    pre = Preprocessing(256, (224, 224))
    for i in (0, 1, len(ds) - 1):
        image = ds.load(i).image
        np.testing.assert_array_equal(pre.apply_image(image), _reference(image, "bilinear"))


def test_nothing_set_returns_the_sample_itself():
    s = make_sample()
    assert Preprocessing().apply(s) is s


def test_a_crop_larger_than_the_image_is_an_image_error_naming_the_sample():
    s = make_sample(40, 50, sid="small")
    with pytest.raises(ImageError, match=r"sample small: the centre crop 64x64 is larger than the image, 40x50 "
                                         r"\(32x40 after resizing its shorter side to 32\)"):
        Preprocessing(32, (64, 64)).apply(s)


@pytest.mark.parametrize("kwargs", [{"resize": 0}, {"resize": True}, {"crop": (0, 4)}, {"crop": (1, 2, 3)},
                                    {"interpolation": "cubic"}])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ShiftbenchError):
        Preprocessing(**kwargs)


# -- every task's annotations ---------------------------------------------------------------------------------
def test_classification_label_and_captioning_caption_unchanged():
    s = make_sample(48, 64)
    out = Preprocessing(32, (24, 24)).apply(s)
    assert out.image.shape == (24, 24, 3)
    assert (out.label, out.class_name, out.caption, out.id) == (s.label, s.class_name, s.caption, s.id)
    assert out.meta["scene"] == "test" and out.meta["preprocess"] == {"size": [48, 64], "resized": [32, 42],
                                                                      "crop": [4, 9, 24, 24]}


def test_segmentation_class_map_takes_nearest_and_keeps_its_values():
    rng = np.random.default_rng(0)
    classes = rng.choice(np.array([0, 3, 7, 255], np.uint8), size=(30, 45))
    s = Sample(image=make_image(30, 45), mask=classes, id="seg", meta={"mask_type": "semantic"})
    out = Preprocessing(20, (16, 20), "bicubic").apply(s)
    assert out.mask.shape == (16, 20) and out.mask.dtype == np.uint8
    assert set(np.unique(out.mask)) <= {0, 3, 7, 255}
    # the mask is the class map resized by Pillow's nearest filter and cropped like the image
    ref = np.asarray(Image.fromarray(classes).resize((30, 20), Image.NEAREST))
    top, left = crop_corner(20, 30, 16, 20)
    np.testing.assert_array_equal(out.mask, ref[top:top + 16, left:left + 20])


def test_detection_boxes_follow_and_a_box_outside_the_crop_is_dropped_with_its_annotations():
    h, w = 40, 100
    instances = np.zeros((h, w), np.int32)
    instances[5:30, 2:12] = 1  # left edge: outside a centre crop of 40 px width
    instances[10:35, 40:60] = 2  # centre
    instances[0:20, 85:99] = 3  # right edge: outside too
    boxes = [[2, 5, 12, 30], [40, 10, 60, 35], [85, 0, 99, 20]]
    meta = {"mask_type": "instance", "ann_ids": [11, 12, 13], "iscrowd": [0, 1, 0], "area": [250.0, 500.0, 280.0],
            "bbox": [[2, 5, 10, 25], [40, 10, 20, 25], [85, 0, 14, 20]], "category_names": ["a", "b", "c"],
            "instance_masks": np.stack([instances == k for k in (1, 2, 3)])}
    s = Sample(image=make_image(h, w), mask=instances, boxes=boxes, box_labels=[1, 3, 18], id="det", meta=meta)
    out = Preprocessing(20, (20, 20)).apply(s)  # 40x100 -> 20x50, crop columns 15..35
    np.testing.assert_allclose(out.boxes, [[5, 5, 15, 17.5]])
    assert out.box_labels.tolist() == [3]
    assert out.meta["ann_ids"] == [12] and out.meta["iscrowd"] == [1] and out.meta["category_names"] == ["b"]
    assert out.meta["bbox"] == [[5.0, 5.0, 10.0, 12.5]]
    assert out.meta["area"] == [pytest.approx(500.0 / 4)]
    # the instance map's ids stay the box indices (1 marks the first kept box)
    assert set(np.unique(out.mask)) == {0, 1}
    ys, xs = np.nonzero(out.mask == 1)
    assert (xs.min(), xs.max() + 1, ys.min(), ys.max() + 1) == (5, 15, 5, 17)  # centres in [5, 17.5)
    stack = out.meta["instance_masks"]
    assert isinstance(stack, PreprocessedMasks) and stack.shape == (1, 20, 20)
    np.testing.assert_array_equal(np.asarray(stack)[0], out.mask == 1)


def test_coco_sample_polygons_and_rle_follow_and_detection_ap_reads_them(tmp_path):
    from shiftbench.metrics.detection import DetectionAP, _coco_fields

    root = coco_synth.write_coco_set(tmp_path / "coco", n_images=3)
    ds = load(str(root))
    pre = Preprocessing(48, (40, 40), "bilinear")
    for i in range(len(ds)):
        s = ds.load(i)
        out = pre.apply(s)
        g = out.meta["preprocess"]
        n = len(out.boxes)
        assert len(out.box_labels) == len(out.meta["ann_ids"]) == len(out.meta["iscrowd"]) == n
        assert len(out.meta["area"]) == len(out.meta["bbox"]) == len(out.meta["instance_masks"]) == n
        assert out.meta["instance_masks"].segmentations == [s.meta["instance_masks"].segmentations[
            s.meta["ann_ids"].index(a)] for a in out.meta["ann_ids"]]
        # the exact x, y, w, h and the float32 corners stay the same boxes (COCOeval reads the former)
        assert "boxes_xywh" in _coco_fields(out)
        masks = np.asarray(out.meta["instance_masks"])
        assert masks.shape == (n, 40, 40)
        for k in range(n):  # every mask pixel's centre lies in its box
            ys, xs = np.nonzero(masks[k])
            x0, y0, x1, y1 = out.boxes[k]
            assert ((xs + 0.5 >= x0 - 1e-4) & (xs + 0.5 <= x1 + 1e-4)).all()
            assert ((ys + 0.5 >= y0 - 1e-4) & (ys + 0.5 <= y1 + 1e-4)).all()
        top, left, ch, cw = g["crop"]
        assert (ch, cw) == (40, 40)
    for metric in (DetectionAP(), ):
        samples = [pre.apply(ds.load(i)) for i in range(len(ds))]
        metric.update_from_samples([{"boxes": s.boxes, "scores": np.ones(len(s.boxes)), "labels": s.box_labels}
                                    for s in samples], samples)
        assert metric.compute()["box_ap"] == pytest.approx(1.0)


def test_voc_object_map_follows_the_image():
    objects = np.zeros((30, 30), np.uint8)
    objects[5:15, 5:15] = 1
    objects[20:28, 18:29] = 2
    s = Sample(image=make_image(30, 30), mask=(objects > 0).astype(np.uint8) * 7, boxes=[[5, 5, 15, 15], [18, 20, 29, 28]],
               box_labels=[7, 7], id="voc", meta={"mask_type": "semantic", "instance_mask": objects})
    out = Preprocessing(15).apply(s)
    np.testing.assert_array_equal(out.meta["instance_mask"],
                                  np.asarray(Image.fromarray(objects).resize((15, 15), Image.NEAREST)))
    np.testing.assert_allclose(out.boxes, [[2.5, 2.5, 7.5, 7.5], [9, 10, 14.5, 14]])


# -- properties over generated shapes --------------------------------------------------------------------------
@st.composite
def scenes(draw):
    """An image of a few filled shapes (rectangles and ellipses), each in its own colour on a black ground, its
    instance map, and a preprocessing whose crop fits."""
    h, w = draw(st.integers(6, 90)), draw(st.integers(6, 90))
    n = draw(st.integers(1, 4))
    instances = np.zeros((h, w), np.int32)
    yy, xx = np.mgrid[0:h, 0:w]
    for k in range(1, n + 1):
        y0, x0 = draw(st.integers(0, h - 1)), draw(st.integers(0, w - 1))
        y1, x1 = draw(st.integers(y0 + 1, h)), draw(st.integers(x0 + 1, w))
        if draw(st.booleans()):
            shape = (yy >= y0) & (yy < y1) & (xx >= x0) & (xx < x1)
        else:
            cy, cx, ry, rx = (y0 + y1) / 2, (x0 + x1) / 2, max((y1 - y0) / 2, 0.5), max((x1 - x0) / 2, 0.5)
            shape = ((yy + 0.5 - cy) / ry) ** 2 + ((xx + 0.5 - cx) / rx) ** 2 <= 1
        instances[shape] = k
    palette = np.array([[0, 0, 0], [255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255]], np.uint8)
    resize = draw(st.one_of(st.none(), st.integers(3, 140)))
    rh, rw = resized_size(h, w, resize) if resize else (h, w)
    crop = draw(st.one_of(st.none(), st.tuples(st.integers(1, rh), st.integers(1, rw))))
    return palette[instances], instances, resize, crop


@given(scenes())
def test_property_nearest_mask_equals_the_mask_of_the_preprocessed_image(scene):
    """With the nearest filter, the moved instance map is exactly the map read off the moved image's colours."""
    image, instances, resize, crop = scene
    out = Preprocessing(resize, crop, "nearest").apply(Sample(image=image, mask=instances, id="p"))
    palette = np.array([[0, 0, 0], [255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255]], np.uint8)
    read = (out.image[:, :, None, :] == palette[None, None]).all(-1).argmax(-1)
    np.testing.assert_array_equal(out.mask, read)


@given(scenes(), st.sampled_from(["bilinear", "bicubic"]))
def test_property_smooth_filters_agree_with_the_mask_where_the_image_is_pure(scene, interpolation):
    """Bilinear and bicubic blend edges, but where the moved image is exactly an object's colour (or the
    ground's) the moved mask says that object (or ground): the mask follows the image, not a shifted copy."""
    image, instances, resize, crop = scene
    binary = instances > 0
    pure = np.where(binary[..., None], np.uint8(255), np.uint8(0)).repeat(3, axis=2)
    out = Preprocessing(resize, crop, interpolation).apply(Sample(image=pure, mask=binary, id="p"))
    white, black = (out.image == 255).all(-1), (out.image == 0).all(-1)
    assert out.mask[white].all() and not out.mask[black].any()


@given(scenes())
def test_property_boxes_enclose_their_moved_masks_and_drop_only_when_outside(scene):
    image, instances, resize, crop = scene
    n = int(instances.max())
    boxes = []
    for k in range(1, n + 1):
        ys, xs = np.nonzero(instances == k)
        boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1] if len(xs) else [0, 0, 0, 0])
    s = Sample(image=image, mask=instances, boxes=boxes, box_labels=list(range(n)), id="p",
               meta={"mask_type": "instance", "instance_masks": np.stack([instances == k for k in range(1, n + 1)])})
    out = Preprocessing(resize, crop, "nearest").apply(s)
    if resize is None and crop is None:  # nothing to do: the sample itself
        assert out is s
        return
    _, _, ch, cw = out.meta["preprocess"]["crop"]
    assert out.image.shape[:2] == (ch, cw) and len(out.boxes) == len(out.box_labels) <= n
    assert (out.boxes[:, [0, 2]] >= 0).all() and (out.boxes[:, [0, 2]] <= cw).all()
    assert (out.boxes[:, [1, 3]] >= 0).all() and (out.boxes[:, [1, 3]] <= ch).all()
    stack = np.asarray(out.meta["instance_masks"])
    assert stack.shape == (len(out.boxes), ch, cw)
    kept = out.box_labels.tolist()
    for j, k in enumerate(kept):
        np.testing.assert_array_equal(stack[j], out.mask == j + 1)
        ys, xs = np.nonzero(stack[j])
        x0, y0, x1, y1 = out.boxes[j]
        assert ((xs + 0.5 >= x0 - 1e-6) & (xs + 0.5 <= x1 + 1e-6)).all()
        assert ((ys + 0.5 >= y0 - 1e-6) & (ys + 0.5 <= y1 + 1e-6)).all()
    # a dropped box's object has no pixel left in the crop
    dropped = [k for k in range(n) if k not in kept]
    assert set(np.unique(out.mask)) <= set(range(len(kept) + 1))
    for k in dropped:
        whole = Preprocessing(resize, None, "nearest").apply(Sample(image=image, mask=instances == k + 1, id="q"))
        top, left = out.meta["preprocess"]["crop"][:2]
        assert not whole.mask[top:top + ch, left:left + cw].any()


def test_a_parsed_section_builds_its_transform_once(monkeypatch):
    """The spec's preprocess section is parsed once; every sample reuses its transform, checked no more."""
    from shiftbench.engine.spec import preprocess_section

    section = preprocess_section({"resize": 24, "crop": 16})
    built = section.transform
    monkeypatch.setattr(Preprocessing, "__post_init__", lambda self: pytest.fail("rebuilt per sample"))
    import shiftbench.resize as resize_module

    for name in ("check_interpolation", "check_pixels", "check_shorter"):
        monkeypatch.setattr(resize_module, name, lambda *a: pytest.fail("re-checked per sample"))
    for i in range(3):
        assert section.apply(make_sample(40 + i, 30)).image.shape == (16, 16, 3)
    assert section.transform is built
