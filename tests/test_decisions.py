"""Published ways to read ImageNet-1k outputs (shiftbench.decisions): class subsets from names, wnids and indices,
and the 16-class decision map of the shape-bias protocol against a direct computation on random probabilities."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shiftbench.decisions import (AGGREGATIONS, SUBSET_LISTS, ClassSubset, aggregate_log_probabilities, class_subset,
                                  geirhos16)
from shiftbench.errors import ShiftbenchError
from shiftbench.labelspace import LabelSpace

ROOT = Path(__file__).resolve().parents[1]
IMAGENET = LabelSpace.imagenet1k()

# the published lists (Geirhos et al.; model-vs-human's human_categories.py), a few written out here as the oracle
KNOWN_GROUPS = {"airplane": [404], "bear": [294, 295, 296, 297], "bicycle": [444, 671], "knife": [499], "oven": [766],
                "cat": [281, 282, 283, 284, 285, 286], "elephant": [385, 386], "keyboard": [508, 878],
                "truck": [555, 569, 656, 675, 717, 734, 864, 867], "clock": [409, 530, 892], "car": [436, 511, 817]}


# -- class subsets ----------------------------------------------------------------------------------------
def test_shipped_lists_are_200_imagenet_classes_in_imagenet_order():
    for name in SUBSET_LISTS:
        subset = class_subset(name)
        slots = [IMAGENET.ids.index(w) for w in subset.wnids]
        assert subset.name == name and len(slots) == 200 == len(set(slots)) and slots == sorted(slots)
    r, a = class_subset("imagenet-r"), class_subset("imagenet-a")
    assert "n01443537" in r.wnids and "n01440764" not in r.wnids  # goldfish in, tench (index 0) out
    assert len(set(r.wnids) & set(a.wnids)) < 200  # two different lists


@pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="timm not installed")
def test_shipped_lists_are_those_timm_ships():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import imagenet_subsets
    finally:
        sys.path.pop(0)
    assert imagenet_subsets.main(["--check"]) == 0


def test_wnids_and_indices_give_one_subset_in_imagenet_order():
    by_index = class_subset([340, 1, 999])
    by_wnid = class_subset([IMAGENET.ids[999], IMAGENET.ids[340], IMAGENET.ids[1]])
    mixed = class_subset([IMAGENET.ids[1], 999, 340])
    assert by_index == by_wnid == mixed and by_index.wnids == tuple(IMAGENET.ids[i] for i in (1, 340, 999))
    assert by_index.name is None and by_index.as_dict() == {"name": None, "wnids": list(by_index.wnids)}
    space = by_index.space()
    assert space.ids == by_index.wnids and space.class_names[1] == IMAGENET.class_names[340]
    # a list equal to a shipped one is that list (one run, however it is written)
    indices = [IMAGENET.ids.index(w) for w in class_subset("imagenet-a").wnids]
    assert class_subset(list(reversed(indices))) == class_subset("imagenet-a")


@pytest.mark.parametrize("value, needle", [
    ("imagenet-rr", "unknown class list 'imagenet-rr' (did you mean 'imagenet-r'?)"),
    ("imagenet_a", "(did you mean 'imagenet-a'?)"),
    ("cifar", "give imagenet-r or imagenet-a"),
    ([3], "at least two"),
    ({"a": 1}, "expected imagenet-r or imagenet-a"),
    ([1, 1000], "class_subset[1]: 1000 is neither an ImageNet-1k wnid"),
    ([1, "n99999999"], "class_subset[1]: 'n99999999' is neither"),
    ([1, "tench"], "class_subset[1]: 'tench' is neither"),
    ([1, True], "class_subset[1]: True is neither"),
    ([5, "n01443537", 1], "class_subset[2]: 1 is class n01443537 (goldfish), listed already at [1]"),
])
def test_bad_subsets_are_refused_in_one_line(value, needle):
    with pytest.raises(ShiftbenchError) as exc:
        class_subset(value)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


@given(st.lists(st.integers(0, 999), min_size=2, max_size=40, unique=True))
@settings(max_examples=60)
def test_any_index_list_is_those_classes(indices):
    subset = class_subset(indices)
    assert list(subset.wnids) == [IMAGENET.ids[i] for i in sorted(indices)]
    assert subset.columns(IMAGENET) == sorted(indices)
    assert isinstance(subset, ClassSubset) and subset.columns(LabelSpace.voc21()) is None


# -- the 16-class decision map -------------------------------------------------------------------------
def test_geirhos16_holds_the_published_categories():
    m = geirhos16()
    names = m.space.class_names
    assert names == tuple(sorted(names)) and len(names) == 16 and m.aggregation == "mean"
    for category, indices in KNOWN_GROUPS.items():
        assert list(m.groups[m.space.index(category)]) == indices
    flat = [i for g in m.groups for i in g]
    assert len(flat) == len(set(flat)) == 207  # no ImageNet class in two categories
    assert len(m.groups[m.space.index("dog")]) == 109 and len(m.groups[m.space.index("bird")]) == 49
    assert m.columns(IMAGENET) == m.groups and m.columns(LabelSpace.voc21()) is None
    assert m.as_dict()["categories"]["airplane"] == [404]


def reference_decision(probabilities: np.ndarray, groups, aggregation: str) -> tuple[np.ndarray, np.ndarray]:
    """The published rule, written directly: per category np.mean / np.max / np.sum of the probabilities at its
    indices; the decision the first category (in order) whose aggregate is strictly the highest."""
    agg = {"mean": np.mean, "max": np.max, "sum": np.sum}[aggregation]
    values = np.array([[agg(row[list(g)]) for g in groups] for row in probabilities])
    decisions = []
    for row in values:
        best, choice = -np.inf, None
        for k, v in enumerate(row):
            if v > best:
                best, choice = v, k
        decisions.append(choice)
    return values, np.array(decisions)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 6), scale=st.sampled_from([0.1, 1.0, 5.0, 30.0]),
       aggregation=st.sampled_from(AGGREGATIONS))
@settings(max_examples=80)
def test_aggregation_equals_a_direct_numpy_computation(seed, n, scale, aggregation):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, scale, size=(n, 1000))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    m = geirhos16(aggregation)
    scores = m.scores(logits)
    values, decisions = reference_decision(p, m.groups, aggregation)
    assert scores.shape == (n, 16)
    np.testing.assert_allclose(np.exp(scores), values, rtol=1e-9, atol=1e-300)
    ranked = np.sort(values, axis=1)
    clear = ranked[:, -1] > ranked[:, -2] * (1 + 1e-9)  # rows without a near-tie at the top
    np.testing.assert_array_equal(scores.argmax(axis=1)[clear], decisions[clear])


@given(seed=st.integers(0, 2**32 - 1), aggregation=st.sampled_from(AGGREGATIONS))
@settings(max_examples=30)
def test_aggregation_never_underflows_to_a_tie(seed, aggregation):
    # every category's classes 2,000 below an outside class: float64 probabilities would all be 0
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 1.0, size=(2, 1000))
    logits[:, 0] = 2000.0  # tench: in no category
    m = geirhos16(aggregation)
    scores = m.scores(logits)
    assert np.isfinite(scores).all()
    shifted = logits.copy()
    shifted[:, 0] = 0.0  # the same logits at the categories; the outside class no longer dominates
    assert (scores.argmax(axis=1) == m.scores(shifted).argmax(axis=1)).all()


def test_ties_go_to_the_first_category():
    logits = np.zeros((1, 1000))  # every probability equal: max aggregation ties all 16 categories
    assert geirhos16("max").scores(logits).argmax() == 0
    assert geirhos16("sum").scores(logits).argmax() == geirhos16().space.index("dog")  # the largest group


def test_bad_aggregation_is_refused_with_the_closest_name():
    with pytest.raises(ShiftbenchError, match=r"unknown 'meen' \(did you mean 'mean'\?\); choose from mean, max, sum"):
        geirhos16("meen")
    with pytest.raises(ShiftbenchError, match="logits must be"):
        aggregate_log_probabilities(np.zeros(5), [[0]])
    with pytest.raises(ShiftbenchError, match="NaN"):
        aggregate_log_probabilities(np.full((1, 3), np.nan), [[0]])
