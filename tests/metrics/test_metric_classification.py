"""Top-k accuracy and ECE against scikit-learn and a brute-force loop over bins."""

from __future__ import annotations

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.classification import ECE, Top1, Top5, expected_calibration_error, softmax, topk_accuracy


def _fixture(seed: int, n: int = 200, c: int = 12):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, n)
    logits = rng.normal(0, 2, (n, c))
    logits[np.arange(n), labels] += rng.normal(1.5, 1.5, n)  # better than chance, not perfect
    return logits, labels


@pytest.mark.parametrize("k", [1, 2, 5])
def test_topk_matches_sklearn(k):
    metrics = pytest.importorskip("sklearn.metrics")
    logits, labels = _fixture(k)
    ours = topk_accuracy(logits, labels, k)
    reference = metrics.top_k_accuracy_score(labels, logits, k=k, labels=np.arange(logits.shape[1]))
    assert ours == pytest.approx(reference, abs=1e-12)
    assert 0.2 < ours < 1.0


def test_top1_top5_accumulate_over_batches():
    logits, labels = _fixture(7)
    top1, top5 = sb.create_metric("top1"), sb.create_metric("top5")
    for i in range(0, len(labels), 64):
        top1.update(logits[i:i + 64], labels[i:i + 64])
        top5.update(logits[i:i + 64], labels[i:i + 64])
    assert top1.compute() == {"top1": pytest.approx((logits.argmax(1) == labels).mean())}
    assert top5.compute()["top5"] == pytest.approx(topk_accuracy(logits, labels, 5))
    assert top1.n == len(labels) and top1.higher_is_better and top1.task == "classification"
    top1.reset()
    assert np.isnan(top1.compute()["top1"])


def test_ties_are_decided_by_class_index():
    scores = np.zeros((2, 4))
    assert topk_accuracy(scores, np.array([0, 3]), 1) == 0.5  # class 0 ranks first among equals
    assert topk_accuracy(scores, np.array([3, 3]), 4) == 1.0


def _ece_brute_force(probs, labels, n_bins):
    conf = probs.max(1)
    correct = probs.argmax(1) == labels
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        inside = (conf > lo) & (conf <= hi) if b else (conf >= lo) & (conf <= hi)
        if inside.any():
            total += inside.mean() * abs(correct[inside].mean() - conf[inside].mean())
    return total


@pytest.mark.parametrize("n_bins", [1, 10, 15])
def test_ece_matches_brute_force(n_bins):
    logits, labels = _fixture(n_bins)
    probs = softmax(logits)
    reference = _ece_brute_force(probs, labels, n_bins)
    assert expected_calibration_error(probs, labels, n_bins) == pytest.approx(reference, abs=1e-12)
    metric = ECE(n_bins=n_bins)
    metric.update(logits[:77], labels[:77])
    metric.update(logits[77:], labels[77:])
    assert metric.compute()["ece"] == pytest.approx(reference, abs=1e-12)
    assert metric.higher_is_better is False


def test_ece_reliability_diagram_data():
    # confidences 0.95 and 0.65, accuracy 1.0 and 0.5: ECE = 0.5*0.05 + 0.5*0.15
    probs = np.array([[0.95, 0.05], [0.95, 0.05], [0.65, 0.35], [0.65, 0.35]])
    labels = np.array([0, 0, 0, 1])
    metric = ECE(n_bins=10, inputs="probabilities")
    metric.update(probs, labels)
    assert metric.compute()["ece"] == pytest.approx(0.1)
    state = metric.state()
    assert state["counts"][9] == 2 and state["counts"][6] == 2 and sum(state["counts"]) == 4
    assert state["accuracy"][9] == 1.0 and state["accuracy"][6] == 0.5
    assert state["confidence"][6] == pytest.approx(0.65) and state["accuracy"][0] is None
    assert len(state["edges"]) == 11


def test_bad_inputs_name_the_problem():
    with pytest.raises(ShiftbenchError, match="labels must lie"):
        Top1().update(np.zeros((2, 3)), np.array([0, 3]))
    with pytest.raises(ShiftbenchError, match="NaN"):
        Top5().update(np.full((1, 6), np.nan), np.array([0]))
    with pytest.raises(ShiftbenchError, match=r"\(N, C\)"):
        Top1().update(np.zeros(3), np.array([0, 1, 2]))
