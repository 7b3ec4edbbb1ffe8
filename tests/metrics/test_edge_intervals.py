"""Intervals of a proportion that hold at 0% and 100% (issue 39): Wilson and Clopper-Pearson against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.uncertainty import clopper_pearson_interval, proportion_interval, wilson_interval

EDGE_N = (1, 2, 3, 10, 48, 1000, 50_000)


def _scipy(k: int, n: int, method: str, level: float = 0.95) -> tuple[float, float]:
    ci = binomtest(k, n).proportion_ci(confidence_level=level, method=method)
    return float(ci.low), float(ci.high)


@pytest.mark.parametrize("n", EDGE_N)
@pytest.mark.parametrize("where", ["0", "1", "n-1", "n"])
def test_both_intervals_equal_scipys_at_the_edges(n, where):
    k = {"0": 0, "1": min(1, n), "n-1": max(n - 1, 0), "n": n}[where]
    for ours, method in ((wilson_interval, "wilson"), (clopper_pearson_interval, "exact")):
        low, high = ours(k, n)
        ref = _scipy(k, n, method)
        assert low == pytest.approx(ref[0], rel=1e-8, abs=1e-12) and high == pytest.approx(ref[1], rel=1e-8, abs=1e-12)
        assert high > low and 0.0 <= low <= k / n <= high <= 1.0  # never zero width, holds the observed share
    if k == 0:
        assert clopper_pearson_interval(k, n)[1] == pytest.approx(1 - 0.025 ** (1 / n))  # the closed form
    if k == n:
        assert clopper_pearson_interval(k, n)[0] == pytest.approx(0.025 ** (1 / n))


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 5000), share=st.floats(0, 1), level=st.sampled_from([0.8, 0.9, 0.95, 0.99]))
def test_both_intervals_equal_scipys_over_generated_counts(n, share, level):
    k = int(round(share * n))
    for method in ("wilson", "exact"):
        low, high = proportion_interval(k, n, level, method)
        ref = _scipy(k, n, method, level)
        assert low == pytest.approx(ref[0], rel=1e-7, abs=1e-12), (k, n, method)
        assert high == pytest.approx(ref[1], rel=1e-7, abs=1e-12), (k, n, method)


def test_clopper_pearson_covers_at_least_the_level_at_every_accuracy():
    """Exact coverage, summed over the binomial: at least 95% at accuracies up to 0.999 (Wilson can dip below)."""
    n = 30
    bounds = [clopper_pearson_interval(k, n) for k in range(n + 1)]
    from scipy.stats import binom

    for p in np.linspace(0.001, 0.999, 199):
        cover = sum(binom.pmf(k, n, p) for k, (lo, hi) in enumerate(bounds) if lo <= p <= hi)
        assert cover >= 0.95 - 1e-9, p


@pytest.mark.parametrize("k, n", [(-1, 5), (6, 5), (0, 0), (1.5, 3), (True, 2)])
def test_bad_counts_are_one_line_errors(k, n):
    with pytest.raises(ShiftbenchError, match="proportion interval"):
        clopper_pearson_interval(k, n)
    with pytest.raises(ShiftbenchError, match="unknown proportion interval"):
        proportion_interval(1, 2, method="wald")
    assert not math.isnan(wilson_interval(1, 2)[0])
