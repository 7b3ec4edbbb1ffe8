"""Registry contract of the 19 ImageNet-C corruptions: shapes, seeds, replay, batches, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import SeverityError, ShiftbenchError
from shiftbench.registry import SHIFTS
from shiftbench.sample import Sample
from shiftbench.shifts.corruptions import COMMON_CORRUPTIONS, CORRUPTION_GROUPS, EXTRA_CORRUPTIONS, corruption_names

ALL = CORRUPTION_GROUPS["all"]
DETERMINISTIC = {"defocus_blur", "zoom_blur", "brightness", "contrast", "pixelate", "jpeg_compression", "gaussian_blur", "saturate"}


def photo_like(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A deterministic test image with smooth shading, edges and texture (not flat, not pure noise)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([xx / width, yy / height, 0.5 + 0.5 * np.sin((xx + yy) / 7.0)], axis=-1) * 180 + 30
    base[height // 4 : height // 2, width // 3 : 2 * width // 3] = (230, 40, 60)  # a saturated block with edges
    base += rng.normal(0, 12, base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def image() -> np.ndarray:
    return photo_like(40, 56)  # non-square, small to stay fast


def test_groups_cover_the_19_imagenet_c_names():
    assert len(COMMON_CORRUPTIONS) == 15 and len(EXTRA_CORRUPTIONS) == 4
    assert sorted(ALL) == sorted(set(ALL)) and len(ALL) == 19
    for group in ("noise", "blur", "weather", "digital", "extra"):
        for name in CORRUPTION_GROUPS[group]:
            assert SHIFTS.entry(name).meta["group"] == group
    assert corruption_names("blur") == ["defocus_blur", "glass_blur", "motion_blur", "zoom_blur"]
    assert corruption_names("fog") == ["fog"]
    with pytest.raises(ShiftbenchError, match="did you mean 'fog'"):
        corruption_names("fogg")
    blurs = [n for n in sb.registry.SHIFTS.names("*_blur") if not n.startswith("p_")]  # ImageNet-P's sequences apart
    assert sorted(blurs) == ["defocus_blur", "gaussian_blur", "glass_blur", "motion_blur", "zoom_blur"]


@pytest.mark.parametrize("name", ALL)
def test_shape_dtype_and_change(name, image):
    shift = SHIFTS.create(name)
    for severity in range(1, 6):
        out = shift(image, severity=severity, seed=1)
        assert out.dtype == np.uint8 and out.shape == image.shape
        assert not np.array_equal(out, image), f"{name} severity {severity} left the image unchanged"


@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_bytes_and_replay(name, image):
    shift = SHIFTS.create(name)
    out1, params = shift(image, severity=3, seed=7, sample_id="a", return_params=True)
    out2 = shift(image.copy(), severity=3, seed=7, sample_id="a")
    assert out1.tobytes() == out2.tobytes()
    # a manifest stores params as JSON: replaying the round-tripped params rebuilds the bytes
    replayed = shift.replay(image, json.loads(json.dumps(params)))
    assert replayed.tobytes() == out1.tobytes()
    assert params["severity"] == 3
    if name in DETERMINISTIC:
        assert params == {"severity": 3}
    else:
        other, other_params = shift(image, severity=3, seed=8, sample_id="a", return_params=True)
        assert other_params != params and other.tobytes() != out1.tobytes()


@pytest.mark.parametrize("name", ALL)
def test_batch_equals_items(name):
    shift = SHIFTS.create(name)
    images = [photo_like(40, 56, seed=s) for s in range(3)] + [photo_like(48, 33, seed=3)]
    ids = ["a", "b", "c", "d"]
    batch, params = shift(images, severity=4, seed=3, sample_id=ids, return_params=True)
    for im, sid, out, p in zip(images, ids, batch, params):
        single, single_params = shift(im, severity=4, seed=3, sample_id=sid, return_params=True)
        assert single_params == p
        assert single.tobytes() == out.tobytes()


@pytest.mark.parametrize("name", ALL)
def test_severity_out_of_range_refused(name, image):
    shift = SHIFTS.create(name)
    for bad in (0, 6, -1, 0.5, 5.01, float("nan"), True):  # in between (2.5) is a dial now
        with pytest.raises(SeverityError):
            shift(image, severity=bad)
    with pytest.raises(SeverityError):
        shift.replay(image, {"severity": 9})


@pytest.mark.parametrize("name", ALL)
def test_small_images(name):
    shift = SHIFTS.create(name)
    for shape in ((32, 32), (32, 97), (71, 32)):
        im = photo_like(*shape)
        for severity in (1, 5):
            out = shift(im, severity=severity, seed=2)
            assert out.shape == im.shape and out.dtype == np.uint8
    for shape in ((31, 64), (64, 20)):
        with pytest.raises(ShiftbenchError, match=f"{shape[1]}x{shape[0]}"):
            shift(photo_like(*shape), severity=1)


@pytest.mark.parametrize("name", ["gaussian_noise", "glass_blur", "frost", "fog", "elastic_transform", "zoom_blur"])
def test_large_non_square_image(name):
    im = photo_like(300, 530)
    out = SHIFTS.create(name)(im, severity=5, seed=0)
    assert out.shape == im.shape


def test_sample_in_sample_out_keeps_annotations(image):
    mask = np.zeros(image.shape[:2], dtype=bool)
    mask[5:20, 10:30] = True
    sample = Sample(image=image, id="s1", label=3, mask=mask)
    out = SHIFTS.create("snow")(sample, severity=2, seed=0)
    assert isinstance(out, Sample) and out.label == 3 and out.mask is mask
    assert out.image.shape == image.shape and not np.array_equal(out.image, image)


def test_wrong_params_for_frost_named(image):
    shift = SHIFTS.create("frost")
    with pytest.raises(ShiftbenchError, match="do not fit"):
        shift.replay(image, {"severity": 1, "overlay": 0, "top": 10_000, "left": 0})


def test_noise_tables_are_exact_distributions():
    from shiftbench.shifts.corruptions import noise

    rng = np.random.default_rng(0)
    flat = np.full((200, 300, 3), 100, dtype=np.uint8)
    for severity in (1, 5):
        out = noise.sample_from_table(flat, noise.impulse_table(severity), rng)
        c = noise.IMPULSE_AMOUNT[severity - 1]
        assert set(np.unique(out)) == {0, 100, 255}
        assert abs((out == 0).mean() - c / 2) < 0.01 and abs((out == 255).mean() - c / 2) < 0.01
        out = noise.sample_from_table(flat, noise.gaussian_table(severity), rng).astype(float)
        sigma = 255 * noise.GAUSSIAN_SCALE[severity - 1]
        expected = np.clip(100 + sigma * rng.standard_normal(10**6), 0, 255).astype(np.uint8).astype(float)
        assert abs(out.mean() - expected.mean()) < 0.6 and abs(out.std() - expected.std()) < 0.6


def test_import_does_not_pull_numba():
    import subprocess
    import sys

    code = "import shiftbench.shifts.corruptions, sys; assert 'numba' not in sys.modules, 'numba imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_glass_blur_offsets_uniform_like_randint():
    from shiftbench.shifts.corruptions.blur import GLASS, GlassBlur

    image = photo_like(200, 200)
    for severity in range(1, 6):
        delta = GLASS[severity - 1][1]
        offsets = GlassBlur.offsets(image.shape, severity, {"noise_seed": severity})
        values, counts = np.unique(offsets, return_counts=True)
        assert values.tolist() == list(range(-delta, delta))  # randint(-d, d): high end excluded
        assert np.all(np.abs(counts / counts.sum() - 1 / (2 * delta)) < 0.005)


def test_glass_blur_kernel_follows_offsets():
    """The compiled shuffle applies exactly the documented offsets, in the reference's scan order."""
    from shiftbench.shifts.corruptions._kernels import shuffle_in_place
    from shiftbench.shifts.corruptions.blur import GLASS, GlassBlur

    image = photo_like(36, 45)
    for severity in (2, 4):
        _, delta, iterations = GLASS[severity - 1]
        params = {"noise_seed": 11}
        offsets = GlassBlur.offsets(image.shape, severity, params)
        expected = image.copy()
        h, w = image.shape[:2]
        for it in range(iterations):  # the reference's loop, in Python
            for i, hh in enumerate(range(h - delta, delta, -1)):
                for j, ww in enumerate(range(w - delta, delta, -1)):
                    dx, dy = offsets[it, i, j]
                    expected[hh, ww] = expected[hh + dy, ww + dx]
        ours = image.copy()
        shuffle_in_place(ours, GlassBlur.raw_words(image.shape, severity, params), delta, iterations)
        assert np.array_equal(ours, expected)


@pytest.mark.parametrize("name", ["gaussian_noise", "glass_blur", "motion_blur", "jpeg_compression", "contrast"])
def test_strided_input_same_as_contiguous(name):
    image = photo_like(50, 64)
    view = image[:, ::-1]  # a negative-stride view, as a flipped array arrives
    shift = SHIFTS.create(name)
    params = shift.draw(Sample(image=np.ascontiguousarray(view), id="0"), 2, seed=0)
    assert shift.replay(Sample(image=view, id="0"), params).image.tobytes() == shift.replay(np.ascontiguousarray(view), params).tobytes()


def test_box_downscale_is_pillow_box():
    """pixelate's compiled downscale gives Pillow's BOX resampling bit for bit."""
    from PIL import Image

    from shiftbench.shifts.corruptions.digital import PIXELATE, box_downscale

    rng = np.random.default_rng(0)
    for h, w in ((224, 224), (32, 32), (50, 77), (301, 530), (33, 97)):
        image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        for c in PIXELATE:
            size = (int(w * c), int(h * c))
            expected = np.asarray(Image.fromarray(image).resize(size, Image.Resampling.BOX))
            assert np.array_equal(box_downscale(image, *size), expected), (h, w, c)


def _brightness_vectorised(image: np.ndarray, severity: int) -> np.ndarray:
    """brightness as it was written before its one-pass kernel: the (max channel, channel) table gathered."""
    from shiftbench.shifts.corruptions.weather import brightness_lut

    value = np.maximum(np.maximum(image[..., 0], image[..., 1]), image[..., 2]).astype(np.uint16)
    return brightness_lut(severity)[(value[..., None] << 8) | image]


def _saturate_vectorised(image: np.ndarray, severity: int) -> np.ndarray:
    """saturate as it was written before its one-pass kernel: float32 numpy over the whole image."""
    from shiftbench.shifts.corruptions.digital import SATURATE

    gain, offset = SATURATE[severity - 1]
    x = image.astype(np.float32)
    value = x.max(axis=2)
    spread = value - x.min(axis=2)
    coloured = spread > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        saturation = np.where(coloured, spread / value, np.float32(0.0))
        new = np.clip(saturation * np.float32(gain) + np.float32(offset), 0.0, 1.0).astype(np.float32)
        factor = np.where(coloured, new * value / spread, np.float32(0.0)).astype(np.float32)
    out = value[..., None] - (value[..., None] - x) * factor[..., None]
    if offset > 0:
        grey = ~coloured
        out[grey, 1] = out[grey, 2] = (value * (np.float32(1.0) - new))[grey]
    return np.clip(out, 0, 255).astype(np.uint8)


def _contrast_vectorised(image: np.ndarray, severity: int) -> np.ndarray:
    """contrast as it was written before its one-pass kernel: float64 tables applied by cv2.LUT."""
    import cv2

    from shiftbench.shifts.corruptions.digital import CONTRAST

    c = CONTRAST[severity - 1]
    means = np.array(cv2.mean(image)[:3], dtype=np.float64) / 255.0
    levels = np.arange(256, dtype=np.float64)[:, None] / 255.0
    table = (np.clip((levels - means) * c + means, 0, 1) * 255).astype(np.uint8)
    return cv2.LUT(image, np.ascontiguousarray(table[None]))


@pytest.mark.parametrize("name,vectorised", [("brightness", _brightness_vectorised), ("saturate", _saturate_vectorised),
                                             ("contrast", _contrast_vectorised)])
def test_one_pass_kernels_give_the_vectorised_bytes(name, vectorised):
    """The compiled one-pass forms of brightness, saturate and contrast give the bytes of their vectorised forms
    (which the reference tests pinned) on photos, noise, and every grey level including black and white."""
    from test_corruptions_reference import photos

    rng = np.random.default_rng(5)
    greys = np.repeat(np.arange(256, dtype=np.uint8), 3).reshape(16, 16, 3)
    images = photos(64) + [rng.integers(0, 256, (300, 280, 3), dtype=np.uint8), np.ascontiguousarray(np.tile(greys, (3, 3, 1)))]
    shift = sb.create_shift(name)
    for severity in range(1, 6):
        for im in images:
            assert np.array_equal(shift(im, severity=severity), vectorised(im, severity)), (name, severity, im.shape)


def test_bare_arrays_are_hashed_only_for_corruptions_that_draw(monkeypatch):
    """A deterministic corruption of a bare array needs no content id (nothing is seeded from it); a random
    one still seeds from the content, so its bytes equal those of the same image given its content id."""
    import shiftbench.shifts.base as base
    from shiftbench.sample import content_id

    image = photo_like(40, 56)
    expected = {name: sb.create_shift(name)(image, severity=3, seed=2) for name in ("contrast", "gaussian_noise")}
    assert np.array_equal(expected["gaussian_noise"],
                          sb.create_shift("gaussian_noise")(image, severity=3, seed=2, sample_id=content_id(image)))
    calls = []
    monkeypatch.setattr(base, "content_id", lambda x: calls.append(1) or content_id(x))
    assert np.array_equal(sb.create_shift("contrast")(image, severity=3, seed=2), expected["contrast"]) and not calls
    assert np.array_equal(sb.create_shift("gaussian_noise")(image, severity=3, seed=2), expected["gaussian_noise"])
    assert calls == [1]
    assert sb.create_shift("contrast").draws_randomly is False and sb.create_shift("snow").draws_randomly
