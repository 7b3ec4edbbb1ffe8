"""Classification metrics: top-k accuracy and expected calibration error with reliability-diagram data.

>>> logits = np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
>>> topk_accuracy(logits, np.array([0, 2]), k=1), topk_accuracy(logits, np.array([0, 2]), k=2)
(0.5, 1.0)
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import ShiftbenchError
from .base import Metric, exact_add, exact_value

__all__ = ["topk_correct", "topk_accuracy", "softmax", "bin_index", "calibration_bins", "expected_calibration_error",
           "TopK", "Top1", "Top5", "ECE"]


def _check(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores)
    labels = np.asarray(labels)
    if scores.ndim != 2:
        raise ShiftbenchError(f"classification scores must be (N, C), got shape {scores.shape}")
    if labels.shape != (scores.shape[0],):
        raise ShiftbenchError(f"labels must be ({scores.shape[0]},) to match the scores, got shape {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= scores.shape[1]):
        raise ShiftbenchError(f"labels must lie in 0..{scores.shape[1] - 1}, got {labels.min()}..{labels.max()}")
    if scores.dtype.kind == "f" and not np.isfinite(scores).all():
        raise ShiftbenchError("classification scores contain NaN/inf")
    return scores, labels.astype(np.int64)


def topk_correct(scores: Any, labels: Any, k: int = 1) -> np.ndarray:
    """Bool (N,): the label is among the k highest scores. Equal scores rank the lower class index
    first (a stable descending sort), so ties are decided the same way on every run."""
    scores, labels = _check(scores, labels)
    if k < 1:
        raise ShiftbenchError(f"k must be >= 1, got {k}")
    target = scores[np.arange(len(labels)), labels][:, None]
    higher = (scores > target).sum(axis=1)
    tied_before = ((scores == target) & (np.arange(scores.shape[1])[None] < labels[:, None])).sum(axis=1)
    return (higher + tied_before) < k


def topk_accuracy(scores: Any, labels: Any, k: int = 1) -> float:
    """Fraction of samples whose label is in the top k (NaN for an empty batch)."""
    correct = topk_correct(scores, labels, k)
    return float(correct.mean()) if correct.size else float("nan")


def softmax(logits: Any) -> np.ndarray:
    """Row-wise softmax in float64."""
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=1, keepdims=True)


def bin_index(confidence: Any, n_bins: int) -> np.ndarray:
    """The equal-width bin of each confidence: ``(b/n, (b+1)/n]`` is bin b; 0 goes to the first bin."""
    confidence = np.asarray(confidence, dtype=np.float64).reshape(-1)
    return np.clip(np.ceil(confidence * n_bins).astype(np.int64) - 1, 0, n_bins - 1)


def calibration_bins(confidence: Any, correct: Any, n_bins: int = 15) -> dict[str, np.ndarray]:
    """Equal-width confidence bins over (0, 1]: counts, mean confidence and accuracy per bin.

    Bin b holds confidences in ``(b/n, (b+1)/n]`` (confidence 0 goes to the first bin), the usual
    convention of Guo et al. 2017.
    """
    confidence = np.asarray(confidence, dtype=np.float64).reshape(-1)
    correct = np.asarray(correct, dtype=np.float64).reshape(-1)
    if n_bins < 1:
        raise ShiftbenchError(f"n_bins must be >= 1, got {n_bins}")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    index = bin_index(confidence, n_bins)
    counts = np.bincount(index, minlength=n_bins).astype(np.float64)
    conf_sum = np.bincount(index, weights=confidence, minlength=n_bins)
    acc_sum = np.bincount(index, weights=correct, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"edges": edges, "counts": counts, "confidence": conf_sum / counts, "accuracy": acc_sum / counts,
                "confidence_sum": conf_sum, "accuracy_sum": acc_sum}


def expected_calibration_error(probabilities: Any, labels: Any, n_bins: int = 15) -> float:
    """ECE = sum_b |B_b|/N * |acc(B_b) - conf(B_b)| over equal-width bins of the top-1 confidence."""
    probabilities, labels = _check(probabilities, labels)
    if not len(labels):
        return float("nan")
    confidence = probabilities.max(axis=1)
    correct = probabilities.argmax(axis=1) == labels
    bins = calibration_bins(confidence, correct, n_bins)
    return float(np.abs(bins["accuracy_sum"] - bins["confidence_sum"]).sum() / len(labels))


class _ClassificationMetric(Metric):
    task = "classification"
    needs = "a class label (sample.label)"

    def sample_targets(self, samples: Sequence[Any]) -> np.ndarray:
        missing = next((s for s in samples if s.label is None), None)
        if missing is not None:
            raise ShiftbenchError(f"metric {self.name!r} needs a class label on every sample; sample "
                                  f"{str(missing.id)!r} has none")
        return np.asarray([s.label for s in samples], dtype=np.int64)


class TopK(_ClassificationMetric):
    """Top-k accuracy over all samples seen."""

    name = "topk"
    higher_is_better = True
    config = ("k",)

    def __init__(self, k: int = 1):
        self.k = int(k)
        super().__init__()

    def reset(self) -> None:
        self.n = 0
        self._correct = 0
        self._hits: list[int] = []  # 1/0 per sample, in data order (the report's bootstrap)

    def update(self, predictions: Any, targets: Any) -> None:
        correct = topk_correct(predictions, targets, self.k)
        self._correct += int(correct.sum())
        self._hits.extend(correct.astype(np.int64).tolist())
        self.n += int(correct.size)

    def merge(self, other: "TopK") -> "TopK":
        self.check_mergeable(other)
        self._correct += other._correct
        self._hits = self._hits + list(other._hits)
        self.n += other.n
        return self

    def per_sample(self) -> dict[str, tuple[str, np.ndarray]]:
        """``mean`` of the hits (1.0 when the label is in the top k)."""
        if not self.n or len(self._hits) != self.n:
            return {}
        return {self.name: ("mean", np.asarray(self._hits, dtype=np.float64))}

    def compute(self) -> dict[str, float]:
        return {self.name: self._correct / self.n if self.n else float("nan")}


class Top1(TopK):
    """Top-1 accuracy."""

    name = "top1"

    def __init__(self) -> None:
        super().__init__(k=1)


class Top5(TopK):
    """Top-5 accuracy."""

    name = "top5"

    def __init__(self) -> None:
        super().__init__(k=5)


class ECE(_ClassificationMetric):
    """Expected calibration error of the softmax top-1 confidence (equal-width bins, default 15).

    ``inputs="logits"`` (default) applies a softmax to the predictions; ``"probabilities"`` uses them as given.
    """

    name = "ece"
    higher_is_better = False
    config = ("n_bins", "inputs")

    def __init__(self, n_bins: int = 15, inputs: str = "logits"):
        if inputs not in ("logits", "probabilities"):
            raise ShiftbenchError(f"ece inputs must be 'logits' or 'probabilities', got {inputs!r}")
        if int(n_bins) < 1:
            raise ShiftbenchError(f"ece n_bins must be >= 1, got {n_bins}")
        self.n_bins = int(n_bins)
        self.inputs = inputs
        super().__init__()

    def reset(self) -> None:
        self.n = 0
        # counts and correct answers are whole numbers (exact in float64); the confidence sum of each
        # bin is an exact sum (base.exact_add), so a split run rounds exactly like one pass
        self._counts = np.zeros(self.n_bins)
        self._conf: list[list[float]] = [[] for _ in range(self.n_bins)]
        self._acc = np.zeros(self.n_bins)
        # per sample, in data order: top-1 confidence and whether the top-1 class is right
        self._confidence: list[float] = []
        self._right: list[int] = []

    def update(self, predictions: Any, targets: Any) -> None:
        scores, labels = _check(predictions, targets)
        probs = softmax(scores) if self.inputs == "logits" else scores.astype(np.float64)
        confidence = probs.max(axis=1)
        index = bin_index(confidence, self.n_bins)
        self._counts += np.bincount(index, minlength=self.n_bins)
        right = probs.argmax(axis=1) == labels
        self._acc += np.bincount(index, weights=right.astype(np.float64), minlength=self.n_bins)
        for b in np.unique(index).tolist():
            self._conf[b] = exact_add(self._conf[b], confidence[index == b].tolist())
        self._confidence.extend(confidence.tolist())
        self._right.extend(right.astype(np.int64).tolist())
        self.n += len(labels)

    def merge(self, other: "ECE") -> "ECE":
        self.check_mergeable(other)
        self._counts = self._counts + other._counts
        self._acc = self._acc + other._acc
        self._conf = [exact_add(a, b) for a, b in zip(self._conf, other._conf)]
        self._confidence = self._confidence + list(other._confidence)
        self._right = self._right + list(other._right)
        self.n += other.n
        return self

    def per_sample(self) -> dict[str, tuple[str, np.ndarray]]:
        """``ece:B``: (confidence, correct) per sample, binned like :func:`bin_index` with B bins."""
        if not self.n or len(self._confidence) != self.n or len(self._right) != self.n:
            return {}
        values = np.stack([np.asarray(self._confidence, np.float64), np.asarray(self._right, np.float64)], axis=1)
        return {self.name: (f"ece:{self.n_bins}", values)}

    def _confidence_sums(self) -> np.ndarray:
        return np.array([exact_value(p) for p in self._conf])

    def compute(self) -> dict[str, float]:
        if not self.n:
            return {self.name: float("nan")}
        return {self.name: float(np.abs(self._acc - self._confidence_sums()).sum() / self.n)}

    def state(self) -> dict[str, Any]:
        """Reliability-diagram data: bin edges, counts, mean confidence and accuracy (None when empty)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            conf = self._confidence_sums() / self._counts
            acc = self._acc / self._counts
        return {
            "edges": np.linspace(0, 1, self.n_bins + 1).tolist(),
            "counts": self._counts.astype(int).tolist(),
            "confidence": [None if np.isnan(c) else float(c) for c in conf],
            "accuracy": [None if np.isnan(a) else float(a) for a in acc],
        }
