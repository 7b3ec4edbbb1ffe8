"""`evaluate --engine ray` on the session's real local Ray cluster: the store it writes holds what the local
engine writes (rows, every saved batch state, predictions, thumbnails) for classification, segmentation
and detection specs; a SIGKILLed actor and a SIGKILLed driver lose and double nothing; failures are named."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import coco_synth
import shiftbench as sb
import tiny_registry  # noqa: F401  (registers _test_tiny, _test_noise, _test_modeled)
from e2e import KillFirstLogged
from shiftbench.errors import ShiftbenchError, SpecError
from shiftbench.spec import EngineSection, load_spec

TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)
SRC = TESTS.parent / "src"

SPEC = {
    "dataset": "_test_tiny",
    "models": [{"name": "dummy_classifier", "params": {"label_space": 2}},
               {"name": "dummy_classifier", "params": {"label_space": 2, "seed": 1}}],
    "shifts": ["clean", {"name": "_test_noise", "severities": [1, 4]}, {"name": "_test_modeled", "severities": [2]}],
    "metrics": ["top1", "ece"],
    "seed": 0,
    "batch_size": 6,
    "log_samples": True,
}


def spec(**changes):
    out = json.loads(json.dumps(SPEC))
    out.update(changes)
    return out


def store_content(db: Path) -> dict[str, list]:
    """Everything a run leaves in its store, keyed by condition (not by row ids or times)."""
    con = sqlite3.connect(db)
    try:
        cond = {cid: (m, d, s, p, sev, status, n) for cid, m, d, s, p, sev, status, n in con.execute(
            "SELECT condition_id, model, dataset, shift, params, severity, status, n FROM conditions")}
        return {
            "conditions": sorted(cond.values()),
            "results": sorted((cond[c], metric, value, n, extra) for c, metric, value, n, extra in
                              con.execute("SELECT condition_id, metric, value, n, extra FROM results")),
            "batches": sorted((cond[c], b, state) for c, b, state in
                              con.execute("SELECT condition_id, batch, state FROM batches")),
            "predictions": sorted((cond[c], sid, p) for c, sid, p in
                                  con.execute("SELECT condition_id, sample_id, prediction FROM predictions")),
            "artifacts": sorted((key, bytes(data), meta) for key, data, meta in
                                con.execute("SELECT key, data, meta FROM artifacts")),
            "samples": sorted((cond[c], metric, kind, ids, bytes(data)) for c, metric, kind, ids, data in
                              con.execute("SELECT condition_id, metric, kind, ids, data FROM samples")),
        }
    finally:
        con.close()


def assert_same_store(a: Path, b: Path) -> None:
    ca, cb = store_content(a), store_content(b)
    for table in ca:
        assert ca[table] == cb[table], table
    # a finished condition's batch states may be dropped by the store: the results carry the comparison
    assert ca["results"] and ca["artifacts"]


def ray_engine(ray_cluster, **more) -> dict:
    return {"name": "ray", "address": ray_cluster["address"], **more}


def test_classification_store_equals_the_local_engines_for_any_shard_size(ray_cluster, tmp_path):
    local = sb.evaluate(spec(), store=tmp_path / "local.db")
    assert len(local) == 2 * 4 * 2 and all(r["n"] == 20 for r in local)
    for shard_size in (6, 13, 100):  # one batch per unit, two (13 rounds down to whole batches), all
        db = tmp_path / f"ray{shard_size}.db"
        rows = sb.evaluate(spec(), store=db, engine="ray", shard_size=shard_size)
        assert [r["value"] for r in rows] == [r["value"] for r in local]
        assert_same_store(tmp_path / "local.db", db)
    # every (model, condition) keeps its per-sample values (top1 and ece), equal byte for byte
    assert len(store_content(tmp_path / "local.db")["samples"]) == 2 * 4 * 2


def test_segmentation_on_voc_equals_the_local_engine(ray_cluster, tmp_path):
    from test_e2e_segmentation import _write_voc
    from tiny_hub import save_tiny_segformer

    from shiftbench.labelspace import LabelSpace

    root = _write_voc(tmp_path / "VOC2012", n=5)
    seg = save_tiny_segformer(tmp_path / "segformer_voc", id2label=list(LabelSpace.voc21().class_names))
    run = {"dataset": str(root), "models": [f"hf:{seg}"], "metrics": ["miou"], "seed": 0, "batch_size": 2,
           "shifts": ["clean", {"name": "gaussian_noise", "severities": [2]}]}
    local = sb.evaluate(run, store=tmp_path / "local.db")
    rows = sb.evaluate({**run, "engine": ray_engine(ray_cluster, shard_size=2)}, store=tmp_path / "ray.db")
    assert [r["value"] for r in rows] == [r["value"] for r in local] and all(r["n"] == 5 for r in rows)
    assert_same_store(tmp_path / "local.db", tmp_path / "ray.db")


def test_detection_box_and_mask_ap_equal_the_local_engine(ray_cluster, tmp_path):
    root = coco_synth.write_coco_set(tmp_path / "coco")
    run = {"dataset": str(root), "models": [coco_synth.DETECTOR], "metrics": ["box_ap", "mask_ap"], "seed": 0,
           "batch_size": 3, "shifts": ["clean", {"name": "gaussian_noise", "severities": [3]}]}
    local = sb.evaluate(run, store=tmp_path / "local.db")
    rows = sb.evaluate(run, store=tmp_path / "ray.db", engine="ray", shard_size=3)
    assert [(r["metric"], r["value"]) for r in rows] == [(r["metric"], r["value"]) for r in local]
    assert any(r["value"] is None for r in rows) and any(0 < (r["value"] or 0) < 1 for r in rows)
    assert_same_store(tmp_path / "local.db", tmp_path / "ray.db")


def test_a_killed_actor_is_replaced_and_nothing_is_lost_or_doubled(ray_cluster, tmp_path):
    # the actors load the shift's "model" while setting the run up: each logs its pid. SIGKILL the first
    # one mid-run: Ray restarts it (the replacement sets the run up again) and retries its unit
    run = spec(shifts=["clean", {"name": "_test_modeled", "severities": [1, 3, 5], "params": {"delay": 0.03}}])
    sb.evaluate(run, store=tmp_path / "ref.db")
    saved: list[tuple[str, int]] = []
    with KillFirstLogged(ray_cluster["load_log"], settle=0.4) as killer:
        sb.evaluate(run, store=tmp_path / "ray.db", engine="ray", shard_size=6,
                    on_batch=lambda m, b: saved.append((m, b)))
    assert killer.killed, "no actor was killed"
    loads = killer.loads()
    assert str(killer.killed[0]) in loads and len(set(loads)) == len(loads) == 3  # two actors + the replacement
    assert len(saved) == 2 * 4 * 4  # every (model, condition, batch) saved once: none lost, none doubled
    assert_same_store(tmp_path / "ref.db", tmp_path / "ray.db")


def _child(run: dict, db: Path, delay: float) -> subprocess.Popen:
    code = (
        "import sys, time, json, logging\n"
        f"sys.path[:0] = [{str(TESTS)!r}, {str(SRC)!r}]\n"
        "import tiny_registry, shiftbench as sb\n"
        f"sb.evaluate(json.loads({json.dumps(run)!r}), store={str(db)!r}, on_batch=lambda m, b: time.sleep({delay}))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(SRC), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _count(db: Path, sql: str) -> int:
    try:
        with sqlite3.connect(db, timeout=1) as con:
            return con.execute(sql).fetchone()[0]
    except sqlite3.Error:
        return -1


def test_a_killed_driver_resumes_redoing_only_unfinished_units(ray_cluster, tmp_path):
    run = spec(engine=ray_engine(ray_cluster, shard_size=6))
    sb.evaluate(spec(), store=tmp_path / "ref.db")
    db = tmp_path / "ray.db"
    proc = _child(run, db, delay=0.25)
    deadline = time.time() + 180
    try:
        while _count(db, "SELECT COUNT(*) FROM batches") < 6:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.time() < deadline, "the child saved no batches in time"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    kept = _count(db, "SELECT COUNT(*) FROM batches")
    total = 2 * 4 * 4
    assert 6 <= kept < total
    redone: list[tuple[str, int]] = []
    sb.evaluate(run, store=db, on_batch=lambda m, b: redone.append((m, b)))
    assert len(redone) == total - kept  # only what the killed driver had not saved
    assert_same_store(tmp_path / "ref.db", db)


def test_a_sample_the_shift_fails_on_is_named_and_finished_units_are_kept(ray_cluster, tmp_path):
    run = spec(shifts=["clean", {"name": "_test_noise", "severities": [1]},
                       {"name": "_test_modeled", "severities": [2], "params": {"fail_on": "img013"}}])
    db = tmp_path / "ray.db"
    with pytest.raises(ShiftbenchError) as err:
        sb.evaluate(run, store=db, engine="ray", shard_size=6)
    assert str(err.value) == ("evaluate: shift '_test_modeled' (severity 2) failed on sample img013: "
                              "RuntimeError: cannot paint img013")
    assert _count(db, "SELECT COUNT(*) FROM conditions WHERE status = 'done'") >= 2  # clean and noise were kept
    # on_error: skip leaves that sample out of that condition only (n = 19, named in the row), same as local
    skip = {**run, "on_error": "skip"}
    local = sb.evaluate(skip, store=tmp_path / "local.db")
    rows = sb.evaluate(skip, store=tmp_path / "skip.db", engine="ray", shard_size=12)
    assert [(r["metric"], r["value"], r["n"]) for r in rows] == [(r["metric"], r["value"], r["n"]) for r in local]
    failed = [r for r in rows if r["shift"] == "_test_modeled"]
    assert failed and all(r["n"] == 19 for r in failed)
    assert all(r["n"] == 20 for r in rows if r["shift"] != "_test_modeled")
    top1 = next(r for r in failed if r["metric"] == "top1")
    assert top1["extra"]["skipped"] == 1 and top1["extra"]["skipped_samples"][0]["id"] == "img013"
    assert_same_store(tmp_path / "local.db", tmp_path / "skip.db")


def cli(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(SRC), os.environ.get("PYTHONPATH", "")]))
    code = "import sys, tiny_registry; from shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd)


def test_cli_on_ray_is_quiet_resolves_relative_paths_and_a_failure_is_one_line(ray_cluster, tmp_path):
    # the spec names its ids file relatively: the workers run in the driver's folder, as the driver does
    (tmp_path / "ids.txt").write_text("img002\nimg005\nimg011\n")
    config = tmp_path / "spec.yaml"
    config.write_text(yaml.safe_dump({**spec(), "ids": "ids.txt"}))
    done = cli("evaluate", "--config", "spec.yaml", "--store", "r.db", "--engine", "ray", "--address",
               ray_cluster["address"], "--results-json", "rows.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "16 result rows of run " in done.stdout and " in r.db and rows.json" in done.stdout
    assert "engine: ray (the cluster at " in done.stdout  # the summary names the engine and the cluster it used
    # nothing from Ray (its logs stay out unless SHIFTBENCH_RAY_VERBOSE=1): only shiftbench's own progress
    # lines (output is not a terminal here)
    noise = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("evaluate: ")]
    assert not noise, noise
    assert done.stderr.strip().splitlines()[-1].startswith("evaluate: 24/24 images (100.0%)")
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert {r["n"] for r in rows} == {3}
    config.write_text(yaml.safe_dump(spec(shifts=[{"name": "_test_modeled", "severities": [1],
                                                   "params": {"fail_on": "img004"}}])))
    failed = cli("evaluate", "--config", "spec.yaml", "--store", "f.db", "--engine", "ray", "--address",
                 ray_cluster["address"], cwd=tmp_path)
    assert failed.returncode == 2
    # a slow machine may print a plain progress line (every 5 s without a terminal) before the error
    assert [line for line in failed.stderr.strip().splitlines() if not line.startswith("evaluate: ")] == [
        "error: evaluate: shift '_test_modeled' (severity 1) failed on sample img004: RuntimeError: cannot paint img004"]


def test_an_unreachable_address_fails_in_seconds_with_one_line(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.time()
    with pytest.raises(ShiftbenchError, match=rf"--address 127.0.0.1:{port}: no Ray cluster answers there"):
        sb.evaluate(spec(), store=tmp_path / "x.db", engine="ray", address=f"127.0.0.1:{port}")
    assert time.time() - start < 10
    assert not (tmp_path / "x.db").exists()
    with pytest.raises(ShiftbenchError, match="--address is for the ray engine"):
        sb.evaluate(spec(), store=tmp_path / "x.db", address="127.0.0.1:1")
    with pytest.raises(ShiftbenchError, match="--shard-size is for the ray engine"):
        sb.evaluate(spec(), store=tmp_path / "x.db", shard_size=64)


@pytest.mark.parametrize("engine, message", [
    ("spark", "engine.name: expected local or ray, got 'spark'"),
    ({"name": "ray", "shard": 4}, "engine.shard: unknown key (did you mean 'shard_size'?)"),
    ({"name": "ray", "workers": 0}, "engine.workers: expected a positive integer, got 0"),
    ({"name": "local", "address": "h:1"}, "engine.address: only the ray engine takes it (name: ray)"),
    ([1], "engine: expected local, ray or a mapping"),
])
def test_spec_engine_key_is_checked(engine, message):
    with pytest.raises(SpecError) as err:
        load_spec(spec(engine=engine))
    assert message in str(err.value)


def test_engine_is_not_part_of_the_run_identity(ray_cluster, tmp_path):
    # a run started locally resumes on Ray (and the other way round): the spec's identity leaves it out
    a = load_spec(spec())
    b = load_spec(spec(engine=ray_engine(ray_cluster)))
    assert a.raw == b.raw and b.engine == EngineSection("ray", address=ray_cluster["address"])


def test_models_passed_as_objects_travel_to_the_actors(ray_cluster, tmp_path):
    import threading

    given = {"mine": sb.create_model("dummy_classifier", label_space=2, seed=7)}
    run = spec(models=["dummy_classifier"], log_samples=False)
    local = sb.evaluate(run, store=tmp_path / "local.db", models={"dummy_classifier": given["mine"]})
    rows = sb.evaluate(run, store=tmp_path / "ray.db", models={"dummy_classifier": given["mine"]}, engine="ray")
    assert [r["value"] for r in rows] == [r["value"] for r in local]
    # and they differ from the model the spec names (seed 7 is not the default): the object was used
    named = sb.evaluate(run, store=tmp_path / "named.db")
    assert [r["value"] for r in named] != [r["value"] for r in local]
    given["mine"].lock = threading.Lock()
    with pytest.raises(ShiftbenchError, match=r"^model 'dummy_classifier' was passed as an object that cannot be sent "
                                              r"to Ray workers \(TypeError: cannot pickle '_thread.lock' object\)"):
        sb.evaluate(run, store=tmp_path / "bad.db", models={"dummy_classifier": given["mine"]}, engine="ray")
    assert not (tmp_path / "bad.db").exists()


@pytest.mark.parametrize("corrupt", [False, True])
def test_an_image_folder_with_and_without_unreadable_files(ray_cluster, tmp_path, corrupt):
    # the driver screens every file once; the workers read the driver's opened dataset (the screened file
    # list travels with the setup), so both engines score the same samples, broken file or not
    from PIL import Image

    from conftest import make_image

    for i in range(9):
        folder = tmp_path / "data" / f"class{i % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(make_image(36, 44, seed=i)).save(folder / f"im{i}.png")
    if corrupt:
        (tmp_path / "data" / "class0" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    run = spec(dataset=str(tmp_path / "data"), batch_size=4, on_error="skip",
               models=[{"name": "dummy_classifier", "params": {"label_space": 2}}], label_map={"class0": 0, "class1": 1})
    local = sb.evaluate(run, store=tmp_path / "local.db")
    rows = sb.evaluate(run, store=tmp_path / "ray.db", engine="ray", shard_size=4)
    assert [r["value"] for r in rows] == [r["value"] for r in local] and {r["n"] for r in rows} == {9}
    assert_same_store(tmp_path / "local.db", tmp_path / "ray.db")
    skipped = [a for a in store_content(tmp_path / "ray.db")["artifacts"] if a[0] == "skipped.json"]
    assert len(skipped) == int(corrupt)


def test_dry_run_checks_the_cluster_and_says_the_engine(ray_cluster, tmp_path):
    import socket

    config = tmp_path / "spec.yaml"
    config.write_text(yaml.safe_dump({**spec(), "engine": {"name": "ray", "shard_size": 12}}))
    ok = cli("evaluate", "--config", "spec.yaml", "--dry-run", "--address", ray_cluster["address"], cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert f"engine: ray ({ray_cluster['address']}; units of 12 samples in whole batches of 6)" in ok.stdout
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bad = cli("evaluate", "--config", "spec.yaml", "--dry-run", "--address", f"127.0.0.1:{port}", cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert f"--address 127.0.0.1:{port}: no Ray cluster answers there" in bad.stderr
    assert not list(tmp_path.glob("*.db"))


def test_the_ray_driver_checks_gpu_models_on_its_cpu():
    # a CPU-only head node drives a GPU cluster: only the workers load the models on the device asked for
    from shiftbench.engine.evaluate import prepare

    run = spec(models=[{"name": "_test_gpu_only", "params": {"device": "cuda"}}])
    with pytest.raises(ShiftbenchError, match="no GPU for device 'cuda'"):
        prepare(run)
    plan = prepare({**run, "engine": "ray"})
    assert [m.device for m in plan.models.values()] == ["cpu"]


def test_a_dataset_that_cannot_be_pickled_is_opened_by_the_workers(ray_cluster, tmp_path):
    run = spec(dataset="_test_tiny_locked", log_samples=False)
    local = sb.evaluate(run, store=tmp_path / "local.db")
    rows = sb.evaluate(run, store=tmp_path / "ray.db", engine="ray", shard_size=12)
    assert [r["value"] for r in rows] == [r["value"] for r in local] and {r["n"] for r in rows} == {20}
    assert_same_store(tmp_path / "local.db", tmp_path / "ray.db")
