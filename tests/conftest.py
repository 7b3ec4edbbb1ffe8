"""Shared fixtures: small deterministic images and samples built in the test itself."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings

from shiftbench.sample import Sample

# Property tests run the same generated cases on every machine and every run (derandomize), never fail
# for being slow on a busy machine (no deadline), and write no example database into the checkout.
settings.register_profile("shiftbench", derandomize=True, deadline=None, database=None, print_blob=True)
settings.load_profile("shiftbench")


def make_image(h: int = 48, w: int = 64, seed: int = 0) -> np.ndarray:
    """A structured test image: smooth gradients, a disc and some texture (not flat, not pure noise)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([x / max(w - 1, 1), y / max(h - 1, 1), 0.5 + 0.5 * np.sin((x + y) / 5.0)], axis=-1)
    disc = (x - w * 0.55) ** 2 + (y - h * 0.5) ** 2 < (min(h, w) * 0.3) ** 2
    img[disc] = [0.9, 0.3, 0.2]
    img += rng.normal(0, 0.03, img.shape).astype(np.float32)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8)


def make_sample(h: int = 48, w: int = 64, seed: int = 0, sid: str = "s0") -> Sample:
    img = make_image(h, w, seed)
    y, x = np.mgrid[0:h, 0:w]
    mask = (x - w * 0.55) ** 2 + (y - h * 0.5) ** 2 < (min(h, w) * 0.3) ** 2
    ys, xs = np.nonzero(mask)
    box = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
    return Sample(image=img, label=281, class_name="tabby cat", mask=mask, boxes=[box], box_labels=[281],
                  caption="a red disc on a gradient background", id=sid, meta={"scene": "test"})


@pytest.fixture
def image() -> np.ndarray:
    return make_image()


@pytest.fixture
def sample() -> Sample:
    return make_sample()


@pytest.fixture(scope="module")
def one_thread():
    """Tiny torch models: thread start-up and contention on a busy 2-core machine cost far more than the
    arithmetic; run them on one thread and restore the setting afterwards."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory):
    """ONE local Ray cluster (2 CPUs) for the whole test session; yields its address.

    Its workers are fresh processes: they get this checkout's sources and the tests folder on their path
    (so the tests' registered datasets and shifts import by name), and a file where the test shift with
    a "model" logs each load (tiny_registry.LOAD_LOG_ENV). Shut down at the end of the session.
    """
    import logging
    import os
    from pathlib import Path

    import ray

    here = Path(__file__).resolve().parent
    load_log = tmp_path_factory.mktemp("ray") / "loads.txt"
    load_log.touch()
    path = os.pathsep.join([str(here), str(here.parent / "src"), os.environ.get("PYTHONPATH", "")])
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "SHIFTBENCH_TEST_LOAD_LOG")}
    os.environ.update(PYTHONPATH=path, SHIFTBENCH_TEST_LOAD_LOG=str(load_log))  # inherited by the workers
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        yield {"address": ray.get_runtime_context().gcs_address, "load_log": load_log}
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def load_benchmark(stem: str, name: str | None = None):
    """A script of benchmarks/ imported as a module (they are scripts, not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{stem}.py"
    spec = importlib.util.spec_from_file_location(name or f"bench_{stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
