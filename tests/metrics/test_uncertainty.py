"""Bootstrap intervals against the exact bootstrap distribution (enumerated), their coverage, the paired
difference's sign and p-value, McNemar's exact test against scipy's binomial test, and one test per change:
its p-value, its noise mark and its interval agree for any input (Hypothesis)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from shiftbench.errors import ShiftbenchError
from hypothesis import given, settings
from hypothesis import strategies as st

from shiftbench.metrics.uncertainty import (bootstrap_ci, bootstrap_test, mcnemar, mcnemar_test, paired_bootstrap,
                                            within_noise)


def exact_bootstrap_quantiles(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """The percentile interval of the ideal bootstrap: every one of the n^n resamples, equally likely."""
    n = len(values)
    means = np.array([np.mean([values[i] for i in idx]) for idx in itertools.product(range(n), repeat=n)])
    alpha = (1 - level) / 2
    return tuple(float(q) for q in np.quantile(means, [alpha, 1 - alpha]))


@pytest.mark.parametrize("values", [[0, 1, 1, 0, 1, 1], [0.2, 0.9, 0.4, 0.75, 0.1, 0.6]])
def test_bootstrap_interval_converges_to_the_exact_bootstrap(values):
    low, high = bootstrap_ci(values, n_boot=40_000, seed=1)
    ex_low, ex_high = exact_bootstrap_quantiles(values)
    spread = max(values) - min(values)
    assert abs(low - ex_low) <= 0.03 * spread and abs(high - ex_high) <= 0.03 * spread
    assert low <= np.mean(values) <= high


def test_bootstrap_is_seeded_and_chunking_does_not_change_it(monkeypatch):
    import shiftbench.metrics.uncertainty as unc

    x = np.random.default_rng(0).random(500)
    a = bootstrap_ci(x, seed=7)
    assert bootstrap_ci(x, seed=7) == a and bootstrap_ci(x, seed=8) != a
    monkeypatch.setattr(unc, "_CHUNK_CELLS", 1_000)  # two resamples per chunk instead of all at once
    assert bootstrap_ci(x, seed=7) == a


def test_bootstrap_interval_covers_the_true_accuracy_about_95_percent_of_the_time():
    rng = np.random.default_rng(3)
    p, n, trials = 0.7, 120, 300
    hits = 0
    for t in range(trials):
        low, high = bootstrap_ci(rng.random(n) < p, n_boot=1000, seed=t)
        hits += low <= p <= high
    assert 0.90 <= hits / trials <= 0.99


def test_paired_difference_is_shifted_minus_clean_and_tells_noise_from_a_drop():
    rng = np.random.default_rng(5)
    clean = rng.random(400) < 0.8
    dropped = clean & (rng.random(400) < 0.7)  # loses about a quarter of the right answers
    r = paired_bootstrap(clean, dropped, seed=0)
    assert r.diff == pytest.approx(dropped.mean() - clean.mean()) and r.diff < 0
    assert r.high < 0 and not r.within_noise and r.p_value < 0.001 and r.n == 400
    # pairing: the same as bootstrapping the per-sample differences with the same seed (the interval that of
    # the test: its resamples at ranks, not interpolated)
    from shiftbench.metrics.uncertainty import _boot_means

    test = bootstrap_test(_boot_means(dropped.astype(float) - clean, 2000, 0))
    assert (r.low, r.high, r.p_value) == (test.low, test.high, test.p_value)
    assert abs(r.low - bootstrap_ci(dropped.astype(float) - clean, seed=0)[0]) < 0.005
    # two conditions that differ on 3 of 400 images in both directions: within noise
    noisy = clean.copy()
    noisy[:3] = ~noisy[:3]
    r = paired_bootstrap(clean, noisy, seed=0)
    assert r.within_noise and r.p_value > 0.2
    same = paired_bootstrap(clean, clean)
    assert (same.diff, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize("a_only, b_only", [(0, 0), (3, 3), (1, 9), (12, 30), (40, 7), (900, 1000), (5000, 5300)])
def test_mcnemar_equals_scipys_exact_binomial_test(a_only, b_only):
    from scipy.stats import binomtest

    both, neither = 50, 20
    a = np.array([True] * a_only + [False] * b_only + [True] * both + [False] * neither)
    b = np.array([False] * a_only + [True] * b_only + [True] * both + [False] * neither)
    r = mcnemar(a, b)
    assert (r.a_only, r.b_only, r.n) == (a_only, b_only, a.size)
    expected = 1.0 if a_only + b_only == 0 else binomtest(min(a_only, b_only), a_only + b_only, 0.5).pvalue
    assert r.p_value == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_bad_input_is_one_clear_error():
    with pytest.raises(ShiftbenchError, match="no samples"):
        bootstrap_ci([])
    with pytest.raises(ShiftbenchError, match="finite"):
        bootstrap_ci([0.5, float("nan")])
    with pytest.raises(ShiftbenchError, match="level must be in"):
        bootstrap_ci([1, 0], level=95)
    with pytest.raises(ShiftbenchError, match="same samples"):
        paired_bootstrap([1, 0, 1], [1, 0])
    with pytest.raises(ShiftbenchError, match="right/wrong"):
        mcnemar([0.5, 1], [1, 0])
    assert within_noise(-0.01, 0.02) and not within_noise(0.001, 0.02)


# ---- one test per change (issue 27): p, the noise mark and the interval never disagree ----

@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([0.0, -0.01, 0.01, -1.0, 1.0]),
                          st.floats(-1, 1, allow_nan=False), st.just(float("nan"))), min_size=1, max_size=80),
       st.sampled_from([0.9, 0.95, 0.99]))
def test_bootstrap_test_interval_holds_zero_exactly_when_p_reaches_alpha(boots, level):
    t = bootstrap_test(np.asarray(boots), level)
    finite = np.asarray([b for b in boots if b == b])
    if finite.size == 0:
        assert t is None
        return
    alpha = round(1 - level, 12)
    assert t.test == "paired bootstrap" and 0.0 <= t.p_value <= 1.0
    assert t.noise == (t.p_value >= alpha) == (t.low <= 0.0 <= t.high)
    assert t.low <= t.high and t.low in finite and t.high in finite
    # p is twice the smaller share of resamples on either side of 0, at most 1
    assert t.p_value == min(1.0, 2.0 * min(float(np.mean(finite <= 0)), float(np.mean(finite >= 0))))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 60), st.integers(0, 60), st.integers(0, 40), st.integers(0, 40), st.sampled_from([0.9, 0.95]))
def test_mcnemar_test_is_the_exact_test_with_its_own_interval(a_only, b_only, both, neither, level):
    from scipy.stats import binomtest

    n = a_only + b_only + both + neither
    if n == 0:
        return
    a = np.array([1] * a_only + [0] * b_only + [1] * both + [0] * neither)
    b = np.array([0] * a_only + [1] * b_only + [1] * both + [0] * neither)
    t = mcnemar_test(a, b, level)
    assert t.test == "exact McNemar" and t.p_value == mcnemar(a, b).p_value
    assert t.noise == (t.p_value >= round(1 - level, 12)) == (t.low <= 0.0 <= t.high)
    diff = (b_only - a_only) / n
    assert t.low - 1e-12 <= diff <= t.high + 1e-12
    m = a_only + b_only
    if m:  # the interval is Clopper-Pearson's on the discordant pairs, scaled by their share
        ci = binomtest(b_only, m, 0.5).proportion_ci(confidence_level=level, method="exact")
        lo, hi = m / n * (2 * ci.low - 1), m / n * (2 * ci.high - 1)
        assert t.low == pytest.approx(min(lo, 0.0) if t.noise else lo, abs=1e-9)
        assert t.high == pytest.approx(max(hi, 0.0) if t.noise else hi, abs=1e-9)
    else:
        assert (t.low, t.high, t.p_value, t.noise) == (0.0, 0.0, 1.0, True)


def test_the_case_of_issue_27_one_answer():
    """8 pairs, 4 lost, none gained: the paired bootstrap's interval excludes 0 while the exact test says
    p = 0.125. The exact test answers for right/wrong pairs, and its own interval holds 0."""
    a = [1, 1, 1, 1, 0, 0, 1, 1]
    b = [0, 0, 0, 0, 0, 0, 1, 1]
    boot = paired_bootstrap(a, b)
    assert boot.high < 0 and boot.p_value < 0.05  # the bootstrap alone: "not noise"
    exact = mcnemar_test(a, b)
    assert exact.p_value == 0.125 and exact.noise and exact.low <= 0 <= exact.high
