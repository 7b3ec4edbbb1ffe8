"""results/records.py: the one loader (the parts a caller asks for) and the typed records it returns."""

from __future__ import annotations

import numpy as np
import pytest

from shiftbench.condition import Condition
from shiftbench.errors import ShiftbenchError, StoreError
from shiftbench.results.artifacts import CURATION_ARTIFACT
from shiftbench.results.records import ALL, Row, Run, Samples, load
from shiftbench.results.store import Store


@pytest.fixture()
def store(tmp_path):
    path = tmp_path / "r.db"
    with Store(path) as db:
        for name in ("a", "b"):
            run = db.start_run({"name": name, "metrics": ["top1"]}, seed=3, name=name,
                               identity={"models": {"m": {"weights": "ab" * 32, "from": "files"}},
                                         "dataset": {"name": "d", "samples": 2, "files": {"sha256": "cd" * 32,
                                                                                          "files": 2}}})
            cid = db.condition(run, Condition("m", "d", "fog", {"k": 1}, 2.5))
            db.save_batch(cid, 0, {}, predictions=[("s0", {"pred_name": "cat", "confidence": 0.5, "correct": False})])
            db.finish_condition(cid, {"top1": (0.5, 2, {"higher_is_better": True})},
                                samples={"top1": ("mean", ["s0", "s1"], np.array([1.0, 0.0]))})
        db.put_artifact(run, CURATION_ARTIFACT, b'{"kept": 2, "total": 3, "models": ["m"]}')
    return path


def test_the_parts_asked_for_and_nothing_else(store):
    (run,) = load(store)  # the latest run, its results only
    assert isinstance(run, Run) and run.name == "b" and run.seed == 3 and run.metrics == ["top1"]
    assert run.samples == [] and run.predictions == [] and run.curation is None
    (row,) = run.rows
    assert isinstance(row, Row) and isinstance(row, Condition)  # the one condition type
    assert (row.model, row.shift, row.params, row.severity, row.metric, row.value, row.n) == \
        ("m", "fog", {"k": 1}, 2.5, "top1", 0.5, 2)
    assert row.key == ("m", "fog", '{"k":1}', 2.5) and row.higher_is_better

    (full,) = load(store, run.run_id, ("results", "samples", "predictions", "counts", "curation"))
    (s,) = full.samples
    assert isinstance(s, Samples) and s.ids == ["s0", "s1"] and list(s.values) == [1.0, 0.0] and s.key == row.key
    (p,) = full.predictions
    assert p.sample_id == "s0" and p.said.pred_name == "cat" and p.said.correct is False and p.dataset == ""
    assert full.counts == (1, 1) and full.keeps_samples
    assert (full.curated.kept, full.curated.total, full.curated.models) == (2, 3, ["m"])
    assert full.weights["m"].sha256 == "ab" * 32 and full.weights["m"].origin == "files"
    assert (full.data.name, full.data.samples, full.data.files, full.data.sha256) == ("d", 2, 2, "cd" * 32)


def test_every_run_a_list_of_runs_and_the_errors(store, tmp_path):
    assert [r.name for r in load(store, ALL)] == ["a", "b"]
    ids = [r.run_id for r in load(store, ALL)]
    assert [r.run_id for r in load(store, ids[::-1])] == ids[::-1]
    with pytest.raises(StoreError, match="no run 'nope'"):
        load(store, "nope")
    with pytest.raises(ValueError, match="unknown parts"):
        load(store, None, ("rows",))
    Store(tmp_path / "empty.db").close()
    with pytest.raises(ShiftbenchError, match="holds no runs"):
        load(tmp_path / "empty.db", ALL)


def test_records_still_read_as_mappings(store):
    """Readers not yet written against the attributes keep working: r["metric"], r.get(...), {**r}."""
    (row,) = load(store)[0].rows
    assert row["metric"] == "top1" and row.get("extra") == {"higher_is_better": True} and row.get("nope") is None
    assert {**row}["params"] == {"k": 1} and set(row.keys()) >= {"model", "shift", "metric", "value", "n"}
