"""Composed shifts (shiftbench.shifts.chain): semantics, refusals, and a chain through spec -> evaluate -> store -> report."""

from __future__ import annotations

import json
from typing import ClassVar

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import SeverityError, ShiftbenchError, SpecError, UnknownNameError
from shiftbench.shifts.base import ImageShift
from shiftbench.spec import load_spec

from conftest import make_sample


class Flip(ImageShift):
    """A shift that moves the object (so it keeps only the label): a mask-needing step cannot follow it."""

    name = "_test_flip"
    keeps: ClassVar[frozenset[str]] = frozenset({"label"})

    def apply_image(self, image, params):
        return np.ascontiguousarray(image[:, ::-1])


def test_a_chain_is_its_steps_applied_in_order_with_their_recorded_params():
    s = make_sample(64, 80, seed=1, sid="x")
    c = sb.chain(("background_color", {"color": "red"}), "gaussian_noise")
    out, params = c(s, severity=4, seed=9, return_params=True)
    steps = params["steps"]
    assert [st["shift"] for st in steps] == ["background_color", "gaussian_noise"]
    assert [st["severity"] for st in steps] == [4, 4]
    by_hand = sb.create_shift("gaussian_noise").apply(
        sb.create_shift("background_color", color="red").apply(s, steps[0]["params"]), steps[1]["params"])
    assert np.array_equal(out.image, by_hand.image)
    # the background changed, the object did not, then noise everywhere
    plain = sb.create_shift("background_color", color="red").apply(s, steps[0]["params"])
    assert not np.array_equal(plain.image, s.image) and not np.array_equal(out.image, plain.image)
    assert np.array_equal(out.mask, s.mask) and out.label == s.label
    # a replay from the recorded (JSON) params, by a chain rebuilt from its config alone
    again = sb.create_shift("chain", **json.loads(json.dumps(c.config))).replay(s, json.loads(json.dumps(params)))
    assert np.array_equal(again.image, out.image)


def test_severities_keeps_and_requires_of_a_chain():
    c = sb.chain("attribute_color", ("attribute_pattern", {}, 2), "gaussian_noise")
    assert c.severities == (1, 5)
    assert c.keeps == frozenset({"label", "mask", "boxes", "layout"})  # caption: the attribute edits change it
    assert c.requires == frozenset({"mask"}) and c.kind == "sample"
    _, params = c(make_sample(), severity=5, seed=0, return_params=True)
    assert [st["severity"] for st in params["steps"]] == [5, 2, 5]  # the fixed step keeps its own
    fixed = sb.chain(("gaussian_noise", {}, 1), ("fog", {}, 5))
    assert fixed.severities == (1, 1)
    _, params = fixed(make_sample(), return_params=True)
    assert [st["severity"] for st in params["steps"]] == [1, 5]


def test_same_shift_twice_draws_two_streams_and_seeds_matter():
    c = sb.chain("gaussian_noise", "gaussian_noise")
    s = make_sample(sid="a")
    _, p = c(s, severity=3, seed=0, return_params=True)
    a, b = (st["params"]["noise_seed"] for st in p["steps"])
    assert a != b
    assert c(s, severity=3, seed=0, return_params=True)[1] == p
    assert c(s, severity=3, seed=1, return_params=True)[1] != p
    assert c(s.replace(id="b"), severity=3, seed=0, return_params=True)[1] != p


def test_draw_hands_its_work_to_apply_so_no_step_runs_twice(monkeypatch):
    calls = []
    c = sb.chain("attribute_color", "gaussian_noise")
    first = c.steps[0]
    original = type(first).apply_batch

    def counted(self, samples, params):
        calls.append(len(samples))
        return original(self, samples, params)

    monkeypatch.setattr(type(first), "apply_batch", counted)
    samples = [make_sample(sid=f"s{i}") for i in range(4)]
    outs = c(samples, severity=3, seed=0)
    assert sum(calls) == 4  # once per sample, at draw time
    params = [c.draw(s, 3, 0) for s in samples]
    calls.clear()
    copies = [s.replace(image=s.image.copy()) for s in samples]  # other objects: a replay runs every step
    replayed = c.apply_batch(copies, json.loads(json.dumps(params)))
    assert sum(calls) == 4
    assert all(np.array_equal(a.image, b.image) for a, b in zip(outs, replayed))


@pytest.mark.parametrize("steps, error, message", [
    (["gaussian_noise"], ShiftbenchError, "needs at least two steps"),
    ("gaussian_noise", ShiftbenchError, "must be a list of steps"),
    (["gaussian_noise", "no_such_shift"], UnknownNameError, "chain step 2"),
    (["gaussian_noise", "text_qwerty"], ShiftbenchError, "step 2 (text_qwerty) corrupts text"),
    (["gaussian_noise", "clean"], ShiftbenchError, "'clean' cannot be a step"),
    (["gaussian_noise", {"name": "fog", "sev": 2}], ShiftbenchError, "unknown key 'sev'"),
    (["gaussian_noise", ("fog", {}, 9)], SeverityError, "chain step 2"),
    (["gaussian_noise", ("background_color", {"colour": "red"})], ShiftbenchError, "chain step 2"),
])
def test_bad_chains_are_refused_in_one_line(steps, error, message):
    with pytest.raises(error) as err:
        sb.chain(*steps) if isinstance(steps, list) else sb.create_shift("chain", shifts=steps)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_step_needing_a_mask_after_one_that_moves_it_is_refused():
    flip = Flip()
    with pytest.raises(ShiftbenchError, match=r"step 2 \(background_color\) needs the sample's mask, which step 1 "
                                              r"\(_test_flip\) does not keep valid"):
        sb.chain(flip, ("background_color", {"color": "red"}))
    ok = sb.chain(("background_color", {"color": "red"}), flip)  # the other order is fine
    assert ok.keeps == frozenset({"label"})


def test_spec_chain_entry_parses_and_bad_ones_say_where(tmp_path):
    spec = load_spec({"dataset": "objects", "models": ["dummy_classifier"], "metrics": ["top1"], "shifts": [
        {"name": "chain", "shifts": [{"name": "background_color", "params": {"color": "red"}, "severity": 5},
                                     "gaussian_noise"], "severities": [2, 4]}]})
    entry = next(s for s in spec.shifts if s.name == "chain")
    assert entry.name == "chain" and entry.severities == (2, 4)
    assert entry.params == {"shifts": [{"name": "background_color", "params": {"color": "red"}, "severity": 5},
                                       {"name": "gaussian_noise", "params": {}}]}
    for shifts, message in [
        ([{"name": "chain", "shifts": ["gaussian_noise"]}], "shifts[0].shifts: chain: needs at least two steps"),
        ([{"name": "fog", "shifts": ["fog", "snow"]}], "shifts[0].shifts: only a chain has steps"),
        ([{"name": "chain", "params": {"shifts": ["fog", "snow"]}, "shifts": ["fog", "snow"]}], "shifts[0].params"),
        ([{"name": "chain", "shifts": ["fog", "nonexistent"]}], "shifts[0]"),
    ]:
        with pytest.raises(SpecError) as err:
            load_spec({"dataset": "objects", "models": ["dummy_classifier"], "metrics": ["top1"], "shifts": shifts})
        assert message in str(err.value), str(err.value)


CHAIN_SPEC = {
    "dataset": "objects", "limit": 12, "models": ["efficientnet_lite0"], "metrics": ["top1"], "batch_size": 4,
    "seed": 0, "shifts": ["clean", {"name": "chain", "severities": [3],
                                    "shifts": [{"name": "background_color", "params": {"color": "blue"}},
                                               "gaussian_noise"]}],
}


def test_chain_through_evaluate_store_and_report(tmp_path):
    """A chain in a spec: its rows carry the steps as params, equal the steps applied by hand, and the report
    names the condition by its steps."""
    from e2e import report_tables

    rows = sb.evaluate(CHAIN_SPEC, store=tmp_path / "r.db")
    chained = [r for r in rows if r["shift"] == "chain"]
    assert len(chained) == 1 and chained[0]["params"] == {"shifts": [
        {"name": "background_color", "params": {"color": "blue"}}, {"name": "gaussian_noise", "params": {}}]}
    data = sb.load_dataset("objects", limit=12)
    model = sb.create_model("efficientnet_lite0")
    c = sb.chain(("background_color", {"color": "blue"}), "gaussian_noise")
    images, labels = [], []
    for i in range(len(data)):
        s = data.load(i)
        images.append(c(s, severity=3, seed=0).image)
        labels.append(s.label)
    want = float((model.predict_logits(images).argmax(1) == np.array(labels)).mean())
    assert chained[0]["value"] == pytest.approx(want, abs=1e-12)
    tables, _, html = report_tables(tmp_path / "r.db", tmp_path / "report")
    label = "chain: background_color (color=blue) then gaussian_noise"
    assert any(label in cell for table in tables for row in table for cell in row), html[:2000]


def test_a_killed_chain_run_resumes_to_the_same_rows(tmp_path):
    from e2e import kill_and_resume, row_key

    spec = dict(CHAIN_SPEC, limit=16, models=["dummy_classifier"])
    ref, resumed, partial = kill_and_resume(spec, tmp_path, min_batches=2, delay=0.4)
    assert len(partial) < len(ref)
    assert row_key(resumed) == row_key(ref)
