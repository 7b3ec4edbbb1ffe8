"""One condition of a run, from the spec to the store: (model, dataset, shift, params, severity), frozen.

The plan lists them (``Spec.conditions``), the kernel pairs each with its shift object to run it
(engine/kernel.py ``Planned``), the store keys its rows by them and the report's statistics group by them.
``model`` and ``dataset`` are empty where a condition is the same for every model (the kernel's shift
conditions, a report row's). :func:`params_key` is the one key of its params.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .severity import Severity

__all__ = ["Condition", "params_key", "canonical_json"]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal strings (used as keys)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def params_key(params: dict[str, Any] | None) -> str:
    """The one key of a shift's params (canonical JSON, ``{}`` for none): the stored conditions, the
    thumbnails and predictions, the retrieval units and the report's tables all group by it, so a resumed
    run finds the conditions an earlier one stored.

    >>> params_key({"b": 1, "a": [0.5]}), params_key(None)
    ('{"a":[0.5],"b":1}', '{}')
    """
    return canonical_json(params or {})


@dataclass(frozen=True)
class Condition:
    """A shift (``clean`` included) with its params and severity, for a model on a dataset.

    >>> Condition("m", "d", "fog", {"b": 1}, 2.5).params_key
    '{"b":1}'
    """

    model: str
    dataset: str
    shift: str
    params: dict[str, Any]
    severity: Severity  # canonical (shiftbench.severity): 3, 2.5; the store writes canonical() of it

    @property
    def params_key(self) -> str:
        return params_key(self.params)
