"""The evaluation driver holds nothing per sample beyond the batches in flight and one condition's per-sample
values: at n and at 4n samples, the samples alive stay the same, the metric data alive is at most one
condition's (local loop and Ray alike), and nothing of a run is left once it returns. Counted on live objects
(``gc``), so the bounds hold on any machine."""

from __future__ import annotations

import gc
from typing import Any

import pytest

import tiny_registry  # noqa: F401  (registers _test_tiny, _test_noise)
from shiftbench.engine import engines, evaluate as evaluation
from shiftbench.engine.engines import Engine
from shiftbench.engine.evaluate import evaluate
from shiftbench.engine.kernel import Held, Scored
from shiftbench.metrics.base import Metric
from shiftbench.results.store import Store
from shiftbench.sample import Sample

MODELS, METRICS, BATCH, CONDITIONS = 2, 2, 8, 4


def spec(n: int) -> dict[str, Any]:
    return {"dataset": "_test_tiny", "dataset_params": {"n": n}, "seed": 0, "batch_size": BATCH,
            "models": [{"name": "dummy_classifier", "params": {"label_space": 2, "seed": s}} for s in range(MODELS)],
            "metrics": ["top1", "ece"], "shifts": ["clean", {"name": "_test_noise", "severities": [1, 2, 3]}]}


def alive() -> dict[str, int]:
    """What of a run is alive in this process: samples, metric data (samples counted in every live metric's
    state), the (model, condition)s held and the scored batches."""
    gc.collect()
    out = {"samples": 0, "metric_samples": 0, "held": 0, "scored": 0}
    for obj in gc.get_objects():
        kind = type(obj)  # not isinstance: that reads obj.__class__, which some lazy module proxies warn about
        if issubclass(kind, Sample):
            out["samples"] += 1
        elif issubclass(kind, Metric):
            out["metric_samples"] += obj.n
        elif issubclass(kind, Held):
            out["held"] += 1
        elif issubclass(kind, Scored):
            out["scored"] += 1
    return out


def run(tmp_path, n: int, **engine: Any) -> tuple[dict[str, int], dict[str, int]]:
    """The most of each kind alive after any saved batch of a run over ``n`` samples, and what is alive after it,
    both beyond what was alive before it (earlier tests in the same process may keep samples or metrics)."""
    most: dict[str, int] = {}
    before = alive()

    def on_batch(model: str, batch: int) -> None:
        for key, count in alive().items():
            most[key] = max(most.get(key, 0), count - before[key])

    rows = evaluate(spec(n), tmp_path / f"n{n}-{engine.get('engine', 'local')}.db", on_batch=on_batch, **engine)
    assert len(rows) == MODELS * CONDITIONS * METRICS and {r["n"] for r in rows} == {n}
    del rows
    return most, {key: count - before[key] for key, count in alive().items()}


def test_the_local_loop_holds_one_condition_at_a_time(tmp_path):
    n = 16
    small, after_small = run(tmp_path, n)
    large, after_large = run(tmp_path, 4 * n)
    for most, size in ((small, n), (large, 4 * n)):
        # the condition in flight: each model's merged totals and the parts of the batch being saved; the
        # conditions finished before it are gone (a finished condition's mergers kept alive would double it)
        assert most["metric_samples"] <= MODELS * METRICS * (size + BATCH)
        assert most["held"] <= MODELS
    # samples: the batch being scored and the one prefetched, however many the dataset has
    assert large["samples"] == small["samples"] <= 2 * BATCH
    assert large["scored"] == small["scored"] <= MODELS
    assert all(count <= 0 for after in (after_small, after_large) for count in after.values())  # nothing of it left


def test_the_ray_driver_holds_one_open_condition_at_a_time(ray_cluster, tmp_path):
    engine = {"engine": "ray", "address": ray_cluster["address"], "workers": 2, "shard_size": BATCH}
    n = 16
    small, after_small = run(tmp_path, n, **engine)
    large, after_large = run(tmp_path, 4 * n, **engine)
    # units of one batch, four in flight (two per actor), ending in any order: a slow one keeps its condition
    # open while the others run through later conditions, which are parked (their batches in the store until
    # their finish), so the metric data alive is the oldest open condition's and the unit being saved
    for most, size in ((small, n), (large, 4 * n)):
        assert most["metric_samples"] <= MODELS * METRICS * (size + BATCH)
    # the driver never reads a sample, and only the unit being saved is alive of what the workers send
    assert large["samples"] == small["samples"] == 0
    assert large["scored"] <= MODELS and small["scored"] <= MODELS
    assert all(count <= 0 for after in (after_small, after_large) for count in after.values())  # nothing of it left


class Straggling(Engine):
    """Units run here in the order given, the first one's result handed back last: a slow unit that keeps
    the run's first condition open while every later condition is computed."""

    def share(self, value: Any) -> Any:
        return value

    def imap(self, fn, units, stage: str = "cpu"):
        units = iter(units)
        first = next(units)
        late = fn(first)
        for unit in units:
            yield unit, fn(unit)
        yield first, late


def test_a_slow_unit_keeps_one_condition_open_and_the_later_ones_wait_in_the_store(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setattr(evaluation, "make_engine", lambda *args, **kwargs: Straggling())
    monkeypatch.setattr(engines, "_WORKER_STATE", {})  # the "worker" is this process: its setup goes with the test
    n = 64
    most, after = run(tmp_path, n, engine="ray", shard_size=BATCH)
    # the first condition waits for its batch 0 until the end; the three after it are computed meanwhile,
    # their batches parked in the store and merged at their finish: the data alive stays one condition's
    assert most["metric_samples"] <= MODELS * METRICS * (n + BATCH)
    assert after["metric_samples"] == after["held"] == after["scored"] == 0
    # and the parked conditions' rows (merged from the store) are the local loop's, value for value
    with Store(tmp_path / f"n{n}-ray.db") as db:
        straggled = db.rows()
    local = evaluate(spec(n), tmp_path / "local.db")
    fields = ("model", "shift", "severity", "metric", "value", "n", "extra")
    assert [[r.get(f) for f in fields] for r in straggled] == [[r.get(f) for f in fields] for r in local]
