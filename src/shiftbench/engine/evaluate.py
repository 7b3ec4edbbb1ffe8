"""The evaluation runner: models x (clean + shifts x severities) on a dataset -> metric rows in the store.

Order of work: for each shift condition, each batch is loaded and shifted once, then given to every
model that still needs it (shifting is shared across models). A data thread prepares the next batch
while the models run. Each finished (model, condition, batch) saves the metric state of that batch
alone (not the running total: the bytes written grow with the data, not with its square) in one
transaction; a finished condition merges the batch states in batch order (``Metric.merge``), computes
the metrics and is marked done. A killed run restarted with the same spec and store merges the saved
batches, runs the rest, skips what is complete and never duplicates a row.

Shifts are applied exactly as ``shiftbench generate`` applies them (same per-sample seeds), so an
evaluation on the fly and one on a generated folder see the same pixels.

The ray engine (``engine: ray``) runs the same steps as units of (condition, shard) on Ray actors that
each set the run up once (``_worker_plan``) and return per-batch states (``_run_unit``); this process
saves them exactly as the local loop does (``kernel.save_scored``), so both engines write the same store.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..errors import ShiftbenchError, SpecError
from ..metrics.base import check_task
from ..metrics.stability import STABILITY_METRICS
from ..registry import METRICS, MODELS, shift_info
from ..results.artifacts import CURATION_ARTIFACT, SKIPPED_ARTIFACT
from ..results.codec import encode_state
from ..results.store import Store, spec_hash
from ..sample import Sample
from ..tasks import task_of
from .analysis import run_analysis
from .curate import curate_run
from .engines import WorkerSetup, check_reachable, import_ray, make_engine, user_modules, worker_state
from .generate.layout import base_of
from .kernel import (CLEAN, GRID_SAMPLES, Batch, Held, Plan, Planned, RunCall, Scored, TaskRun, Unit, batch_states,
                     batches_per_unit, check_first_batch, condition_ids, error_reason, finish_held, plan_conditions,
                     restore_held, run_local, run_units, save_scored, save_thumbnails, spec_loader, start_run,
                     thumbnails)
from .pixels import DeviceBatch
from .progress import RunProgress as _Progress
from .quality import run_quality
from .retrieval import is_retrieval_spec, run_retrieval, setup_retrieval
from .selection import open_dataset
from .spec import EngineSection, Spec, load_spec


log = logging.getLogger("shiftbench")


@dataclass(frozen=True)
class RunStart:
    """What ``evaluate`` found in the store when it opened the run, before any work (``on_start``): the run's
    id, the conditions it plans (models x shift conditions, clean included), how many of them earlier calls
    finished, whether the run was in the store before (``resumed``) and whether ``new_run`` found these
    very inputs there (``same_inputs``: the run is resumed, not computed twice)."""

    run_id: str
    planned: int
    done: int
    resumed: bool
    same_inputs: bool = False


def with_default_metrics(spec: Spec, defaults: dict[str, Any]) -> Spec:
    """``spec`` with the metrics its models' task gives by default (``defaults``: model label -> names), written in
    as if the spec had listed them, so that the run's identity holds them; one list must fit every model."""
    chosen = {tuple(names) for names in defaults.values()}
    if len(chosen) != 1:
        listed = "; ".join(f"{m}: {', '.join(names)}" for m, names in defaults.items())
        raise SpecError(f"{spec.source + ': ' if spec.source else ''}metrics: left out, and the models' tasks have "
                        f"different defaults ({listed}); list the metrics, or run the models as separate specs")
    return dataclasses.replace(spec, metrics=list(next(iter(chosen))))


def prepare(spec_or_path: Any, models: dict[str, Any] | None = None) -> Plan:
    """Set up a run without running it (see :class:`Plan`); raises the error the run would raise."""
    spec = load_spec(spec_or_path)
    return _Runner(spec, RunCall(models=models or {})).prepare()


def evaluate(spec_or_path: Any, store: str | os.PathLike | Store | None = None, run_id: str | None = None,
             progress: bool = False, models: dict[str, Any] | None = None,
             on_batch: Callable[[str, int], None] | None = None, new_run: bool = False,
             on_start: Callable[["RunStart"], None] | None = None, **engine: Any) -> list[dict[str, Any]]:
    """Run a spec (dict, Spec or YAML path) and return its result rows (see DESIGN.md).

    ``engine``: ``"local"`` (this process; the default) or ``"ray"``: units of (condition, shard of
    ``shard_size`` samples) run on Ray actors that each hold a replica of the models, the shard shifted
    once for every model; this process stays the only writer of the store, and the rows are those of
    the local engine. ``address`` joins a running Ray cluster (default: start a local one on
    ``workers`` CPUs). ``pixels``: where corruptions run: ``"auto"`` (the default: on the models' GPU when
    every model is a torch classifier there, engine/pixels.py), ``"device"`` (on the models' device, whatever
    it is) or ``"cpu"``. These keywords (``engine``, ``address``, ``workers``, ``shard_size``, ``pixels``) override
    the spec's ``engine:`` entry.

    ``store`` is a database path (created if missing) or an open Store; without one a temporary store
    is used. ``models`` may pass already-created model objects by name (reused across calls).
    A run resumes only when its inputs are unchanged (the spec, shiftbench's version, the weights,
    the dataset's files, the ids file); otherwise it stops naming what changed, and ``new_run=True``
    starts a new run instead; inputs equal to those of a run in the store resume that run, ``new_run``
    or not (never computed twice). Setup (dataset, models, conditioning) happens before the store is
    opened, and a store this call created that holds no result when the run fails is removed.
    ``on_start(RunStart)`` is called once the run is open in the store, before any work: its id, the
    conditions planned and how many a previous call had done (the CLI's "resumed: ..." line).
    A spec without ``metrics:`` runs each model's task's defaults (classification: top1, ece), recorded
    in the run's spec as if it had listed them.
    """
    spec = load_spec(spec_or_path).with_engine(name=engine.pop("engine", None), **engine)
    if spec.engine.ray:
        import_ray()  # a missing Ray or an unreachable cluster is said before minutes of setup
        if spec.engine.address not in (None, "", "auto"):
            check_reachable(spec.engine.address)
    runner = _Runner(spec, RunCall(run_id, progress, models or {}, on_batch, new_run, on_start))
    plan = runner.prepare()
    tmpdir = None
    if store is None:
        tmpdir = tempfile.TemporaryDirectory(prefix="shiftbench-")
        store = Path(tmpdir.name) / "results.db"
    created: Path | None = None
    if not isinstance(store, Store):
        path = Path(store)
        created = path if not path.exists() or (path.is_file() and path.stat().st_size == 0) else None
    db = store if isinstance(store, Store) else Store(store)
    try:
        rows = runner.run(plan, db)
        run_quality(plan, db, runner.run_id, progress)  # the spec's quality: section, stored for the report
        run_analysis(plan, db, runner.run_id, progress)  # the spec's analysis: section (Grad-CAM, reliance, t-SNE)
        return rows
    except BaseException:
        if created is not None:
            _remove_if_empty(db, created, runner.run_id)
        raise
    finally:
        if not isinstance(store, Store):
            db.close()
        if tmpdir is not None:
            tmpdir.cleanup()


def _remove_if_empty(db: Store, path: Path, run_id: str | None) -> None:
    """Remove a store this call created when it holds no work (it would read "the store holds no runs"
    or show an empty run); a store holding a result or another process's run is kept."""
    try:
        keep = db.holds_work(own_run=run_id)
    except Exception:  # cannot tell (a broken disk): keeping it is the safe side
        keep = True
    db.close()
    if keep:
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            Path(str(path) + suffix).unlink()
        except FileNotFoundError:
            pass
        except OSError:  # a read-only folder: nothing more can be done, the error already says why
            pass


class _Runner:
    """The evaluation runner of one spec: its setup (:meth:`prepare`) and its run (:meth:`run`) on the kernel's
    loop, with the per-task scoring part (:meth:`_score`)."""

    def __init__(self, spec: Spec, call: RunCall):
        self.spec, self.call = spec, call
        self.engine = spec.engine  # a Ray worker's spec says local, with the driver's pixels
        self.pixels = self.engine.pixels or "auto"  # where corruptions run (engine/pixels.py)
        self.store: Store | None = None  # the run's store, once it runs
        self.run_id: str | None = None
        self.skipped: list = []  # files the reader left out (on_error: skip)
        self.curation: dict[str, Any] | None = None  # what curation kept (the spec's curate: section)
        self.plans: dict[str, Any] = {}  # model label -> its task's label plan
        self.tasks: dict[str, Any] = {}  # model label -> its task
        self.metric_names: dict[str, list[str]] = {}  # model label -> its metrics (condition_metrics picks per condition)

    # -- setup --------------------------------------------------------------------------------
    def _dataset(self):
        dataset, self.skipped = open_dataset(self.spec, self.call.verify)
        return dataset

    def _models(self, dataset) -> dict[str, Any]:
        """Every model, checked against the dataset's label space before any work (its task's label plan,
        tasks/labels.py): the plan maps labels where that is exact, and a zero-shot model runs as a copy set to
        the dataset's classes, so an object the caller passed in is never changed."""
        models = {}
        defaults: dict[str, list[str]] = {}  # a spec without metrics: each model's task's
        for m in self.spec.models:
            params = dict(m.params)
            if self.engine.ray and str(params.get("device", "cpu")).startswith("cuda"):
                # the ray driver only checks the models (label spaces, weights for the run's identity): it
                # loads them on its CPU, so a head node without a GPU can drive a GPU cluster
                params["device"] = "cpu"
            model = self.call.models.get(m.label) or MODELS.create(m.name, **params)
            task = self.tasks[m.label] = task_of(model, m.name, runner="evaluate")
            if not self.spec.metrics:
                defaults[m.label] = list(task.metrics_for(model))
                if task.name == "classification" and has_sequences(self.spec):
                    defaults[m.label] += [n for n in STABILITY_METRICS if n not in defaults[m.label]]
            self._metrics({m.label: model})  # a metric of another task is the first thing to say
            plan = task.plan_labels(model, dataset, self.spec.label_map, dataset_name=f"dataset {self.spec.dataset!r}",
                                    class_subset=self.spec.class_subset)
            self.plans[m.label] = plan
            models[m.label] = plan.model
            if callable(getattr(task, "configure", None)):  # a question-answering task: the run's prompt and classes
                task.configure(self.spec.prompt, self.spec.seed, plan.output_space, dataset=self.spec.dataset)
        if self.spec.prompt is not None and not any(t.name == "question_answering" for t in self.tasks.values()):
            where = f"{self.spec.source}: prompt" if self.spec.source else "prompt"
            raise SpecError(f"{where}: no model of this spec answers questions (image-text-to-text models do); remove it")
        if self.spec.label_map and not any(plan.uses_map for plan in self.plans.values()):
            where = f"{self.spec.source}: label_map" if self.spec.source else "label_map"
            raise SpecError(f"{where}: no model of this spec maps dataset classes to its own (zero-shot models take "
                            "the dataset's classes; captioners and class-agnostic segmenters have none); remove it")
        if defaults:
            self.spec = with_default_metrics(self.spec, defaults)
        self._check_sequence_metrics()
        return models

    def _check_sequence_metrics(self) -> None:
        """Every condition has a metric to score it: perturbation sequences (``p_*`` shifts) take the stability
        metrics (flip_prob, t5d), every other condition the others; a spec that lists its metrics lists both kinds
        when it has both kinds of conditions."""
        spec = self.spec
        sequences = {s.name for s in spec.shifts if is_sequence_shift(s.name)}
        kinds = {is_sequence_metric(n) for n in spec.metrics}
        where = f"{spec.source}: metrics" if spec.source else "metrics"
        if sequences and True not in kinds:
            raise SpecError(f"{where}: the perturbation sequences ({', '.join(sorted(sequences))}) are scored by "
                            f"{' and '.join(STABILITY_METRICS)}; add them to the list")
        others = [s.name for s in spec.shifts if not is_sequence_shift(s.name)]
        if False not in kinds and (others or not sequences):
            raise SpecError(f"{where}: {', '.join(spec.metrics)} score(s) only perturbation sequences (p_* shifts); "
                            f"add a metric for {', '.join(others) or 'clean'} (e.g. top1)")

    def condition_metrics(self, label: str, cond: Planned) -> list[str]:
        """The metrics of model ``label`` that score ``cond``: the stability ones on a perturbation sequence,
        the others elsewhere."""
        sequence = cond.shift is not None and is_sequence_shift(cond.shift_name)
        return [n for n in self.metric_names[label] if is_sequence_metric(n) == sequence]

    def _metric(self, name: str, model_label: str) -> Any:
        """A metric by name, sized to the model's label space where it needs one (miou's confusion matrix)."""
        metric = METRICS.create(name)
        plan = self.plans.get(model_label)
        if plan is not None and plan.num_classes is not None and hasattr(metric, "use_num_classes"):
            metric.use_num_classes(plan.num_classes)
        return metric

    def _metrics(self, models: dict[str, Any]) -> dict[str, list[str]]:
        per_model: dict[str, list[str]] = {}
        for name, model in models.items():
            names = []
            for metric_name in self.spec.metrics:
                metric = self._metric(metric_name, name)
                try:
                    check_task(metric, model)
                except ShiftbenchError as exc:
                    raise SpecError(f"metrics: {exc}") from None
                names.append(metric_name)
            per_model[name] = names
        return per_model

    def prepare(self) -> Plan:
        """Everything before the first model call: dataset (ids unique), models, metrics, shifts and
        conditioning, and the first batch checked against every condition (``kernel.check_first_batch``)."""
        spec = self.spec
        if is_retrieval_spec(spec):
            if spec.class_subset is not None:  # retrieval ranks a gallery: there are no class outputs to restrict
                raise SpecError(f"{spec.source + ': ' if spec.source else ''}class_subset: composed retrieval has no "
                                "class outputs to restrict; remove it")
            if spec.preprocess is not None:  # composed retrieval reads its queries itself, not through the loader
                raise SpecError(f"{spec.source + ': ' if spec.source else ''}preprocess: not applied to composed "
                                "retrieval (its queries and gallery are read outside the run's loader); remove it")
            setup = setup_retrieval(spec, self.call.models)
            if not spec.metrics:  # the retrieval task's defaults, as setup_retrieval chose them
                self.spec = spec = with_default_metrics(spec, {m: setup.metric_names for m in setup.models})
            return Plan(spec, setup.dataset, setup.models, {m: list(spec.metrics) for m in setup.models}, [],
                        retrieval=setup)
        given = self.call.dataset  # a worker's copy of the driver's dataset
        dataset = given if given is not None else self._dataset()
        models = self._models(dataset)
        metrics = self.metric_names = self._metrics(models)
        spec = self.spec  # with its metrics when it left them to the models' task

        def first_batch(data: Any) -> list[Sample]:  # every read of a run's samples goes through the kernel's loader
            return spec_loader(spec, data, "evaluate", self.pixels).batch(CLEAN, 0, spec.batch_size).samples

        first = first_batch(dataset)
        if given is None:  # what each metric reads of a sample, asked before any model work (curation's too)
            self._check_metrics(models, metrics, first)
        if spec.curate and given is None:  # a worker gets the driver's curated dataset
            dataset, self.curation = curate_run(spec, dataset, self.plans, self.call.progress, self.pixels)
            first = first_batch(dataset)
        conditions = plan_conditions(spec)
        checked = given is None and spec.on_error == "fail"  # a worker runs the driver's checked plan
        if checked:  # a sample without what a shift needs (a mask, contexts, a caption) is said before any loading
            check_first_batch(spec, conditions, first, "check_sample")
        # load each shift's conditioning (u2netp, SAM, a captioner, a diffusion pipeline) now, so that
        # a missing file fails here, in a dry run too, and not after minutes of work
        for shift in {id(c.shift): c.shift for c in conditions}.values():
            shift.load_conditioning(first[0])
        if checked:
            check_first_batch(spec, conditions, first, "draw")
        return Plan(spec, dataset, models, metrics, conditions)

    def _check_metrics(self, models: dict[str, Any], metrics: dict[str, list[str]], first: list[Sample]) -> None:
        """Each metric asked, before any model work, what it needs (``Metric.needs``): of the model's outputs
        (``check_model``: miou of a class-agnostic segmenter) and of every sample of the first batch as the model's
        label plan gives it to the metric (``check_samples``: a class label, a mask, boxes, a caption, a
        cue-conflict image). So a dry run passes only if the first batch can be scored, and says why not in the
        one line the run gives: the spec's metrics entry, then the metric's own words naming the sample."""
        spec = self.spec
        for label, names in metrics.items():
            targets = self.plans[label].targets(first)  # what _score gives the metrics (a label outside the space: its line)
            check = getattr(self.tasks[label], "check_samples", None)
            if callable(check):  # what the task itself needs (a question-answering prompt: labels to ask about)
                try:
                    check(targets)
                except ShiftbenchError as exc:
                    raise SpecError(f"{spec.source + ': ' if spec.source else ''}prompt: {' '.join(str(exc).split())} "
                                    f"(model {label!r})") from None
            for name in names:
                metric = self._metric(name, label)
                try:
                    metric.check_model(models[label])
                    metric.check_samples(targets)
                except ShiftbenchError as exc:
                    entry = f"metrics[{list(spec.metrics).index(name)}]" if name in spec.metrics else "metrics"
                    where = f"{spec.source}: {entry}" if spec.source else entry
                    raise SpecError(f"{where}: {' '.join(str(exc).split())} (model {label!r})") from None

    # -- the run ------------------------------------------------------------------------------
    def run(self, plan: Plan, store: Store) -> list[dict[str, Any]]:
        """Run the prepared ``plan`` into ``store`` on the kernel's loop (composed retrieval: its runner)."""
        spec, call, self.store = self.spec, self.call, store
        if plan.retrieval is not None:  # composed retrieval (issue 9): its own scoring part, engine/retrieval.py
            return run_retrieval(spec, store, dataclasses.replace(call, on_start=self._started), setup=plan.retrieval)
        run_id = start_run(store, spec, plan.identity(), call.run_id, call.new_run)
        self._started(run_id)
        self._record_skipped(run_id)
        if self.curation is not None and not store.artifacts(run_id, CURATION_ARTIFACT):
            store.put_artifact(run_id, CURATION_ARTIFACT, json.dumps(self.curation, sort_keys=True).encode("utf-8"))
        cids = condition_ids(store, run_id, spec.dataset, plan.models, plan.conditions)
        todo_total = len(plan.dataset) * sum(not store.is_done(cid) for cid in cids.values())
        with _Progress(call.progress, todo_total) as bar:
            task = _Evaluation(self, plan, run_id, cids, bar)
            if self.engine.ray:
                self._run_distributed(plan, task)
            else:
                run_local(store, task, plan.conditions)
        store.finish_run(run_id)
        return store.rows(run_id)

    # -- the ray engine -------------------------------------------------------------------------
    def _run_distributed(self, plan: Plan, task: "_Evaluation") -> None:
        """Units of (condition, shard) on Ray actors, each holding a replica of every model (set up once
        per actor from the spec); a unit shifts its shard once and scores it with every model that still
        needs it. Results come back here, the only writer of the store, saved batch by batch exactly as
        the local loop saves them, so a killed driver resumes from the same store either way."""
        spec = self.spec
        per_unit = batches_per_unit(self.engine.shard_size, spec.batch_size)
        # a worker runs its units where it is (local), its pixels where the driver decided
        spec = dataclasses.replace(spec, engine=EngineSection(pixels=self.pixels))
        setup = WorkerSetup(uuid.uuid4().hex, spec, dict(self.call.models), _user_modules(plan), os.getcwd(),
                             dataset=plan.dataset, verify="full" if self.skipped else "none")
        workers = self.engine.workers
        with make_engine("ray", workers=int(workers) if workers else 1, address=self.engine.address) as eng:
            try:
                handle = eng.share(setup)
            except Exception:  # noqa: BLE001 - a reader holding something unpicklable: workers open it themselves
                setup = dataclasses.replace(setup, dataset=None)
                try:
                    handle = eng.share(setup)
                except Exception as exc:  # noqa: BLE001 - a model object that cannot travel: said in one line
                    raise ShiftbenchError(_unsendable(setup, exc)) from None
            run_units(self.store, task, plan.conditions, eng, handle, _run_unit, per_unit)

    def _record_skipped(self, run_id: str) -> None:
        """Files the reader left out (on_error: skip) go into the store (artifact ``skipped.json``)."""
        if self.skipped:
            data = json.dumps([{"file": name, "reason": reason} for name, reason in self.skipped], indent=1)
            self.store.put_artifact(run_id, SKIPPED_ARTIFACT, data.encode("utf-8"), {"count": len(self.skipped)})

    def _started(self, run_id: str) -> None:
        """The run is open in the store, nothing done yet: what a previous call left (``RunStart``)."""
        self.run_id = run_id
        call = self.call
        existing, done = self.store.condition_counts(run_id)
        same = call.new_run and call.run_id is None and run_id == f"run-{spec_hash(self.spec.raw)[:12]}"
        start = RunStart(run_id, len(self.spec.conditions()), done, existing > 0 or same, same)
        if call.on_start is not None:
            call.on_start(start)
        elif same:
            log.warning(f"new_run=True: the inputs equal those of run {run_id}, which is resumed rather than computed "
                        "again (give run_id= for a separate run)")

    def _score(self, label: str, model, metric_names: list[str], b: int, samples: list[Sample],
               skipped: list[tuple[str, str]], pixels: DeviceBatch | None = None) -> Scored:
        """Predict one batch and score it with fresh metrics: their states (this batch's alone), the
        records kept (the grid's on batch 0, every sample's with ``log_samples``)."""
        task = self.tasks[label]
        plan = self.plans[label]
        parts = {name: self._metric(name, label) for name in metric_names}
        predictions: list = []
        if samples:
            predict = task.predict if pixels is None else pixels.predict
            outputs = plan.outputs(_predict_with_backoff(predict, model, samples))
            targets = plan.targets(samples)  # metrics and records see both sides in one space
            for name in metric_names:
                parts[name].update_from_samples(outputs, targets)
            grid = targets[:GRID_SAMPLES] if b == 0 else []
            # a question-answering model's every answer is kept (what it said is the result, not only a score)
            keep = targets if self.spec.log_samples or task.name == "question_answering" else grid
            predictions = [(s.id, task.record(outputs, i, s, model, plan.output_space)) for i, s in enumerate(keep)]
        states = batch_states({name: encode_state(parts[name].state_dict()) for name in metric_names}, samples, skipped)
        return Scored(label, b, states, predictions, len(samples), list(skipped), parts)


class _Evaluation(TaskRun):
    """The evaluation's scoring part for the kernel's loop: a batch loaded and shifted once, predicted and
    scored by every model that needs it, saved with its thumbnails (batch 0) and its progress."""

    def __init__(self, runner: _Runner, plan: Plan, run_id: str, cids: dict[tuple[str, int], int], bar: _Progress):
        self.runner, self.plan, self.store, self.run_id, self.bar = runner, plan, runner.store, run_id, bar
        self.models, self.cids = list(plan.models), cids
        self.batch_size = runner.spec.batch_size
        self.n_batches = (len(plan.dataset) + self.batch_size - 1) // self.batch_size
        self.loader = plan.loader()

    def restore(self, ci: int, cond: Planned, model: str, cid: int) -> Held:
        return restore_held(self.store, cid, lambda name: self.runner._metric(name, model),
                            self.runner.condition_metrics(model, cond),
                            self.batch_size, len(self.plan.dataset), f"{model} {cond.shift_name} s{cond.severity}")

    def saved(self, held: Held) -> set:
        return held.saved

    def load(self, cond: Planned, b: int) -> Batch:
        return self.loader.batch(cond, b, self.batch_size)

    def score(self, cond: Planned, b: int, loaded: Batch, models: Sequence[str]) -> Iterator[Scored]:
        for m in models:
            scored = self.runner._score(m, self.plan.models[m], self.runner.condition_metrics(m, cond), b, loaded.samples,
                                        loaded.skipped, loaded.pixels)
            if b == 0:  # before the batch: a kill between the two redoes the batch and rewrites them
                save_thumbnails(self.store, self.run_id, thumbnails(cond, loaded.shifted(GRID_SAMPLES)))
            yield scored

    def save(self, ci: int, scored: Scored, held: Held) -> None:
        cond = self.plan.conditions[ci]
        save_scored(self.store, self.cids[(scored.model, ci)], scored, held)
        # a unit from a worker counts the samples it left out too
        done = scored.n + (len(scored.skipped) if scored.parts is None else 0)
        self.bar.advance(f"{scored.model} {cond.shift_name} s{cond.severity}", done)
        if self.runner.call.on_batch:
            self.runner.call.on_batch(scored.model, scored.batch)

    def park(self, held: Held, parked: bool) -> None:
        held.parked = parked

    def finish(self, ci: int, model: str, held: Held) -> None:
        finish_held(self.store, self.cids[(model, ci)], held, self.runner.condition_metrics(model, self.plan.conditions[ci]),
                    self.n_batches)

    def unit_done(self, unit: Unit, thumbs: Sequence[tuple[str, bytes, dict[str, Any]]]) -> None:
        save_thumbnails(self.store, self.run_id, thumbs)  # before the batches (see the local loop)


# -- units of the ray engine ----------------------------------------------------------------------
def _worker_plan(handle: Any) -> tuple["_Runner", Plan]:
    """The run's setup on this worker: built on the first unit (dataset, model replicas and conditioning
    loaded), reused by every later unit of the run."""
    def build(setup: WorkerSetup) -> tuple["_Runner", Plan]:
        runner = _Runner(setup.spec, RunCall(models=setup.models, verify=setup.verify, dataset=setup.dataset))
        return runner, runner.prepare()

    return worker_state(handle, build)


def _run_unit(unit: Unit) -> tuple[list[Scored], list[tuple[str, bytes, dict[str, Any]]]]:
    """Shift a unit's batches once and score each with every model that needs it (runs on a worker)."""
    runner, plan = _worker_plan(unit.setup)
    cond = plan.conditions[unit.ci]
    needs = dict(unit.needs)
    scored: list[Scored] = []
    thumbs: list = []
    loader = plan.loader()
    for b in unit.batches:
        loaded = loader.batch(cond, b, runner.spec.batch_size)
        samples, skipped, pixels = loaded.samples, loaded.skipped, loaded.pixels
        for label, batches in needs.items():
            if b in batches:
                item = runner._score(label, plan.models[label], runner.condition_metrics(label, cond), b, samples,
                                     skipped, pixels)
                item.parts = None  # the driver decodes the states (they are what the store keeps)
                scored.append(item)
        if b == 0:
            thumbs = thumbnails(cond, loaded.shifted(GRID_SAMPLES))
    return scored, thumbs


def _user_modules(plan: Plan) -> tuple[str, ...]:
    """Modules outside shiftbench that define the run's dataset, shift or model classes."""
    return user_modules([plan.dataset, base_of(plan.dataset), *(c.shift for c in plan.conditions),
                         *plan.models.values()])


def _unsendable(setup: WorkerSetup, exc: BaseException) -> str:
    """Which model the caller passed cannot be pickled for the workers (or why the setup cannot travel)."""
    from ray import cloudpickle

    for label, model in setup.models.items():
        try:
            cloudpickle.dumps(model)
        except Exception as err:  # noqa: BLE001 - reported by name
            return (f"model {label!r} was passed as an object that cannot be sent to Ray workers ({error_reason(err)}); "
                    f"name it in the spec (a registered name, hub id or folder) or use the local engine")
    return f"the run's setup cannot be sent to Ray workers: {error_reason(exc)}"


# -- helpers --------------------------------------------------------------------------------------
def _predict_with_backoff(predict: Callable, model, samples: list[Sample]):
    """Predict a batch; on out-of-memory, split it in halves (down to one image) and join the outputs."""
    try:
        return predict(model, samples)
    except (MemoryError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "out of memory" not in str(exc).lower():
            raise
        if len(samples) == 1:
            raise ShiftbenchError(f"model {model.name!r} runs out of memory on a single image") from None
        half = len(samples) // 2
        a = _predict_with_backoff(predict, model, samples[:half])
        b = _predict_with_backoff(predict, model, samples[half:])
        return np.concatenate([a, b]) if isinstance(a, np.ndarray) else list(a) + list(b)




def is_sequence_shift(name: str) -> bool:
    """Whether the registered shift ``name`` makes perturbation sequences (ImageNet-P's ``p_*``)."""
    return shift_info(name).role == "perturbation"


def is_sequence_metric(name: str) -> bool:
    """Whether metric ``name`` scores perturbation sequences (flip_prob, t5d) rather than single images."""
    return bool(getattr(METRICS.entry(name).resolve(), "sequence", False))


def has_sequences(spec: Spec) -> bool:
    return any(is_sequence_shift(s.name) for s in spec.shifts)
