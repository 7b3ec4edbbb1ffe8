"""Benchmark specs: YAML safe loading, validation errors that point at the bad key, planned conditions."""

from __future__ import annotations

import pytest

import tiny_registry  # noqa: F401
from shiftbench.errors import SpecError
from shiftbench.registry import METRICS, MODELS
from shiftbench.spec import load_spec


@pytest.fixture(autouse=True)
def fake_names(monkeypatch):
    # Models and metrics come from their own modules; the spec only needs the names to exist.
    from shiftbench.registry import Entry

    MODELS._load()
    METRICS._load()
    monkeypatch.setitem(MODELS._entries, "_test_model", Entry("_test_model", object, "test"))
    monkeypatch.setitem(METRICS._entries, "_test_top1", Entry("_test_top1", object, "test"))


BASE = """
dataset: _test_tiny
models: [_test_model]
shifts:
  - clean
  - {name: _test_noise, severities: [3, 4, 5]}
  - {name: _test_noise, severities: 1-2}
metrics: [_test_top1]
seed: 4
limit: 10
"""


def write(tmp_path, text):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_valid_spec_plans_conditions(tmp_path):
    spec = load_spec(write(tmp_path, BASE))
    planned = [(c.model, c.shift, c.severity) for c in spec.conditions()]
    assert planned[0] == ("_test_model", "clean", 0)
    assert [p[2] for p in planned[1:]] == [3, 4, 5, 1, 2]
    assert spec.seed == 4 and spec.limit == 10


def test_clean_added_when_missing_and_bare_names_take_all_severities():
    spec = load_spec({"dataset": "_test_tiny", "models": "_test_model", "shifts": ["_test_noise"],
                      "metrics": ["_test_top1"]})
    assert [(c.shift, c.severity) for c in spec.conditions()] == [("clean", 0)] + [("_test_noise", s) for s in range(1, 6)]


@pytest.mark.parametrize(
    "change, message",
    [
        (("seed: 4", "sed: 4"), r"spec.yaml: sed: unknown key \(did you mean 'seed'\?\)"),
        (("severities: [3, 4, 5]", "severities: [0, 3]"), r"shifts\[1\]\.severities: \[0\] outside 1..5"),
        (("severities: [3, 4, 5]", "severites: [1]"), r"shifts\[1\]\.severites: unknown key \(did you mean 'severities'\?\)"),
        (("{name: _test_noise, severities: 1-2}", "{name: _test_nose}"), r"shifts\[2\]\.name: unknown shift '_test_nose'; did you mean '_test_noise'"),
        (("[_test_model]", "[_test_modl]"), r"models\[0\]: unknown model '_test_modl'"),
        (("[_test_top1]", "[top_one]"), r"metrics\[0\]: unknown metric 'top_one'"),
        (("dataset: _test_tiny", "dataset: no_such_data"), r"dataset: 'no_such_data' is neither a registered dataset"),
        (("limit: 10", "limit: -1"), r"limit: expected a positive integer"),
        (("seed: 4", "seed: four"), r"spec.yaml: seed: expected an integer 0 <= seed < 2\*\*63, got 'four' \(str\)"),
        (("severities: [3, 4, 5]", "severities: [a]"), r"severities: expected an int"),
        (("{name: _test_noise, severities: 1-2}", "{name: _test_noise, params: {sigma: 3}}"), r"shifts\[2\]\.params: shift ._test_noise. takes no parameters"),
        (("metrics: [_test_top1]", "metrics: []"), r"metrics: empty; list metric names, or leave metrics out"),
    ],
)
def test_errors_point_at_the_bad_key(tmp_path, change, message):
    text = BASE.replace(*change)
    assert text != BASE
    with pytest.raises(SpecError, match=message):
        load_spec(write(tmp_path, text))


def test_malformed_yaml_and_files(tmp_path):
    with pytest.raises(SpecError, match=r"malformed YAML at line 3, column 1: expected .,. or .\]."):
        load_spec(write(tmp_path, "dataset: x\nmodels: [a, b\n"))
    with pytest.raises(SpecError, match="not found"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match="must be a mapping"):
        load_spec(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(SpecError, match="malformed YAML"):  # safe loading: no python objects
        load_spec(write(tmp_path, "dataset: !!python/object/apply:os.system ['echo hi']\n"))


def test_raw_is_stable_for_the_same_spec(tmp_path):
    a = load_spec(write(tmp_path, BASE)).raw
    b = load_spec(write(tmp_path, BASE)).raw
    assert a == b and a["seed"] == 4


def test_a_bare_background_shift_runs_its_published_severity_and_listed_severities_keep_their_identity():
    """docs/background.md: a background shift's default severity is 5 (full replacement, ObjectCompose's setting); a
    bare name in a spec runs that one, while a corruption's bare name runs 1-5 (ImageNet-C). A spec that lists
    severities is the same run as before."""
    base = {"dataset": "_test_tiny", "models": "_test_model", "metrics": ["_test_top1"]}
    bare = load_spec({**base, "shifts": ["background_color", "gaussian_noise", "object_only", "background_only"]})
    planned = {(c.shift, c.severity) for c in bare.conditions()}
    assert {s for name, s in planned if name == "background_color"} == {5}
    assert {s for name, s in planned if name == "object_only"} == {5}
    assert {s for name, s in planned if name == "background_only"} == {1}
    assert {s for name, s in planned if name == "gaussian_noise"} == {1, 2, 3, 4, 5}
    from shiftbench.registry import SHIFTS

    assert SHIFTS.create("background_color").check_severity(None) == 5  # the shift's own default: the same one
    listed = load_spec({**base, "shifts": [{"name": "background_color", "severities": "1-5"}]})
    assert [c.severity for c in listed.conditions() if c.shift == "background_color"] == [1, 2, 3, 4, 5]
    assert listed.raw["shifts"][1] == {"name": "background_color", "severities": [1, 2, 3, 4, 5], "params": {}}
    five = load_spec({**base, "shifts": [{"name": "background_color", "severity": 5}]})
    assert five.raw == load_spec({**base, "shifts": ["background_color"]}).raw  # the bare name is that run


def test_metrics_may_be_left_out_for_the_tasks_defaults():
    spec = load_spec({"dataset": "_test_tiny", "models": "_test_model", "shifts": ["clean"]})
    assert spec.metrics == [] and spec.raw["metrics"] == []  # chosen when the models are loaded (engine/evaluate.py)
    with pytest.raises(SpecError, match=r"models: missing \(required: dataset, models, shifts\)"):
        load_spec({"dataset": "_test_tiny", "shifts": ["clean"]})
