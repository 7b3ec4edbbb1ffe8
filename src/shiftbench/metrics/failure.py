"""Failure points (issue 28): the severity at which a model's accuracy under a corruption falls to a
fraction of its clean accuracy (half by default), with a paired bootstrap interval.

The inputs are the per-image scores the store keeps (1/0 for a correct top-1, or a per-image score in
[0, 1]) of the same n images, in the same order, on clean and under each measured severity. The curve is
the mean score per severity; the failure point reads it as a piecewise-linear function of severity with
clean accuracy at severity 0:

* target = ``fraction * mean(clean)``;
* the point is the FIRST measured severity ``s_j`` whose accuracy is at or below the target, linearly
  interpolated (in severity) from the point before it: the last measured severity above the target,
  ``s_(j-1)``, or clean at severity 0 when ``s_j`` is the first measured severity. So it is the severity
  where that segment of the curve meets the target, ``s_prev + (a_prev - target) / (a_prev - a_j) x
  (s_j - s_prev)``, within ``[s_prev, s_j]``. A later recovery above the target does not move it.
* a curve that stays above the target at every measured severity never crosses: the point is None
  (report it as "> max severity").
* degenerate: when clean accuracy is 0 the target is 0 and the segment from clean can be flat at the
  target; the point is then severity 0 (accuracy is already at the target on clean).

``from_clean=False`` reads a curve on a scale whose 0 is a measured point of its own, not clean (ImageNet-C-bar's
level scale 0..10, where level 0 is the reference formulas' end point and not always the clean image): clean
gives only the target, the curve is the measured points alone (level 0 included when measured), and a curve
already at or below the target at its first measured point fails *at* that point (at or before it: nothing
lower was measured). Never a point between clean and a measured one, since clean sits at no point of that
scale.

The interval is a paired percentile bootstrap over images: each resample draws image indices once and
applies them to clean and every severity alike (so what the conditions share, the images' difficulty,
cancels), and the point is recomputed with the resample's own clean accuracy and target. A resample that
never crosses counts as +infinity, so ``high`` is inf when more than the upper tail of resamples never
cross (the upper bound lies beyond the measured range), and ``p_crossed`` says how many crossed. Numpy
only, seeded like :mod:`shiftbench.metrics.uncertainty` (the same inputs and seed give the same interval
on any machine), vectorised over resamples: the (B, k) curves are matrix-vector products of the draw
counts, and the crossings one pass of numpy over them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..seeds import check_seed
from .uncertainty import LEVEL, N_BOOT, check_bootstrap_args, resample_counts, weighted_sums

__all__ = ["FailurePoint", "failure_point", "failure_points", "FRACTION"]

FRACTION = 0.5


@dataclass(frozen=True)
class FailurePoint:
    """The failure point of one model under one corruption.

    ``severity``: where the curve falls to ``target`` (None when it never does within the measured range);
    ``low``/``high``: its bootstrap percentile interval, a resample that never crosses counted as +inf (so
    ``high``, or both, can be inf: beyond the measured range); ``crossed``: whether the curve crosses;
    ``p_crossed``: the share of resamples that cross; ``target``: ``fraction x clean``; ``clean``: clean
    accuracy; ``curve``: accuracy per measured severity, with its per-severity bootstrap band
    ``band_low``/``band_high`` (the same resamples); ``n``: images; ``fraction``: the fraction of clean.
    """

    severity: float | None
    low: float
    high: float
    crossed: bool
    p_crossed: float
    target: float
    clean: float
    curve: tuple[float, ...]
    band_low: tuple[float, ...]
    band_high: tuple[float, ...]
    n: int
    fraction: float


def _crossings(clean: np.ndarray, curves: np.ndarray, severities: np.ndarray, fraction: float,
               from_clean: bool = True) -> np.ndarray:
    """The failure point of each row: ``clean`` (B,) accuracies, ``curves`` (B, k) accuracies at
    ``severities`` (k,); +inf for a row that never reaches the target. The rule of the module docstring;
    ``from_clean`` False: the first segment starts at the first measured point, not at clean."""
    target = fraction * clean
    below = curves <= target[:, None]
    crossed = below.any(axis=1)
    j = np.argmax(below, axis=1)  # the first severity at/below the target (0 for a row that never is)
    rows = np.arange(curves.shape[0])
    if from_clean:
        acc = np.concatenate([clean[:, None], curves], axis=1)  # column 0: clean, at severity 0
        sev = np.concatenate([[0.0], severities])
        prev, cur = j, j + 1
    else:  # the measured points alone: a first point already at/below the target is the point (prev == cur)
        acc, sev = curves, severities
        prev, cur = np.maximum(j - 1, 0), j
    a_prev, a_cur = acc[rows, prev], acc[rows, cur]
    s_prev, s_cur = sev[prev], sev[cur]
    num = a_prev - target  # >= 0: a_prev is above the target (or clean, >= fraction x clean)
    den = a_prev - a_cur  # >= num; 0 when both ends sit at the target (clean accuracy 0) or prev is cur
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
    point = np.clip(s_prev + share * (s_cur - s_prev), s_prev, s_cur)  # no rounding past the segment
    return np.where(crossed, point, np.inf)


def _quantiles(values: np.ndarray, level: float) -> tuple[float, float]:
    """The linear-interpolation percentile interval (numpy's default, as ``uncertainty`` uses) of values
    that may hold +inf: a percentile that interpolates towards an inf is inf."""
    s = np.sort(values)
    alpha = (1.0 - level) / 2.0
    out = []
    for q in (alpha, 1.0 - alpha):
        pos = q * (s.size - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        a, b = float(s[lo]), float(s[hi])
        if a == b or hi == lo:
            out.append(a)
        elif math.isinf(b):
            out.append(math.inf)
        else:
            out.append(a + (pos - lo) * (b - a))
    return out[0], out[1]


def _scores(values: Any, name: str) -> np.ndarray:
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ShiftbenchError(f"failure_point: {name} must be a rectangular array of numbers ({exc})") from None
    if x.size and not np.all(np.isfinite(x)):
        raise ShiftbenchError(f"failure_point: {name} must be finite (got NaN or inf)")
    if x.size and (x.min() < 0 or x.max() > 1):
        raise ShiftbenchError(f"failure_point: {name} must be per-image scores in [0, 1] "
                              f"(got values in [{x.min():g}, {x.max():g}])")
    return x


def failure_point(severities: Sequence[float] | np.ndarray, clean: Sequence[float] | np.ndarray,
                  shifted: Sequence[Sequence[float]] | np.ndarray, fraction: float = FRACTION,
                  level: float = LEVEL, n_boot: int = N_BOOT, seed: int = 0, from_clean: bool = True) -> FailurePoint:
    """The severity at which accuracy falls to ``fraction`` of clean, with a paired bootstrap interval.

    ``severities``: the k measured severities, increasing (all above 0: clean is severity 0);
    ``clean``: the n images' scores on clean (0/1 or in [0, 1]); ``shifted`` (k, n): the same images, in
    the same order, under each severity. The point is the first measured severity at or below
    ``fraction x mean(clean)``, interpolated linearly in severity from the last measured severity above the
    target, or from clean accuracy at severity 0 when the first severity is already at/below it; None (and
    ``crossed`` False) when the curve stays above the target. See the module docstring for the interval.
    ``from_clean=False``: ``severities`` are points of a scale with a measured 0 of its own (C-bar's levels,
    0 allowed), clean is only the target's reference, and a curve already at/below the target at its first
    point fails at that point.

    Clean 0.8 (target 0.4), curve 0.7, 0.6, 0.45, 0.3, 0.2: crossed between 3 (0.45) and 4 (0.3), at
    3 + 0.05 / 0.15 = 3.333...

    >>> clean = [1] * 8 + [0] * 2
    >>> shifted = [[1] * m + [0] * (10 - m) for m in (7, 6, 5, 3, 2)]
    >>> fp = failure_point([1, 2, 3, 4, 5], clean, shifted, n_boot=200)
    >>> round(fp.severity, 4), fp.target, fp.crossed, fp.low <= fp.high
    (3.5, 0.4, True, True)
    >>> failure_point([1, 2], clean, [[1] * 7 + [0] * 3, [1] * 6 + [0] * 4], n_boot=200).severity is None
    True
    """
    return failure_points([(severities, clean, shifted, from_clean)], fraction, level, n_boot, seed)[0]


_GROUP_CELLS = 4_000_000  # the stacked scores of the curves sharing one pass over a draw (32 MB of float64)


def failure_points(curves: Sequence[tuple[Any, Any, Any, bool]], fraction: float = FRACTION, level: float = LEVEL,
                   n_boot: int = N_BOOT, seed: int = 0) -> list[FailurePoint]:
    """:func:`failure_point` of many curves, ``(severities, clean, shifted, from_clean)`` each, at once. Every
    curve's draw comes from ``seed`` alone, so the curves over the same number of images share one draw: it is
    made once and applied to all of them in one pass, and each result equals the curve's own :func:`failure_point`."""
    check_bootstrap_args(level, n_boot)
    seed = check_seed(seed)
    prepared = [_prepared(sev, clean, shifted, fraction, bool(from_clean)) for sev, clean, shifted, from_clean in curves]
    boots: list[np.ndarray] = [np.empty(0)] * len(prepared)
    groups = []  # curves over the same n images, at most _GROUP_CELLS values stacked (the draw is made per group)
    for n in sorted({x0.size for _, x0, _ in prepared}):
        group: list[int] = []
        for k in (k for k, (_, x0, _) in enumerate(prepared) if x0.size == n):
            if group and (len(group) + 1) * (1 + prepared[k][0].size) * n > _GROUP_CELLS:
                groups.append((n, group))
                group = []
            group.append(k)
        groups.append((n, group))
    for n, mine in groups:
        columns = np.ascontiguousarray(np.concatenate(
            [np.concatenate([prepared[k][1][None, :], prepared[k][2]], axis=0) for k in mine], axis=0))  # (sum(1 + k), n)
        sums = np.empty((int(n_boot), columns.shape[0]), np.float64)
        rng = np.random.Generator(np.random.PCG64(seed))
        start = 0
        for counts in resample_counts(n, int(n_boot), rng):
            sums[start:start + counts.shape[0]] = weighted_sums(counts, columns) / n
            start += counts.shape[0]
        at = 0
        for k in mine:
            width = 1 + prepared[k][0].size
            boots[k] = sums[:, at:at + width]
            at += width
    return [_point(*curve, b, float(fraction), level, bool(c[3])) for curve, b, c in zip(prepared, boots, curves)]


def _prepared(severities: Any, clean: Any, shifted: Any, fraction: Any,
              from_clean: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One curve's severities, clean scores and shifted scores, checked (one line naming what is wrong)."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.integer, np.floating)) \
            or not 0 < fraction < 1:
        raise ShiftbenchError(f"failure_point: fraction must be in (0, 1), got {fraction!r}")
    try:
        sev = np.asarray(severities, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ShiftbenchError(f"failure_point: severities must be numbers ({exc})") from None
    if sev.ndim != 1 or sev.size < 1:
        raise ShiftbenchError(f"failure_point: severities must be a sequence of at least 1 severity, "
                              f"got shape {sev.shape}")
    if not np.all(np.isfinite(sev)):
        raise ShiftbenchError("failure_point: severities must be finite (got NaN or inf)")
    if from_clean and sev[0] <= 0:
        raise ShiftbenchError(f"failure_point: severities must be above 0 (clean is severity 0), got {sev[0]:g}")
    if np.any(np.diff(sev) <= 0):
        raise ShiftbenchError(f"failure_point: severities must be strictly increasing, got {sev.tolist()}")
    x0 = _scores(clean, "clean")
    xs = _scores(shifted, "shifted")
    if x0.ndim != 1:
        raise ShiftbenchError(f"failure_point: clean must be one score per image (n,), got shape {x0.shape}")
    if xs.ndim != 2 or xs.shape != (sev.size, x0.size):
        raise ShiftbenchError(f"failure_point: shifted must have shape (severities, images) = "
                              f"({sev.size}, {x0.size}), got {xs.shape}")
    n = int(x0.size)
    if n < 2:
        raise ShiftbenchError(f"failure_point: needs at least 2 images to bootstrap, got {n}")
    return sev, x0, xs


def _point(sev: np.ndarray, x0: np.ndarray, xs: np.ndarray, boots: np.ndarray, fraction: float, level: float,
           from_clean: bool) -> FailurePoint:
    """A curve's failure point from its resampled (clean, severities) means ``boots`` (n_boot, 1 + k)."""
    n = int(x0.size)
    clean_acc = float(x0.mean())
    curve = xs.mean(axis=1)
    point = float(_crossings(np.array([clean_acc]), curve[None, :], sev, fraction, from_clean)[0])
    points = _crossings(boots[:, 0], boots[:, 1:], sev, fraction, from_clean)
    low, high = _quantiles(points, level)
    alpha = (1.0 - level) / 2.0
    band = np.quantile(boots[:, 1:], [alpha, 1.0 - alpha], axis=0)
    crossed = math.isfinite(point)
    return FailurePoint(severity=point if crossed else None, low=low, high=high, crossed=crossed,
                        p_crossed=float(np.mean(np.isfinite(points))), target=fraction * clean_acc,
                        clean=clean_acc, curve=tuple(float(v) for v in curve),
                        band_low=tuple(float(v) for v in band[0]), band_high=tuple(float(v) for v in band[1]),
                        n=n, fraction=fraction)
