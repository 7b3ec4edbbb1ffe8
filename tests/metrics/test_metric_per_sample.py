"""Per-sample values (issue 15, contract section 1): every metric with per-sample data gives records
whose statistic reproduces its row value, in data order, whatever split of the data (batches, shards,
workers) was merged, and through the JSON a saved batch goes through."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from shiftbench.engine.kernel import sample_records
from shiftbench.metrics.segmentation import confusion_matrix, mean_iou
from shiftbench.registry import METRICS
from shiftbench.results.codec import decode_state, encode_state
from sample_statistic import statistic

N = 37


def _classification(rng):
    logits = rng.normal(0, 2, (N, 9))
    logits[5] = logits[6]  # a tie
    return logits, rng.integers(0, 9, N)


def _char_encoder(texts):
    return np.array([[t.count(c) + 0.1 * i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz ")] for t in texts])


def _data(name: str, rng):
    """(metric factory, list of items, feed(metric, items))."""
    if name in ("top1", "top5", "ece"):
        logits, labels = _classification(rng)
        return (lambda: METRICS.create(name)), list(zip(logits, labels)), \
            lambda m, it: m.update(np.stack([x for x, _ in it]), np.array([y for _, y in it]))
    pairs = lambda m, it: m.update([p for p, _ in it], [t for _, t in it])  # noqa: E731
    if name == "miou":
        items = []
        for _ in range(N):  # few classes per image out of 40: the sparse state matters
            classes = rng.choice(40, 3, replace=False)
            target = classes[rng.integers(0, 3, (6, 5))]
            target[rng.random((6, 5)) < 0.1] = 255
            items.append((classes[rng.integers(0, 3, (6, 5))], target))
        return (lambda: METRICS.create("miou", num_classes=40)), items, pairs
    if name == "foreground_iou":
        items = [(rng.random((6, 7)), rng.random((6, 7)) < 0.3) for _ in range(N)]
        items[3] = (np.zeros((6, 7)), np.zeros((6, 7), bool))  # both empty: IoU 1
        return (lambda: METRICS.create("foreground_iou")), items, pairs
    if name == "text_similarity":
        words = ["a", "dog", "cat", "on", "the", "grass", "red", "car"]
        items = [(" ".join(rng.choice(words, 4)), " ".join(rng.choice(words, 3))) for _ in range(N)]
        return (lambda: METRICS.create("text_similarity", encoder=_char_encoder)), items, pairs
    items = [(int(rng.integers(1, 90)), None if rng.random() < 0.3 else int(rng.integers(1, 5))) for _ in range(N)]
    return (lambda: METRICS.create(name)), items, \
        lambda m, it: m.update({"ranks": [r for r, _ in it], "subset_ranks": [s for _, s in it]})


EXPECTED = {
    "top1": {"top1": "mean"}, "top5": {"top5": "mean"}, "ece": {"ece": "ece:15"}, "miou": {"miou": "iou"},
    "foreground_iou": {"foreground_iou": "mean"}, "text_similarity": {"text_similarity": "mean"},
    "recall": {"R@1": "mean", "R@5": "mean", "R@10": "mean", "R@50": "mean"},
    "recall_subset": {"R_subset@1": "mean", "R_subset@2": "mean", "R_subset@3": "mean"},
    "rank": {"mean_rank": "mean"},
}


def _merged(make, items, feed, cuts):
    """The metric merged from saved (JSON) states of the parts of a split, in data order."""
    total = make()
    for lo, hi in cuts:
        part = make()
        if hi > lo:
            feed(part, items[lo:hi])
        saved = json.loads(json.dumps(encode_state(part.state_dict())))
        total.merge_state(decode_state(saved))
    return total


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_statistic_of_the_per_sample_values_is_the_row_value_for_any_split(name, seed):
    rng = np.random.default_rng(seed)
    make, items, feed = _data(name, rng)
    one = make()
    feed(one, items)
    points = sorted(rng.integers(0, N + 1, 4).tolist())
    cuts = list(zip([0, *points], [*points, N]))  # five parts, some possibly empty
    merged = _merged(make, items, feed, cuts)
    rows, records = merged.compute(), merged.per_sample()
    assert {k: kind for k, (kind, _) in records.items()} == EXPECTED[name]
    ids = [f"s{i}" for i in range(N)]
    stored = sample_records(merged, ids)
    for key, (kind, values) in records.items():
        np.testing.assert_array_equal(values, one.per_sample()[key][1])  # data order, bit for bit
        assert values.dtype == np.float64 and len(values) == N
        kind_, kept_ids, kept = stored[key]
        assert math.isclose(statistic(kind_, kept), rows[key], rel_tol=0, abs_tol=1e-9), key
        if name == "recall_subset":  # queries without a subset are left out with their ids
            with_subset = [f"s{i}" for i, (_, s) in enumerate(items) if s is not None]
            assert kept_ids == with_subset and len(kept) == merged.n
        else:
            assert kept_ids == ids


def test_miou_per_image_values_sum_to_the_confusion_matrix():
    rng = np.random.default_rng(3)
    make, items, feed = _data("miou", rng)
    metric = make()
    feed(metric, items)
    _, values = metric.per_sample()["miou"]
    cm = sum(confusion_matrix(p, t, 40) for p, t in items)
    tp = np.diag(cm)
    np.testing.assert_array_equal(values[:, 0].sum(axis=0), tp)
    np.testing.assert_array_equal(values[:, 1].sum(axis=0), cm.sum(0) + cm.sum(1) - tp)
    assert statistic("iou", values) == pytest.approx(mean_iou(cm), abs=1e-12)
    # the saved state is sparse: per image only the classes present in it (3 of 40 at most)
    assert max(len(c) for c in metric.state_dict()["_img_classes"]) <= 6


def test_a_state_saved_before_per_sample_records_gives_none():
    """A batch saved by an older shiftbench (sums only) still merges and computes, but has no records:
    per_sample is empty rather than values that do not cover every sample."""
    rng = np.random.default_rng(4)
    for name in ("top1", "ece", "miou", "foreground_iou", "text_similarity", "recall"):
        make, items, feed = _data(name, rng)
        new, old = make(), make()
        feed(new, items[:10])
        feed(old, items[10:])
        legacy = {k: v for k, v in old.state_dict().items()
                  if k not in ("_hits", "_confidence", "_right", "_img_classes", "_img_inter", "_img_union",
                               "_ious", "_cosines", "_seen", "_unranked")}
        total = make().merge(new)
        total.merge_state(legacy)
        assert total.n == N and total.per_sample() == {}, name


def test_records_that_do_not_match_the_ids_are_not_stored(caplog):
    metric = METRICS.create("top1")
    metric.update(np.eye(3), np.arange(3))
    assert sample_records(metric, ["a", "b"], "here") == {}
    assert "3 per-sample values for 2 samples" in caplog.text
