"""Continuous severities: whole severities keep their bytes, the change grows with the dial, params replay.

``tests/data/severity_golden.json`` holds digests of every corruption's (and text corruption's) output and
params at severities 1..5, recorded on two built-in photos before severities became a dial: a whole
severity, given as an int or as a float, must still give exactly those bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shiftbench as sb
from shiftbench.errors import SeverityError
from shiftbench.registry import SHIFTS
from shiftbench.sample import Sample
from shiftbench.severity import canonical, interpolate, label, parse
from shiftbench.shifts.corruptions import CORRUPTION_GROUPS
from shiftbench.shifts.groups import group_members

GOLDEN = json.loads((Path(__file__).parents[1] / "data" / "severity_golden.json").read_text())
IMAGE_DIALS = list(CORRUPTION_GROUPS["all"]) + group_members("cbar")
TEXTS = ["A small grey hen stands on a green meadow near the old wooden fence.", "two dogs"]
# the fine grid of the monotonicity check: every eighth of a severity
GRID = [1 + k / 8 for k in range(33)]


def text_dials() -> list[str]:
    return [n for n in sb.list_shifts() if getattr(SHIFTS.entry(n).target, "kind", None) == "text"
            and getattr(SHIFTS.entry(n).target, "continuous", False)]


@lru_cache(maxsize=1)
def golden_photos() -> list[Sample]:
    ds = sb.load_dataset("objects")
    by_id = {ds[i].id: ds[i] for i in (0, 200)}
    first, second = (by_id[i] for i in GOLDEN["photos"])
    return [first, Sample(image=np.ascontiguousarray(second.image[:112, :160]), id=second.id)]


@lru_cache(maxsize=1)
def dial_photos() -> list[Sample]:
    ds = sb.load_dataset("objects")
    return [ds[i] for i in (0, 120, 250)]


def image_digest(name: str, severity) -> str:
    shift = sb.create_shift(name)
    h = hashlib.sha256()
    for smp in golden_photos():
        out, params = shift(smp.image, severity=severity, seed=GOLDEN["seed"], sample_id=smp.id, return_params=True)
        h.update(out.tobytes())
        h.update(json.dumps(params, sort_keys=True).encode())
    return h.hexdigest()[:32]


def text_digest(name: str, severity) -> str:
    shift = sb.create_shift(name)
    h = hashlib.sha256()
    for i, text in enumerate(TEXTS):
        out, params = shift(text, severity=severity, seed=GOLDEN["seed"], sample_id=f"t{i}", return_params=True)
        h.update(out.encode())
        h.update(json.dumps(params, sort_keys=True).encode())
    return h.hexdigest()[:32]


@pytest.mark.parametrize("name", IMAGE_DIALS)
def test_whole_severities_give_the_bytes_recorded_before_the_dial(name):
    assert sb.create_shift(name).continuous
    for s in range(1, 6):
        want = GOLDEN["digests"][f"{name}/{s}"]
        assert image_digest(name, s) == want, (name, s)
        assert image_digest(name, float(s)) == want, (name, float(s))


def test_whole_severities_of_text_corruptions_keep_their_output():
    names = [k.split("/")[0] for k in GOLDEN["digests"] if k.split("/")[0] not in IMAGE_DIALS]
    assert len(set(names)) == 7
    for name in sorted(set(names)):
        for s in range(1, 6):
            want = GOLDEN["digests"][f"{name}/{s}"]
            assert text_digest(name, s) == want and text_digest(name, float(s)) == want, (name, s)


def mean_change(name: str, severity) -> float:
    shift = sb.create_shift(name)
    return float(np.mean([np.abs(shift(p.image, severity=severity, seed=0, sample_id=p.id).astype(np.float64)
                                 - p.image).mean() for p in dial_photos()]))


@pytest.mark.parametrize("name", IMAGE_DIALS)
def test_the_change_moves_monotonically_between_published_levels(name):
    """Mean absolute difference from the clean photo (three built-in photos, 224 px) over severities 1..5 in
    steps of 1/8: between two consecutive published levels it moves monotonically from one level's value to
    the next. Where the published levels themselves grow (25 of the 29), that is: non-decreasing over the
    whole grid. Glass blur (levels 1->2 and 3->4), frost (3->4) and saturate (2->3) have published levels that
    change the photo less at the higher severity; there the dial falls monotonically between the two."""
    change = [mean_change(name, s) for s in GRID]
    for k in range(4):
        segment = change[8 * k: 8 * k + 9]
        steps = np.diff(segment)
        if segment[-1] >= segment[0]:
            assert (steps >= 0).all(), (name, k + 1, [round(v, 3) for v in segment])
        else:
            assert (steps <= 0).all(), (name, k + 1, [round(v, 3) for v in segment])


@pytest.mark.parametrize("name", IMAGE_DIALS)
def test_in_between_severities_are_recorded_and_replay_exactly(name):
    shift = sb.create_shift(name)
    smp = golden_photos()[1]
    out, params = shift(smp.image, severity=2.5, seed=7, sample_id=smp.id, return_params=True)
    assert params["severity"] == 2.5
    again = shift.replay(smp, json.loads(json.dumps(params)))
    assert np.array_equal(again.image if hasattr(again, "image") else again, out)
    low, high = shift(smp.image, severity=2, seed=7, sample_id=smp.id), shift(smp.image, severity=3, seed=7, sample_id=smp.id)
    # a picture of its own (a discrete parameter, like checkerboard_cutout's cut cells on a small photo, may
    # still equal one end)
    assert not (np.array_equal(out, low) and np.array_equal(out, high))


@pytest.mark.parametrize("bad", [0.5, 5.25, 0, 6, float("nan"), float("inf"), "3", True])
def test_severities_outside_the_range_are_refused_in_one_line(bad):
    with pytest.raises(SeverityError) as err:
        sb.create_shift("gaussian_noise")(golden_photos()[1].image, severity=bad)
    assert "\n" not in str(err.value) and "gaussian_noise" in str(err.value)


def test_shifts_without_a_dial_refuse_in_between_severities():
    shift = sb.create_shift("background_color", color="red")
    assert not shift.continuous
    with pytest.raises(SeverityError, match="background_color.*2.5"):
        shift.check_severity(2.5)
    assert shift.check_severity(3.0) == 3 and isinstance(shift.check_severity(3.0), int)


def test_parse_forms_and_refusals():
    assert parse("1-5:0.25") == tuple(canonical(1 + k / 4) for k in range(17))
    assert parse("1-2:0.1")[3] == 1.3 and parse("1-2:0.1")[-1] == 2 and isinstance(parse("1-2:0.1")[-1], int)
    assert parse([1.0, 2.5, np.int64(4)]) == (1, 2.5, 4)
    assert [label(v) for v in parse("1,2.5,3.75")] == ["1", "2.5", "3.75"]
    for bad, says in (("1-5:0.3", "whole steps"), ("5-1", "empty"), ("x", "not a severity"), ([1, 1.0], "repeat"),
                      ("1-5:0", "positive"), ("1-5:0.001", "more than")):
        with pytest.raises(SeverityError, match=says):
            parse(bad)


def test_interpolation_is_exact_at_levels_and_linear_between():
    table = ((10, 3), (15, 5), (15, 8), (20, 15))
    for s in range(1, 5):
        assert interpolate(table, s) == table[s - 1]
    assert interpolate(table, 1.5) == (13, 4)  # 12.5 rounds half up
    assert interpolate(table, 1.5, integer="round") == (15, 5)
    assert interpolate(table, 1.5, integer=("lerp-round", "float")) == (13, 4.0)
    assert interpolate(table, 3.25, integer="float") == (16.25, 9.75)
    assert math.isclose(interpolate((0.08, 0.12), 1.25), 0.09)


def test_cbar_severity_moves_the_level_linearly_and_the_level_scale_takes_levels():
    from shiftbench.shifts.cbar import LEVELS

    photo = golden_photos()[1]
    for name in group_members("cbar"):
        shift = sb.create_shift(name)
        levels = LEVELS[name]
        assert [shift.level(s) for s in range(1, 6)] == list(levels)
        assert math.isclose(shift.level(2.25), levels[1] + 0.25 * (levels[2] - levels[1]))
        on_levels = sb.create_shift(name, scale="level")
        assert on_levels.severities == (0, 10) and on_levels.config == {"scale": "level"}
        # the published level of severity 4 asked for on the level scale: the same picture
        want = shift(photo.image, severity=4, seed=2, sample_id=photo.id)
        got, params = on_levels(photo.image, severity=levels[3], seed=2, sample_id=photo.id, return_params=True)
        assert params["level"] == levels[3] and np.array_equal(got, want), name
        with pytest.raises(SeverityError, match="outside 0..10"):
            on_levels.check_severity(10.5)
    with pytest.raises(Exception, match="scale must be"):
        sb.create_shift("sparkles", scale="levels")


# -- the parser over generated inputs -------------------------------------------------------------------
_severity = st.one_of(st.integers(1, 5), st.floats(1, 5, allow_nan=False).map(lambda f: round(f, 6)))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(values=st.lists(_severity, min_size=1, max_size=8, unique_by=lambda v: canonical(v)))
def test_written_severities_parse_back_to_themselves(values):
    """label() writes what parse() reads: a list written out comma-separated is the same severities, whole ones
    as ints; canonical is idempotent."""
    want = tuple(canonical(v) for v in values)
    assert parse(",".join(label(v) for v in values)) == want
    assert parse(list(values)) == want
    assert all(canonical(v) == v and type(canonical(v)) is type(v) for v in want)
    assert all(isinstance(v, int) for v in want if float(v).is_integer())


@settings(max_examples=200, deadline=None, derandomize=True)
@given(lo=st.integers(1, 4), span=st.integers(1, 4), per_unit=st.sampled_from([1, 2, 4, 5, 8, 10, 20]))
def test_grids_hold_both_ends_and_even_steps(lo, span, per_unit):
    hi = min(5, lo + span)
    step = 1 / per_unit
    grid = parse(f"{lo}-{hi}:{label(round(step, 12))}")
    assert grid[0] == lo and grid[-1] == hi and isinstance(grid[0], int) and isinstance(grid[-1], int)
    assert len(grid) == (hi - lo) * per_unit + 1 and len(set(grid)) == len(grid)
    assert all(math.isclose(b - a, step, abs_tol=1e-9) for a, b in zip(grid, grid[1:]))
    assert [v for v in grid if isinstance(v, int)] == list(range(lo, hi + 1))


def _decimal(draw_int: int, places: int) -> str:
    """``draw_int / 10**places`` written as a decimal (``"4.9999999996"``), the way a user writes a grid."""
    whole, frac = divmod(draw_int, 10 ** places)
    return f"{whole}.{frac:0{places}d}" if places else str(whole)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(lo=st.integers(0, 10 ** 6), span=st.integers(0, 10 ** 6), step=st.integers(1, 10 ** 6),
       places=st.integers(0, 12), multiple=st.one_of(st.none(), st.integers(0, 450)))
def test_a_grid_of_any_step_ends_exactly_at_its_end_or_is_refused(lo, span, step, places, multiple):
    """promise: nothing silently wrong. A grid ``lo-hi:step`` of any written step either holds exactly lo and hi
    as its ends (hi is never planned as 4.9999999996, which would silently leave mCE and the RobustBench export)
    with every point the nearest float to the exact decimal point, or is refused in one line naming the grid."""
    from fractions import Fraction

    span = span if multiple is None else multiple * step  # half the cases divide exactly
    a, b, d = (_decimal(v, places) for v in (lo, lo + span, step))
    text = f"{a}-{b}:{d}"
    exact_count = Fraction(span, step)
    try:
        grid = parse(text)
    except SeverityError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith("severities: ")
        assert exact_count.denominator != 1 or exact_count + 1 > 401, (text, message)
        return
    assert exact_count.denominator == 1 and len(grid) == exact_count + 1
    assert grid[0] == canonical(float(Fraction(a))) and grid[-1] == canonical(float(Fraction(b)))
    assert list(grid) == [canonical(float(Fraction(a) + i * Fraction(d))) for i in range(len(grid))]
    assert all(isinstance(v, int) for v in grid if float(v).is_integer())


@pytest.mark.parametrize("text, want", [("1-5:0.9999999999", None), ("1-5:1.3333333333", None), ("0-1:0.1", 11),
                                        ("1-5:0.4", 11), ("0-10:0.7", None), ("1-5:1", 5)])
def test_steps_that_nearly_divide_are_refused_not_rounded(text, want):
    """promise: nothing silently wrong. The reported grids: a step within 1e-9 of dividing the range used to be
    planned with its last point short of the end (4.9999999996); it is now refused."""
    if want is None:
        with pytest.raises(SeverityError, match="does not divide"):
            parse(text)
    else:
        grid = parse(text)
        assert len(grid) == want and grid[-1] == int(text.split("-")[1].split(":")[0])
