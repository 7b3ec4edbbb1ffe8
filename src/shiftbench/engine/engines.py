"""Where work units run: the ``local`` engine (this process or a process pool) and the ``ray`` engine.

A runner (generate, evaluate, composed retrieval) turns its work into units, each a picklable argument for a
module-level function, and asks an engine for their results. Units are independent (per-sample seeds),
so the engine may run them anywhere and in any order; the runner stays the only writer of its outputs'
index (the journal, the manifest, the store), and orders what it writes itself.

Two stages: ``"cpu"`` units run as plain tasks; ``"model"`` units (shifts that load a model: diffusion
inpainting, SAM or u2netp masks, diffusion attribute edits) run on a pool of long-lived workers (Ray
actors, one model replica each, ``num_gpus=1`` where the cluster has GPUs), so a model loads once per
worker and not once per unit. The process-level caches of the shifts (``load_components``, the mask
providers) keep the replica loaded between units.

Ray is optional (the ``ray`` extra; ``install.install_command`` says how to add it) and imported only here,
only when the ray engine is chosen, so ``import shiftbench`` and the local engine never load it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import socket
from collections import deque
from dataclasses import dataclass
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterable, Iterator

from ..errors import Option, ShiftbenchError
from ..install import install_command
from .cluster import join
from .spec import EngineSection

CONNECT_TIMEOUT_S = 5.0  # an unreachable --address is refused after this long, not after Ray's own minute
VERBOSE_ENV = "SHIFTBENCH_RAY_VERBOSE"  # set to 1 to let Ray's own log lines through to the terminal
log = logging.getLogger("shiftbench.engine")


class Engine:
    """Runs units of work; ``imap`` yields ``(unit, result)`` pairs as they finish.

    If a unit raises, the engine stops starting new units, still yields the results of the units that
    were already running (so the runner keeps what was finished), then raises the first error.
    """

    name = "base"

    def imap(self, fn: Callable[[Any], Any], units: Iterable[Any], stage: str = "cpu") -> Iterator[tuple[Any, Any]]:
        raise NotImplementedError

    def share(self, value: Any) -> Any:
        """A handle to ``value`` that units may carry, resolved on a worker by :func:`fetch`: on Ray, one copy
        in the object store that every worker reads (a large setup is not pickled into every unit)."""
        return value

    def close(self) -> None:
        """Release what the engine started (a pool, a local Ray cluster); a no-op for what it found."""

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LocalEngine(Engine):
    """This process (``workers=1``) or a pool of ``workers`` processes on this machine; needs nothing extra.

    The pool's processes are fresh interpreters (``spawn``), never forks of this one: a fork of a process
    that runs threads (torch's, Ray's, a web server's) inherits their locks held and can hang forever.
    Units name the modules that register the user's classes, and a worker imports them first.
    """

    name = "local"

    def __init__(self, workers: int = 1):
        self.workers = max(1, int(workers))

    def imap(self, fn: Callable[[Any], Any], units: Iterable[Any], stage: str = "cpu") -> Iterator[tuple[Any, Any]]:
        if self.workers <= 1 or (hasattr(units, "__len__") and len(units) <= 1):  # type: ignore[arg-type]
            for unit in units:
                yield unit, fn(unit)
            return
        # a bounded window of submitted units: a huge plan is never all queued at once
        with ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            yield from _windowed(units, 2 * self.workers, lambda u: pool.submit(fn, u), _wait_futures,
                                 lambda f: f.result())


def _wait_futures(pending: list) -> tuple[list, list]:
    done, rest = wait(pending, return_when=FIRST_COMPLETED)
    return [f for f in pending if f in done], [f for f in pending if f not in done]


def _windowed(units: Iterable[Any], window: int, submit: Callable, wait_some: Callable,
              result: Callable) -> Iterator[tuple[Any, Any]]:
    """Keep at most ``window`` units running; yield each result as it comes; on an error, drain the
    running ones (their results are yielded: finished work is never lost), then raise the first error.
    ``units`` may be a generator: it is read only as far as the window needs (a huge plan is never listed)."""
    queue = iter(units)
    more = True
    running: dict[Any, Any] = {}
    error: BaseException | None = None
    while more or running:
        while more and error is None and len(running) < window:
            unit = next(queue, _END)
            if unit is _END:
                more = False
                break
            running[submit(unit)] = unit
        if not running:
            break
        done, _ = wait_some(list(running))
        for handle in done:
            unit = running.pop(handle)
            try:
                value = result(handle)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, after the running units drain
                if error is None:
                    error = exc
                continue
            yield unit, value
        if error is not None:
            more = False
    if error is not None:
        raise error


_END = object()


class RayEngine(Engine):
    """Units as Ray tasks (``"cpu"`` stage) or on a pool of Ray actors (``"model"`` stage).

    ``address``: an existing cluster (``host:port``, ``auto``, ``ray://host:port``); None starts a local
    one on ``workers`` CPUs (every CPU when None) and shuts it down on ``close``. A cluster that is
    already initialised in this process (``ray.init`` called by the user or a test) is used as it is.
    """

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None, verbose: bool | None = None):
        ray = import_ray()
        self.ray = ray
        self.verbose = bool(os.environ.get(VERBOSE_ENV)) if verbose is None else verbose
        self.started = False
        if address not in (None, "", "auto"):
            check_reachable(address)
        if not ray.is_initialized():
            with _quiet(not self.verbose):
                # ERROR, not WARNING: Ray warns about its token setup on every start, which is not the user's business
                options: dict[str, Any] = dict(log_to_driver=self.verbose, configure_logging=True,
                                               logging_level=logging.INFO if self.verbose else logging.ERROR)
                if address:  # token authentication matched to the cluster's; a refusal named in one line
                    join(ray, address, options, quiet=not self.verbose)
                else:
                    options.update(num_cpus=int(workers) if workers else os.cpu_count(), include_dashboard=False)
                    try:
                        ray.init(**options)
                    except (ConnectionError, RuntimeError, TimeoutError) as exc:
                        raise ShiftbenchError(f"could not start a local Ray cluster ({_first_line(exc)})") from None
            self.started = True
        resources = ray.cluster_resources()
        self.cpus = max(1, int(resources.get("CPU", 1)))
        self.gpus = int(resources.get("GPU", 0))
        self._tasks: dict[Callable, Any] = {}
        self._actors: list[Any] = []

    def imap(self, fn: Callable[[Any], Any], units: Iterable[Any], stage: str = "cpu") -> Iterator[tuple[Any, Any]]:
        ray = self.ray
        if hasattr(units, "__len__"):
            if not len(units):  # type: ignore[arg-type]
                return  # no actor is started for a stage with nothing to do
            size = min(len(units), self.gpus or self.cpus)  # type: ignore[arg-type]
        else:
            units = iter(units)
            first = next(units, _END)
            if first is _END:
                return
            units = _chain_first(first, units)
            size = self.gpus or self.cpus
        if stage == "model":
            actors = self._pool(size)
            # two units per actor: the second waits in the actor's queue and starts the moment the first
            # ends, so an actor never idles while the driver saves a result and picks the next unit
            free = deque(actors * 2)
            busy: dict[Any, Any] = {}

            def submit(unit: Any) -> Any:
                actor = free.popleft()
                ref = actor.run.remote(fn, unit)
                busy[ref] = actor
                return ref

            def wait_some(refs: list) -> tuple[list, list]:
                done, rest = ray.wait(refs, num_returns=1)
                for ref in done:
                    free.append(busy.pop(ref))
                return done, rest

            yield from _windowed(units, len(free), submit, wait_some, self._get)
            return
        if fn not in self._tasks:
            self._tasks[fn] = ray.remote(num_cpus=1, max_retries=3)(_call)
        task = self._tasks[fn]

        def wait_cpu(refs: list) -> tuple[list, list]:
            done, rest = ray.wait(refs, num_returns=1)
            return done, rest

        yield from _windowed(units, 2 * self.cpus, lambda u: task.remote(fn, u), wait_cpu, self._get)

    def share(self, value: Any) -> Any:
        return self.ray.put(value)

    def _pool(self, size: int) -> list[Any]:
        """Long-lived actors (created once per engine, reused by every model stage): one replica each."""
        size = max(1, size)
        if len(self._actors) < size:
            # one GPU per replica where the cluster has GPUs, else one CPU; max_restarts: a killed actor
            # process is restarted and its unit retried, so a lost worker costs that unit's time, not the run
            resources = dict(num_gpus=1, num_cpus=0) if self.gpus else dict(num_cpus=1)
            replica = self.ray.remote(_Replica).options(max_restarts=3, max_task_retries=3, **resources)
            self._actors += [replica.remote() for _ in range(size - len(self._actors))]
        return self._actors[:size]

    def _get(self, ref: Any) -> Any:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, ShiftbenchError):
                raise cause from None  # the worker's own one-line message, not Ray's traceback
            if cause is not None:
                raise ShiftbenchError(f"a Ray worker failed: {type(cause).__name__}: {_first_line(cause)}") from None
            raise ShiftbenchError(f"a Ray worker failed: {_first_line(exc)}") from None
        except (self.ray.exceptions.ActorDiedError, self.ray.exceptions.WorkerCrashedError,
                self.ray.exceptions.NodeDiedError) as exc:  # a worker process or node lost, not a task's error
            raise ShiftbenchError(f"a Ray worker died ({type(exc).__name__}: {_first_line(exc)}); finished work is "
                                  "kept: run the same command again to resume") from None

    def close(self) -> None:
        for actor in self._actors:
            self.ray.kill(actor)
        self._actors = []
        if self.started:
            self.ray.shutdown()
            self.started = False


def _call(fn: Callable[[Any], Any], unit: Any) -> Any:
    return fn(unit)


def _chain_first(first: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield first
    yield from rest


@dataclass(frozen=True)
class WorkerSetup:
    """What a worker needs to set a run up itself: the spec (models built by name there), models the
    caller passed as objects (sent pickled), modules that register the user's classes, the driver's cwd
    (relative paths in the spec mean the same on a shared file system)."""

    key: str
    spec: Any
    models: dict[str, Any]
    modules: tuple[str, ...]
    cwd: str
    # the driver's opened dataset (its file list or shard index, screened once): a worker reads the same
    # samples without listing, indexing or decoding every file again (hours per worker at a million
    # images). None when it cannot be pickled: the worker then opens it from the spec, screening as
    # the driver did ("none" when the driver's screen left no file out)
    dataset: Any = None
    verify: str = "full"


_WORKER_STATE: dict[Any, Any] = {}  # per worker process: one run's setup, built once, kept loaded


def worker_state(handle: Any, build: Callable[[Any], Any]) -> Any:
    """``build(setup)`` for the setup behind an :meth:`Engine.share` handle, made once per worker process
    and reused by every later unit of the run (one run's replicas at a time). The setup carries ``cwd``
    (the driver's folder: relative paths in a spec mean the same on a shared file system) and
    ``modules`` (imported first, so what the user registered by name is registered here too)."""
    import importlib

    key = handle.hex() if callable(getattr(handle, "hex", None)) else getattr(handle, "key", id(handle))
    if key not in _WORKER_STATE:
        setup = fetch(handle)
        _WORKER_STATE.clear()
        if os.path.isdir(setup.cwd):
            os.chdir(setup.cwd)
        for module in setup.modules:
            importlib.import_module(module)
        _WORKER_STATE[key] = build(setup)
    return _WORKER_STATE[key]


def user_modules(objects: Iterable[Any]) -> tuple[str, ...]:
    """Modules outside shiftbench that define the classes of ``objects`` (a run's dataset, shifts, models)."""
    names = {type(x).__module__ for x in objects}
    return tuple(sorted(m for m in names if m not in ("__main__", "builtins") and not m.startswith("shiftbench.")))


def fetch(handle: Any) -> Any:
    """The value behind an :meth:`Engine.share` handle (a Ray object reference is read from the object store)."""
    if type(handle).__name__ == "ObjectRef" and type(handle).__module__.startswith("ray"):
        import ray

        return ray.get(handle)
    return handle


class _Replica:
    """A Ray actor that runs units in one long-lived process, so what they load stays loaded."""

    def run(self, fn: Callable[[Any], Any], unit: Any) -> Any:
        return fn(unit)

    def pid(self) -> int:
        return os.getpid()


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ShiftbenchError(f"the ray engine needs Ray: {install_command('ray')}",
                              hint=(" (or use ", Option("engine", "local"), ")")) from None
    return ray


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse, within ``timeout`` seconds, an address where nothing listens (Ray itself retries for a minute)."""
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ShiftbenchError(f"--address {address!r}: expected HOST:PORT of a Ray cluster's head (e.g. 10.0.0.1:6379)")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, socket.timeout) else (exc.strerror or str(exc))
        raise ShiftbenchError(f"--address {address}: no Ray cluster answers there ({reason}); start one with "
                              "`ray start --head` or leave --address out to start a local one") from None


def make_engine(engine: str = "local", workers: int = 1, address: str | None = None) -> Engine:
    """``local`` or ``ray``; an address is only for the ray engine."""
    EngineSection().with_overrides(name=engine, address=address)  # a known engine; an address only for ray
    if engine == "local":
        return LocalEngine(workers)
    return RayEngine(address=address, workers=workers if workers > 1 else None)


class _quiet:
    """Ray's own loggers at ERROR while it starts (its token and resource notices are not the user's business)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __enter__(self) -> None:
        self.saved = []
        if self.enabled:
            for name in ("ray", "ray._private", "ray.worker"):
                logger = logging.getLogger(name)
                self.saved.append((logger, logger.level))
                logger.setLevel(logging.ERROR)

    def __exit__(self, *exc: Any) -> None:
        for logger, level in self.saved:
            logger.setLevel(level)


def _first_line(exc: BaseException | str) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


