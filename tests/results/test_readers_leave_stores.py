"""Read-only commands never change a store: ``report``, ``export`` (every format) and ``leaderboard`` leave every
byte of the store and of SQLite's companion files as they were, and add no file beside it, for a store in every
state a run can leave: finished, killed mid-run (its write-ahead log not yet folded into the file), written by
an older shiftbench (no run identities, no per-sample table, a rollback journal), a run on a ``generate``d
folder, and a run on C-bar's own level scale (docs/reliability.md, "read-only commands").
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import shiftbench as sb
from shiftbench.cli import main
from shiftbench.results.store import Condition, Store

SPEC = {"dataset": "objects", "models": ["dummy_classifier"], "metrics": ["top1", "ece"], "limit": 4, "seed": 0,
        "batch_size": 2, "shifts": ["clean", {"name": "gaussian_noise", "severities": [1, 3]}]}

# a writer that stops dead mid-run, as a SIGKILL leaves it: one condition finished, one with a saved batch, the
# run never finished, and the write-ahead log holding committed pages SQLite has not folded into the file
KILLED = textwrap.dedent("""
    import os, sys
    from shiftbench.results.store import Condition, Store
    store = Store(sys.argv[1])
    run = store.start_run({"dataset": "objects", "models": ["m"]}, seed=0)
    done = store.condition(run, Condition("m", "objects", "clean", {}, 0))
    store.finish_condition(done, {"top1": (0.75, 4, {"higher_is_better": True, "metric": "top1"})})
    half = store.condition(run, Condition("m", "objects", "gaussian_noise", {}, 3))
    store.save_batch(half, 0, {"correct": 1, "n": 2})
    os._exit(9)
""")


def _snapshot(folder: Path, skip: Path) -> dict[str, str]:
    """Every file of ``folder`` (but under ``skip``, the outputs) with the SHA-256 of its bytes. The ``-shm`` file
    beside a store with a write-ahead log is SQLite's shared-memory index of that log, in which every reader
    (``sqlite3`` too) marks what it reads and which SQLite rebuilds from the log at will: not the store's data, so
    only its presence is compared."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and skip not in path.parents:
            name = path.relative_to(folder).as_posix()
            out[name] = "present" if name.endswith("-shm") else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _older(db: Path) -> None:
    """``db`` as a shiftbench before run identities and per-sample values left it, in a rollback journal."""
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE samples")
        con.execute("ALTER TABLE runs DROP COLUMN identity_json")
    con.close()
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode = DELETE")
    con.close()


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("states")
    made = {}
    for state in ("finished", "older", "killed", "generated", "levels"):
        (tmp / state).mkdir()
        made[state] = tmp / state / "r.db"
    sb.evaluate(SPEC, store=made["finished"])
    shutil.copy(made["finished"], made["older"])
    _older(made["older"])
    subprocess.run([sys.executable, "-c", KILLED, str(made["killed"])], check=False)
    assert Path(f"{made['killed']}-wal").stat().st_size > 0  # the log holds what the file does not yet
    assert main(["generate", "--dataset", "objects", "--shift", "gaussian_noise", "--severity", "3", "--limit", "4",
                 "--out", str(tmp / "shifted")]) == 0
    shifted = tmp / "shifted" / "gaussian_noise" / "3"
    classes = sorted(p.name for p in shifted.iterdir() if p.is_dir())
    sb.evaluate({**SPEC, "dataset": str(shifted), "shifts": ["clean"],
                 "models": [{"name": "dummy_classifier", "params": {"label_space": classes}}]}, store=made["generated"])
    sb.evaluate({**SPEC, "shifts": ["clean", {"name": "sparkles", "params": {"scale": "level"},
                                             "severities": [0, 5, 10]}]}, store=made["levels"])
    return made


READERS = {
    "report": lambda db, out: ["report", "--store", str(db), "--out", str(out)],
    "export robustbench": lambda db, out: ["export", "--store", str(db), "--format", "robustbench", "--out", str(out)],
    "export jsonl": lambda db, out: ["export", "--store", str(db), "--format", "jsonl", "--out", str(out)],
    "export results": lambda db, out: ["export", "--store", str(db), "--format", "results", "--out", str(out)],
    "leaderboard": lambda db, out: ["leaderboard", str(db), "--out", str(out)],
}


@pytest.mark.parametrize("state", ["finished", "older", "killed", "generated", "levels"])
@pytest.mark.parametrize("reader", list(READERS))
def test_read_only_commands_leave_every_byte_of_the_store(stores, tmp_path, state, reader, capsys):
    """promise: read-only commands never change a store. The store's bytes, its companion files' bytes and the
    list of files beside it are the same after the command as before (it succeeds, or refuses in one line)."""
    db = stores[state]
    out = tmp_path / "out"
    before = _snapshot(db.parent, out)
    code = main(READERS[reader](db, out))
    err = capsys.readouterr().err
    assert code == 0 or (code == 2 and err.count("error:") == 1), (state, reader, code, err)
    assert _snapshot(db.parent, out) == before, (state, reader)


def test_an_older_store_reads_as_it_is(stores):
    """promise: read-only commands never change a store. An older store is read without being upgraded: its
    schema and journal mode are what they were, and its rows read back."""
    db = stores["older"]
    with Store(db, create=False) as store:
        assert store.rows() and store.samples(store.runs()[0]["run_id"]) == []
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert "samples" not in {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    con.close()


def test_a_killed_store_reads_what_it_committed_and_resumes_after(stores, tmp_path):
    """promise: read-only commands never change a store. A reader sees the killed run's committed condition
    (read through the write-ahead log, not folded into the file), and a writer opening the store afterwards
    still resumes the run."""
    db = tmp_path / "r.db"
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{stores['killed']}{suffix}").exists():
            shutil.copy(f"{stores['killed']}{suffix}", f"{db}{suffix}")
    with Store(db, create=False) as store:
        run = store.runs()[0]
        assert run["status"] == "running" and [r["value"] for r in store.rows(run["run_id"])] == [0.75]
    with Store(db) as store:  # a writer afterwards: the run and its saved batch are there to resume
        cid = store.condition(run["run_id"], Condition("m", "objects", "gaussian_noise", {}, 3))
        assert list(store.batches(cid)) == [0]
