"""Benchmark specs, the public names: :func:`load_spec` and the typed spec it returns.

The plan lives in the engine layer (:mod:`shiftbench.engine.spec`); this module re-exports its public
names so that ``from shiftbench.spec import load_spec`` keeps working. Nothing in the engine imports it.
"""

from __future__ import annotations

from .engine.spec import (AnalysisSection, CurateSection, EngineSection, ModelSpec, Condition,
                          PreprocessSection, QualitySection, ShiftSpec, Spec, load_spec)
from .errors import SpecError

__all__ = ["Spec", "ShiftSpec", "ModelSpec", "Condition", "EngineSection", "QualitySection", "CurateSection",
           "AnalysisSection", "PreprocessSection", "load_spec", "SpecError"]
