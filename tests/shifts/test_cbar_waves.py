"""ImageNet-C-bar's wave corruptions: single_frequency_greyscale, cocentric_sine_waves, plasma_noise.

The vectorised transforms are held to a slow per-pixel transcription of the published formulas (written
here, pixel by pixel, in the reference's float64 scalar arithmetic) on small square photos at every
severity; then the params' values, the non-square rules and the torch path on a batch mixing plasma warps of
4, 5 and 6 steps. The torch path in general, params replay and monotonicity in severity are in
test_cbar_contract.py.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

import shiftbench
import shiftbench.shifts.cbar.waves  # noqa: F401 - registers the three corruptions

NAMES = ["single_frequency_greyscale", "cocentric_sine_waves", "plasma_noise"]


@pytest.fixture(scope="module")
def photos() -> dict[int, list[np.ndarray]]:
    """Real photos (the objects dataset), resized with INTER_AREA, by side."""
    ds = shiftbench.load_dataset("objects")
    full = [ds.load(i).image for i in (0, 7, 19)]
    return {n: [cv2.resize(im, (n, n), interpolation=cv2.INTER_AREA) for im in full] for n in (32, 40, 64)}


# -- per-pixel transcriptions of the formulas ------------------------------------------------------


def pixel_single_frequency(image, p):
    n = image.shape[0]
    out = np.zeros(image.shape, dtype=np.float64)
    for y in range(n):
        for x in range(n):
            v = np.sin(x * p["freq"][0] + y * p["freq"][1] + p["phase"])
            for c in range(3):
                out[y, x, c] = float(image[y, x, c]) + p["intensity"] * v
    return np.clip(out, 0, 255).astype(np.uint8)


def pixel_cocentric(image, p):
    n = image.shape[0]
    x0, y0 = p["offset"]
    out = np.zeros(image.shape, dtype=np.float64)
    for y in range(n):
        for x in range(n):
            angle = np.arctan2(x - x0, y - y0) * p["freq"]
            radius = np.sqrt((x - x0) ** 2 + (y - y0) ** 2)
            d = ((radius + np.sin(angle) * p["amplitude"]) % p["ring_width"]) / p["ring_width"] - 0.5
            for c in range(3):
                out[y, x, c] = float(image[y, x, c]) + p["intensity"][c] * d
    return np.clip(out, 0, 255).astype(np.uint8)


def pixel_plasma(image, p):
    n = image.shape[0]
    t, a = p["time"], p["intensity"]
    out = np.zeros(image.shape, dtype=np.float64)
    for y in range(n):
        for x in range(n):
            px, py = x / p["scale"], y / p["scale"]
            i0, i1, i2, i3 = 1.0, 1.0, 1.0, 0.0
            for _ in range(p["iterations"]):
                r0 = np.cos(py * i0 - i3 + t / i1) / i2
                r1 = np.sin(px * i0 - i3 + t / i1) / i2
                r0, r1 = r0 - r1 * 0.3, r1 + r0 * 0.3
                px += r0
                py += r1
                i0, i1, i2, i3 = i0 * 1.93, i1 * 1.15, i2 * (2.25 - p["sharpness"]), i3 * (t * i1)
            colour = (np.sin(px - t), np.sin((px + py + np.sin(t)) * 0.5), np.sin(py + t))
            for c in range(3):
                out[y, x, c] = (1 - a / 255) * float(image[y, x, c]) + a * colour[c]
    return np.clip(out, 0, 255).astype(np.uint8)


PER_PIXEL = {
    "single_frequency_greyscale": pixel_single_frequency,
    "cocentric_sine_waves": pixel_cocentric,
    "plasma_noise": pixel_plasma,
}


def maxdiff(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())


# -- 1. the per-pixel formulas ----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_matches_per_pixel_formula(name, photos):
    shift = shiftbench.create_shift(name)
    worst = 0
    for side in (32, 40):
        for k, image in enumerate(photos[side][:2]):
            for severity in range(1, 6):
                for seed in range(3):
                    out, params = shift(image, severity=severity, seed=seed, sample_id=f"{side}-{k}", return_params=True)
                    worst = max(worst, maxdiff(out, PER_PIXEL[name](image, params)))
    assert worst <= 1, f"{name}: max abs difference {worst} to the per-pixel formula"


# -- 2. params (key sets, JSON, replay and seeds: test_cbar_contract.py) ----------------------------


def test_params_values(photos):
    image = photos[64][0]
    plasma, rings = shiftbench.create_shift("plasma_noise"), shiftbench.create_shift("cocentric_sine_waves")
    for severity in range(1, 6):
        iterations = plasma(image, severity=severity, seed=0, sample_id="a", return_params=True)[1]["iterations"]
        assert isinstance(iterations, int) and 4 <= iterations < 7
        intensity = rings(image, severity=severity, seed=0, sample_id="a", return_params=True)[1]["intensity"]
        assert len(intensity) == 3 and len(set(intensity)) == 1
        assert intensity[0] == pytest.approx(rings.level(severity) * 12.8)  # 128.0 at severity 5 (level 10)


# -- 3. non-square images ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_non_square(name, photos):
    shift = shiftbench.create_shift(name)
    big = cv2.resize(photos[64][1], (80, 80), interpolation=cv2.INTER_AREA)
    for h, w in ((48, 80), (80, 48)):
        image = np.ascontiguousarray(big[:h, :w])
        for severity in (1, 5):
            out, params = shift(image, severity=severity, seed=3, sample_id="ns", return_params=True)
            assert out.shape == (h, w, 3) and out.dtype == np.uint8
            # the pattern depends on the pixel position only: the crop of the output is the output of the crop
            assert np.array_equal(shift.replay(big, params)[:h, :w], out)
    # the draws: per-axis centre, lengths against the shorter side
    xs, ys = [], []
    for k in range(200):
        p = shift.sample_parameters((48, 80, 3), 5.0, np.random.default_rng(k))
        if name == "cocentric_sine_waves":
            xs.append(p["offset"][0])
            ys.append(p["offset"][1])
            assert 0 <= p["amplitude"] < 4.8 and 0 <= p["ring_width"] < 4.8
        if name == "plasma_noise":
            assert 0.075 * 48 <= p["scale"] < 0.2 * 48
    if name == "cocentric_sine_waves":
        assert 0 <= min(xs) and max(xs) < 80 and max(xs) > 60  # x0 over the width (80)
        assert 0 <= min(ys) and max(ys) < 48  # y0 over the height (48)


def test_square_draws_are_the_references():
    """On an n x n image the draws are the reference's, im_size = n, from the same stream."""
    n = 40
    cbar = shiftbench.create_shift("cocentric_sine_waves")
    p = cbar.sample_parameters((n, n, 3), 8.0, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    offset = rng.uniform(0, n, size=2)
    assert p["offset"] == offset.tolist()
    assert [p["freq"], p["amplitude"], p["ring_width"]] == [rng.uniform(0, 10), rng.uniform(0, n / 10), rng.uniform(0, n / 10)]
    assert p["intensity"] == [8.0 * 128 / 10] * 3
    plasma = shiftbench.create_shift("plasma_noise")
    p = plasma.sample_parameters((n, n, 3), 10.0, np.random.default_rng(6))
    rng = np.random.default_rng(6)
    expected = [rng.uniform(0, 6 * np.pi), int(rng.integers(4, 7)), rng.uniform(0.5, 1.0), rng.uniform(0.075, 0.2) * n]
    assert [p["time"], p["iterations"], p["sharpness"], p["scale"]] == expected
    single = shiftbench.create_shift("single_frequency_greyscale")
    p = single.sample_parameters((n, n, 3), 2.0, np.random.default_rng(7))
    rng = np.random.default_rng(7)
    mag = rng.uniform(-np.pi, np.pi)
    other = rng.uniform(-abs(mag), abs(mag))
    assert p["freq"] == np.array([mag, other])[rng.permutation(2)].tolist()
    assert p["phase"] == rng.uniform(0, 2 * np.pi) and p["intensity"] == pytest.approx(39.2)


# -- 4. torch path (agreement at every severity: test_cbar_contract.py) ------------------------------


def test_torch_batch_mixing_plasma_iterations(photos):
    """One batch whose warps take 4, 5 and 6 steps (one loop over the longest, the others masked)."""
    torch = pytest.importorskip("torch")
    shift = shiftbench.create_shift("plasma_noise")
    imgs = photos[40]
    params = [{**shift(im, severity=2 * k + 1, seed=1, sample_id=f"t{k}", return_params=True)[1], "iterations": 4 + k}
              for k, im in enumerate(imgs)]
    got = shift.apply_tensor(torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).contiguous(), params)
    expected = np.stack([shift.replay(im, p) for im, p in zip(imgs, params)])
    assert maxdiff(got.permute(0, 2, 3, 1).numpy(), expected) <= 1
