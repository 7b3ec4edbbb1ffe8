"""How sure a number is: seeded bootstrap confidence intervals, paired differences and McNemar's test.

The report (issue 15) shows every score with its sample count and a 95% interval, and marks a change
against clean (or between two models on the same images) that lies within noise. These functions take
the per-sample values the store keeps (1/0 for a correct top-1, a per-image IoU, a rank hit) and are
pure numpy: seeded (the same inputs and seed give the same interval on any machine) and chunked, so
50,000 samples x 2,000 resamples never hold a 10^8 index matrix.

Sign convention: a paired difference is ``b - a`` ("shifted minus clean" when ``a`` is clean).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError

__all__ = ["bootstrap_ci", "paired_bootstrap", "mcnemar", "PairedDifference", "McNemar", "within_noise"]

N_BOOT = 2000
LEVEL = 0.95
_CHUNK_CELLS = 4_000_000  # resample indices drawn at most this many at a time (32 MB of int64)


def _values(values: Any, name: str) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ShiftbenchError(f"{name}: no samples to bootstrap")
    if not np.all(np.isfinite(x)):
        raise ShiftbenchError(f"{name}: values must be finite (got NaN or inf)")
    return x


def _check(level: float, n_boot: int) -> None:
    if not 0 < level < 1:
        raise ShiftbenchError(f"level must be in (0, 1), got {level!r}")
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ShiftbenchError(f"n_boot must be a positive integer, got {n_boot!r}")


def _boot_means(x: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    """Means of ``n_boot`` resamples (with replacement, size n) of ``x``, from one seeded generator."""
    rng = np.random.Generator(np.random.PCG64(seed))
    n = x.size
    out = np.empty(n_boot, np.float64)
    step = max(1, _CHUNK_CELLS // n)
    for start in range(0, n_boot, step):
        stop = min(n_boot, start + step)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = x[idx].mean(axis=1)
    return out


def _interval(boots: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(boots, [alpha, 1.0 - alpha])
    return float(low), float(high)


def bootstrap_ci(values: Sequence[float] | np.ndarray, level: float = LEVEL, n_boot: int = N_BOOT,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (per-sample scores).

    >>> bootstrap_ci([1, 1, 1, 1])
    (1.0, 1.0)
    """
    _check(level, n_boot)
    x = _values(values, "bootstrap_ci")
    return _interval(_boot_means(x, int(n_boot), seed), level)


@dataclass(frozen=True)
class PairedDifference:
    """``mean(b) - mean(a)`` on the same samples, its bootstrap interval and a two-sided bootstrap p-value."""

    diff: float
    low: float
    high: float
    p_value: float
    n: int

    @property
    def within_noise(self) -> bool:
        """True when the interval holds 0: the change cannot be told from resampling noise at this level."""
        return within_noise(self.low, self.high)


def paired_bootstrap(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, level: float = LEVEL,
                     n_boot: int = N_BOOT, seed: int = 0) -> PairedDifference:
    """Paired bootstrap of ``b - a`` over the same samples (resampled together, so what the two share,
    the images' difficulty, cancels). The p-value is twice the smaller tail of the resampled differences
    at 0 (at most 1)."""
    _check(level, n_boot)
    x, y = _values(a, "paired_bootstrap a"), _values(b, "paired_bootstrap b")
    if x.size != y.size:
        raise ShiftbenchError(f"paired_bootstrap: a has {x.size} samples and b has {y.size}; pairs need the same samples")
    d = y - x
    boots = _boot_means(d, int(n_boot), seed)
    low, high = _interval(boots, level)
    if np.all(d == 0):
        p = 1.0
    else:
        p = min(1.0, 2.0 * min(float(np.mean(boots <= 0)), float(np.mean(boots >= 0))))
    return PairedDifference(float(d.mean()), low, high, p, int(d.size))


@dataclass(frozen=True)
class McNemar:
    """Exact McNemar test on paired right/wrong outcomes: ``a_only`` samples right under a alone,
    ``b_only`` right under b alone; ``p_value`` two-sided (binomial, p = 1/2, on the discordant pairs)."""

    a_only: int
    b_only: int
    p_value: float
    n: int


def mcnemar(a_correct: Sequence[bool] | np.ndarray, b_correct: Sequence[bool] | np.ndarray) -> McNemar:
    """Exact two-sided McNemar test of two classifiers' (or conditions') correctness on the same samples."""
    a = np.asarray(a_correct).reshape(-1)
    b = np.asarray(b_correct).reshape(-1)
    if a.size != b.size:
        raise ShiftbenchError(f"mcnemar: {a.size} and {b.size} outcomes; pairs need the same samples")
    for name, v in (("a_correct", a), ("b_correct", b)):
        if v.dtype != bool and not np.isin(v, (0, 1)).all():
            raise ShiftbenchError(f"mcnemar: {name} must be right/wrong (bool or 0/1)")
    a, b = a.astype(bool), b.astype(bool)
    a_only, b_only = int(np.sum(a & ~b)), int(np.sum(~a & b))
    return McNemar(a_only, b_only, _binomial_two_sided(min(a_only, b_only), a_only + b_only), int(a.size))


def _binomial_two_sided(k: int, n: int) -> float:
    """P(X <= k) * 2 for X ~ Binomial(n, 1/2) with k <= n/2 (the distribution is symmetric), at most 1.
    Summed in log space so n in the hundreds of thousands neither overflows nor underflows."""
    if n == 0:
        return 1.0
    ks = np.arange(0, k + 1, dtype=np.float64)
    logs = (math.lgamma(n + 1) - np.array([math.lgamma(i + 1) + math.lgamma(n - i + 1) for i in ks])
            - n * math.log(2.0))
    top = logs.max()
    tail = math.exp(top) * float(np.exp(logs - top).sum())
    return min(1.0, 2.0 * tail)


def within_noise(low: float, high: float) -> bool:
    """True when an interval of a change holds 0."""
    return low <= 0.0 <= high
