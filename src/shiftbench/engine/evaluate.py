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
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ShiftbenchError, SpecError
from ..metrics.base import OrderedMerge
from ..registry import METRICS, MODELS, SHIFTS
from ..sample import Sample
from ..spec import Spec, load_spec
from .store import ConditionKey, Store

GRID_SAMPLES = 4  # per condition, kept as thumbnails with every model's prediction for the report
THUMB = 96
# every saved batch carries this key: its metric states are of that batch alone and merge. A store
# written before (each batch holding the cumulative state) lacks it, and such a partial condition is
# recomputed rather than mis-merged
STATE_FORMAT_KEY = "__state_format__"
STATE_FORMAT = "batch-merge/1"

log = logging.getLogger("shiftbench")


@dataclass
class Condition:
    """One planned condition of a run: a shift (``clean`` included) with its params and severity."""

    shift_name: str
    params: dict[str, Any]
    severity: int
    shift: Any


@dataclass
class Plan:
    """A run set up and checked, nothing run: the dataset opened, every model loaded, the metrics
    checked against each model's task, every shift created with its conditioning (mask providers,
    captioners, pipelines) loaded. ``prepare`` builds it for the real run and for ``--dry-run`` alike,
    so a dry run that passes means the run can start."""

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
) -> list[dict[str, Any]]:
    """Run a spec (dict, Spec or YAML path) and return its result rows (see DESIGN.md).

    ``store`` is a database path (created if missing) or an open Store; without one a temporary store
    is used. ``models`` may pass already-created model objects by name (reused across calls).
    A run resumes only when its inputs are unchanged (the spec, shiftbench's version, the weights,
    the dataset's files, the ids file); otherwise it stops naming what changed, and ``new_run=True``
    starts a new run instead. Setup (dataset, models, conditioning) happens before the store is
    opened, and a store this call created that holds no result when the run fails is removed.
    """
    spec = load_spec(spec_or_path)
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
        return runner.run(plan)
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
        self.given_models = models
        self.requested_run_id = run_id
        self.new_run = new_run
        self.run_id: str | None = None

    # -- setup --------------------------------------------------------------------------------
    def _dataset(self):
        from ..datasets import Subset, load, reader_kwargs

        # on_error "skip": unreadable files are found before any work (a full decode, as load does), so a
        # run never stops half-way on one; they are logged by the reader and recorded in the store
        kwargs = reader_kwargs(self.spec.dataset, self.spec.dataset_params, getattr(self.spec, "on_error", "fail"))
        dataset = load(self.spec.dataset, **kwargs)
        self.skipped = list(getattr(dataset, "skipped", []))
        if self.spec.ids:
            dataset = _select_ids(dataset, Path(self.spec.ids))
        if self.spec.limit is not None and self.spec.limit < len(dataset):
            dataset = Subset(dataset, list(range(self.spec.limit)))
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
            model = self.given_models.get(m.label) or MODELS.create(m.name, **m.params)
            task = getattr(model, "task", None)
            if task not in _HANDLERS:
                raise ShiftbenchError(f"model {m.name!r}: the runner does not evaluate {task!r} models yet")
            self._metrics({m.label: model})  # a metric of another task is the first thing to say
            plan = plan_labels(model, dataset, self.spec.label_map, dataset_name=f"dataset {self.spec.dataset!r}")
            self.plans[m.label] = plan
            models[m.label] = plan.model
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
        """Everything before the first model call: dataset, models, metrics, shifts and conditioning."""
        spec = self.spec
        from .retrieval import is_retrieval_spec, setup_retrieval

        if is_retrieval_spec(spec):
            setup = setup_retrieval(spec, self.given_models)
            return Plan(spec, setup.dataset, setup.models, {m: list(spec.metrics) for m in setup.models}, [],
                        retrieval=setup)
        dataset = self._dataset()
        models = self._models(dataset)
        metrics = self._metrics(models)
        conditions = []
        for s in spec.shifts:
            shift = SHIFTS.create(s.name, **s.params)
            for severity in s.severities:
                conditions.append(Condition(s.name, dict(s.params), severity, shift))
        # load each shift's conditioning (u2netp, SAM, a captioner, a diffusion pipeline) now, so that
        # a missing file fails here, in a dry run too, and not after minutes of work
        first = dataset.load(0)
        for shift in {id(c.shift): c.shift for c in conditions}.values():
            shift.load_conditioning(first)
        return Plan(spec, dataset, models, metrics, conditions)

    # -- the run ------------------------------------------------------------------------------
    def run(self, plan: Plan | None = None) -> list[dict[str, Any]]:
        from .provenance import git_hash, versions

        plan = plan or self.prepare()
        spec = self.spec
        if plan.retrieval is not None:  # composed retrieval (issue 9) runs its own loop in engine/retrieval.py
            from .retrieval import run_retrieval

            return run_retrieval(spec, self.store, self.requested_run_id, self.progress, self.given_models,
                                 setup=plan.retrieval, new_run=self.new_run, on_start=self._started,
                                 on_batch=self.on_batch)
        dataset, models, metrics, conditions = plan.dataset, plan.models, plan.metrics, plan.conditions
        dataset_name = spec.dataset
        run_id = self.store.start_run(spec.raw, spec.seed, run_id=self.requested_run_id, versions=versions(),
                                      git_hash=git_hash(), name=spec.name, identity=plan.identity(),
                                      new_run=self.new_run)
        self._started(run_id)
        self._record_skipped(run_id)
        n = len(dataset)
        batch = spec.batch_size
        n_batches = (n + batch - 1) // batch
        cids = {(m, i): self.store.condition(run_id, ConditionKey(m, dataset_name, c.shift_name, c.params, c.severity))
                for m in models for i, c in enumerate(conditions)}
        todo_total = sum(n for cid in cids.values() if not self.store.is_done(cid))
        with _Progress(self.progress, todo_total) as bar, ThreadPoolExecutor(1) as loader:
            for ci, cond in enumerate(conditions):
                pending = {m: cids[(m, ci)] for m in models if not self.store.is_done(cids[(m, ci)])}
                if not pending:
                    continue
                restored = {m: self._restore(m, metrics[m], cid, cond) for m, cid in pending.items()}
                live = {m: r[0] for m, r in restored.items()}
                saved = {m: r[1] for m, r in restored.items()}
                batches = [b for b in range(n_batches) if any(b not in saved[m] for m in pending)]
                future: Future | None = None
                for k, b in enumerate(batches):
                    if future is None:
                        future = loader.submit(self._load_batch, dataset, cond, b, batch)
                    samples = future.result()
                    future = (loader.submit(self._load_batch, dataset, cond, batches[k + 1], batch)
                              if k + 1 < len(batches) else None)
                    for m, cid in pending.items():
                        if b in saved[m]:
                            continue
                        self._run_batch(m, models[m], metrics[m], cid, b, samples, cond, run_id, live[m])
                        bar.advance(f"{m} {cond.shift_name} s{cond.severity}", len(samples))
                        if self.on_batch:
                            self.on_batch(m, b)
                for m, cid in pending.items():
                    self._finish(models[m], metrics[m], cid, n, {name: merger.result(n_batches)
                                                                 for name, merger in live[m].items()})
        self.store.finish_run(run_id)
        return self.store.rows(run_id)

    def _record_skipped(self, run_id: str) -> None:
        """Files the reader left out (on_error: skip) go into the store as ``skipped.json``."""
        if getattr(self, "skipped", None):
            import json

            data = json.dumps([{"file": name, "reason": reason} for name, reason in self.skipped], indent=1)
            self.store.put_artifact(run_id, "skipped.json", data.encode("utf-8"), {"count": len(self.skipped)})

    def _started(self, run_id: str) -> None:
        self.run_id = run_id

    def _load_batch(self, dataset, cond: Condition, b: int, batch: int) -> list[Sample]:
        indices = range(b * batch, min((b + 1) * batch, len(dataset)))
        samples = [dataset.load(i) for i in indices]
        if cond.shift_name == "clean":
            return samples
        params = [cond.shift.draw(s, cond.severity, self.spec.seed) for s in samples]
        return list(cond.shift.apply_batch(samples, params))

    def _run_batch(self, label: str, model, metric_names: list[str], cid: int, b: int, samples: list[Sample],
                   cond: Condition, run_id: str, mergers: dict[str, OrderedMerge]) -> None:
        """Predict one batch, score it with fresh metrics, save their states (this batch's alone) and
        hand them to the condition's mergers."""
        handler = _HANDLERS[model.task]
        plan = self.plans[label]
        # the thumbnails keep the dataset's own labels; metrics and records see both sides in one space
        outputs = plan.outputs(_predict_with_backoff(handler.predict, model, samples))
        shown = samples
        samples = plan.targets(samples)
        parts = {name: mergers[name].total.fresh() for name in metric_names}
        for name in metric_names:
            parts[name].update_from_samples(outputs, samples)
        states: dict[str, Any] = {name: encode_state(parts[name].state_dict()) for name in metric_names}
        states[STATE_FORMAT_KEY] = STATE_FORMAT
        grid = samples[:GRID_SAMPLES] if b == 0 else []
        keep = samples if self.spec.log_samples else grid
        predictions = [(s.id, handler.record(outputs, i, s, model, plan.output_space)) for i, s in enumerate(keep)]
        self.store.save_batch(cid, b, states, predictions=predictions or None)
        for name in metric_names:
            mergers[name].add(b, parts[name])
        if grid:
            self._save_thumbnails(run_id, cond, shown[:GRID_SAMPLES])

    def _save_thumbnails(self, run_id: str, cond: Condition, samples: list[Sample]) -> None:
        from urllib.parse import quote

        import cv2

        for s in samples:
            h, w = s.image.shape[:2]
            scale = THUMB / max(h, w)
            thumb = cv2.resize(s.image, (max(1, round(w * scale)), max(1, round(h * scale))),
                               interpolation=cv2.INTER_AREA)
            ok, png = cv2.imencode(".png", thumb[:, :, ::-1])
            # params may hold "/" (a texture path, a hub id): the key quotes them, and the meta carries the
            # condition itself, which is what the report reads
            pk = _params_key(cond.params)
            key = f"thumb/{cond.shift_name}/{quote(pk, safe='')}/{cond.severity}/{s.id}"
            self.store.put_artifact(run_id, key, png.tobytes(), {
                "label": s.label, "class_name": s.class_name, "shift": cond.shift_name, "params_key": pk,
                "severity": cond.severity, "sample_id": str(s.id)})

    def _restore(self, model_label: str, metric_names: list[str], cid: int,
                 cond: Condition) -> tuple[dict[str, OrderedMerge], set[int]]:
        """One merger per metric, holding the saved batches' states when resuming (merged in batch order)."""
        mergers = {name: OrderedMerge(self._metric(name, model_label)) for name in metric_names}
        saved = self.store.batches(cid)
        if any(state.get(STATE_FORMAT_KEY) != STATE_FORMAT for state in saved.values()):
            # an older shiftbench saved the running total after every batch: merging those would count
            # every sample many times, so the condition starts again (its batches and predictions go)
            dropped = self.store.clear_batches(cid)
            log.warning(f"{model_label} {cond.shift_name} s{cond.severity}: {dropped} saved batches are in the "
                        f"cumulative format of an older shiftbench; recomputing this condition")
            return mergers, set()
        for b, state in saved.items():
            for name in metric_names:
                if name not in state:
                    raise ShiftbenchError(f"store condition {cid}: saved batch {b} has no state for metric {name!r}")
                part = mergers[name].total.fresh()
                part.load_state_dict(decode_state(state[name]))
                mergers[name].add(b, part)
        return mergers, set(saved)

    def _finish(self, model, metric_names: list[str], cid: int, n: int, metrics: dict[str, Any]) -> None:
        results: dict[str, Any] = {}
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
                if value is None and hasattr(metric, "undefined_reason"):
                    info["undefined"] = metric.undefined_reason(key)  # stored as NULL, the reason beside it
                results[key] = (None if value is None or not np.isfinite(value) else float(value), n, info)
        self.store.finish_condition(cid, results, n=n)


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


def encode_state(value: Any) -> Any:
    """A metric's attributes as JSON: arrays keep dtype and shape, dataclasses and tuples are tagged."""
    import dataclasses

    if isinstance(value, np.ndarray):
        return {"__nd__": value.tolist() if value.dtype != object else [encode_state(v) for v in value],
                "dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return {"__float__": repr(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {"__dc__": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: encode_state(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return {"__items__": [[encode_state(k), encode_state(v)] for k, v in value.items()]}
        return {k: encode_state(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return {"__tuple__": [encode_state(v) for v in value]}
    if isinstance(value, list):
        return [encode_state(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ShiftbenchError(f"cannot save metric state of type {type(value).__name__}")


_STATE_CLASSES = ("shiftbench.",)  # only shiftbench dataclasses are rebuilt from a store


def decode_state(value: Any) -> Any:
    """Inverse of encode_state (rebuilds only shiftbench's own dataclasses; nothing is executed)."""
    import importlib

    if isinstance(value, list):
        return [decode_state(v) for v in value]
    if isinstance(value, dict):
        if "__nd__" in value:
            dtype = np.dtype(value["dtype"])
            if dtype == object:
                arr = np.empty(len(value["__nd__"]), dtype=object)
                arr[:] = [decode_state(v) for v in value["__nd__"]]
                return arr.reshape(value["shape"])
            return np.asarray(value["__nd__"], dtype=dtype).reshape(value["shape"])
        if "__float__" in value:
            return float(value["__float__"])
        if "__tuple__" in value:
            return tuple(decode_state(v) for v in value["__tuple__"])
        if "__items__" in value:
            return {decode_state(k): decode_state(v) for k, v in value["__items__"]}
        if "__dc__" in value:
            module, _, qualname = value["__dc__"].partition(":")
            if not module.startswith(_STATE_CLASSES):
                raise ShiftbenchError(f"store holds a state of foreign type {value['__dc__']!r}")
            cls = getattr(importlib.import_module(module), qualname)
            return cls(**{k: decode_state(v) for k, v in value["fields"].items()})
        return {k: decode_state(v) for k, v in value.items()}
    return value


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


def _params_key(params: dict[str, Any]) -> str:
    from .store import canonical_json

    return canonical_json(params or {})


def _select_ids(dataset, path: Path):
    from ..datasets import Subset

    if not path.exists():
        raise ShiftbenchError(f"{path}: id list not found")
    wanted = [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    index = {dataset.sample_id(i): i for i in range(len(dataset))}
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
        self.images += images
        rate = self.images / max(time.perf_counter() - self.start, 1e-9)
        self.bar.update(self.task, advance=images, description=label, rate=f"{rate:.1f} img/s")

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self.bar.__exit__(*exc)
