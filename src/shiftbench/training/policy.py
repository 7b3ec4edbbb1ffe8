"""Sampling policies: which shift, at which severity, how often, drawn from (seed, epoch, index) alone.

A :class:`ShiftPolicy` separates the dice from the paint, as the shifts themselves do: ``choose`` rolls
whether anything is applied, which shift and which severity, and the seed the shift draws its own params
from; ``sample`` then draws the params and applies them. Both depend on ``(seed, epoch, index)`` and the
sample only, never on a global generator, a DataLoader worker id or the order of calls, so a given
epoch and index give the same bytes in any process. The record ``sample`` returns is plain JSON and
``replay`` rebuilds the output from it exactly.

>>> import numpy as np
>>> from shiftbench import Sample
>>> policy = ShiftPolicy(["gaussian_noise", ("brightness", {})], p=1.0, severities=[1, 2])
>>> s = Sample(image=np.full((32, 32, 3), 128, np.uint8), label=1, id="a")
>>> out, record = policy.sample(s, epoch=0, index=3, seed=0)
>>> record["shift"] in ("gaussian_noise", "brightness"), record["severity"] in (1, 2)
(True, True)
>>> bool((policy.replay(s, record).image == out.image).all())
True
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..errors import SeverityError, ShiftbenchError
from ..registry import SHIFTS
from ..sample import Sample
from ..seeds import check_seed
from ..severity import Severity, check, label, parse
from ..shifts.base import Shift, make_rng

__all__ = ["ShiftPolicy", "PolicyEntry", "Choice", "TASK_NEEDS", "parse_severities", "check_stream_key",
           "mask_reader"]

# what a training task reads from a sample, so what a shift must keep valid for it
TASK_NEEDS = {"classification": "label", "segmentation": "mask", "detection": "boxes"}
ENTRY_KEYS = ("name", "params", "shift", "severities", "weight")
# mask providers a background shift can be told to use instead of the sample's own mask
_SAMPLE_MASK = (None, "auto", "ground_truth")
_STREAM = "shiftbench.training.policy"  # the "shift name" of the choice generator's stream


@dataclass(frozen=True)
class PolicyEntry:
    """One shift of a policy: the Shift, the severities drawn for it (uniformly) and its relative weight."""

    shift: Shift
    severities: tuple[Severity, ...]  # canonical (shiftbench.severity): 3, 2.5
    weight: float

    @property
    def name(self) -> str:
        return self.shift.name

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.shift.name, "params": dict(self.shift.config), "severities": list(self.severities),
                "weight": self.weight}


@dataclass(frozen=True)
class Choice:
    """What the dice said for one (seed, epoch, index): ``entry`` is None when nothing is applied.

    ``seed`` is the seed the chosen shift draws its params with (its generator also mixes in the sample
    id and the shift's name, as for any shift call)."""

    entry: int | None
    severity: Severity | None
    seed: int


def check_stream_key(epoch: Any, index: Any) -> str:
    """The key of the choice generator: ``epoch`` a non-negative int; ``index`` a non-negative int (the
    position in a dataset) or a str (a stable sample id, for callers that have no index)."""
    if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or epoch < 0:
        raise ShiftbenchError(f"epoch must be a non-negative int, got {epoch!r}")
    if isinstance(index, str):
        return f"epoch={int(epoch)}\x1fid={index}"
    if isinstance(index, bool) or not isinstance(index, numbers.Integral) or index < 0:
        raise ShiftbenchError(f"index must be a non-negative int or a sample id (str), got {index!r}")
    return f"epoch={int(epoch)}\x1findex={int(index)}"


def parse_severities(spec: Any, shift: Shift, where: str) -> tuple[Severity, ...]:
    """Severities from a number, a list, a ``range``, ``"lo-hi"``, ``"1,3,5"``, a grid ``"lo-hi:step"`` or None
    (the shift's whole range, whole severities): read by the one parser of written severities
    (``shiftbench.severity.parse``), then checked against the shift's range and, for an in-between severity
    (2.5), its dial (``Shift.continuous``). Errors start with ``where``.

    >>> import shiftbench as sb
    >>> parse_severities("2-4", sb.create_shift("gaussian_noise"), "x")
    (2, 3, 4)
    >>> parse_severities("1-2:0.5", sb.create_shift("gaussian_noise"), "x")
    (1, 1.5, 2)
    """
    lo, hi = shift.severities
    if spec is None:
        return tuple(range(lo, hi + 1))
    if isinstance(spec, bool) or not isinstance(spec, (str, numbers.Real, range, list, tuple, np.ndarray)):
        raise ShiftbenchError(f"{where}: severities must be an int, a list, a range or 'lo-hi', got {spec!r}")
    if not isinstance(spec, (str, numbers.Real)) and len(spec) == 0:
        raise ShiftbenchError(f"{where}: severities {spec!r} is empty")
    try:
        values = parse(spec, where)
    except SeverityError as exc:
        if isinstance(spec, str) and "is not a severity" in str(exc):
            raise ShiftbenchError(f"{where}: severities {spec!r} is not an int, a list, 'lo-hi' or a grid "
                                  "'lo-hi:step'") from None
        raise
    return check(values, shift, where)


def _check_weight(weight: Any, where: str) -> float:
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight) or weight < 0:
        raise ShiftbenchError(f"{where}: weight must be a finite number >= 0, got {weight!r}")
    return float(weight)


def _create(name: Any, params: Any, where: str) -> Shift:
    if not isinstance(name, str) or not name:
        raise ShiftbenchError(f"{where}: expected a shift name, got {name!r}")
    if not isinstance(params, Mapping):
        raise ShiftbenchError(f"{where} ({name}): params must be a mapping, got {params!r}")
    try:
        return SHIFTS.create(name, **params)
    except ShiftbenchError as exc:  # keep the class (UnknownNameError stays one), add where it came from
        raise type(exc)(f"{where}: {exc}") from None


def _shift_of(item: Any, where: str) -> tuple[Shift, Any, Any]:
    """(shift, severities spec or ..., weight or ...) of one ``shifts`` item; ``...`` = not given."""
    if isinstance(item, Shift):
        return item, ..., ...
    if isinstance(item, str):
        return _create(item, {}, where), ..., ...
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
        return _create(item[0], item[1] if item[1] is not None else {}, where), ..., ...
    if isinstance(item, Mapping):
        unknown = [k for k in item if k not in ENTRY_KEYS]
        if unknown:
            raise ShiftbenchError(f"{where}: unknown key {unknown[0]!r}; an entry takes {', '.join(ENTRY_KEYS)}")
        if ("shift" in item) == ("name" in item):
            raise ShiftbenchError(f"{where}: give either name (with params) or shift (a Shift object)")
        if "shift" in item:
            if not isinstance(item["shift"], Shift) or "params" in item:
                raise ShiftbenchError(f"{where}: shift must be a Shift object (without params), got {item['shift']!r}")
            shift = item["shift"]
        else:
            shift = _create(item["name"], item.get("params") or {}, where)
        return shift, item.get("severities", ...), item.get("weight", ...)
    raise ShiftbenchError(f"{where}: expected a shift name, (name, params), a Shift or "
                          f"{{name, params, severities, weight}}, got {item!r}")


def _is_one_spec(severities: Any) -> bool:
    """A severities argument meant for every shift (a number, 'lo-hi', 'lo-hi:step', a range, a list of numbers)."""
    if severities is None or isinstance(severities, (str, range, numbers.Real, np.ndarray)):
        return True
    # a list of numbers is one list of severities ([3, 5]: 3 or 5 for every shift); a list holding lists,
    # ranges, strings or None has one spec per shift
    return isinstance(severities, (list, tuple)) and all(isinstance(v, numbers.Number) for v in severities)


def mask_reader(shift: Shift) -> Shift | None:
    """The shift (or, in a chain, the first step) that reads the sample's own object mask, or None."""
    steps = getattr(shift, "steps", None)
    if isinstance(steps, (list, tuple)) and steps and all(isinstance(s, Shift) for s in steps):
        return next((r for r in map(mask_reader, steps) if r is not None), None)
    return shift if "mask" in shift.requires and shift.config.get("mask") in _SAMPLE_MASK else None


class ShiftPolicy:
    """Which shifts are applied during training, at which severities, and how often.

    ``shifts``: a list whose items are a registered name (``"gaussian_noise"``), ``(name, params)``, a Shift
    object (``sb.create_shift(...)``, ``sb.chain(...)``, your own subclass) or a dict
    ``{name, params, severities, weight}`` (or ``{shift, severities, weight}``).
    ``p``: the probability that a sample is shifted at all; otherwise it passes through unchanged.
    ``severities``: a default for every shift (an int, a list, a ``range``, ``"lo-hi"`` or a grid
    ``"lo-hi:step"`` such as ``"1-5:0.5"``, in-between severities for shifts with a dial; None: each shift's
    whole range), or a list with one such spec per shift; drawn uniformly per sample.
    ``weights``: relative weights of the shifts (one per shift; default equal); the shift is chosen with
    probability ``weight / sum(weights)`` among samples that are shifted.

    Errors name the entry: ``ShiftPolicy shifts[1] (background_color): severity 7 is outside 1..5``.
    """

    def __init__(self, shifts: Iterable[Any], *, p: float = 1.0, severities: Any = None,
                 weights: Sequence[float] | None = None):
        if isinstance(shifts, (str, Shift, Mapping)) or (isinstance(shifts, tuple) and len(shifts) == 2
                                                          and isinstance(shifts[1], Mapping)):
            shifts = [shifts]  # one shift given bare
        items = list(shifts)
        if not items:
            raise ShiftbenchError("ShiftPolicy: give at least one shift")
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= float(p) <= 1.0:
            raise ShiftbenchError(f"ShiftPolicy: p is the probability of shifting a sample, in [0, 1]; got {p!r}")
        self.p = float(p)
        if _is_one_spec(severities):
            per_shift_sev = [severities] * len(items)
        elif isinstance(severities, (list, tuple)) and len(severities) == len(items):
            per_shift_sev = list(severities)
        else:
            raise ShiftbenchError(f"ShiftPolicy: severities must be one spec for every shift or a list of "
                                  f"{len(items)} specs (one per shift), got {severities!r}")
        if isinstance(weights, np.ndarray):
            weights = weights.tolist()
        if weights is not None and (isinstance(weights, (str, Mapping)) or not isinstance(weights, Sequence)
                                    or len(weights) != len(items)):
            raise ShiftbenchError(f"ShiftPolicy: weights must be a list of {len(items)} numbers (one per shift), "
                                  f"got {weights!r}")
        entries = []
        for k, item in enumerate(items):
            where = f"ShiftPolicy shifts[{k}]"
            shift, own_sev, own_weight = _shift_of(item, where)
            where = f"{where} ({shift.name})"
            if own_weight is not ... and weights is not None:
                raise ShiftbenchError(f"{where}: weight given both in the entry and in weights=")
            weight = own_weight if own_weight is not ... else (1.0 if weights is None else weights[k])
            sev_spec = own_sev if own_sev is not ... else per_shift_sev[k]
            if own_sev is ... and shift.severities[0] == shift.severities[1] and _is_one_spec(severities):
                sev_spec = None  # a one-severity shift (clean, background_only) ignores the policy-wide default
            entries.append(PolicyEntry(shift, parse_severities(sev_spec, shift, where), _check_weight(weight, where)))
        total = sum(e.weight for e in entries)
        if total <= 0:
            raise ShiftbenchError("ShiftPolicy: the weights sum to 0; give at least one shift a positive weight")
        self.entries: tuple[PolicyEntry, ...] = tuple(entries)
        self._cumulative = np.cumsum([e.weight for e in entries]) / total

    # -- the dice -------------------------------------------------------------------------------
    def choose(self, epoch: int, index: int | str, seed: int = 0) -> Choice:
        """Whether to shift, which shift, which severity and the shift's seed for ``(seed, epoch, index)``.

        Always the same four draws in the same order, so raising ``p`` or re-weighting changes what a
        given index gets only where it must."""
        rng = make_rng(check_seed(seed), check_stream_key(epoch, index), _STREAM)
        u_apply, u_entry, u_severity = rng.random(3)
        shift_seed = int(rng.integers(0, 2**63))
        if not u_apply < self.p:
            return Choice(None, None, shift_seed)
        k = min(int(np.searchsorted(self._cumulative, u_entry, side="right")), len(self.entries) - 1)
        severities = self.entries[k].severities
        return Choice(k, severities[min(int(u_severity * len(severities)), len(severities) - 1)], shift_seed)

    # -- the paint ------------------------------------------------------------------------------
    def check_sample(self, sample: Sample) -> None:
        """Refuse a sample without a mask when any shift of the policy reads the sample's mask (checked for
        every shift, chosen or not, so that the first sample fails rather than a random later one)."""
        if sample.mask is not None:
            return
        for k, entry in enumerate(self.entries):
            reader = mask_reader(entry.shift)
            if reader is not None:
                step = f", its step {reader.name!r}" if reader is not entry.shift else ""
                hint = f" (or create {reader.name} with mask='u2netp' to estimate masks)" if "mask" in reader.config else ""
                raise ShiftbenchError(f"shift {entry.name!r} (policy shifts[{k}]{step}) needs samples with an object "
                                      f"mask; sample {sample.id!r} has none: use a dataset with masks{hint}")

    def sample(self, sample: Sample, epoch: int, index: int | str, seed: int = 0) -> tuple[Sample, dict[str, Any]]:
        """Shift ``sample`` as the policy says for ``(seed, epoch, index)``; returns (Sample, record).

        The record is JSON: ``{"applied", "shift", "config", "severity", "params", "entry", "seed", "epoch",
        "index", "sample_id", "shift_seed"}`` (``shift`` ... ``shift_seed`` None when nothing was applied);
        ``index`` is None when a sample id (str) stood in for it. ``replay(sample, record)`` rebuilds the
        output."""
        if not isinstance(sample, Sample):
            raise ShiftbenchError(f"ShiftPolicy.sample takes a Sample, got {type(sample).__name__}")
        self.check_sample(sample)
        choice = self.choose(epoch, index, seed)
        record: dict[str, Any] = {"applied": choice.entry is not None, "shift": None, "config": None,
                                  "severity": None, "params": None, "entry": choice.entry, "seed": int(seed),
                                  "epoch": int(epoch), "index": None if isinstance(index, str) else int(index),
                                  "sample_id": sample.id, "shift_seed": None}
        if choice.entry is None:
            return sample, record
        shift = self.entries[choice.entry].shift
        params = shift.draw_parsed(sample, choice.severity, choice.seed)
        record.update(shift=shift.name, config=dict(shift.config), severity=choice.severity, params=params,
                      shift_seed=choice.seed)
        return shift.apply(sample, params), record

    def replay(self, sample: Sample, record: Mapping[str, Any]) -> Sample:
        """Rebuild the output of ``sample(...)`` from its record (the recorded params, applied again).

        The policy's own shift is used when the record's entry names it with the same config; a record from
        another policy is replayed with ``create_shift(shift, **config)``."""
        try:
            applied = record["applied"]
        except (KeyError, TypeError):
            raise ShiftbenchError(f"not a ShiftPolicy record: {record!r}") from None
        if not applied:
            return sample
        name, config, params, k = record.get("shift"), record.get("config") or {}, record.get("params"), record.get("entry")
        if not isinstance(params, dict):
            raise ShiftbenchError(f"record of shift {name!r} holds no params: {record!r}")
        if isinstance(k, int) and 0 <= k < len(self.entries) and self.entries[k].name == name \
                and self.entries[k].shift.config == config:
            shift = self.entries[k].shift
        else:
            shift = _create(name, config, "ShiftPolicy.replay")
        return shift.apply(sample, params)

    # -- what callers check once ----------------------------------------------------------------
    def check_task(self, task: str, where: str = "ShiftPolicy") -> None:
        """Refuse, in one line, a shift that does not keep valid what ``task`` reads (TASK_NEEDS)."""
        if task not in TASK_NEEDS:
            raise ShiftbenchError(f"{where}: unknown task {task!r}; choose one of {', '.join(TASK_NEEDS)}")
        need = TASK_NEEDS[task]
        for k, entry in enumerate(self.entries):
            if need not in entry.shift.keeps:
                kept = ", ".join(sorted(entry.shift.keeps)) or "nothing"
                raise ShiftbenchError(f"{where}: shift {entry.name!r} (policy shifts[{k}]) does not keep the {need} "
                                      f"valid, which task {task!r} needs (it keeps: {kept})")

    def to_dict(self) -> dict[str, Any]:
        """JSON form (for a training config or log); ``ShiftPolicy.from_dict`` reads it back."""
        return {"p": self.p, "shifts": [e.to_dict() for e in self.entries]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ShiftPolicy":
        if not isinstance(data, Mapping) or "shifts" not in data:
            raise ShiftbenchError(f"ShiftPolicy.from_dict: expected {{p, shifts: [...]}}, got {data!r}")
        return cls(data["shifts"], p=data.get("p", 1.0))

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        parts = []
        for e in self.entries:
            args = ", ".join(f"{k}={v}" for k, v in sorted(e.shift.config.items()))
            sev = e.severities
            whole = all(isinstance(v, int) for v in sev)
            sev_text = (f"{sev[0]}-{sev[-1]}" if whole and len(sev) > 1 and list(sev) == list(range(sev[0], sev[-1] + 1))
                        else ",".join(map(label, sev)))
            parts.append(f"{e.name}" + (f"({args})" if args else "") + f"@{sev_text} w={e.weight:g}")
        return f"ShiftPolicy(p={self.p:g}, [{'; '.join(parts)}])"

