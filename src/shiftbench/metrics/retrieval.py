"""Composed-retrieval metrics: target ranks, Recall@K, Recall_subset@K, mean / median rank, gamma, and a
condition's rows from its ranks (:func:`condition_results`, :func:`gamma_results`; the runner is
engine/retrieval.py, the ranking tasks/retrieval.py).

Ranks are 1-based. Ties are broken by gallery order (a stable sort on descending score), so the rank of
a target equals its position in ``np.argsort(-scores, kind="stable")`` with the excluded items removed:
``1 + #(score > target score) + #(score == target score and earlier in the gallery)``.

>>> import numpy as np
>>> scores = np.array([[0.1, 0.9, 0.5], [0.7, 0.2, 0.7]])
>>> target_ranks(scores, [2, 2]).tolist()
[2, 2]
>>> recall_at_k([1, 2, 7], ks=(1, 5))
{'R@1': 0.3333333333333333, 'R@5': 0.6666666666666666}
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..registry import METRICS, metric_info
from .base import Metric
from .robustness import relative_robustness

__all__ = ["RECALL_KS", "SUBSET_KS", "target_ranks", "recall_at_k", "rank_summary", "gamma",
           "Recall", "RecallSubset", "RankStats", "condition_results", "gamma_results"]

RECALL_KS = (1, 5, 10, 50)  # CIRR's defaults
SUBSET_KS = (1, 2, 3)


def target_ranks(scores: Any, targets: Sequence[int], exclude: Sequence[int] | None = None) -> np.ndarray:
    """1-based rank of each query's target among the gallery columns of ``scores`` (Q, G).

    ``exclude[q]`` (or -1) is a column left out of query q's ranking (its reference image). Vectorised:
    one comparison of every score against the target's score.
    """
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ShiftbenchError(f"scores must be a (queries, gallery) matrix, got shape {scores.shape}")
    q, g = scores.shape
    targets = np.asarray(targets, dtype=np.int64).reshape(-1)
    if len(targets) != q:
        raise ShiftbenchError(f"{q} queries but {len(targets)} targets")
    if q and (targets.min() < 0 or targets.max() >= g):
        raise ShiftbenchError(f"target index outside the gallery of {g}")
    rows = np.arange(q)
    target_scores = scores[rows, targets][:, None]
    earlier = np.arange(g)[None, :] < targets[:, None]
    ahead = (scores > target_scores) | ((scores == target_scores) & earlier)
    if exclude is not None:
        exclude = np.asarray(exclude, dtype=np.int64).reshape(-1)
        if len(exclude) != q:
            raise ShiftbenchError(f"{q} queries but {len(exclude)} excluded items")
        if np.any((exclude == targets) & (exclude >= 0)):
            bad = int(np.flatnonzero(exclude == targets)[0])
            raise ShiftbenchError(f"query {bad}: its target is the excluded reference image")
        valid = exclude >= 0
        ahead[rows[valid], exclude[valid]] = False
    return 1 + ahead.sum(axis=1)


def recall_at_k(ranks: Sequence[int], ks: Sequence[int] = RECALL_KS, prefix: str = "R") -> dict[str, float]:
    """Fraction of queries whose target ranks within the top K, per K (NaN without queries)."""
    ranks = np.asarray(ranks, dtype=np.int64)
    return {f"{prefix}@{k}": float((ranks <= k).mean()) if ranks.size else float("nan") for k in ks}


def rank_summary(ranks: Sequence[int]) -> dict[str, float]:
    """Mean and median target rank (lower is better)."""
    ranks = np.asarray(ranks, dtype=np.float64)
    if not ranks.size:
        return {"mean_rank": float("nan"), "median_rank": float("nan")}
    return {"mean_rank": float(ranks.mean()), "median_rank": float(np.median(ranks))}


def gamma(clean: float, corrupted: float) -> float:
    """Relative robustness gamma = 1 - (R_clean - R_corrupted) / R_clean (1: unaffected)."""
    return relative_robustness(clean, corrupted)


class _RankMetric(Metric):
    """Accumulates target ranks; subclasses turn them into values."""

    task = "retrieval"
    field = "ranks"
    needs = "a composed-retrieval query whose target is in the gallery (checked when the run is set up)"

    def reset(self) -> None:
        self.n = 0
        self.ranks: list[int] = []
        # queries seen, ranked or not, and the positions among them of those without a rank (no subset):
        # per_sample lines its values up with every query the runner passed, NaN where unranked
        self._seen = 0
        self._unranked: list[int] = []

    def update(self, predictions: Any, targets: Any = None) -> None:
        """``predictions``: a dict with ``ranks`` and ``subset_ranks`` (None where a query has no subset)."""
        given = list(predictions[self.field] if isinstance(predictions, dict) else predictions)
        values = [int(r) for r in given if r is not None]
        if any(r < 1 for r in values):
            raise ShiftbenchError(f"{self.name}: ranks are 1-based, got {min(values)}")
        self._unranked.extend(self._seen + i for i, r in enumerate(given) if r is None)
        self._seen += len(given)
        self.ranks.extend(values)
        self.n += len(values)

    def merge(self, other: "_RankMetric") -> "_RankMetric":
        """Ranks of the parts, in order: concatenation is associative and [] is its identity."""
        self.check_mergeable(other)
        self.ranks = self.ranks + list(other.ranks)
        self._unranked = self._unranked + [self._seen + i for i in other._unranked]
        self._seen += other._seen
        self.n += other.n
        return self

    def _per_query(self, values: np.ndarray) -> np.ndarray:
        """``values`` (one per rank) spread over every query seen, NaN for those without a rank."""
        out = np.full(self._seen, np.nan)
        ranked = np.ones(self._seen, bool)
        ranked[np.asarray(self._unranked, np.int64)] = False
        out[ranked] = values
        return out

    def _records_complete(self) -> bool:
        return bool(self.n) and self._seen == self.n + len(self._unranked) and len(self.ranks) == self.n

    def update_from_samples(self, outputs: Any, samples: Sequence[Any]) -> None:
        self.update(outputs)


class Recall(_RankMetric):
    """Recall@K over the whole gallery, K = 1, 5, 10, 50 (``R@K``)."""

    name = "recall"
    higher_is_better = True

    def compute(self) -> dict[str, float]:
        return recall_at_k(self.ranks, RECALL_KS)

    def per_sample(self) -> dict[str, tuple[str, np.ndarray]]:
        """``R@K``: ``mean`` of the hits (1.0 when the target ranks within K) per query."""
        if not self._records_complete():
            return {}
        ranks = np.asarray(self.ranks, np.int64)
        return {f"R@{k}": ("mean", self._per_query((ranks <= k).astype(np.float64))) for k in RECALL_KS}


class RecallSubset(_RankMetric):
    """Recall_subset@K within each query's subset gallery, K = 1, 2, 3 (``R_subset@K``)."""

    name = "recall_subset"
    higher_is_better = True
    needs = ("a composed-retrieval query whose target is in the gallery, and its subset (a query without one is "
             "not scored)")
    field = "subset_ranks"

    def compute(self) -> dict[str, float]:
        return recall_at_k(self.ranks, SUBSET_KS, prefix="R_subset")

    def per_sample(self) -> dict[str, tuple[str, np.ndarray]]:
        """``R_subset@K``: ``mean`` of the hits per query with a subset (NaN rows: queries without one)."""
        if not self._records_complete():
            return {}
        ranks = np.asarray(self.ranks, np.int64)
        return {f"R_subset@{k}": ("mean", self._per_query((ranks <= k).astype(np.float64))) for k in SUBSET_KS}


class RankStats(_RankMetric):
    """Mean and median rank of the target (``mean_rank``, ``median_rank``; lower is better)."""

    name = "rank"
    higher_is_better = False

    def compute(self) -> dict[str, float]:
        return rank_summary(self.ranks)

    def per_sample(self) -> dict[str, tuple[str, np.ndarray]]:
        """``mean_rank``: ``mean`` of the ranks (the median has no per-sample statistic of these kinds)."""
        if not self._records_complete():
            return {}
        return {"mean_rank": ("mean", self._per_query(np.asarray(self.ranks, np.float64)))}


# -- a condition's rows ----------------------------------------------------------------------------------
def condition_results(metric_names: list[str], ranks: np.ndarray, sub_ranks: list, categories: list, n: int) -> dict:
    """A condition's rows, ``{key: (value, n, extra)}``: each named metric over the targets' ranks (and their
    ranks inside the queries' subsets), and with ``recall`` its R@K per query category."""
    results: dict[str, tuple] = {}
    for name in metric_names:
        metric = METRICS.create(name)
        metric.update({"ranks": ranks, "subset_ranks": sub_ranks})
        info = {"higher_is_better": metric_info(name).higher_is_better, "metric": name}
        for key, value in metric.compute().items():
            results[key] = (None if not np.isfinite(value) else float(value), metric.n, info)
    if "recall" in metric_names:
        for category in sorted({c for c in categories if c}):
            sel = np.array([c == category for c in categories])
            for key, value in recall_at_k(ranks[sel], RECALL_KS).items():
                results[f"{key}[{category}]"] = (value, int(sel.sum()), {"higher_is_better": True, "metric": "recall",
                                                                         "category": category})
    return results


def gamma_results(results: dict, clean: dict | None) -> dict:
    """gamma@K (and gamma_subset@K) against the clean values of the same retriever."""
    out = {}
    if not clean:
        return out
    for key, (value, n, _) in list(results.items()):
        if "[" in key or not key.startswith(("R@", "R_subset@")):
            continue
        c = clean.get(key)
        if value is None or c is None or c == 0:
            continue
        name = key.replace("R@", "gamma@").replace("R_subset@", "gamma_subset@")
        out[name] = (gamma(c, value), n, {"higher_is_better": True, "metric": "gamma", "clean": c, "shifted": value})
    return out
