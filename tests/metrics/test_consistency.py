"""Error consistency (metrics/consistency.py): Cohen's kappa of right/wrong vectors against scikit-learn's
cohen_kappa_score (plain, and weighted for the bootstrap's resamples), a hand computation, the undefined cases,
and the vectorised bootstrap against a plain loop over the same draws.

The hand computation transcribes Geirhos et al. (NeurIPS 2020), eq. 1-3: c_obs, c_exp = p_a p_b + (1 - p_a)(1 - p_b),
kappa = (c_obs - c_exp) / (1 - c_exp)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score

from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.consistency import (ErrorTally, bootstrap_kappa, error_kappa, kappa_from_sums, kappa_matrix,
                                            undefined_reason)


def sk_kappa(a, b, weight=None) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn warns on the undefined case and answers NaN
        return float(cohen_kappa_score(np.asarray(a, int), np.asarray(b, int), labels=[0, 1], sample_weight=weight))


def same(x: float, y: float, tol: float = 1e-12) -> bool:
    return (math.isnan(x) and math.isnan(y)) or abs(x - y) <= tol


pairs = st.integers(1, 60).flatmap(lambda n: st.tuples(
    st.one_of(st.lists(st.booleans(), min_size=n, max_size=n), st.sampled_from([[True] * n, [False] * n])),
    st.one_of(st.lists(st.booleans(), min_size=n, max_size=n), st.sampled_from([[True] * n, [False] * n]))))


@given(pairs)
def test_kappa_equals_sklearn_on_right_wrong_vectors(ab):
    a, b = ab
    k = error_kappa(a, b)
    assert same(k.kappa, sk_kappa(a, b))
    assert (k.reason is not None) == math.isnan(k.kappa)
    x, y = np.asarray(a), np.asarray(b)
    assert k.observed == pytest.approx(np.mean(x == y)) and k.n == x.size
    pa, pb = x.mean(), y.mean()
    assert k.expected == pytest.approx(pa * pb + (1 - pa) * (1 - pb))
    assert same(error_kappa(b, a).kappa, k.kappa)  # symmetric
    assert same(error_kappa(np.asarray(a, np.uint8), np.asarray(b, float)).kappa, k.kappa)  # 0/1 of any dtype


def test_a_hand_computation():
    # 10 images: both right on 4, only a on 2, only b on 1, both wrong on 3
    a = [1, 1, 1, 1, 1, 1, 0, 0, 0, 0]
    b = [1, 1, 1, 1, 0, 0, 1, 0, 0, 0]
    k = error_kappa(a, b)
    c_obs = (4 + 3) / 10                      # 0.7
    c_exp = 0.6 * 0.5 + 0.4 * 0.5             # p_a = 0.6, p_b = 0.5: 0.5
    assert k.observed == pytest.approx(c_obs) and k.expected == pytest.approx(c_exp)
    assert k.kappa == pytest.approx((c_obs - c_exp) / (1 - c_exp)) == pytest.approx(0.4)
    assert k.reason is None


def test_undefined_cases_say_why_and_a_constant_model_against_a_mixed_one_is_zero():
    right, wrong = error_kappa([1, 1, 1], [1, 1, 1]), error_kappa([0, 0], [0, 0])
    assert math.isnan(right.kappa) and "right on every sample" in right.reason
    assert math.isnan(wrong.kappa) and "wrong on every sample" in wrong.reason
    assert error_kappa([1, 1, 1, 1], [1, 0, 1, 0]).kappa == 0.0 == sk_kappa([1, 1, 1, 1], [1, 0, 1, 0])
    assert error_kappa([1, 1], [0, 0]).kappa == 0.0  # expected consistency 0, observed 0: defined
    assert undefined_reason(0, 0, 0).startswith("no sample")
    assert math.isnan(error_kappa([], []).kappa)
    b = bootstrap_kappa([1] * 8, [1] * 8, n_boot=50)
    assert math.isnan(b.kappa) and math.isnan(b.low) and b.undefined == 50 and "right on every" in b.reason


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.integers(0, 5)), min_size=1, max_size=40))
def test_weighted_sums_equal_sklearn_with_sample_weights(rows):
    a = np.array([r[0] for r in rows])
    b = np.array([r[1] for r in rows])
    w = np.array([r[2] for r in rows], float)
    got = kappa_from_sums(w.sum(), (w * a).sum(), (w * b).sum(), (w * (a & b)).sum())
    if w.sum() == 0:
        assert math.isnan(got)
    else:
        assert same(float(got), sk_kappa(a, b, w), 1e-9)
        assert same(float(got), error_kappa(np.repeat(a, w.astype(int)), np.repeat(b, w.astype(int))).kappa, 1e-9)


@given(st.integers(2, 4), st.integers(1, 25), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_a_pooled_family_is_kappa_of_the_concatenated_vectors(models, units, conditions, seed):
    rng = np.random.default_rng(seed)
    tally = ErrorTally(models, units)
    kept = []
    for _ in range(conditions):  # each condition scores a random subset of the units, in a random order
        at = rng.permutation(units)[: rng.integers(1, units + 1)]
        correct = rng.random((models, at.size)) < rng.random((models, 1))
        tally.add(correct, at)
        kept.append(correct)
    m = kappa_matrix(tally, n_boot=20, seed=seed)
    cat = np.concatenate(kept, axis=1)
    assert m.n == cat.shape[1] and m.units == int((tally.total > 0).sum())
    for i in range(models):
        assert math.isnan(m.kappa[i, i])
        for j in range(i + 1, models):
            assert same(m.kappa[i, j], sk_kappa(cat[i], cat[j]), 1e-9)
            assert same(m.kappa[i, j], m.kappa[j, i]) and repr(m.pair(i, j)) == repr(m.pair(j, i))
            assert ((i, j) in m.reasons) == math.isnan(m.kappa[i, j])
    assert np.allclose(m.accuracy, cat.mean(axis=1))


def test_the_vectorised_bootstrap_equals_a_plain_loop_over_the_same_draws():
    rng = np.random.default_rng(7)
    units, n_boot, seed = 30, 300, 12345
    tally = ErrorTally(3, units)
    conds = []
    for at in (np.arange(units), rng.permutation(units)[:22]):  # the second condition skips 8 images
        correct = rng.random((3, at.size)) < [[0.7], [0.5], [0.9]]
        correct[1] ^= rng.random(at.size) < 0.3
        tally.add(correct, at)
        conds.append((correct, at))
    m = kappa_matrix(tally, n_boot=n_boot, seed=seed)
    draws = np.random.Generator(np.random.PCG64(seed)).integers(0, units, size=(n_boot, units))
    for i, j in ((0, 1), (0, 2), (1, 2)):
        boots = []
        for idx in draws:
            counts = np.bincount(idx, minlength=units).astype(float)
            a = np.concatenate([c[i] for c, _ in conds])
            b = np.concatenate([c[j] for c, _ in conds])
            w = np.concatenate([counts[at] for _, at in conds])
            boots.append(sk_kappa(a, b, w) if w.sum() else math.nan)
        boots = np.asarray(boots)
        finite = boots[np.isfinite(boots)]
        assert m.undefined[i, j] == n_boot - finite.size
        low, high = np.quantile(finite, [0.025, 0.975])
        assert m.low[i, j] == pytest.approx(low, abs=1e-9) and m.high[i, j] == pytest.approx(high, abs=1e-9)


def test_the_interval_holds_the_point_is_seeded_and_another_model_moves_no_pair():
    rng = np.random.default_rng(3)
    for case in range(20):
        n = int(rng.integers(40, 300))
        a = rng.random(n) < rng.uniform(0.3, 0.9)
        b = np.where(rng.random(n) < rng.uniform(0.2, 0.9), a, rng.random(n) < 0.5)  # errors partly shared
        k = bootstrap_kappa(a, b, n_boot=400, seed=case)
        assert k.low <= k.kappa <= k.high, (case, k)
        assert k.kappa == pytest.approx(sk_kappa(a, b))
        assert bootstrap_kappa(a, b, n_boot=400, seed=case) == k  # same seed, same numbers
        other = bootstrap_kappa(a, b, n_boot=400, seed=case + 100)  # another seed: other draws
        assert other.kappa == k.kappa and (other.low, other.high) != (k.low, k.high)
    a, b, c = (rng.random(80) < p for p in (0.6, 0.7, 0.5))
    two, three = ErrorTally(2, 80), ErrorTally(3, 80)
    two.add(np.stack([a, b]))
    three.add(np.stack([a, b, c]))
    assert kappa_matrix(two, 200, seed=9).pair(0, 1) == kappa_matrix(three, 200, seed=9).pair(0, 1)


def test_bad_input_is_one_shiftbench_error():
    with pytest.raises(ShiftbenchError, match="0 or 1"):
        error_kappa([0, 2], [1, 0])
    with pytest.raises(ShiftbenchError, match="same samples"):
        error_kappa([0, 1], [1])
    with pytest.raises(ShiftbenchError, match="at least 2 models"):
        ErrorTally(1, 3)
    tally = ErrorTally(2, 3)
    with pytest.raises(ShiftbenchError, match="shape"):
        tally.add(np.ones((3, 3), bool))
    with pytest.raises(ShiftbenchError, match="twice"):
        tally.add(np.ones((2, 2), bool), [1, 1])
    with pytest.raises(ShiftbenchError, match="outside"):
        tally.add(np.ones((2, 2), bool), [0, 3])
    with pytest.raises(ShiftbenchError, match="n_boot"):
        kappa_matrix(tally, n_boot=0)
