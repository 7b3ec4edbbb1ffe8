"""adversarial_texture through the bundled EfficientNet-Lite0 (CPU): the attack works on a real photo, the object
stays byte-identical, and the registry contract holds (same seed same bytes, replay, batch = items)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import SeverityError, ShiftbenchError

from conftest import make_sample

torch = pytest.importorskip("torch")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def photos():
    ds = sb.load_dataset("objects", scenes_per_object=1)
    return ds.load(6), ds.load(2)  # a lorikeet and a rooster, both classified correctly by Lite0 on clean


def test_attack_fools_lite0_and_keeps_the_object(photos):
    s = photos[0]
    lite0 = sb.create_model("efficientnet_lite0")
    assert int(lite0.predict_logits([s.image])[0].argmax()) == s.label
    shift = sb.create_shift("adversarial_texture")
    out, params = shift(s, severity=1, seed=0, return_params=True)
    record = out.meta["attack"]
    assert record["fooled"] and record["iterations"] == 6 and record["loss"] > record["loss_start"]
    assert int(lite0.predict_logits([out.image])[0].argmax()) != s.label  # fooled on the saved bytes
    assert np.array_equal(out.image[s.mask], s.image[s.mask])
    assert out.label == s.label and np.array_equal(out.mask, s.mask)
    # the registry contract, on fewer calls than the generic suite
    assert np.array_equal(shift(s, severity=1, seed=0).image, out.image)
    params = json.loads(json.dumps(params))
    assert np.array_equal(sb.create_shift("adversarial_texture", **shift.config).replay(s, params).image, out.image)
    quick = sb.create_shift("adversarial_texture", early_stop=True)(s, severity=1, seed=0).meta["attack"]
    assert quick["fooled"] and 1 <= quick["iterations"] < 6
    batch = shift([s, photos[1]], severity=1, seed=0)
    assert np.array_equal(batch[0].image, out.image)
    assert np.array_equal(batch[1].image, shift(photos[1], severity=1, seed=0).image)


def test_budget_without_early_stop_and_bad_input():
    s = make_sample(sid="c0")
    before = s.image.copy()
    shift = sb.create_shift("adversarial_texture", steps=2, early_stop=False)
    out = shift(s, seed=1)
    assert out.meta["attack"]["iterations"] == 2
    assert np.array_equal(out.image[s.mask], s.image[s.mask]) and np.array_equal(s.image, before)
    for bad in (0, 6, 2.5, True):
        with pytest.raises(SeverityError, match="adversarial_texture"):
            shift(s, severity=bad)
    with pytest.raises(ShiftbenchError, match="needs a class label"):
        shift(s.replace(label=None))
    with pytest.raises(ShiftbenchError, match="outside the source classifier"):
        shift(s.replace(label=5000))
    with pytest.raises(ShiftbenchError, match="grid"):
        sb.create_shift("adversarial_texture", grid=1)
    with pytest.raises(ShiftbenchError, match="not differentiable"):
        sb.create_shift("adversarial_texture", model="dummy_classifier")(s)


def test_same_bytes_whatever_the_threads_of_the_process(photos):
    # a Ray actor runs with one torch thread, a workstation with many: the attack's gradient sums must not
    # depend on that (it pins itself to one thread on a CPU and restores the setting)
    s = photos[1]
    shift = sb.create_shift("adversarial_texture", steps=4)
    outputs = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        outputs.append(shift(s, severity=1, seed=3).image)
        assert torch.get_num_threads() == threads
    torch.set_num_threads(1)
    assert np.array_equal(outputs[0], outputs[1])
