"""The cluster path as docs/scale.md tells users to take it: `ray start --head` with Ray's default token
authentication (a token in ~/.ray/auth_token), a second node joined with `ray start --address`, and
`shiftbench evaluate|generate --engine ray --address HOST:PORT` from the same machine give the local engine's
rows and bytes. A refused connection is one line saying why (no token, a wrong token, a Ray version mismatch,
nothing listening) and what to do.

The cluster lives in a private temp dir with a private HOME and environment (no RAY_* variable of the caller),
so it never meets a user's cluster or the session's (conftest `ray_cluster`); it is ended by killing the
processes started under that temp dir, by pid (`ray stop` would stop every cluster of the machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from shiftbench.cli import main
from shiftbench.engine.cluster import refusal, token_auth, token_source
from shiftbench.errors import ShiftbenchError
from test_evaluate_ray import SPEC as RAY_SPEC

TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)
SRC = TESTS.parent / "src"
DRIVER = "import sys, tiny_registry; from shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
SPEC = {key: value for key, value in RAY_SPEC.items() if key != "log_samples"}  # the local-vs-ray spec, rows only
GENERATE = ["generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--shift", "_test_modeled",
            "--severity", "1-2", "--seed", "3"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- a private cluster: started as the docs say, ended by pid ----------------------------------------------------

def cluster_pids(tag: str) -> set[int]:
    """Live processes whose command line names ``tag`` (the cluster's temp dir), and their descendants (Ray's
    workers rename themselves ``ray::...``)."""
    table: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError, IndexError):
            continue
        if state != "Z":
            table[int(entry.name)] = (int(ppid), cmd)
    found = {pid for pid, (_, cmd) in table.items() if tag in cmd and pid != os.getpid()}
    while True:
        more = {pid for pid, (ppid, _) in table.items() if ppid in found} - found
        if not more:
            return found
        found |= more


def end_cluster(tag: str, timeout: float = 60.0) -> None:
    """SIGKILL every process of the cluster by pid, until none is left (a dying raylet may still fork)."""
    deadline = time.monotonic() + timeout
    while pids := cluster_pids(tag):
        if time.monotonic() > deadline:
            raise AssertionError(f"cluster processes still alive after {timeout:.0f} s: {sorted(pids)}")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def user_env(home: Path, **more: str) -> dict[str, str]:
    """A user's shell: this environment without any RAY_* variable, a private HOME, and the tests' modules
    importable (by the driver and, through the raylets' environment, by the workers)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(home), PYTHONPATH=os.pathsep.join([str(TESTS), str(SRC), os.environ.get("PYTHONPATH", "")]),
               PYTHONUNBUFFERED="1", **more)
    return env


def ray_cli(*args: str, env: dict[str, str], timeout: float = 180) -> str:
    ray = Path(sys.executable).with_name("ray")
    done = subprocess.run([str(ray), *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"ray {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def shiftbench(*args: str, env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", DRIVER, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def wait_for_nodes(address: str, n: int, env: dict[str, str], timeout: float = 120) -> None:
    """Poll, as a plain Ray driver (``RAY_AUTH_MODE=token`` in ``env`` where the cluster has a token), until
    ``n`` nodes are alive."""
    code = ("import sys, time, ray; ray.init(address=sys.argv[1], logging_level='ERROR'); t = time.monotonic()\n"
            "while sum(x['Alive'] for x in ray.nodes()) < int(sys.argv[2]) and time.monotonic() - t < float(sys.argv[3]):"
            " time.sleep(0.5)\n"
            "print(sum(x['Alive'] for x in ray.nodes()))")
    done = subprocess.run([sys.executable, "-c", code, address, str(n), str(timeout)], env=env, capture_output=True,
                          text=True, timeout=timeout + 60)
    assert done.returncode == 0 and done.stdout.split()[-1] == str(n), done.stderr[-2000:]


@contextlib.contextmanager
def private_cluster(home: Path, token: bool = True, nodes: int = 2) -> Iterator[dict]:
    """`ray get-auth-token --generate` (the step Ray's own start-up warning names) when ``token``, `ray start
    --head` and ``nodes - 1`` more nodes with `RAY_AUTH_MODE=token ray start --address`, one CPU each, in a
    private temp dir and HOME; every process ended by pid afterwards."""
    pytest.importorskip("ray")
    if not Path("/proc/self/stat").exists():
        pytest.skip("finds the cluster's processes in /proc")
    temp = Path(tempfile.mkdtemp(prefix="sbray-", dir="/tmp"))  # short: Ray's socket paths live under it
    home.mkdir(exist_ok=True)
    env = user_env(home)
    port = free_port()
    address = f"127.0.0.1:{port}"
    common = ["--num-cpus=1", f"--temp-dir={temp}", "--disable-usage-stats", "--object-store-memory=100000000"]
    try:
        if token:
            ray_cli("get-auth-token", "--generate", env=env)
        head = ray_cli("start", "--head", f"--port={port}", "--include-dashboard=false", *common,
                       f"--dashboard-agent-listen-port={free_port()}", env=env)
        # Ray's default: token authentication once a token exists, none (with a warning) without one
        assert ("Token authentication is enabled" if token else "Token authentication is disabled") in head
        for _ in range(nodes - 1):
            ray_cli("start", f"--address={address}", *common, f"--dashboard-agent-listen-port={free_port()}",
                    env={**env, "RAY_AUTH_MODE": "token"})
        wait_for_nodes(address, nodes, {**env, "RAY_AUTH_MODE": "token"} if token else env)
        yield {"address": address, "env": env, "home": home, "temp": temp}
    finally:
        end_cluster(str(temp))
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def user_cluster(tmp_path):
    with private_cluster(tmp_path / "home") as cluster:
        yield cluster


# -- the runs ------------------------------------------------------------------------------------------------------

def only_error(stderr: str) -> list[str]:
    """stderr without progress lines: what a refused run says."""
    return [line for line in stderr.strip().splitlines() if not line.startswith(("evaluate", "generate"))]


@pytest.mark.slow
def test_evaluate_and_generate_on_a_cluster_started_as_the_docs_say(user_cluster, tmp_path):
    import tiny_registry  # noqa: F401  (the local reference runs in this process)
    from test_evaluate_ray import assert_same_store

    # two nodes of one CPU each and one actor per CPU: both raylets run a replica, of evaluate and of the model shift
    address, env = user_cluster["address"], user_cluster["env"]
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    assert main(["evaluate", "--config", str(tmp_path / "spec.yaml"), "--store", str(tmp_path / "local.db"),
                 "--results-json", str(tmp_path / "local.json")]) == 0
    done = shiftbench("evaluate", "--config", "spec.yaml", "--store", "ray.db", "--engine", "ray", "--address",
                      address, "--shard-size", "6", "--results-json", "ray.json", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not only_error(done.stderr), done.stderr  # none of Ray's own lines
    local_rows = json.loads((tmp_path / "local.json").read_text())
    assert len(local_rows) == 16 and json.loads((tmp_path / "ray.json").read_text()) == local_rows
    assert_same_store(tmp_path / "local.db", tmp_path / "ray.db")

    assert main([*GENERATE, "--out", str(tmp_path / "gen_local")]) == 0
    done = shiftbench(*GENERATE, "--out", str(tmp_path / "gen_ray"), "--engine", "ray", "--address", address,
                      "--shard-size", "4", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrote 80 outputs" in done.stdout
    assert tree_bytes(tmp_path / "gen_ray") == tree_bytes(tmp_path / "gen_local")  # manifest included


@pytest.mark.slow
def test_refusals_say_why_in_one_line(user_cluster, tmp_path):
    address, env = user_cluster["address"], user_cluster["env"]
    run = ["generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--severity", "1", "--engine", "ray",
           "--address", address]
    nobody = tmp_path / "nobody"  # a machine without the head's token
    nobody.mkdir()
    for env_here, expected in [
        (user_env(nobody), "the cluster requires a Ray token (token authentication) and this machine has none: "
                           "put the head's token"),
        ({**env, "RAY_AUTH_TOKEN": "not-the-token"}, "the cluster refused this machine's Ray token (from RAY_AUTH_TOKEN)"),
        ({**env, "RAY_AUTH_MODE": "disabled"}, "the cluster requires a Ray token (token authentication) and "
                                               "RAY_AUTH_MODE=disabled here"),
    ]:
        start = time.monotonic()
        done = shiftbench(*run, "--out", str(tmp_path / "o"), env=env_here, cwd=tmp_path, timeout=120)
        errors = only_error(done.stderr)
        assert done.returncode == 2 and len(errors) == 1, done.stderr
        assert errors[0].startswith(f"error: --address {address}: {expected}"), errors
        assert time.monotonic() - start < 60  # the probe answers at once; Ray's own retries take 20 s
        assert not (tmp_path / "o").exists()  # refused before any work

    # a cluster of another Ray version: its recorded version changed in the GCS, as another install would have it
    fake = ("import json, sys; from ray._raylet import GcsClient; import ray._common.usage.usage_constants as u;"
            " from ray._private import ray_constants as c; g = GcsClient(address=sys.argv[1]);"
            " m = json.loads(g.internal_kv_get(u.CLUSTER_METADATA_KEY, namespace=c.KV_NAMESPACE_CLUSTER));"
            " m['ray_version'] = '2.0.0';"
            " g.internal_kv_put(u.CLUSTER_METADATA_KEY, json.dumps(m).encode(), True, namespace=c.KV_NAMESPACE_CLUSTER)")
    subprocess.run([sys.executable, "-c", fake, address], env={**env, "RAY_AUTH_MODE": "token"}, check=True,
                   timeout=120)
    done = shiftbench(*run, "--out", str(tmp_path / "o"), env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2, done.stderr
    [line] = only_error(done.stderr)
    assert line.startswith(f"error: --address {address}: Ray version mismatch: the cluster runs Ray 2.0.0 on Python ")
    assert "this machine Ray " in line and "install the cluster's Ray and Python versions here" in line


@pytest.mark.slow
def test_a_head_without_authentication_takes_a_driver_that_has_a_token(tmp_path):
    # no token where the head starts: Ray starts it without authentication. The driver's machine has a token
    # (RAY_AUTH_TOKEN) but sends none, as the cluster asks for none: in token mode its actors (the model
    # shift's) would never start, the cluster's workers having no token to call the driver back with
    with private_cluster(tmp_path / "home", token=False, nodes=1) as cluster:
        env = {**cluster["env"], "RAY_AUTH_TOKEN": "some-token"}
        done = shiftbench(*GENERATE, "--out", str(tmp_path / "gen_ray"), "--engine", "ray", "--address",
                          cluster["address"], env=env, cwd=tmp_path)
        assert done.returncode == 0 and "wrote 80 outputs" in done.stdout, done.stderr[-3000:]


def test_a_closed_port_is_refused_in_seconds_with_one_line(tmp_path):
    pytest.importorskip("ray")
    port = free_port()
    start = time.monotonic()
    done = shiftbench(*GENERATE, "--out", str(tmp_path / "o"), "--engine", "ray", "--address", f"127.0.0.1:{port}",
                      env=user_env(tmp_path), cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and only_error(done.stderr) == [
        f"error: --address 127.0.0.1:{port}: no Ray cluster answers there (Connection refused); start one with "
        "`ray start --head` or leave --address out to start a local one"]
    assert time.monotonic() - start < 30


# -- the classification of Ray's refusals, on Ray's own messages ---------------------------------------------------

class AuthenticationError(Exception):
    """Stands for ray.exceptions.AuthenticationError (judged by its name, as Ray's types move between versions)."""


def joined(cause: BaseException) -> ConnectionError:
    """ray.init's shape: ConnectionError("Failed to connect ...") from the node's RuntimeError."""
    try:
        try:
            raise cause
        except BaseException as inner:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379") from inner
    except ConnectionError as exc:
        return exc


VERSION_MISMATCH = ("Version mismatch: The cluster was started with:\n    Ray: 2.59.1\n    Python: 3.11.9\n"
                    "This process on node 10.0.0.2 was started with:\n    Ray: 2.60.0\n    Python: 3.11.7\n")


def test_a_version_mismatch_names_both_versions(monkeypatch):
    line = refusal("10.0.0.1:6379", RuntimeError(VERSION_MISMATCH), token="~/.ray/auth_token")
    assert line == ("--address 10.0.0.1:6379: Ray version mismatch: the cluster runs Ray 2.59.1 on Python 3.11.9, "
                    "this machine Ray 2.60.0 on Python 3.11.7; install the cluster's Ray and Python versions here "
                    "(Ray requires the driver and the cluster to match)")
    assert refusal("h:1", joined(RuntimeError(VERSION_MISMATCH)), None) == line.replace("10.0.0.1:6379", "h:1")


def test_an_authentication_refusal_says_which_token_to_use(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    # the node's RuntimeError carries the probe's traceback as text, not as a cause
    node = RuntimeError("Failed to connect to GCS. Last connection error: Traceback ...\nray.exceptions."
                        "AuthenticationError: RPC error: InvalidAuthToken: Authentication token is missing or incorrect.")
    for exc in (AuthenticationError("RPC error: InvalidAuthToken"), joined(node)):
        missing = refusal("h:1", exc, token=None)
        assert missing.startswith("--address h:1: the cluster requires a Ray token (token authentication) and this "
                                  "machine has none: put the head's token (`ray get-auth-token` prints it there) in "
                                  "~/.ray/auth_token, or set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH")
        assert refusal("h:1", exc, token="RAY_AUTH_TOKEN") == (
            "--address h:1: the cluster refused this machine's Ray token (from RAY_AUTH_TOKEN): use the head's token "
            "(`ray get-auth-token` prints it there)")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert "and RAY_AUTH_MODE=disabled here: unset it or set RAY_AUTH_MODE=token" in refusal("h:1", joined(node), None)
    plain = refusal("h:1", joined(RuntimeError("Failed to connect to GCS.")), None)
    assert plain == "--address h:1: could not join a Ray cluster (Failed to connect to Ray cluster at 10.0.0.1:6379)"
    assert all("\n" not in line for line in (missing, plain))


def test_the_token_is_found_where_ray_looks_for_it(monkeypatch, tmp_path):
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert token_source() is None
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("abc\n")
    assert token_source() == "~/.ray/auth_token"
    (tmp_path / "t").write_text("def")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "t"))
    assert token_source() == f"RAY_AUTH_TOKEN_PATH ({tmp_path / 't'})"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "ghi")
    assert token_source() == "RAY_AUTH_TOKEN"
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    with pytest.raises(ShiftbenchError, match=r"RAY_AUTH_TOKEN_PATH=.*missing: no Ray token there"):
        token_source()


def test_a_token_is_sent_only_to_a_cluster_that_asks_for_one(monkeypatch, tmp_path):
    """The decision of token_auth, the cluster's answers stubbed (the slow tests above ask real clusters)."""
    from shiftbench.engine import cluster

    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    answers: list = []
    monkeypatch.setattr(cluster, "auth_refusal", lambda address, quiet=True: answers.pop(0))
    switched: list[bool] = []
    monkeypatch.setattr(cluster, "_enable_token_mode", lambda: switched.append(True) or True)
    refused = AuthenticationError("RPC error: InvalidAuthToken: Authentication token is missing or incorrect")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "abc")
    answers[:] = [None]  # no authentication there: no token sent, even though this machine has one
    assert token_auth("h:1") is None and not switched
    answers[:] = [refused, None]  # a token asked for: this machine's, in token mode
    assert token_auth("h:1") == "RAY_AUTH_TOKEN" and switched == [True]
    answers[:] = [refused, refused]
    with pytest.raises(ShiftbenchError, match=r"the cluster refused this machine's Ray token \(from RAY_AUTH_TOKEN\)"):
        token_auth("h:1")
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    answers[:] = [refused]
    with pytest.raises(ShiftbenchError, match="requires a Ray token .* and this machine has none: put the head's"):
        token_auth("h:1")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's choice stands
    answers[:] = [None]
    assert token_auth("h:1") is None
    answers[:] = [refused]
    with pytest.raises(ShiftbenchError, match="RAY_AUTH_MODE=disabled here: unset it"):
        token_auth("h:1")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    answers[:] = [refused]
    with pytest.raises(ShiftbenchError, match="RAY_AUTH_MODE=token but this machine has no Ray token: put the head"):
        token_auth("h:1")
    assert answers == [refused]  # refused before asking the cluster
