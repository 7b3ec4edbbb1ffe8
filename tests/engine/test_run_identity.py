"""Run identity: a resume whose inputs changed (weights, dataset files, ids file, shiftbench version)
stops with one line naming the change; ``new_run`` / ``--new-run`` starts a new run; a full disk is one
line and the resume after freeing space gives exact rows; weight hashes are cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shiftbench as sb
import tiny_registry  # noqa: F401
from shiftbench.engine import identity
from shiftbench.errors import StoreError
from shiftbench.results.store import Store

from e2e import row_key

TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)
SRC = TESTS.parent / "src"
SPEC = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
        "shifts": ["clean", {"name": "_test_noise", "severities": [1, 3]}], "metrics": ["top1"], "seed": 0,
        "batch_size": 4}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIFTBENCH_CACHE", str(tmp_path / "cache"))
    identity._MEMO.clear()


def weighted_model(weights: Path):
    model = sb.create_model("dummy_classifier", label_space=2)
    model.weight_files = lambda: [str(weights)]
    return model


def test_changed_weights_stop_the_resume_and_new_run_starts_another(tmp_path):
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"first weights")
    db = tmp_path / "r.db"
    first = sb.evaluate(SPEC, store=db, models={"dummy_classifier": weighted_model(weights)})
    assert sb.evaluate(SPEC, store=db, models={"dummy_classifier": weighted_model(weights)}) == first  # resumes
    old = identity.file_sha256(weights)
    weights.write_bytes(b"second, longer weights")
    new = identity.file_sha256(weights)
    with pytest.raises(StoreError) as err:
        sb.evaluate(SPEC, store=db, models={"dummy_classifier": weighted_model(weights)})
    run = first[0]["run_id"]
    assert str(err.value) == (f"run {run}: model 'dummy_classifier' weights changed (sha256 {old[:8]}… → "
                              f"{new[:8]}…); pass new_run=True to start a new run")  # the CLI says --new-run
    second = sb.evaluate(SPEC, store=db, models={"dummy_classifier": weighted_model(weights)}, new_run=True)
    assert second[0]["run_id"] != run and row_key(second) == row_key(first)  # the dummy ignores its weights
    # the same changed inputs later resume that new run, with or without the flag
    again = sb.evaluate(SPEC, store=db, models={"dummy_classifier": weighted_model(weights)})
    assert {r["run_id"] for r in again} == {second[0]["run_id"]}
    with Store(db) as store:
        runs = {r["run_id"]: r for r in store.runs()}
    assert len(runs) == 2
    assert runs[run]["identity"]["models"]["dummy_classifier"]["weights"] == old
    assert runs[second[0]["run_id"]]["identity"]["models"]["dummy_classifier"]["from"] == "files"


def test_changed_ids_file_and_version_stop_the_resume(tmp_path, monkeypatch):
    ids = tmp_path / "ids.txt"
    ids.write_text("img000\nimg001\nimg002\n")
    spec = {**SPEC, "ids": str(ids)}
    db = tmp_path / "r.db"
    sb.evaluate(spec, store=db)
    ids.write_text("img000\nimg001\nimg003\n")
    with pytest.raises(StoreError, match=r"ids file '.*ids\.txt' changed \(sha256 .*\); pass new_run=True"):
        sb.evaluate(spec, store=db)
    ids.write_text("img000\nimg001\nimg002\n")  # back to the original content: the run resumes
    sb.evaluate(spec, store=db)
    from shiftbench.engine import identity

    real = identity.package_version
    monkeypatch.setattr(identity, "package_version", lambda name: "99.0" if name == "shiftbench" else real(name))
    with pytest.raises(StoreError, match=r"shiftbench version changed \(.* → 99\.0\)"):
        sb.evaluate(spec, store=db)


def write_folder(root: Path, n: int) -> None:
    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            Image.fromarray(np.full((12, 12, 3), 30 * i, np.uint8)).save(root / c / f"{i}.png")


def shiftbench(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(SRC)]), COLUMNS="200")
    code = "import sys\nfrom shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=cwd)


def test_changed_dataset_folder_cli_dry_run_and_new_run(tmp_path):
    root = tmp_path / "data"
    write_folder(root, 3)
    spec = tmp_path / "s.yaml"
    spec.write_text(f"dataset: {root}\nmodels: [{{name: dummy_classifier, params: {{label_space: [cat, dog]}}}}]\n"
                    "shifts: [clean]\nmetrics: [top1]\n")
    args = ["evaluate", "--config", str(spec), "--store", str(tmp_path / "r.db")]
    assert shiftbench(tmp_path, *args).returncode == 0
    ok = shiftbench(tmp_path, *args, "--dry-run")
    assert ok.returncode == 0 and "resumes run run-" in ok.stdout
    write_folder(root, 4)  # two more images
    real = shiftbench(tmp_path, *args)
    dry = shiftbench(tmp_path, *args, "--dry-run")
    assert real.returncode == 2 and dry.returncode == 2
    line = real.stderr.strip()
    assert len(line.splitlines()) == 1 and line == dry.stderr.strip()
    assert "dataset" in line and "6 files" in line and "8 files" in line and "pass --new-run to start" in line
    assert "new_run=True" not in line  # the CLI names its flag, not Python's keyword
    fresh = shiftbench(tmp_path, *args, "--new-run", "--results-json", str(tmp_path / "rows.json"))
    assert fresh.returncode == 0, fresh.stderr
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert {r["n"] for r in rows} == {8}
    with Store(tmp_path / "r.db") as store:
        assert len(store.runs()) == 2


def test_full_disk_is_one_line_and_the_resume_after_freeing_space_is_exact(tmp_path):
    reference = sb.evaluate(SPEC, store=tmp_path / "ref.db")
    db = Store(tmp_path / "r.db")
    batches = []

    def fill_disk(model, b):  # after the third saved batch the disk is full
        batches.append(b)
        if len(batches) == 3:
            pages = db._conn.execute("PRAGMA page_count").fetchone()[0]
            db._conn.execute(f"PRAGMA max_page_count = {pages}")

    with pytest.raises(StoreError, match=r"r\.db: cannot write to the store: the disk is full \(database or disk"):
        sb.evaluate(SPEC, store=db, on_batch=fill_disk)
    assert db.integrity_check() == "ok"
    db._conn.execute("PRAGMA max_page_count = 1073741823")  # space freed
    resumed = sb.evaluate(SPEC, store=db)
    db.close()
    assert row_key(resumed) == row_key(reference)


def test_full_disk_in_the_cli_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    from shiftbench.cli import main

    original = Store._open

    def tiny_disk(self):  # the disk fills up right after the schema is written
        original(self)
        pages = self._conn.execute("PRAGMA page_count").fetchone()[0]
        self._conn.execute(f"PRAGMA max_page_count = {pages}")

    monkeypatch.setattr(Store, "_open", tiny_disk)
    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps(SPEC))
    code = main(["evaluate", "--config", str(spec), "--store", str(tmp_path / "r.db")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {tmp_path / 'r.db'}: cannot write to the store: the disk is full")
    assert not any(p.name.startswith("r.db") for p in tmp_path.iterdir())  # no result: no store left


def test_weight_hashes_are_cached_by_path_size_and_times(tmp_path, monkeypatch):
    """Promise: a checkpoint is read once (its digest cached), and an edit in place that restores its size and
    mtime is still hashed again (the cache's key holds ctime and the inode)."""
    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom(3 << 20))
    digest = identity.weights_sha256(path)
    import hashlib

    assert digest == hashlib.sha256(path.read_bytes()).hexdigest() == identity.file_sha256(path)
    identity._MEMO.clear()  # a new process: only the on-disk cache remains

    def no_reading(*args, **kwargs):
        raise AssertionError("the file was read again")

    with monkeypatch.context() as patch:
        patch.setattr(identity, "open", no_reading, raising=False)
        assert identity.weights_sha256(path) == digest
        os.utime(path, ns=(1, 1))  # touched: hashed again
        with pytest.raises(AssertionError, match="read again"):
            identity.weights_sha256(path)
    st = path.stat()
    hashed = identity.weights_sha256(path)
    time.sleep(0.05)  # past the file system's clock tick, as any real edit after a run is
    with open(path, "r+b") as fh:  # same size, same mtime afterwards
        fh.write(b"edited")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    assert identity.weights_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest() != hashed


def test_dataset_fingerprint_reads_no_image(tmp_path, monkeypatch):
    root = tmp_path / "data"
    write_folder(root, 2)
    fp = identity.tree_fingerprint(root)
    assert fp["files"] == 4
    (root / "cat" / "0.png").write_bytes((root / "cat" / "0.png").read_bytes())  # same bytes, new mtime
    os.utime(root / "cat" / "0.png", ns=(5, 5))
    assert identity.tree_fingerprint(root)["sha256"] != fp["sha256"]


def test_a_failed_run_removes_only_a_store_it_created_without_results(tmp_path):
    def boom(model, b):
        raise RuntimeError("stopped by the test")

    fresh = tmp_path / "fresh.db"
    with pytest.raises(RuntimeError, match="stopped by the test"):
        sb.evaluate(SPEC, store=fresh, on_batch=boom)
    assert list(tmp_path.iterdir()) == []  # neither the database nor its -wal / -shm files
    kept = tmp_path / "kept.db"
    sb.evaluate({**SPEC, "seed": 1}, store=kept)
    with pytest.raises(RuntimeError, match="stopped by the test"):
        sb.evaluate(SPEC, store=kept, on_batch=boom)
    with Store(kept) as store:  # an existing store is never deleted, its earlier run intact
        assert len(store.rows()) == 3 and len(store.runs()) == 2


def test_new_run_with_unchanged_inputs_resumes_their_run_and_says_so(tmp_path, caplog):
    """``new_run`` asks for a new run when the inputs changed; with the same inputs it resumes their run (never the
    same numbers computed twice), says so in one line, and the reverse order (a run made with new_run, then the
    plain call) resumes it too."""
    from shiftbench.engine.evaluate import evaluate

    db = tmp_path / "r.db"
    first = sb.evaluate(SPEC, store=db)
    seen = []
    again = evaluate(SPEC, store=db, new_run=True, on_start=seen.append)
    assert {r["run_id"] for r in again} == {first[0]["run_id"]} and row_key(again) == row_key(first)
    start = seen[0]
    assert (start.run_id, start.resumed, start.same_inputs, start.done, start.planned) == (first[0]["run_id"], True,
                                                                                            True, 3, 3)
    with caplog.at_level("WARNING", logger="shiftbench"):  # without on_start, the notice is a log line
        sb.evaluate(SPEC, store=db, new_run=True)
    notes = [r.getMessage() for r in caplog.records if "inputs equal those of run" in r.getMessage()]
    assert notes == [f"new_run=True: the inputs equal those of run {first[0]['run_id']}, which is resumed rather "
                     "than computed again (give run_id= for a separate run)"]
    with Store(db) as store:
        assert [r["run_id"] for r in store.runs()] == [first[0]["run_id"]]
    # a run started with new_run in a fresh store: the plain call resumes it rather than starting a twin
    other = tmp_path / "o.db"
    keyed = sb.evaluate(SPEC, store=other, new_run=True)
    plain = []
    evaluate(SPEC, store=other, on_start=plain.append)
    assert plain[0].run_id == keyed[0]["run_id"] and plain[0].resumed and not plain[0].same_inputs
    with Store(other) as store:
        assert len(store.runs()) == 1
    # an explicit run id is still a separate run
    separate = sb.evaluate(SPEC, store=db, new_run=True, run_id="copy")
    assert {r["run_id"] for r in separate} == {"copy"}


def test_cli_new_run_with_unchanged_inputs_names_the_run_it_resumed(tmp_path, capsys):
    from shiftbench.cli import main

    spec = tmp_path / "s.yaml"
    spec.write_text(json.dumps(SPEC))
    args = ["evaluate", "--config", str(spec), "--store", str(tmp_path / "r.db")]
    assert main(args) == 0
    with Store(tmp_path / "r.db") as store:
        run = store.run()["run_id"]
    capsys.readouterr()
    assert main(args + ["--new-run", "--dry-run"]) == 0
    assert f"resumes run {run}; --new-run: the inputs equal that run's" in capsys.readouterr().out
    assert main(args + ["--new-run"]) == 0
    out = capsys.readouterr().out
    assert (f"resumed: 3 of 3 conditions already done (nothing left to compute); --new-run: the inputs equal those "
            f"of run {run}, so it was resumed rather than computed again (--run-id NAME starts a separate run)") in out
    with Store(tmp_path / "r.db") as store:
        assert len(store.runs()) == 1
