"""Severities: one number type for the whole library, one parser, and the interpolation of published levels.

A severity is an int where it is a whole number and a float otherwise (``canonical``): ``3``, ``3.0`` and
``np.int64(3)`` are all ``3``, so a whole severity keeps today's params, keys, folder names and bytes, and
``2.5`` stays ``2.5`` everywhere (store, manifest, report, folder ``gaussian_noise/2.5/``). Shifts whose
severity is a dial (``Shift.continuous``: the image corruptions, ImageNet-C-bar, the rate-based text
corruptions) take any real severity in their range; the rest take whole ones.

Written forms (specs, ``generate --severity``, training policies), all parsed by ``parse``:

>>> parse("3"), parse("1-3"), parse("1,3,5"), parse([1, 2.5])
((3,), (1, 2, 3), (1, 3, 5), (1, 2.5))
>>> parse("1-2:0.25")
(1, 1.25, 1.5, 1.75, 2)

A published table of five levels becomes a dial by ``interpolate``: whole severities read the table
exactly; in between, each number moves linearly from one level to the next, and whole-number parameters
(iteration counts, kernel radii) follow the stated ``integer`` rule.
"""

from __future__ import annotations

import math
import numbers
import re
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from .errors import SeverityError

__all__ = ["Severity", "canonical", "label", "parse", "interpolate", "between", "is_whole"]

Severity = int | float

# a grid step never makes more than this many severities (a typo like 1-5:0.0001 is refused, not run)
MAX_GRID = 401
_NUMBER = r"\d+(?:\.\d+)?"


def is_whole(value: Any) -> bool:
    return isinstance(value, numbers.Integral) or (isinstance(value, numbers.Real) and float(value).is_integer())


def canonical(value: Any, where: str = "severity") -> Severity:
    """``value`` as a severity: an int when whole, else a float; refuses bools, NaN, infinities and non-numbers.

    >>> canonical(3.0), canonical(np.float32(2.5)), canonical(np.int64(4))
    (3, 2.5, 4)
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SeverityError(f"{where}: expected a number, got {value!r} ({type(value).__name__})")
    if isinstance(value, numbers.Integral):
        return int(value)
    f = float(value)
    if not math.isfinite(f):
        raise SeverityError(f"{where}: expected a finite number, got {value!r}")
    return int(f) if f.is_integer() else f


def label(value: Any) -> str:
    """The written form: ``3``, ``2.5`` (shortest repr, never ``3.0``): folder names, table columns."""
    v = canonical(value)
    return str(v) if isinstance(v, int) else repr(v)


def _grid(lo: str, hi: str, step: str, where: str) -> list[Severity]:
    """The grid ``lo, lo + step, ..., hi`` from the written decimals, computed exactly (``fractions``): the step must
    divide the range exactly, and the last point is ``hi`` itself (1-5:0.9999999999 is refused, never planned as
    4.9999999996)."""
    a, b, d = Fraction(lo), Fraction(hi), Fraction(step)
    if d <= 0:
        raise SeverityError(f"{where}: the step of a severity grid must be positive, got {step}")
    count = (b - a) / d
    if count.denominator != 1:
        raise SeverityError(f"{where}: step {step} does not divide {lo}-{hi} into whole steps")
    n = int(count)
    if n + 1 > MAX_GRID:
        raise SeverityError(f"{where}: {lo}-{hi}:{step} gives {n + 1} severities, more than {MAX_GRID}")
    # each point exact as a fraction, then the nearest float: 1 + 3*0.1 is 1.3, and the ends are lo and hi
    return [canonical(float(a + i * d)) for i in range(n + 1)]


def parse(value: Any, where: str = "severities") -> tuple[Severity, ...]:
    """Severities from a number, a list of numbers, a ``range``, or text: ``"3"``, ``"2.5"``, ``"1,3,5"``,
    ``"1-5"`` (whole steps), ``"1-5:0.25"`` (a grid with that step, ends included). Order kept, repeats
    refused; the range of a particular shift is checked by ``check``."""
    if isinstance(value, range):
        value = list(value)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, str):
        out: list[Severity] = []
        for part in (p.strip() for p in value.split(",")):
            m = re.fullmatch(rf"({_NUMBER})\s*-\s*({_NUMBER})(?:\s*:\s*({_NUMBER}))?", part)
            if m:
                if Fraction(m.group(1)) > Fraction(m.group(2)):
                    raise SeverityError(f"{where}: the range {part!r} is empty")
                out.extend(_grid(m.group(1), m.group(2), m.group(3) or "1", where))
            elif re.fullmatch(_NUMBER, part):
                out.append(canonical(float(part), where))
            else:
                raise SeverityError(f"{where}: {part!r} is not a severity; write 3, 2.5, 1,3,5, 1-5 or 1-5:0.25")
        values = out
    elif isinstance(value, (list, tuple)):
        if not value:
            raise SeverityError(f"{where}: no severities given")
        values = [canonical(v, where) for v in value]
    else:
        values = [canonical(value, where)]
    if len(set(values)) != len(values):
        seen: set[Severity] = set()
        repeated = sorted({v for v in values if v in seen or seen.add(v)})
        raise SeverityError(f"{where}: severities {', '.join(map(label, repeated))} repeat; list each once")
    return tuple(values)


def check(values: Sequence[Any], shift: Any, where: str, shift_name: str | None = None) -> tuple[Severity, ...]:
    """Parsed ``values`` for ``shift`` (in its range; fractional only for a dial), canonical: the one check of the spec's,
    ``generate``'s and a policy's severities, trusted downstream (``Shift.draw_parsed``)."""
    (lo, hi), name = shift.severities, shift_name or shift.name
    out = []
    for v in values:
        v = canonical(v, where)
        if not lo <= v <= hi:
            raise SeverityError(f"{where}: severity {label(v)} is outside {lo}..{hi} for shift {name!r}")
        if not getattr(shift, "continuous", False) and not isinstance(v, int):
            raise SeverityError(f"{where}: shift {name!r} takes whole severities {lo}..{hi}, got {label(v)}")
        out.append(v)
    return tuple(out)


def between(severity: Severity, n_levels: int) -> tuple[int, int, float]:
    """``(i, j, t)``: severity sits a fraction ``t`` of the way from level ``i`` to level ``j`` (0-based
    indices into a table of ``n_levels``, severity 1 = index 0); ``t == 0`` and ``i == j`` when whole."""
    if isinstance(severity, int) or float(severity).is_integer():
        i = int(severity) - 1
        return i, i, 0.0
    i = int(math.floor(severity)) - 1
    if not 0 <= i < n_levels - 1:
        raise SeverityError(f"severity {severity!r} is outside 1..{n_levels}")
    return i, i + 1, float(severity) - math.floor(severity)


def _mix(a: Any, b: Any, t: float, integer: Any) -> Any:
    if isinstance(a, (tuple, list)):
        rules = integer if isinstance(integer, (tuple, list)) else [integer] * len(a)
        return type(a)(_mix(x, y, t, r) for x, y, r in zip(a, b, rules))
    if isinstance(a, numbers.Integral) and isinstance(b, numbers.Integral) and integer != "float":
        if integer == "round":  # the nearer level's value; the midpoint takes the later one
            return int(b) if t >= 0.5 else int(a)
        if integer == "lerp-round":  # linear, then rounded half up
            return int(math.floor(a + t * (b - a) + 0.5))
        raise ValueError(f"unknown integer rule {integer!r}")
    return float(a) + t * (float(b) - float(a))


def interpolate(table: Sequence[Any], severity: Severity, integer: Any = "lerp-round") -> Any:
    """The entry of ``table`` (level 1..n) at ``severity``: exact at whole severities; between them each
    number linear from one level to the next, whole-number entries by ``integer``:

    - ``"lerp-round"``: linear, then rounded half up (a radius 10 -> 15 passes 11, 12, ...);
    - ``"round"``: the nearer level's value, the later one from the midpoint on;
    - ``"float"``: left as the linear float (a parameter written as a whole number but meaning a real one).

    For a table of tuples, ``integer`` may be a tuple of rules, one per position.

    >>> interpolate((0.08, 0.12, 0.18), 1.5)
    0.1
    >>> interpolate(((10, 3), (15, 5)), 1.5), interpolate(((10, 3), (15, 5)), 2)
    ((13, 4), (15, 5))
    >>> interpolate(((10, 3), (15, 6)), 1.5, integer=("round", "float"))
    (15, 4.5)
    """
    i, j, t = between(severity, len(table))
    if i == j:
        return table[i]
    return _mix(table[i], table[j], t, integer)
