"""The SQLite results store: transactions, resume after SIGKILL, concurrent writers, bad files."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shiftbench.errors import StoreError
from shiftbench.results.store import Condition, Store

from e2e import count_in
from store_writer import expected_value

TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)
WRITER = [sys.executable, str(TESTS / "store_writer.py")]


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(TESTS.parent / "src"), e.get("PYTHONPATH", "")])
    return e


def check_complete(db: Path, name: str, conditions: int, batches: int) -> None:
    store = Store(db)
    assert store.integrity_check() == "ok"
    runs = [r for r in store.runs() if r["spec"]["writer"] == name]
    assert len(runs) == 1 and runs[0]["status"] == "done"
    rows = store.rows(runs[0]["run_id"])
    scores = {(r["shift"]): r for r in rows if r["metric"] == "score"}
    assert len(rows) == 2 * conditions  # no lost and no duplicated rows
    assert len(scores) == conditions
    for c in range(conditions):
        r = scores[f"s{c}"]
        assert r["value"] == pytest.approx(sum(expected_value(c, b) for b in range(batches)))
        assert r["n"] == 4 * batches and r["params"] == {"k": c} and r["severity"] == c % 5 + 1
    batch_rows = [r for r in rows if r["metric"] == "batches"]
    assert all(r["value"] == batches for r in batch_rows)
    preds = store.predictions(runs[0]["run_id"])
    assert len(preds) == conditions * batches * 4
    store.close()


def test_sigkill_mid_run_then_resume(tmp_path):
    db = tmp_path / "r.db"
    conditions, batches = 30, 4
    kills = 0
    for _ in range(3):  # kill it three times at different points
        proc = subprocess.Popen(WRITER + [str(db), "w", str(conditions), str(batches), "0.004"], env=env())
        deadline = time.time() + 60
        target = 3 + 8 * kills
        while time.time() < deadline:
            time.sleep(0.02)
            # the batches saved: a finished condition's were dropped with its finish (it had ``batches``)
            n = count_in(db, f"SELECT (SELECT COUNT(*) FROM batches)"
                             f" + {batches} * (SELECT COUNT(*) FROM conditions WHERE status = 'done')")
            if n is None:
                continue
            if n >= target * batches // 2 or proc.poll() is not None:
                break
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
    assert kills >= 1, "the writer finished before it could be killed"
    store = Store(db)
    run = store.runs()[0]
    assert run["status"] == "running"  # killed: not marked done
    done_before = len({r["shift"] for r in store.rows()})
    assert done_before < conditions
    store.close()
    subprocess.run(WRITER + [str(db), "w", str(conditions), str(batches), "0"], env=env(), check=True)
    check_complete(db, "w", conditions, batches)


def test_two_concurrent_writers(tmp_path):
    db = tmp_path / "c.db"
    Store(db).close()
    procs = [subprocess.Popen(WRITER + [str(db), name, "40", "3", "0"], env=env()) for name in ("a", "b")]
    for p in procs:
        assert p.wait(timeout=120) == 0
    check_complete(db, "a", 40, 3)
    check_complete(db, "b", 40, 3)


def test_same_run_twice_at_once_never_duplicates(tmp_path):
    db = tmp_path / "same.db"
    Store(db).close()
    procs = [subprocess.Popen(WRITER + [str(db), "same", "25", "2", "0"], env=env()) for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    check_complete(db, "same", 25, 2)


def test_finish_is_atomic_and_idempotent(tmp_path):
    store = Store(tmp_path / "s.db")
    run = store.start_run({"a": 1}, seed=3, versions={"numpy": "x"}, git_hash="abc")
    cid = store.condition(run, Condition("m", "d", "clean", {}, 0))
    assert cid == store.condition(run, Condition("m", "d", "clean", {}, 0))
    assert store.finish_condition(cid, {"top1": (0.5, 10), "ece": (0.1, 10, {"bins": [1, 2]})})
    assert not store.finish_condition(cid, {"top1": (0.9, 10)})
    rows = store.rows(run)
    assert [(r["metric"], r["value"]) for r in rows] == [("ece", 0.1), ("top1", 0.5)]
    assert rows[0]["extra"] == {"bins": [1, 2]}
    cid2 = store.condition(run, Condition("m", "d", "noise", {"x": 1}, 3))
    with pytest.raises(Exception):
        store.finish_condition(cid2, {"top1": ("not a number", 10)})
    assert not store.is_done(cid2) and len(store.rows(run)) == 2  # the failed write left nothing
    assert store.save_batch(cid2, 0, {"s": 1}) and not store.save_batch(cid2, 0, {"s": 2})
    assert store.batches(cid2) == {0: {"s": 1}}
    meta = store.run(run)
    assert meta["seed"] == 3 and meta["git_hash"] == "abc" and meta["versions"] == {"numpy": "x"}


def test_same_spec_resumes_other_spec_refused(tmp_path):
    store = Store(tmp_path / "s.db")
    a = store.start_run({"a": 1}, seed=0)
    assert store.start_run({"a": 1}, seed=0) == a
    b = store.start_run({"a": 2}, seed=0)
    assert b != a
    with pytest.raises(StoreError, match="another spec"):
        store.start_run({"a": 3}, seed=0, run_id=a)


def test_not_a_store_refused(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(StoreError, match="not an SQLite database"):
        Store(text)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE x (a)")
    with pytest.raises(StoreError, match="not a shiftbench store"):
        Store(other)
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "missing" / "r.db")
    with pytest.raises(StoreError, match="directory"):
        Store(tmp_path)


def test_reading_a_missing_store_does_not_create_it(tmp_path):
    with pytest.raises(StoreError, match="store not found"):
        Store(tmp_path / "none.db", create=False)
    assert not (tmp_path / "none.db").exists()


def test_per_sample_values_round_trip_with_their_condition(tmp_path):
    import numpy as np

    store = Store(tmp_path / "r.db")
    run = store.start_run({"dataset": "d"}, seed=0)
    cid = store.condition(run, Condition("m", "d", "noise", {"k": 1}, 2))
    hits = np.array([1.0, 0.0, 1.0])
    iou = np.arange(3 * 2 * 4, dtype=np.float64).reshape(3, 2, 4) / 7
    assert store.finish_condition(cid, {"top1": (2 / 3, 3), "miou": (0.5, 3)},
                                  samples={"top1": ("mean", ["a", "b", "c"], hits),
                                           "miou": ("iou", ["a", "b", "c"], iou)})
    got = store.samples(run)
    assert [(s["metric"], s["kind"], s["ids"]) for s in got] == [("miou", "iou", ["a", "b", "c"]),
                                                                  ("top1", "mean", ["a", "b", "c"])]
    assert {k: got[1][k] for k in ("model", "dataset", "shift", "params", "severity")} == {
        "model": "m", "dataset": "d", "shift": "noise", "params": {"k": 1}, "severity": 2}
    np.testing.assert_array_equal(got[0]["values"], iou)  # bit for bit, shape kept
    np.testing.assert_array_equal(got[1]["values"], hits)
    assert got[0]["values"].dtype == np.float64
    other = store.start_run({"dataset": "e"}, seed=0)
    assert store.samples(other) == []


def test_per_sample_values_are_written_with_the_results_or_not_at_all(tmp_path):
    import numpy as np

    store = Store(tmp_path / "r.db")
    run = store.start_run({"dataset": "d"}, seed=0)
    cid = store.condition(run, Condition("m", "d", "clean", {}, 0))
    with pytest.raises(StoreError, match="2 sample ids for 3 values"):
        store.finish_condition(cid, {"top1": (1.0, 3)}, samples={"top1": ("mean", ["a", "b"], np.ones(3))})
    with pytest.raises(ValueError):  # fails inside the transaction: the results roll back with it
        store.finish_condition(cid, {"top1": (1.0, 1)}, samples={"top1": ("mean", ["a"], ["not a number"])})
    assert store.rows(run) == [] and not store.is_done(cid) and store.samples(run) == []


def test_a_store_made_before_per_sample_values_opens_and_has_none(tmp_path):
    import numpy as np

    db = tmp_path / "old.db"
    store = Store(db)
    run = store.start_run({"dataset": "d"}, seed=0)
    cid = store.condition(run, Condition("m", "d", "clean", {}, 0))
    store.finish_condition(cid, {"top1": (0.5, 2)})
    store.close()
    with sqlite3.connect(db) as con:  # as an older shiftbench left it
        con.execute("DROP TABLE samples")
    os.chmod(db, 0o444)
    try:
        with Store(db) as old:  # read-only: readable as it is, with no per-sample values
            assert old.samples(run) == [] and len(old.rows(run)) == 1
    finally:
        os.chmod(db, 0o644)
    with Store(db) as old:  # writable: the table is added, and new conditions keep their values
        assert old.samples(run) == []
        cid2 = old.condition(run, Condition("m", "d", "noise", {}, 1))
        old.finish_condition(cid2, {"top1": (1.0, 1)}, samples={"top1": ("mean", ["a"], np.ones(1))})
        assert [s["shift"] for s in old.samples(run)] == ["noise"]


def test_results_layer_doctests():
    """The examples in the results layer's modules (params keys, artifact keys, the metric-state codec,
    identity changes) run as written."""
    import doctest

    from shiftbench.results import artifacts, codec, identity, store

    for module in (store, artifacts, codec, identity):
        assert doctest.testmod(module).failed == 0, module.__name__
