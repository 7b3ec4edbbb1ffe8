"""The store under pressure: many processes creating one fresh path, a full disk, a read-only file."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import stat

import pytest

from shiftbench.engine.store import ConditionKey, Store
from shiftbench.errors import StoreError

WORKERS = 20


def _open_and_write(path: str, index: int, barrier, results) -> None:
    try:
        barrier.wait(timeout=60)  # all open the fresh path at the same moment
        with Store(path) as store:
            run = store.start_run({"writer": index}, seed=index)
            cid = store.condition(run, ConditionKey("m", "d", "clean", {}, 0))
            store.finish_condition(cid, {"score": (float(index), 1)})
        results.put((index, "ok"))
    except BaseException as exc:  # reported to the parent, which fails the test with the message
        results.put((index, f"{type(exc).__name__}: {exc}"))


@pytest.mark.parametrize("attempt", range(3))
def test_twenty_processes_create_one_fresh_store(tmp_path, attempt):
    ctx = mp.get_context("fork")
    path = str(tmp_path / "fresh.db")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=_open_and_write, args=(path, i, barrier, results)) for i in range(WORKERS)]
    for p in procs:
        p.start()
    outcomes = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
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
        cid = store.condition(run, ConditionKey("m", "d", "clean", {}, 0))
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
    cid = store.condition(run, ConditionKey("m", "d", "clean", {}, 0))
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from here on
    big = {"blob": "x" * 200_000}
    with pytest.raises(StoreError, match=r"full\.db: cannot write to the store: the disk is full \(database or disk"):
        store.save_batch(cid, 0, big)
    assert store.batches(cid) == {}  # rolled back whole
    store._conn.execute("PRAGMA max_page_count = 1073741823")  # space freed
    assert store.save_batch(cid, 0, big)
    assert store.batches(cid)[0] == big
    store.close()
