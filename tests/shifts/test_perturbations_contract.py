"""The call contract of every registered ImageNet-P sequence (``p_*``), whatever module defines it: frames out,
the published frame counts, the comparison recorded, seeds and replay exact, difficulties 1..3, crop, groups."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shiftbench as sb
from shiftbench.errors import SeverityError, ShiftbenchError
from shiftbench.sample import Sample
from shiftbench.shifts.groups import group_members
from shiftbench.shifts.perturbations import IMAGENET_P, IMAGENET_P_EXTRA

from conftest import make_image, make_sample

NAMES = sb.list_shifts("p_*")
FRAMES = {"p_translate": 41}  # the published counts: 31 for every other sequence
NOISE = {"p_gaussian_noise", "p_shot_noise", "p_speckle_noise"}  # each frame compared with the first


def test_the_registered_sequences_are_the_published_ones():
    assert NAMES, "no p_* shift is registered"
    assert set(NAMES) <= set(IMAGENET_P) | set(IMAGENET_P_EXTRA)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=6, deadline=None)
@given(h=st.integers(8, 96), w=st.integers(8, 96), seed=st.integers(0, 2**32), difficulty=st.sampled_from([1, 2, 3]))
def test_frames_seeds_and_replay(name, h, w, seed, difficulty):
    shift = sb.create_shift(name)
    image = make_image(h, w, seed=seed % 7)
    frames, params = shift(image, severity=difficulty, seed=seed, return_params=True)
    assert isinstance(frames, np.ndarray) and frames.dtype == np.uint8
    assert frames.shape == (FRAMES.get(name, 31), h, w, 3)
    np.testing.assert_array_equal(shift(image, severity=difficulty, seed=seed), frames)  # same seed, same bytes
    np.testing.assert_array_equal(shift.replay(image, params), frames)
    assert params["difficulty"] == difficulty


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("difficulty", [1, 2, 3])
def test_a_sample_gets_frames_and_its_comparison(name, difficulty):
    shift = sb.create_shift(name)
    sample = make_sample(40, 56, seed=1, sid="a")
    out = shift(sample, severity=difficulty, seed=5)
    assert isinstance(out, Sample) and out.frames is not None and out.label == sample.label and out.id == "a"
    assert out.frames.shape == (FRAMES.get(name, 31), 40, 56, 3)
    np.testing.assert_array_equal(out.image, out.frames[-1])
    expected = {"reference": "first", "step": 1} if name in NOISE else {"reference": "previous", "step": difficulty}
    expected["frames"] = FRAMES.get(name, 31)
    assert out.meta["sequence"] == expected and out.meta["scene"] == "test"
    np.testing.assert_array_equal(shift(sample.image, severity=difficulty, sample_id="a", seed=5), out.frames)


@pytest.mark.parametrize("name", NAMES)
def test_difficulties_outside_1_to_3_are_refused_in_one_line(name):
    shift = sb.create_shift(name)
    assert shift(make_image(8, 8), severity=None).shape[0] == FRAMES.get(name, 31)  # the default: 1
    for bad in (0, 4, 2.5):
        with pytest.raises(SeverityError) as err:
            shift(make_image(8, 8), severity=bad)
        assert "\n" not in str(err.value) and name in str(err.value)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=4, deadline=None)
@given(h=st.integers(8, 64), w=st.integers(8, 64), data=st.data())
def test_crop(name, h, w, data):
    k = data.draw(st.integers(1, min(h, w)))
    frames = sb.create_shift(name, crop=k)(make_image(h, w), seed=3)
    assert frames.shape == (FRAMES.get(name, 31), k, k, 3)
    big = max(h, w) + data.draw(st.integers(1, 20))
    with pytest.raises(ShiftbenchError) as err:
        sb.create_shift(name, crop=big)(make_image(h, w), seed=3)
    message = str(err.value)
    assert "\n" not in message and str(big) in message and f"{h}x{w}" in message


@pytest.mark.parametrize("name", NAMES)
def test_bad_crop_values_are_refused(name):
    for bad in (0, -3, 2.5, True, "224"):
        with pytest.raises(ShiftbenchError):
            sb.create_shift(name, crop=bad)


def test_groups_select_the_sequences_in_the_published_order():
    assert group_members("imagenet_p") == [n for n in IMAGENET_P if n in NAMES]
    assert group_members("imagenet_p_extra") == [n for n in IMAGENET_P_EXTRA if n in NAMES]
    assert len(IMAGENET_P) == 10 and len(IMAGENET_P_EXTRA) == 4
