"""The per-sample exports at scale (docs/exports.md, "--format jsonl" and "--format parquet"): conditions written
once and named by number, lines read back (joined) equal to the store's per-sample values and predictions over
generated stores, short lines on a realistic store, the same bytes for the same store, streamed (memory flat in
the number of conditions), a progress callback per condition, and a one-line error without pyarrow."""

from __future__ import annotations

import json
import sys
import tracemalloc
from pathlib import Path
from unittest import mock

import jsonschema
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shiftbench as sb
from shiftbench.cli import main
from shiftbench.condition import params_key
from shiftbench.report import export as ex
from shiftbench.results.store import Condition, Store
from shiftbench.severity import canonical

LABEL = "dummy_classifier(label_space=[" + ", ".join(f"'c{c}'" for c in range(10)) + "], seed={})"


# -- readers: what docs/exports.md shows a user ------------------------------------------------------------

def read_jsonl(folder: Path) -> tuple[list[dict], list[dict]]:
    """samples.jsonl and predictions.jsonl, each line joined with its condition of conditions.jsonl; every line
    checked against its schema."""
    check = {part: jsonschema.Draft202012Validator(ex.schema("jsonl", part))
             for part in ("conditions", "samples", "predictions")}
    conditions = []
    for text in (folder / "conditions.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(text)
        check["conditions"].validate(record)
        assert record["condition"] == len(conditions)
        conditions.append(record)
    out = []
    for part in ("samples", "predictions"):
        lines = []
        for text in (folder / f"{part}.jsonl").read_text(encoding="utf-8").splitlines():
            line = json.loads(text)
            check[part].validate(line)
            lines.append({**conditions[line["condition"]], **line})
        out.append(lines)
    return out[0], out[1]


def read_parquet(folder: Path) -> tuple[list[dict], list[dict]]:
    """samples.parquet and predictions.parquet as rows, params parsed, every row checked against its schema."""
    out = []
    for part in ("samples", "predictions"):
        check = jsonschema.Draft202012Validator(ex.schema("parquet", part))
        table = pq.read_table(folder / f"{part}.parquet")
        assert json.loads(table.schema.metadata[b"shiftbench"]) == {
            "format": "shiftbench-samples", "format_version": 2, "table": part}
        rows = table.to_pylist()
        for row in rows:
            check.validate(row)
            row["params"] = json.loads(row["params"])
            if part == "samples":
                row["value"] = row["value"] if row["values"] is None else row["values"]
            else:
                row["prediction"] = json.loads(row["prediction"])
        out.append(rows)
    return out[0], out[1]


def regroup(lines: list[dict]) -> dict[tuple, tuple[list[str], list]]:
    """Sample lines back into the store's records: (model, dataset, shift, params, severity, metric, kind) ->
    (ids, values) in line order."""
    got: dict[tuple, tuple[list[str], list]] = {}
    for x in lines:
        key = (x["model"], x["dataset"], x["shift"], params_key(x["params"]), canonical(x["severity"]), x["metric"],
               x["kind"])
        ids, values = got.setdefault(key, ([], []))
        ids.append(x["sample_id"])
        values.append(x["value"])
    return got


def assert_round_trip(db: Path, run_id: str, samples: list[dict], predictions: list[dict]) -> None:
    with Store(db) as store:
        stored_samples, stored_predictions = store.samples(run_id), store.predictions(run_id)
    got = regroup(samples)
    stored_samples = [s for s in stored_samples if len(s["ids"])]  # a record of no samples has no line
    assert len(got) == len(stored_samples)
    for s in stored_samples:
        ids, values = got[(s["model"], s["dataset"], s["shift"], params_key(s["params"]), canonical(s["severity"]),
                           s["metric"], s["kind"])]
        assert ids == s["ids"]
        stored = np.asarray(s["values"], dtype=np.float64)
        width = int(np.prod(stored.shape[1:]))
        assert np.asarray(values, dtype=np.float64).reshape(len(ids), width).tobytes() == \
               stored.reshape(len(ids), width).tobytes()  # bit for bit (-0.0 included)
    assert [(p["model"], p["shift"], params_key(p["params"]), canonical(p["severity"]), p["sample_id"],
             p["prediction"]) for p in predictions] == \
           [(p["model"], p["shift"], params_key(p["params"]), canonical(p["severity"]), p["sample_id"],
             p["prediction"]) for p in stored_predictions]
    for p in predictions:
        said = p["prediction"].get("correct") if isinstance(p["prediction"], dict) else None
        assert p.get("correct") == (said if isinstance(said, bool) else None)


# -- generated stores ------------------------------------------------------------------------------------------

NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
CONDITIONS = st.lists(st.tuples(st.sampled_from(["clean", "fog", "gaussian_noise"]),
                                st.sampled_from([1, 2.5, 3]),
                                st.sampled_from([{}, {"scale": "level"}, {"k": [0.5, 2]}])),
                      min_size=1, max_size=4, unique_by=lambda c: (c[0], c[1] if c[0] != "clean" else 0,
                                                                   params_key(c[2])))
KINDS = {"top1": ("mean", ()), "ece": ("ece:15", (2,)), "miou": ("iou", (2, 3))}


@st.composite
def stores(draw):
    """A run as evaluate leaves it: conditions of one or two models, metrics of three value shapes (one number,
    a pair, a (2, C) array), ids of any text, and predictions for some samples (some conditions with
    predictions only: unfinished ones, which have no rows)."""
    models = draw(st.lists(NAMES, min_size=1, max_size=2, unique=True))
    ids = draw(st.lists(NAMES, min_size=0, max_size=6, unique=True))
    metrics = draw(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=3, unique=True))
    conditions = draw(CONDITIONS)
    plan = []
    for model in models:
        for shift, severity, params in conditions:
            severity = 0 if shift == "clean" else severity
            finished = draw(st.booleans()) or not plan
            values = {m: draw(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64),
                                       min_size=len(ids) * int(np.prod(KINDS[m][1], dtype=int)),
                                       max_size=len(ids) * int(np.prod(KINDS[m][1], dtype=int))))
                      for m in metrics}
            said = [(i, {"pred": k, "correct": draw(st.booleans()), "name": draw(NAMES)})
                    for k, i in enumerate(ids) if draw(st.booleans())]
            plan.append((Condition(model, "data/" + draw(NAMES), shift, params, severity), finished, values, said))
    return ids, metrics, plan


def write_generated(db: Path, ids: list[str], metrics: list[str], plan: list) -> str:
    store = Store(db)
    run = store.start_run({"dataset": "generated", "models": []}, seed=0)
    for cond, finished, values, said in plan:
        cid = store.condition(run, cond)
        store.save_batch(cid, 0, {"n": len(ids)}, predictions=said or None)
        if finished:
            per_sample = {m: (KINDS[m][0], ids, np.asarray(values[m], dtype=np.float64).reshape(len(ids), *KINDS[m][1]))
                          for m in metrics}
            store.finish_condition(cid, {m: (0.5, len(ids)) for m in metrics}, samples=per_sample)
    store.finish_run(run)
    store.close()
    return run


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(generated=stores(), rows_per_group=st.sampled_from([1, 5, ex.ROW_GROUP_ROWS]))
def test_both_formats_read_back_equal_to_the_stores_values_and_predictions(tmp_path_factory, generated,
                                                                           rows_per_group):
    """promise: a per-sample export read back (joined on its condition numbers) is the store's per-sample values
    bit for bit, shapes kept, and its predictions in the store's order; Parquet's row groups change no row."""
    place = tmp_path_factory.mktemp("round")
    db = place / "r.db"
    run = write_generated(db, *generated)
    with mock.patch.object(ex, "ROW_GROUP_ROWS", rows_per_group):
        ex.export_store(db, place / "jsonl", "jsonl")
        ex.export_store(db, place / "parquet", "parquet")
    samples, predictions = read_jsonl(place / "jsonl")
    assert_round_trip(db, run, samples, predictions)
    rows, said = read_parquet(place / "parquet")
    assert_round_trip(db, run, rows, said)
    # the same condition numbers in both formats, and the same conditions behind them
    assert [(x["condition"], x["sample_id"]) for x in samples] == [(x["condition"], x["sample_id"]) for x in rows]
    conditions = {x["condition"]: {k: x[k] for k in ("run", "model", "dataset", "shift", "params")} for x in samples}
    assert conditions == {x["condition"]: {k: x[k] for k in ("run", "model", "dataset", "shift", "params")}
                          for x in rows}


# -- a realistic store: short lines, the same bytes, flat memory -----------------------------------------------

COMMON_15 = ["gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur",
             "zoom_blur", "snow", "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate",
             "jpeg_compression"]


def realistic_store(db: Path, n: int = 40, models: int = 4, shifts: list[str] | None = None) -> str:
    """What `shiftbench evaluate` of 4 dummy classifiers over clean + 15 corruptions x 5 severities with top1 and
    ECE leaves (long model labels, a dataset path, class-folder sample ids, predictions for every sample)."""
    rng = np.random.default_rng(0)
    ids = [f"c{i % 10}/img{i:05d}.png" for i in range(n)]
    store = Store(db)
    run = store.start_run({"dataset": "/data/benchmarks/photos-2000", "models": []}, seed=0)
    grid = [("clean", 0)] + [(s, k) for s in (shifts or COMMON_15) for k in range(1, 6)]
    for m in range(models):
        for shift, severity in grid:
            cid = store.condition(run, Condition(LABEL.format(m), "/data/benchmarks/photos-2000", shift, {}, severity))
            confidence = rng.random(n)
            correct = (rng.random(n) < 0.3).astype(np.float64)
            said = [(i, {"confidence": round(float(c), 6), "correct": bool(k), "label": j % 10, "pred": 2,
                         "pred_name": "c2", "top5": [2, 5, 1, 3, 7]})
                    for j, (i, c, k) in enumerate(zip(ids, confidence, correct))]
            store.save_batch(cid, 0, {"n": n}, predictions=said)
            store.finish_condition(cid, {"top1": (float(correct.mean()), n), "ece": (0.1, n)},
                                   samples={"top1": ("mean", ids, correct),
                                            "ece": ("ece:15", ids, np.stack([confidence, correct], axis=1))})
    store.finish_run(run)
    store.close()
    return run


@pytest.fixture(scope="module")
def realistic(tmp_path_factory):
    db = tmp_path_factory.mktemp("realistic") / "r.db"
    return db, realistic_store(db)


def test_lines_are_short_on_a_realistic_store(realistic, tmp_path):
    """promise: on a run with long model labels and a dataset path, a line of samples.jsonl and of
    predictions.jsonl stays within 200 bytes: the condition is written once, in conditions.jsonl."""
    db, run = realistic
    done = ex.export_store(db, tmp_path / "jl", "jsonl")
    assert done.files == ["conditions.jsonl", "predictions.jsonl", "samples.jsonl"]
    for name in ("samples.jsonl", "predictions.jsonl"):
        lengths = [len(line) for line in (tmp_path / "jl" / name).read_bytes().splitlines(keepends=True)]
        assert lengths and max(lengths) <= 200, (name, max(lengths))
    conditions = (tmp_path / "jl" / "conditions.jsonl").read_text().splitlines()
    assert len(conditions) == 4 * 76 and all(LABEL.format(0)[:30] in c for c in conditions)
    samples, predictions = read_jsonl(tmp_path / "jl")
    assert len(samples) == 4 * 76 * 2 * 40 and len(predictions) == 4 * 76 * 40
    assert_round_trip(db, run, samples, predictions)


def test_the_same_store_gives_the_same_bytes(realistic, tmp_path):
    """promise: deterministic output: the same store exported twice (into folders of different names, the
    store read from another path) gives byte-identical files, Parquet included (no timestamps)."""
    db, _ = realistic
    copy = tmp_path / "elsewhere" / "copy.db"
    copy.parent.mkdir()
    copy.write_bytes(db.read_bytes())
    for fmt in ("jsonl", "parquet"):
        first = ex.export_store(db, tmp_path / f"{fmt}-one", fmt)
        second = ex.export_store(copy, tmp_path / f"{fmt}-two", fmt)
        assert first.files == second.files
        for name in first.files:
            assert (tmp_path / f"{fmt}-one" / name).read_bytes() == (tmp_path / f"{fmt}-two" / name).read_bytes(), name


def test_parquet_columns_are_dictionary_encoded_and_row_groups_whole(realistic, tmp_path):
    db, _ = realistic
    with mock.patch.object(ex, "ROW_GROUP_ROWS", 1000):
        ex.export_store(db, tmp_path / "pq", "parquet")
    table = pq.read_table(tmp_path / "pq" / "samples.parquet")
    for name in ("run", "model", "dataset", "shift", "params", "metric", "kind"):
        assert str(table.schema.field(name).type) == "dictionary<values=string, indices=int32, ordered=0>"
    assert str(table.schema.field("values").type) == "list<element: double>"
    meta = pq.ParquetFile(tmp_path / "pq" / "samples.parquet").metadata
    # a row group holds whole (condition, metric) records (40 rows each) and at least ROW_GROUP_ROWS rows but the last
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(sizes) == 4 * 76 * 2 * 40 and all(s % 40 == 0 for s in sizes) and all(s >= 1000 for s in sizes[:-1])


def test_memory_stays_flat_as_conditions_grow(tmp_path):
    """promise: streamed: a jsonl export holds at most a condition's values at a time, never the lines: as the
    conditions grow fivefold, its peak memory (Python and numpy allocations) grows by a small fraction of the
    bytes written (what grows is the run's rows and the table of conditions, a few hundred bytes each)."""
    peaks, written = [], []
    for shifts in (COMMON_15[:3], COMMON_15):
        db = tmp_path / f"{len(shifts)}.db"
        realistic_store(db, n=200, models=2, shifts=shifts)
        tracemalloc.start()
        done = ex.export_store(db, tmp_path / f"out{len(shifts)}", "jsonl")
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        written.append(sum((done.out / name).stat().st_size for name in done.files))
    assert peaks[1] < 0.1 * written[1], (peaks, written)
    assert peaks[1] - peaks[0] < 0.1 * (written[1] - written[0]), (peaks, written)


def test_progress_is_called_once_per_condition(realistic, tmp_path):
    db, run = realistic
    for fmt in ("jsonl", "parquet"):
        calls = []
        ex.export_store(db, tmp_path / fmt, fmt, progress=lambda *a: calls.append(a))
        assert [(d, t) for d, t, _ in calls] == [(d, 4 * 76) for d in range(1, 4 * 76 + 1)]
        assert calls[0][2] == f"run {run}: model {LABEL.format(0)!r}, dataset '/data/benchmarks/photos-2000', clean"
    calls = []
    ex.export_store(db, tmp_path / "res", "results", progress=lambda *a: calls.append(a))
    assert calls == [(1, 1, f"run {run}")]


# -- the user's path: sb.evaluate -> store -> shiftbench export --format parquet ---------------------------------

def test_an_evaluate_run_exports_as_parquet_through_the_cli(tmp_path, capsys):
    spec = {"dataset": "objects", "models": ["dummy_classifier"], "metrics": ["top1", "ece"], "limit": 3,
            "log_samples": True,
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [1, 2.5]}, {"name": "fog", "severities": [3]}]}
    db = tmp_path / "r.db"
    sb.evaluate(spec, db)
    with Store(db) as store:
        run = store.run()["run_id"]
    code = main(["export", "--store", str(db), "--format", "parquet", "--out", str(tmp_path / "pq")])
    captured = capsys.readouterr()
    assert code == 0 and "Traceback" not in captured.err and [x for x in captured.err.splitlines() if x] == []
    assert "export parquet: 2 files of 1 run" in captured.out
    rows, predictions = read_parquet(tmp_path / "pq")
    assert len(rows) == 4 * 3 * 2 and len(predictions) == 4 * 3
    assert_round_trip(db, run, rows, predictions)
    assert {r["kind"] for r in rows} == {"mean", "ece:15"} and {r["severity"] for r in rows} == {0, 1, 2.5, 3}
    correct = {(p["condition"], p["sample_id"]): p["correct"] for p in predictions}
    assert all(r["value"] == float(correct[r["condition"], r["sample_id"]]) for r in rows if r["metric"] == "top1")
    # a later export into the same folder replaces its own files; the record names them
    assert main(["export", "--store", str(db), "--format", "parquet", "--out", str(tmp_path / "pq")]) == 0
    record = json.loads((tmp_path / "pq" / ex.EXPORT_RECORD).read_text())
    assert record["files"] == ["predictions.parquet", "samples.parquet"]
    assert record["names"]["samples.parquet"] == {"runs": [run], "format": "shiftbench-samples", "format_version": 2}


def test_without_pyarrow_parquet_is_one_line_naming_the_install_command(tmp_path, capsys, realistic, monkeypatch):
    """promise: a missing optional package is one error line with the command that installs it, and no --out
    folder left behind; jsonl needs no pyarrow."""
    db, _ = realistic
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError, as when not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    code = main(["export", "--store", str(db), "--format", "parquet", "--out", str(tmp_path / "pq")])
    err = [x for x in capsys.readouterr().err.splitlines() if x]
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: export --format parquet needs pyarrow: pip install") and "[stream]" in err[0]
    assert not (tmp_path / "pq").exists()
    assert ex.export_store(db, tmp_path / "jl", "jsonl").files  # the JSON lines need no pyarrow


def test_what_a_store_lacks_is_said_alike_in_both_formats(tmp_path):
    """promise: the notes of the per-sample formats say the same lacks, each naming its own files."""
    db = tmp_path / "p.db"
    store = Store(db)
    run = store.start_run({"dataset": "objects"}, seed=0)
    cid = store.condition(run, Condition("m", "objects", "clean", {}, 0))
    store.save_batch(cid, 0, {"n": 2}, predictions=[("a", {"pred": 1, "correct": True})])
    store.finish_condition(cid, {"top1": (0.5, 2)})
    store.finish_run(run)
    store.close()
    said = {fmt: ex.export_store(db, tmp_path / fmt, fmt).notes for fmt in ("jsonl", "parquet")}
    assert said["jsonl"] == [f"run {run}: no per-sample values: the run was written by an older shiftbench (it has "
                             "no run identity either), before they were kept: its predictions only "
                             "(predictions.jsonl), nothing in samples.jsonl"]
    assert said["parquet"] == [said["jsonl"][0].replace(".jsonl", ".parquet")]
