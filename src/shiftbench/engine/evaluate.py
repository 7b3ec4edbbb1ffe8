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
saves them exactly as the local loop does (``_save_scored``), so both engines write the same store.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..errors import ShiftbenchError, SpecError
from ..metrics.base import OrderedMerge
from ..registry import METRICS, MODELS
from ..sample import Sample
from ..seeds import check_seed
from ..spec import EngineSection, Spec, load_spec
from ..results.artifacts import CURATION_ARTIFACT, SKIPPED_ARTIFACT, thumb_key
from ..results.codec import decode_state, encode_state
from ..results.store import Store, params_key
from .kernel import (COUNT_KEY, IDS_KEY, SKIPPED_KEY, STATE_FORMAT, STATE_FORMAT_KEY, Condition, Plan,
                     batches_needed, batches_per_unit, condition_ids, current_batches, finish_complete,
                     open_condition, plan_conditions, sample_records, shard_units, start_run)
from .pixels import DeviceBatch, tensor_path

if TYPE_CHECKING:
    from .engines import WorkerSetup

GRID_SAMPLES = 4  # per condition, kept as thumbnails with every model's prediction for the report
THUMB = 96
SKIPPED_LISTED = 20  # skipped samples named in a row's info (all are counted)

log = logging.getLogger("shiftbench")


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
    starts a new run instead. Setup (dataset, models, conditioning) happens before the store is
    opened, and a store this call created that holds no result when the run fails is removed.
    """
    spec = load_spec(spec_or_path).with_engine(name=engine, address=address, workers=workers,
                                               shard_size=shard_size, pixels=pixels)
    if spec.engine.ray:
        from .engines import check_reachable, import_ray

        import_ray()  # a missing Ray or an unreachable cluster is said before minutes of setup
        if spec.engine.address not in (None, "", "auto"):
            check_reachable(spec.engine.address)
    runner = _Runner(spec, None, run_id, progress, models or {}, on_batch, new_run=new_run)
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

    # -- setup --------------------------------------------------------------------------------
    def _dataset(self):
        from ..datasets import Subset, load, reader_kwargs

        # on_error "skip": unreadable files are found before any work (a full decode, as load does), so a
        # run never stops half-way on one; they are logged by the reader and recorded in the store
        kwargs = reader_kwargs(self.spec.dataset, self.spec.dataset_params, getattr(self.spec, "on_error", "fail"),
                               verify=self.verify)
        dataset = load(self.spec.dataset, **kwargs)
        self.skipped = list(getattr(dataset, "skipped", []))
        where = f"dataset {self.spec.dataset!r}"
        # two samples with one id would share a random stream and their per-sample records: refused before
        # any work, over the whole dataset where ids are cheap (or an id list needs them all anyway)
        index = _unique_ids(dataset, where) if self.spec.ids or _ids_are_cheap(dataset) else None
        if self.spec.ids:
            dataset = _select_ids(dataset, Path(self.spec.ids), index)
        if self.spec.limit is not None and self.spec.limit < len(dataset):
            dataset = Subset(dataset, list(range(self.spec.limit)))
        if index is None:  # ids that cost a decode each: only the samples the run reads
            _unique_ids(dataset, where)
        if len(dataset) == 0:
            raise ShiftbenchError(f"dataset {self.spec.dataset!r} has no samples")
        return dataset

    def _models(self, dataset) -> dict[str, Any]:
        """Every model, checked against the dataset's label space before any work (engine/labels.py):
        the plan maps labels where that is exact, and a zero-shot model runs as a copy set to the
        dataset's classes, so an object the caller passed in is never changed."""
        from .labels import plan_labels

        models = {}
        self.plans = {}
        for m in self.spec.models:
            params = dict(m.params)
            if self.engine.ray and str(params.get("device", "cpu")).startswith("cuda"):
                # the ray driver only checks the models (label spaces, weights for the run's identity): it
                # loads them on its CPU, so a head node without a GPU can drive a GPU cluster
                params["device"] = "cpu"
            model = self.given_models.get(m.label) or MODELS.create(m.name, **params)
            task = getattr(model, "task", None)
            if task not in _HANDLERS:
                raise ShiftbenchError(f"model {m.name!r}: the runner does not evaluate {task!r} models yet")
            self._metrics({m.label: model})  # a metric of another task is the first thing to say
            plan = plan_labels(model, dataset, self.spec.label_map, dataset_name=f"dataset {self.spec.dataset!r}")
            self.plans[m.label] = plan
            models[m.label] = plan.model
        if self.spec.label_map and not any(plan.uses_map for plan in self.plans.values()):
            where = f"{self.spec.source}: label_map" if self.spec.source else "label_map"
            raise SpecError(f"{where}: no model of this spec maps dataset classes to its own (zero-shot models take "
                            "the dataset's classes; captioners and class-agnostic segmenters have none); remove it")
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
        conditioning, and the first batch checked against every condition (``_check_first_batch``)."""
        spec = self.spec
        check_seed(spec.seed)  # a Spec object edited after load_spec: refused before any setup (seeds.py)
        from .retrieval import is_retrieval_spec, setup_retrieval

        if is_retrieval_spec(spec):
            setup = setup_retrieval(spec, self.given_models)
            return Plan(spec, setup.dataset, setup.models, {m: list(spec.metrics) for m in setup.models}, [],
                        retrieval=setup)
        dataset = self.given_dataset if self.given_dataset is not None else self._dataset()
        models = self._models(dataset)
        metrics = self._metrics(models)
        if spec.curate and self.given_dataset is None:  # a worker gets the driver's curated dataset
            dataset = self._curate(dataset, models)
        conditions = plan_conditions(spec)
        first = [dataset.load(i) for i in range(min(spec.batch_size, len(dataset)))]
        checked = self.given_dataset is None and spec.on_error == "fail"  # a worker runs the driver's checked plan
        if checked:  # a sample without what a shift needs (a mask, contexts, a caption) is said before any loading
            self._check_first_batch(conditions, first, "check_sample")
        # load each shift's conditioning (u2netp, SAM, a captioner, a diffusion pipeline) now, so that
        # a missing file fails here, in a dry run too, and not after minutes of work
        for shift in {id(c.shift): c.shift for c in conditions}.values():
            shift.load_conditioning(first[0])
        if checked:
            self._check_first_batch(conditions, first, "draw")
        self._all_models = list(models.values())
        return Plan(spec, dataset, models, metrics, conditions)

    def _check_first_batch(self, conditions: list[Condition], first: list[Sample], step: str) -> None:
        """What the run's first batch of every condition asks of its samples, asked now (the dry run's promise:
        it passes only if every first batch can run). ``check_sample``: each shift's requirements (a mask,
        the object's contexts, a caption); ``draw``: every sample's params as the run draws them, which
        also checks sizes, the masks a provider finds and whatever else a shift refuses before painting.
        Stops in one line naming the spec's shift entry, the sample and the shift's reason (with on_error:
        skip the run leaves such samples out, so this is not called)."""
        from .generate import error_reason

        seed = self.spec.seed
        shifted = [c for c in conditions if c.shift_name != "clean"]
        for sample in first:  # sample by sample: a mask provider's cache then serves every condition of a sample
            for cond in shifted:
                try:
                    if step == "draw":
                        cond.shift.draw(sample, cond.severity, seed)
                    else:
                        cond.shift.check_sample(sample)
                except ShiftbenchError as exc:
                    raise ShiftbenchError(self._cannot_run(cond, sample, str(exc))) from None
                except Exception as exc:  # noqa: BLE001 - a shift's own failure, said as the run would say it
                    raise ShiftbenchError(self._cannot_run(cond, sample, error_reason(exc))) from None

    def _cannot_run(self, cond: Condition, sample: Sample, reason: str) -> str:
        entry = f"shifts[{cond.index}]" if cond.index is not None else "shifts"
        where = f"{self.spec.source}: {entry}" if self.spec.source else entry
        params = f" {json.dumps(cond.params, sort_keys=True)}" if cond.params else ""
        return (f"{where}: shift {cond.shift_name!r}{params} (severity {cond.severity}) cannot run on sample "
                f"{str(sample.id)!r}: {' '.join(reason.split())}")

    def _curate(self, dataset, models: dict[str, Any]):
        """The spec's ``curate:`` section: keep the samples every named classifier gets right on clean
        (engine/curate.py), after ids and limit. Deterministic (clean images, fixed weights), so a resumed run
        or a Ray worker that opens the dataset itself finds the same samples."""
        from ..datasets import Subset
        from .curate import classifier_plan, curated_indices

        names = self.spec.curate.get("models") or [m.label for m in self.spec.models]
        nets: dict[str, tuple[Any, Any]] = {}
        for name in names:
            if name in models:
                plan = self.plans[name]
                if getattr(plan.model, "task", None) != "classification":
                    raise ShiftbenchError(f"curate: {name!r} is a {getattr(plan.model, 'task', '?')} model; "
                                          "curation needs classifiers")
                nets[name] = (models[name], plan)
            else:  # a registered classifier that is not evaluated, only used to curate
                nets[name] = classifier_plan(MODELS.create(name), name, dataset, f"dataset {self.spec.dataset!r}",
                                             self.spec.label_map)
        with _Progress(self.progress, float(len(dataset))) as bar:
            done = [0]

            def advance(k: int, total: int) -> None:
                bar.advance("curating on clean", k - done[0])
                done[0] = k

            kept, summary = curated_indices(dataset, nets, self.spec.batch_size,
                                            self.spec.curate.get("min_mask_fraction"), advance)
        if not kept:
            raise ShiftbenchError(f"curate: none of the {len(dataset)} samples is classified correctly on clean by "
                                  f"every model ({', '.join(names)}); nothing to evaluate")
        summary["ids"] = [dataset.sample_id(i) for i in kept]
        self.curation = summary
        log.info(f"curated: {len(kept)} of {len(dataset)} samples that {', '.join(names)} all classify "
                 "correctly on clean")
        return Subset(dataset, kept)

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
        n = self._n_samples = len(dataset)
        batch = spec.batch_size
        n_batches = (n + batch - 1) // batch
        cids = condition_ids(self.store, run_id, spec.dataset, models, conditions)
        todo_total = sum(n for cid in cids.values() if not self.store.is_done(cid))
        if self.engine.ray:
            with _Progress(self.progress, todo_total) as bar:
                self._run_distributed(plan, run_id, cids, n_batches, bar)
            self.store.finish_run(run_id)
            return self.store.rows(run_id)
        with _Progress(self.progress, todo_total) as bar, ThreadPoolExecutor(1) as loader:
            for ci, cond in enumerate(conditions):
                restored = self._open_condition(ci, cond, plan, cids)
                if not restored:
                    continue
                batches = batches_needed(n_batches, (held.saved for held in restored.values()))
                future: Future | None = None
                for k, b in enumerate(batches):
                    if future is None:
                        future = loader.submit(self._load_batch, dataset, cond, b, batch)
                    samples, skipped, pixels = future.result()
                    future = (loader.submit(self._load_batch, dataset, cond, batches[k + 1], batch)
                              if k + 1 < len(batches) else None)
                    for m, held in restored.items():
                        if b in held.saved:
                            continue
                        scored = self._score(m, models[m], metrics[m], b, samples, skipped, pixels)
                        if b == 0:  # before the batch: a kill between the two redoes the batch and rewrites them
                            self._save_thumbnails(run_id, self._thumbnails(cond, _grid(samples, pixels)))
                        self._save_scored(cids[(m, ci)], scored, held)
                        bar.advance(f"{m} {cond.shift_name} s{cond.severity}", len(samples))
                        if self.on_batch:
                            self.on_batch(m, b)
                for m, held in restored.items():
                    self._finish_restored(models[m], metrics[m], cids[(m, ci)], held, n_batches)
        self.store.finish_run(run_id)
        return self.store.rows(run_id)

    def _open_condition(self, ci: int, cond: Condition, plan: Plan, cids: dict) -> dict[str, "_Restored"]:
        """The models that still need condition ``ci``, each with its restored mergers."""
        return open_condition(self.store, cids, ci, plan.models,
                              lambda m, cid: self._restore(m, plan.metrics[m], cid, cond))

    # -- the ray engine -------------------------------------------------------------------------
    def _run_distributed(self, plan: Plan, run_id: str, cids: dict, n_batches: int, bar: "_Progress") -> None:
        """Units of (condition, shard) on Ray actors, each holding a replica of every model (set up once
        per actor from the spec); a unit shifts its shard once and scores it with every model that still
        needs it. Results come back here, the only writer of the store, saved batch by batch exactly as
        the local loop saves them, so a killed driver resumes from the same store either way."""
        import dataclasses
        import uuid

        from .engines import WorkerSetup, make_engine

        spec, models, metrics, conditions = self.spec, plan.models, plan.metrics, plan.conditions
        per_unit = batches_per_unit(self.engine.shard_size, spec.batch_size)
        # a worker runs its units where it is (local), its pixels where the driver decided
        spec = dataclasses.replace(spec, engine=EngineSection(pixels=self.pixels))
        setup = WorkerSetup(uuid.uuid4().hex, spec, dict(self.given_models), _user_modules(plan), os.getcwd(),
                             dataset=plan.dataset, verify="full" if getattr(self, "skipped", None) else "none")
        open_conditions: dict[int, dict[str, _Restored]] = {}
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

            def finish(ci: int, m: str, held: _Restored) -> None:
                self._finish_restored(models[m], metrics[m], cids[(m, ci)], held, n_batches)

            units = (_Unit(handle, ci, chunk, needs) for ci, chunk, needs in shard_units(
                conditions, lambda ci, cond: self._open_condition(ci, cond, plan, cids), lambda held: held.saved,
                n_batches, per_unit, finish, open_conditions))
            for unit, (scored, thumbs) in eng.imap(_run_unit, units, stage="model"):
                cond = conditions[unit.ci]
                restored = open_conditions[unit.ci]
                self._save_thumbnails(run_id, thumbs)  # before the batches (see the local loop)
                for item in scored:
                    cid = cids[(item.model, unit.ci)]
                    self._save_scored(cid, item, restored[item.model])
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
        self.run_id = run_id

    def _load_batch(self, dataset, cond: Condition, b: int,
                    batch: int) -> tuple[list[Sample], list[tuple[str, str]], DeviceBatch | None]:
        """Batch ``b`` shifted for ``cond``, the (id, reason) of samples left out, and, when the condition's
        pixels run on the models' device (engine/pixels.py), the batch to corrupt there (the samples are
        then the clean ones, their params drawn and checked here). A batch the shift fails on is redone
        sample by sample (a batch equals its samples one by one) to name the sample: the run stops with it,
        or with ``on_error: skip`` leaves it out of this condition (recorded in its rows)."""
        indices = range(b * batch, min((b + 1) * batch, len(dataset)))
        samples = [dataset.load(i) for i in indices]
        if cond.shift_name == "clean":
            return samples, [], None
        from .generate import shift_narrowed

        shift, severity, seed = cond.shift, cond.severity, self.spec.seed
        on_device = tensor_path(self.pixels, shift, getattr(self, "_all_models", []))

        def run(xs: list[Sample]) -> tuple[list, list]:
            params = [shift.draw(s, severity, seed) for s in xs]
            if on_device:  # drawing checks every image (size, type); the pixels are made on the device
                return list(xs), params
            return list(shift.apply_batch(xs, params)), params

        _, out, params, failed = shift_narrowed(run, samples, self.spec.on_error,
                                                f"evaluate: shift {cond.shift_name!r} (severity {severity})")
        skipped = []
        for pos, reason in failed:
            log.warning(f"skipped sample {samples[pos].id}: shift {cond.shift_name!r} (severity {severity}) failed: "
                        f"{reason}")
            skipped.append((str(samples[pos].id), reason))
        return out, skipped, (DeviceBatch(shift, out, params) if on_device else None)

    def _score(self, label: str, model, metric_names: list[str], b: int, samples: list[Sample],
               skipped: list[tuple[str, str]], pixels: DeviceBatch | None = None) -> "_Scored":
        """Predict one batch and score it with fresh metrics: their states (this batch's alone), the
        records kept (the grid's on batch 0, every sample's with ``log_samples``)."""
        handler = _HANDLERS[model.task]
        plan = self.plans[label]
        parts = {name: self._metric(name, label) for name in metric_names}
        predictions: list = []
        if samples:
            predict = handler.predict if pixels is None else pixels.predict
            outputs = plan.outputs(_predict_with_backoff(predict, model, samples))
            targets = plan.targets(samples)  # metrics and records see both sides in one space
            for name in metric_names:
                parts[name].update_from_samples(outputs, targets)
            grid = targets[:GRID_SAMPLES] if b == 0 else []
            keep = targets if self.spec.log_samples else grid
            predictions = [(s.id, handler.record(outputs, i, s, model, plan.output_space)) for i, s in enumerate(keep)]
        states: dict[str, Any] = {name: encode_state(parts[name].state_dict()) for name in metric_names}
        states[STATE_FORMAT_KEY] = STATE_FORMAT
        states[COUNT_KEY] = len(samples)
        states[IDS_KEY] = [str(s.id) for s in samples]
        if skipped:
            states[SKIPPED_KEY] = [list(item) for item in skipped]
        return _Scored(label, b, states, predictions, len(samples), list(skipped), parts)

    def _save_scored(self, cid: int, scored: "_Scored", restored: "_Restored") -> None:
        """Save a scored batch (one transaction) and hand its metric states to the condition's mergers."""
        self.store.save_batch(cid, scored.batch, scored.states, predictions=scored.predictions or None)
        parts = scored.parts
        if parts is None:  # from a worker: the states are what the store holds, decoded as a resume does
            parts = {}
            for name, merger in restored.mergers.items():
                parts[name] = merger.total.fresh()
                parts[name].load_state_dict(decode_state(scored.states[name]))
        for name, merger in restored.mergers.items():
            merger.add(scored.batch, parts[name])
        restored.saved.add(scored.batch)
        restored.ids[scored.batch] = scored.states.get(IDS_KEY)
        restored.n += scored.n
        restored.skipped.extend(scored.skipped)

    def _thumbnails(self, cond: Condition, samples: list[Sample]) -> list[tuple[str, bytes, dict[str, Any]]]:
        """The report's grid thumbnails of a condition: (artifact key, PNG bytes, meta)."""
        import cv2

        out = []
        for s in samples:
            h, w = s.image.shape[:2]
            scale = THUMB / max(h, w)
            thumb = cv2.resize(s.image, (max(1, round(w * scale)), max(1, round(h * scale))),
                               interpolation=cv2.INTER_AREA)
            ok, png = cv2.imencode(".png", thumb[:, :, ::-1])
            # the meta carries the condition itself, which is what the report reads
            pk = params_key(cond.params)
            out.append((thumb_key(cond.shift_name, pk, cond.severity, s.id), png.tobytes(), {
                "label": s.label, "class_name": s.class_name, "shift": cond.shift_name, "params_key": pk,
                "severity": cond.severity, "sample_id": str(s.id)}))
        return out

    def _save_thumbnails(self, run_id: str, thumbs: list[tuple[str, bytes, dict[str, Any]]]) -> None:
        for key, png, meta in thumbs:
            self.store.put_artifact(run_id, key, png, meta)

    def _restore(self, model_label: str, metric_names: list[str], cid: int, cond: Condition) -> "_Restored":
        """One merger per metric, holding the saved batches' states when resuming (merged in batch order)."""
        restored = _Restored({name: OrderedMerge(self._metric(name, model_label)) for name in metric_names})
        saved, dropped = current_batches(self.store, cid)
        if dropped is not None:
            # an older shiftbench saved the running total after every batch: merging those would count
            # every sample many times, so the condition starts again (its batches and predictions go)
            log.warning(f"{model_label} {cond.shift_name} s{cond.severity}: {dropped} saved batches are in the "
                        f"cumulative format of an older shiftbench; recomputing this condition")
            return restored
        batch = self.spec.batch_size
        for b, state in saved.items():
            for name in metric_names:
                if name not in state:
                    raise ShiftbenchError(f"store condition {cid}: saved batch {b} has no state for metric {name!r}")
                part = restored.mergers[name].total.fresh()
                part.load_state_dict(decode_state(state[name]))
                restored.mergers[name].add(b, part)
            restored.saved.add(b)
            restored.ids[b] = state.get(IDS_KEY)  # None in a batch saved before ids were kept
            # a batch saved before counts were kept is a full one (nothing could be skipped then)
            full = min(batch, self._n_samples - b * batch)
            restored.n += int(state.get(COUNT_KEY, full))
            restored.skipped.extend(tuple(item) for item in state.get(SKIPPED_KEY, []))
        return restored

    def _finish_restored(self, model, metric_names: list[str], cid: int, restored: "_Restored", n_batches: int) -> None:
        batch_ids = [restored.ids.get(b) for b in range(n_batches)]
        ids = None if any(i is None for i in batch_ids) else [sid for part in batch_ids for sid in part]
        self._finish(model, metric_names, cid, restored.n,
                     {name: merger.result(n_batches) for name, merger in restored.mergers.items()}, restored.skipped,
                     ids=ids)

    def _finish(self, model, metric_names: list[str], cid: int, n: int, metrics: dict[str, Any],
                skipped: Sequence[tuple[str, str]] = (), ids: list[str] | None = None) -> None:
        """Write a condition's rows and, when the sample ids are known (``ids``, in data order), each
        metric's per-sample values, in one transaction."""
        results: dict[str, Any] = {}
        samples: dict[str, tuple[str, list[str], Any]] = {}
        for name in metric_names:
            metric = metrics[name]
            values = metric.compute()
            if not isinstance(values, dict):
                values = {name: values}
            extra = _jsonable(metric.state()) if hasattr(metric, "state") else {}
            for i, (key, value) in enumerate(values.items()):
                info = {"higher_is_better": bool(getattr(metric, "higher_is_better", True)), "metric": name}
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
        self.store.finish_condition(cid, results, n=n, samples=samples)


# -- units of the ray engine ----------------------------------------------------------------------
@dataclass
class _Restored:
    """A (model, condition) being computed: its mergers, the batches in them, samples scored and skipped."""

    mergers: dict[str, OrderedMerge]
    saved: set = None  # type: ignore[assignment]
    n: int = 0
    skipped: list = None  # type: ignore[assignment]
    ids: dict = None  # type: ignore[assignment]  # batch -> ids of its scored samples (None: not saved)

    def __post_init__(self) -> None:
        self.saved = set() if self.saved is None else self.saved
        self.skipped = [] if self.skipped is None else self.skipped
        self.ids = {} if self.ids is None else self.ids


@dataclass
class _Scored:
    """One (model, batch) scored: what the store saves, and (locally) the metric objects themselves."""

    model: str
    batch: int
    states: dict[str, Any]
    predictions: list
    n: int
    skipped: list
    parts: dict[str, Any] | None = None  # None once sent from a worker: the states are decoded instead


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
        runner._n_samples = len(plan.dataset)
        return runner, plan

    return worker_state(handle, build)


def _run_unit(unit: _Unit) -> tuple[list[_Scored], list[tuple[str, bytes, dict[str, Any]]]]:
    """Shift a unit's batches once and score each with every model that needs it (runs on a worker)."""
    runner, plan = _worker_plan(unit.setup)
    cond = plan.conditions[unit.ci]
    needs = dict(unit.needs)
    scored: list[_Scored] = []
    thumbs: list = []
    for b in unit.batches:
        samples, skipped, pixels = runner._load_batch(plan.dataset, cond, b, runner.spec.batch_size)
        for label, batches in needs.items():
            if b in batches:
                item = runner._score(label, plan.models[label], plan.metrics[label], b, samples, skipped, pixels)
                item.parts = None  # the driver decodes the states (they are what the store keeps)
                scored.append(item)
        if b == 0:
            thumbs = runner._thumbnails(cond, _grid(samples, pixels))
    return scored, thumbs


def _grid(samples: list[Sample], pixels: DeviceBatch | None) -> list[Sample]:
    """The first samples as the report's grid shows them: shifted (downloaded when shifted on a device)."""
    return samples[:GRID_SAMPLES] if pixels is None else pixels.shifted_samples(GRID_SAMPLES)


def _user_modules(plan: Plan) -> tuple[str, ...]:
    """Modules outside shiftbench that define the run's dataset, shift or model classes."""
    from .engines import user_modules
    from .generate import base_of

    return user_modules([plan.dataset, base_of(plan.dataset), *(c.shift for c in plan.conditions),
                         *plan.models.values()])


def _unsendable(setup: WorkerSetup, exc: BaseException) -> str:
    """Which model the caller passed cannot be pickled for the workers (or why the setup cannot travel)."""
    from ray import cloudpickle

    from .generate import error_reason

    for label, model in setup.models.items():
        try:
            cloudpickle.dumps(model)
        except Exception as err:  # noqa: BLE001 - reported by name
            return (f"model {label!r} was passed as an object that cannot be sent to Ray workers ({error_reason(err)}); "
                    f"name it in the spec (a registered name, hub id or folder) or use the local engine")
    return f"the run's setup cannot be sent to Ray workers: {error_reason(exc)}"


# -- task handlers --------------------------------------------------------------------------------
def _predict(model, samples: Sequence[Sample]) -> Any:
    """What the model's task's metrics take, checked for NaN/inf and length (models.base.predict_batch)."""
    from ..models.base import predict_batch

    return predict_batch(model, [s.image for s in samples])


class _Classification:
    predict = staticmethod(_predict)

    @staticmethod
    def record(logits: np.ndarray, i: int, s: Sample, model, space=None) -> dict[str, Any]:
        z = logits[i].astype(np.float64)
        p = np.exp(z - z.max())
        p /= p.sum()
        top = np.argsort(-p, kind="stable")[:5]
        names = model.label_space.class_names
        return {"label": s.label, "pred": int(top[0]), "pred_name": names[int(top[0])],
                "confidence": round(float(p[top[0]]), 6), "correct": bool(int(top[0]) == s.label),
                "top5": [int(t) for t in top]}


class _Segmentation:
    predict = staticmethod(_predict)

    @staticmethod
    def record(outputs: list[np.ndarray], i: int, s: Sample, model, space=None) -> dict[str, Any]:
        out = np.asarray(outputs[i])
        pred = out >= 0.5 if out.dtype.kind == "f" else out > 0  # probabilities or label maps
        record: dict[str, Any] = {"foreground_fraction": round(float(pred.mean()), 6)}
        if s.mask is not None:
            t = np.asarray(s.mask) > 0
            union = np.logical_or(t, pred).sum()
            record["iou"] = round(float(np.logical_and(t, pred).sum() / union), 6) if union else 1.0
        return record


class _Detection:
    predict = staticmethod(_predict)

    @staticmethod
    def record(outputs: list[Any], i: int, s: Sample, model, space=None) -> dict[str, Any]:
        det = outputs[i]
        order = np.argsort(-det.scores, kind="stable")[:5]
        # after the label plan, detections carry the dataset's labels: name them from that space
        space = space or model.label_space
        names = space.class_names if space else None
        return {"detections": len(det), "top": [
            {"box": [round(float(v), 2) for v in det.boxes[k]], "score": round(float(det.scores[k]), 4),
             "label": int(det.labels[k]), **({"name": names[int(det.labels[k])]} if names else {})}
            for k in order]}


class _Captioning:
    predict = staticmethod(_predict)

    @staticmethod
    def record(outputs: list[str], i: int, s: Sample, model, space=None) -> dict[str, Any]:
        return {"caption": outputs[i], "reference": s.caption}


_HANDLERS: dict[str, Any] = {"classification": _Classification, "segmentation": _Segmentation,
                             "detection": _Detection, "captioning": _Captioning}


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


def _ids_are_cheap(dataset: Any) -> bool:
    """Whether the dataset (below any Subset) names its samples without decoding them."""
    from ..datasets import Subset
    from ..datasets.base import Dataset

    while isinstance(dataset, Subset):
        dataset = dataset.base
    return getattr(type(dataset), "sample_id", None) is not Dataset.sample_id


def _unique_ids(dataset: Any, where: str) -> dict[str, int]:
    """Every sample's position by id; ShiftbenchError naming the first id two samples share."""
    index: dict[str, int] = {}
    for i in range(len(dataset)):
        sid = str(dataset.sample_id(i))
        first = index.setdefault(sid, i)
        if first != i:
            paths = [getattr(dataset, "source_path", lambda k: None)(k) for k in (first, i)]
            note = f" ({paths[0]} and {paths[1]})" if all(paths) else ""
            raise ShiftbenchError(f"{where}: samples {first} and {i}{note} have the same id {sid!r}; ids must be "
                                  "unique (each names a sample's records and random stream)")
    return index


def _read_id_list(path: Path) -> list[str]:
    """The ids of an id list in file order (blank lines and '#' lines skipped); an id listed twice is refused
    with both line numbers (it would be scored, and counted in n, twice)."""
    if not path.is_file():
        raise ShiftbenchError(f"{path}: id list not found")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ShiftbenchError(f"{path}: cannot read the id list ({type(exc).__name__})") from None
    seen: dict[str, int] = {}
    for n, line in enumerate(lines, start=1):
        sid = line.strip()
        if not sid or line.startswith("#"):
            continue
        if sid in seen:
            raise ShiftbenchError(f"{path}:{n}: id {sid!r} is listed twice (lines {seen[sid]} and {n}); list each "
                                  "sample once")
        seen[sid] = n
    return list(seen)


def _select_ids(dataset, path: Path, index: dict[str, int] | None = None):
    from ..datasets import Subset

    wanted = _read_id_list(path)
    if index is None:
        index = _unique_ids(dataset, "dataset")
    missing = [w for w in wanted if w not in index]
    if missing:
        raise ShiftbenchError(f"{path}: {len(missing)} ids are not in the dataset (first: {missing[:3]})")
    return Subset(dataset, [index[w] for w in wanted])


class _Progress:
    def __init__(self, enabled: bool, total: float):
        self.enabled = enabled and total > 0
        self.total = total
        self.start = time.perf_counter()
        self.images = 0.0

    def __enter__(self) -> "_Progress":
        import sys

        from ..console import LineProgress, is_terminal

        self.lines = None
        if self.enabled and not is_terminal(sys.stderr):
            # a log file or a pipe: rich cannot animate a bar there, so a plain line every few seconds
            self.lines = LineProgress(self.total)
            return self
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description:<28}"), BarColumn(), TextColumn("{task.fields[rate]}"),
                                TimeRemainingColumn())
            self.bar.__enter__()
            self.task = self.bar.add_task("evaluate", total=self.total, rate="")
        return self

    def advance(self, label: str, images: float) -> None:
        if not self.enabled:
            return
        if self.lines is not None:
            self.lines.advance(label, images)
            return
        self.images += images
        rate = self.images / max(time.perf_counter() - self.start, 1e-9)
        self.bar.update(self.task, advance=images, description=label, rate=f"{rate:.1f} img/s")

    def __exit__(self, *exc: Any) -> None:
        if self.lines is not None:
            if exc[0] is None:
                self.lines.close()
        elif self.enabled:
            self.bar.__exit__(*exc)
