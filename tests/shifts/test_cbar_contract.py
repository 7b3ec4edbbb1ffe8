"""The contract every ImageNet-C-bar corruption passes, parametrised over ``CBAR_CORRUPTIONS``.

The torch path agrees with the numpy path (every severity, square and non-square batches, a batch mixing
severities); params are the reference's record (its exact key set, plus ``severity`` and ``level``), JSON
typed, and replay to the same bytes; the same draw at a higher severity changes the clean photo no less.
Each corruption's own definition (per-pixel transcriptions, draw order, non-square rules) is tested in its
family's file (test_cbar_caustic.py, test_cbar_noise.py, test_cbar_sparkles.py, test_cbar_waves.py).
"""

from __future__ import annotations

import json
from functools import lru_cache

import cv2
import numpy as np
import pytest

import shiftbench
from shiftbench.shifts.cbar import CBAR_CORRUPTIONS

SEVERITIES = range(1, 6)

# the reference's sample_parameters record per corruption (params hold these plus "severity" and "level")
REFERENCE_KEYS = {
    "caustic_refraction": {"time", "size", "eta", "lens_scale", "lighting_amount", "softening"},
    "checkerboard_cutout": {"angle", "scales", "fraction", "seed"},
    "perlin_noise": {"m", "turbulence", "seed", "gain", "bias", "alpha"},
    "blue_noise_sample": {"seed", "threshold"},
    "brownish_noise": {"seed", "intensity"},
    "sparkles": {"centers", "radii", "color", "randomness", "seed", "nrays", "amounts"},
    "inverse_sparkles": {"center", "radius", "color", "randomness", "seed", "rays", "amount"},
    "single_frequency_greyscale": {"freq", "phase", "intensity"},
    "cocentric_sine_waves": {"offset", "freq", "amplitude", "ring_width", "intensity"},
    "plasma_noise": {"time", "iterations", "sharpness", "scale", "intensity"},
}

# the entries that depend on the level; with the same seed and sample id every other entry is the same draw
LEVEL_KEYS = {
    "caustic_refraction": {"lens_scale", "lighting_amount"},
    "checkerboard_cutout": {"fraction"},
    "perlin_noise": {"alpha"},
    "blue_noise_sample": {"threshold"},
    "brownish_noise": {"intensity"},
    "sparkles": {"radii"},
    "inverse_sparkles": {"amount"},
    "single_frequency_greyscale": {"intensity"},
    "cocentric_sine_waves": {"intensity"},
    "plasma_noise": {"intensity"},
}

# square; wide; tall with an odd width (the Fourier noises' odd branch)
SHAPES = [(40, 40), (48, 72), (48, 35)]


@lru_cache(maxsize=None)
def _full(i: int) -> np.ndarray:
    return shiftbench.load_dataset("objects").load(i).image


def photo(i: int, h: int, w: int) -> np.ndarray:
    """Photo ``i`` of the objects dataset resized (INTER_AREA) to H x W."""
    return np.ascontiguousarray(cv2.resize(_full(i), (w, h), interpolation=cv2.INTER_AREA))


def max_diff(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(np.int16) - b.astype(np.int16)).max())


def json_typed(value) -> bool:
    """Only JSON's own types (no numpy scalars, tuples or arrays), all the way down."""
    if value is None or type(value) in (str, int, float, bool):
        return True
    if type(value) is list:
        return all(json_typed(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and json_typed(v) for k, v in value.items())
    return False


def test_tables_cover_every_corruption():
    assert set(REFERENCE_KEYS) == set(LEVEL_KEYS) == set(CBAR_CORRUPTIONS)
    assert all(LEVEL_KEYS[name] <= REFERENCE_KEYS[name] for name in CBAR_CORRUPTIONS)


# -- 1. torch ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch_one_thread():
    """torch on one CPU thread while these tests run (restored after): the batches are tiny, and with the
    CPU busy elsewhere torch's worker threads spin-wait a second or more per call."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(threads)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", CBAR_CORRUPTIONS)
def test_torch_matches_numpy(name, shape, torch_one_thread):
    """``apply_tensor`` on a uint8 (N, 3, H, W) batch equals ``replay`` per image within 1 grey level, at
    every severity and in one batch mixing the five severities."""
    torch = torch_one_thread
    shift = shiftbench.create_shift(name)
    images = [photo(i, *shape) for i in (0, 4, 7)]
    mixed_images, mixed_params = [], []
    for severity in SEVERITIES:
        params = [shift(im, severity=severity, seed=severity, sample_id=f"t{i}", return_params=True)[1]
                  for i, im in enumerate(images)]
        batches = [(images, params)]
        mixed_images.append(images[severity % 3])
        mixed_params.append(params[severity % 3])
        if severity == 5:
            batches.append((mixed_images, mixed_params))
        for imgs, ps in batches:
            x = torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).contiguous()
            got = shift.apply_tensor(x, ps)
            assert got.dtype == torch.uint8 and tuple(got.shape) == tuple(x.shape)
            want = np.stack([shift.replay(im, p) for im, p in zip(imgs, ps)])
            assert max_diff(got.permute(0, 2, 3, 1).numpy(), want) <= 1, (name, shape, [p["severity"] for p in ps])


# -- 2. params ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CBAR_CORRUPTIONS)
def test_params_json_replay_and_seeds(name):
    shift = shiftbench.create_shift(name)
    assert shiftbench.registry.shift_info(shift.name).family == "cbar"
    for image in (photo(1, 40, 40), photo(2, 48, 72)):
        for severity in SEVERITIES:
            out, params = shift(image, severity=severity, seed=0, sample_id="a", return_params=True)
            assert set(params) == REFERENCE_KEYS[name] | {"severity", "level"}
            assert params["severity"] == severity and params["level"] == shift.level(severity)
            assert json_typed(params), params
            restored = json.loads(json.dumps(params))
            assert restored == params
            replayed = shift.replay(image, restored)
            assert replayed.dtype == np.uint8 and np.array_equal(replayed, out)
            assert np.array_equal(shift(image, severity=severity, seed=0, sample_id="a"), out)
            other, other_params = shift(image, severity=severity, seed=0, sample_id="b", return_params=True)
            assert other_params != params and not np.array_equal(other, out)


# -- 3. monotone in severity -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CBAR_CORRUPTIONS)
def test_monotone_in_severity(name):
    """The same draw (seed, sample id) at severities 1..5: only the level's entries change, and the mean
    absolute change from the clean photo never decreases (it may stay flat, e.g. a checkerboard whose
    cut cells do not change between two fractions)."""
    shift = shiftbench.create_shift(name)
    fixed_keys = REFERENCE_KEYS[name] - LEVEL_KEYS[name]
    for i in (0, 6, 9):
        image = photo(i, 96, 96)
        for seed in (0, 1):
            draws, change = [], []
            for severity in SEVERITIES:
                out, params = shift(image, severity=severity, seed=seed, sample_id="m", return_params=True)
                draws.append({k: params[k] for k in fixed_keys})
                change.append(float(np.abs(out.astype(np.float64) - image).mean()))
            assert all(d == draws[0] for d in draws), (name, i, seed)
            assert all(a <= b for a, b in zip(change, change[1:])), (name, i, seed, change)
