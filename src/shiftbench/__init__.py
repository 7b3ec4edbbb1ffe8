"""shiftbench: stress-test vision and vision-language models with controlled, label-preserving shifts.

>>> import shiftbench as sb
>>> "clean" in sb.list_shifts()
True
"""

from __future__ import annotations

from typing import Any

from .errors import ShiftbenchError, UnknownNameError
from .registry import DATASETS, METRICS, MODELS, SHIFTS
from .sample import Query, Sample, load_image, to_rgb_uint8

__version__ = "0.1.0"

__all__ = [
    "__version__", "Sample", "Query", "load_image", "to_rgb_uint8", "ShiftbenchError", "UnknownNameError",
    "list_shifts", "create_shift", "list_models", "create_model", "list_datasets", "load_dataset",
    "list_metrics", "create_metric", "evaluate", "chain", "SHIFTS", "MODELS", "DATASETS", "METRICS",
]


def list_shifts(pattern: str | None = None) -> list[str]:
    """Registered shift names matching a glob pattern (``"*blur*"``); all when None."""
    return SHIFTS.names(pattern)


def create_shift(name: str, **params: Any):
    """Create a registered shift; variant parameters are keyword arguments."""
    return SHIFTS.create(name, **params)


def chain(*steps: Any):
    """A composed shift, its steps applied in order: ``sb.chain(("background_color", {"color": "red"}),
    "gaussian_noise")``. A step is a name, ``(name, params)``, ``(name, params, severity)``, ``{name, params,
    severity}`` or a Shift; steps without a severity run at the chain's (see shiftbench.shifts.chain)."""
    from .shifts.chain import chain as _chain  # deferred: start-up cost (registers the shift modules)

    return _chain(*steps)


def list_models(pattern: str | None = None) -> list[str]:
    return MODELS.names(pattern)


def create_model(name: str, **kwargs: Any):
    return MODELS.create(name, **kwargs)


def list_datasets(pattern: str | None = None) -> list[str]:
    return DATASETS.names(pattern)


def load_dataset(name_or_path: str, **kwargs: Any):
    """Load a registered dataset by name, or read a dataset folder/file by path."""
    from .datasets import load as _load  # deferred: start-up cost (imports every reader)

    return _load(name_or_path, **kwargs)


def list_metrics(pattern: str | None = None) -> list[str]:
    return METRICS.names(pattern)


def create_metric(name: str, **kwargs: Any):
    return METRICS.create(name, **kwargs)


def evaluate(spec_or_path: Any, store: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
    """Run a benchmark spec (dict, Spec or YAML path); returns the result rows (see DESIGN.md)."""
    from .engine.evaluate import evaluate as _evaluate  # deferred: start-up cost (the whole engine)

    return _evaluate(spec_or_path, store=store, **kwargs)
