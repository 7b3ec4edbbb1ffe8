"""`generate --engine ray` on a real local Ray cluster (one per session): same bytes as the local engine,
models loaded once per actor, resume after the driver is killed, failures named, bad addresses refused."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tiny_registry  # noqa: F401  (registers _test_tiny, _test_noise, _test_modeled)
from e2e import KillFirstLogged
from shiftbench.engine.generate import generate
from shiftbench.errors import ShiftbenchError

TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)
SRC = TESTS.parent / "src"


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(SRC), env.get("PYTHONPATH", "")])
    code = "import sys, tiny_registry; from shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ray_gives_the_local_engines_bytes_for_any_shard_size(ray_cluster, tmp_path):
    # a CPU shift (Ray tasks) and a model shift (actors) in one run; every file and the manifest compared
    shifts, severities = ["_test_noise", "_test_modeled"], [1, 4]
    generate("_test_tiny", shifts, severities, tmp_path / "local", seed=3, workers=1)
    reference = tree_bytes(tmp_path / "local")
    assert len(reference) == 2 * 2 * 20 + 2  # the images, generate.json, manifest.jsonl
    for shard_size in (2, 7, 64):
        out = tmp_path / f"ray{shard_size}"
        summary = generate("_test_tiny", shifts, severities, out, seed=3, workers=2, engine="ray",
                           shard_size=shard_size)
        assert summary == {"written": 80, "skipped": 0, "total": 80, "unreadable": 0}
        assert tree_bytes(out) == reference, shard_size


def test_a_model_loads_once_per_actor_not_once_per_task(ray_cluster, tmp_path):
    log_file: Path = ray_cluster["load_log"]
    before = log_file.read_text().split()
    generate("_test_tiny", ["_test_modeled"], [1, 2, 3], tmp_path / "out", engine="ray", shard_size=2)  # 30 units
    loads = log_file.read_text().split()[len(before):]
    pids = set(loads)
    assert len(loads) == len(pids)  # never twice in one process
    assert os.getpid() not in {int(p) for p in pids}  # the driver loads nothing: actors do
    assert 1 <= len(loads) <= 2  # at most one per actor (the cluster has 2 CPUs), far fewer than 30 units


def test_a_killed_ray_driver_resumes_with_the_same_bytes(ray_cluster, tmp_path):
    args = ("_test_tiny", ["_test_modeled"], [1, 2, 3, 4, 5])
    generate(*args, tmp_path / "ref", seed=2, shift_params={"delay": 0.05}, workers=2)
    out = tmp_path / "killed"
    code = (
        f"import sys; sys.path[:0] = [{str(TESTS)!r}, {str(SRC)!r}]\n"
        "import tiny_registry\n"
        "from shiftbench.engine.generate import generate\n"
        f"generate('_test_tiny', ['_test_modeled'], [1, 2, 3, 4, 5], {str(out)!r}, seed=2, "
        f"shift_params={{'delay': 0.05}}, engine='ray', address={ray_cluster['address']!r}, shard_size=2)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    journal = out / "manifest.partial.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None and (
            not journal.exists() or journal.read_text().count("\n") < 12):
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # the driver, the only writer of the journal
    proc.wait()
    assert journal.exists() and not (out / "manifest.jsonl").exists(), "the run ended before the kill"
    done_before = journal.read_text().count("\n")
    assert 12 <= done_before < 100
    summary = generate(*args, out, seed=2, shift_params={"delay": 0.05}, engine="ray", shard_size=5)
    assert summary["skipped"] >= done_before and summary["written"] + summary["skipped"] == 100
    assert list(out.rglob("*.part")) == []
    assert tree_bytes(out) == tree_bytes(tmp_path / "ref")


def test_a_sample_the_shift_fails_on_is_named_or_skipped(ray_cluster, tmp_path):
    params = {"fail_on": "img007"}
    with pytest.raises(ShiftbenchError) as info:
        generate("_test_tiny", ["_test_modeled"], [2], tmp_path / "fail", engine="ray", shard_size=4,
                 shift_params=params)
    message = str(info.value)
    assert "\n" not in message and "img007" in message and "'_test_modeled'" in message and "cannot paint" in message
    # the units that had finished are journaled: a rerun does not redo them
    journal = [json.loads(line) for line in (tmp_path / "fail" / "manifest.partial.jsonl").read_text().splitlines()]
    assert journal and all(r["id"] != "img007" for r in journal)

    summary = generate("_test_tiny", ["_test_modeled"], [2], tmp_path / "skip", engine="ray", shard_size=4,
                       shift_params=params, on_error="skip")
    assert summary == {"written": 19, "skipped": 0, "total": 20, "unreadable": 1}
    records = [json.loads(line) for line in (tmp_path / "skip" / "manifest.jsonl").read_text().splitlines()]
    failed = [r for r in records if "skipped" in r]
    assert [r["id"] for r in failed] == ["img007"] and "cannot paint img007" in failed[0]["skipped"]
    assert not (tmp_path / "skip" / "_test_modeled" / "2" / "class1" / "img007.png").exists()
    # the others are exactly what the local engine writes for them (item-by-item equals the batch)
    local = generate("_test_tiny", ["_test_modeled"], [2], tmp_path / "local", shard_size=16,
                     shift_params=params, on_error="skip")
    assert local == summary and tree_bytes(tmp_path / "local") == tree_bytes(tmp_path / "skip")


def test_cli_on_ray_is_quiet_and_a_failure_is_one_line(ray_cluster, tmp_path):
    address = ray_cluster["address"]
    # no --address: the command starts its own local cluster (2 CPUs) and stops it at the end
    ok = cli("generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--severity", "1-2", "--out",
             str(tmp_path / "ok"), "--engine", "ray", "--workers", "2", "--shard-size", "8")
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == ""  # none of Ray's own log lines (start-up notices, token warnings, worker output)
    assert "wrote 40 outputs" in ok.stdout
    generate("_test_tiny", ["_test_noise"], [1, 2], tmp_path / "local")
    assert tree_bytes(tmp_path / "ok") == tree_bytes(tmp_path / "local")
    bad = cli("generate", "--dataset", "_test_tiny", "--shift", "_test_modeled", "--severity", "1", "--out",
              str(tmp_path / "bad"), "--engine", "ray", "--address", address, "--param", "fail_on=img003")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: generate: shift '_test_modeled' (severity 1) failed on sample img003: RuntimeError: cannot paint img003"]


def test_an_unreachable_address_fails_in_seconds_with_one_line(tmp_path):
    start = time.time()
    out = cli("generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--out", str(tmp_path / "o"),
              "--engine", "ray", "--address", f"127.0.0.1:{free_port()}")
    assert time.time() - start < 20
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "no Ray cluster answers there" in out.stderr and "127.0.0.1:" in out.stderr
    assert not (tmp_path / "o").exists()  # refused before any work
    with pytest.raises(ShiftbenchError, match="--address is for the ray engine"):
        generate("_test_tiny", ["_test_noise"], [1], tmp_path / "p", address="127.0.0.1:1")
    with pytest.raises(ShiftbenchError, match="engine 'spark'"):
        generate("_test_tiny", ["_test_noise"], [1], tmp_path / "p", engine="spark")


def test_the_local_engine_and_import_shiftbench_never_load_ray(tmp_path):
    code = (
        f"import sys; sys.path[:0] = [{str(TESTS)!r}, {str(SRC)!r}]\n"
        "import shiftbench, shiftbench.cli, tiny_registry\n"
        "from shiftbench.engine.generate import generate\n"
        f"generate('_test_tiny', ['_test_noise'], [1], {str(tmp_path / 'o')!r}, workers=2)\n"
        "print('ray' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_outputs_replay_from_the_manifest(ray_cluster, tmp_path):
    # what a Ray worker wrote is the shift replayed from the recorded params, as with the local engine
    from shiftbench.registry import SHIFTS
    from shiftbench.sample import load_image
    from tiny_registry import TinyDataset

    generate("_test_tiny", ["_test_modeled"], [5], tmp_path / "o", seed=9, engine="ray", shard_size=6)
    shift = SHIFTS.create("_test_modeled")
    records = [json.loads(line) for line in (tmp_path / "o" / "manifest.jsonl").read_text().splitlines()]
    assert len(records) == 20
    for rec in records[::5]:
        expected = shift.replay(TinyDataset().load(rec["index"]), rec["params"]).image
        assert np.array_equal(load_image(tmp_path / "o" / rec["output"]), expected)


def test_a_killed_ray_worker_is_replaced_and_nothing_is_lost_or_doubled(ray_cluster, tmp_path):
    # SIGKILL the actor process that holds the model (its pid is the one that logged the load) mid-run:
    # Ray restarts the actor and retries its shard; the outputs are those of an undisturbed run
    args = ("_test_tiny", ["_test_modeled"], [1, 2, 3])
    params = {"delay": 0.05}
    generate(*args, tmp_path / "ref", seed=4, shift_params=params, workers=2)
    with KillFirstLogged(ray_cluster["load_log"], settle=0.3) as killer:
        summary = generate(*args, tmp_path / "out", seed=4, shift_params=params, engine="ray", shard_size=4)
    assert killer.killed, "no actor was killed"
    loads = killer.loads()
    # two actors loaded the model, and the killed one's replacement (a new process) loaded it again
    assert str(killer.killed[0]) in loads and len(set(loads)) == len(loads) == 3
    assert summary == {"written": 60, "skipped": 0, "total": 60, "unreadable": 0}
    records = [json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    assert len({(r["severity"], r["index"]) for r in records}) == len(records) == 60
    assert tree_bytes(tmp_path / "out") == tree_bytes(tmp_path / "ref")
