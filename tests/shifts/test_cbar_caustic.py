"""caustic_refraction (ImageNet-C-bar): the vectorised transform against a per-pixel transcription of the
reference's definition, the params' values and non-square images. The torch path, params replay and
monotonicity are in test_cbar_contract.py."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

import shiftbench
import shiftbench.shifts.cbar.caustic  # noqa: F401  (registers the shift)
from shiftbench.shifts.cbar._base import LEVELS

NAME = "caustic_refraction"
SEVERITIES = range(1, 6)


# -- the per-pixel definition, one pixel at a time -------------------------------------------------


def _caustic_at(y: int, x: int, time: float, size: float) -> float:
    """The caustic kernel at pixel (y, x)."""
    p = [((y / size) % 1) * 6.28318530718 - 250, ((x / size) % 1) * 6.28318530718 - 250]
    i = list(p)
    c = 1.0
    for n in range(5):
        t = time * (1.0 - (3.5 / (n + 1)))
        i = [p[0] + (math.cos(t - i[0]) + math.sin(t + i[1])), p[1] + (math.sin(t - i[1]) + math.cos(t + i[0]))]
        c += 1.0 / math.sqrt((p[0] / (math.sin(i[0] + t) / 0.005)) ** 2 + (p[1] / (math.cos(i[1] + t) / 0.005)) ** 2)
    c /= 5.0
    c = 1.17 - c**1.4
    return min(max(abs(c) ** 8.0, 0.0), 1.0)


def _snell(incident: np.ndarray, normal: np.ndarray, eta: float) -> np.ndarray:
    """The ray ``incident`` refracted through a surface of unit ``normal`` (ratio ``eta``), as a rotation."""
    cos_in = float(np.dot(incident, normal))
    if abs(cos_in) >= 1.0 - 1e-3:
        return incident
    out_angle = math.asin(math.sin(math.acos(cos_in)) / eta)
    spectator = np.cross(incident, normal)
    spectator = spectator / np.linalg.norm(spectator)
    basis = np.stack([normal, np.cross(normal, spectator), spectator])
    return np.linalg.inv(basis) @ np.array([math.cos(out_angle), math.sin(out_angle), 0.0])


def _bilinear(image: np.ndarray, py: float, px: float) -> np.ndarray:
    """Bilinear sample at (py, px); a corner outside the image is black."""
    h, w = image.shape[:2]
    l, u = math.floor(py), math.floor(px)

    def at(r, c):
        return image[r, c, :] if 0 <= r < h and 0 <= c < w else np.zeros(3)

    upper = at(l, u) * (1.0 - px + u) + at(l, u + 1) * (1.0 - (u + 1) + px)
    lower = at(l + 1, u) * (1.0 - px + u) + at(l + 1, u + 1) * (1.0 - (u + 1) + px)
    return upper * (1.0 - py + l) + lower * (1.0 - (l + 1) + py)


def per_pixel_caustic_refraction(image, time, size, eta, lens_scale, lighting_amount, softening, **_):
    """Caustic refraction pixel by pixel on an H x W image; returns (output, branch counts)."""
    from scipy.ndimage import gaussian_filter

    h, w = image.shape[:2]
    caustics = np.zeros((h, w, 3))
    for y in range(h):
        for x in range(w):
            caustics[y, x, :] = _caustic_at(y, x, time, size)
    caustics = gaussian_filter(caustics, sigma=softening)
    weights = np.array([0.2126, 0.7152, 0.0722])

    def luma(y, x):
        return float(np.dot(caustics[y, x], weights)) if 0 <= y < h and 0 <= x < w else 0.0

    pixels = image.astype(np.float32) / 255
    out = np.zeros((h, w, 3))
    counts = {"bent": 0, "unbent": 0, "outside": 0}
    for y in range(h):
        for x in range(w):
            left, right, up, down = luma(y, x - 1), luma(y, x + 1), luma(y - 1, x), luma(y + 1, x)
            normal = np.array([down - up, right - left, 1.0])
            normal = normal / np.linalg.norm(normal)
            ray = _snell(np.array([0.0, 0.0, 1.0]), normal, eta)
            counts["unbent" if ray[2] == 1.0 and ray[0] == 0.0 else "bent"] += 1
            shift = np.round(ray * lens_scale, 3)
            py, px = y + shift[0], x + shift[1]
            if not (0 <= py <= h - 1 and 0 <= px <= w - 1):
                counts["outside"] += 1
            value = _bilinear(pixels, py, px)
            value = value + (left - right) * lighting_amount
            value = value + (down - up) * lighting_amount
            out[y, x] = np.clip(value, 0, 1)
    return (out * 255).astype(np.uint8), counts


# -- fixtures --------------------------------------------------------------------------------------


def photo(i: int, h: int, w: int) -> np.ndarray:
    im = shiftbench.load_dataset("objects").load(i).image
    return cv2.resize(im, (w, h), interpolation=cv2.INTER_AREA)


@pytest.fixture(scope="module")
def shift():
    return shiftbench.create_shift(NAME)


@pytest.fixture(scope="module")
def small():
    return [photo(i, 32, 32) for i in (0, 5)]


def draw(shift, image: np.ndarray, severity: int, seed: int, sample_id: str) -> dict:
    """The params drawn for ``image`` (through the shift's call, as a user gets them)."""
    return shift(image, severity=severity, seed=seed, sample_id=sample_id, return_params=True)[1]


def max_diff(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max())


# -- 1. the per-pixel definition --------------------------------------------------------------------


def test_matches_per_pixel_definition(shift, small):
    totals = {"bent": 0, "unbent": 0, "outside": 0}
    for severity in SEVERITIES:
        for k, im in enumerate(small):
            for seed in (0, 1):
                params = draw(shift, im, severity, seed, f"s{k}")
                ours = shift.replay(im, params)
                ref, counts = per_pixel_caustic_refraction(im, **params)
                assert max_diff(ours, ref) <= 1, (severity, k, seed, max_diff(ours, ref))
                for key in totals:
                    totals[key] += counts[key]
    # both branches of the refraction and the black border of the sample were exercised
    assert min(totals.values()) > 50, totals


# -- 2. params -------------------------------------------------------------------------------------


def test_params_values(shift):
    im = photo(1, 40, 40)
    for severity in SEVERITIES:
        params = draw(shift, im, severity, 0, "a")
        level = LEVELS[NAME][severity - 1]
        assert params["level"] == level and params["eta"] == 4.0 and params["softening"] == 1
        assert 0.5 <= params["time"] < 2.0 and 0.75 * 40 <= params["size"] < 1.25 * 40
        assert params["lens_scale"] == pytest.approx(level * 0.05 * 40)
        assert params["lighting_amount"] == pytest.approx(level * 0.2)


# -- 3. non-square images --------------------------------------------------------------------------


@pytest.mark.parametrize("h, w", [(48, 80), (80, 48)])
def test_non_square_shape_and_scale(shift, h, w):
    im = photo(2, h, w)
    for severity in (1, 5):
        out, params = shift(im, severity=severity, seed=3, sample_id="n", return_params=True)
        assert out.shape == (h, w, 3) and out.dtype == np.uint8
        side = min(h, w)  # im_size is the shorter side
        assert 0.75 * side <= params["size"] < 1.25 * side
        assert params["lens_scale"] == pytest.approx(LEVELS[NAME][severity - 1] * 0.05 * side)


@pytest.mark.parametrize("h, w", [(32, 40), (40, 32)])
def test_non_square_follows_per_pixel_rule(shift, h, w):
    im = photo(3, h, w)
    params = draw(shift, im, 4, 2, "r")
    ref, _ = per_pixel_caustic_refraction(im, **params)  # every pixel at its own (row, column)
    assert max_diff(shift.replay(im, params), ref) <= 1
