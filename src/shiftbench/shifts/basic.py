"""The identity shift ``clean``: the baseline every run records beside its shifted conditions."""

from __future__ import annotations

from typing import Any, ClassVar

from ..registry import SHIFTS
from ..sample import Sample
from .base import Shift


@SHIFTS.register("clean", description="No change: the clean baseline (severity 0)", group="clean")
class Clean(Shift):
    """No change: the clean baseline (severity 0)."""

    role: ClassVar[str] = "baseline"
    severities: ClassVar[tuple[int, int]] = (0, 0)
    default_severity: ClassVar[int | None] = 0

    def apply(self, sample: Sample, params: dict[str, Any]) -> Sample:
        return sample
