"""ImageNet-P stability metrics against a transcription of the reference formulas.

The reference is hendrycks/robustness ImageNet-P/test.py (``flip_prob``, ``ranking_dist`` with ``dist(...,
'top5')``, ranks from ``scipy.stats.rankdata(-scores, method='ordinal')``): transcribed below in its own loop
form, for one sequence at a time, and compared with our vectorised functions over generated sequences.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import rankdata

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.stability import (ALEXNET_FP, ALEXNET_T5D, FlipProbability, Top5Distance, comparison_pairs,
                                          normalised, sequence_flips, sequence_top5_distance, top5_distance)
from shiftbench.sample import Sample


# -- the transcription (reference semantics: noise sequences keep the first frame, the others move on) ----------
def ref_flip_prob(predictions, noise, difficulty):
    result = 0.0
    step = 1 if noise else difficulty
    for vid in predictions:
        per_vid = []
        for i in range(step):
            prev = vid[i]
            for pred in vid[i::step][1:]:
                per_vid.append(int(prev != pred))
                if not noise:
                    prev = pred
        result += np.mean(per_vid) / len(predictions)
    return result


def ref_dist_top5(sigma, n_classes):
    cum = np.cumsum(np.asarray([0] + [1] * 5 + [0] * (n_classes - 1 - 5)))
    return np.sum(np.abs(cum[:5] - cum[sigma - 1][:5]))


def ref_ranking_dist(ranks, noise, difficulty, n_classes):
    result = 0.0
    step = 1 if noise else difficulty
    for vid in ranks:
        per_vid = []
        for i in range(step):
            perm1 = vid[i]
            inv1 = np.argsort(perm1)
            for rank in vid[i::step][1:]:
                per_vid.append(ref_dist_top5(rank[inv1], n_classes))
                if not noise:
                    perm1 = rank
                    inv1 = np.argsort(perm1)
        result += np.mean(per_vid) / len(ranks)
    return result


def ref_ranks(scores):
    return np.asarray([[rankdata(-frame, method="ordinal").astype(np.int64) for frame in vid] for vid in scores])


sequences = st.tuples(st.integers(1, 5), st.integers(4, 12), st.integers(6, 20), st.integers(0, 2**32 - 1),
                      st.booleans(), st.integers(1, 3), st.integers(2, 6))


def _scores(n, t, c, seed, levels):
    rng = np.random.default_rng(seed)
    # few distinct levels: ties between classes are frequent, so the ordinal tie rule is exercised
    return rng.integers(0, levels, size=(n, t, c)).astype(np.float64)


@settings(max_examples=80, deadline=None)
@given(sequences)
def test_flip_probability_equals_the_reference(case):
    n, t, c, seed, noise, difficulty, levels = case
    scores = _scores(n, t, c, seed, levels)
    top1 = np.argsort(-scores, axis=-1, kind="stable")[..., 0]
    assert (top1 == np.argmax(scores, axis=-1)).all()  # the reference's argmax: the first maximum
    reference, step = ("first", 1) if noise else ("previous", difficulty)
    ours = sequence_flips(top1, reference, step).mean()
    assert ours == pytest.approx(ref_flip_prob(list(top1), noise, difficulty), abs=1e-12)


@settings(max_examples=80, deadline=None)
@given(sequences)
def test_top5_distance_equals_the_reference(case):
    n, t, c, seed, noise, difficulty, levels = case
    scores = _scores(n, t, c, seed, levels)
    reference, step = ("first", 1) if noise else ("previous", difficulty)
    ours = sequence_top5_distance(scores, reference, step).mean()
    assert ours == pytest.approx(ref_ranking_dist(ref_ranks(scores), noise, difficulty, c), abs=1e-12)


def test_metric_objects_score_frames_in_order_and_merge_like_one_pass():
    rng = np.random.default_rng(3)
    n, t, c = 7, 31, 10
    scores = rng.normal(size=(n, t, c))
    samples = [Sample(image=np.zeros((4, 4, 3), np.uint8), id=f"s{i}", frames=np.zeros((t, 4, 4, 3), np.uint8),
                      meta={"sequence": {"reference": "previous", "step": 2, "frames": t}}) for i in range(n)]
    flat = scores.reshape(n * t, c)
    whole = FlipProbability()
    whole.update_from_samples(flat, samples)
    parts = [FlipProbability(), FlipProbability()]
    parts[0].update_from_samples(flat[:3 * t], samples[:3])
    parts[1].update_from_samples(flat[3 * t:], samples[3:])
    merged = parts[0].merge(parts[1])
    top1 = np.argmax(scores, axis=-1)
    expected = ref_flip_prob(list(top1), False, 2)
    assert whole.compute()["flip_prob"] == merged.compute()["flip_prob"] == pytest.approx(expected, abs=1e-12)
    kind, values = whole.per_sample()["flip_prob"]
    assert kind == "mean" and values.shape == (n,) and values.mean() == pytest.approx(expected)
    t5 = Top5Distance()
    t5.update_from_samples(flat, samples)
    assert t5.compute()["t5d"] == pytest.approx(ref_ranking_dist(ref_ranks(scores), False, 2, c), abs=1e-12)


def test_a_sample_without_frames_is_refused_by_name():
    m = FlipProbability()
    with pytest.raises(ShiftbenchError, match="sample 'x' is no perturbation sequence"):
        m.update_from_samples(np.zeros((1, 3)), [Sample(image=np.zeros((2, 2, 3), np.uint8), id="x")])
    with pytest.raises(ShiftbenchError, match=r"expected \(62, C\) scores"):
        m.update(np.zeros((5, 3)), [(31, "first", 1), (31, "first", 1)])


def test_pairs_and_bad_arguments():
    a, b = comparison_pairs(7, "previous", 3)
    assert list(zip(a, b)) == [(0, 3), (3, 6), (1, 4), (2, 5)]
    a, b = comparison_pairs(4, "first", 1)
    assert list(zip(a, b)) == [(0, 1), (0, 2), (0, 3)]
    for bad in ((4, "last", 1), (4, "first", 0), (2, "previous", 2)):
        with pytest.raises(ShiftbenchError):
            comparison_pairs(*bad)


def test_top5_distance_of_identical_and_swapped_rankings():
    s = np.arange(10, dtype=np.float64)[None, ::-1]  # class 0 first
    assert top5_distance(s, s).tolist() == [0.0]
    swapped = s.copy()
    swapped[0, [0, 1]] = swapped[0, [1, 0]]  # ranks 1 and 2 swap: |0-1| + |1-0|
    assert top5_distance(s, swapped).tolist() == [2.0]
    reversed_ = s[:, ::-1].copy()  # a's top-5 all fall below rank 5 in b: sum |r - 5| = 5+4+3+2+1
    assert top5_distance(s, reversed_).tolist() == [15.0]


def test_alexnet_normalisers_cover_the_fourteen_and_normalise_as_published():
    names = set(sb.list_shifts("p_*")) if sb.list_shifts("p_*") else set(ALEXNET_FP)
    assert set(ALEXNET_FP) == set(ALEXNET_T5D) and len(ALEXNET_FP) == 14
    assert names <= set(ALEXNET_FP)
    assert normalised("flip_prob", "p_translate", 0.1101) == pytest.approx(100.0)
    assert normalised("t5d", "p_scale", 4.48) == pytest.approx(100.0)
    assert normalised("flip_prob", "gaussian_noise", 0.1) is None
