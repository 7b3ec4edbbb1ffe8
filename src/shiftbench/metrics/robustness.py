"""Robustness summaries: pure functions over stored clean and shifted values (no accumulation).

- ``absolute_drop(clean, shifted) = clean - shifted`` (sign flipped for lower-is-better metrics, so a
  positive drop always means "worse").
- ``relative_drop = (clean - shifted) / clean``; ``relative_robustness`` gamma ``= 1 - relative_drop``
  (composed-retrieval robustness, REFERENCE.md section 3).
- ImageNet-C (Hendrycks & Dietterich, ICLR 2019): corruption error ``CE_c = sum_s E_{s,c} / sum_s
  E^AlexNet_{s,c}`` (errors = 1 - top-1), mean CE over corruptions, and relative CE
  ``(sum_s E_{s,c} - E_clean) / (sum_s E^AlexNet_{s,c} - E^AlexNet_clean)``. Unnormalised versions
  (``normalize=False``) average the raw errors instead.

AlexNet constants: :data:`ALEXNET_ERRORS` are AlexNet's top-1 errors on ImageNet-C averaged over the
five severities (so ``sum_s E^AlexNet_{s,c} = 5 * value``), as published in the ImageNet-C reference
evaluation code (``hendrycks/robustness``, ``ImageNet-C/test.py``, "Raw AlexNet errors") and reused
verbatim by AugMix and other robustness repositories. :data:`ALEXNET_CLEAN_ERROR` is AlexNet's clean
ImageNet top-1 error, 43.5% in the ImageNet-C paper's tables (needed for relative mCE only).

>>> relative_robustness(0.80, 0.60)
0.75
>>> round(corruption_error([0.2] * 5, "brightness"), 6)
0.354238
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..errors import ShiftbenchError

__all__ = [
    "ALEXNET_ERRORS", "ALEXNET_CLEAN_ERROR", "IMAGENET_C_CORRUPTIONS", "absolute_drop", "relative_drop",
    "relative_robustness", "corruption_error", "mean_corruption_error", "relative_corruption_error",
    "relative_mean_corruption_error",
]

ALEXNET_ERRORS: dict[str, float] = {
    "gaussian_noise": 0.886428, "shot_noise": 0.894468, "impulse_noise": 0.922640,
    "defocus_blur": 0.819880, "glass_blur": 0.826268, "motion_blur": 0.785948, "zoom_blur": 0.798360,
    "snow": 0.866816, "frost": 0.826572, "fog": 0.819324, "brightness": 0.564592,
    "contrast": 0.853204, "elastic_transform": 0.646056, "pixelate": 0.717840, "jpeg_compression": 0.606500,
}
ALEXNET_CLEAN_ERROR = 0.435
IMAGENET_C_CORRUPTIONS = tuple(ALEXNET_ERRORS)


def _finite(value: float, what: str) -> float:
    value = float(value)
    if not np.isfinite(value):
        raise ShiftbenchError(f"{what} must be a finite number, got {value}")
    return value


def absolute_drop(clean: float, shifted: float, higher_is_better: bool = True) -> float:
    """How much worse the shifted value is (positive = worse)."""
    clean, shifted = _finite(clean, "clean value"), _finite(shifted, "shifted value")
    return clean - shifted if higher_is_better else shifted - clean


def relative_drop(clean: float, shifted: float, higher_is_better: bool = True) -> float:
    """Absolute drop divided by the clean value (NaN when the clean value is 0)."""
    clean = _finite(clean, "clean value")
    if clean == 0:
        return float("nan")
    return absolute_drop(clean, shifted, higher_is_better) / abs(clean)


def relative_robustness(clean: float, shifted: float) -> float:
    """gamma = 1 - (clean - shifted) / clean (1 = unaffected, 0 = everything lost)."""
    drop = relative_drop(clean, shifted, True)
    return 1.0 - drop if np.isfinite(drop) else float("nan")


def _errors(errors: Sequence[float], what: str) -> np.ndarray:
    e = np.asarray(errors, np.float64).reshape(-1)
    if not e.size:
        raise ShiftbenchError(f"{what}: need at least one severity's error")
    if not np.isfinite(e).all() or (e < 0).any() or (e > 1).any():
        raise ShiftbenchError(f"{what}: errors must be fractions in [0, 1] (error = 1 - top-1), got {e.tolist()}")
    return e


def _alexnet(corruption: str) -> float:
    if corruption not in ALEXNET_ERRORS:
        raise ShiftbenchError(
            f"no AlexNet ImageNet-C error for {corruption!r}; known: {', '.join(IMAGENET_C_CORRUPTIONS)}"
        )
    return ALEXNET_ERRORS[corruption]


def corruption_error(errors: Sequence[float], corruption: str | None = None, normalize: bool = True) -> float:
    """CE for one corruption from its per-severity errors (usually 5).

    Normalised: ``sum_s E_s / (n * alexnet)``, i.e. the mean error over AlexNet's mean error.
    Unnormalised (``normalize=False``): the mean error itself.
    """
    e = _errors(errors, f"corruption_error({corruption})")
    if not normalize:
        return float(e.mean())
    if corruption is None:
        raise ShiftbenchError("normalised corruption_error needs the corruption name")
    return float(e.sum() / (len(e) * _alexnet(corruption)))


def mean_corruption_error(errors: Mapping[str, Sequence[float]], normalize: bool = True) -> float:
    """mCE: the mean of the CEs over corruptions ({corruption: per-severity errors})."""
    if not errors:
        raise ShiftbenchError("mean_corruption_error needs at least one corruption")
    return float(np.mean([corruption_error(e, c, normalize) for c, e in errors.items()]))


def relative_corruption_error(errors: Sequence[float], clean_error: float, corruption: str | None = None,
                              normalize: bool = True, alexnet_clean_error: float = ALEXNET_CLEAN_ERROR) -> float:
    """Relative CE: the error added by the corruption, over AlexNet's added error (or raw when unnormalised)."""
    e = _errors(errors, f"relative_corruption_error({corruption})")
    clean = float(_errors([clean_error], "clean error")[0])
    added = float((e - clean).sum())
    if not normalize:
        return added / len(e)
    if corruption is None:
        raise ShiftbenchError("normalised relative_corruption_error needs the corruption name")
    return added / (len(e) * (_alexnet(corruption) - alexnet_clean_error))


def relative_mean_corruption_error(errors: Mapping[str, Sequence[float]], clean_error: float,
                                   normalize: bool = True,
                                   alexnet_clean_error: float = ALEXNET_CLEAN_ERROR) -> float:
    """Relative mCE: mean relative CE over corruptions."""
    if not errors:
        raise ShiftbenchError("relative_mean_corruption_error needs at least one corruption")
    return float(np.mean([relative_corruption_error(e, clean_error, c, normalize, alexnet_clean_error)
                          for c, e in errors.items()]))
