"""The runner's metric state in the store: each batch saves its own state (not the running total), a condition's
rows are the merge of its batches, a resume merges the saved batches, and a partial condition saved in the
old cumulative format is recomputed, never mis-merged."""

from __future__ import annotations

import json
import logging
import sqlite3

import numpy as np
import pytest

import shiftbench as sb
import tiny_registry  # noqa: F401
from shiftbench.datasets.base import Dataset
from shiftbench.engine.kernel import STATE_FORMAT, STATE_FORMAT_KEY
from shiftbench.registry import DATASETS, METRICS
from shiftbench.results.codec import decode_state, encode_state
from shiftbench.results.store import Store

from conftest import make_sample

SPEC = {
    "dataset": "_test_tiny",
    "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
    "shifts": ["clean", {"name": "_test_noise", "severities": [2, 4]}],
    "metrics": ["top1", "ece"],
    "seed": 0,
    "batch_size": 6,
}


class _Boxes(Dataset):
    """12 images with one box each: detection through the runner."""

    name = "_test_state_boxes"

    def __len__(self) -> int:
        return 12

    def load(self, i: int):
        return make_sample(40, 48, seed=i, sid=f"b{i}").replace(label=i % 2, box_labels=np.array([i % 2]))


if _Boxes.name not in DATASETS:
    DATASETS.add(_Boxes.name, _Boxes)


def _exact(rows):
    return sorted((r["model"], r["shift"], r["severity"], r["metric"], r["value"], r["n"]) for r in rows)


def _conditions(db) -> dict[int, tuple[str, int, str]]:
    with sqlite3.connect(db) as conn:
        return {cid: (shift, severity, status) for cid, shift, severity, status in
                conn.execute("SELECT condition_id, shift, severity, status FROM conditions")}


class _Stop(Exception):
    pass


def _interrupted(spec, db, after: int) -> None:
    """Run until ``after`` batches are saved, then stop (as a kill would, between two batches)."""
    calls = []

    def on_batch(model, b):
        calls.append(b)
        if len(calls) == after:
            raise _Stop

    with pytest.raises(_Stop):
        sb.evaluate(spec, store=db, on_batch=on_batch)


def test_each_batch_saves_its_own_state_and_the_rows_are_their_merge(tmp_path):
    """Seen while the run is in flight (after each save): a finished condition keeps no batches."""
    db = tmp_path / "r.db"
    seen: dict[int, dict[int, object]] = {}

    def on_batch(model, b):  # called after the batch is saved, before its condition is finished
        with Store(db, create=False) as reader:
            for cid in _conditions(db):
                seen[cid] = {**seen.get(cid, {}), **reader.batches(cid)}

    rows = sb.evaluate(SPEC, store=db, on_batch=on_batch)
    store = Store(db)
    for cid, (shift, severity, status) in _conditions(db).items():
        assert status == "done" and store.batches(cid) == {}
        saved = seen[cid]
        assert sorted(saved) == [0, 1, 2, 3]
        assert all(state[STATE_FORMAT_KEY] == STATE_FORMAT for state in saved.values())
        # the state of each batch alone: 6, 6, 6 and the last 2 of 20 samples
        assert [decode_state(saved[b]["top1"])["n"] for b in range(4)] == [6, 6, 6, 2]
        for name in SPEC["metrics"]:
            total = METRICS.create(name)
            for b in range(4):
                total.merge_state(decode_state(saved[b][name]))
            value = [r["value"] for r in rows if r["shift"] == shift and r["severity"] == severity
                     and r["metric"] == name][0]
            assert total.compute()[name] == value


def test_detection_state_per_batch_does_not_grow(tmp_path):
    """Bytes written per batch stay flat: the old cumulative state made batch k about k times the first."""
    db = tmp_path / "d.db"
    spec = {"dataset": _Boxes.name, "models": [{"name": "dummy_detector", "params": {"label_space": 2}}],
            "shifts": ["clean"], "metrics": ["box_ap"], "batch_size": 3}
    saved: dict[int, object] = {}

    def on_batch(model, b):  # each batch's state as saved, read while the condition is in flight
        with Store(db, create=False) as reader:
            (cid,) = _conditions(db)
            saved.update(reader.batches(cid))

    rows = sb.evaluate(spec, store=db, on_batch=on_batch)
    sizes = [len(json.dumps(saved[b])) for b in sorted(saved)]
    assert len(sizes) == 4 and max(sizes) < 1.5 * min(sizes), sizes
    one = METRICS.create("box_ap")
    data, model = _Boxes(), sb.create_model("dummy_detector", label_space=2)
    samples = [data.load(i) for i in range(len(data))]
    one.update_from_samples(model.predict([s.image for s in samples]), samples)
    assert {r["metric"]: r["value"] for r in rows} == one.compute()


@pytest.mark.parametrize("spec", [SPEC, {"dataset": _Boxes.name, "batch_size": 5, "shifts": ["clean"],
                                         "models": [{"name": "dummy_detector", "params": {"label_space": 2}}],
                                         "metrics": ["box_ap"]}], ids=["classification", "detection"])
def test_resume_merges_the_saved_batches(tmp_path, spec):
    reference = sb.evaluate(spec, store=tmp_path / "ref.db")
    db = tmp_path / "r.db"
    _interrupted(spec, db, after=5 if spec is SPEC else 2)
    resumed = sb.evaluate(spec, store=db)
    assert _exact(resumed) == _exact(reference)
    assert len(Store(db).rows()) == len(reference)


def test_an_old_cumulative_partial_condition_is_recomputed_not_mis_merged(tmp_path, caplog):
    reference = sb.evaluate(SPEC, store=tmp_path / "ref.db")
    db = tmp_path / "old.db"
    _interrupted(SPEC, db, after=6)  # the first condition done, the second half-way
    store = Store(db)
    partial = [cid for cid, (_, _, status) in _conditions(db).items() if status != "done" and store.batches(cid)]
    assert partial
    with sqlite3.connect(db) as conn:  # rewrite those batches as the old runner saved them: running totals
        for cid in partial:
            saved = store.batches(cid)
            totals = {name: METRICS.create(name) for name in SPEC["metrics"]}
            for b in sorted(saved):
                for name, total in totals.items():
                    total.merge_state(decode_state(saved[b][name]))
                old = {name: encode_state(total.state_dict()) for name, total in totals.items()}
                conn.execute("UPDATE batches SET state = ? WHERE condition_id = ? AND batch = ?",
                             (json.dumps(old), cid, b))
    store.close()
    redone: dict[int, dict[int, object]] = {}

    def on_batch(model, b):  # the partial conditions' batches as the resume saves them again
        with Store(db, create=False) as reader:
            for cid in partial:
                redone.setdefault(cid, {}).update(reader.batches(cid))

    with caplog.at_level(logging.WARNING, logger="shiftbench"):
        resumed = sb.evaluate(SPEC, store=db, on_batch=on_batch)
    warnings = [r.getMessage() for r in caplog.records if "cumulative format" in r.getMessage()]
    assert len(warnings) == len(partial) and "recomputing this condition" in warnings[0]
    assert _exact(resumed) == _exact(reference)
    store = Store(db)
    for cid in partial:  # redone in the new format, every batch; dropped once the condition finished
        assert all(state[STATE_FORMAT_KEY] == STATE_FORMAT for state in redone[cid].values())
        assert sorted(redone[cid]) == [0, 1, 2, 3]
        assert store.is_done(cid) and store.batches(cid) == {}


def test_clear_batches_refuses_a_finished_condition(tmp_path):
    from shiftbench.errors import StoreError

    db = tmp_path / "r.db"
    sb.evaluate(SPEC, store=db)
    cid = next(iter(_conditions(db)))
    with pytest.raises(StoreError, match="is finished"):
        Store(db).clear_batches(cid)
