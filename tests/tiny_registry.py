"""A tiny dataset and a tiny noise shift registered for engine tests (names start with '_test')."""

from __future__ import annotations

import numpy as np

from shiftbench.datasets.base import Dataset
from shiftbench.registry import DATASETS, SHIFTS
from shiftbench.sample import Sample
from shiftbench.shifts.base import ImageShift

from conftest import make_image


class TinyDataset(Dataset):
    """Twenty small images in two classes, with captions; ids are stable."""

    name = "_test_tiny"
    annotations = ("label", "caption")

    def __init__(self, n: int = 20):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def sample_id(self, index: int) -> str:
        return f"img{index:03d}"

    def source_path(self, index: int) -> str:
        return f"class{index % 2}/img{index:03d}.png"

    def load(self, index: int) -> Sample:
        return Sample(image=make_image(40, 48, seed=index), label=index % 2, caption=f"picture number {index} of a cat",
                      id=self.sample_id(index), meta={"relpath": f"class{index % 2}/img{index:03d}.png"})


class TestNoise(ImageShift):
    """Gaussian noise for engine tests."""

    name = "_test_noise"

    def image_params(self, image, severity, rng):
        return {"noise_seed": int(rng.integers(2**31)), "sigma": 6.0 * severity}

    def apply_image(self, image, params):
        noise = np.random.Generator(np.random.PCG64(params["noise_seed"])).normal(0, params["sigma"], image.shape)
        return np.clip(image + noise, 0, 255).astype(np.uint8)


if "_test_tiny" not in DATASETS:
    DATASETS.add("_test_tiny", TinyDataset, description="tiny test dataset", size=20)
if "_test_noise" not in SHIFTS:
    SHIFTS.add("_test_noise", TestNoise, description="test noise", group="_testgroup")


# -- a shift that "loads a model": engine tests count its loads per process --------------------------
LOAD_LOG_ENV = "SHIFTBENCH_TEST_LOAD_LOG"  # a file each process appends its pid to when it loads the model
_MODEL: dict[str, np.ndarray] = {}


class TestModeled(ImageShift):
    """Noise through a process-wide "model" (a fixed array, loaded once per process like a real pipeline).

    ``delay`` slows each sample (kill tests); ``fail_on`` makes the shift raise on that sample id.
    """

    name = "_test_modeled"

    def __init__(self, delay: float = 0.0, fail_on: str | None = None):
        self.delay, self.fail_on = float(delay), fail_on
        self.config = {"delay": self.delay, "fail_on": fail_on}

    def load_conditioning(self, sample):
        self.model()

    def model(self) -> np.ndarray:
        if "weights" not in _MODEL:
            import os

            _MODEL["weights"] = np.random.default_rng(0).normal(0, 8.0, (64, 64, 3))
            log_file = os.environ.get(LOAD_LOG_ENV)
            if log_file:
                with open(log_file, "a") as fh:
                    fh.write(f"{os.getpid()}\n")
        return _MODEL["weights"]

    def image_params(self, image, severity, rng):
        return {"gain": float(severity) * float(rng.uniform(0.5, 1.0))}

    def apply_batch(self, samples, params):
        for sample in samples:
            if self.fail_on is not None and sample.id == self.fail_on:
                raise RuntimeError(f"cannot paint {sample.id}")
        return super().apply_batch(samples, params)

    def apply_image(self, image, params):
        import time

        if self.delay:
            time.sleep(self.delay)
        h, w = image.shape[:2]
        noise = np.resize(self.model(), (h, w, 3)) * params["gain"]
        return np.clip(image + noise, 0, 255).astype(np.uint8)


if "_test_modeled" not in SHIFTS:
    SHIFTS.add("_test_modeled", TestModeled, description="test shift with a model", group="_testmodel")


# -- a model that needs a GPU when asked for one: the ray driver checks models on its CPU ------------
from shiftbench.models.dummy import DummyClassifier  # noqa: E402
from shiftbench.registry import MODELS  # noqa: E402


class GpuOnly(DummyClassifier):
    """A dummy classifier that refuses ``device="cuda"`` where no GPU is (as a real model's ``.to`` would)."""

    def __init__(self, device: str = "cpu", **kwargs):
        if str(device).startswith("cuda"):
            from shiftbench.errors import ShiftbenchError

            raise ShiftbenchError(f"_test_gpu_only: no GPU for device {device!r}")
        super().__init__(label_space=2, **kwargs)
        self.device = device


if "_test_gpu_only" not in MODELS:
    MODELS.add("_test_gpu_only", GpuOnly, description="test model needing a GPU for device=cuda",
               task="classification")


class LockedTinyDataset(TinyDataset):
    """The tiny dataset holding a lock: it cannot be pickled, so Ray workers open it themselves."""

    name = "_test_tiny_locked"

    def __init__(self, n: int = 20):
        import threading

        super().__init__(n)
        self.lock = threading.Lock()


if "_test_tiny_locked" not in DATASETS:
    DATASETS.add("_test_tiny_locked", LockedTinyDataset, description="tiny test dataset, unpicklable", size=20)
