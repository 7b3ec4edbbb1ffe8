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

import json
import logging
import os
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..errors import ShiftbenchError, SpecError
from ..registry import METRICS, MODELS
from ..sample import Sample
from ..seeds import check_seed
from .spec import EngineSection, Spec, load_spec
from ..results.artifacts import CURATION_ARTIFACT, SKIPPED_ARTIFACT
from ..results.codec import encode_state
from ..results.store import Store, spec_hash
from .kernel import (CLEAN, GRID_SAMPLES, check_first_batch, Condition, Held, Loader, Plan, Scored, batch_states, batches_needed,
                     batches_per_unit, condition_ids, error_reason, finish_complete, finish_held, open_condition,
                     plan_conditions, restore_held, save_scored, save_thumbnails, shard_units, start_run, thumbnails)
from .pixels import DeviceBatch
from .progress import RunProgress as _Progress
from .selection import open_dataset
from .curate import curate_run

if TYPE_CHECKING:
    from .engines import WorkerSetup


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
    import dataclasses

    chosen = {tuple(names) for names in defaults.values()}
    if len(chosen) != 1:
        listed = "; ".join(f"{m}: {', '.join(names)}" for m, names in defaults.items())
        raise SpecError(f"{spec.source + ': ' if spec.source else ''}metrics: left out, and the models' tasks have "
                        f"different defaults ({listed}); list the metrics, or run the models as separate specs")
    return dataclasses.replace(spec, metrics=list(next(iter(chosen))))


def prepare(spec_or_path: Any, models: dict[str, Any] | None = None) -> Plan:
    """Set up a run without running it (see :class:`Plan`); raises the error the run would raise."""
    spec = load_spec(spec_or_path)
    return _Runner(spec, None, None, False, models or {}, None).prepare()


def evaluate(
    spec_or_path: Any,
    store: str | os.PathLike | Store | None = None,
    run_id: str | None = None,
    progress: bool = False,
    models: dict[str, Any] | None = None,
    on_batch: Callable[[str, int], None] | None = None,
    new_run: bool = False,
    engine: str | None = None,
    address: str | None = None,
    workers: int | None = None,
    shard_size: int | None = None,
    pixels: str | None = None,
    on_start: Callable[["RunStart"], None] | None = None,
) -> list[dict[str, Any]]:
    """Run a spec (dict, Spec or YAML path) and return its result rows (see DESIGN.md).

    ``engine``: ``"local"`` (this process; the default) or ``"ray"``: units of (condition, shard of
    ``shard_size`` samples) run on Ray actors that each hold a replica of the models, the shard shifted
    once for every model; this process stays the only writer of the store, and the rows are those of
    the local engine. ``address`` joins a running Ray cluster (default: start a local one on
    ``workers`` CPUs). ``pixels``: where corruptions run: ``"auto"`` (the default: on the models' GPU when
    every model is a torch classifier there, engine/pixels.py), ``"device"`` (on the models' device, whatever
    it is) or ``"cpu"``. Arguments override the spec's ``engine:`` entry.

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
    spec = load_spec(spec_or_path).with_engine(name=engine, address=address, workers=workers,
                                               shard_size=shard_size, pixels=pixels)
    if spec.engine.ray:
        from .engines import check_reachable, import_ray

        import_ray()  # a missing Ray or an unreachable cluster is said before minutes of setup
        if spec.engine.address not in (None, "", "auto"):
            check_reachable(spec.engine.address)
    runner = _Runner(spec, None, run_id, progress, models or {}, on_batch, new_run=new_run)
    runner.on_start = on_start
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
    runner.store = db
    try:
        rows = runner.run(plan)
        from .quality import run_quality

        run_quality(plan, db, runner.run_id, progress)  # the spec's quality: section, stored for the report
        from .analysis import run_analysis

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
    def __init__(self, spec: Spec, store: Store | None, run_id: str | None, progress: bool,
                 models: dict[str, Any], on_batch: Callable | None, new_run: bool = False):
        self.spec, self.store, self.progress, self.on_batch = spec, store, progress, on_batch
        self.engine = spec.engine  # a Ray worker's spec says local, with the driver's pixels
        self.pixels = self.engine.pixels or "auto"  # where corruptions run (engine/pixels.py)
        self.verify = "full"  # how the reader screens files up front (a worker skips what the driver checked)
        self.given_dataset: Any = None  # a worker's copy of the driver's opened dataset
        self.given_models = models
        self.requested_run_id = run_id
        self.new_run = new_run
        self.run_id: str | None = None
        self.on_start: Callable[[RunStart], None] | None = None

    # -- setup --------------------------------------------------------------------------------
    def _dataset(self):
        dataset, self.skipped = open_dataset(self.spec, self.verify)
        return dataset

    def _models(self, dataset) -> dict[str, Any]:
        """Every model, checked against the dataset's label space before any work (its task's label plan,
        tasks/labels.py): the plan maps labels where that is exact, and a zero-shot model runs as a copy set to
        the dataset's classes, so an object the caller passed in is never changed."""
        from ..tasks import task_of

        models = {}
        self.plans = {}
        self.tasks = {}
        defaults: dict[str, list[str]] = {}  # a spec without metrics: each model's task's
        for m in self.spec.models:
            params = dict(m.params)
            if self.engine.ray and str(params.get("device", "cpu")).startswith("cuda"):
                # the ray driver only checks the models (label spaces, weights for the run's identity): it
                # loads them on its CPU, so a head node without a GPU can drive a GPU cluster
                params["device"] = "cpu"
            model = self.given_models.get(m.label) or MODELS.create(m.name, **params)
            task = self.tasks[m.label] = task_of(model, m.name, runner="evaluate")
            if not self.spec.metrics:
                defaults[m.label] = list(task.metrics_for(model))
            self._metrics({m.label: model})  # a metric of another task is the first thing to say
            plan = task.plan_labels(model, dataset, self.spec.label_map, dataset_name=f"dataset {self.spec.dataset!r}",
                                    class_subset=self.spec.class_subset)
            self.plans[m.label] = plan
            models[m.label] = plan.model
        if self.spec.label_map and not any(plan.uses_map for plan in self.plans.values()):
            where = f"{self.spec.source}: label_map" if self.spec.source else "label_map"
            raise SpecError(f"{where}: no model of this spec maps dataset classes to its own (zero-shot models take "
                            "the dataset's classes; captioners and class-agnostic segmenters have none); remove it")
        if defaults:
            self.spec = with_default_metrics(self.spec, defaults)
        return models

    def _metric(self, name: str, model_label: str) -> Any:
        """A metric by name, sized to the model's label space where it needs one (miou's confusion matrix)."""
        metric = METRICS.create(name)
        plan = self.plans.get(model_label)
        if plan is not None and plan.num_classes is not None and hasattr(metric, "use_num_classes"):
            metric.use_num_classes(plan.num_classes)
        return metric

    def _metrics(self, models: dict[str, Any]) -> dict[str, list[str]]:
        from ..metrics.base import check_task

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
        check_seed(spec.seed)  # a Spec object edited after load_spec: refused before any setup (seeds.py)
        from .retrieval import is_retrieval_spec, setup_retrieval

        if is_retrieval_spec(spec):
            if spec.class_subset is not None:  # retrieval ranks a gallery: there are no class outputs to restrict
                raise SpecError(f"{spec.source + ': ' if spec.source else ''}class_subset: composed retrieval has no "
                                "class outputs to restrict; remove it")
            if spec.preprocess is not None:  # composed retrieval reads its queries itself, not through the loader
                raise SpecError(f"{spec.source + ': ' if spec.source else ''}preprocess: not applied to composed "
                                "retrieval (its queries and gallery are read outside the run's loader); remove it")
            setup = setup_retrieval(spec, self.given_models)
            if not spec.metrics:  # the retrieval task's defaults, as setup_retrieval chose them
                self.spec = spec = with_default_metrics(spec, {m: setup.metric_names for m in setup.models})
            return Plan(spec, setup.dataset, setup.models, {m: list(spec.metrics) for m in setup.models}, [],
                        retrieval=setup)
        dataset = self.given_dataset if self.given_dataset is not None else self._dataset()
        models = self._models(dataset)
        metrics = self._metrics(models)
        spec = self.spec  # with its metrics when it left them to the models' task

        def first_batch(data: Any) -> list[Sample]:  # every read of a run's samples goes through the kernel's loader
            return Loader(data, spec.seed, spec.on_error, self.pixels, (), "evaluate",
                          preprocess=spec.preprocess).batch(CLEAN, 0, spec.batch_size).samples

        first = first_batch(dataset)
        if self.given_dataset is None:  # what each metric reads of a sample, asked before any model work (curation's too)
            self._check_metrics(models, metrics, first)
        if spec.curate and self.given_dataset is None:  # a worker gets the driver's curated dataset
            dataset, self.curation = curate_run(spec, dataset, self.plans, self.progress, self.pixels)
            first = first_batch(dataset)
        conditions = plan_conditions(spec)
        checked = self.given_dataset is None and spec.on_error == "fail"  # a worker runs the driver's checked plan
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
    def run(self, plan: Plan | None = None) -> list[dict[str, Any]]:
        plan = plan or self.prepare()
        spec = self.spec
        if plan.retrieval is not None:  # composed retrieval (issue 9) runs its own loop in engine/retrieval.py
            from .retrieval import run_retrieval

            return run_retrieval(spec, self.store, self.requested_run_id, self.progress, self.given_models,
                                 setup=plan.retrieval, new_run=self.new_run, on_start=self._started,
                                 on_batch=self.on_batch)
        dataset, models, metrics, conditions = plan.dataset, plan.models, plan.metrics, plan.conditions
        run_id = start_run(self.store, spec, plan.identity(), self.requested_run_id, self.new_run)
        self._started(run_id)
        self._record_skipped(run_id)
        curation = getattr(self, "curation", None)
        if curation is not None and not self.store.artifacts(run_id, CURATION_ARTIFACT):
            self.store.put_artifact(run_id, CURATION_ARTIFACT, json.dumps(curation, sort_keys=True).encode("utf-8"))
        n = len(dataset)
        batch = spec.batch_size
        n_batches = (n + batch - 1) // batch
        cids = condition_ids(self.store, run_id, spec.dataset, models, conditions)
        todo_total = sum(n for cid in cids.values() if not self.store.is_done(cid))
        if self.engine.ray:
            with _Progress(self.progress, todo_total) as bar:
                self._run_distributed(plan, run_id, cids, n_batches, bar)
            self.store.finish_run(run_id)
            return self.store.rows(run_id)
        batches_of = plan.loader()
        with _Progress(self.progress, todo_total) as bar, ThreadPoolExecutor(1) as loader:
            for ci, cond in enumerate(conditions):
                restored = self._open_condition(ci, cond, plan, cids)
                if not restored:
                    continue
                batches = batches_needed(n_batches, (held.saved for held in restored.values()))
                future: Future | None = None
                for k, b in enumerate(batches):
                    if future is None:
                        future = loader.submit(batches_of.batch, cond, b, batch)
                    loaded = future.result()
                    samples, skipped, pixels = loaded.samples, loaded.skipped, loaded.pixels
                    future = (loader.submit(batches_of.batch, cond, batches[k + 1], batch)
                              if k + 1 < len(batches) else None)
                    for m, held in restored.items():
                        if b in held.saved:
                            continue
                        scored = self._score(m, models[m], metrics[m], b, samples, skipped, pixels)
                        if b == 0:  # before the batch: a kill between the two redoes the batch and rewrites them
                            save_thumbnails(self.store, run_id, thumbnails(cond, loaded.shifted(GRID_SAMPLES)))
                        save_scored(self.store, cids[(m, ci)], scored, held)
                        bar.advance(f"{m} {cond.shift_name} s{cond.severity}", len(samples))
                        if self.on_batch:
                            self.on_batch(m, b)
                for m, held in restored.items():
                    finish_held(self.store, cids[(m, ci)], held, metrics[m], n_batches)
        self.store.finish_run(run_id)
        return self.store.rows(run_id)

    def _open_condition(self, ci: int, cond: Condition, plan: Plan, cids: dict) -> dict[str, Held]:
        """The models that still need condition ``ci``, each with its restored mergers."""
        return open_condition(self.store, cids, ci, plan.models,
                              lambda m, cid: restore_held(self.store, cid, lambda name: self._metric(name, m),
                                                          plan.metrics[m], self.spec.batch_size, len(plan.dataset),
                                                          f"{m} {cond.shift_name} s{cond.severity}"))

    # -- the ray engine -------------------------------------------------------------------------
    def _run_distributed(self, plan: Plan, run_id: str, cids: dict, n_batches: int, bar: "_Progress") -> None:
        """Units of (condition, shard) on Ray actors, each holding a replica of every model (set up once
        per actor from the spec); a unit shifts its shard once and scores it with every model that still
        needs it. Results come back here, the only writer of the store, saved batch by batch exactly as
        the local loop saves them, so a killed driver resumes from the same store either way."""
        import dataclasses
        import uuid

        from .engines import WorkerSetup, make_engine

        spec, metrics, conditions = self.spec, plan.metrics, plan.conditions
        per_unit = batches_per_unit(self.engine.shard_size, spec.batch_size)
        # a worker runs its units where it is (local), its pixels where the driver decided
        spec = dataclasses.replace(spec, engine=EngineSection(pixels=self.pixels))
        setup = WorkerSetup(uuid.uuid4().hex, spec, dict(self.given_models), _user_modules(plan), os.getcwd(),
                             dataset=plan.dataset, verify="full" if getattr(self, "skipped", None) else "none")
        open_conditions: dict[int, dict[str, Held]] = {}
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

            def finish(ci: int, m: str, held: Held) -> None:
                finish_held(self.store, cids[(m, ci)], held, metrics[m], n_batches)

            units = (_Unit(handle, ci, chunk, needs) for ci, chunk, needs in shard_units(
                conditions, lambda ci, cond: self._open_condition(ci, cond, plan, cids), lambda held: held.saved,
                n_batches, per_unit, finish, open_conditions))
            for unit, (scored, thumbs) in eng.imap(_run_unit, units, stage="model"):
                cond = conditions[unit.ci]
                restored = open_conditions[unit.ci]
                save_thumbnails(self.store, run_id, thumbs)  # before the batches (see the local loop)
                for item in scored:
                    cid = cids[(item.model, unit.ci)]
                    save_scored(self.store, cid, item, restored[item.model])
                    bar.advance(f"{item.model} {cond.shift_name} s{cond.severity}", item.n + len(item.skipped))
                    if self.on_batch:
                        self.on_batch(item.model, item.batch)
                finish_complete(open_conditions, unit.ci, n_batches, lambda held: len(held.saved), finish)

    def _record_skipped(self, run_id: str) -> None:
        """Files the reader left out (on_error: skip) go into the store (artifact ``skipped.json``)."""
        if getattr(self, "skipped", None):
            import json

            data = json.dumps([{"file": name, "reason": reason} for name, reason in self.skipped], indent=1)
            self.store.put_artifact(run_id, SKIPPED_ARTIFACT, data.encode("utf-8"), {"count": len(self.skipped)})

    def _started(self, run_id: str) -> None:
        """The run is open in the store, nothing done yet: what a previous call left (``RunStart``)."""
        self.run_id = run_id
        existing, done = self.store.condition_counts(run_id)
        same = self.new_run and self.requested_run_id is None and run_id == f"run-{spec_hash(self.spec.raw)[:12]}"
        start = RunStart(run_id, len(self.spec.conditions()), done, existing > 0 or same, same)
        if self.on_start is not None:
            self.on_start(start)
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
            keep = targets if self.spec.log_samples else grid
            predictions = [(s.id, task.record(outputs, i, s, model, plan.output_space)) for i, s in enumerate(keep)]
        states = batch_states({name: encode_state(parts[name].state_dict()) for name in metric_names}, samples, skipped)
        return Scored(label, b, states, predictions, len(samples), list(skipped), parts)


# -- units of the ray engine ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Unit:
    setup: Any  # an engine handle to the WorkerSetup
    ci: int  # the condition's index in the plan
    batches: tuple[int, ...]
    needs: tuple[tuple[str, tuple[int, ...]], ...]  # (model label, the batches it still needs)


def _worker_plan(handle: Any) -> tuple["_Runner", Plan]:
    """The run's setup on this worker: built on the first unit (dataset, model replicas and conditioning
    loaded), reused by every later unit of the run."""
    from .engines import worker_state

    def build(setup: WorkerSetup) -> tuple["_Runner", Plan]:
        runner = _Runner(setup.spec, None, None, False, setup.models, None)
        runner.verify = setup.verify
        runner.given_dataset = setup.dataset
        plan = runner.prepare()
        return runner, plan

    return worker_state(handle, build)


def _run_unit(unit: _Unit) -> tuple[list[Scored], list[tuple[str, bytes, dict[str, Any]]]]:
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
                item = runner._score(label, plan.models[label], plan.metrics[label], b, samples, skipped, pixels)
                item.parts = None  # the driver decodes the states (they are what the store keeps)
                scored.append(item)
        if b == 0:
            thumbs = thumbnails(cond, loaded.shifted(GRID_SAMPLES))
    return scored, thumbs


def _user_modules(plan: Plan) -> tuple[str, ...]:
    """Modules outside shiftbench that define the run's dataset, shift or model classes."""
    from .engines import user_modules
    from .generate import base_of

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


