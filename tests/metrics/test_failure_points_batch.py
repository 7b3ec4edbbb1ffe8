"""Issue 38: metrics.failure.failure_points computes many curves in shared passes over one draw per image count,
and each result equals the curve's own failure_point, however the curves are grouped."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shiftbench.metrics import failure
from shiftbench.metrics.failure import failure_point, failure_points


def _curve(rng: np.random.Generator, n: int, k: int) -> tuple:
    clean = (rng.random(n) < 0.8).astype(float)
    shifted = np.stack([(rng.random(n) < 0.8 - 0.15 * (s + 1)).astype(float) for s in range(k)])
    return list(range(1, k + 1)), clean, shifted, True


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.tuples(st.integers(2, 40), st.integers(1, 5)), min_size=1, max_size=5),
       st.sampled_from([10**9, 200, 1]))
def test_each_point_equals_its_own_failure_point(seed, shapes, cells):
    rng = np.random.default_rng(seed)
    curves = [_curve(rng, n, k) for n, k in shapes]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(failure, "_GROUP_CELLS", cells)  # one group per image count, several, one curve each
        together = failure_points(curves, n_boot=150, seed=seed % 1000)
    alone = [failure_point(*c[:3], n_boot=150, seed=seed % 1000, from_clean=c[3]) for c in curves]
    assert together == alone
