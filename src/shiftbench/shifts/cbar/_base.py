"""The ImageNet-C-bar base: published levels, the parameter scales, and the class every C-bar corruption is.

ImageNet-C-bar (Mintun, Kirillov and Xie, NeurIPS 2021) defines each corruption on a level scale 0..10 and
picks five levels per corruption as its severities 1..5 (``data/cbar/imagenet_c_bar.csv``, shipped with its
licence). Severity is a dial: between whole severities the level moves linearly from one published level to
the next; ``create_shift(name, scale="level")`` takes the level itself, any real number in 0..10. A level becomes a parameter linearly: ``float_parameter(level, maxval) = level * maxval / 10``.

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

from ...errors import ShiftbenchError
from ...severity import interpolate
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

    def __init__(self, scale: str = "severity"):
        """``scale="severity"`` (the default): severities 1..5, the published levels at whole severities and the
        level linear between them (severity 2.5 of sparkles, levels 2 and 3, is level 2.5). ``scale="level"``:
        the severity *is* the level, any real number on the corruption's own 0..10 scale, given to the reference's
        formulas as they stand (level 0 is their end point, not always the clean image)."""
        if scale not in ("severity", "level"):
            raise ShiftbenchError(f"shift {self.name!r}: scale must be 'severity' (1..5, the published levels) or "
                                  f"'level' (the 0..10 level scale), got {scale!r}")
        self.scale = scale
        self.config: dict[str, Any] = {} if scale == "severity" else {"scale": scale}
        if scale == "level":
            self.severities = (0, 10)
            self.default_severity = None

    def level(self, severity: float) -> float:
        """The level on the corruption's 0..10 scale of ``severity``: the published level at a whole severity
        1..5, linear in between; the severity itself on the level scale."""
        if self.scale == "level":
            return float(severity)
        return float(interpolate(self.level_table[self.name], severity, integer="float"))

    def sample_parameters(self, shape: tuple[int, ...], level: float, rng: np.random.Generator) -> dict[str, Any]:
        raise NotImplementedError

    def transform(self, image: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        level = self.level(severity)
        return {"level": level, **self.sample_parameters(tuple(shape), level, rng)}

    def corrupt(self, image, severity, params):
        return self.transform(image, params)
