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

import os
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..console import plural
from ..datasets import load
from ..errors import ShiftbenchError, SpecError
from ..metrics.base import check_task
from ..metrics.retrieval import RECALL_KS, condition_results, gamma_results
from ..models.retrieval import ComposedRetriever
from ..registry import METRICS, MODELS
from ..results.store import Store, params_key
from ..sample import Query
from ..shifts.retrieval import CorruptedRetrieval, corrupt_query, primary_category
from ..tasks import task_of
from ..tasks.retrieval import Ranked, Retrieval, reference_features, retrieve, subset_ranks
from .engines import WorkerSetup, make_engine, user_modules, worker_state
from .identity import run_identity
from .kernel import (COUNT_KEY, STATE_FORMAT, STATE_FORMAT_KEY, Planned, RunCall, Scored, TaskRun, Unit, batches_per_unit,
                     condition_ids, current_batches, plan_conditions, run_local, run_units, sample_records,
                     shift_narrowed, start_run)
from .spec import Spec

__all__ = ["run_retrieval", "setup_retrieval", "RetrievalSetup", "is_retrieval_spec", "GalleryIndex",
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


# -- the run ------------------------------------------------------------------------------------------
CORRUPT_GALLERIES_KEPT = 2  # corrupted-gallery features kept at once (conditions run in order, so 1 suffices)
CLEAN_QUERY_BYTES = 256 << 20  # clean query features kept for reuse (beyond it a batch's are computed again)


class GalleryCache:
    """Gallery features of one run: the clean ones per image encoder (used by most conditions), corrupted
    ones (``corrupt_gallery: true``) in a small LRU, so a run over many conditions never holds a copy per
    condition."""

    def __init__(self, max_corrupted: int = CORRUPT_GALLERIES_KEPT) -> None:
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

    def features(self, model: Any, dataset: Any, gallery: "GalleryIndex", gallery_key: str, cond: Planned,
                 seed: int) -> np.ndarray:
        if gallery_key == "clean":
            if model.gallery_key not in self.clean:
                self.clean[model.gallery_key] = _compute_gallery(model, dataset, gallery)
            return self.clean[model.gallery_key]
        key = (model.gallery_key, gallery_key)
        if key in self.corrupted:
            self.corrupted.move_to_end(key)
            return self.corrupted[key]
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


def score_batch(setup: RetrievalSetup, cond: Planned, b: int, labels: Sequence[str], spec: Spec,
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
            None if type(model).similarity is ComposedRetriever.similarity else model.similarity))
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
    return condition_results(setup.metric_names, ranks, sub, setup.categories, len(ranks))


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

    def __init__(self, store: Store, setup: RetrievalSetup, conditions: list[Planned], cids: dict,
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
                hresults.update(gamma_results(hresults, self.clean_values.get(m)))
                self.store.finish_condition(self.cids[(m, hci)], hresults, n=self.setup.n_queries, samples=hsamples)
        elif self._clean_pending(m):
            self.held.setdefault(m, []).append((ci, results, samples))
        else:
            results.update(gamma_results(results, self.clean_values.get(m)))
            self.store.finish_condition(self.cids[(m, ci)], results, n=self.setup.n_queries, samples=samples)

    def close(self) -> None:
        for m, items in self.held.items():  # only when the clean condition never finished (cannot happen)
            for ci, results, samples in items:
                self.store.finish_condition(self.cids[(m, ci)], results, n=self.setup.n_queries, samples=samples)
        self.held.clear()


class _Retrieval(TaskRun):
    """Composed retrieval's scoring part for the kernel's loop: a batch of queries shifted once, its features
    computed once per encoder and ranked by every retriever that needs it; a (retriever, condition) finished by
    the :class:`_Finisher` (its gammas need the clean values)."""

    def __init__(self, spec: Spec, store: Store, setup: RetrievalSetup, cids: dict, finisher: _Finisher,
                 call: RunCall, cache: GalleryCache) -> None:
        self.spec, self.store, self.setup, self.cids, self.finisher = spec, store, setup, cids, finisher
        self.call, self.cache, self.models = call, cache, list(setup.models)
        self.n_batches = (setup.n_queries + spec.batch_size - 1) // spec.batch_size
        self.started: dict[int, float] = {}  # condition -> when it was opened (the progress line's time)

    def restore(self, ci: int, cond: Planned, model: str, cid: int) -> dict[int, dict[str, Any]]:
        self.started.setdefault(ci, time.perf_counter())
        # batches an older shiftbench saved (one state for all queries, or none) are dropped: the condition restarts
        return current_batches(self.store, cid, lambda state: "ranks" in state)[0]

    def saved(self, held: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
        return held

    def score(self, cond: Planned, b: int, loaded: Any, models: Sequence[str]) -> list[Scored]:
        return [Scored(m, b, state, predictions, state[COUNT_KEY], []) for m, state, predictions in
                score_batch(self.setup, cond, b, models, self.spec, self.cache)]

    def save(self, ci: int, scored: Scored, held: dict[int, dict[str, Any]]) -> None:
        self.store.save_batch(self.cids[(scored.model, ci)], scored.batch, scored.states, predictions=scored.predictions)
        held[scored.batch] = scored.states
        if self.call.on_batch is not None:
            self.call.on_batch(scored.model, scored.batch)

    def finish(self, ci: int, model: str, held: dict[int, dict[str, Any]]) -> None:
        self.finisher.complete(model, ci, held)

    def condition_done(self, ci: int, cond: Planned, models: Sequence[str]) -> None:
        if self.call.progress:
            print(f"{cond.shift_name} s{cond.severity}: {plural(len(models), 'retriever')} in "
                  f"{time.perf_counter() - self.started.pop(ci):.1f} s", flush=True)


def run_retrieval(spec: Spec, store: Store, call: RunCall | None = None, setup: RetrievalSetup | None = None,
                  cache: GalleryCache | None = None) -> list[dict[str, Any]]:
    """Evaluate a retrieval spec into ``store`` on the kernel's loop; returns the run's rows. A run resumes only
    when its identity (weights, dataset files, version; engine/identity.py) is unchanged, or with
    ``call.new_run``. Queries go in batches of ``spec.batch_size``, each (retriever, condition, batch) saved on
    its own, so a killed run resumes at the first unsaved batch; ``call.on_batch(model, batch)`` is called after
    each save. The spec's engine ``ray`` runs (condition, query shard) units on Ray actors; the rows are the
    local engine's."""
    call = call or RunCall()
    setup = setup or setup_retrieval(spec, call.models)
    identity = run_identity(spec, _QueryIds(setup.query_ids, setup.gallery), setup.models)
    run_id = start_run(store, spec, identity, call.run_id, call.new_run)
    if call.on_start is not None:
        call.on_start(run_id)
    conditions = plan_conditions(spec)
    cids = condition_ids(store, run_id, spec.dataset, setup.models, conditions)
    finisher = _Finisher(store, setup, conditions, cids, _stored_clean(store, run_id, spec.dataset))
    task = _Retrieval(spec, store, setup, cids, finisher, call, cache if cache is not None else GalleryCache())
    if spec.engine.ray:
        _run_ray(spec, task, conditions)
    else:
        run_local(store, task, conditions)
    finisher.close()
    store.finish_run(run_id)
    return store.rows(run_id)


# -- the ray engine -----------------------------------------------------------------------------------
def _worker_setup(handle: Any) -> tuple[Spec, RetrievalSetup, list[Planned], GalleryCache]:
    """The run set up once on this worker (dataset opened, retrievers loaded, gallery cache), reused by
    every later unit of the run."""
    return worker_state(handle, lambda ws: (ws.spec, setup_retrieval(ws.spec, ws.models), plan_conditions(ws.spec),
                                            GalleryCache()))


def _run_retrieval_unit(unit: Unit) -> tuple[list[Scored], list]:
    """Score a unit's batches with every retriever that needs them (runs on a worker)."""
    spec, setup, conditions, cache = _worker_setup(unit.setup)
    needs = dict(unit.needs)
    out = []
    for b in unit.batches:
        labels = [m for m, bs in needs.items() if b in bs]
        for m, state, predictions in score_batch(setup, conditions[unit.ci], b, labels, spec, cache):
            out.append(Scored(m, b, state, predictions, state[COUNT_KEY], []))
    return out, []


def _run_ray(spec: Spec, task: _Retrieval, conditions: list[Planned]) -> None:
    """Units of (condition, query shard) on Ray actors; the results come back here, the only writer of the
    store, saved batch by batch as the local loop saves them."""
    per_unit = batches_per_unit(spec.engine.shard_size, spec.batch_size)
    # modules outside shiftbench that register the run's dataset, shift or retriever classes: a fresh
    # worker imports them first, so what the user registered by name is registered there too
    setup = task.setup
    modules = user_modules([setup.dataset, *setup.models.values(), *(c.shift for c in conditions)])
    ws = WorkerSetup(uuid.uuid4().hex, spec, dict(task.call.models), modules, os.getcwd())
    workers = spec.engine.workers
    with make_engine("ray", workers=int(workers) if workers else 1, address=spec.engine.address) as eng:
        run_units(task.store, task, conditions, eng, eng.share(ws), _run_retrieval_unit, per_unit)


def _shifted_queries(queries: list[Query], cond: Planned, seed: int) -> list[Query]:
    """A batch of queries shifted for ``cond`` (the reference image or the text). A failure is narrowed to
    the query it fails on by the kernel (:func:`~shiftbench.engine.kernel.shift_narrowed`) and stops the
    run naming it: a composed-retrieval run scores every query or none (recall's denominator is the
    query set), so there is no ``on_error: skip`` here."""
    if cond.shift_name == "clean":
        return queries
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


def _stored_clean(store: Store, run_id: str, dataset: str) -> dict[str, dict[str, float]]:
    """Clean values already in the store (a resumed run computes gammas against them)."""
    out: dict[str, dict[str, float]] = {}
    for row in store.rows(run_id):
        if row["shift"] == "clean" and row["dataset"] == dataset:
            out.setdefault(row["model"], {})[row["metric"]] = row["value"]
    return out
