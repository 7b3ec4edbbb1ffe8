"""The CIRR-D keyword categoriser on hand-written texts and on objects-cir's own phrasings."""

from __future__ import annotations

import pytest

from shiftbench.datasets.objects_cir import ObjectsCIR
from shiftbench.errors import ShiftbenchError
from shiftbench.shifts.retrieval import categorise, primary_category

CASES = [
    ("two dogs instead of one", ["numerical"]),
    ("Show 3 cats on the sofa", ["numerical"]),
    ("the number of birds doubles", ["numerical"]),
    ("make the car red", ["attribute"]),
    ("a rounder, bigger table", ["attribute"]),  # "bigger" is a size word; "rounder" is not listed
    ("make it square and grey", ["attribute"]),
    ("remove the person on the left", ["removal"]),
    ("Removing the hat", ["removal"]),
    ("change the background to a beach", ["background"]),
    ("Remove the two dogs and make the background blue", ["numerical", "attribute", "removal", "background"]),
    ("the dog is now sitting", []),
    ("someone walks by the tenement", []),  # "ten" only as a whole word
    ("the redness fades", []),  # "red" only as a whole word
    ("", []),
]


@pytest.mark.parametrize("text,expected", CASES)
def test_hand_written_cases(text, expected):
    assert categorise(text) == expected


def test_primary_category_prefers_the_specific_family():
    assert primary_category("remove the red ball") == "removal"
    assert primary_category("two red balls") == "numerical"
    assert primary_category("a red background") == "background"
    assert primary_category("a red ball") == "attribute"
    assert primary_category("from above") is None


def test_refuses_non_text():
    with pytest.raises(ShiftbenchError, match="string"):
        categorise(None)


def test_builtin_phrasings_carry_their_category_keywords():
    ds = ObjectsCIR(split="val")
    family = {"background": "background", "attribute": "attribute", "fine_grained": "attribute",
              "removal": "removal", "numerical": "numerical"}
    for i in range(len(ds)):
        q = ds._queries[i]
        if q["category"] in family:
            for text in ds.phrasings(i):
                assert family[q["category"]] in categorise(text), text
