"""Stability under perturbation sequences (ImageNet-P, Hendrycks and Dietterich, ICLR 2019).

A perturbation sequence (a ``p_*`` shift, shifts/perturbations) gives every image T frames; a classifier's
top-1 prediction on each frame is compared along the sequence:

- the *flip probability* of a sequence is the share of its compared frame pairs whose top-1 class differs;
  ``flip_prob`` (FP) is its mean over sequences;
- the *top-5 distance* of a pair (a, b): with the classes ranked by frame a's scores, sigma(r) the rank in
  frame b of a's r-th class, ``sum_{r=1..5} |(r - 1) - min(sigma(r) - 1, 5)|``; ``t5d`` is the mean over
  sequences of the mean over their pairs (the reference's unnormalised uT5D).

Which pairs (``comparison_pairs``): noise sequences compare every frame with the first (their frames are
independent draws around the clean image); the others each frame with the one ``step`` frames before it,
``step`` being the difficulty (1..3), in ``step`` interleaved chains: frames i, i+d, i+2d, ... for each
start i < d. Each sequence's value is the mean over its pairs, and FP is the mean over sequences, as the
reference's ``flip_prob`` and ``ranking_dist`` (hendrycks/robustness ImageNet-P/test.py) compute them.
The AlexNet-normalised FR and T5D, and their means mFR and mT5D, are formed in the report from these rows
(:func:`normalised`, :data:`ALEXNET_FP`, :data:`ALEXNET_T5D`).

Ties: classes with equal scores rank the lower class index first (a stable sort), as the reference's
``rankdata(-scores, method="ordinal")`` does; the top-1 of a frame is its rank-1 class. With fewer than five
classes the distance sums over the classes there are (r = 1..C).

>>> comparison_pairs(5, "previous", 2)
(array([0, 2, 1]), array([2, 4, 3]))
>>> sequence_flips(np.array([[3, 3, 4, 4, 3]]), "first", 1).tolist()
[0.5]
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

import numpy as np

from ..errors import ShiftbenchError
from .base import PerSampleMean

__all__ = ["sequence_of", "comparison_pairs", "sequence_flips", "sequence_top5_distance", "top5_distance", "FlipProbability",
           "Top5Distance", "ALEXNET_FP", "ALEXNET_T5D", "normalised", "REFERENCES", "STABILITY_METRICS"]

REFERENCES = ("first", "previous")
STABILITY_METRICS = ("flip_prob", "t5d")

# AlexNet's flip probabilities (%) and unnormalised top-5 distances on ImageNet-P, difficulty 1: the
# normalisers of FR and T5D (Hendrycks and Dietterich, appendix "ImageNet-P"; hendrycks/robustness,
# new_draft.pdf at commit de7653a, Appendix E). The last four are the validation perturbations.
ALEXNET_FP = {"p_gaussian_noise": 23.65, "p_shot_noise": 30.06, "p_motion_blur": 9.30, "p_zoom_blur": 5.94,
              "p_snow": 11.93, "p_brightness": 4.89, "p_translate": 11.01, "p_rotate": 13.10, "p_tilt": 7.05,
              "p_scale": 23.53, "p_speckle_noise": 18.65, "p_gaussian_blur": 2.78, "p_spatter": 5.05,
              "p_shear": 10.66}
ALEXNET_T5D = {"p_gaussian_noise": 4.77, "p_shot_noise": 5.76, "p_motion_blur": 1.93, "p_zoom_blur": 1.34,
               "p_snow": 2.42, "p_brightness": 1.19, "p_translate": 2.63, "p_rotate": 2.95, "p_tilt": 1.75,
               "p_scale": 4.48, "p_speckle_noise": 3.89, "p_gaussian_blur": 0.70, "p_spatter": 1.26,
               "p_shear": 2.48}


def normalised(metric: str, shift: str, value: float) -> float | None:
    """FR or T5D of a raw ``flip_prob`` (a fraction) or ``t5d`` value: 100 x value / AlexNet's, None for a
    shift AlexNet's figures do not cover."""
    if metric == "flip_prob":
        ref = ALEXNET_FP.get(shift)
        return None if ref is None else 100.0 * (100.0 * value) / ref
    if metric == "t5d":
        ref = ALEXNET_T5D.get(shift)
        return None if ref is None else 100.0 * value / ref
    raise ShiftbenchError(f"no AlexNet normaliser for metric {metric!r}; expected one of {', '.join(STABILITY_METRICS)}")


def comparison_pairs(frames: int, reference: str, step: int) -> tuple[np.ndarray, np.ndarray]:
    """The (earlier, later) frame indices a sequence of ``frames`` compares: with ``reference="first"`` each
    frame with the first of its chain, with ``"previous"`` each with the one ``step`` before it; chains
    start at 0..step-1, in the reference's order (chain by chain)."""
    if reference not in REFERENCES:
        raise ShiftbenchError(f"sequence reference must be one of {', '.join(REFERENCES)}, got {reference!r}")
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 1:
        raise ShiftbenchError(f"sequence step must be a positive integer, got {step!r}")
    if frames < step + 1:
        raise ShiftbenchError(f"a sequence of {frames} frames has no pair {step} frames apart")
    a: list[int] = []
    b: list[int] = []
    for start in range(int(step)):
        chain = list(range(start, frames, int(step)))
        a += [chain[0]] * (len(chain) - 1) if reference == "first" else chain[:-1]
        b += chain[1:]
    return np.asarray(a, np.int64), np.asarray(b, np.int64)


def sequence_flips(predictions: Any, reference: str, step: int) -> np.ndarray:
    """Per sequence, the share of compared pairs whose predictions differ: (N, T) class ids -> (N,) float64."""
    preds = np.asarray(predictions)
    if preds.ndim != 2:
        raise ShiftbenchError(f"sequence predictions must be (N, T), got shape {preds.shape}")
    a, b = comparison_pairs(preds.shape[1], reference, step)
    return (preds[:, a] != preds[:, b]).mean(axis=1)


def _orders(scores: np.ndarray) -> np.ndarray:
    """Classes by descending score per row, ties to the lower index (the reference's ordinal ranks)."""
    return np.argsort(-scores, axis=-1, kind="stable")


def top5_distance(scores_a: Any, scores_b: Any) -> np.ndarray:
    """The top-5 distance from frame a to frame b for each row of two (M, C) score arrays -> (M,) float64."""
    sa, sb = np.asarray(scores_a, np.float64), np.asarray(scores_b, np.float64)
    if sa.shape != sb.shape or sa.ndim != 2:
        raise ShiftbenchError(f"top-5 distance needs two (M, C) score arrays of one shape, got {sa.shape}, {sb.shape}")
    k = min(5, sa.shape[1])
    top_a = _orders(sa)[:, :k]
    rank_b = np.empty(sb.shape, np.int64)  # 0-based rank of each class in frame b
    order_b = _orders(sb)
    np.put_along_axis(rank_b, order_b, np.broadcast_to(np.arange(sb.shape[1]), sb.shape), axis=1)
    moved = np.minimum(np.take_along_axis(rank_b, top_a, axis=1), k)
    return np.abs(np.arange(k)[None, :] - moved).sum(axis=1).astype(np.float64)


def sequence_top5_distance(scores: Any, reference: str, step: int) -> np.ndarray:
    """Per sequence, the mean top-5 distance over its compared pairs: (N, T, C) scores -> (N,) float64."""
    s = np.asarray(scores)
    if s.ndim != 3:
        raise ShiftbenchError(f"sequence scores must be (N, T, C), got shape {s.shape}")
    n, t, c = s.shape
    a, b = comparison_pairs(t, reference, step)
    d = top5_distance(s[:, a].reshape(-1, c), s[:, b].reshape(-1, c))
    return d.reshape(n, a.size).mean(axis=1)


def sequence_of(sample: Any) -> tuple[int, str, int] | None:
    """(frames, reference, step) of a sample a ``p_*`` shift made (its ``meta["sequence"]``; the frames themselves
    may be on a device), None for any other sample."""
    seq = (getattr(sample, "meta", None) or {}).get("sequence")
    if not isinstance(seq, dict):
        return None
    frames = getattr(sample, "frames", None)
    count = int(seq.get("frames") or (frames.shape[0] if frames is not None else 0))
    return count, str(seq.get("reference")), int(seq.get("step", 1))


def _comparison(sample: Any) -> tuple[int, str, int]:
    found = sequence_of(sample)
    if found is None or found[0] < 2:
        raise ShiftbenchError(f"sample {str(getattr(sample, 'id', '?'))!r} is no perturbation sequence: stability "
                              "metrics score the frames of a p_* shift (shiftbench list shifts 'p_*')")
    return found


class _SequenceMetric(PerSampleMean):
    """A per-sequence mean over the frames a ``p_*`` shift made: the predictions are the (N x T, C) scores of
    the N sequences' frames in order, the targets each sample's (frames, reference, step)."""

    task: ClassVar[str] = "classification"
    higher_is_better: ClassVar[bool] = False
    sequence: ClassVar[bool] = True  # scores the conditions of sequence shifts only (engine/evaluate.py)
    needs: ClassVar[str] = "a perturbation sequence (the frames of a p_* shift)"

    def sample_targets(self, samples: Sequence[Any]) -> list[tuple[int, str, int]]:
        return [_comparison(s) for s in samples]

    def check_samples(self, samples: Sequence[Any]) -> None:
        """Nothing to ask of a read sample: the frames are what the condition's shift makes."""

    def _per_sequence(self, scores: np.ndarray, reference: str, step: int) -> np.ndarray:
        raise NotImplementedError

    def update(self, predictions: Any, targets: Any) -> None:
        scores = np.asarray(predictions)
        targets = list(targets)
        total = sum(t for t, _, _ in targets)
        if scores.ndim != 2 or scores.shape[0] != total:
            raise ShiftbenchError(f"metric {self.name!r}: expected ({total}, C) scores for {len(targets)} sequences "
                                  f"of {'+'.join(str(t) for t, _, _ in targets[:3])}{'...' if len(targets) > 3 else ''} "
                                  f"frames, got shape {scores.shape}")
        if scores.dtype.kind == "f" and not np.isfinite(scores).all():
            raise ShiftbenchError(f"metric {self.name!r}: scores contain NaN/inf")
        groups: dict[tuple[int, str, int], list[int]] = {}
        for i, key in enumerate(targets):
            groups.setdefault(key, []).append(i)
        out = np.empty(len(targets), np.float64)
        offsets = np.cumsum([0] + [t for t, _, _ in targets])
        for (t, reference, step), rows in groups.items():
            block = np.stack([scores[offsets[i]:offsets[i] + t] for i in rows])
            out[rows] = self._per_sequence(block, reference, step)
        self.add(out.tolist())  # per sequence, in data order


class FlipProbability(_SequenceMetric):
    """Flip probability (ImageNet-P FP): the share of compared frame pairs whose top-1 class differs, per sequence, averaged."""

    name = "flip_prob"

    def _per_sequence(self, scores: np.ndarray, reference: str, step: int) -> np.ndarray:
        top1 = _orders(scores)[..., 0] if scores.shape[-1] > 1 else np.zeros(scores.shape[:2], np.int64)
        return sequence_flips(top1, reference, step)


class Top5Distance(_SequenceMetric):
    """Top-5 distance (ImageNet-P uT5D): how far the top-5 ranking moves between compared frames, per sequence, averaged."""

    name = "t5d"

    def _per_sequence(self, scores: np.ndarray, reference: str, step: int) -> np.ndarray:
        return sequence_top5_distance(scores, reference, step)
