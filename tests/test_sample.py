"""Sample / Query records and the conversion of any image input to HxWx3 uint8 RGB."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from shiftbench.errors import ImageError
from shiftbench.sample import Query, Sample, load_image, to_rgb_uint8

from conftest import make_image


def test_rgb_uint8_passthrough_is_contiguous_copy_free():
    img = make_image()
    out = to_rgb_uint8(img)
    assert out.dtype == np.uint8 and out.shape == img.shape
    assert np.array_equal(out, img)


@pytest.mark.parametrize("mode", ["L", "LA", "RGBA", "P", "CMYK", "I;16", "I", "F", "1", "RGB"])
def test_pil_modes_convert(mode):
    rgb = Image.fromarray(make_image())
    if mode in ("I;16", "I"):
        img = Image.fromarray((np.asarray(rgb.convert("L")).astype(np.uint16) * 257))
        assert img.mode == "I;16"
        if mode == "I":
            img = img.convert("I")
        expected = np.asarray(rgb.convert("L"))
    elif mode == "F":
        img = Image.fromarray(np.asarray(rgb.convert("L")).astype(np.float32) / 255.0)
        expected = np.asarray(rgb.convert("L"))
    else:
        img = rgb.convert(mode)
        expected = np.asarray(img.convert("RGB"))
    out = to_rgb_uint8(img)
    assert out.shape == (48, 64, 3) and out.dtype == np.uint8
    if expected.ndim == 2:
        expected = np.repeat(expected[:, :, None], 3, axis=2)
    assert np.array_equal(out, expected)


def test_arrays_of_other_dtypes_and_channels():
    grey = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert np.array_equal(to_rgb_uint8(grey)[..., 1], grey)
    assert to_rgb_uint8(grey[..., None]).shape == (3, 4, 3)
    rgba = np.dstack([make_image(), np.full((48, 64), 7, np.uint8)])
    assert np.array_equal(to_rgb_uint8(rgba), make_image())
    u16 = (make_image().astype(np.uint16) * 257)
    assert np.array_equal(to_rgb_uint8(u16), make_image())
    f = make_image().astype(np.float64) / 255
    assert np.array_equal(to_rgb_uint8(f), make_image())
    assert np.array_equal(to_rgb_uint8(np.array([[True, False]])), np.array([[[255] * 3, [0] * 3]], np.uint8))
    assert to_rgb_uint8(np.full((2, 2), 200, np.int64)).max() == 200


@pytest.mark.parametrize(
    "arr, message",
    [
        (np.zeros((3, 32, 32), np.uint8), "channels-first"),
        (np.zeros((0, 5, 3), np.uint8), "empty"),
        (np.zeros((4, 4, 5), np.uint8), "shape"),
        (np.full((4, 4, 3), 2.0), r"\[0, 1\]"),
        (np.full((4, 4, 3), np.nan), "NaN"),
        (np.full((4, 4), 300, np.int32), "outside 0..255"),
        (np.zeros((2, 2, 2, 3), np.uint8), "shape"),
    ],
)
def test_bad_arrays_named(arr, message):
    with pytest.raises(ImageError, match=message):
        to_rgb_uint8(arr, source="x.png")


def test_load_image_errors_name_the_file(tmp_path):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"not an image at all")
    with pytest.raises(ImageError, match="broken.jpg"):
        load_image(bad)
    with pytest.raises(ImageError, match="not found"):
        load_image(tmp_path / "missing.png")
    truncated = tmp_path / "cut.png"
    buf = io.BytesIO()
    Image.fromarray(make_image()).save(buf, format="PNG")
    truncated.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(ImageError, match="cut.png"):
        load_image(truncated)


def test_load_image_round_trip_and_exif_orientation(tmp_path):
    img = make_image()
    path = tmp_path / "a.png"
    Image.fromarray(img).save(path)
    assert np.array_equal(load_image(path), img)
    pil = Image.fromarray(img)
    exif = pil.getexif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise when displayed
    jpg = tmp_path / "r.jpg"
    pil.save(jpg, exif=exif, quality=95)
    assert load_image(jpg).shape == (64, 48, 3)


def test_sample_validates_mask_and_boxes():
    img = make_image()
    s = Sample(image=img, mask=np.zeros((48, 64), bool), boxes=[[1, 2, 3, 4]], box_labels=[5], label=np.int64(3))
    assert s.boxes.shape == (1, 4) and s.label == 3 and isinstance(s.label, int)
    with pytest.raises(ImageError, match="does not match"):
        Sample(image=img, mask=np.zeros((10, 10), bool))
    with pytest.raises(ImageError, match="box labels"):
        Sample(image=img, boxes=[[1, 2, 3, 4]], box_labels=[1, 2])
    assert s.replace(label=4).label == 4 and s.label == 3


def test_query_checks_subset_contains_target():
    ref = Sample(image=make_image(), id="r")
    q = Query(reference=ref, text="make it red", target_id=7, subset_ids=[7, 8, 9], id="q1")
    assert q.target_id == "7" and q.subset_ids == ("7", "8", "9")
    with pytest.raises(ImageError, match="q2.*subset does not contain"):
        Query(reference=ref, text="x", target_id="1", subset_ids=["2", "3"], id="q2")
