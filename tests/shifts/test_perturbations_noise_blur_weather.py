"""ImageNet-P noise, blur and weather sequences (shifts/perturbations/{noise,blur,weather}.py): the call contract
over generated sizes and seeds, the published noise levels, the tensor path, and the frames against a
transcription of the reference (tests/shifts/imagenet_p_reference_nbw.py) with the reference's draws injected.

Measured largest differences against the transcription (grey levels): p_snow 0, p_spatter 0 (bit for bit);
p_motion_blur 1 (on ~4e-6 of the values: float sums landing on a half); p_zoom_blur 1 (~1.5%: the reference's
float32 running mean truncated a hair under a whole level); p_gaussian_blur 1 (~0.4%: the reference's float
sums truncated a hair under a whole level, which ours snaps). Noise sequences: the sampled distribution equals the
formula's pmf (scipy) within 2**-23 per outcome, and per-level mean / std match the transcription's own draws.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import shiftbench as sb
from shiftbench.registry import SHIFTS
from shiftbench.sample import Sample
from shiftbench.shifts.corruptions._common import noise_rng

NOISE = ["p_gaussian_noise", "p_shot_noise", "p_speckle_noise"]
BLUR = ["p_motion_blur", "p_zoom_blur", "p_gaussian_blur"]
WEATHER = ["p_snow", "p_spatter"]
ALL = NOISE + BLUR + WEATHER
LEVELS = {"p_gaussian_noise": (0.03, 0.05, 0.08), "p_shot_noise": (300, 120, 60), "p_speckle_noise": (0.05, 0.10, 0.15)}

sizes = st.tuples(st.integers(1, 40), st.integers(1, 40))


def photo(shape: tuple[int, int], index: int = 0) -> np.ndarray:
    import cv2
    from skimage import data

    loads = (data.astronaut, data.chelsea, data.coffee)
    return np.ascontiguousarray(cv2.resize(loads[index % 3]()[..., :3], shape[::-1], interpolation=cv2.INTER_AREA))


def random_image(shape: tuple[int, int], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*shape, 3), dtype=np.uint8)


def diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int16) - b.astype(np.int16))


def test_registered_with_groups():
    assert set(ALL) <= set(sb.list_shifts("p_*"))
    for name in ALL:
        group = SHIFTS.entry(name).meta["group"]
        assert group == ("imagenet_p_extra" if name in ("p_speckle_noise", "p_gaussian_blur", "p_spatter") else "imagenet_p")
    image = photo((30, 44))
    assert sb.create_shift("p_snow")(image, seed=0).shape == (31, 30, 44, 3)


@pytest.mark.parametrize("name", ALL)
@given(shape=sizes, seed=st.integers(0, 2**31), difficulty=st.integers(1, 3))
def test_contract_over_sizes_and_seeds(name, shape, seed, difficulty):
    """31 uint8 frames of the input's size; the same seed the same bytes; replay from params the call; noise
    sequences start from the input itself."""
    shift = SHIFTS.create(name)
    image = random_image(shape, seed % 1000)
    frames, params = shift(image, severity=difficulty, seed=seed, return_params=True)
    assert frames.dtype == np.uint8 and frames.shape == (31, *shape, 3)
    assert np.array_equal(shift(image, severity=difficulty, seed=seed), frames)
    assert np.array_equal(shift.replay(image, params), frames)
    assert params["difficulty"] == difficulty
    if name in NOISE:
        assert np.array_equal(frames[0], image)
    out = shift(Sample(image=image, id="a"), severity=difficulty, seed=seed)
    assert out.frames.shape == frames.shape and np.array_equal(out.image, out.frames[-1])
    comparison = out.meta["sequence"]
    assert (comparison["reference"], comparison["step"]) == (("first", 1) if name in NOISE else ("previous", difficulty))


@pytest.mark.parametrize("name", NOISE + WEATHER)
def test_sample_ids_and_seeds_change_the_draws(name):
    shift = SHIFTS.create(name)
    image = photo((48, 40))
    a = shift(image, seed=0, sample_id="a")
    assert not np.array_equal(a, shift(image, seed=0, sample_id="b"))
    assert not np.array_equal(a, shift(image, seed=1, sample_id="a"))
    if name in NOISE:  # 30 independent draws: no two frames alike
        assert len({f.tobytes() for f in a[1:]}) == 30


@pytest.mark.parametrize("name", NOISE)
def test_difficulty_sets_the_published_noise_level(name):
    """On mid-grey (128): std of frame - clean = 255 sigma (gaussian), sqrt(128 * 255 / c) (shot), 128 s (speckle)."""
    shift = SHIFTS.create(name)
    image = np.full((64, 64, 3), 128, dtype=np.uint8)
    for difficulty, c in zip((1, 2, 3), LEVELS[name]):
        frames = shift(image, severity=difficulty, seed=difficulty)
        std = float((frames[1:].astype(np.float64) - 128).std())
        want = {"p_gaussian_noise": 255 * c, "p_shot_noise": np.sqrt(128 * 255 / c), "p_speckle_noise": 128 * c}[name]
        want = np.sqrt(want**2 + 1 / 12)  # the truncation to a level adds a uniform error
        assert abs(std - want) < 0.02 * want, (name, difficulty, std, want)


@pytest.mark.parametrize("name", NOISE)
def test_noise_tables_are_the_formula_pmf(name):
    """The tabulated distribution (after alias packing) equals the reference formula's, computed here with scipy."""
    from scipy import stats

    from shiftbench.shifts.perturbations import noise

    v = np.arange(256.0)[:, None]
    k = np.arange(256.0)[None, :]
    for c in LEVELS[name]:
        if name == "p_gaussian_noise":  # output <= k  iff  v + 255 c n < k + 1
            cdf = stats.norm.cdf((k + 1 - v) / (255 * c))
        elif name == "p_speckle_noise":  # v (1 + c n) < k + 1
            cdf = np.where(v > 0, stats.norm.cdf(((k + 1) / np.maximum(v, 1) - 1) / c), 1.0)
        else:  # floor(255 N / c) <= k  iff  N <= floor((k + 1) c / 255 - eps)
            counts = np.arange(c + 1)
            levels = (np.clip(counts / c, 0, 1) * 255).astype(np.uint8)
            cdf = np.stack([stats.poisson.cdf(counts[levels <= kk].max(), v[:, 0] / 255 * c) for kk in range(256)], axis=1)
        cdf[:, 255] = 1.0
        pmf = np.diff(cdf, axis=1, prepend=0.0)
        table = noise._table(shift_kind(name), c)
        assert np.abs(unpack_pmf(table) - pmf).max() < 2**-23, (name, c)


def shift_kind(name: str) -> str:
    return name[2:].split("_")[0]


def unpack_pmf(table: np.ndarray) -> np.ndarray:
    """The distribution an alias table samples: column j kept with threshold / 2**24, else its alias."""
    entries = table.reshape(256, 256).astype(np.int64)
    keep = (entries >> 8) / float(1 << 24)
    alias = entries & 0xFF
    pmf = np.zeros((256, 256))
    rows = np.repeat(np.arange(256), 256)
    np.add.at(pmf, (rows, np.tile(np.arange(256), 256)), keep.reshape(-1) / 256)
    np.add.at(pmf, (rows, alias.reshape(-1)), (1 - keep.reshape(-1)) / 256)
    return pmf


@pytest.mark.parametrize("name", NOISE)
def test_noise_statistics_match_the_transcription(name):
    """Per input level, the mean and std of the frames against the transcription's frames (the reference formula
    with numpy's normals / Poisson draws), 1,080 draws per level: within 4.5 standard errors (sampling noise only:
    the largest per-level mean difference measured 0.9 to 3.4 levels, growing with the noise level)."""
    import imagenet_p_reference_nbw as ref

    image = np.repeat(np.arange(256, dtype=np.uint8), 12 * 3).reshape(256, 12, 3)
    shift = SHIFTS.create(name)
    rng = np.random.default_rng(7)
    for difficulty, c in zip((1, 2, 3), LEVELS[name]):
        ours = shift(image, severity=difficulty, seed=difficulty)[1:].astype(np.float64)
        if name == "p_gaussian_noise":
            theirs = ref.gaussian_noise(image, c, rng.standard_normal((30, *image.shape)))
        elif name == "p_shot_noise":
            theirs = ref.shot_noise(image, c, rng)
        else:
            theirs = ref.speckle_noise(image, c, rng.standard_normal((30, *image.shape)))
        theirs = theirs.astype(np.float64)
        per_level = lambda a: a.transpose(1, 0, 2, 3).reshape(256, -1)  # noqa: E731
        o, t = per_level(ours), per_level(theirs)
        n = o.shape[1]
        se = np.sqrt((o.var(axis=1) + t.var(axis=1)) / n)
        assert (np.abs(o.mean(axis=1) - t.mean(axis=1)) <= 4.5 * se + 1e-9).all(), (name, difficulty)
        # the standard error of a std: sqrt((m4 - var**2) / n) / (2 std), from each sample's own moments
        se_std = np.hypot(*(np.sqrt(np.maximum(((a - a.mean(axis=1, keepdims=True)) ** 4).mean(axis=1) - a.var(axis=1) ** 2, 0)
                                    / n) / (2 * a.std(axis=1) + 1e-9) for a in (o, t)))
        assert (np.abs(o.std(axis=1) - t.std(axis=1)) <= 4.5 * se_std + 1e-9).all(), (name, difficulty)


@pytest.mark.parametrize("shape", [(96, 96), (60, 84)])
def test_blurs_match_the_transcription(shape):
    """Largest difference 1 level, on under 2% of the values (zoom), 1% (gaussian), 1e-4 (motion)."""
    import imagenet_p_reference_nbw as ref

    pytest.importorskip("torchvision")
    from _reference import reference_available

    image = photo(shape, 1)
    checks = [("p_zoom_blur", ref.zoom_blur, 0.02), ("p_gaussian_blur", ref.gaussian_blur, 0.01)]
    if reference_available():
        checks.append(("p_motion_blur", ref.motion_blur, 1e-4))
    for name, transcribe, fraction in checks:
        d = diff(SHIFTS.create(name)(image), transcribe(image))
        assert d.max() <= 1 and (d > 0).mean() < fraction, (name, d.max(), (d > 0).mean())


def test_motion_blur_is_the_imagenet_c_streak():
    """Frame i is ImageNet-C's motion blur at severity 1 (radius 10, sigma 3) at angle (i - 30) * 4, which
    truncates where ours rounds: within one level, ours never below."""
    image = photo((50, 70), 2)
    frames = SHIFTS.create("p_motion_blur")(image)
    c = SHIFTS.create("motion_blur")
    for i in (0, 7, 30):
        want = c.replay(image, {"severity": 1, "angle": float((i - 30) * 4)})
        d = frames[i].astype(np.int16) - want
        assert d.min() >= 0 and d.max() <= 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_weather_matches_the_transcription(seed):
    """The reference's snow and spatter with our normals injected: the same bytes (largest difference 0)."""
    import imagenet_p_reference_nbw as ref
    from _reference import reference_available

    image = photo((72, 72), seed)
    spatter = SHIFTS.create("p_spatter")
    frames, params = spatter(image, seed=seed, return_params=True)
    assert diff(frames, ref.spatter(image, noise_rng(params).standard_normal((72, 72)))).max() == 0
    if reference_available():
        snow = SHIFTS.create("p_snow")
        frames, params = snow(image, seed=seed, return_params=True)
        crop = 24  # ceil(72 / 3): only the central crop of the reference's draw is read
        normals = np.random.default_rng(seed + 100).standard_normal((72, 72))
        normals[24:48, 24:48] = noise_rng(params).standard_normal((crop, crop))
        assert diff(frames, ref.snow(image, normals)).max() == 0


def test_spatter_runs_down_and_snow_turns():
    """The spatter layer moves down by about 2 rows per frame; snow's streak direction changes, its layer does not."""
    from shiftbench.shifts.perturbations.weather import advect

    liquid = np.zeros((40, 5))
    liquid[10] = 1.0
    moved = advect(liquid)
    assert np.allclose(moved[[9, 10, 11, 12], 0], [0.05, 0.1, 0.15, 0.7])
    frames = SHIFTS.create("p_snow")(photo((64, 64)), seed=3)
    assert not np.array_equal(frames[0], frames[30])


@pytest.mark.parametrize("name", ALL)
def test_crop(name):
    """``crop=``: pixel-wise sequences crop then perturb; zoom blur (geometric) zooms the whole image then crops."""
    from shiftbench.shifts.perturbations import center_crop

    image = photo((40, 52))
    frames = SHIFTS.create(name, crop=24)(image, seed=5, sample_id="x")
    assert frames.shape == (31, 24, 24, 3)
    whole = SHIFTS.create(name)
    if name == "p_zoom_blur":
        assert np.array_equal(frames, np.stack([center_crop(f, 24) for f in whole(image)]))
    elif name not in NOISE + WEATHER:
        assert np.array_equal(frames, whole(np.ascontiguousarray(center_crop(image, 24))))


@pytest.mark.parametrize("name", ALL)
def test_tensor_path_equals_numpy_path(name):
    """uint8 (N, 3, H, W) -> (N, T, 3, H, W): the same bytes for the noise, zoom blur, snow and spatter; motion and
    gaussian blur (float32 sums in another order) within 1 level on under 1e-3 of the values."""
    torch = pytest.importorskip("torch")
    shift = SHIFTS.create(name)
    images = [photo((40, 52), i) for i in range(2)]
    params = [shift.draw(Sample(image=im, id=f"t{i}"), severity=1 + 2 * i, seed=4) for i, im in enumerate(images)]
    want = np.stack([shift.frames_of(im, p) for im, p in zip(images, params)])
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()
    got = shift.sequence_tensor(x, params)
    assert got.dtype == torch.uint8 and tuple(got.shape) == (2, 31, 3, 40, 52)
    d = diff(got.permute(0, 1, 3, 4, 2).numpy(), want)
    if name in ("p_motion_blur", "p_gaussian_blur"):
        assert d.max() <= 1 and (d > 0).mean() < 1e-3, (name, d.max(), (d > 0).mean())
    else:
        assert d.max() == 0, name
