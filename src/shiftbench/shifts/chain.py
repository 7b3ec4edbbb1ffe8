"""Composed shifts: ``chain`` applies its steps in order, each to the previous one's output.

>>> import shiftbench as sb
>>> c = sb.chain(("background_color", {"color": "red"}), "gaussian_noise")
>>> c.name, sorted(c.keeps), c.severities
('chain', ['boxes', 'label', 'mask'], (1, 5))

A step is a name, ``(name, params)``, ``{name, params, severity}`` or a Shift object. A step without a
severity of its own runs at the chain's severity (the condition's); one with a severity always runs
at it. The chain keeps what every step keeps, and a step that needs a mask is refused after a step
that does not keep the mask valid. Each step draws from its own generator, derived from the chain's
per-sample generator in step order, so params are recorded per step (``{"steps": [{"shift", "severity",
"params"}, ...]}``) and replayed exactly; a step's params are drawn on the previous step's output,
which ``draw`` computes and hands to ``apply`` (no step runs twice).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from ..errors import SeverityError, ShiftbenchError
from ..registry import SHIFTS
from ..sample import Sample
from ..severity import Severity, canonical, label
from .base import Shift, check_params

__all__ = ["Chain", "chain", "normalise_steps"]

STEP_KEYS = ("name", "params", "severity")
_CACHE_SIZE = 256  # drawn-but-not-applied samples kept (a runner batch draws all, then applies all)


def normalise_steps(shifts: Any) -> list[dict[str, Any]]:
    """The canonical, JSON form of a chain's steps: ``[{"name", "params"[, "severity"]}]``."""
    if isinstance(shifts, (str, dict, Shift)) or not isinstance(shifts, (list, tuple)):
        raise ShiftbenchError(f"chain: shifts must be a list of steps, got {shifts!r}")
    if len(shifts) < 2:
        raise ShiftbenchError(f"chain: needs at least two steps, got {len(shifts)}")
    steps = []
    for i, step in enumerate(shifts):
        where = f"chain step {i + 1}"
        severity = None
        if isinstance(step, Shift):
            name, params = step.name, dict(step.config)
        elif isinstance(step, str):
            name, params = step, {}
        elif isinstance(step, (list, tuple)) and len(step) in (2, 3) and isinstance(step[0], str):
            name, params = step[0], step[1] if step[1] is not None else {}
            severity = step[2] if len(step) == 3 else None
        elif isinstance(step, dict):
            unknown = [k for k in step if k not in STEP_KEYS]
            if unknown:
                raise ShiftbenchError(f"{where}: unknown key {unknown[0]!r}; a step takes {', '.join(STEP_KEYS)}")
            name, params, severity = step.get("name"), step.get("params") or {}, step.get("severity")
        else:
            raise ShiftbenchError(f"{where}: expected a shift name, (name, params), {{name, params, severity}} "
                                  f"or a Shift, got {step!r}")
        if not isinstance(name, str) or not name:
            raise ShiftbenchError(f"{where}: expected a shift name, got {name!r}")
        if name in ("chain", "clean"):
            raise ShiftbenchError(f"{where}: {name!r} cannot be a step (list the steps themselves)")
        if not isinstance(params, dict):
            raise ShiftbenchError(f"{where} ({name}): params must be a mapping, got {params!r}")
        if severity is not None:  # a number (whole ones an int: shiftbench.severity); the step's range is the shift's
            try:
                severity = canonical(severity, f"{where} ({name}): severity")
            except SeverityError as exc:
                raise ShiftbenchError(str(exc)) from None
        entry: dict[str, Any] = {"name": name, "params": json.loads(json.dumps(params, sort_keys=True, default=str))}
        if severity is not None:
            entry["severity"] = severity
        steps.append(entry)
    return steps


@SHIFTS.register("chain", description="composed shifts: each step applied to the previous one's output",
                 group="chain", contract=False)
class Chain(Shift):
    """Steps applied in order (see the module docstring); ``sb.chain(...)`` builds one."""

    def __init__(self, shifts: Any = None):
        if shifts is None:
            raise ShiftbenchError("chain: give its steps (shifts: [...]), at least two")
        steps = normalise_steps(shifts)
        self.config = {"shifts": steps}
        given = list(shifts)
        self.steps: list[Shift] = []
        for i, (step, raw) in enumerate(zip(steps, given)):
            try:
                shift = raw if isinstance(raw, Shift) else SHIFTS.create(step["name"], **step["params"])
            except ShiftbenchError as exc:
                raise type(exc)(f"chain step {i + 1}: {exc}") from None
            self.steps.append(shift)
        self.fixed: list[Severity | None] = []
        for i, (shift, step) in enumerate(zip(self.steps, steps)):
            lo, hi = shift.severities
            fixed = step.get("severity")
            if fixed is None and lo == hi:
                fixed = lo  # a single-severity shift always runs at it
            if fixed is not None:
                try:
                    fixed = shift.check_severity(fixed)
                except SeverityError as exc:
                    raise SeverityError(f"chain step {i + 1}: {exc}") from None
            self.fixed.append(fixed)
        self._check_composable()
        free = [s for s, f in zip(self.steps, self.fixed) if f is None]
        if free:
            lo = max(s.severities[0] for s in free)
            hi = min(s.severities[1] for s in free)
            if lo > hi:
                ranges = ", ".join(f"{s.name} {s.severities[0]}..{s.severities[1]}" for s in free)
                raise ShiftbenchError(f"chain: its steps' severities do not overlap ({ranges}); fix one step's severity")
            defaults = {s.default_severity for s in free}
            default = defaults.pop() if len(defaults) == 1 else None
        else:
            lo = hi = 1
            default = 1
        # per-instance contract attributes (class attributes on single shifts); a dial when every step that
        # runs at the chain's severity has one (a step without would be asked for 2.5)
        self.severities = (lo, hi)  # type: ignore[misc]
        self.continuous = bool(free) and all(getattr(s, "continuous", False) for s in free)  # type: ignore[misc]
        self.default_severity = default if default is None or lo <= default <= hi else None  # type: ignore[misc]
        keeps = frozenset.intersection(*(frozenset(s.keeps) for s in self.steps))
        self.keeps = keeps  # type: ignore[misc]
        self.requires = frozenset().union(*(s.requires for s in self.steps))  # type: ignore[misc]
        self.kind = "sample" if any(s.kind == "sample" for s in self.steps) else "image"  # type: ignore[misc]
        self._pending: OrderedDict[int, tuple[Sample, str, Sample]] = OrderedDict()
        self._lock = threading.Lock()

    def _check_composable(self) -> None:
        for i, shift in enumerate(self.steps):
            if shift.kind == "text":
                raise ShiftbenchError(f"chain step {i + 1} ({shift.name}) corrupts text; a chain composes image "
                                      f"shifts (list text corruptions as separate shifts)")
            for need in sorted(shift.requires):
                for j, before in enumerate(self.steps[:i]):
                    if need not in before.keeps:
                        raise ShiftbenchError(
                            f"chain step {i + 1} ({shift.name}) needs the sample's {need}, which step {j + 1} "
                            f"({before.name}) does not keep valid; put {shift.name} first")

    # -- the shift contract -------------------------------------------------------------------
    def severity_of(self, step: int, severity: Severity) -> Severity:
        fixed = self.fixed[step]
        return fixed if fixed is not None else severity

    def sample_params(self, sample: Sample, severity: Severity, rng: np.random.Generator) -> dict[str, Any]:
        out = sample
        records = []
        last = len(self.steps) - 1
        for i, shift in enumerate(self.steps):
            # each step's own generator, from the chain's per-sample one in step order
            step_rng = np.random.Generator(np.random.PCG64(int(rng.integers(0, 2**63 - 1))))
            sev = self.severity_of(i, severity)
            shift.check_sample(out)
            params = check_params(shift.sample_params(out, sev, step_rng), shift.name)
            records.append({"shift": shift.name, "severity": sev, "params": params})
            if i < last:  # the next step draws on this step's output
                out = shift.apply_batch([out], [params])[0]
        params = {"steps": records}
        if len(self.steps) > 1:
            self._remember(sample, params, out)
        return params

    def check_sample(self, sample: Sample) -> None:
        # the first step sees the sample; later steps check what the steps before hand them (sample_params)
        self.steps[0].check_sample(sample)

    def apply(self, sample: Sample, params: dict[str, Any]) -> Sample:
        return self.apply_batch([sample], [params])[0]

    def apply_batch(self, samples: Sequence[Sample], params: Sequence[dict[str, Any]]) -> list[Sample]:
        steps = [self._steps_of(p) for p in params]
        last = len(self.steps) - 1
        # what draw computed up to the last step, when these samples were just drawn with these params
        ready = [self._recall(s, p) for s, p in zip(samples, params)]
        if all(r is not None for r in ready):
            outs = list(ready)
            start = last
        else:
            outs, start = list(samples), 0
        for i in range(start, len(self.steps)):
            outs = list(self.steps[i].apply_batch(outs, [st[i]["params"] for st in steps]))
        return [o.replace(id=s.id) if o.id != s.id else o for o, s in zip(outs, samples)]

    def _steps_of(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        steps = params.get("steps") if isinstance(params, dict) else None
        if not isinstance(steps, list) or len(steps) != len(self.steps):
            raise ShiftbenchError(f"chain params must hold one entry per step ({len(self.steps)}), got {params!r}")
        for i, (entry, shift) in enumerate(zip(steps, self.steps)):
            if not isinstance(entry, dict) or entry.get("shift") != shift.name or not isinstance(entry.get("params"), dict):
                raise ShiftbenchError(f"chain params, step {i + 1}: expected {{shift: {shift.name}, severity, params}}, "
                                      f"got {entry!r}")
        return steps

    # -- draw -> apply hand-over ---------------------------------------------------------------
    def _remember(self, sample: Sample, params: dict[str, Any], before_last: Sample) -> None:
        key = json.dumps(params, sort_keys=True)
        with self._lock:
            self._pending[id(sample)] = (sample, key, before_last)
            self._pending.move_to_end(id(sample))
            while len(self._pending) > _CACHE_SIZE:
                self._pending.popitem(last=False)

    def _recall(self, sample: Sample, params: dict[str, Any]) -> Sample | None:
        with self._lock:
            hit = self._pending.get(id(sample))
            if hit is None or hit[0] is not sample or hit[1] != json.dumps(params, sort_keys=True):
                return None
            del self._pending[id(sample)]
        return hit[2]

    # -- what engines ask -----------------------------------------------------------------------
    def load_conditioning(self, sample: Sample) -> None:
        for shift in self.steps:
            shift.load_conditioning(sample)

    @property
    def uses_model(self) -> bool:
        return any(s.uses_model for s in self.steps)

    @property
    def draws_randomly(self) -> bool:
        return any(s.draws_randomly for s in self.steps)

    def __getstate__(self) -> dict[str, Any]:  # Ray / pickling: the hand-over cache and its lock stay here
        state = dict(self.__dict__)
        state["_pending"] = OrderedDict()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def describe(self) -> str:
        """``background_color(color=red)@5 -> gaussian_noise`` (steps with their params and fixed severities)."""
        parts = []
        for step in self.config["shifts"]:
            fixed = step.get("severity")
            args = ", ".join(f"{k}={v}" for k, v in sorted(step["params"].items()))
            parts.append(step["name"] + (f"({args})" if args else "") + (f"@{label(fixed)}" if fixed is not None else ""))
        return " -> ".join(parts)

    def __repr__(self) -> str:
        return f"Chain({self.describe()})"


def chain(*steps: Any) -> Chain:
    """A composed shift: ``sb.chain(("background_color", {"color": "red"}), "gaussian_noise")``."""
    if len(steps) == 1 and isinstance(steps[0], list):  # sb.chain([step, step, ...])
        steps = tuple(steps[0])
    return Chain(shifts=list(steps))
