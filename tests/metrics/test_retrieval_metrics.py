"""Retrieval metrics and batched top-k ranking against brute-force references."""

from __future__ import annotations

import numpy as np
import pytest

from shiftbench.tasks.retrieval import retrieve
from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.retrieval import (Recall, RecallSubset, RankStats, gamma, rank_summary, recall_at_k,
                                          target_ranks)
from shiftbench.registry import METRICS


def brute_force_ranks(scores, targets, exclude):
    """Rank by sorting every row (stable: ties keep gallery order), the excluded column removed."""
    ranks = []
    for row, t, ex in zip(scores, targets, exclude):
        order = [j for j in np.argsort(-row, kind="stable") if j != ex]
        ranks.append(order.index(t) + 1)
    return np.array(ranks)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_target_ranks_match_brute_force_with_ties_and_exclusion(seed):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.normal(size=(40, 25)), 1)  # rounding makes many ties
    targets = rng.integers(0, 25, 40)
    exclude = np.array([(t + 1 + rng.integers(24)) % 25 if i % 3 else -1 for i, t in enumerate(targets)])
    assert np.array_equal(target_ranks(scores, targets, exclude), brute_force_ranks(scores, targets, exclude))


@pytest.mark.parametrize("batch_size", [7, 1024])
def test_retrieve_topk_and_ranks_match_brute_force(batch_size):
    rng = np.random.default_rng(3)
    queries = rng.normal(size=(30, 16)).astype(np.float32)
    gallery = rng.normal(size=(60, 16)).astype(np.float32)
    gallery[10] = gallery[11]  # an exact tie
    targets = rng.integers(0, 60, 30)
    targets[:2] = [11, 10]  # targets tied with another gallery image
    exclude = (targets + 5) % 60
    top, vals, ranks = retrieve(queries, gallery, targets, exclude, k=8, batch_size=batch_size)
    scores = queries @ gallery.T
    assert np.array_equal(ranks, brute_force_ranks(scores, targets, exclude))
    for q in range(30):
        expected = [j for j in np.argsort(-scores[q], kind="stable") if j != exclude[q]][:8]
        assert top[q].tolist() == expected
        assert np.allclose(vals[q], scores[q, expected])


def test_recall_and_rank_summary_by_hand():
    ranks = [1, 3, 6, 12, 60]
    assert recall_at_k(ranks) == {"R@1": 0.2, "R@5": 0.4, "R@10": 0.6, "R@50": 0.8}
    assert recall_at_k(ranks, (1, 2, 3), prefix="R_subset") == {"R_subset@1": 0.2, "R_subset@2": 0.2, "R_subset@3": 0.4}
    assert rank_summary(ranks) == {"mean_rank": 16.4, "median_rank": 6.0}
    assert np.isnan(recall_at_k([])["R@1"])


def test_gamma_definition():
    assert gamma(0.5, 0.25) == pytest.approx(0.5)
    assert gamma(0.4, 0.4) == pytest.approx(1.0)
    assert gamma(0.4, 0.0) == pytest.approx(0.0)
    assert np.isnan(gamma(0.0, 0.1))


def test_metric_classes_accumulate_and_are_registered():
    recall = METRICS.create("recall")
    assert isinstance(recall, Recall) and recall.task == "retrieval"
    recall.update({"ranks": [1, 20], "subset_ranks": [None, None]})
    recall.update({"ranks": [70], "subset_ranks": [2]})
    assert recall.compute()["R@10"] == pytest.approx(1 / 3) and recall.n == 3
    subset = RecallSubset()
    subset.update({"ranks": [1, 20, 70], "subset_ranks": [None, 1, 3]})
    assert subset.n == 2 and subset.compute() == {"R_subset@1": 0.5, "R_subset@2": 0.5, "R_subset@3": 1.0}
    stats = RankStats()
    stats.update({"ranks": [2, 4]})
    assert stats.compute() == {"mean_rank": 3.0, "median_rank": 3.0} and not stats.higher_is_better
    with pytest.raises(ShiftbenchError, match="1-based"):
        Recall().update({"ranks": [0]})


def test_bad_inputs_are_named():
    with pytest.raises(ShiftbenchError, match="query 1: its target is the excluded"):
        target_ranks(np.zeros((2, 3)), [0, 2], [1, 2])
    with pytest.raises(ShiftbenchError, match="matrix"):
        target_ranks(np.zeros(3), [0])
    with pytest.raises(ShiftbenchError, match="outside the gallery"):
        target_ranks(np.zeros((1, 3)), [3])
