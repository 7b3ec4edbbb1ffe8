"""ImageNet-C-bar noise corruptions (perlin_noise, blue_noise_sample, brownish_noise) against slow
per-pixel transcriptions of the reference's formulas, the params' values and non-square images. The torch
path, params round trips and monotonicity in severity are in test_cbar_contract.py."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

import shiftbench
import shiftbench.shifts.cbar.noise as cbar_noise  # registers the three corruptions

NAMES = ("perlin_noise", "blue_noise_sample", "brownish_noise")


def photos(shape: tuple[int, int], count: int = 2) -> list[np.ndarray]:
    """Real photos of the objects dataset resized (INTER_AREA) to ``shape`` (H, W)."""
    ds = shiftbench.load_dataset("objects")
    return [np.ascontiguousarray(cv2.resize(ds.load(i).image, shape[::-1], interpolation=cv2.INTER_AREA))
            for i in range(count)]


# -- slow per-pixel transcriptions of the reference ---------------------------------------------------


class SlowPerlin:
    """The reference's Perlin generator, one scalar at a time (a gradient of norm 0 stays 0: see perlin_tables)."""

    B, N = 256, 16 * 256

    def __init__(self, state: np.random.RandomState):
        B = self.B
        grads = []
        for _ in range(2 * B + 2):
            g = (state.randint(low=0, high=2**31, size=2) % (2 * B) - B) / B
            norm = math.sqrt(g[0] ** 2 + g[1] ** 2)
            grads.append([g[0] / norm, g[1] / norm] if norm > 0 else [0.0, 0.0])
        p = list(range(2 * B + 2))
        for i in range(B - 1, -1, -1):
            j = state.randint(low=0, high=2**31) % B
            p[i], p[j] = p[j], p[i]
        for i in range(B + 2):
            p[B + i] = p[i]
            grads[B + i] = grads[i]
        self.p, self.g = p, grads

    def noise(self, x: float, y: float) -> float:
        B, p, g = self.B, self.p, self.g
        t = x + self.N
        bx0, rx0 = int(t) % B, t % 1
        bx1, rx1 = (bx0 + 1) % B, rx0 - 1.0
        t = y + self.N
        by0, ry0 = int(t) % B, t % 1
        by1, ry1 = (by0 + 1) % B, ry0 - 1.0
        i, j = p[bx0], p[bx1]
        b00, b10, b01, b11 = p[i + by0], p[j + by0], p[i + by1], p[j + by1]
        sx = rx0 * rx0 * (3.0 - 2.0 * rx0)
        sy = ry0 * ry0 * (3.0 - 2.0 * ry0)
        u = rx0 * g[b00][0] + ry0 * g[b00][1]
        v = rx1 * g[b10][0] + ry0 * g[b10][1]
        a = u + sx * (v - u)
        u = rx0 * g[b01][0] + ry1 * g[b01][1]
        v = rx1 * g[b11][0] + ry1 * g[b11][1]
        b = u + sx * (v - u)
        return 1.5 * (a + sy * (b - a))

    def turbulence(self, x: float, y: float, octaves: float) -> float:
        t, f = 0.0, 1.0
        while f <= octaves:
            t += abs(self.noise(f * x, f * y)) / f
            f *= 2
        return t


def slow_perlin(image: np.ndarray, p: dict) -> np.ndarray:
    gen = SlowPerlin(np.random.RandomState(p["seed"]))
    m = p["m"]
    out = np.empty(image.shape, np.uint8)
    for y in range(image.shape[0]):
        for x in range(image.shape[1]):
            u, v = y * m[0][0] + x * m[1][0], y * m[0][1] + x * m[1][1]
            f = gen.turbulence(u, v, p["turbulence"]) if p["turbulence"] != 1.0 else gen.noise(u, v)
            f = min(max(p["gain"] * f + p["bias"], 0.0), 1.0)
            for c in range(3):
                # the reference's (1 - alpha) * image.astype(float32) is a float32 product
                value = float(np.float32(1 - p["alpha"]) * np.float32(image[y, x, c])) + 255 * p["alpha"] * f
                out[y, x, c] = int(min(max(value, 0.0), 255.0))
    return out


def slow_fourier_noise(state: np.random.RandomState, h: int, w: int, power_of_distance) -> np.ndarray:
    """The reference's gen_noise (H = W = im_size there; the stated rule for H != W), the inverse FFT as an
    explicit DFT."""
    power = np.zeros((h, w))
    for y in range(h):
        for x in range(w):
            power[y, x] = power_of_distance(math.hypot(x - w / 2, y - h / 2))
    phases = state.uniform(low=0, high=2 * np.pi, size=(h, w // 2))
    if w % 2 == 0:
        phases = np.concatenate((phases, phases[::-1, ::-1]), axis=1)
    else:
        centre = state.uniform(low=0, high=2 * np.pi, size=(h // 2, 1))
        column = np.concatenate((centre, [[0.0]], centre[::-1, :]), axis=0)[:h]
        phases = np.concatenate((phases, column, phases[::-1, ::-1]), axis=1)
    spectrum = power * (np.cos(phases) + 1j * np.sin(phases))
    spectrum = np.roll(np.roll(spectrum, h // 2, axis=0), w // 2, axis=1)
    dft_rows = np.exp(2j * np.pi * np.outer(np.arange(h), np.arange(h)) / h)
    dft_cols = np.exp(2j * np.pi * np.outer(np.arange(w), np.arange(w)) / w)
    noise = (dft_rows @ spectrum @ dft_cols.T).real / (h * w)
    return noise / noise.std()


def slow_blue_noise_sample(image: np.ndarray, p: dict) -> np.ndarray:
    h, w = image.shape[:2]
    noise = slow_fourier_noise(np.random.RandomState(p["seed"]), h, w, lambda d: d)
    out = np.zeros_like(image)
    for y in range(h):
        for x in range(w):
            if noise[y, x] > p["threshold"]:
                out[y, x] = image[y, x]
    return out


def slow_brownish_noise(image: np.ndarray, p: dict) -> np.ndarray:
    h, w = image.shape[:2]
    state = np.random.RandomState(p["seed"])
    planes = [slow_fourier_noise(state, h, w, lambda d: 1 / (d**2 + 1)) for _ in range(3)]
    out = np.empty_like(image)
    for y in range(h):
        for x in range(w):
            for c in range(3):
                out[y, x, c] = int(min(max(image[y, x, c] + p["intensity"] * planes[c][y, x], 0.0), 255.0))
    return out


SLOW = {"perlin_noise": slow_perlin, "blue_noise_sample": slow_blue_noise_sample, "brownish_noise": slow_brownish_noise}


def max_diff(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())


# -- 1. the per-pixel reference ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_matches_per_pixel_reference(name):
    """Every severity, two seeds, square photos (32 and, for the Fourier noise's odd branch, 33): within 1 level."""
    shift = shiftbench.create_shift(name)
    sizes = (32,) if name == "perlin_noise" else (32, 33)
    for size in sizes:
        for k, image in enumerate(photos((size, size))):
            for severity in range(1, 6):
                out, params = shift(image, severity=severity, seed=k, sample_id=f"r{size}", return_params=True)
                assert max_diff(out, SLOW[name](image, params)) <= 1, (name, size, k, severity)


@pytest.mark.parametrize("shape", [(48, 80), (80, 48), (35, 48), (48, 35)])
@pytest.mark.parametrize("name", ["blue_noise_sample", "brownish_noise"])
def test_fourier_non_square_follows_rule(name, shape):
    """The stated rule for H x W (odd/even branch by width, centre column cut to H rows), transcribed slowly."""
    shift = shiftbench.create_shift(name)
    image = photos(shape, 1)[0]
    out, params = shift(image, severity=4, seed=1, sample_id="ns", return_params=True)
    assert max_diff(out, SLOW[name](image, params)) <= 1


def test_perlin_tables_consume_the_state_as_the_reference():
    """Batched draws equal the reference's call-by-call draws, including a seed with a zero gradient (230)."""
    for seed in (0, 7, 230, 2**32 - 1):
        perm, grad = cbar_noise.perlin_tables(seed)
        slow = SlowPerlin(np.random.RandomState(seed))
        assert perm.tolist() == slow.p[:512]
        np.testing.assert_array_equal(grad, np.array(slow.g[:256]))
    assert np.isfinite(cbar_noise.perlin_tables(230)[1]).all()
    assert (cbar_noise.perlin_tables(230)[1][0] == 0).all()


def test_fourier_phases_consume_the_state_as_the_reference():
    """A square image draws uniform(0, 2 pi, (n, n//2)) then, n odd, (n//2, 1): nothing else."""
    for n in (32, 33):
        state = np.random.RandomState(5)
        cbar_noise.fourier_phases(state, n, n)
        ref = np.random.RandomState(5)
        ref.uniform(0, 2 * np.pi, size=(n, n // 2))
        if n % 2:
            ref.uniform(0, 2 * np.pi, size=(n // 2, 1))
        assert state.uniform() == ref.uniform()


# -- 2. params -------------------------------------------------------------------------------------------


def test_params_values():
    """The key sets are in test_cbar_contract.py; here the values."""
    image = photos((48, 80), 1)[0]
    p = shiftbench.create_shift("perlin_noise").draw(shiftbench.Sample(image=image, id="x"), 3, seed=0)
    assert p["m"] == [[224 / (32 * 48), 0.0], [0.0, 224 / (32 * 48)]]  # im_size: the shorter side
    assert isinstance(p["seed"], int) and 0 <= p["seed"] < 2**32
    assert p["alpha"] == pytest.approx(5.8 * 0.05)
    p = shiftbench.create_shift("blue_noise_sample").draw(shiftbench.Sample(image=image, id="x"), 5, seed=0)
    assert p["threshold"] == pytest.approx(5.6 * 0.3 - 2.5)
    p = shiftbench.create_shift("brownish_noise").draw(shiftbench.Sample(image=image, id="x"), 2, seed=0)
    assert p["intensity"] == pytest.approx(12.8)


# -- 3. non-square images --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_non_square_shape_and_dtype(name):
    shift = shiftbench.create_shift(name)
    for shape in ((48, 80), (80, 48)):
        image = photos(shape, 1)[0]
        out = shift(image, severity=3, seed=0, sample_id="n")
        assert out.shape == image.shape and out.dtype == np.uint8
        assert not np.array_equal(out, image)


def test_perlin_non_square_rule():
    """Noise at each pixel depends only on (row, column), m and seed: an H x W image is the top-left crop of a
    larger square with the same params (m from the shorter side)."""
    shift = shiftbench.create_shift("perlin_noise")
    big = photos((80, 80), 1)[0]
    for shape in ((48, 80), (80, 48)):
        part = np.ascontiguousarray(big[: shape[0], : shape[1]])
        out, params = shift(part, severity=4, seed=0, sample_id="c", return_params=True)
        assert params["m"][0][0] == 224 / (32 * 48)
        whole = shift.replay(big, params)
        assert np.array_equal(whole[: shape[0], : shape[1]], out)
        assert max_diff(out, slow_perlin(part, params)) <= 1
