"""ImageNet-C-bar's sparkles, inverse_sparkles and checkerboard_cutout against per-pixel transcriptions of
the reference's formulas (loops over pixels, written here), the draw order and non-square images. The torch
path, params (key sets, JSON, replay, seeds) and monotonicity are in test_cbar_contract.py."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

import shiftbench
import shiftbench.shifts.cbar.checkerboard  # noqa: F401 - registers checkerboard_cutout
import shiftbench.shifts.cbar.sparkles  # noqa: F401 - registers sparkles, inverse_sparkles
from shiftbench.sample import Sample

NAMES = ("sparkles", "inverse_sparkles", "checkerboard_cutout")
SEVERITIES = range(1, 6)


def photos(shape: tuple[int, int], count: int, first: int = 0) -> list[np.ndarray]:
    """Real photos of the objects dataset, resized to ``shape`` (H, W) with INTER_AREA."""
    ds = shiftbench.load_dataset("objects")
    return [np.ascontiguousarray(cv2.resize(ds.load(first + i).image, shape[::-1], interpolation=cv2.INTER_AREA))
            for i in range(count)]


def draw(name: str, image: np.ndarray, severity: int, seed: int = 0, sample_id: str = "a") -> dict:
    return shiftbench.create_shift(name).draw(Sample(image=image, id=sample_id), severity, seed=seed)


# -- per-pixel transcriptions of the reference (scalar Python, one pixel at a time) -------------------------


def star_at(y: int, x: int, center, radius: float, lengths: list[float], amount: float) -> float:
    """The reference's sparkle kernel weight at point (y, x): angle = arctan2(dp[1], dp[0]), dp = (y, x) - c."""
    rays = len(lengths)
    dp0, dp1 = y - center[0], x - center[1]
    dist = math.sqrt(dp0 * dp0 + dp1 * dp1)
    angle = math.atan2(dp1, dp0)
    d = (angle + math.pi) / (2 * math.pi) * rays
    i = int(d)
    f = d - i
    if radius != 0:
        length = lengths[i % rays] + f * (lengths[(i + 1) % rays] - lengths[i % rays])
        g = length**2 / (dist**2 + 1e-4)
        g = g ** ((100 - amount) / 50.0)
        f -= 0.5
        f = 1 - f**2
        f *= g
    return min(max(f, 0.0), 1.0)


def sparkles_per_pixel(image: np.ndarray, p: dict) -> np.ndarray:
    h, w = image.shape[:2]
    state = np.random.RandomState(seed=p["seed"])
    current = image.astype(np.float64)
    for center, rays, amount, radius in zip(p["centers"], p["nrays"], p["amounts"], p["radii"]):
        lengths = [max(1, radius + p["randomness"] / 100.0 * radius * state.randn()) for _ in range(rays)]
        new = np.empty((h, w, 3))
        for y in range(h):
            for x in range(w):
                f = star_at(y, x, center, radius, lengths, amount)
                for c in range(3):
                    value = float(np.float32(current[y, x, c]))  # the reference's astype(np.float32)
                    new[y, x, c] = value + f * (p["color"][c] - value)
        current = new
    return np.clip(current, 0, 255).astype(np.uint8)


def inverse_sparkles_per_pixel(image: np.ndarray, p: dict) -> np.ndarray:
    h, w = image.shape[:2]
    state = np.random.RandomState(seed=p["seed"])
    radius = p["radius"]
    lengths = [radius + p["randomness"] / 100.0 * radius * state.randn() for _ in range(p["rays"])]
    out = np.empty((h, w, 3))
    for y in range(h):
        for x in range(w):
            f = star_at(y, x, p["center"], radius, lengths, p["amount"])
            for c in range(3):
                out[y, x, c] = p["color"][c] + f * (float(image[y, x, c]) - p["color"][c])
    return np.clip(out, 0, 255).astype(np.uint8)


def checkerboard_per_pixel(image: np.ndarray, p: dict) -> np.ndarray:
    """The reference's mask kernel; the grid sized from the longer side (our non-square rule)."""
    h, w = image.shape[:2]
    side = max(h, w)
    s0, s1 = p["scales"]
    grid = np.random.RandomState(seed=p["seed"]).uniform(size=(int(4 * side // s0), int(4 * side // s1))) < p["fraction"]
    out = image.copy()
    cos, sin = math.cos(p["angle"]), math.sin(p["angle"])
    for y in range(h):
        for x in range(w):
            nx = (cos * y + sin * x) / s0
            ny = (-sin * y + cos * x) / s1
            keep = (int(nx % 2) != int(ny % 2)) or not grid[int(nx), int(ny)]  # negative int() wraps, as there
            if not keep:
                out[y, x] = 128
    return out


PER_PIXEL = {"sparkles": sparkles_per_pixel, "inverse_sparkles": inverse_sparkles_per_pixel,
             "checkerboard_cutout": checkerboard_per_pixel}


# -- 1. against the per-pixel transcriptions -------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_matches_per_pixel_reference(name):
    """Every severity, three draws, 32x32 and 40x40 photos: within 1 grey level everywhere."""
    shift = shiftbench.create_shift(name)
    worst = 0
    for k, image in enumerate(photos((32, 32), 1) + photos((40, 40), 2, first=1)):
        for severity in SEVERITIES:
            params = draw(name, image, severity, seed=k, sample_id=f"s{severity}")
            got = shift.replay(image, params)
            want = PER_PIXEL[name](image, params)
            worst = max(worst, int(np.abs(got.astype(np.int16) - want).max()))
    assert worst <= 1, worst


def test_ray_lengths_follow_the_reference_stream():
    """Per sparkle, per ray, randn() in order: a record's seed gives the reference's lengths (a star with
    its own ray lengths written out agrees with the one built from the seed)."""
    from shiftbench.shifts.cbar.sparkles import _ray_lengths

    state = np.random.RandomState(seed=123)
    first = _ray_lengths(state, 7, 3.0, 25, True)
    second = _ray_lengths(state, 5, 2.0, 25, True)
    again = np.random.RandomState(seed=123)
    want = [max(1, 3.0 + 25 / 100.0 * 3.0 * again.randn()) for _ in range(7)]
    want += [max(1, 2.0 + 25 / 100.0 * 2.0 * again.randn()) for _ in range(5)]
    assert np.concatenate([first, second]).tolist() == want


def test_angle_is_measured_from_the_row_axis():
    """A star of 4 rays whose only long ray is ray 2 (angle in [0, pi/2): dp = (y, x) - c with x to the right
    of the centre and y below it) lights the pixels below-right of the centre, not above-left."""
    from shiftbench.shifts.cbar.sparkles import star_weight

    weight = star_weight((41, 41), (20.0, 20.0), 1.0, np.array([1.0, 1.0, 20.0, 1.0]), 50)
    # arctan2(dx, dy) in [0, pi/2) is d in [2, 3): rays 2 and 3 interpolated, the long ray 2 weighs most near
    # d = 2, the +y axis (straight below the centre)
    assert weight[35, 20] > 0.9 > weight[5, 20]
    assert weight[35, 21] > weight[21, 35]


# -- 2. non-square images ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(48, 80), (80, 48)])
def test_non_square_follows_the_rule(name, shape):
    """Shape and dtype kept; the output equals the per-pixel form with the stated rule."""
    shift = shiftbench.create_shift(name)
    image = photos(shape, 1, first=3)[0]
    for severity in (1, 5):
        params = draw(name, image, severity, sample_id="ns")
        out = shift.replay(image, params)
        assert out.shape == image.shape and out.dtype == np.uint8
        assert np.abs(out.astype(np.int16) - PER_PIXEL[name](image, params)).max() <= 1


def test_non_square_parameters():
    """Positions per axis, radii and cell sizes from the shorter side, the checkerboard grid from the longer."""
    h, w = 48, 80
    image = np.zeros((h, w, 3), np.uint8)
    cols, centre_cols = [], []
    for i in range(20):
        p = draw("sparkles", image, 4, sample_id=str(i))
        centers = np.array(p["centers"])
        assert (centers >= 0).all() and (centers[:, 0] < h).all() and (centers[:, 1] < w).all()
        assert p["radii"] == [pytest.approx(5.0 * 0.1 / 10 * h)] * 5
        cols.extend(centers[:, 1])
        q = draw("inverse_sparkles", image, 4, sample_id=str(i))
        assert 0.25 * h <= q["center"][0] < 0.75 * h and 0.25 * w <= q["center"][1] < 0.75 * w
        assert q["radius"] == 0.25 * h
        centre_cols.append(q["center"][1])
        c = draw("checkerboard_cutout", image, 4, sample_id=str(i))
        assert 0.1 * h <= c["scales"][0] == c["scales"][1] <= 0.25 * h
        from shiftbench.shifts.cbar.checkerboard import cutout_grid

        assert cutout_grid((h, w), c["scales"], c["fraction"], c["seed"]).shape == (int(4 * w // c["scales"][0]),) * 2
    assert max(cols) > h and max(centre_cols) > 0.75 * h  # the columns span the wider axis


@pytest.mark.parametrize("name", ["sparkles", "inverse_sparkles"])
def test_sparkles_are_placed_by_absolute_position(name):
    """The rule keeps pixel positions: the same params on a crop give the crop of the output."""
    shift = shiftbench.create_shift(name)
    image = photos((48, 80), 1)[0]
    params = draw(name, image, 5)
    assert np.array_equal(shift.replay(image[:, :48].copy(), params), shift.replay(image, params)[:, :48])


def test_checkerboard_grid_from_the_longer_side():
    """A crop of the shorter axis keeps the longer side, so the grid: the crop of the output."""
    shift = shiftbench.create_shift("checkerboard_cutout")
    image = photos((80, 48), 1)[0]
    for severity in SEVERITIES:
        params = draw("checkerboard_cutout", image, severity)
        assert np.array_equal(shift.replay(image[:, :40].copy(), params), shift.replay(image, params)[:, :40])
