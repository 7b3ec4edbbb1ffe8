"""Error consistency (Geirhos et al., NeurIPS 2020): Cohen's kappa of two models' per-sample right/wrong.

Two models' errors agree on a sample when both are right or both are wrong. Over n samples with accuracies
``p_a`` and ``p_b``, the observed consistency is ``c_obs`` (the share of samples where they agree) and the
consistency two independent models of those accuracies would show is ``c_exp = p_a p_b + (1 - p_a)(1 - p_b)``;
``kappa = (c_obs - c_exp) / (1 - c_exp)``: 0 for errors no more alike than chance, 1 for the same errors,
below 0 for errors that avoid each other. It is Cohen's kappa of the two 0/1 vectors
(``sklearn.metrics.cohen_kappa_score``). It is undefined when ``c_exp == 1``: both models right on every
sample, or both wrong on every one; it is then NaN with a reason, never a number.

In counts (n samples, ``a`` and ``b`` right, ``both`` right together) the formula reads
``kappa = 2 (n both - a b) / (a (n - b) + b (n - a))``, which holds for weighted counts too: the bootstrap
(:func:`kappa_matrix`) computes every resample's kappa from draw-count-weighted sums, with no Python loop
over resamples. Pure numpy, seeded: the same tally and seed give the same interval on any machine.

>>> k = error_kappa([1, 1, 0, 0], [1, 0, 0, 0])
>>> k.observed, k.expected, round(k.kappa, 4)
(0.75, 0.5, 0.5)
>>> error_kappa([1, 1], [1, 1]).reason
'both models are right on every sample: kappa is undefined (expected consistency 1)'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ShiftbenchError
from .uncertainty import LEVEL, check_bootstrap_args, percentile_interval, resample_counts, weighted_sums

__all__ = ["Kappa", "KappaInterval", "KappaMatrix", "ErrorTally", "error_kappa", "kappa_from_sums", "undefined_reason",
           "kappa_matrix", "bootstrap_kappa", "N_BOOT"]

N_BOOT = 1000  # the report's resamples, as its other intervals


@dataclass(frozen=True)
class Kappa:
    """Cohen's kappa of two right/wrong vectors: ``kappa`` (NaN when undefined, ``reason`` then says why),
    the observed and expected consistency and ``n`` samples."""

    kappa: float
    observed: float
    expected: float
    n: int
    reason: str | None = None


@dataclass(frozen=True)
class KappaInterval:
    """A pair's kappa with its percentile bootstrap interval (NaN when undefined), over ``n`` scored
    (condition, sample) pairs of ``units`` resampled sample ids; ``undefined``: resamples where kappa is
    undefined (left out of the interval); ``reason``: why the point is undefined, else None."""

    kappa: float
    low: float
    high: float
    observed: float
    expected: float
    n: int
    units: int
    undefined: int
    reason: str | None = None


def _right_wrong(values: Any, name: str) -> np.ndarray:
    x = np.asarray(values)
    if x.dtype == bool:
        return x
    if x.size and not np.all((x == 0) | (x == 1)):
        raise ShiftbenchError(f"{name}: right/wrong values must be 0 or 1 (or bool), got {np.unique(x)[:5].tolist()}")
    return x.astype(bool)


def kappa_from_sums(n: Any, right_a: Any, right_b: Any, both: Any) -> np.ndarray:
    """Kappa from (weighted) counts, elementwise: ``2 (n both - a b) / (a (n - b) + b (n - a))``; NaN where
    undefined (the denominator is 0: both all right or both all wrong, or n = 0).

    >>> kappa_from_sums(4, 2, 1, 1).tolist(), kappa_from_sums(3, 3, 3, 3).tolist()
    (0.5, nan)
    """
    n, a, b, ab = (np.asarray(v, np.float64) for v in (n, right_a, right_b, both))
    den = a * (n - b) + b * (n - a)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = 2.0 * (n * ab - a * b) / den
    return np.where(den > 0, out, np.nan)


def undefined_reason(n: float, right_a: float, right_b: float) -> str | None:
    """Why kappa is undefined for these counts (None when it is defined)."""
    if n <= 0:
        return "no sample scored by both models: kappa is undefined"
    if right_a == n and right_b == n:
        return "both models are right on every sample: kappa is undefined (expected consistency 1)"
    if right_a == 0 and right_b == 0:
        return "both models are wrong on every sample: kappa is undefined (expected consistency 1)"
    return None


def _consistency(n: float, a: float, b: float, ab: float) -> tuple[float, float]:
    if n <= 0:
        return math.nan, math.nan
    pa, pb = a / n, b / n
    return (n - a - b + 2 * ab) / n, pa * pb + (1 - pa) * (1 - pb)


def error_kappa(a: Any, b: Any) -> Kappa:
    """Cohen's kappa of two models' right/wrong vectors on the same samples (bool or 0/1, same length)."""
    x, y = _right_wrong(a, "error_kappa a").reshape(-1), _right_wrong(b, "error_kappa b").reshape(-1)
    if x.size != y.size:
        raise ShiftbenchError(f"error_kappa: a has {x.size} samples and b has {y.size}; kappa needs the same samples")
    n, ra, rb, ab = x.size, int(x.sum()), int(y.sum()), int((x & y).sum())
    observed, expected = _consistency(n, ra, rb, ab)
    return Kappa(float(kappa_from_sums(n, ra, rb, ab)), observed, expected, n, undefined_reason(n, ra, rb))


class ErrorTally:
    """Per-unit (sample id) counts for M models over any number of conditions: ``total`` (conditions each
    unit was scored under), ``right`` (M, units) and ``both`` (pairs, units), the pairs those of
    ``np.triu_indices(M, 1)``. A condition adds its right/wrong (M, m) at the units' positions ``at``, so a
    family's conditions pool into one tally whose resampling unit is the sample id."""

    def __init__(self, models: int, units: int):
        if models < 2:
            raise ShiftbenchError(f"error consistency needs at least 2 models, got {models}")
        self.models, self.units = int(models), int(units)
        self.pairs = np.triu_indices(self.models, 1)
        self.total = np.zeros(self.units, np.int32)  # counts of conditions: int32 holds any run
        self.right = np.zeros((self.models, self.units), np.int32)
        self.both = np.zeros((self.pairs[0].size, self.units), np.int32)

    def add(self, correct: Any, at: Any = None) -> None:
        """Add one condition: ``correct`` (M, m) right/wrong, ``at`` the m distinct unit positions (default
        0..m-1)."""
        c = _right_wrong(correct, "ErrorTally.add")
        if c.ndim != 2 or c.shape[0] != self.models:
            raise ShiftbenchError(f"ErrorTally.add: right/wrong of shape {c.shape}, expected ({self.models}, m)")
        pos = np.arange(c.shape[1]) if at is None else np.asarray(at, np.int64).reshape(-1)
        if pos.size != c.shape[1] or (pos.size and (pos.min() < 0 or pos.max() >= self.units)):
            raise ShiftbenchError(f"ErrorTally.add: {pos.size} positions for {c.shape[1]} samples, or outside "
                                  f"0..{self.units - 1}")
        if pos.size and np.bincount(pos, minlength=self.units).max() > 1:
            raise ShiftbenchError("ErrorTally.add: a unit appears twice in one condition")
        self.total[pos] += 1
        self.right[:, pos] += c
        start = 0
        for i in range(self.models - 1):  # one vectorised step per model: its pairs with every later model
            stop = start + self.models - 1 - i
            self.both[start:stop, pos] += c[i] & c[i + 1:]
            start = stop


@dataclass(frozen=True)
class KappaMatrix:
    """Kappa of every pair of M models (symmetric (M, M) arrays; NaN on the diagonal and where undefined),
    its percentile bootstrap interval ``low``/``high``, each model's ``accuracy``, ``n`` scored (condition,
    sample) pairs over ``units`` resampled sample ids, ``undefined`` resamples per pair and ``reasons``
    (``{(i, j): why}``, i < j, for the pairs whose point is undefined)."""

    kappa: np.ndarray
    low: np.ndarray
    high: np.ndarray
    observed: np.ndarray
    expected: np.ndarray
    accuracy: np.ndarray
    n: int
    units: int
    undefined: np.ndarray
    reasons: dict[tuple[int, int], str]

    def pair(self, i: int, j: int) -> KappaInterval:
        """Models i and j (either order)."""
        if i == j:
            raise ShiftbenchError("KappaMatrix.pair: a model with itself has no error consistency to report")
        i, j = min(i, j), max(i, j)
        return KappaInterval(float(self.kappa[i, j]), float(self.low[i, j]), float(self.high[i, j]),
                             float(self.observed[i, j]), float(self.expected[i, j]), self.n, self.units,
                             int(self.undefined[i, j]), self.reasons.get((i, j)))


def _symmetric(m: int, pairs: tuple[np.ndarray, np.ndarray], values: np.ndarray, fill: Any = np.nan) -> np.ndarray:
    """An (m, m) array with ``values`` at ``pairs`` and their mirror, ``fill`` elsewhere (the diagonal)."""
    out = np.full((m, m), fill, dtype=np.asarray(values).dtype)
    out[pairs] = values
    out[pairs[1], pairs[0]] = values
    return out


def kappa_matrix(tally: ErrorTally, n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0) -> KappaMatrix:
    """Every pair's kappa over the tally's pooled (condition, sample) pairs, with a percentile bootstrap
    interval: ``n_boot`` resamples of the sample ids (units never scored left out), drawn once from
    ``PCG64(seed)`` for every pair together, each resample's kappa from draw-count-weighted sums."""
    check_bootstrap_args(level, n_boot)
    keep = tally.total > 0
    # C order: each column one contiguous row for its matrix-vector product (3x faster than a strided one)
    columns = np.ascontiguousarray(np.vstack([tally.total[None, keep], tally.right[:, keep], tally.both[:, keep]]),
                                   dtype=np.float64)
    m, (pi, pj) = tally.models, tally.pairs
    sums = columns.sum(axis=1)
    n, right, both = sums[0], sums[1:1 + m], sums[1 + m:]
    point = kappa_from_sums(n, right[pi], right[pj], both)
    units = int(keep.sum())
    boots = np.empty((int(n_boot), pi.size), np.float64)
    if units:
        rng = np.random.Generator(np.random.PCG64(seed))
        done = 0
        for counts in resample_counts(units, int(n_boot), rng):
            s = weighted_sums(counts, columns)  # (b, 1 + M + pairs): exact, the sums are whole numbers
            boots[done:done + s.shape[0]] = kappa_from_sums(s[:, :1], s[:, 1 + pi], s[:, 1 + pj], s[:, 1 + m:])
            done += s.shape[0]
    else:
        boots[:] = np.nan
    low, high = np.full(pi.size, np.nan), np.full(pi.size, np.nan)
    for k in range(pi.size):
        found = percentile_interval(boots[:, k], level) if np.isfinite(point[k]) else None
        if found is not None:
            low[k], high[k] = found
    cons = [_consistency(n, right[i], right[j], b) for i, j, b in zip(pi, pj, both)]
    reasons = {(int(i), int(j)): r for i, j in zip(pi, pj)
               if (r := undefined_reason(n, right[i], right[j])) is not None}
    accuracy = right / n if n > 0 else np.full(m, np.nan)
    return KappaMatrix(_symmetric(m, tally.pairs, point), _symmetric(m, tally.pairs, low),
                       _symmetric(m, tally.pairs, high), _symmetric(m, tally.pairs, np.array([c[0] for c in cons])),
                       _symmetric(m, tally.pairs, np.array([c[1] for c in cons])), accuracy, int(n), units,
                       _symmetric(m, tally.pairs, (~np.isfinite(boots)).sum(axis=0), fill=0), reasons)


def bootstrap_kappa(a: Any, b: Any, n_boot: int = N_BOOT, level: float = LEVEL, seed: int = 0) -> KappaInterval:
    """Kappa of two right/wrong vectors on the same samples with its percentile bootstrap interval
    (:func:`kappa_matrix` of the one pair; the unit is the sample).

    >>> k = bootstrap_kappa([1, 1, 0, 0, 1, 0], [1, 1, 0, 1, 1, 0])
    >>> round(k.kappa, 4), k.low <= k.kappa <= k.high
    (0.6667, True)
    """
    x, y = _right_wrong(a, "bootstrap_kappa a").reshape(-1), _right_wrong(b, "bootstrap_kappa b").reshape(-1)
    if x.size != y.size:
        raise ShiftbenchError(f"bootstrap_kappa: a has {x.size} samples and b has {y.size}; kappa needs the same "
                              "samples")
    tally = ErrorTally(2, x.size)
    tally.add(np.stack([x, y]))
    return kappa_matrix(tally, n_boot, level, seed).pair(0, 1)
