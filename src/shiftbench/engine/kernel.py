"""The run kernel's first piece: what every runner of a spec shares, below the runners themselves.

The evaluation runner (engine/evaluate.py), the composed-retrieval runner (engine/retrieval.py) and the
steps that follow a run (engine/quality.py, engine/analysis.py) import it; it imports none of them.

- :class:`Condition` and :class:`Plan`: one planned condition, and a run set up and checked;
  :func:`plan_conditions` lists a spec's conditions in run order.
- The keys of a saved batch's state (:data:`STATE_FORMAT_KEY` and the rest): what a resumed run reads.
- The run in the store: :func:`start_run`, :func:`condition_ids`, and restore: :func:`open_condition`
  (the models that still need a condition, their saved batches restored), :func:`current_batches` (saved
  batches, or none when an older shiftbench wrote them) and :func:`batches_needed`.
- The ray engine's units of (condition, shard): :func:`batches_per_unit`, :func:`shard_units` and
  :func:`finish_complete`, which finishes a condition once every batch of it is back.
- Finish: :func:`sample_records`, a metric's per-sample values paired with the sample ids.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Container, Iterable, Iterator, Sequence, TypeVar

import numpy as np

from ..registry import SHIFTS
from ..results.store import ConditionKey, Store
from ..spec import Spec
from . import DEFAULT_SHARD

__all__ = ["Condition", "Plan", "plan_conditions", "STATE_FORMAT_KEY", "STATE_FORMAT", "COUNT_KEY", "SKIPPED_KEY",
           "IDS_KEY", "start_run", "condition_ids", "open_condition", "current_batches", "batches_needed",
           "batches_per_unit", "shard_units", "finish_complete", "sample_records"]

# every saved batch carries this key: its metric states are of that batch alone and merge. A store
# written before (each batch holding the cumulative state) lacks it, and such a partial condition is
# recomputed rather than mis-merged
STATE_FORMAT_KEY = "__state_format__"
STATE_FORMAT = "batch-merge/1"
COUNT_KEY = "__n__"  # samples scored in the batch (fewer than its size when a shift failed on one, on_error: skip)
SKIPPED_KEY = "__skipped__"  # [[sample id, reason], ...] left out of the batch
IDS_KEY = "__ids__"  # ids of the samples scored in the batch, in data order (the per-sample values' ids)

log = logging.getLogger("shiftbench")

Held = TypeVar("Held")  # what a runner holds of a (model, condition) being computed


@dataclass
class Condition:
    """One planned condition of a run: a shift (``clean`` included) with its params and severity."""

    shift_name: str
    params: dict[str, Any]
    severity: int
    shift: Any
    index: int | None = None  # the entry of the spec's shifts list it comes from (for messages)


@dataclass
class Plan:
    """A run set up and checked, nothing run: the dataset opened, every model loaded, the metrics
    checked against each model's task, every shift created with its conditioning (mask providers,
    captioners, pipelines) loaded, and every condition's params drawn on the first batch (what a shift asks
    of a sample: a mask, contexts, a caption, a size). ``prepare`` builds it for the real run and for
    ``--dry-run`` alike, so a dry run that passes means the first batch of every condition can run."""

    spec: Spec
    dataset: Any
    models: dict[str, Any]
    metrics: dict[str, list[str]]
    conditions: list[Condition]
    retrieval: Any = None  # the composed-retrieval setup (engine/retrieval.py) for a spec of retrievers

    @property
    def samples(self) -> int:
        return self.retrieval.n_queries if self.retrieval is not None else len(self.dataset)

    def identity(self) -> dict[str, Any]:
        """What besides the spec decides the numbers (engine/identity.py): version, weights, data, ids."""
        from .identity import run_identity

        return run_identity(self.spec, self.dataset, self.models)


def plan_conditions(spec: Spec) -> list[Condition]:
    """Every condition of the spec in run order: each shifts entry (``clean`` included), each severity."""
    out = []
    for s in spec.shifts:
        shift = SHIFTS.create(s.name, **s.params)
        for severity in s.severities:
            out.append(Condition(s.name, dict(s.params), severity, shift, s.index))
    return out


# -- the run in the store -------------------------------------------------------------------------
def start_run(store: Store, spec: Spec, identity: dict[str, Any], run_id: str | None, new_run: bool) -> str:
    """Open (or resume) the spec's run in the store, with the versions and git hash it runs under."""
    from .provenance import git_hash, versions

    return store.start_run(spec.raw, spec.seed, run_id=run_id, versions=versions(), git_hash=git_hash(),
                           name=spec.name, identity=identity, new_run=new_run)


def condition_ids(store: Store, run_id: str, dataset: str, models: Iterable[str],
                  conditions: Sequence[Condition]) -> dict[tuple[str, int], int]:
    """The store's id of every (model label, condition index), model by model."""
    return {(m, i): store.condition(run_id, ConditionKey(m, dataset, c.shift_name, c.params, c.severity))
            for m in models for i, c in enumerate(conditions)}


def open_condition(store: Store, cids: dict[tuple[str, int], int], ci: int, models: Iterable[str],
                   restore: Callable[[str, int], Held]) -> dict[str, Held]:
    """The models that still need condition ``ci`` (in model order), each with ``restore(model, cid)``:
    what the runner holds of its batches saved before a kill."""
    return {m: restore(m, cids[(m, ci)]) for m in models if not store.is_done(cids[(m, ci)])}


def current_batches(store: Store, cid: int,
                    complete: Callable[[dict[str, Any]], bool] | None = None) -> tuple[dict[int, Any], int | None]:
    """The batches saved for a condition, and ``None``; or, when any of them was saved by an older
    shiftbench (no :data:`STATE_FORMAT`, or not ``complete``), none and how many were dropped: those
    batches and their predictions go, and the condition starts again."""
    saved = store.batches(cid)
    if any(s.get(STATE_FORMAT_KEY) != STATE_FORMAT or (complete is not None and not complete(s))
           for s in saved.values()):
        return {}, store.clear_batches(cid)
    return saved, None


def batches_needed(n_batches: int, saved: Iterable[Container[int]]) -> list[int]:
    """The batches that any of the models still needs (``saved``: each model's saved batches)."""
    saved = list(saved)
    return [b for b in range(n_batches) if any(b not in s for s in saved)]


# -- units of the ray engine ----------------------------------------------------------------------
def batches_per_unit(shard_size: Any, batch_size: int) -> int:
    """Whole batches per (condition, shard) unit: ``shard_size`` samples (default :data:`DEFAULT_SHARD`)
    rounded down, at least one."""
    return max(1, int(shard_size or DEFAULT_SHARD) // batch_size)


def shard_units(conditions: Sequence[Condition], open_: Callable[[int, Condition], dict[str, Held]],
                saved_of: Callable[[Held], Container[int]], n_batches: int, per_unit: int,
                finish: Callable[[int, str, Held], None],
                held: dict[int, dict[str, Held]]) -> Iterator[tuple[int, tuple[int, ...], tuple]]:
    """The units of a run, lazily: (condition index, its batches, ((model, the batches it still needs), ...)).

    ``open_(ci, condition)`` gives the models that still need a condition (:func:`open_condition`); a
    condition whose batches were all saved before a kill is finished at once (``finish(ci, model, what is
    held)``: only the merge is left); any other is kept in ``held`` until its units are back (see
    :func:`finish_complete`)."""
    for ci, cond in enumerate(conditions):
        pending = open_(ci, cond)
        if not pending:
            continue
        needed = batches_needed(n_batches, (saved_of(h) for h in pending.values()))
        if not needed:  # every batch was saved before a kill: only the merge is left
            for m, h in pending.items():
                finish(ci, m, h)
            continue
        held[ci] = pending
        for start in range(0, len(needed), per_unit):
            chunk = tuple(needed[start:start + per_unit])
            yield ci, chunk, tuple((m, tuple(b for b in chunk if b not in saved_of(h))) for m, h in pending.items())


def finish_complete(held: dict[int, dict[str, Held]], ci: int, n_batches: int, saved_count: Callable[[Held], int],
                    finish: Callable[[int, str, Held], None]) -> None:
    """Finish every model of condition ``ci`` whose ``n_batches`` batches are all saved (in model order);
    the condition is forgotten once none is left."""
    pending = held[ci]
    for m in list(pending):
        if saved_count(pending[m]) == n_batches:
            finish(ci, m, pending.pop(m))
    if not pending:
        del held[ci]


# -- finish -------------------------------------------------------------------------------------
def sample_records(metric: Any, ids: Sequence[str], where: str = "") -> dict[str, tuple[str, list[str], np.ndarray]]:
    """A metric's per-sample values paired with the sample ids (data order) for ``Store.finish_condition``:
    row metric -> (kind, ids, values). Rows of NaN (a query without a subset) go together with their ids.
    A metric whose records do not line up with the ids (states saved by an older shiftbench) gives
    nothing, said once in the log, rather than values paired with the wrong samples."""
    per_sample = metric.per_sample() if hasattr(metric, "per_sample") else {}
    out: dict[str, tuple[str, list[str], np.ndarray]] = {}
    for key, (kind, values) in per_sample.items():
        values = np.asarray(values, dtype=np.float64)
        if len(values) != len(ids):
            log.warning(f"{where}: {key}: {len(values)} per-sample values for {len(ids)} samples; "
                        f"not stored (the report shows its n only)")
            continue
        if not len(values):
            continue
        scored = ~np.isnan(values.reshape(len(values), -1)).any(axis=1)
        out[key] = (kind, [str(i) for i, keep in zip(ids, scored) if keep], values[scored])
    return out
