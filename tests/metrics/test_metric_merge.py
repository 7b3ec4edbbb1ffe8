"""Mergeable metric state: for every registered metric, the states of the parts of any split of the data,
merged in data order (any grouping, empty parts included), compute exactly what one pass computes."""

from __future__ import annotations

import json
import math
from typing import Any, Callable

import numpy as np
import pytest

from shiftbench.errors import ShiftbenchError
from shiftbench.metrics import OrderedMerge
from shiftbench.metrics.base import exact_add, exact_value
from shiftbench.metrics.detection import RLEMasks, coco_evaluate
from shiftbench.models.features import Features
from shiftbench.registry import METRICS
from shiftbench.results.codec import decode_state, encode_state

N_ITEMS = 23  # per fixture: enough for splits with several non-empty and empty parts


# -- fixtures: per metric, a factory, the data as a list of items, and how a batch of items updates ----
def _classification(seed: int) -> list[tuple[np.ndarray, int]]:
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2, (N_ITEMS, 12))
    logits[3] = logits[4]  # equal rows: ties in confidence and in rank
    return [(logits[i], int(rng.integers(0, 12))) for i in range(N_ITEMS)]


def _feed_classification(metric, items) -> None:
    metric.update(np.stack([x for x, _ in items]), np.array([y for _, y in items]))


def _label_maps(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(N_ITEMS):
        target = rng.integers(0, 5, (9, 7))
        target[rng.random((9, 7)) < 0.1] = 255
        out.append((rng.integers(0, 5, (9, 7)), target))
    return out


def _foreground(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.random((8, 10)), rng.random((8, 10)) < 0.4) for _ in range(N_ITEMS)]


def _feed_pairs(metric, items) -> None:
    metric.update([p for p, _ in items], [t for _, t in items])


def _detections(seed: int, masks: bool) -> list[tuple[dict, dict]]:
    rng = np.random.default_rng(seed)
    size = 40
    yy, xx = np.mgrid[:size, :size]
    items = []
    for _ in range(N_ITEMS):
        g, d = int(rng.integers(0, 5)), int(rng.integers(0, 8))
        gxy = rng.uniform(0, 25, (g, 2))
        gt_boxes = np.concatenate([gxy, np.minimum(gxy + rng.uniform(2, 20, (g, 2)), size)], 1)
        src = rng.integers(0, max(g, 1), d)
        dxy = rng.uniform(0, 25, (d, 2))
        dt_boxes = np.concatenate([dxy, np.minimum(dxy + rng.uniform(2, 20, (d, 2)), size)], 1)
        if g:  # most detections near a ground-truth box: true positives at varied IoU
            near = rng.random(d) < 0.7
            dt_boxes[near] = np.clip(gt_boxes[src[near]] + rng.normal(0, 1.5, (int(near.sum()), 4)), 0, size)
            dt_boxes[:, 2:] = np.maximum(dt_boxes[:, 2:], dt_boxes[:, :2] + 1)
        target = {"boxes": gt_boxes, "labels": rng.integers(0, 3, g), "iscrowd": rng.random(g) < 0.15}
        # scores from a small set: ties across images, decided by image order as in one pass
        det = {"boxes": dt_boxes, "scores": rng.choice([0.2, 0.5, 0.9], d), "labels": rng.integers(0, 3, d)}
        if masks:
            for item, boxes in ((target, gt_boxes), (det, dt_boxes)):
                item["masks"] = np.stack([((xx - (b[0] + b[2]) / 2) / max((b[2] - b[0]) / 2, 1)) ** 2
                                          + ((yy - (b[1] + b[3]) / 2) / max((b[3] - b[1]) / 2, 1)) ** 2 <= 1
                                          for b in boxes]) if len(boxes) else np.zeros((0, size, size), bool)
        items.append((det, target))
    return items


def _captions(seed: int) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    words = ["a", "dog", "cat", "on", "the", "grass", "red", "car", "photo", "of"]
    return [(" ".join(rng.choice(words, 5)), " ".join(rng.choice(words, 4))) for _ in range(N_ITEMS)]


def _char_encoder(texts):
    """A deterministic, row-by-row text encoder (letter counts): the metric, not a model, is under test."""
    return np.array([[t.count(c) + 0.1 * i for i, c in enumerate("abcdefghijklmnopqrstuvwxyz ")] for t in texts])


def _ranks(seed: int) -> list[tuple[int, int | None]]:
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(1, 80)), None if rng.random() < 0.3 else int(rng.integers(1, 5)))
            for _ in range(N_ITEMS)]


def _feed_ranks(metric, items) -> None:
    metric.update({"ranks": [r for r, _ in items], "subset_ranks": [s for _, s in items]})


class _FakeFeatures:
    """A feature network computed image by image (no batch effects): the metric is under test."""

    def features(self, images):
        x = np.stack([np.asarray(im, np.float64) for im in images])
        pooled = x.reshape(len(x), 4, 2, 4, 2, 3).mean(axis=(2, 4))  # (N, 4, 4, 3)
        return Features(layers=[pooled.transpose(0, 3, 1, 2)], embedding=x.reshape(len(x), -1)[:, ::7])


class _FakeClip:
    """Image and text embeddings of one size (16), item by item."""

    def encode_images(self, images):
        return np.stack([np.asarray(im, np.float64).reshape(-1)[:16] for im in images])

    def encode_texts(self, texts):
        return np.array([[t.count(c) + 1.0 for c in "abcdefghilmnorst"] for t in texts])


FEATURES, CLIP = _FakeFeatures(), _FakeClip()  # one network each: parts of one metric share it


def _images(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 256, (8, 8, 3)).astype(np.uint8), rng.integers(0, 256, (8, 8, 3)).astype(np.uint8))
            for _ in range(N_ITEMS)]


def _edits(seed: int) -> list[tuple[np.ndarray, tuple[np.ndarray, str, str]]]:
    rng = np.random.default_rng(seed)
    words = ["red car", "blue car", "wooden chair", "metal chair", "striped cat"]
    return [(edit, (src, str(rng.choice(words)), str(rng.choice(words)))) for edit, src in _images(seed)]


def _feed_edits(metric, items) -> None:
    metric.update([e for e, _ in items], ([s for _, (s, _, _) in items], [a for _, (_, a, _) in items],
                                          [b for _, (_, _, b) in items]))


def _cue_items(seed: int) -> list:
    """Scores over 1000 classes and a cue-conflict target each (conflict, texture alone, silhouette alone)."""
    from shiftbench.metrics.shape_bias import CueTarget

    rng = np.random.default_rng(seed)
    classes = [7, 291, 340, 386, 948]
    items = []
    for _ in range(N_ITEMS):
        cue = str(rng.choice(["conflict", "texture", "silhouette"]))
        scores = rng.normal(0, 1, 1000)
        scores[int(rng.choice(classes))] += 10.0
        items.append((scores, CueTarget(cue, 340 if cue != "texture" else -1, 291 if cue != "silhouette" else -1,
                                        classes)))
    return items


def _sequences(seed: int) -> list[tuple[np.ndarray, tuple[int, str, int]]]:
    """Perturbation sequences (metrics/stability.py): (T, C) scores each, with (frames, reference, step); two
    frame counts and both references, so a batch groups sequences of several kinds."""
    rng = np.random.default_rng(seed)
    items = []
    for i in range(N_ITEMS):
        t, reference, step = ((31, "first", 1), (41, "previous", 2), (31, "previous", 1))[i % 3]
        scores = rng.integers(0, 4, (t, 9)).astype(np.float64)  # few levels: ties and flips
        items.append((scores, (t, reference, step)))
    return items


def _feed_sequences(metric, items) -> None:
    if items:
        metric.update(np.concatenate([x for x, _ in items]), [t for _, t in items])


def _answered(seed: int) -> list[tuple[Any, None]]:
    """Question-answering records (tasks/question_answering.py): a score and an unmatched share per sample (yes/no
    questions give shares, the others 0 or 1)."""
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    return [(SimpleNamespace(score=float(rng.integers(0, 4)) / 3, unmatched_share=float(rng.integers(0, 2))), None)
            for _ in range(N_ITEMS)]


def _feed_answered(metric, items) -> None:
    metric.update([x for x, _ in items], None)


FIXTURES: dict[str, tuple[Callable[[], Any], Callable[[int], list], Callable]] = {
    "top1": (lambda: METRICS.create("top1"), _classification, _feed_classification),
    "top5": (lambda: METRICS.create("top5"), _classification, _feed_classification),
    "ece": (lambda: METRICS.create("ece"), _classification, _feed_classification),
    "miou": (lambda: METRICS.create("miou", num_classes=5), _label_maps, _feed_pairs),
    "foreground_iou": (lambda: METRICS.create("foreground_iou"), _foreground, _feed_pairs),
    "box_ap": (lambda: METRICS.create("box_ap"), lambda s: _detections(s, False), _feed_pairs),
    "mask_ap": (lambda: METRICS.create("mask_ap"), lambda s: _detections(s, True), _feed_pairs),
    "text_similarity": (lambda: METRICS.create("text_similarity", encoder=_char_encoder), _captions, _feed_pairs),
    "recall": (lambda: METRICS.create("recall"), _ranks, _feed_ranks),
    "recall_subset": (lambda: METRICS.create("recall_subset"), _ranks, _feed_ranks),
    "rank": (lambda: METRICS.create("rank"), _ranks, _feed_ranks),
    "lpips": (lambda: METRICS.create("lpips", features=FEATURES), _images, _feed_pairs),
    "dino_distance": (lambda: METRICS.create("dino_distance", features=FEATURES), _images, _feed_pairs),
    "fid": (lambda: METRICS.create("fid", features=FEATURES), _images, _feed_pairs),
    "clip_direction": (lambda: METRICS.create("clip_direction", clip=CLIP), _edits, _feed_edits),
    "flip_prob": (lambda: METRICS.create("flip_prob"), _sequences, _feed_sequences),
    "answer_accuracy": (lambda: METRICS.create("answer_accuracy"), _answered, _feed_answered),
    "unmatched_rate": (lambda: METRICS.create("unmatched_rate"), _answered, _feed_answered),
    "t5d": (lambda: METRICS.create("t5d"), _sequences, _feed_sequences),
    "shape_bias": (lambda: METRICS.create("shape_bias"), _cue_items,
                   lambda m, it: m.update(np.stack([x for x, _ in it]), [t for _, t in it])),
}
# the metrics the runner saves in the store: their states must survive JSON
STORED = {"top1", "top5", "ece", "miou", "foreground_iou", "box_ap", "mask_ap", "text_similarity", "shape_bias",
          "flip_prob", "t5d", "answer_accuracy", "unmatched_rate"}
# metrics whose state is a sum: the order of the parts does not matter either
COMMUTATIVE = {"top1", "top5", "ece", "miou", "foreground_iou", "text_similarity"}


def test_every_registered_metric_has_a_merge_fixture():
    assert set(METRICS.names()) == set(FIXTURES)


def _same(a: dict, b: dict) -> bool:
    """Equal values, bit for bit (NaN equals NaN, None equals None)."""
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if x is None or y is None:
            if x is not y:
                return False
        elif not (x == y or (math.isnan(x) and math.isnan(y))):
            return False
    return True


def _cuts(rng, n: int, parts: int) -> list[tuple[int, int]]:
    """A random split of 0..n into ``parts`` consecutive ranges; equal cut points give empty parts."""
    points = sorted(rng.integers(0, n + 1, parts - 1).tolist())
    bounds = [0, *points, n]
    return list(zip(bounds[:-1], bounds[1:]))


def _part_states(name: str, items: list, cuts) -> list[Any]:
    make, _, feed = FIXTURES[name]
    states = []
    for lo, hi in cuts:
        metric = make()
        if hi > lo:  # an empty part never calls update: its state is a fresh metric's
            feed(metric, items[lo:hi])
        state = metric.state_dict()
        # what the store would give back (JSON), or private containers for metrics naming a feature network
        states.append(json.dumps(encode_state(state)) if name in STORED else {k: list(v) if isinstance(v, list) else v for k, v in state.items()})
    return states


def _load(name: str, template, state) -> Any:
    part = template.fresh()
    part.load_state_dict(decode_state(json.loads(state)) if name in STORED else {k: list(v) if isinstance(v, list) else v for k, v in state.items()})
    return part


def _tree_merge(parts: list, rng) -> Any:
    """Merge neighbouring parts in a random tree shape (order kept): any grouping of (a+b)+c vs a+(b+c)."""
    parts = list(parts)
    while len(parts) > 1:
        i = int(rng.integers(0, len(parts) - 1))
        parts[i:i + 2] = [parts[i].merge(parts[i + 1])]
    return parts[0]


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_merge_of_any_split_equals_one_pass(name):
    make, data, feed = FIXTURES[name]
    rng = np.random.default_rng(sorted(FIXTURES).index(name))
    items = data(7)
    one = make()
    feed(one, items)
    expected = one.compute()
    assert any(v is not None and not (isinstance(v, float) and math.isnan(v)) for v in expected.values())
    template = make()
    for trial in range(6):
        cuts = _cuts(rng, len(items), int(rng.integers(2, 7)))
        if trial == 0:
            cuts = [(0, 0), (0, len(items)), (len(items), len(items))]  # empty parts on both sides
        states = _part_states(name, items, cuts)
        left = _load(name, template, states[0])
        for state in states[1:]:  # ((a + b) + c) + ...
            left.merge(_load(name, template, state))
        right = _load(name, template, states[-1])
        for state in reversed(states[:-1]):  # a + (b + (c + ...))
            right = _load(name, template, state).merge(right)
        tree = _tree_merge([_load(name, template, s) for s in states], rng)
        for merged in (left, right, tree):
            assert merged.n == one.n
            assert _same(merged.compute(), expected), (name, cuts, merged.compute(), expected)
        assert merged.state() == one.state()
        if name in COMMUTATIVE:
            order = rng.permutation(len(states))
            shuffled = template.fresh()
            for i in order:
                shuffled.merge(_load(name, template, states[i]))
            assert _same(shuffled.compute(), expected), (name, order)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fresh_state_is_the_identity_and_merge_leaves_the_other_alone(name):
    make, data, feed = FIXTURES[name]
    items = data(3)
    whole = make()
    feed(whole, items)
    expected = whole.compute()
    for merged in (make().merge(whole), whole.fresh().merge(whole).merge(make())):
        assert _same(merged.compute(), expected)
    assert _same(whole.compute(), expected)  # merging whole into others did not change it
    again = make()
    feed(again, items[:5])
    before = again.compute()
    make().merge(again).merge(whole)
    assert _same(again.compute(), before)


def test_merging_different_metrics_or_settings_is_an_error():
    with pytest.raises(ShiftbenchError, match="cannot merge a Top5 state into 'top1'"):
        METRICS.create("top1").merge(METRICS.create("top5"))
    with pytest.raises(ShiftbenchError, match="n_bins: 15 and 10"):
        METRICS.create("ece").merge(METRICS.create("ece", n_bins=10))
    with pytest.raises(ShiftbenchError, match="num_classes: 5 and 6"):
        METRICS.create("miou", num_classes=5).merge(METRICS.create("miou", num_classes=6))


def test_ordered_merge_takes_parts_in_any_arrival_order_and_names_missing_ones():
    items = _detections(11, False)
    one = METRICS.create("box_ap")
    _feed_pairs(one, items)
    parts = []
    for lo, hi in ((0, 4), (4, 9), (9, 15), (15, N_ITEMS)):
        part = METRICS.create("box_ap")
        _feed_pairs(part, items[lo:hi])
        parts.append(part)
    merger = OrderedMerge(METRICS.create("box_ap"))
    for b in (2, 0, 3, 1):
        merger.add(b, parts[b])
    assert _same(merger.result(4).compute(), one.compute())
    partial = OrderedMerge(METRICS.create("box_ap"))
    partial.add(0, parts[0])
    partial.add(2, parts[2])
    with pytest.raises(ShiftbenchError, match=r"missing \[1, 3\]"):
        partial.result(4)
    with pytest.raises(ShiftbenchError, match="part 0 was merged already"):
        partial.add(0, parts[0])


def test_exact_sums_do_not_depend_on_grouping():
    rng = np.random.default_rng(0)
    values = (rng.random(500) * 10.0 ** rng.integers(-8, 8, 500)).tolist()
    reference = math.fsum(values)
    assert exact_value(exact_add([], values)) == reference
    for _ in range(5):
        cuts = _cuts(rng, len(values), 6)
        sums = [exact_add([], values[lo:hi]) for lo, hi in cuts]
        total: list[float] = []
        for s in reversed(sums):
            total = exact_add(s, total)
        assert exact_value(total) == reference


def test_mask_state_is_rle_and_small_and_scores_like_bool_masks():
    items = _detections(5, True)
    metric = METRICS.create("mask_ap")
    _feed_pairs(metric, items)
    state = json.loads(json.dumps(encode_state(metric.state_dict())))
    raw_bits = sum(np.asarray(t["masks"]).size + np.asarray(d["masks"]).size for d, t in items)
    rle_chars = sum(len(c) for record in state["_dt"] + state["_gt"] for c in record.get("masks", []))
    assert 0 < rle_chars < raw_bits / 8 / 4  # a quarter of the masks packed to bits, at most
    for record in metric._dt + metric._gt:
        assert all(isinstance(c, str) for c in record.get("masks", []))  # no mask array is kept
    reference = coco_evaluate([d for d, _ in items], [t for _, t in items], "segm")
    assert metric.compute() == {f"mask_{k}": (None if v == -1 else v) for k, v in reference.items()}
    masks = items[0][1]["masks"]
    rle = RLEMasks.encode(masks)
    assert np.array_equal(rle[np.arange(len(masks))], masks) and rle.areas.tolist() == masks.sum(axis=(1, 2)).tolist()
