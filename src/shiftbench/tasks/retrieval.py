"""Composed retrieval: a query (reference image + modification text) in, the target's rank and the top gallery
ids per query. The runner is engine/retrieval.py (gallery features, batching, merging); this holds what it
computes per retriever (the batched top-k ranking of the gallery: :func:`retrieve`, :func:`subset_ranks`) and what
it records per query; metrics/retrieval.py makes a condition's rows of the ranks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from ..errors import SpecError
from ..sample import Query
from .base import Task
from .labels import LabelPlan

__all__ = ["Retrieval", "Ranked", "reference_features", "retrieve", "subset_ranks", "TOPK_LOGGED"]

TOPK_LOGGED = 10  # gallery ids kept per query in its record


@dataclass(frozen=True)
class Ranked:
    """A batch of queries ranked against the gallery: the target's 1-based rank per query, the top gallery
    indices per query (rows), and the gallery's ids."""

    ranks: np.ndarray
    top: np.ndarray
    gallery_ids: Sequence[str]


class Retrieval(Task):
    """Composed retrievers (``models/retrieval.py``): ``compose(image_features, text_features)`` ranked
    against ``gallery_features``; scored by Recall@K over the gallery and within the query's subset."""

    name: ClassVar[str] = "retrieval"
    default_metrics: ClassVar[tuple[str, ...]] = ("recall", "recall_subset", "rank")
    record_keys: ClassVar[frozenset[str]] = frozenset({"target", "rank", "text", "top"})
    runner: ClassVar[str] = "retrieval"

    def predict(self, model: Any, queries: Sequence[Query]) -> np.ndarray:
        """The composed query features of a batch (N, D): each distinct reference image encoded once."""
        return model.compose(reference_features(model, queries), model.text_features([q.text for q in queries]))

    def record(self, outputs: Ranked, i: int, q: Query, model: Any = None, space: Any = None) -> dict[str, Any]:
        return {"target": q.target_id, "rank": int(outputs.ranks[i]), "text": q.text,
                "top": [outputs.gallery_ids[j] for j in outputs.top[i, :TOPK_LOGGED]]}

    def plan_labels(self, model: Any, dataset: Any, label_map: Any = None, dataset_name: str = "dataset",
                    class_subset: Any = None) -> Any:
        """Retrieval has no classes: nothing to check or map (a class subset is refused)."""
        if class_subset is not None:
            raise SpecError(f"{class_subset.where}: model {getattr(model, 'name', '?')!r} is a retrieval model; a class "
                            "subset restricts the outputs of classifiers only")

        return LabelPlan(model, self.name)


def reference_features(model: Any, queries: Sequence[Query]) -> np.ndarray:
    """Reference-image features of a batch, each distinct reference encoded once."""
    todo: dict[str, Any] = {}
    for q in queries:
        if q.reference.id not in todo:
            todo[q.reference.id] = q.reference.image
    feats = dict(zip(todo, model.image_features(list(todo.values()))))
    return np.stack([feats[q.reference.id] for q in queries])


# -- ranking a gallery ----------------------------------------------------------------------------------
def retrieve(queries: np.ndarray, gallery: np.ndarray, targets: Sequence[int] | None = None,
             exclude: Sequence[int] | None = None, k: int = 50, batch_size: int = 1024,
             similarity: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Top-k gallery indices and scores per query, and the target's 1-based rank when ``targets`` given.

    ``exclude[q]`` (-1 for none) is left out of query q's ranking. Queries go in batches of
    ``batch_size``: one (batch, G) score block, ``argpartition`` for the top k, one comparison for ranks.
    Ties break by gallery order, as in :func:`shiftbench.metrics.retrieval.target_ranks`.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    gallery = np.ascontiguousarray(gallery, dtype=np.float32)
    nq, g = len(queries), len(gallery)
    k = max(1, min(int(k), g))
    top_idx = np.empty((nq, k), np.int64)
    top_val = np.empty((nq, k), np.float32)
    ranks = np.empty(nq, np.int64) if targets is not None else None
    targets = None if targets is None else np.asarray(targets, np.int64)
    exclude = np.full(nq, -1, np.int64) if exclude is None else np.asarray(exclude, np.int64)
    gallery_t = gallery.T.copy()
    order = np.arange(g)
    for start in range(0, nq, batch_size):
        stop = min(start + batch_size, nq)
        scores = queries[start:stop] @ gallery_t if similarity is None else np.asarray(
            similarity(queries[start:stop], gallery), np.float32)
        rows = np.arange(stop - start)
        ex = exclude[start:stop]
        has = ex >= 0
        scores[rows[has], ex[has]] = -np.inf
        part = _topk_indices(scores, k) if k < g else np.tile(order, (stop - start, 1))
        vals = np.take_along_axis(scores, part, axis=1)
        # sort the k by descending score, then by gallery index (stable tie order)
        sort = np.lexsort((part, -vals), axis=1)
        top_idx[start:stop] = np.take_along_axis(part, sort, axis=1)
        top_val[start:stop] = np.take_along_axis(vals, sort, axis=1)
        if ranks is not None:
            t = targets[start:stop]
            ts = scores[rows, t][:, None]
            block = 1 + np.count_nonzero(scores > ts, axis=1)
            # exact ties with the target are rare: only those rows pay for the gallery-order rule
            tied = np.flatnonzero(np.count_nonzero(scores == ts, axis=1) > 1)
            for r in tied:
                block[r] += int(np.count_nonzero(scores[r, :t[r]] == ts[r, 0]))
            ranks[start:stop] = block
    return top_idx, top_val, ranks


def _topk_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores per row, unordered (torch.topk when torch is installed: several
    times faster than numpy's argpartition on a (1000, 10000) block). Among exact ties at the k-th
    place either may be chosen."""
    try:
        import torch
    except ImportError:
        return np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return torch.topk(torch.from_numpy(scores), k, dim=1, sorted=False).indices.numpy()


def subset_ranks(scores_of: Any, composed: np.ndarray, gallery_feats: np.ndarray, targets: np.ndarray,
                 subsets: list) -> list[int | None]:
    """Rank of the target inside each query's subset (None without a subset); ties by subset order."""
    out: list[int | None] = []
    for q, subset in enumerate(subsets):
        if subset is None:
            out.append(None)
            continue
        s = np.asarray(scores_of(composed[q:q + 1], gallery_feats[subset]))[0]
        pos = subset.index(int(targets[q]))
        out.append(int(1 + np.sum(s > s[pos]) + np.sum(s[:pos] == s[pos])))
    return out
