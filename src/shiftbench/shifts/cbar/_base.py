"""The ImageNet-C-bar base: published levels, the parameter scales, and the class every C-bar corruption is.

ImageNet-C-bar (Mintun, Kirillov and Xie, NeurIPS 2021) defines each corruption on a level scale 0..10 and
picks five levels per corruption as its severities 1..5 (``data/cbar/imagenet_c_bar.csv``, shipped with its
licence). A level becomes a parameter linearly: ``float_parameter(level, maxval) = level * maxval / 10``.

A C-bar corruption's params are the reference's ``sample_parameters`` record, under the same names and
meanings, plus ``severity`` and ``level``; numpy arrays are recorded as lists. So a record drawn by the
reference replays here and ours replays there: where the reference draws a ``seed`` for its own
``np.random.RandomState``, ours does too, and the transform consumes that state in the reference's order.
The draws themselves come from the per-sample generator, like every shift's.

The reference is written for square images (``im_size``); every corruption here takes any H x W (at least
``MIN_SIDE``) by a rule stated in its class, which gives the reference's output on a square image.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from importlib import resources
from typing import Any, ClassVar

import numpy as np

from ..corruptions._common import Corruption

__all__ = ["CBarCorruption", "LEVELS", "float_parameter", "int_parameter", "cbar_levels", "draw_seed32"]


def float_parameter(level: float, maxval: float) -> float:
    """The reference's linear map of a level (0..10) to a parameter in 0..maxval."""
    return float(level) * maxval / 10.0


def int_parameter(level: float, maxval: float) -> int:
    """The reference's integer map (truncation)."""
    return int(level * maxval / 10)


@lru_cache(maxsize=1)
def cbar_levels() -> dict[str, tuple[float, ...]]:
    """``{corruption: (level of severity 1, ..., level of severity 5)}`` from the published table."""
    text = resources.files("shiftbench").joinpath("data/cbar/imagenet_c_bar.csv").read_text()
    rows = [r for r in csv.reader(text.splitlines()) if r]
    return {r[0]: tuple(float(v) for v in r[1:]) for r in rows}


LEVELS = cbar_levels()


def draw_seed32(rng: np.random.Generator) -> int:
    """A seed as the reference draws one (``randint(0, 2**32)``), for ``np.random.RandomState(seed)``."""
    return int(rng.integers(0, 2**32))


class CBarCorruption(Corruption):
    """An ImageNet-C-bar corruption: ``sample_parameters`` and ``transform`` as the reference defines them.

    Subclasses implement ``sample_parameters(shape, level, rng)`` (the reference's record for an image of
    ``shape`` at ``level``: JSON types only) and ``transform(image, params)`` (uint8 HxWx3 in and out), and
    may implement ``corrupt_tensor`` for the torch path, taking the same params.
    """

    level_table: ClassVar[dict[str, tuple[float, ...]]] = LEVELS

    def level(self, severity: int) -> float:
        """The published level of ``severity`` (1..5) on the corruption's 0..10 scale."""
        return self.level_table[self.name][int(severity) - 1]

    def sample_parameters(self, shape: tuple[int, ...], level: float, rng: np.random.Generator) -> dict[str, Any]:
        raise NotImplementedError

    def transform(self, image: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        level = self.level(severity)
        return {"level": level, **self.sample_parameters(tuple(shape), level, rng)}

    def corrupt(self, image, severity, params):
        return self.transform(image, params)
