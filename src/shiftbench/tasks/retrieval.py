"""Composed retrieval: a query (reference image + modification text) in, the target's rank and the top gallery
ids per query. The runner is engine/retrieval.py (gallery features, batching, ranking, merging); this holds
what it computes per retriever and what it records per query."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from ..sample import Query
from .base import Task

__all__ = ["Retrieval", "Ranked", "reference_features", "TOPK_LOGGED"]

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
        from ..errors import SpecError
        from .labels import LabelPlan

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
