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
