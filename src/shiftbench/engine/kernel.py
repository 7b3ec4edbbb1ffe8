"""The run kernel: what every runner and step shares, below them all.

The evaluation runner (engine/evaluate.py), the composed-retrieval runner (engine/retrieval.py), the steps
(engine/curate.py, engine/quality.py; engine/analysis.py through ``Plan.loader``) and ``generate`` use it;
it imports none of them.

- the run's conditions (shiftbench.condition), each paired with its shift object (:class:`Planned`), and
  :class:`Plan`: a run set up and checked;
  :func:`plan_conditions` lists a spec's conditions in run order.
- The keys of a saved batch's state (:data:`STATE_FORMAT_KEY` and the rest): what a resumed run reads.
- The run in the store: :func:`start_run`, :func:`condition_ids`, :func:`current_batches` (saved batches,
  or none when an older shiftbench wrote them).
- The runner loop, local (:func:`run_local`) and on Ray (:func:`run_units`, in :class:`Unit` s of
  :func:`batches_per_unit` batches), driving a task's scoring part (:class:`TaskRun`) with a call's options
  (:class:`RunCall`): restore, load, score, save, finish. Under both the engine's (:func:`drive`), which
  ``generate`` runs its jobs through too: units mapped on the workers, results saved by the driver alone.
- The loader: :class:`Loader` gives every step of a run (evaluation, quality, analysis, curation) its
  batches of a condition, shifted with the run's seed, with ``on_error: skip`` and ``pixels: device``
  applied the same way for all of them (:class:`Batch`); :func:`shift_narrowed` redoes a failed batch
  sample by sample to name (or, with skip, leave out) the sample it fails on; :func:`error_reason`.
- A (model, condition) being computed: :class:`Held` (its mergers, the batches in them, samples scored
  and skipped), restored from the store by :func:`restore_held`, grown by :func:`save_scored` (a
  :class:`Scored` batch, saved in one transaction), written out by :func:`finish_held`.
- Finish: :func:`sample_records`, a metric's per-sample values paired with the sample ids;
  :func:`thumbnails` and :func:`save_thumbnails`, the report's grid of a condition.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Container, Iterable, Iterator, Sequence

import numpy as np

from ..condition import Condition, params_key
from ..errors import ImageError, ShiftbenchError
from ..metrics.base import OrderedMerge
from ..registry import metric_info
from ..results.artifacts import thumb_key
from ..results.codec import decode_state
from ..results.store import Store
from ..sample import Sample
from ..severity import Severity
from .spec import Spec
from . import DEFAULT_SHARD
from .identity import run_identity
from .pixels import DeviceBatch, is_sequence, tensor_path
from .provenance import git_hash, versions

__all__ = ["Planned", "Plan", "plan_conditions", "spec_loader", "RunCall", "TaskRun", "run_local", "Unit", "run_units", "drive",
           "STATE_FORMAT_KEY", "STATE_FORMAT", "COUNT_KEY", "SKIPPED_KEY", "IDS_KEY", "start_run", "condition_ids",
           "current_batches", "batches_per_unit", "sample_records", "CLEAN", "Batch", "Loader", "check_first_batch",
           "shift_narrowed", "error_reason", "Held", "Scored", "batch_states", "restore_held", "save_scored",
           "finish_held", "thumbnails", "save_thumbnails", "GRID_SAMPLES", "THUMB", "SKIPPED_LISTED"]

# every saved batch carries this key: its metric states are of that batch alone and merge. A store
# written before (each batch holding the cumulative state) lacks it, and such a partial condition is
# recomputed rather than mis-merged
STATE_FORMAT_KEY = "__state_format__"
STATE_FORMAT = "batch-merge/1"
COUNT_KEY = "__n__"  # samples scored in the batch (fewer than its size when a shift failed on one, on_error: skip)
SKIPPED_KEY = "__skipped__"  # [[sample id, reason], ...] left out of the batch
IDS_KEY = "__ids__"  # ids of the samples scored in the batch, in data order (the per-sample values' ids)

GRID_SAMPLES = 4  # per condition, kept as thumbnails with every model's prediction for the report
THUMB = 96  # side of a grid thumbnail
SKIPPED_LISTED = 20  # skipped samples named in a row's info (all are counted)

log = logging.getLogger("shiftbench")

@dataclass(frozen=True)
class Planned:
    """One condition of a run (the same for every model) paired with the shift object that runs it (None
    for clean) and the entry of the spec's shifts list it comes from (for messages)."""

    condition: Condition
    shift: Any
    index: int | None = None

    @property
    def shift_name(self) -> str:
        return self.condition.shift

    @property
    def params(self) -> dict[str, Any]:
        return self.condition.params

    @property
    def severity(self) -> Severity:
        return self.condition.severity


@dataclass(frozen=True)
class Plan:
    """A run set up and checked, nothing run: the dataset opened, every model loaded, the metrics
    checked against each model's task, every shift created with its conditioning (mask providers,
    captioners, pipelines) loaded, and every condition's params drawn on the first batch (what a shift asks
    of a sample: a mask, contexts, a caption, a size). ``prepare`` builds it for the real run and for
    ``--dry-run`` alike, so a dry run that passes means the first batch of every condition can run. Built once,
    never changed."""

    spec: Spec
    dataset: Any
    models: dict[str, Any]
    metrics: dict[str, list[str]]
    conditions: list[Planned]
    retrieval: Any = None  # the composed-retrieval setup (engine/retrieval.py) for a spec of retrievers

    @property
    def samples(self) -> int:
        return self.retrieval.n_queries if self.retrieval is not None else len(self.dataset)

    def loader(self, step: str = "evaluate") -> "Loader":
        """The run's batch loader (the spec's seed, ``on_error`` and pixel mode; ``step`` names the step
        in a failure's message)."""
        return spec_loader(self.spec, self.dataset, step, self.spec.engine.pixels or "auto", self.models.values())

    def identity(self) -> dict[str, Any]:
        """What besides the spec decides the numbers (engine/identity.py): version, weights, data, ids."""
        return run_identity(self.spec, self.dataset, self.models)


def spec_loader(spec: Spec, dataset: Any, step: str, pixels: str = "auto", models: Iterable[Any] = ()) -> "Loader":
    """The loader of a spec's run over ``dataset`` (its seed, ``on_error`` and preprocessing; ``pixels`` and
    ``models``: where corruptions run); ``step`` names the step in a failure's message."""
    return Loader(dataset, spec.seed, on_error=spec.on_error, pixels=pixels, models=list(models), step=step,
                  preprocess=spec.preprocess)


CLEAN = Planned(Condition("", "", "clean", {}, 0), None)  # the unshifted data, as the loader gives it (curation reads it)


def plan_conditions(spec: Spec) -> list[Planned]:
    """Every condition of the spec in run order: each shifts entry (``clean`` included), each severity."""
    out = []
    for s in spec.shifts:
        shift = s.instance()  # the shift validation created (check_names), else created once here
        for severity in s.severities:
            out.append(Planned(Condition("", spec.dataset, s.name, dict(s.params), severity), shift, s.index))
    return out


def check_first_batch(spec: Spec, conditions: Sequence[Planned], first: Sequence[Sample], step: str) -> None:
    """What the run's first batch of every condition asks of its samples, asked now (the dry run's promise:
    it passes only if every first batch can run). ``check_sample``: each shift's requirements (a mask,
    the object's contexts, a caption); ``draw``: every sample's params as the run draws them, which
    also checks sizes, the masks a provider finds and whatever else a shift refuses before painting.
    Stops in one line naming the spec's shift entry, the sample and the shift's reason (with on_error:
    skip the run leaves such samples out, so this is not called)."""
    shifted = [c for c in conditions if c.shift_name != "clean"]
    for sample in first:  # sample by sample: a mask provider's cache then serves every condition of a sample
        for cond in shifted:
            try:
                if step == "draw":
                    cond.shift.draw_parsed(sample, cond.severity, spec.seed)
                else:
                    cond.shift.check_sample(sample)
            except ShiftbenchError as exc:
                raise ShiftbenchError(_cannot_run(spec, cond, sample, str(exc))) from None
            except Exception as exc:  # noqa: BLE001 - a shift's own failure, said as the run would say it
                raise ShiftbenchError(_cannot_run(spec, cond, sample, error_reason(exc))) from None


def _cannot_run(spec: Spec, cond: Planned, sample: Sample, reason: str) -> str:
    entry = f"shifts[{cond.index}]" if cond.index is not None else "shifts"
    where = f"{spec.source}: {entry}" if spec.source else entry
    params = f" {json.dumps(cond.params, sort_keys=True)}" if cond.params else ""
    return (f"{where}: shift {cond.shift_name!r}{params} (severity {cond.severity}) cannot run on sample "
            f"{str(sample.id)!r}: {' '.join(reason.split())}")


# -- the run in the store -------------------------------------------------------------------------
def start_run(store: Store, spec: Spec, identity: dict[str, Any], run_id: str | None, new_run: bool) -> str:
    """Open (or resume) the spec's run in the store, with the versions and git hash it runs under."""
    return store.start_run(spec.raw, spec.seed, run_id=run_id, versions=versions(), git_hash=git_hash(),
                           name=spec.name, identity=identity, new_run=new_run)


def condition_ids(store: Store, run_id: str, dataset: str, models: Iterable[str],
                  conditions: Sequence[Planned]) -> dict[tuple[str, int], int]:
    """The store's id of every (model label, condition index), model by model."""
    return {(m, i): store.condition(run_id, dataclasses.replace(c.condition, model=m, dataset=dataset))
            for m in models for i, c in enumerate(conditions)}


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


# -- the runner loop: every runner's, local and on Ray ----------------------------------------------
def batches_per_unit(shard_size: Any, batch_size: int) -> int:
    """Whole batches per (condition, shard) unit of the ray engine: ``shard_size`` samples (default
    :data:`DEFAULT_SHARD`) rounded down, at least one."""
    return max(1, int(shard_size or DEFAULT_SHARD) // batch_size)


@dataclass(frozen=True)
class RunCall:
    """What a call asks of a run beside its spec: the run id to use, progress, model objects by label, a
    callback after each saved batch and when the run is open (``on_start``), ``new_run``; on a Ray worker,
    how the reader screens files (``verify``: what the driver checked is skipped) and the driver's dataset."""

    run_id: str | None = None
    progress: bool = False
    models: dict[str, Any] = field(default_factory=dict)
    on_batch: Callable[[str, int], None] | None = None
    new_run: bool = False
    on_start: Callable[[Any], None] | None = None
    verify: str = "full"
    dataset: Any = None


class TaskRun:
    """One task's scoring part, which the kernel's loop (:func:`run_local`, :func:`run_units`) drives: the loop
    opens each condition for the models that still need it (``restore``: what is held of a (model, condition),
    its batches saved before a kill), asks for the batches any of them lacks (``load`` prepares the next on a
    thread while ``score`` runs this one), ``save``s each (model, batch) as it comes and ``finish``es a (model,
    condition) once all of its ``saved`` batches are in."""

    models: Sequence[str]
    cids: dict[tuple[str, int], int]  # (model, condition index) -> the store's condition id
    n_batches: int

    def restore(self, ci: int, cond: Planned, model: str, cid: int) -> Any: ...
    def saved(self, held: Any) -> Container[int]: ...
    def score(self, cond: Planned, b: int, loaded: Any, models: Sequence[str]) -> Iterable[Scored]: ...
    def save(self, ci: int, scored: Scored, held: Any) -> None: ...
    def finish(self, ci: int, model: str, held: Any) -> None: ...

    def load(self, cond: Planned, b: int) -> Any:
        return None

    def condition_done(self, ci: int, cond: Planned, models: Sequence[str]) -> None:
        """After every model of condition ``ci`` is finished (local loop)."""

    def unit_done(self, unit: "Unit", thumbs: Sequence[tuple[str, bytes, dict[str, Any]]]) -> None:
        """A unit is back from a worker, before its batches are saved (ray loop)."""

    def park(self, held: Any, parked: bool) -> None:
        """Ray loop, before a unit's batches are saved: ``parked`` (the condition is open but not the oldest open
        one) asks that the batches saved from now on stay in the store alone until ``finish`` reads them back,
        so that the driver holds one condition's per-sample data however many conditions units in flight keep
        open. A task that keeps nothing per sample ignores it."""


def _open(store: Store, task: TaskRun, ci: int, cond: Planned) -> tuple[dict[str, Any], list[int]]:
    """The models that still need condition ``ci`` (model order), each with what is held of it, and the batches
    any of them still needs."""
    held = {m: task.restore(ci, cond, m, task.cids[(m, ci)]) for m in task.models
            if not store.is_done(task.cids[(m, ci)])}
    return held, [b for b in range(task.n_batches) if any(b not in task.saved(h) for h in held.values())]


def run_local(store: Store, task: TaskRun, conditions: Sequence[Planned]) -> None:
    """The local loop: condition by condition, each batch loaded once (the next one on a thread while the
    models run this one) and scored for every model that still needs it. A condition is run in a call of its
    own (:func:`_run_condition`), so nothing of it (its mergers' per-sample values, its last batch) outlives its
    finish: the loop holds one condition's data at a time, whatever the number of samples."""
    with ThreadPoolExecutor(1) as pool:
        for ci, cond in enumerate(conditions):
            _run_condition(store, task, ci, cond, pool)


def _run_condition(store: Store, task: TaskRun, ci: int, cond: Planned, pool: ThreadPoolExecutor) -> None:
    """Condition ``ci`` on the local loop: each batch any model still needs loaded once (the next one on
    ``pool`` while this one is scored), saved model by model, then every model finished."""
    held, batches = _open(store, task, ci, cond)
    if not held:
        return
    future: Future | None = None
    for k, b in enumerate(batches):
        loaded = (future or pool.submit(task.load, cond, b)).result()
        future = pool.submit(task.load, cond, batches[k + 1]) if k + 1 < len(batches) else None
        for scored in task.score(cond, b, loaded, [m for m, h in held.items() if b not in task.saved(h)]):
            task.save(ci, scored, held[scored.model])
    models = list(held)
    for model in models:  # each model's mergers go as soon as its rows are written
        task.finish(ci, model, held.pop(model))
    task.condition_done(ci, cond, models)


@dataclass(frozen=True)
class Unit:
    """A unit of the ray engine: a shard of a condition's batches, with the models that need each."""

    setup: Any  # an engine handle to the run's WorkerSetup
    ci: int  # the condition's index in the plan
    batches: tuple[int, ...]
    needs: tuple[tuple[str, tuple[int, ...]], ...]  # (model label, the batches it still needs)


def run_units(store: Store, task: TaskRun, conditions: Sequence[Planned], engine: Any, handle: Any,
              run_unit: Callable[[Unit], tuple[list[Scored], list]], per_unit: int) -> None:
    """The ray loop: units of (condition, ``per_unit`` batches) run by ``run_unit`` on ``engine``'s actors, made
    lazily; what comes back is saved here, the only writer of the store, as the local loop saves it. A condition
    whose batches were all saved before a kill is finished at once (only the merge is left); a (model,
    condition) is finished once all of its batches are back. Units end in any order, and a slow one keeps its
    condition open while the others run on through later conditions: every open condition but the oldest is
    ``park``ed (its batches stay in the store until its finish), so what the driver holds does not grow with
    the conditions open."""
    open_: dict[int, dict[str, Any]] = {}

    def units() -> Iterator[Unit]:
        for ci, cond in enumerate(conditions):
            held, needed = _open(store, task, ci, cond)
            if held and not needed:
                for m, h in held.items():
                    task.finish(ci, m, h)
            elif held:
                open_[ci] = held
                for start in range(0, len(needed), per_unit):
                    chunk = tuple(needed[start:start + per_unit])
                    yield Unit(handle, ci, chunk, tuple((m, tuple(b for b in chunk if b not in task.saved(h)))
                                                        for m, h in held.items()))

    def landed(unit: Unit, result: tuple[list[Scored], list]) -> None:
        items, thumbs = result
        task.unit_done(unit, thumbs)
        held = open_[unit.ci]
        parked = unit.ci != min(open_)
        for h in held.values():
            task.park(h, parked)
        for scored in items:
            task.save(unit.ci, scored, held[scored.model])
        for m in [m for m, h in held.items() if len(task.saved(h)) == task.n_batches]:  # model order
            task.finish(unit.ci, m, held.pop(m))
        if not held:
            del open_[unit.ci]

    drive(engine, [("model", units())], run_unit, landed)


def drive(engine: Any, stages: Iterable[tuple[str, Iterable[Any]]], run: Callable[[Any], Any],
          landed: Callable[[Any, Any], None]) -> None:
    """The engine loop every runner shares (:func:`run_units`, ``generate``): each stage's units, in order, run
    by ``run`` on ``engine``'s workers (``"cpu"``: tasks; ``"model"``: actors that keep their models), and each
    result handed to ``landed`` here, on the driver, the only writer of the store or the out folder."""
    for stage, units in stages:
        for unit, result in engine.imap(run, units, stage=stage):
            landed(unit, result)


# -- the loader ---------------------------------------------------------------------------------
def error_reason(exc: BaseException) -> str:
    """``Type: first line of the message`` (the type alone when there is no message)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def shift_narrowed(run: Any, items: list[Any], on_error: str,
                   where: str) -> tuple[list[int], list, list, list[tuple[int, str]]]:
    """``run(items) -> (outputs, params)`` for a batch, narrowed to the failing items when it raises.

    A batch equals its items one by one, so redoing a failed batch item by item leaves the others' bytes
    unchanged and names the culprit: ``"{where} failed on sample {id}: {reason}"`` stops the run, or with
    ``on_error="skip"`` the item is left out. Returns the positions kept, their outputs and params, and
    the (position, reason) of the items left out.
    """
    try:
        outs, params = run(items)
        return list(range(len(items))), list(outs), list(params), []
    except Exception:  # noqa: BLE001 - narrowed to the failing sample just below
        pass
    kept: tuple[list, list, list] = ([], [], [])
    failed: list[tuple[int, str]] = []
    for pos, item in enumerate(items):
        try:
            outs, params = run([item])
        except Exception as exc:  # noqa: BLE001 - a shift's own failure on one sample, reported by id
            reason = error_reason(exc)
            if on_error != "skip":
                raise ShiftbenchError(f"{where} failed on sample {item.id}: {reason}") from None
            failed.append((pos, reason))
            continue
        for bucket, value in zip(kept, (pos, outs[0], params[0])):
            bucket.append(value)
    return kept[0], kept[1], kept[2], failed


@dataclass
class Batch:
    """One batch of a condition as the loader gives it: the samples kept (shifted; or clean, with their
    params drawn and checked, when the pixels are made on the models' device: ``pixels``), their positions
    in the dataset and their params, and the (sample id, reason) of those left out with ``on_error: skip``
    (a file that does not decode, or a sample the shift fails on) with their positions."""

    samples: list[Sample]
    skipped: list[tuple[str, str]]
    pixels: DeviceBatch | None = None
    indices: list[int] = field(default_factory=list)
    params: list[dict[str, Any]] = field(default_factory=list)  # of the kept samples ([] for clean)
    skipped_indices: list[int] = field(default_factory=list)

    def shifted(self, count: int | None = None) -> list[Sample]:
        """The first ``count`` kept samples (all by default) with their shifted images on the CPU
        (downloaded from the device when they were made there)."""
        count = len(self.samples) if count is None else min(count, len(self.samples))
        return self.samples[:count] if self.pixels is None else self.pixels.shifted_samples(count)


class Loader:
    """Every step's batches: samples read from the run's dataset and shifted for a condition with the
    run's seed, exactly as ``shiftbench generate`` shifts them (the same per-sample generators; generate
    itself reads through a Loader).

    ``on_error``: a file that does not decode when read is left out with ``"skip"`` (a reader's screen finds
    most of them before any work); a batch the shift fails on is redone sample by sample
    (:func:`shift_narrowed`): the run stops naming the sample, or with ``"skip"`` leaves it out of this
    condition (``Batch.skipped``). ``pixels``: the pixel mode (engine/pixels.py); when a condition's
    corruption runs on the models' device the batch carries its clean samples and a :class:`DeviceBatch`.
    ``step`` names the step in a failure's message (``"evaluate: shift 'fog' (severity 3) failed on sample
    ..."``); ``log_skips``: a warning per sample the shift fails on (generate says it its own way).
    ``preprocess``: the spec's ``preprocess:`` section (anything with ``apply(sample)``), applied to every
    sample right after it is read, before any shift (datasets/preprocess.py); a sample it refuses (a crop
    larger than the image) is an unreadable one: it stops the run, or with ``"skip"`` is left out."""

    def __init__(self, dataset: Any, seed: int, *, on_error: str = "fail", pixels: str = "auto",
                 models: Sequence[Any] = (), step: str = "evaluate", log_skips: bool = True,
                 preprocess: Any = None):
        self.dataset, self.seed, self.on_error, self.pixels = dataset, seed, on_error, pixels
        self.models, self.step, self.log_skips = list(models), step, log_skips
        self.preprocess = preprocess

    def n_batches(self, batch_size: int, limit: int | None = None) -> int:
        n = len(self.dataset) if limit is None else min(int(limit), len(self.dataset))
        return (n + batch_size - 1) // batch_size

    def batch(self, cond: Planned, b: int, batch_size: int, limit: int | None = None) -> Batch:
        """Batch ``b`` (of ``batch_size`` samples; of the first ``limit`` samples when given) for ``cond``."""
        n = len(self.dataset) if limit is None else min(int(limit), len(self.dataset))
        return self.load(cond, range(b * batch_size, min((b + 1) * batch_size, n)))

    def batches(self, cond: Planned, batch_size: int, limit: int | None = None) -> Iterator[Batch]:
        """Every batch of ``cond`` in data order."""
        for b in range(self.n_batches(batch_size, limit)):
            yield self.batch(cond, b, batch_size, limit)

    def load(self, cond: Planned, indices: Iterable[int]) -> Batch:
        """The samples at ``indices`` shifted for ``cond``."""
        return self.shift(cond, self.read(indices))

    def read(self, indices: Iterable[int]) -> Batch:
        """The samples at ``indices`` as they are (clean; preprocessed when the run preprocesses); with
        ``on_error: skip`` a file that does not decode is left out, else its one-line error stops the run."""
        out = Batch([], [])
        for i in indices:
            try:
                sample = self.dataset.load(i)
                if self.preprocess is not None:  # before any shift: every step sees the same pixels
                    sample = self.preprocess.apply(sample)
            except ImageError as exc:  # decodes badly although its header passed the reader's screen
                if self.on_error != "skip":
                    raise
                out.skipped.append((str(self.dataset.sample_id(i)), str(exc)))
                out.skipped_indices.append(i)
                continue
            out.samples.append(sample)
            out.indices.append(i)
        return out

    def shift(self, cond: Planned, read: Batch) -> Batch:
        """``read`` (a batch from :meth:`read`) shifted for ``cond``."""
        if cond.shift_name == "clean":  # nothing drawn, nothing changed
            return Batch(read.samples, read.skipped, None, read.indices, [{} for _ in read.samples],
                         read.skipped_indices)
        samples = read.samples
        shift, severity, seed = cond.shift, cond.severity, self.seed
        on_device = tensor_path(self.pixels, shift, self.models)

        def run(xs: list[Sample]) -> tuple[list, list]:
            params = [shift.draw_parsed(s, severity, seed) for s in xs]
            if on_device:  # drawing checks every image (size, type); the pixels are made on the device
                if is_sequence(shift):  # what a sequence's frames are compared with, for its metrics
                    xs = [s.replace(meta=dict(s.meta, sequence=shift.comparison(int(p["difficulty"]))))
                          for s, p in zip(xs, params)]
                return list(xs), params
            return list(shift.apply_batch(xs, params)), params

        kept, out, params, failed = shift_narrowed(run, samples, self.on_error,
                                                   f"{self.step}: shift {cond.shift_name!r} (severity {severity})")
        skipped, skipped_indices = list(read.skipped), list(read.skipped_indices)
        for pos, reason in failed:
            if self.log_skips:
                log.warning(f"skipped sample {samples[pos].id}: shift {cond.shift_name!r} (severity {severity}) "
                            f"failed: {reason}")
            skipped.append((str(samples[pos].id), reason))
            skipped_indices.append(read.indices[pos])
        return Batch(out, skipped, DeviceBatch(shift, out, params) if on_device else None,
                     [read.indices[p] for p in kept], params, skipped_indices)


# -- a (model, condition) being computed -----------------------------------------------------------
@dataclass
class Held:
    """A (model, condition) being computed: its mergers, the batches in them, samples scored and skipped.

    ``parked``: the batches saved from now on stay in the store alone (``stored``), not in the mergers, and are
    read back when the condition is finished: the Ray loop parks every open condition but the oldest, so the
    driver holds one condition's per-sample values however many conditions a slow unit keeps open."""

    mergers: dict[str, OrderedMerge]
    saved: set = field(default_factory=set)
    n: int = 0
    skipped: list = field(default_factory=list)
    ids: dict = field(default_factory=dict)  # batch -> ids of its scored samples (None: saved before ids were kept)
    parked: bool = False
    stored: set = field(default_factory=set)  # batches saved while parked: in the store, not in the mergers


@dataclass
class Scored:
    """One (model, batch) scored: what the store saves, and (locally) the metric objects themselves."""

    model: str
    batch: int
    states: dict[str, Any]
    predictions: list
    n: int
    skipped: list
    parts: dict[str, Any] | None = None  # None once sent from a worker: the states are decoded instead


def batch_states(encoded: dict[str, Any], samples: Sequence[Sample], skipped: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """A batch's saved state: each metric's encoded state of this batch alone, and the kernel's keys."""
    states = dict(encoded)
    states[STATE_FORMAT_KEY] = STATE_FORMAT
    states[COUNT_KEY] = len(samples)
    states[IDS_KEY] = [str(s.id) for s in samples]
    if skipped:
        states[SKIPPED_KEY] = [list(item) for item in skipped]
    return states


def restore_held(store: Store, cid: int, metric: Callable[[str], Any], metric_names: Sequence[str],
                 batch_size: int, n_samples: int, where: str) -> Held:
    """One merger per metric (``metric(name)`` a fresh one), holding the batches saved before a kill
    merged in batch order. Batches an older shiftbench saved as running totals are dropped (merging them
    would count every sample many times): the condition starts again, said in the log."""
    held = Held({name: OrderedMerge(metric(name)) for name in metric_names})
    saved, dropped = current_batches(store, cid)
    if dropped is not None:
        log.warning(f"{where}: {dropped} saved batches are in the cumulative format of an older shiftbench; "
                    "recomputing this condition")
        return held
    for b, state in saved.items():
        _merge_saved(held, cid, b, state)
        held.saved.add(b)
        # a batch saved before counts were kept is a full one (nothing could be skipped then)
        full = min(batch_size, n_samples - b * batch_size)
        held.n += int(state.get(COUNT_KEY, full))
        held.skipped.extend(tuple(item) for item in state.get(SKIPPED_KEY, []))
    return held


def _merge_saved(held: Held, cid: int, b: int, state: dict[str, Any]) -> None:
    """Batch ``b``'s saved ``state`` (as the store holds it) into the mergers, with its sample ids."""
    for name, merger in held.mergers.items():
        if name not in state:
            raise ShiftbenchError(f"store condition {cid}: saved batch {b} has no state for metric {name!r}")
        part = merger.total.fresh()
        part.load_state_dict(decode_state(state[name]))
        merger.add(b, part)
    held.ids[b] = state.get(IDS_KEY)  # None in a batch saved before ids were kept


def save_scored(store: Store, cid: int, scored: Scored, held: Held) -> None:
    """Save a scored batch (one transaction) and hand its metric states to the condition's mergers (a
    ``parked`` condition's: to the store alone, read back by :func:`finish_held`)."""
    store.save_batch(cid, scored.batch, scored.states, predictions=scored.predictions or None)
    held.saved.add(scored.batch)
    held.n += scored.n
    held.skipped.extend(scored.skipped)
    if held.parked:
        held.stored.add(scored.batch)
        return
    parts = scored.parts
    if parts is None:  # from a worker: the states are what the store holds, decoded as a resume does
        parts = {}
        for name, merger in held.mergers.items():
            parts[name] = merger.total.fresh()
            parts[name].load_state_dict(decode_state(scored.states[name]))
    for name, merger in held.mergers.items():
        merger.add(scored.batch, parts[name])
    held.ids[scored.batch] = scored.states.get(IDS_KEY)


def finish_held(store: Store, cid: int, held: Held, metric_names: Sequence[str], n_batches: int) -> None:
    """Merge a condition's batches and write its rows and, when every batch's sample ids are known, each
    metric's per-sample values (data order), in one transaction. Batches saved while the condition was
    ``parked`` are read back from the store first (the condition is not finished yet: they are there)."""
    if held.stored:
        saved = store.batches(cid)
        for b in sorted(held.stored):
            _merge_saved(held, cid, b, saved[b])
        held.stored.clear()
        del saved
    batch_ids = [held.ids.get(b) for b in range(n_batches)]
    ids = None if any(i is None for i in batch_ids) else [sid for part in batch_ids for sid in part]
    metrics = {name: merger.result(n_batches) for name, merger in held.mergers.items()}
    skipped, n = held.skipped, held.n
    results: dict[str, Any] = {}
    samples: dict[str, tuple[str, list[str], Any]] = {}
    for name in metric_names:
        metric = metrics[name]
        values = metric.compute()
        if not isinstance(values, dict):
            values = {name: values}
        extra = _jsonable(metric.state()) if hasattr(metric, "state") else {}
        for i, (key, value) in enumerate(values.items()):
            info = {"higher_is_better": metric_info(metric).higher_is_better, "metric": name}
            if i == 0 and extra:
                info.update(extra)
            if skipped:  # samples the shift failed on (on_error: skip): left out of n, named here
                info["skipped"] = len(skipped)
                info["skipped_samples"] = [{"id": sid, "reason": why} for sid, why in list(skipped)[:SKIPPED_LISTED]]
            if value is None and hasattr(metric, "undefined_reason"):
                info["undefined"] = metric.undefined_reason(key)  # stored as NULL, the reason beside it
            results[key] = (None if value is None or not np.isfinite(value) else float(value), n, info)
        if ids is not None:
            samples.update(sample_records(metric, ids, f"condition {cid}"))
    store.finish_condition(cid, results, n=n, samples=samples)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


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


def thumbnails(cond: Planned, samples: Sequence[Sample]) -> list[tuple[str, bytes, dict[str, Any]]]:
    """The report's grid thumbnails of a condition: (artifact key, PNG bytes, meta); the meta carries the
    condition itself, which is what the report reads."""
    import cv2

    out = []
    pk = params_key(cond.params)
    for s in samples:
        h, w = s.image.shape[:2]
        scale = THUMB / max(h, w)
        thumb = cv2.resize(s.image, (max(1, round(w * scale)), max(1, round(h * scale))), interpolation=cv2.INTER_AREA)
        ok, png = cv2.imencode(".png", thumb[:, :, ::-1])
        out.append((thumb_key(cond.shift_name, pk, cond.severity, s.id), png.tobytes(), {
            "label": s.label, "class_name": s.class_name, "shift": cond.shift_name, "params_key": pk,
            "severity": cond.severity, "sample_id": str(s.id)}))
    return out


def save_thumbnails(store: Store, run_id: str, thumbs: Sequence[tuple[str, bytes, dict[str, Any]]]) -> None:
    for key, png, meta in thumbs:
        store.put_artifact(run_id, key, png, meta)
