"""The composed-retrieval evaluation: retrievers x (clean + shifts x severities) on a retrieval dataset -> store rows.

Called by the runner (engine/evaluate.py) when a spec's models are retrievers (``task="retrieval"``).
Per condition the queries stream in batches of ``batch_size``: a batch is loaded and corrupted
(reference images for image shifts, each distinct reference once; texts for text shifts), its features
are computed once per encoder and shared by every retriever that uses it, and ranked against the gallery
features (a batched matrix product with top-k). Gallery features are kept per image encoder (clean) and
in a small LRU (corrupted, with ``dataset_params.corrupt_gallery: true``). Each (retriever, condition,
batch) is one store transaction holding that batch's ranks, so a killed run resumes at the first unsaved
batch; a finished condition's rows come from its batches merged in order. With the ray engine, units of
(condition, query shard) run on Ray actors and this process stays the only store writer.

Rows: ``model`` = the retriever's label, ``R@K`` / ``R_subset@K`` / ``mean_rank`` / ``median_rank``,
per-category ``R@K[category]``, and for every shifted condition ``gamma@K`` = 1 - (R_clean - R) / R_clean
with the clean value in the row's ``extra``. The clean condition is ``clean``, severity 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..console import plural
from ..errors import ShiftbenchError, SpecError
from ..metrics.retrieval import RECALL_KS, recall_at_k
from ..registry import METRICS, MODELS
from ..sample import Query
from ..results.store import Store, params_key
from .spec import Spec
from ..tasks.retrieval import Ranked, Retrieval, reference_features
from .kernel import (COUNT_KEY, STATE_FORMAT, STATE_FORMAT_KEY, Condition, batches_per_unit, condition_ids,
                     current_batches, finish_complete, open_condition, plan_conditions, sample_records, shard_units,
                     shift_narrowed, start_run)

__all__ = ["run_retrieval", "setup_retrieval", "RetrievalSetup", "retrieve", "is_retrieval_spec", "GalleryIndex",
           "validate_queries", "GalleryCache", "score_batch", "merge_batches",
           "merge_samples"]

RETRIEVAL = Retrieval()  # the task: what a retriever computes per batch and records per query (tasks/retrieval.py)


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
CORRUPT_GALLERIES_KEPT = 2  # corrupted-gallery features kept at once (conditions run in order, so 1 suffices)
CLEAN_QUERY_BYTES = 256 << 20  # clean query features kept for reuse (beyond it a batch's are computed again)


class GalleryCache:
    """Gallery features of one run: the clean ones per image encoder (used by most conditions), corrupted
    ones (``corrupt_gallery: true``) in a small LRU, so a run over many conditions never holds a copy per
    condition."""

    def __init__(self, max_corrupted: int = CORRUPT_GALLERIES_KEPT) -> None:
        from collections import OrderedDict

        self.clean: dict[str, np.ndarray] = {}
        self.corrupted: "OrderedDict[tuple[str, str], np.ndarray]" = OrderedDict()
        self.max_corrupted = max_corrupted
        # clean features of a query batch per (encoder, "image" | "text", batch): a text shift reuses the clean
        # reference features, an image shift the clean text features (a few KB per query, within a budget)
        self.queries: dict[tuple[str, str, int], np.ndarray] = {}
        self.query_bytes = 0

    def query_features(self, key: tuple[str, str, int], compute: Callable[[], np.ndarray]) -> np.ndarray:
        if key in self.queries:
            return self.queries[key]
        feats = np.asarray(compute())
        if self.query_bytes + feats.nbytes <= CLEAN_QUERY_BYTES:
            self.queries[key] = feats
            self.query_bytes += feats.nbytes
        return feats

    def __len__(self) -> int:
        return len(self.clean) + len(self.corrupted)

    def features(self, model: Any, dataset: Any, gallery: "GalleryIndex", gallery_key: str, cond: Condition,
                 seed: int) -> np.ndarray:
        if gallery_key == "clean":
            if model.gallery_key not in self.clean:
                self.clean[model.gallery_key] = _compute_gallery(model, dataset, gallery)
            return self.clean[model.gallery_key]
        key = (model.gallery_key, gallery_key)
        if key in self.corrupted:
            self.corrupted.move_to_end(key)
            return self.corrupted[key]
        from ..shifts.retrieval import CorruptedRetrieval

        feats = _compute_gallery(model, CorruptedRetrieval(dataset, cond.shift, cond.severity, seed, gallery=True),
                                 gallery)
        self.corrupted[key] = feats
        while len(self.corrupted) > self.max_corrupted:
            self.corrupted.popitem(last=False)
        return feats


def _compute_gallery(model: Any, source: Any, gallery: "GalleryIndex") -> np.ndarray:
    feats = []
    for start in range(0, len(gallery.ids), 256):  # bounded memory for large galleries
        images = [source.load_gallery(g).image for g in gallery.ids[start:start + 256]]
        feats.append(model.gallery_features(images))
    return np.concatenate(feats).astype(np.float32)


@dataclass
class RetrievalSetup:
    """A retrieval run set up and checked, nothing computed (the runner's ``prepare`` for retrievers).
    Queries are kept as small metadata (ids, indices, categories): their images are loaded batch by batch."""

    dataset: Any
    corrupt_gallery: bool
    n_queries: int
    models: dict[str, Any]
    metric_names: list[str]
    gallery: "GalleryIndex"
    query_ids: list[str]
    targets: np.ndarray
    exclude: np.ndarray
    subsets: list
    categories: list


def setup_retrieval(spec: Spec, given_models: dict[str, Any] | None = None) -> RetrievalSetup:
    """Open the retrieval dataset, load the retrievers, check the metrics and every query (one at a time:
    only each query's ids, indices and category are kept)."""
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
    if not metric_names:  # a spec without metrics: the retrieval task's defaults (recall, recall_subset, rank)
        from ..tasks import task_of

        first = next(iter(models.values()))
        metric_names = list(task_of(first, next(iter(models)), runner="retrieval").metrics_for(first))
    for name in metric_names:
        metric = METRICS.create(name)
        try:
            check_task(metric, next(iter(models.values())))
        except ShiftbenchError as exc:
            raise SpecError(f"metrics: {exc}") from None

    gallery = GalleryIndex.of(dataset)
    # queries without a category (CIRR) get the CIRR-D keyword category of their text, for R@K[category]
    from ..shifts.retrieval import primary_category

    ids, targets, exclude, subsets, categories = [], [], [], [], []
    for i in range(n_queries):
        q = dataset.load(i)
        t, ex, sub = validate_queries([q], gallery)
        ids.append(str(q.id))
        targets.append(int(t[0]))
        exclude.append(int(ex[0]))
        subsets.extend(sub)
        categories.append(q.category or primary_category(q.text))
    return RetrievalSetup(dataset, corrupt_gallery, n_queries, models, metric_names, gallery, ids,
                          np.array(targets, np.int64), np.array(exclude, np.int64), subsets, categories)


class _QueryIds:
    """The queries a run reads, as the identity's dataset fingerprint sees them (their ids)."""

    def __init__(self, query_ids: list[str], gallery: "GalleryIndex"):
        self.ids = list(query_ids) + [f"gallery:{g}" for g in gallery.ids]

    def __len__(self) -> int:
        return len(self.ids)

    def sample_id(self, i: int) -> str:
        return self.ids[i]


def score_batch(setup: RetrievalSetup, cond: Condition, b: int, labels: Sequence[str], spec: Spec,
                cache: GalleryCache) -> list[tuple[str, dict[str, Any], list | None]]:
    """Batch ``b`` of the queries under ``cond``, ranked by each retriever in ``labels``: (label, state to
    save, predictions or None). The state holds the batch's target ranks and subset ranks; a condition's
    rows are computed from its batches merged in order (:func:`merge_batches`)."""
    batch = spec.batch_size
    idx = range(b * batch, min((b + 1) * batch, setup.n_queries))
    queries = _shifted_queries([setup.dataset.load(i) for i in idx], cond, spec.seed)
    targets, exclude = setup.targets[idx.start:idx.stop], setup.exclude[idx.start:idx.stop]
    subsets = setup.subsets[idx.start:idx.stop]
    gallery_key = "clean" if (cond.shift_name == "clean" or not setup.corrupt_gallery or cond.shift.kind == "text") \
        else f"{cond.shift_name}/{cond.severity}/{params_key(cond.params)}"
    clean_refs = cond.shift_name == "clean" or cond.shift.kind == "text"
    clean_texts = cond.shift_name == "clean" or cond.shift.kind != "text"
    refs: dict[str, np.ndarray] = {}  # per image encoder, for this batch: retrievers sharing one encode once
    texts: dict[str, np.ndarray] = {}
    out = []
    for m in labels:
        model = setup.models[m]
        g_feats = cache.features(model, setup.dataset, setup.gallery, gallery_key, cond, spec.seed)
        if model.gallery_key not in refs:
            if clean_refs:
                refs[model.gallery_key] = cache.query_features((model.gallery_key, "image", b),
                                                               lambda: reference_features(model, queries))
            else:
                refs[model.gallery_key] = reference_features(model, queries)
        if model.text_key not in texts:
            if clean_texts:
                texts[model.text_key] = cache.query_features((model.text_key, "text", b),
                                                             lambda: model.text_features([q.text for q in queries]))
            else:
                texts[model.text_key] = model.text_features([q.text for q in queries])
        composed = model.compose(refs[model.gallery_key], texts[model.text_key])
        top, _, ranks = retrieve(composed, g_feats, targets, exclude, k=max(RECALL_KS), similarity=(
            None if type(model).similarity is _default_similarity() else model.similarity))
        sub = subset_ranks(model.similarity, composed, g_feats, targets, subsets)
        state = {"ranks": [int(r) for r in ranks], "subset_ranks": sub, STATE_FORMAT_KEY: STATE_FORMAT,
                 COUNT_KEY: len(queries)}
        predictions = None
        if spec.log_samples:
            ranked = Ranked(ranks, top, setup.gallery.ids)
            predictions = [(q.id, RETRIEVAL.record(ranked, i, q, model)) for i, q in enumerate(queries)]
        out.append((m, state, predictions))
    return out


def merge_batches(setup: RetrievalSetup, states: dict[int, dict[str, Any]]) -> dict[str, tuple]:
    """A condition's results from its batches' states, merged in batch order."""
    order = sorted(states)
    ranks = np.array([r for b in order for r in states[b]["ranks"]], np.int64)
    sub = [r for b in order for r in states[b]["subset_ranks"]]
    return _results(setup.metric_names, ranks, sub, setup.categories, len(ranks))


def merge_samples(setup: RetrievalSetup, states: dict[int, dict[str, Any]]) -> dict[str, tuple]:
    """A condition's per-sample values (row metric -> (kind, query ids, values)) from its batches' states,
    merged in batch order: the batches cover the queries in order, so their ids are the setup's."""
    order = sorted(states)
    ranks = [r for b in order for r in states[b]["ranks"]]
    sub = [r for b in order for r in states[b]["subset_ranks"]]
    ids = setup.query_ids[:len(ranks)]
    out: dict[str, tuple] = {}
    for name in setup.metric_names:
        metric = METRICS.create(name)
        metric.update({"ranks": ranks, "subset_ranks": sub})
        out.update(sample_records(metric, ids, f"retrieval {name}"))
    return out


class _Finisher:
    """Writes a finished (retriever, condition): a shifted condition's gammas need that retriever's clean
    values, so it is held until its clean condition is finished (units may finish out of order)."""

    def __init__(self, store: Store, setup: RetrievalSetup, conditions: list[Condition], cids: dict,
                 clean_values: dict) -> None:
        self.store, self.setup, self.conditions, self.cids = store, setup, conditions, cids
        self.clean_values = clean_values
        clean = [i for i, c in enumerate(conditions) if c.shift_name == "clean"]
        self.clean_ci = clean[0] if clean else None
        self.held: dict[str, list[tuple[int, dict, dict]]] = {}

    def _clean_pending(self, m: str) -> bool:
        return self.clean_ci is not None and not self.store.is_done(self.cids[(m, self.clean_ci)])

    def complete(self, m: str, ci: int, states: dict[int, dict[str, Any]]) -> None:
        results = merge_batches(self.setup, states)
        samples = merge_samples(self.setup, states)
        if self.conditions[ci].shift_name == "clean":
            self.clean_values[m] = {k: v[0] for k, v in results.items()}
            self.store.finish_condition(self.cids[(m, ci)], results, n=self.setup.n_queries, samples=samples)
            for hci, hresults, hsamples in self.held.pop(m, []):
                hresults.update(_gammas(hresults, self.clean_values.get(m)))
                self.store.finish_condition(self.cids[(m, hci)], hresults, n=self.setup.n_queries, samples=hsamples)
        elif self._clean_pending(m):
            self.held.setdefault(m, []).append((ci, results, samples))
        else:
            results.update(_gammas(results, self.clean_values.get(m)))
            self.store.finish_condition(self.cids[(m, ci)], results, n=self.setup.n_queries, samples=samples)

    def close(self) -> None:
        for m, items in self.held.items():  # only when the clean condition never finished (cannot happen)
            for ci, results, samples in items:
                self.store.finish_condition(self.cids[(m, ci)], results, n=self.setup.n_queries, samples=samples)
        self.held.clear()


def _restore(store: Store, cid: int) -> dict[int, dict[str, Any]]:
    """The batches saved for a condition before a kill; saved by an older shiftbench (one state for all
    queries, or none) they are dropped and the condition starts again."""
    return current_batches(store, cid, lambda state: "ranks" in state)[0]


def _pending(store: Store, cids: dict, ci: int, models: dict[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    """The retrievers that still need condition ``ci``, each with its batches saved before a kill."""
    return open_condition(store, cids, ci, models, lambda m, cid: _restore(store, cid))


def run_retrieval(spec: Spec, store: Store, run_id: str | None = None, progress: bool = False,
                  given_models: dict[str, Any] | None = None, setup: RetrievalSetup | None = None,
                  new_run: bool = False, on_start: Any = None,
                  on_batch: Callable[[str, int], None] | None = None,
                  cache: GalleryCache | None = None) -> list[dict[str, Any]]:
    """Evaluate a retrieval spec into ``store``; returns the run's rows. A run resumes only when its
    identity (weights, dataset files, version; engine/identity.py) is unchanged, or with ``new_run``.
    Queries go in batches of ``spec.batch_size``, each (retriever, condition, batch) saved on its own, so a
    killed run resumes at the first unsaved batch; ``on_batch(model, batch)`` is called after each save.
    The spec's engine ``ray`` runs (condition, query shard) units on Ray actors; the rows are the local
    engine's."""
    from .identity import run_identity

    setup = setup or setup_retrieval(spec, given_models)
    identity = run_identity(spec, _QueryIds(setup.query_ids, setup.gallery), setup.models)
    run_id = start_run(store, spec, identity, run_id, new_run)
    if on_start is not None:
        on_start(run_id)
    conditions = plan_conditions(spec)
    models = setup.models
    cids = condition_ids(store, run_id, spec.dataset, models, conditions)
    finisher = _Finisher(store, setup, conditions, cids, _stored_clean(store, run_id, spec.dataset))
    n_batches = (setup.n_queries + spec.batch_size - 1) // spec.batch_size
    say = (lambda msg: print(msg, flush=True)) if progress else (lambda msg: None)
    if spec.engine.ray:
        _run_ray(spec, store, setup, conditions, cids, finisher, n_batches, dict(given_models or {}), on_batch)
    else:
        cache = cache if cache is not None else GalleryCache()
        for ci, cond in enumerate(conditions):
            pending = _pending(store, cids, ci, models)
            if not pending:
                continue
            t0 = time.perf_counter()
            for b in range(n_batches):
                labels = [m for m, saved in pending.items() if b not in saved]
                for m, state, predictions in (score_batch(setup, cond, b, labels, spec, cache) if labels else []):
                    store.save_batch(cids[(m, ci)], b, state, predictions=predictions)
                    pending[m][b] = state
                    if on_batch is not None:
                        on_batch(m, b)
            for m, saved in pending.items():
                finisher.complete(m, ci, saved)
            say(f"{cond.shift_name} s{cond.severity}: {plural(len(pending), 'retriever')} in "
                f"{time.perf_counter() - t0:.1f} s")
    finisher.close()
    store.finish_run(run_id)
    return store.rows(run_id)


# -- the ray engine -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _RetrievalUnit:
    setup: Any  # an engine handle to the engines.WorkerSetup
    ci: int
    batches: tuple[int, ...]
    needs: tuple[tuple[str, tuple[int, ...]], ...]  # (retriever label, the batches it still needs)


def _worker_setup(handle: Any) -> tuple[Spec, RetrievalSetup, list[Condition], GalleryCache]:
    """The run set up once on this worker (dataset opened, retrievers loaded, gallery cache), reused by
    every later unit of the run."""
    from .engines import worker_state

    return worker_state(handle, lambda ws: (ws.spec, setup_retrieval(ws.spec, ws.models), plan_conditions(ws.spec),
                                            GalleryCache()))


def _run_retrieval_unit(unit: _RetrievalUnit) -> list[tuple[str, int, dict[str, Any], list | None]]:
    """Score a unit's batches with every retriever that needs them (runs on a worker)."""
    spec, setup, conditions, cache = _worker_setup(unit.setup)
    needs = dict(unit.needs)
    out = []
    for b in unit.batches:
        labels = [m for m, bs in needs.items() if b in bs]
        for m, state, predictions in score_batch(setup, conditions[unit.ci], b, labels, spec, cache):
            out.append((m, b, state, predictions))
    return out


def _run_ray(spec: Spec, store: Store, setup: RetrievalSetup, conditions: list[Condition], cids: dict,
             finisher: _Finisher, n_batches: int, given_models: dict[str, Any],
             on_batch: Callable[[str, int], None] | None) -> None:
    """Units of (condition, query shard) on Ray actors; the results come back here, the only writer of the
    store, saved batch by batch as the local loop saves them."""
    import os
    import uuid

    from .engines import WorkerSetup, make_engine, user_modules

    per_unit = batches_per_unit(spec.engine.shard_size, spec.batch_size)
    # modules outside shiftbench that register the run's dataset, shift or retriever classes: a fresh
    # worker imports them first, so what the user registered by name is registered there too
    modules = user_modules([setup.dataset, *setup.models.values(), *(c.shift for c in conditions)])
    ws = WorkerSetup(uuid.uuid4().hex, spec, given_models, modules, os.getcwd())
    open_: dict[int, dict[str, dict[int, dict]]] = {}
    workers = spec.engine.workers
    with make_engine("ray", workers=int(workers) if workers else 1, address=spec.engine.address) as eng:
        handle = eng.share(ws)

        def finish(ci: int, m: str, saved: dict[int, dict]) -> None:
            finisher.complete(m, ci, saved)

        units = (_RetrievalUnit(handle, ci, chunk, needs) for ci, chunk, needs in shard_units(
            conditions, lambda ci, cond: _pending(store, cids, ci, setup.models), lambda saved: saved, n_batches,
            per_unit, finish, open_))
        for unit, scored in eng.imap(_run_retrieval_unit, units, stage="model"):
            pending = open_[unit.ci]
            for m, b, state, predictions in scored:
                store.save_batch(cids[(m, unit.ci)], b, state, predictions=predictions)
                pending[m][b] = state
                if on_batch is not None:
                    on_batch(m, b)
            finish_complete(open_, unit.ci, n_batches, len, finish)


def _default_similarity():
    from ..models.retrieval import ComposedRetriever

    return ComposedRetriever.similarity


def _shifted_queries(queries: list[Query], cond: Condition, seed: int) -> list[Query]:
    """A batch of queries shifted for ``cond`` (the reference image or the text). A failure is narrowed to
    the query it fails on by the kernel (:func:`~shiftbench.engine.kernel.shift_narrowed`) and stops the
    run naming it: a composed-retrieval run scores every query or none (recall's denominator is the
    query set), so there is no ``on_error: skip`` here."""
    if cond.shift_name == "clean":
        return queries
    from ..shifts.retrieval import corrupt_query

    def run(batch: list[Query]) -> tuple[list[Query], list[None]]:
        if cond.shift.kind == "text":
            return [corrupt_query(q, cond.shift, cond.severity, seed) for q in batch], [None] * len(batch)
        # a reference image shared by several queries is corrupted once (its draw is seeded by its image
        # id, so it is the same in any batch)
        done: dict[str, Query] = {}
        out = []
        for q in batch:
            ref_id = q.reference.id
            if ref_id not in done:
                done[ref_id] = corrupt_query(q, cond.shift, cond.severity, seed)
            shifted = done[ref_id]
            out.append(q.replace(reference=shifted.reference, meta={**q.meta, "shift": shifted.meta["shift"]}))
        return out, [None] * len(batch)

    _, out, _, _ = shift_narrowed(run, queries, "fail", f"evaluate: shift {cond.shift_name!r} (severity {cond.severity})")
    return out


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
