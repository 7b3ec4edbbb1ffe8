"""The store under pressure: many processes creating one fresh path, a full disk, a read-only file."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shiftbench.errors import StoreError
from shiftbench.results.store import Condition, Store

WORKERS = 20
SRC = Path(__file__).resolve().parents[2] / "src"

# Each writer is a fresh interpreter (never a fork of this threaded test process, whose held locks a
# fork would inherit). They meet at a file barrier: each says it is ready, then waits for the "go" file,
# so all open the fresh path at about the same moment. Nothing is timed: the waits are bounded only
# to end a run whose machine has stalled, and every child is killed before the test returns.
WRITER = r"""
import json, os, sys, time
from shiftbench.results.store import Condition, Store
path, index, gate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
open(os.path.join(gate, f"ready-{index}"), "w").close()
for _ in range(60000):
    if os.path.exists(os.path.join(gate, "go")):
        break
    time.sleep(0.01)
try:
    with Store(path) as store:
        run = store.start_run({"writer": index}, seed=index)
        cid = store.condition(run, Condition("m", "d", "clean", {}, 0))
        store.finish_condition(cid, {"score": (float(index), 1)})
    print(json.dumps([index, "ok"]))
except BaseException as exc:
    print(json.dumps([index, f"{type(exc).__name__}: {exc}"]))
"""


def _writers(path: Path, gate: Path) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(i), str(gate)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(WORKERS)]


@pytest.mark.parametrize("attempt", range(3))
def test_twenty_processes_create_one_fresh_store(tmp_path, attempt):
    path, gate = tmp_path / "fresh.db", tmp_path / "gate"
    gate.mkdir()
    procs = _writers(path, gate)
    outcomes = {}
    try:
        for _ in range(60000):  # all started (imports done) before any opens the store
            if len(list(gate.glob("ready-*"))) == WORKERS or any(p.poll() is not None for p in procs):
                break
            time.sleep(0.01)
        (gate / "go").touch()
        for p in procs:
            out, err = p.communicate(timeout=600)
            lines = [line for line in out.splitlines() if line.startswith("[")]
            assert lines, f"a writer printed no outcome (exit {p.returncode}): {err[-2000:]}"
            index, outcome = json.loads(lines[-1])
            outcomes[index] = outcome
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert outcomes == {i: "ok" for i in range(WORKERS)}
    with Store(path) as store:
        assert store.integrity_check() == "ok"
        rows = store.rows()
        assert sorted(r["value"] for r in rows) == [float(i) for i in range(WORKERS)]
        assert len(store.runs()) == WORKERS


def test_an_empty_file_is_a_store_being_created(tmp_path):
    path = tmp_path / "empty.db"
    path.touch()  # what another process's connect leaves before it writes the schema
    with Store(path) as store:
        run = store.start_run({"a": 1}, seed=0)
        assert store.run(run)["status"] == "running"


def test_read_only_store_is_one_line(tmp_path):
    path = tmp_path / "ro.db"
    with Store(path) as store:
        run = store.start_run({"a": 1}, seed=0)
        cid = store.condition(run, Condition("m", "d", "clean", {}, 0))
        store.finish_condition(cid, {"score": (0.5, 4)})
    os.chmod(path, stat.S_IRUSR)
    try:
        with Store(path) as store:  # reading still works (the report needs only that)
            assert [r["value"] for r in store.rows()] == [0.5]
            if os.geteuid() == 0:  # root writes through mode bits; SQLite's read-only switch gives the same error
                store._conn.execute("PRAGMA query_only = ON")
            with pytest.raises(StoreError, match=r"ro\.db: cannot write to the store: the store is read-only"):
                store.start_run({"a": 2}, seed=0)
    finally:
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)


def test_full_disk_is_one_line_and_nothing_half_written(tmp_path):
    path = tmp_path / "full.db"
    store = Store(path)
    run = store.start_run({"a": 1}, seed=0)
    cid = store.condition(run, Condition("m", "d", "clean", {}, 0))
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from here on
    big = {"blob": random.Random(0).randbytes(150_000).hex()}  # stored compressed: random bytes stay big
    with pytest.raises(StoreError, match=r"full\.db: cannot write to the store: the disk is full \(database or disk"):
        store.save_batch(cid, 0, big)
    assert store.batches(cid) == {}  # rolled back whole
    store._conn.execute("PRAGMA max_page_count = 1073741823")  # space freed
    assert store.save_batch(cid, 0, big)
    assert store.batches(cid)[0] == big
    store.close()
