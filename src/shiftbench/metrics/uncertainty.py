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
from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import ShiftbenchError
from .classification import bin_index

__all__ = ["bootstrap_ci", "bootstrap_mean", "paired_bootstrap", "mcnemar", "PairedDifference", "McNemar", "within_noise",
           "sample_statistic", "sample_statistic_batch", "SampleStatistic", "draw_counts", "resample_counts",
           "percentile_interval", "bootstrap_p_value", "ChangeTest", "bootstrap_test", "mcnemar_test", "alpha_of",
           "MCNEMAR_TEST", "BOOTSTRAP_TEST", "check_bootstrap_args", "weighted_sums", "wilson_interval",
           "clopper_pearson_interval", "proportion_interval", "adjust_p_values", "corrected_alpha", "detectable_from_se",
           "detectable_mcnemar", "WILSON", "CLOPPER_PEARSON", "CORRECTIONS", "POWER"]

N_BOOT = 2000
LEVEL = 0.95
_CHUNK_CELLS = 262_144  # resample indices drawn at most this many at a time (2 MB of int64: stays in cache;
# how a draw is cut into chunks changes none of its values, the one generator draws them in order)


def _values(values: Any, name: str) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ShiftbenchError(f"{name}: no samples to bootstrap")
    if not np.all(np.isfinite(x)):
        raise ShiftbenchError(f"{name}: values must be finite (got NaN or inf)")
    return x


def check_bootstrap_args(level: float, n_boot: int) -> None:
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
    check_bootstrap_args(level, n_boot)
    x = _values(values, "bootstrap_ci")
    return _interval(_boot_means(x, int(n_boot), seed), level)


def bootstrap_mean(values: Sequence[float | None] | np.ndarray, seed: int = 0, n_boot: int = N_BOOT,
                   level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, low, high): :func:`bootstrap_ci` with the mean, over the values that are not None
    (NaN, NaN, NaN when none is).

    >>> bootstrap_mean([None, 2.0, 2.0])
    (2.0, 2.0, 2.0)
    """
    kept = np.asarray([v for v in values if v is not None], dtype=np.float64)
    if kept.size == 0:
        return float("nan"), float("nan"), float("nan")
    return (float(kept.mean()), *bootstrap_ci(kept, level=level, n_boot=n_boot, seed=seed))


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
    at 0 (at most 1) and the interval that test's own (:func:`bootstrap_test`): it holds 0 exactly when
    p >= 1 - level."""
    check_bootstrap_args(level, n_boot)
    x, y = _values(a, "paired_bootstrap a"), _values(b, "paired_bootstrap b")
    if x.size != y.size:
        raise ShiftbenchError(f"paired_bootstrap: a has {x.size} samples and b has {y.size}; pairs need the same samples")
    d = y - x
    test = bootstrap_test(_boot_means(d, int(n_boot), seed), level)  # the interval and p of one test
    p = 1.0 if np.all(d == 0) else test.p_value
    return PairedDifference(float(d.mean()), test.low, test.high, p, int(d.size))


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


# --- one test per change (issue 27): the p-value, the ≈ mark and the change's interval from the same test ---

MCNEMAR_TEST = "exact McNemar"
BOOTSTRAP_TEST = "paired bootstrap"


@dataclass(frozen=True)
class ChangeTest:
    """The one test of a paired change: its name (``MCNEMAR_TEST`` or ``BOOTSTRAP_TEST``), its two-sided
    p-value, that test's own interval at the level asked for, and ``noise``: p >= 1 - level. The interval
    holds 0 exactly when ``noise`` is True, so the ≈ mark, the p-value and the interval never disagree."""

    test: str
    p_value: float
    low: float
    high: float
    noise: bool


def alpha_of(level: float) -> float:
    """The test's threshold for an interval level: 0.05 for 0.95 (rounded, so 1 - 0.95 is not 0.05000000000000004).

    >>> alpha_of(0.95)
    0.05
    """
    return round(1.0 - float(level), 12)


def bootstrap_test(boots: np.ndarray, level: float = LEVEL) -> ChangeTest | None:
    """The paired bootstrap test of a change from its resampled values (undefined, NaN, resamples left out):
    p = twice the smaller share of resamples on either side of 0 (at most 1; :func:`bootstrap_p_value`), and
    the interval ``[s_r, s_(B+1-r)]`` of the sorted resamples with r = ceil(B x alpha / 2): rank by rank the
    dual of p, so it holds 0 exactly when p >= alpha. None if no resample is defined.

    >>> t = bootstrap_test(np.array([-1.0] * 30 + [1.0] * 970))
    >>> t.p_value, t.low, t.high, t.noise
    (0.06, -1.0, 1.0, True)
    """
    finite = np.sort(boots[np.isfinite(boots)])
    if finite.size == 0:
        return None
    alpha = alpha_of(level)
    count = finite.size
    rank = max(1, math.ceil(round(alpha / 2.0 * count, 9)))  # rounded: 0.025 x 1000 is 25, not 25.000000000000004
    p = bootstrap_p_value(finite)
    return ChangeTest(BOOTSTRAP_TEST, p, float(finite[rank - 1]), float(finite[count - rank]), p >= alpha)


def mcnemar_test(a_correct: Sequence[bool] | np.ndarray, b_correct: Sequence[bool] | np.ndarray,
                 level: float = LEVEL) -> ChangeTest:
    """Exact McNemar test of ``b - a`` on paired right/wrong outcomes, with its own interval: the exact
    (Clopper-Pearson) interval of the share of discordant pairs that favour b, at ``b_only`` of
    ``m = a_only + b_only``, mapped to the change in accuracy as ``m / n x (2 pi - 1)``. Both invert the same
    binomial tails at pi = 1/2, so the interval holds 0 exactly when p >= alpha (the boundary is pinned
    against rounding). n = 8 with 4 samples right only under a: change -0.5, p = 0.125, interval [-0.5, +0.102]
    (a paired bootstrap on the same 8 pairs would give about [-0.88, -0.12], excluding 0).

    >>> t = mcnemar_test([1, 1, 1, 1, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0, 1, 1])
    >>> t.test, t.p_value, round(t.low, 3), round(t.high, 3), t.noise
    ('exact McNemar', 0.125, -0.5, 0.102, True)
    """
    from scipy.special import betaincinv  # only here: the rest of this module is numpy alone

    r = mcnemar(a_correct, b_correct)
    alpha = alpha_of(level)
    m, wins = r.a_only + r.b_only, r.b_only
    noise = r.p_value >= alpha
    if m == 0:
        return ChangeTest(MCNEMAR_TEST, r.p_value, 0.0, 0.0, noise)
    pi_low = 0.0 if wins == 0 else float(betaincinv(wins, m - wins + 1, alpha / 2.0))
    pi_high = 1.0 if wins == m else float(betaincinv(wins + 1, m - wins, 1.0 - alpha / 2.0))
    share = m / r.n
    low, high = share * (2.0 * pi_low - 1.0), share * (2.0 * pi_high - 1.0)
    if noise:  # 1/2 lies in the exact interval: rounding must not move an end across 0
        low, high = min(low, 0.0), max(high, 0.0)
    elif low <= 0.0 <= high:  # and the other way round (p and the ends are computed apart)
        if wins > r.a_only:
            low = math.ulp(0.0)
        else:
            high = -math.ulp(0.0)
    return ChangeTest(MCNEMAR_TEST, r.p_value, low, high, noise)


# --- statistics of per-sample values (issue 15): the store's `kind`s, vectorised over resamples -------------
#
# A resample is expressed as a weight matrix W (B, n): W[b, i] = how many times row i was drawn in
# resample b (0 for a row absent from a condition). Every kind is then one or two matrix products with
# W, so 1,000 resamples cost a BLAS call instead of a Python loop, and rows that a condition lacks simply
# weigh 0 (conditions of one run pair up by sample id, and a sample skipped under one is absent there).

KINDS = ("mean", "ratio", "iou", "ece:B")


def _parse_kind(kind: str) -> tuple[str, int]:
    if kind in ("mean", "ratio", "iou"):
        return kind, 0
    if isinstance(kind, str) and kind.startswith("ece:"):
        try:
            bins = int(kind[4:])
        except ValueError:
            bins = 0
        if bins >= 1:
            return "ece", bins
    raise ShiftbenchError(f"unknown per-sample statistic kind {kind!r}; expected one of mean, ratio, iou, ece:B "
                          f"(B = number of bins, e.g. ece:15)")


def _kind_values(kind: str, values: Any) -> np.ndarray:
    """``values`` as float64 in the shape ``kind`` needs, checked (a wrong shape names the kind and shape)."""
    name, _ = _parse_kind(kind)
    v = np.asarray(values, dtype=np.float64)
    expected = {"mean": "(n,)", "ratio": "(n, 2)", "iou": "(n, 2, C)", "ece": "(n, 2)"}[name]
    ok = {"mean": v.ndim == 1, "ratio": v.ndim == 2 and v.shape[1:] == (2,),
          "iou": v.ndim == 3 and v.shape[1] == 2, "ece": v.ndim == 2 and v.shape[1:] == (2,)}[name]
    if not ok:
        raise ShiftbenchError(f"per-sample values of kind {kind!r} must have shape {expected}, got {v.shape}")
    if v.shape[0] == 0:
        raise ShiftbenchError(f"per-sample values of kind {kind!r}: no samples")
    if not np.all(np.isfinite(v)):
        raise ShiftbenchError(f"per-sample values of kind {kind!r} must be finite (got NaN or inf)")
    return v


class SampleStatistic:
    """One condition's per-sample values reduced to the columns a weight matrix multiplies.

    ``SampleStatistic(kind, values)(weights)`` gives the statistic under each row of ``weights`` (B, n):
    ``weights[b, i]`` is how often row i was drawn in resample b. All-ones weights give the stored value.
    """

    __slots__ = ("name", "columns", "classes", "order", "starts", "signed")

    def __init__(self, kind: str, values: Any):
        self.name, bins = _parse_kind(kind)
        v = _kind_values(kind, values)
        if self.name == "mean":
            self.columns = v[:, None]
        elif self.name == "ratio":
            self.columns = v
        elif self.name == "iou":
            # intersections then unions, side by side; a class no row has (union 0 everywhere) can never
            # count, so it is left out up front
            seen = v[:, 1, :].sum(axis=0) > 0
            self.classes = int(seen.sum())
            self.columns = np.concatenate([v[:, 0, seen], v[:, 1, seen]], axis=1)
        else:
            # ECE = sum over bins |sum(correct - confidence)| / N: the rows sorted by bin, each occupied bin's
            # signed (correct - confidence) one segment, its sum one product over that segment of the weights'
            # columns (about two passes over the weights in all, not one per bin; nothing n x bins is held)
            confidence, correct = v[:, 0], v[:, 1]
            index = bin_index(confidence, bins)
            self.order = np.argsort(index, kind="stable")
            self.starts = np.flatnonzero(np.r_[True, np.diff(index[self.order]) != 0, True])  # segment bounds
            self.signed = np.ascontiguousarray((correct - confidence)[self.order])
            self.columns = np.empty((0, v.shape[0]), np.float64)  # no product column: the segments are summed
            return
        self.columns = np.ascontiguousarray(self.columns.T)  # (k, n): one contiguous vector per product

    def __call__(self, weights: np.ndarray) -> np.ndarray:
        """The statistic under each row of ``weights`` (B, n): (B,) floats; NaN where it is undefined
        (a resample that drew none of this condition's rows, a ratio over a zero denominator)."""
        if self.name == "ece":
            with np.errstate(invalid="ignore", divide="ignore"):
                if not self.signed.size:
                    return np.full(weights.shape[0], np.nan)
                ordered = np.take(weights, self.order, axis=1)
                per_bin = np.empty((weights.shape[0], self.starts.size - 1), np.float64)
                for k in range(self.starts.size - 1):
                    a, b = self.starts[k], self.starts[k + 1]
                    per_bin[:, k] = ordered[:, a:b] @ self.signed[a:b]
                return np.abs(per_bin).sum(axis=1) / weights.sum(axis=1)
        sums = weighted_sums(weights, self.columns)
        with np.errstate(invalid="ignore", divide="ignore"):
            if self.name == "mean":
                return sums[:, 0] / weights.sum(axis=1)
            if self.name == "ratio":
                return sums[:, 0] / sums[:, 1]
            if self.name == "iou":
                inter, union = sums[:, :self.classes], sums[:, self.classes:]
                present = union > 0
                iou = np.where(present, inter / np.where(present, union, 1.0), 0.0)
                count = present.sum(axis=1)
                return np.where(count > 0, iou.sum(axis=1) / np.maximum(count, 1), np.nan)
            return np.abs(sums).sum(axis=1) / weights.sum(axis=1)


def weighted_sums(weights: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``weights @ columns.T`` as one matrix-vector product per column. A matrix-matrix product hands
    these small shapes to a multi-threaded BLAS, which on a busy machine is 30x slower and may sum in an
    order that depends on the thread count; a matrix-vector product stays on one thread."""
    out = np.empty((weights.shape[0], columns.shape[0]), np.float64)
    for k, column in enumerate(columns):
        out[:, k] = weights @ column
    return out


def draw_counts(index: np.ndarray, n: int) -> np.ndarray:
    """Draw counts (B, n) as float64 from resampled row positions (B, m): how often each row was drawn."""
    b = index.shape[0]
    flat = (np.arange(b, dtype=np.int64)[:, None] * n + index).reshape(-1)
    return np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)


def sample_statistic(kind: str, values: Any) -> float:
    """The stored value of a (condition, metric) recomputed from its per-sample values.

    ``kind`` is ``"mean"`` (values (n,)), ``"ratio"`` (values (n, 2): sum of numerators over sum of
    denominators), ``"iou"`` (values (n, 2, C): per-image intersection and union per class; mean over
    classes with a non-empty summed union of sum(I) / sum(U), the confusion-matrix mIoU) or ``"ece:B"``
    (values (n, 2): confidence and 1/0 correct; ECE with B equal-width bins).

    >>> sample_statistic("mean", [1.0, 0.0, 1.0, 1.0])
    0.75
    >>> sample_statistic("ratio", [[1, 4], [3, 4]])
    0.5
    """
    prepared = SampleStatistic(kind, values)
    return float(prepared(np.ones((1, prepared.columns.shape[1]), np.float64))[0])


def sample_statistic_batch(kind: str, values: Any, index: Any) -> np.ndarray:
    """The statistic of each resample: ``index`` (B, m) holds row positions of ``values`` (drawn with
    replacement); returns (B,) floats, ``out[b] == sample_statistic(kind, values[index[b]])``."""
    prepared = SampleStatistic(kind, values)
    n = prepared.columns.shape[1]
    idx = np.asarray(index)
    if idx.ndim != 2 or idx.dtype.kind not in "iu":
        raise ShiftbenchError(f"index must be an integer array (B, m) of row positions, got shape {idx.shape} "
                              f"and dtype {idx.dtype}")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ShiftbenchError(f"index holds positions outside 0..{n - 1}")
    out = np.empty(idx.shape[0], np.float64)
    step = max(1, _CHUNK_CELLS // max(n, idx.shape[1], 1))
    for start in range(0, idx.shape[0], step):
        part = idx[start:start + step].astype(np.int64)
        out[start:start + part.shape[0]] = prepared(draw_counts(part, n))
    return out


def resample_counts(n: int, n_boot: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Yield the draw counts (b, n) of ``n_boot`` resamples of n items (with replacement, size n), in
    chunks of at most ``_CHUNK_CELLS`` cells; the chunking does not change the draws (one generator)."""
    step = max(1, _CHUNK_CELLS // max(n, 1))
    for start in range(0, n_boot, step):
        rows = min(step, n_boot - start)
        yield draw_counts(rng.integers(0, n, size=(rows, n)), n)


def percentile_interval(boots: np.ndarray, level: float = LEVEL) -> tuple[float, float] | None:
    """The percentile interval of resampled statistics, leaving out undefined (NaN) resamples; None if
    none is defined."""
    finite = boots[np.isfinite(boots)]
    if finite.size == 0:
        return None
    return _interval(finite, level)


def bootstrap_p_value(boots: np.ndarray) -> float | None:
    """Two-sided bootstrap p-value of a change being 0: twice the smaller tail of the resampled changes
    at 0, at most 1 (the rule of ``paired_bootstrap``); None if no resample is defined."""
    finite = boots[np.isfinite(boots)]
    if finite.size == 0:
        return None
    if np.all(finite == 0):
        return 1.0
    return min(1.0, 2.0 * min(float(np.mean(finite <= 0)), float(np.mean(finite >= 0))))


# --- intervals valid at 0% and 100%, multiplicity and the smallest detectable change (issue 39) --------------

WILSON = "Wilson score"
CLOPPER_PEARSON = "exact (Clopper-Pearson)"
CORRECTIONS = {"holm": "Holm", "bh": "Benjamini-Hochberg", "none": "none"}
POWER = 0.8


def _z(q: float) -> float:
    """The standard normal quantile at ``q`` (the standard library's, no scipy)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(q)


def _check_count(k: Any, n: Any, level: float) -> tuple[int, int]:
    if not 0 < level < 1:
        raise ShiftbenchError(f"level must be in (0, 1), got {level!r}")
    for name, v in (("k", k), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ShiftbenchError(f"proportion interval: {name} must be an integer count, got {v!r}")
    if n < 1 or not 0 <= k <= n:
        raise ShiftbenchError(f"proportion interval: need 0 <= k <= n and n >= 1, got k = {k}, n = {n}")
    return int(k), int(n)


def wilson_interval(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's score interval (1927) of k successes in n: the proportions p whose score test
    ``|k/n - p| / sqrt(p (1 - p) / n) <= z`` does not reject; never zero width, inside [0, 1].

    >>> [round(x, 4) for x in wilson_interval(0, 10)]
    [0.0, 0.2775]
    """
    k, n = _check_count(k, n, level)
    z = _z(1.0 - (1.0 - level) / 2.0)
    z2 = z * z
    centre = (k + z2 / 2.0) / (n + z2)
    half = z / (n + z2) * math.sqrt(k * (n - k) / n + z2 / 4.0)
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    return (0.0 if k == 0 else low), (1.0 if k == n else high)


def _binomial_cdf(log_choose: np.ndarray, k: int, n: int, p: float) -> float:
    """P(X <= k), X ~ Binomial(n, p), 0 < p < 1, summed in log space from the log coefficients."""
    i = np.arange(k + 1, dtype=np.float64)
    logs = log_choose[:k + 1] + i * math.log(p) + (n - i) * math.log1p(-p)
    top = logs.max()
    return min(1.0, math.exp(top) * float(np.exp(logs - top).sum()))


def clopper_pearson_interval(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Clopper-Pearson, 1934) interval of k successes in n: the p at which P(X >= k) and
    P(X <= k) are each (1 - level) / 2, found by bisection on the binomial tails (pure numpy; closed form at
    k = 0 and k = n). Its coverage is at least ``level`` at every true p; never zero width.

    >>> [round(x, 4) for x in clopper_pearson_interval(10, 10)]
    [0.6915, 1.0]
    """
    k, n = _check_count(k, n, level)
    tail = (1.0 - level) / 2.0
    i = np.arange(1, n + 1, dtype=np.float64)
    log_choose = np.concatenate([[0.0], np.cumsum(np.log((n - i + 1) / i))])  # log C(n, i), i = 0..n
    log_choose[n] = 0.0  # C(n, n) = 1 exactly (the running sum may drift by rounding)

    def root(f: Any) -> float:  # f increasing in p on (0, 1) with one sign change
        lo, hi = 0.0, 1.0
        for _ in range(200):
            mid = (lo + hi) / 2.0
            if mid in (lo, hi):
                break
            lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
        return (lo + hi) / 2.0

    low = 0.0 if k == 0 else (tail ** (1.0 / n) if k == n else
                              root(lambda p: (1.0 - _binomial_cdf(log_choose, k - 1, n, p)) - tail))
    high = 1.0 if k == n else (1.0 - tail ** (1.0 / n) if k == 0 else
                               root(lambda p: tail - _binomial_cdf(log_choose, k, n, p)))
    return low, high


def proportion_interval(k: int, n: int, level: float = LEVEL, method: str = "exact") -> tuple[float, float]:
    """The interval of a proportion, ``method`` ``"exact"`` (Clopper-Pearson) or ``"wilson"``."""
    if method == "exact":
        return clopper_pearson_interval(k, n, level)
    if method == "wilson":
        return wilson_interval(k, n, level)
    raise ShiftbenchError(f"unknown proportion interval {method!r}; expected exact or wilson")


def adjust_p_values(p_values: Sequence[float] | np.ndarray, method: str = "holm") -> np.ndarray:
    """p-values adjusted for a family of tests, in the given order: ``"holm"`` (Holm 1979, step-down: the
    i-th smallest times m - i + 1, made monotone, controls the family-wise error), ``"bh"`` (Benjamini and
    Hochberg 1995, step-up: the i-th smallest times m / i, made monotone from the top, controls the false
    discovery rate) or ``"none"``; capped at 1. A test is significant at alpha exactly when its adjusted
    p < alpha.

    >>> adjust_p_values([0.01, 0.04, 0.03], "holm").round(3).tolist()
    [0.03, 0.06, 0.06]
    >>> adjust_p_values([0.01, 0.04, 0.03], "bh").round(3).tolist()
    [0.03, 0.04, 0.04]
    """
    if method not in CORRECTIONS:
        raise ShiftbenchError(f"unknown multiplicity correction {method!r}; expected one of {', '.join(CORRECTIONS)}")
    p = np.asarray(p_values, dtype=np.float64).reshape(-1)
    if p.size and (not np.all(np.isfinite(p)) or p.min() < 0 or p.max() > 1):
        raise ShiftbenchError("adjust_p_values: p-values must lie in [0, 1]")
    m = p.size
    if method == "none" or m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    rank = np.arange(1, m + 1, dtype=np.float64)
    if method == "holm":
        adjusted = np.maximum.accumulate(np.minimum(1.0, (m - rank + 1) * ranked))
    else:
        adjusted = np.minimum.accumulate(np.minimum(1.0, m / rank * ranked)[::-1])[::-1]
    out = np.empty(m, np.float64)
    out[order] = adjusted
    return out


def corrected_alpha(alpha: float, m: int, method: str = "holm") -> float:
    """The most stringent per-test threshold of a family of m tests: alpha / m under Holm and under
    Benjamini-Hochberg (their first step), alpha without a correction."""
    if method not in CORRECTIONS:
        raise ShiftbenchError(f"unknown multiplicity correction {method!r}; expected one of {', '.join(CORRECTIONS)}")
    return alpha if method == "none" or m <= 1 else alpha / m


def detectable_from_se(se: float, alpha: float, power: float = POWER) -> float:
    """The smallest change a two-sided test at ``alpha`` finds with probability ``power`` when its estimate
    has standard error ``se``: (z_{1-alpha/2} + z_power) x se (for a mean of n paired differences with SD s,
    se = s / sqrt(n)).

    >>> round(detectable_from_se(0.01, 0.05), 4)
    0.028
    """
    return (_z(1.0 - alpha / 2.0) + _z(power)) * float(se)


def detectable_mcnemar(n: int, discordance: float, alpha: float, power: float = POWER) -> float:
    """The smallest change in accuracy McNemar's test (normal approximation, Connor 1987) finds with
    probability ``power`` at n pairs and a share ``discordance`` of discordant pairs: the delta solving
    ``sqrt(n) delta = z_{1-alpha/2} sqrt(psi) + z_power sqrt(psi - delta^2)``, with psi = max(discordance,
    delta) (a change of delta needs at least that share of discordant pairs).

    >>> round(detectable_mcnemar(1000, 0.2, 0.05), 4)
    0.0396
    """
    if n < 1 or not 0.0 <= discordance <= 1.0:
        raise ShiftbenchError(f"detectable_mcnemar: need n >= 1 and a discordance in [0, 1], got {n}, {discordance}")
    za, zb, root_n = _z(1.0 - alpha / 2.0), _z(power), math.sqrt(n)

    def found(delta: float) -> bool:  # the power at delta reaches ``power``
        psi = max(discordance, delta)
        spread = math.sqrt(max(psi - delta * delta, 0.0))
        return root_n * delta - za * math.sqrt(psi) >= zb * spread

    if not found(1.0):
        return math.inf  # too few pairs for any change to be seen with this power
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if found(mid) else (mid, hi)
    return hi
