"""The compact per-sample store (schema 2): values and ids round-trip exactly whatever their text, dtype and
shape; each distinct id list is stored once and read back as one shared list; a schema 1 store (and one
from before the samples table) reads exactly as before and is upgraded in place only when opened for
writing; a later schema is refused in one line; a finished condition keeps no batch states."""

from __future__ import annotations

import io
import json
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from shiftbench.condition import Condition
from shiftbench.errors import StoreError
from shiftbench.results import records
from shiftbench.results.codec import decode_values, encode_values, narrowest
from shiftbench.results.database import SCHEMA_VERSION
from shiftbench.results.store import Store

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def _marker(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT value FROM meta WHERE key = 'shiftbench_schema'").fetchone()[0]


# -- generated inputs -------------------------------------------------------------------------------------
finite = st.floats(allow_nan=False, allow_infinity=False)
float32_exact = st.floats(allow_nan=False, allow_infinity=False, width=32)


def _float32_exact(x: float) -> bool:
    with np.errstate(over="ignore"):
        return float(np.float32(x)) == x


not_float32 = finite.filter(lambda x: not _float32_exact(x))
any_text = st.text(st.characters(blacklist_categories=()), max_size=12)  # lone surrogates and NUL included
zero_one = st.sampled_from([0.0, 1.0])
elements = st.one_of(st.just(zero_one), st.just(float32_exact), st.just(finite), st.just(not_float32))


@st.composite
def per_sample(draw) -> tuple[list[str], np.ndarray]:
    """Unique ids of any text, and values of one of the shapes metrics use: (n,), (n, 2), (n, 2, k)."""
    ids = draw(st.lists(any_text, min_size=0, max_size=30, unique=True))
    tail = draw(st.sampled_from([(), (2,), (2, draw(st.integers(1, 4)))]))
    values = draw(hnp.arrays(np.float64, (len(ids), *tail), elements=draw(elements)))
    return ids, values


@SETTINGS
@given(values=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6),
                         elements=st.one_of(finite, zero_one, float32_exact, st.just(-0.0))))
def test_narrowest_and_the_codec_give_every_bit_back(values):
    narrow = narrowest(values)
    assert np.array_equal(_bits(narrow.astype(np.float64)), _bits(values))
    assert narrow.shape == values.shape
    if values.size and np.all(np.isin(_bits(values), _bits(np.array([0.0, 1.0])))):
        assert narrow.dtype == np.uint8
    elif values.size and all(_float32_exact(x) for x in values.ravel()):
        assert narrow.dtype in (np.uint8, np.float32)
    back = decode_values(encode_values(values))
    assert back.dtype == np.float64 and np.array_equal(_bits(back), _bits(values))
    assert decode_values(encode_values(values), dtype=None).dtype == narrow.dtype


def test_narrowest_never_rounds():
    assert narrowest([0.0, 1.0, 0.0]).dtype == np.uint8
    assert narrowest([0.0, 1.0, 255.0, 3.0]).dtype == np.uint8
    assert narrowest([-0.0, 1.0]).dtype == np.float32  # -0.0 keeps its sign bit
    assert narrowest([0.5, 1.0]).dtype == np.float32
    assert narrowest([0.1, 1.0]).dtype == np.float64  # 0.1 is not float32-exact
    assert narrowest([1e300]).dtype == np.float64
    assert narrowest([float("nan")]).dtype in (np.float32, np.float64)  # a NaN stays a NaN
    assert np.isnan(decode_values(encode_values([float("nan")]))[0])


@SETTINGS
@given(records_in=st.lists(per_sample(), min_size=1, max_size=4))
def test_per_sample_values_round_trip_through_the_store(records_in):
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "r.db")
        run = store.start_run({"t": 1}, seed=0)
        for c, (ids, values) in enumerate(records_in):
            cid = store.condition(run, Condition("m", "d", "s", {"c": c}, 1))
            assert store.finish_condition(cid, {"m1": (0.5, len(ids)), "m2": (0.5, len(ids))},
                                          samples={"m1": ("mean", ids, values), "m2": ("ece:15", ids, values)})
        got = store.samples(run)
        narrow = store.samples(run, dtype=None)
        streamed = list(store.iter_samples(run))
        store.close()
    assert len(got) == 2 * len(records_in)
    for c, (ids, values) in enumerate(records_in):
        for i, metric in enumerate(("m1", "m2")):
            d, n, s = got[2 * c + i], narrow[2 * c + i], streamed[2 * c + i]
            assert (d["params"], d["metric"], d["kind"]) == ({"c": c}, metric, "mean" if i == 0 else "ece:15")
            assert d["ids"] == ids
            assert d["values"].dtype == np.float64 and d["values"].shape == values.shape
            assert np.array_equal(_bits(d["values"]), _bits(values))
            assert n["values"].dtype == narrowest(values).dtype
            assert np.array_equal(_bits(n["values"]), _bits(values))
            assert s["ids"] == d["ids"] and np.array_equal(_bits(s["values"]), _bits(values))
        assert got[2 * c]["ids"] is got[2 * c + 1]["ids"]  # one list object per distinct list


# -- one list per distinct id list -------------------------------------------------------------------------
def _run_with_shared_ids(db: Path, conditions: int = 5, n: int = 50) -> str:
    store = Store(db)
    run = store.start_run({"t": 2}, seed=0)
    ids = [f"img/{i:05d}.png" for i in range(n)]
    rng = np.random.default_rng(0)
    for c in range(conditions):
        cid = store.condition(run, Condition("m", "d", "noise", {}, c + 1))
        correct = (rng.random(n) < 0.5).astype(float)
        pairs = np.stack([rng.random(n), correct], axis=1)
        store.finish_condition(cid, {"top1": (correct.mean(), n), "ece": (0.1, n)},
                               samples={"top1": ("mean", ids, correct), "ece": ("ece:15", ids, pairs)})
    cid = store.condition(run, Condition("m", "d", "clean", {}, 0))  # fewer samples: another list
    store.finish_condition(cid, {"top1": (1.0, 3)}, samples={"top1": ("mean", ids[:3], np.ones(3))})
    store.close()
    return run


def test_an_id_list_is_stored_once_and_loaded_as_one_object(tmp_path):
    db = tmp_path / "r.db"
    run = _run_with_shared_ids(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM sample_ids").fetchone()[0] == 2
        assert conn.execute("SELECT COUNT(DISTINCT ids) FROM samples").fetchone()[0] == 2
        (top1,) = conn.execute("SELECT length(data) FROM samples WHERE metric = 'top1' LIMIT 1").fetchone()
    assert top1 < 50 * 8 / 2  # 0/1 values as compressed uint8, not float64
    (loaded,) = records.load(db, run, parts=("samples",))
    assert len(loaded.samples) == 11
    lists = {id(s.ids) for s in loaded.samples}
    assert len(lists) == 2  # 11 records, 2 list objects
    # numpy arrays in the stored dtype (right/wrong as uint8), the values exactly as written
    assert {s.values.dtype for s in loaded.samples if s.metric == "top1"} == {np.dtype(np.uint8)}
    assert all(isinstance(s.values, np.ndarray) for s in loaded.samples)
    ece = [s for s in loaded.samples if s.metric == "ece"]
    assert all(s.values.shape == (50, 2) for s in ece)


def test_iter_samples_and_iter_predictions_stream_what_the_lists_hold(tmp_path):
    db = tmp_path / "r.db"
    store = Store(db)
    run = store.start_run({"t": 3}, seed=0)
    for c in range(3):
        cid = store.condition(run, Condition("m", "d", "s", {"k": c}, 1))
        store.save_batch(cid, 0, {"n": 2}, predictions=[("b", {"pred": c}), ("a", {"pred": [c, "x"]})])
        store.finish_condition(cid, {"top1": (0.5, 2)}, samples={"top1": ("mean", ["a", "b"], [1.0, 0.0])})
    stream = store.iter_predictions(run)
    assert next(stream) == store.predictions(run)[0]  # lazy: a cursor, read one at a time
    stream.close()
    assert list(store.iter_predictions(run)) == store.predictions(run)
    assert [p["sample_id"] for p in store.iter_predictions(run)] == ["a", "b"] * 3
    listed, streamed = store.samples(run), list(store.iter_samples(run))
    assert [{**d, "values": d["values"].tolist()} for d in listed] == \
        [{**d, "values": d["values"].tolist()} for d in streamed]
    assert list(store.iter_samples("no-such-run")) == [] and list(store.iter_predictions("no-such-run")) == []
    store.close()


# -- older stores ------------------------------------------------------------------------------------------
def _npy64(values) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(values, dtype=np.float64), allow_pickle=False)
    return buffer.getvalue()


def _schema1_store(db: Path, with_samples: bool = True) -> tuple[str, dict[int, tuple[list[str], np.ndarray]]]:
    """A store as schema 1 wrote it: the marker 1, no sample_ids table, samples rows holding the ids as a
    JSON list and float64 .npy bytes (or, ``with_samples`` False, no samples table at all)."""
    store = Store(db)
    run = store.start_run({"t": "old"}, seed=0)
    written = {}
    ids = ["caf\u00e9/\u732b.png", "b\"q\\uote", "\U0001f600"]
    for c, values in enumerate([np.array([1.0, 0.0, 1.0]), np.array([[0.1, 1.0], [0.7, 0.0], [1 / 3, 1.0]])]):
        cid = store.condition(run, Condition("m", "d", "s", {}, c + 1))
        store.save_batch(cid, 0, {"n": 3})
        store.finish_condition(cid, {"top1": (0.5, 3)})
        written[cid] = (ids, values)
    store.close()
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE sample_ids")
        if with_samples:
            for cid, (sid, values) in written.items():
                conn.execute("INSERT INTO samples (condition_id, metric, kind, ids, data) VALUES (?, ?, ?, ?, ?)",
                             (cid, "top1", "mean", json.dumps(sid, separators=(",", ":")), _npy64(values)))
        else:
            conn.execute("DROP TABLE samples")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'shiftbench_schema'")
        conn.execute("INSERT INTO batches (condition_id, batch, state) VALUES (?, 0, ?)",
                     (next(iter(written)), json.dumps({"n": 3})))  # a schema 1 batch state: JSON text
    return run, written


def test_a_schema_1_store_reads_exactly_and_is_upgraded_only_by_a_writer(tmp_path):
    db = tmp_path / "old.db"
    run, written = _schema1_store(db)
    before = db.read_bytes()
    (loaded,) = records.load(db, run, parts=("samples",))  # a reader: exact values, nothing written
    assert db.read_bytes() == before and _marker(db) == "1"
    assert loaded.keeps_samples and len(loaded.samples) == 2
    for s, (ids, values) in zip(loaded.samples, written.values()):
        assert s.ids == ids and np.array_equal(_bits(s.values), _bits(values))
    assert loaded.samples[0].ids is loaded.samples[1].ids
    with Store(db, create=False) as reader:
        assert reader.batches(next(iter(written))) == {0: {"n": 3}}

    store = Store(db)  # a writer upgrades in place: the marker moves, the old rows keep their bytes
    assert _marker(db) == SCHEMA_VERSION == "2"
    cid = store.condition(run, Condition("m", "d", "s", {}, 3))
    ids, values = written[next(iter(written))]
    store.finish_condition(cid, {"top1": (0.5, 3)}, samples={"top1": ("mean", ids, values)})
    got = store.samples(run)
    store.close()
    assert [d["ids"] for d in got] == [ids] * 3
    assert all(np.array_equal(_bits(d["values"]), _bits(v)) for d, (_, v) in zip(got, written.values()))
    assert got[0]["ids"] is got[2]["ids"]  # a schema 1 list and the same list stored by schema 2: one object
    with sqlite3.connect(db) as conn:
        kinds = [row[0][:1] for row in conn.execute("SELECT ids FROM samples ORDER BY condition_id")]
    assert kinds[:2] == ["[", "["] and kinds[2] != "["  # old rows as they were, the new one by digest


def test_a_store_from_before_per_sample_values_reads_as_having_none(tmp_path):
    db = tmp_path / "older.db"
    run, _ = _schema1_store(db, with_samples=False)
    (loaded,) = records.load(db, run, parts=("samples", "results"))
    assert not loaded.keeps_samples and loaded.samples == [] and len(loaded.rows) == 2
    assert _marker(db) == "1"
    Store(db).close()  # opened for writing: both tables added, marker moved
    with Store(db, create=False) as reader:
        assert reader.keeps_samples() and reader.samples(run) == []
    assert _marker(db) == "2"


@pytest.mark.parametrize("create", [True, False], ids=["writer", "reader"])
def test_a_later_schema_is_refused_in_one_line(tmp_path, create):
    db = tmp_path / "new.db"
    Store(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'shiftbench_schema'")
    before = db.read_bytes()
    with pytest.raises(StoreError, match=r"new\.db: store schema 3 is not supported \(this version reads schema 1 and 2"):
        Store(db, create=create)
    assert db.read_bytes() == before


def test_a_damaged_reference_is_one_store_error(tmp_path):
    db = tmp_path / "r.db"
    run = _run_with_shared_ids(db, conditions=1)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM sample_ids")
    with Store(db, create=False) as reader, pytest.raises(StoreError, match="damaged: no sample id list"):
        reader.samples(run)


# -- the batches rule --------------------------------------------------------------------------------------
def test_a_finished_condition_keeps_no_batches_and_only_those_go(tmp_path):
    store = Store(tmp_path / "b.db")
    run = store.start_run({"t": 4}, seed=0)
    done, open_ = (store.condition(run, Condition("m", "d", "s", {}, s)) for s in (1, 2))
    for cid in (done, open_):
        for b in range(3):
            assert store.save_batch(cid, b, {"b": b, "ids": [f"x{b}"]}, predictions=[(f"x{b}", {"p": b})])
    assert not store.save_batch(done, 1, {"b": 9})  # already saved: nothing written
    assert store.batches(done) == {b: {"b": b, "ids": [f"x{b}"]} for b in range(3)}
    assert store.finish_condition(done, {"top1": (1.0, 3)}, samples={"top1": ("mean", ["x0", "x1", "x2"], [1, 1, 1])})
    assert store.batches(done) == {}
    assert store.batches(open_) == {b: {"b": b, "ids": [f"x{b}"]} for b in range(3)}  # still resumable
    assert not store.save_batch(done, 5, {"b": 5})  # a late batch of a finished condition: nothing written
    assert store.batches(done) == {}
    assert [p["sample_id"] for p in store.predictions(run)] == ["x0", "x1", "x2"] * 2  # predictions stay
    assert [r["metric"] for r in store.rows(run)] == ["top1"] and len(store.samples(run)) == 1
    with pytest.raises(StoreError, match="is finished"):
        store.clear_batches(done)
    assert store.clear_batches(open_) == 3 and store.batches(open_) == {}
    store.close()
