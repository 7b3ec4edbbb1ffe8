"""The composed-retrieval evaluation: retrievers x (clean + shifts x severities) on a retrieval dataset -> store rows.

Called by the runner (engine/evaluate.py) when a spec's models are retrievers (``task="retrieval"``).
Per condition: the queries are corrupted once (reference images for image shifts, texts for text
shifts; the gallery too when ``dataset_params.corrupt_gallery`` is true), features are computed once per
encoder and shared by every retriever that uses it (gallery features once per image encoder and gallery
condition), and ranking is a batched matrix product with top-k. Each finished (retriever, condition)
is one store transaction, so a killed run resumes at the first unfinished condition.

Rows: ``model`` = the retriever's label, ``R@K`` / ``R_subset@K`` / ``mean_rank`` / ``median_rank``,
per-category ``R@K[category]``, and for every shifted condition ``gamma@K`` = 1 - (R_clean - R) / R_clean
with the clean value in the row's ``extra``. The clean condition is ``clean``, severity 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ShiftbenchError, SpecError
from ..metrics.retrieval import RECALL_KS, recall_at_k
from ..registry import METRICS, MODELS, SHIFTS
from ..sample import Query
from ..spec import Spec
from .evaluate import Condition
from .store import ConditionKey, Store

__all__ = ["run_retrieval", "setup_retrieval", "RetrievalSetup", "retrieve", "is_retrieval_spec", "GalleryIndex",
           "validate_queries"]

TOPK_LOGGED = 10


def is_retrieval_spec(spec: Spec) -> bool:
    """True when every model of the spec is a retriever; a mix with other tasks is refused."""
    tasks = []
    for m in spec.models:
        try:
            tasks.append(MODELS.entry(m.name).meta.get("task"))
        except ShiftbenchError:
            tasks.append(None)
    if "retrieval" not in tasks:
        return False
    if any(t != "retrieval" for t in tasks):
        raise SpecError("models: a spec cannot mix retrievers with other models (run them as two specs)")
    return True


# -- ranking ----------------------------------------------------------------------------------------
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


# -- the gallery and the queries ----------------------------------------------------------------------
@dataclass
class GalleryIndex:
    ids: list[str]
    index: dict[str, int]

    @classmethod
    def of(cls, dataset: Any) -> "GalleryIndex":
        ids = [str(i) for i in dataset.gallery_ids()]
        index: dict[str, int] = {}
        for i, gid in enumerate(ids):
            if gid in index:
                raise ShiftbenchError(f"gallery: duplicate image id {gid!r}")
            index[gid] = i
        if not ids:
            raise ShiftbenchError("gallery: no images")
        return cls(ids, index)


def validate_queries(queries: Sequence[Query], gallery: GalleryIndex) -> tuple[np.ndarray, np.ndarray, list]:
    """(target index, excluded reference index or -1, subset indices or None) per query; errors name the query."""
    targets, exclude, subsets = [], [], []
    for q in queries:
        if q.target_id is None:
            raise ShiftbenchError(f"query {q.id}: has no target (a test split without answers cannot be scored)")
        if q.target_id not in gallery.index:
            raise ShiftbenchError(f"query {q.id}: target {q.target_id!r} is not in the gallery")
        t = gallery.index[q.target_id]
        ref_id = q.meta.get("reference_id", q.reference.id)
        ref = gallery.index.get(ref_id, -1)
        if ref == t:
            raise ShiftbenchError(f"query {q.id}: target {q.target_id!r} is its own reference image")
        subset = None
        if q.subset_ids is not None:
            if q.target_id not in q.subset_ids:
                raise ShiftbenchError(f"query {q.id}: subset does not contain its target {q.target_id!r}")
            missing = [s for s in q.subset_ids if s not in gallery.index]
            if missing:
                raise ShiftbenchError(f"query {q.id}: subset image {missing[0]!r} is not in the gallery")
            subset = [gallery.index[s] for s in q.subset_ids]
        targets.append(t)
        exclude.append(ref)
        subsets.append(subset)
    return np.array(targets, np.int64), np.array(exclude, np.int64), subsets


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


# -- the run ------------------------------------------------------------------------------------------

class _Features:
    """Feature caches of one run: gallery per (image encoder, gallery condition), queries per condition."""

    def __init__(self) -> None:
        self.gallery: dict[tuple[str, str], np.ndarray] = {}
        self.references: dict[tuple[str, str], dict[str, np.ndarray]] = {}
        self.texts: dict[tuple[str, str], np.ndarray] = {}


@dataclass
class RetrievalSetup:
    """A retrieval run set up and checked, nothing computed (the runner's ``prepare`` for retrievers)."""

    dataset: Any
    corrupt_gallery: bool
    n_queries: int
    models: dict[str, Any]
    metric_names: list[str]
    gallery: "GalleryIndex"
    clean_queries: list[Query]
    targets: np.ndarray
    exclude: np.ndarray
    subsets: list
    categories: list


def setup_retrieval(spec: Spec, given_models: dict[str, Any] | None = None) -> RetrievalSetup:
    """Open the retrieval dataset, load the retrievers, check the metrics and every query."""
    from ..datasets import load
    from ..metrics.base import check_task

    given_models = given_models or {}
    params = dict(spec.dataset_params)
    corrupt_gallery = bool(params.pop("corrupt_gallery", False))
    dataset = load(spec.dataset, **params)
    for attr in ("gallery_ids", "load_gallery"):
        if not hasattr(dataset, attr):
            raise ShiftbenchError(f"dataset {spec.dataset!r} is not a composed-retrieval dataset (no {attr})")
    n_queries = len(dataset) if spec.limit is None else min(spec.limit, len(dataset))
    if n_queries == 0:
        raise ShiftbenchError(f"dataset {spec.dataset!r} has no queries")
    models = {}
    for m in spec.models:
        model = given_models.get(m.label) or MODELS.create(m.name, **m.params)
        if getattr(model, "task", None) != "retrieval":
            raise ShiftbenchError(f"model {m.name!r} is not a retriever")
        models[m.label] = model
    metric_names = list(spec.metrics)
    for name in metric_names:
        metric = METRICS.create(name)
        try:
            check_task(metric, next(iter(models.values())))
        except ShiftbenchError as exc:
            raise SpecError(f"metrics: {exc}") from None

    gallery = GalleryIndex.of(dataset)
    clean_queries = [dataset.load(i) for i in range(n_queries)]
    targets, exclude, subsets = validate_queries(clean_queries, gallery)
    # queries without a category (CIRR) get the CIRR-D keyword category of their text, for R@K[category]
    from ..shifts.retrieval import primary_category

    categories = [q.category or primary_category(q.text) for q in clean_queries]
    return RetrievalSetup(dataset, corrupt_gallery, n_queries, models, metric_names, gallery, clean_queries,
                          targets, exclude, subsets, categories)


class _QueryIds:
    """The queries a run reads, as the identity's dataset fingerprint sees them (their ids)."""

    def __init__(self, queries: list[Query], gallery: "GalleryIndex"):
        self.ids = [str(q.id) for q in queries] + [f"gallery:{g}" for g in gallery.ids]

    def __len__(self) -> int:
        return len(self.ids)

    def sample_id(self, i: int) -> str:
        return self.ids[i]


def run_retrieval(spec: Spec, store: Store, run_id: str | None = None, progress: bool = False,
                  given_models: dict[str, Any] | None = None, setup: RetrievalSetup | None = None,
                  new_run: bool = False, on_start: Any = None,
                  on_batch: Callable[[str, int], None] | None = None) -> list[dict[str, Any]]:
    """Evaluate a retrieval spec into ``store``; returns the run's rows. A run resumes only when its
    identity (weights, dataset files, version; engine/identity.py) is unchanged, or with ``new_run``.
    ``on_batch(model, 0)`` is called after each finished (model, condition): all queries are one batch."""
    from .identity import run_identity
    from .provenance import git_hash, versions

    setup = setup or setup_retrieval(spec, given_models)
    dataset, corrupt_gallery, n_queries = setup.dataset, setup.corrupt_gallery, setup.n_queries
    models, metric_names, gallery = setup.models, setup.metric_names, setup.gallery
    clean_queries, targets, exclude, subsets = setup.clean_queries, setup.targets, setup.exclude, setup.subsets
    categories = setup.categories
    identity = run_identity(spec, _QueryIds(clean_queries, gallery), models)
    run_id = store.start_run(spec.raw, spec.seed, run_id=run_id, versions=versions(), git_hash=git_hash(),
                             name=spec.name, identity=identity, new_run=new_run)
    if on_start is not None:
        on_start(run_id)
    conditions = []
    for s in spec.shifts:
        shift = SHIFTS.create(s.name, **s.params)
        for severity in s.severities:
            conditions.append(Condition(s.name, dict(s.params), severity, shift))
    cids = {(m, i): store.condition(run_id, ConditionKey(m, spec.dataset, c.shift_name, c.params, c.severity))
            for m in models for i, c in enumerate(conditions)}
    clean_values = _stored_clean(store, run_id, spec.dataset)
    cache = _Features()
    say = (lambda msg: print(msg, flush=True)) if progress else (lambda msg: None)
    for ci, cond in enumerate(conditions):
        pending = [m for m in models if not store.is_done(cids[(m, ci)])]
        if not pending:
            continue
        t0 = time.perf_counter()
        queries = _shifted_queries(clean_queries, cond, spec.seed)
        gallery_key = "clean" if (cond.shift_name == "clean" or not corrupt_gallery or cond.shift.kind == "text") \
            else f"{cond.shift_name}/{cond.severity}/{_params_key(cond.params)}"
        for m in pending:
            model = models[m]
            g_feats = _gallery_features(cache, model, dataset, gallery, gallery_key, cond, spec.seed)
            r_feats = _reference_features(cache, model, queries, cond)
            t_feats = _text_features(cache, model, queries, cond)
            composed = model.compose(r_feats, t_feats)
            top, _, ranks = retrieve(composed, g_feats, targets, exclude, k=max(RECALL_KS), similarity=(
                None if type(model).similarity is _default_similarity() else model.similarity))
            results = _results(metric_names, ranks, subset_ranks(model.similarity, composed, g_feats, targets, subsets),
                               categories, n_queries)
            if cond.shift_name == "clean":
                clean_values[m] = {k: v[0] for k, v in results.items()}
            else:
                results.update(_gammas(results, clean_values.get(m)))
            if spec.log_samples:
                store.save_batch(cids[(m, ci)], 0, {}, predictions=[
                    (q.id, {"target": q.target_id, "rank": int(r), "top": [gallery.ids[j] for j in top[i, :TOPK_LOGGED]],
                            "text": q.text}) for i, (q, r) in enumerate(zip(queries, ranks))])
            store.finish_condition(cids[(m, ci)], results, n=n_queries)
            if on_batch is not None:
                on_batch(m, 0)
        say(f"{cond.shift_name} s{cond.severity}: {len(pending)} retrievers in {time.perf_counter() - t0:.1f} s")
    store.finish_run(run_id)
    return store.rows(run_id)


def _default_similarity():
    from ..models.retrieval import ComposedRetriever

    return ComposedRetriever.similarity


def _params_key(params: dict[str, Any]) -> str:
    from .store import canonical_json

    return canonical_json(params or {})


def _shifted_queries(queries: list[Query], cond: Condition, seed: int) -> list[Query]:
    if cond.shift_name == "clean":
        return queries
    from ..shifts.retrieval import corrupt_query

    if cond.shift.kind == "text":
        return [corrupt_query(q, cond.shift, cond.severity, seed) for q in queries]
    # a reference image shared by several queries is corrupted once (its draw is seeded by its image id)
    done: dict[str, Query] = {}
    out = []
    for q in queries:
        ref_id = q.reference.id
        if ref_id not in done:
            done[ref_id] = corrupt_query(q, cond.shift, cond.severity, seed)
        shifted = done[ref_id]
        out.append(q.replace(reference=shifted.reference, meta={**q.meta, "shift": shifted.meta["shift"]}))
    return out


def _gallery_features(cache: _Features, model: Any, dataset: Any, gallery: GalleryIndex, gallery_key: str,
                      cond: Condition, seed: int) -> np.ndarray:
    key = (model.gallery_key, gallery_key)
    if key not in cache.gallery:
        source = dataset
        if gallery_key != "clean":
            from ..shifts.retrieval import CorruptedRetrieval

            source = CorruptedRetrieval(dataset, cond.shift, cond.severity, seed, gallery=True)
        feats = []
        for start in range(0, len(gallery.ids), 256):  # bounded memory for large galleries
            images = [source.load_gallery(g).image for g in gallery.ids[start:start + 256]]
            feats.append(model.gallery_features(images))
        cache.gallery[key] = np.concatenate(feats).astype(np.float32)
    return cache.gallery[key]


def _reference_features(cache: _Features, model: Any, queries: list[Query], cond: Condition) -> np.ndarray:
    condition = "clean" if cond.shift_name == "clean" or cond.shift.kind == "text" else \
        f"{cond.shift_name}/{cond.severity}/{_params_key(cond.params)}"
    store = cache.references.setdefault((model.gallery_key, condition), {})
    todo: dict[str, Any] = {}
    for q in queries:
        if q.reference.id not in store and q.reference.id not in todo:
            todo[q.reference.id] = q.reference.image
    if todo:
        feats = model.image_features(list(todo.values()))
        store.update(zip(todo, feats))
    return np.stack([store[q.reference.id] for q in queries])


def _text_features(cache: _Features, model: Any, queries: list[Query], cond: Condition) -> np.ndarray:
    condition = "clean" if cond.shift_name == "clean" or cond.shift.kind != "text" else \
        f"{cond.shift_name}/{cond.severity}/{_params_key(cond.params)}"
    key = (model.text_key, condition)
    if key not in cache.texts:
        cache.texts[key] = model.text_features([q.text for q in queries])
    return cache.texts[key]


def _results(metric_names: list[str], ranks: np.ndarray, sub_ranks: list, categories: list, n: int) -> dict:
    results: dict[str, tuple] = {}
    for name in metric_names:
        metric = METRICS.create(name)
        metric.update({"ranks": ranks, "subset_ranks": sub_ranks})
        info = {"higher_is_better": bool(metric.higher_is_better), "metric": name}
        for key, value in metric.compute().items():
            results[key] = (None if not np.isfinite(value) else float(value), metric.n, info)
    if "recall" in metric_names:
        for category in sorted({c for c in categories if c}):
            sel = np.array([c == category for c in categories])
            for key, value in recall_at_k(ranks[sel], RECALL_KS).items():
                results[f"{key}[{category}]"] = (value, int(sel.sum()), {"higher_is_better": True, "metric": "recall",
                                                                         "category": category})
    return results


def _gammas(results: dict, clean: dict | None) -> dict:
    """gamma@K (and gamma_subset@K) against the clean values of the same retriever."""
    from ..metrics.retrieval import gamma

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


def _stored_clean(store: Store, run_id: str, dataset: str) -> dict[str, dict[str, float]]:
    """Clean values already in the store (a resumed run computes gammas against them)."""
    out: dict[str, dict[str, float]] = {}
    for row in store.rows(run_id):
        if row["shift"] == "clean" and row["dataset"] == dataset:
            out.setdefault(row["model"], {})[row["metric"]] = row["value"]
    return out
