"""Failure points (issue 28): the severity where accuracy falls to a fraction of clean, on curves built
with exact means (a known answer), the interpolation rules (first crossing, from clean at severity 0,
never crossing), the paired bootstrap (against a plain loop over the same draws, seeded, independent of
chunking, narrower with more images), properties of any curve (Hypothesis) and one-line input errors."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import shiftbench.metrics.failure as failure_module
from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.failure import FailurePoint, failure_point

SEVERITIES = [1, 2, 3, 4, 5]


def exact_model(n: int, clean: float, curve: list[float], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """0/1 correctness of n images whose means are exactly ``clean`` and ``curve``: images ranked by
    robustness, the first round(acc x n) correct in each condition (nested, as real images are: one
    that fails at severity 2 mostly fails at 3), then the images shuffled (the same order everywhere)."""
    order = np.random.default_rng(seed).permutation(n)
    rows = []
    for acc in [clean, *curve]:
        m = round(acc * n)
        assert abs(m - acc * n) < 1e-9, "choose accuracies that n images can hold exactly"  # then m / n == acc
        rows.append((np.arange(n) < m).astype(np.float64)[order])
    return rows[0], np.stack(rows[1:])


def reference_point(severities, clean: float, curve, fraction: float) -> float:
    """The rule written out for one curve: math.inf when it never reaches the target."""
    target = fraction * clean
    s_prev, a_prev = 0.0, clean
    for s, a in zip(severities, curve):
        if a <= target:
            if a_prev == a:  # both ends at the target (clean accuracy 0)
                return s_prev
            return s_prev + (a_prev - target) / (a_prev - a) * (s - s_prev)
        s_prev, a_prev = s, a
    return math.inf


# --- a known answer --------------------------------------------------------------------------------------

DESIGN = (0.8, [0.7, 0.6, 0.45, 0.3, 0.2])  # target 0.4: between 3 (0.45) and 4 (0.3), at 3 + 0.05 / 0.15


def test_known_failure_point_and_its_interval():
    clean, shifted = exact_model(400, *DESIGN)
    fp = failure_point(SEVERITIES, clean, shifted)
    assert isinstance(fp, FailurePoint)
    assert fp.crossed and abs(fp.severity - 10 / 3) <= 1e-12
    assert fp.target == pytest.approx(0.4, abs=1e-15) and fp.clean == pytest.approx(0.8, abs=1e-15)
    assert fp.curve == pytest.approx(tuple(DESIGN[1]), abs=1e-15)
    assert fp.n == 400 and fp.fraction == 0.5
    assert fp.low <= fp.severity <= fp.high and math.isfinite(fp.high)
    assert 3 < fp.low and fp.high < 4 and fp.p_crossed == 1.0
    assert all(lo <= c <= hi for lo, c, hi in zip(fp.band_low, fp.curve, fp.band_high))
    assert len(fp.band_low) == len(fp.band_high) == 5


def test_interval_narrows_with_more_images():
    small = failure_point(SEVERITIES, *exact_model(400, *DESIGN, seed=1))
    large = failure_point(SEVERITIES, *exact_model(4000, *DESIGN, seed=2))
    assert abs(large.severity - 10 / 3) <= 1e-12
    assert large.low <= large.severity <= large.high
    width_small, width_large = small.high - small.low, large.high - large.low
    assert width_large < 0.5 * width_small  # about 1 / sqrt(10) in theory
    band_small = np.subtract(small.band_high, small.band_low)
    band_large = np.subtract(large.band_high, large.band_low)
    assert np.all(band_large < band_small)


def test_other_fraction_moves_the_target():
    clean, shifted = exact_model(400, *DESIGN)
    fp = failure_point(SEVERITIES, clean, shifted, fraction=0.25)  # target 0.2: reached exactly at 5
    assert fp.severity == 5.0 and fp.target == pytest.approx(0.2)


# --- the interpolation rules -------------------------------------------------------------------------------

def test_never_crosses():
    clean, shifted = exact_model(400, 0.8, [0.7, 0.65, 0.6, 0.55, 0.5])
    fp = failure_point(SEVERITIES, clean, shifted)
    assert fp.severity is None and not fp.crossed
    assert fp.high == math.inf and fp.p_crossed < 0.5


def test_partly_crossing_resamples_leave_the_upper_bound_open():
    clean, shifted = exact_model(400, 0.8, [0.7, 0.6, 0.5, 0.45, 0.41])  # ends just above the target 0.4
    fp = failure_point(SEVERITIES, clean, shifted)
    assert fp.severity is None and 0.05 < fp.p_crossed < 0.95
    assert 4 < fp.low < 5 and fp.high == math.inf


def test_crossing_at_the_first_severity_interpolates_from_clean_at_zero():
    clean, shifted = exact_model(400, 0.8, [0.3, 0.2])
    fp = failure_point([1, 2], clean, shifted)
    assert fp.severity == pytest.approx(0.4 / 0.5, abs=1e-12)  # from (0, 0.8) to (1, 0.3)
    fp = failure_point([2.0, 4.0], clean, shifted)
    assert fp.severity == pytest.approx(2.0 * 0.4 / 0.5, abs=1e-12)  # non-integer spacing, still from 0
    assert 0 <= fp.low <= fp.high <= 2.0


def test_first_crossing_counts_and_a_measured_hit_is_exact():
    clean, shifted = exact_model(400, 0.8, [0.7, 0.35, 0.6, 0.2])  # dips, recovers, falls again
    assert failure_point([1, 2, 3, 4], clean, shifted).severity == pytest.approx(1 + 0.3 / 0.35, abs=1e-12)
    clean, shifted = exact_model(400, 0.8, [0.6, 0.4, 0.3])  # exactly at the target at severity 2
    assert failure_point([1, 2, 3], clean, shifted).severity == 2.0


def test_clean_accuracy_zero_is_at_the_target_from_the_start():
    fp = failure_point([1, 2], [0, 0, 0, 0], [[0, 0, 0, 0], [0, 0, 0, 0]], n_boot=50)
    assert fp.severity == 0.0 and fp.low == fp.high == 0.0


def test_scores_between_zero_and_one():
    clean = np.full(10, 0.9)
    shifted = np.stack([np.full(10, 0.6), np.full(10, 0.3)])
    fp = failure_point([1, 2], clean, shifted, n_boot=50)
    assert fp.severity == pytest.approx(1 + (0.6 - 0.45) / 0.3, abs=1e-12)


# --- the bootstrap -----------------------------------------------------------------------------------------

def test_bootstrap_matches_a_loop_over_the_same_draws():
    rng = np.random.default_rng(5)
    n, k, n_boot, seed = 60, 4, 300, 11
    clean = (rng.random(n) < 0.8).astype(float)
    shifted = (rng.random((k, n)) < np.array([0.7, 0.55, 0.42, 0.38])[:, None]).astype(float)
    sev = [0.5, 1.0, 2.5, 3.0]
    fp = failure_point(sev, clean, shifted, n_boot=n_boot, seed=seed)
    draws = np.random.Generator(np.random.PCG64(seed)).integers(0, n, size=(n_boot, n))  # one chunk
    points = np.array([reference_point(sev, clean[i].mean(), shifted[:, i].mean(axis=1), 0.5) for i in draws])
    assert fp.p_crossed == pytest.approx(np.isfinite(points).mean())
    big = 1e300  # a never-crossing resample: interpolating towards it gives a huge value, i.e. inf
    low, high = np.quantile(np.where(np.isfinite(points), points, big), [0.025, 0.975])
    for ours, ref in ((fp.low, low), (fp.high, high)):
        assert ours == math.inf if ref > 1e299 else ours == pytest.approx(ref, abs=1e-9)
    curves = np.stack([shifted[:, i].mean(axis=1) for i in draws])
    band = np.quantile(curves, [0.025, 0.975], axis=0)
    assert fp.band_low == pytest.approx(tuple(band[0]), abs=1e-12)
    assert fp.band_high == pytest.approx(tuple(band[1]), abs=1e-12)


def test_bootstrap_is_seeded_and_chunking_does_not_change_it(monkeypatch):
    import shiftbench.metrics.uncertainty as unc

    clean, shifted = exact_model(200, 0.8, [0.7, 0.5, 0.35, 0.3], seed=3)
    first = failure_point([1, 2, 3, 4], clean, shifted, n_boot=500, seed=4)
    assert failure_point([1, 2, 3, 4], clean, shifted, n_boot=500, seed=4) == first
    assert failure_point([1, 2, 3, 4], clean, shifted, n_boot=500, seed=5) != first
    monkeypatch.setattr(unc, "_CHUNK_CELLS", 3 * 200 + 7)  # chunks of 3 resamples
    chunked = failure_point([1, 2, 3, 4], clean, shifted, n_boot=500, seed=4)
    assert chunked.low == first.low and chunked.high == first.high and chunked.p_crossed == first.p_crossed
    assert chunked.band_low == pytest.approx(first.band_low, abs=1e-15)


# --- properties of any curve -------------------------------------------------------------------------------

SCORE = st.integers(0, 64).map(lambda v: v / 64)  # dyadic: every mean of a few of them is exact


@st.composite
def curves(draw):
    k = draw(st.integers(1, 5))
    steps = draw(st.lists(st.floats(0.25, 3.0, allow_nan=False), min_size=k, max_size=k))
    severities = np.cumsum(steps).tolist()
    n = draw(st.integers(2, 12))
    clean = draw(st.lists(SCORE, min_size=n, max_size=n))
    shifted = [draw(st.lists(SCORE, min_size=n, max_size=n)) for _ in range(k)]
    return severities, np.array(clean), np.array(shifted)


FRACTIONS = st.floats(0.01, 0.99, allow_nan=False)


@given(curves(), FRACTIONS)
def test_property_point_lies_on_the_curve_at_the_target(case, fraction):
    severities, clean, shifted = case
    fp = failure_point(severities, clean, shifted, fraction=fraction, n_boot=40)
    ref = reference_point(severities, clean.mean(), shifted.mean(axis=1), fraction)
    assert fp.crossed == math.isfinite(ref)
    if fp.crossed:
        assert 0.0 <= fp.severity <= severities[-1]
        assert fp.severity == pytest.approx(ref, abs=1e-9)
        on_curve = np.interp(fp.severity, [0.0, *severities], [fp.clean, *fp.curve])
        assert abs(on_curve - fp.target) <= 1e-9
        below = [s for s, a in zip(severities, fp.curve) if a <= fp.target]
        assert fp.severity <= below[0]  # the first crossing
    else:
        assert fp.severity is None and all(a > fp.target for a in fp.curve)
    assert fp.low <= fp.high and 0.0 <= fp.p_crossed <= 1.0


@given(curves(), FRACTIONS, FRACTIONS)
def test_property_smaller_fraction_never_fails_earlier(case, f1, f2):
    severities, clean, shifted = case
    small, large = sorted((f1, f2))
    at = [failure_point(severities, clean, shifted, fraction=f, n_boot=10).severity for f in (small, large)]
    at = [math.inf if s is None else s for s in at]
    assert at[0] >= at[1]


@given(curves(), FRACTIONS, st.integers(0, 2**32))
def test_property_bootstrap_is_reproducible(case, fraction, seed):
    severities, clean, shifted = case
    one = failure_point(severities, clean, shifted, fraction=fraction, n_boot=40, seed=seed)
    assert failure_point(severities, clean, shifted, fraction=fraction, n_boot=40, seed=seed) == one


@given(curves(), FRACTIONS)
def test_property_identical_images_collapse_the_interval(case, fraction):
    severities, clean, shifted = case
    n = clean.size
    clean = np.full(n, clean[0])  # every image alike: every resample is the sample itself
    shifted = np.repeat(shifted[:, :1], n, axis=1)
    fp = failure_point(severities, clean, shifted, fraction=fraction, n_boot=40)
    expected = fp.severity if fp.crossed else math.inf
    assert fp.low == fp.high == expected
    assert fp.p_crossed == (1.0 if fp.crossed else 0.0)
    assert fp.band_low == fp.curve == fp.band_high


# --- bad inputs ----------------------------------------------------------------------------------------------

GOOD_CLEAN = [1, 1, 0, 1]
GOOD_SHIFTED = [[1, 0, 0, 1], [0, 0, 0, 1]]


@pytest.mark.parametrize("kwargs, words", [
    (dict(severities=[1, 2], clean=GOOD_CLEAN, shifted=[[1, 0, 0], [0, 0, 1]]), "shape"),
    (dict(severities=[1, 2, 3], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED), "shape"),
    (dict(severities=[1, 2], clean=[GOOD_CLEAN], shifted=GOOD_SHIFTED), "clean"),
    (dict(severities=[1, 2], clean=GOOD_CLEAN, shifted=[[1, 0, 0, 1], [0, 0]]), "shifted"),
    (dict(severities=[], clean=GOOD_CLEAN, shifted=np.zeros((0, 4))), "at least 1 severity"),
    (dict(severities=[1, 1], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED), "increasing"),
    (dict(severities=[2, 1], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED), "increasing"),
    (dict(severities=[0, 1], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED), "above 0"),
    (dict(severities=[1, float("nan")], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED), "finite"),
    (dict(severities=[1, 2], clean=[1, float("nan"), 0, 1], shifted=GOOD_SHIFTED), "finite"),
    (dict(severities=[1, 2], clean=GOOD_CLEAN, shifted=[[1, 0, 0, 1], [0, float("nan"), 0, 1]]), "finite"),
    (dict(severities=[1, 2], clean=[1, 2, 0, 1], shifted=GOOD_SHIFTED), "[0, 1]"),
    (dict(severities=[1], clean=[1], shifted=[[0]]), "at least 2 images"),
    (dict(severities=[1, 2], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED, fraction=0.0), "fraction"),
    (dict(severities=[1, 2], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED, fraction=1.0), "fraction"),
    (dict(severities=[1, 2], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED, fraction=1.5), "fraction"),
    (dict(severities=[1, 2], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED, fraction=float("nan")), "fraction"),
    (dict(severities=[1, 2], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED, level=1.0), "level"),
    (dict(severities=[1, 2], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED, n_boot=0), "n_boot"),
    (dict(severities=[1, 2], clean=GOOD_CLEAN, shifted=GOOD_SHIFTED, seed=-1), "seed"),
])
def test_bad_inputs_are_one_line_errors(kwargs, words):
    with pytest.raises(ShiftbenchError) as info:
        failure_point(**kwargs)
    message = str(info.value)
    assert "\n" not in message and words in message


def test_module_doctest():
    assert doctest.testmod(failure_module).failed == 0
