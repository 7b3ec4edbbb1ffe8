"""``shiftbench export``: RobustBench's corruption layout, per-sample JSON lines and one results JSON per run,
each valid under the JSON Schema shipped with shiftbench and read back into the store's own numbers; stores of
an older shiftbench exported with one note per thing they lack; bad input one line and exit status 2; nothing
half-written (docs/exports.md)."""

from __future__ import annotations

import csv
import doctest
import io
import json
import sqlite3
from collections import defaultdict
from pathlib import Path
from unittest.mock import ANY

import jsonschema
import numpy as np
import pytest

from samples_synth import synthetic_samples
from shiftbench.cli import main
from shiftbench.files import file_stem, is_temp
from shiftbench.metrics.robustness import IMAGENET_C_CORRUPTIONS
from shiftbench.metrics.uncertainty import sample_statistic
from shiftbench.report import build_report
from shiftbench.report import export as ex
from shiftbench.report.tables import condition_label, severity_row
from shiftbench.results.store import Condition, Store, params_key

COMMON = tuple(IMAGENET_C_CORRUPTIONS)


# -- helpers ---------------------------------------------------------------------------------------------

def write_store(db: Path, samples: list[dict], rows: list[dict], spec: dict, **run_kw) -> str:
    """A store holding ``rows`` (their per-sample values from ``samples`` unless None), as evaluate leaves it."""
    store = Store(db)
    run = store.start_run(spec, seed=0, **run_kw)
    by_cond = defaultdict(dict)
    for s in samples or []:
        by_cond[(s["model"], s["shift"], params_key(s["params"]), s["severity"])][s["metric"]] = \
            (s["kind"], s["ids"], s["values"])
    results = defaultdict(dict)
    for r in rows:
        key = (r["model"], r["shift"], params_key(r["params"]), r["severity"])
        results[key][r["metric"]] = (r["value"], r["n"], {"higher_is_better": r["metric"] != "ece", "metric": r["metric"]})
    for (model, shift, pk, severity), res in results.items():
        cid = store.condition(run, Condition(model, "objects", shift, json.loads(pk), severity))
        store.finish_condition(cid, res, samples=by_cond.get((model, shift, pk, severity)) if samples else None)
    store.finish_run(run)
    store.close()
    return run


def validator(fmt: str, part: str | None = None) -> jsonschema.Draft202012Validator:
    found = ex.schema(fmt, part)
    jsonschema.Draft202012Validator.check_schema(found)
    return jsonschema.Draft202012Validator(found)


def export(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["export", *args])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("note: ")]


def read_csv(path: Path) -> tuple[list[tuple[str, int]], dict[str, list[float | None]]]:
    """unaggregated_results.csv as RobustBench's shape says: two header rows, then one row per model."""
    lines = list(csv.reader(io.StringIO(path.read_text())))
    names, severities, *body = lines
    assert names[0] == "" and severities[0] == "" and len(names) == len(severities)
    columns = [(c, int(s)) for c, s in zip(names[1:], severities[1:])]
    assert all(len(row) == len(names) for row in body)
    return columns, {row[0]: [float(v) if v else None for v in row[1:]] for row in body}


def joined_jsonl(folder: Path, name: str = "samples.jsonl") -> list[dict]:
    """Lines of ``name`` with their condition's fields from conditions.jsonl (the join docs/exports.md shows),
    each line and condition checked against its schema."""
    check = {part: validator("jsonl", part) for part in ("conditions", "samples", "predictions")}
    conditions = {}
    for number, text in enumerate((folder / "conditions.jsonl").read_text().splitlines()):
        record = json.loads(text)
        check["conditions"].validate(record)
        assert record["condition"] == number  # numbered in file order
        conditions[number] = record
    out = []
    for text in (folder / name).read_text().splitlines():
        line = json.loads(text)
        check[name.split(".")[0]].validate(line)
        out.append({**conditions[line["condition"]], **line})
    return out


def files_of(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


SMALL_SPEC = {"dataset": "objects", "models": ["m_a", "m_b"], "metrics": ["top1", "ece"], "seed": 0}


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    """Two models, clean + gaussian_noise 1, 3, 5 + background_color, top1 and ECE with per-sample values."""
    samples, rows = synthetic_samples(models=("m_a", "m_b"), n=48, metrics=(("top1", "mean"), ("ece", "ece:15")),
                                      missing={})
    db = tmp_path_factory.mktemp("small") / "r.db"
    run = write_store(db, samples, rows, SMALL_SPEC, versions={"numpy": np.__version__},
                      identity={"shiftbench": "0.1.0", "models": {"m_a": {"weights": "ab" * 32, "from": "files",
                                                                          "files": ["m_a.safetensors"]},
                                                                  "m_b": {"weights": None, "from": "none"}},
                                "dataset": {"name": "objects", "samples": 48, "sample_ids": "cd" * 32}, "ids": None})
    return db, run


# -- the three formats on a real evaluate run, through the CLI ------------------------------------------------

def test_the_cli_exports_a_real_evaluate_run_in_every_format(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("dataset: objects\nmodels: [dummy_classifier]\nmetrics: [top1, ece]\nlimit: 3\n"
                    "shifts: [clean, {name: gaussian_noise, severities: 1-2:0.5}, {name: fog, severities: [3]}]\n")
    db = tmp_path / "r.db"
    assert main(["evaluate", "--config", str(spec), "--store", str(db), "--log-samples"]) == 0
    capsys.readouterr()
    with Store(db) as store:
        rows, run = store.rows(), store.run()
        samples, predictions = store.samples(run["run_id"]), store.predictions(run["run_id"])

    # results: every row, with the store's values and n
    code, out, err = export(capsys, "--store", str(db), "--format", "results", "--out", str(tmp_path / "res"))
    assert code == 0 and notes(err) == [] and "export results: 1 file of 1 run" in out
    doc = json.loads((tmp_path / "res" / f"{run['run_id']}.json").read_text())
    validator("results").validate(doc)
    assert [(r["model"], r["shift"], r["severity"], r["metric"], r["value"], r["n"]) for r in doc["rows"]] == \
           [(r["model"], r["shift"], r["severity"], r["metric"], r["value"], r["n"]) for r in rows]
    assert {type(r["severity"]) for r in doc["rows"] if r["severity"] == 1.5} == {float}
    assert all(r["ci95"] is not None for r in doc["rows"])
    prov = doc["provenance"]
    assert prov["spec"] == run["spec"] and prov["versions"] == run["versions"] and prov["seed"] == 0
    assert prov["weights"] == {"dummy_classifier": {"sha256": None, "from": "none"}}
    assert prov["dataset"]["name"] == "objects" and prov["dataset"]["samples"] == 3

    # jsonl: one line per sample, condition and metric; the predictions beside, joined by condition and sample
    code, out, err = export(capsys, "--store", str(db), "--format", "jsonl", "--out", str(tmp_path / "jl"))
    assert code == 0 and notes(err) == [] and "export jsonl: 3 files of 1 run" in out
    lines, said = joined_jsonl(tmp_path / "jl"), joined_jsonl(tmp_path / "jl", "predictions.jsonl")
    assert len(lines) == sum(len(s["ids"]) for s in samples) == 3 * len(rows)
    assert [(p["model"], p["shift"], p["severity"], p["sample_id"], p["prediction"]) for p in said] == \
           [(p["model"], p["shift"], p["severity"], p["sample_id"], p["prediction"]) for p in predictions]
    assert all(p["prediction"]["correct"] == p["correct"] for p in said)
    correct = {(p["condition"], p["sample_id"]): p["correct"] for p in said}
    assert all(line["value"] == float(correct[line["condition"], line["sample_id"]])
               for line in lines if line["metric"] == "top1")
    assert all(line["dataset"] == "objects" and line["run"] == run["run_id"] for line in lines + said)

    # robustbench: what exists of ImageNet-C, each omission said in one line
    code, out, err = export(capsys, "--store", str(db), "--format", "robustbench", "--out", str(tmp_path / "rb"))
    assert code == 0
    said = notes(err)
    assert any("severities 1.5 left out" in n for n in said), said
    assert any("corruptions_acc omitted: 0 of 15 corruptions have all of severities 1-5 (missing corruptions: "
               "shot_noise, motion_blur, snow" in n and "missing severities: 4, 5)" in n for n in said), said
    info = json.loads((tmp_path / "rb/model_info/objects/corruptions/dummy_classifier.json").read_text())
    validator("robustbench").validate(info)
    clean = next(r["value"] for r in rows if r["shift"] == "clean" and r["metric"] == "top1")
    assert info["clean_acc"] == f"{100 * clean:.2f}" and "corruptions_acc" not in info
    columns, table = read_csv(tmp_path / "rb/model_info/objects/corruptions/unaggregated_results.csv")
    assert columns == [("gaussian_noise", 1), ("gaussian_noise", 2), ("fog", 3)]  # RobustBench's order
    top1 = {(r["shift"], r["severity"]): r["value"] for r in rows if r["metric"] == "top1"}
    assert table == {"dummy_classifier": [top1[c] for c in columns]}


def test_robustbench_of_a_run_with_all_15_corruptions_at_5_severities(tmp_path, capsys):
    spec = tmp_path / "c.yaml"
    spec.write_text("dataset: objects\nmodels: [dummy_classifier]\nmetrics: [top1]\nlimit: 2\n"
                    "shifts: [clean, {name: common, severities: 1-5}]\n")
    db = tmp_path / "c.db"
    assert main(["evaluate", "--config", str(spec), "--store", str(db)]) == 0
    capsys.readouterr()
    code, out, err = export(capsys, "--store", str(db), "--format", "robustbench", "--out", str(tmp_path / "rb"))
    assert code == 0 and notes(err) == [], err
    folder = tmp_path / "rb/model_info/objects/corruptions"
    assert files_of(folder) == ["dummy_classifier.json", "unaggregated_results.csv"]
    info = json.loads((folder / "dummy_classifier.json").read_text())
    validator("robustbench").validate(info)
    assert list(info) == ["link", "name", "authors", "additional_data", "number_forward_passes", "dataset", "venue",
                          "architecture", "eps", "clean_acc", "reported", "corruptions_acc"]
    with Store(db) as store:
        rows = [r for r in store.rows() if r["metric"] == "top1"]
    cells = {(r["shift"], r["severity"]): r["value"] for r in rows}
    assert info["corruptions_acc"] == f"{100 * np.mean([v for k, v in cells.items() if k[0] != 'clean']):.2f}"
    columns, table = read_csv(folder / "unaggregated_results.csv")
    assert columns == [(c, s) for c in ex.ROBUSTBENCH_CORRUPTIONS for s in range(1, 6)]
    assert table == {"dummy_classifier": [cells[c] for c in columns]}


def test_robustbench_numbers_read_back_exactly(tmp_path, capsys):
    """Two models with varied accuracies over the whole protocol, a fractional severity and a background shift:
    the CSV's fractions are the store's floats to the last bit (also through pandas, as RobustBench reads it),
    the JSON's percentages their two-decimal strings; what is not RobustBench's is left out and said."""
    shifts = (("clean", {}, [0]), *((c, {}, [1, 2, 3, 4, 5]) for c in COMMON), ("background_color", {"color": "red"}, [1]))
    samples, rows = synthetic_samples(models=("m_a", "m_b:x/1"), n=20, metrics=(("top1", "mean"),), shifts=shifts,
                                      missing={})
    rows.append({**rows[1], "shift": "fog", "severity": 2.5, "value": 0.125})  # an in-between severity
    db = tmp_path / "r.db"
    write_store(db, samples, rows, {"dataset": "objects", "models": ["m_a", "m_b:x/1"], "metrics": ["top1"]})
    code, out, err = export(capsys, "--store", str(db), "--format", "robustbench", "--out", str(tmp_path / "rb"))
    assert code == 0
    assert len(notes(err)) == 2 and "severities 2.5 left out" in err and "background_color" in err
    folder = tmp_path / "rb/model_info/objects/corruptions"
    odd = file_stem("m_b:x/1")  # a name that is no file name: its slug and the hash of the whole name
    assert odd.startswith("m_b_x_1-") and len(odd) == len("m_b_x_1-") + 10
    assert files_of(folder) == ["m_a.json", f"{odd}.json", "unaggregated_results.csv"]
    record = json.loads((tmp_path / "rb" / ".shiftbench-export.json").read_text())
    assert record["names"][f"model_info/objects/corruptions/{odd}.json"] == {"run": ANY, "dataset": "objects",
                                                                            "model": "m_b:x/1"}
    columns, table = read_csv(folder / "unaggregated_results.csv")
    for model, stem in (("m_a", "m_a"), ("m_b:x/1", odd)):
        cells = {(r["shift"], r["severity"]): r["value"] for r in rows if r["model"] == model}
        assert table[stem] == [cells[c] for c in columns]  # exact: repr round-trips
        info = json.loads((folder / f"{stem}.json").read_text())
        validator("robustbench").validate(info)
        assert info["name"] == model and info["architecture"] == model
        assert info["clean_acc"] == f"{100 * cells[('clean', 0)]:.2f}"
        protocol = [cells[(c, s)] for c in COMMON for s in range(1, 6)]
        assert info["corruptions_acc"] == f"{100 * np.mean(protocol):.2f}"
    pd = pytest.importorskip("pandas")
    frame = pd.read_csv(folder / "unaggregated_results.csv", header=[0, 1], index_col=0)
    assert list(frame.index) == ["m_a", odd]
    assert [(c, int(s)) for c, s in frame.columns] == columns
    assert frame.to_numpy().tolist() == [table["m_a"], table[odd]]


def test_robustbench_corruptions_are_imagenet_cs_fifteen_and_the_doctests_run():
    assert sorted(ex.ROBUSTBENCH_CORRUPTIONS) == sorted(IMAGENET_C_CORRUPTIONS) and len(ex.ROBUSTBENCH_CORRUPTIONS) == 15
    assert doctest.testmod(ex).failed == 0


# -- round trips ---------------------------------------------------------------------------------------------

def test_results_rows_and_cis_are_the_stores_and_the_reports(small_store, tmp_path, capsys):
    db, run = small_store
    code, _, err = export(capsys, "--store", str(db), "--format", "results", "--out", str(tmp_path / "res"))
    assert code == 0 and notes(err) == []
    doc = json.loads((tmp_path / "res" / f"{run}.json").read_text())
    validator("results").validate(doc)
    with Store(db) as store:
        rows = store.rows(run)
    assert len(doc["rows"]) == len(rows)
    for got, want in zip(doc["rows"], rows):
        assert (got["model"], got["dataset"], got["shift"], got["params"], got["severity"], got["metric"]) == \
               (want["model"], want["dataset"], want["shift"], want["params"], want["severity"], want["metric"])
        assert got["value"] == want["value"] and got["n"] == want["n"]
        assert got["higher_is_better"] == (want["metric"] != "ece")
        assert (got["change"] is None) == (got["shift"] == "clean")
    # the report's per-severity cells carry the same intervals, changes and tests
    build_report(db, tmp_path / "report", run_id=run)
    report = {}
    with open(tmp_path / "report" / "tables.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            report[(r["metric"], r["condition"], r["model"])] = r
    compared = 0
    for row in doc["rows"]:
        label = "clean" if row["shift"] == "clean" else severity_row(condition_label(row["shift"], row["params"]),
                                                                       row["severity"])
        cell = report[(row["metric"], label, row["model"])]
        compared += 1
        assert float(cell["ci_low"]) == row["ci95"]["low"] and float(cell["ci_high"]) == row["ci95"]["high"]
        if row["change"] is not None:
            assert float(cell["change_ci_low"]) == row["change"]["ci95"]["low"]
            assert float(cell["change_ci_high"]) == row["change"]["ci95"]["high"]
            assert float(cell["p_value"]) == row["change"]["p_value"] and cell["test"] == row["change"]["test"]
    assert compared == len(doc["rows"]) == 20
    # failure points: top1 (higher is better, per-image values), never ECE
    points = doc["failure_points"]
    assert {(p["model"], p["shift"], p["metric"]) for p in points} == {("m_a", "gaussian_noise", "top1"),
                                                                       ("m_b", "gaussian_noise", "top1")}
    assert all(p["severities"] == [1, 3, 5] and len(p["curve"]) == 3 for p in points)
    assert doc["provenance"]["weights"]["m_a"] == {"sha256": "ab" * 32, "from": "files", "files": ["m_a.safetensors"]}


def test_jsonl_reads_back_into_the_stores_per_sample_values(small_store, tmp_path, capsys):
    db, run = small_store
    code, _, err = export(capsys, "--store", str(db), "--format", "jsonl", "--out", str(tmp_path / "jl"))
    assert code == 0
    assert notes(err) == [f"note: run {run}: no predictions (run without --log-samples): nothing in "
                          "predictions.jsonl for it"]
    assert (tmp_path / "jl" / "predictions.jsonl").read_text() == ""
    got = defaultdict(lambda: ([], []))
    for line in joined_jsonl(tmp_path / "jl"):
        assert line["run"] == run
        ids, values = got[(line["model"], line["dataset"], line["shift"], params_key(line["params"]),
                           line["severity"], line["metric"], line["kind"])]
        ids.append(line["sample_id"])
        values.append(line["value"])
    with Store(db) as store:
        samples, rows = store.samples(run), store.rows(run)
    assert len(got) == len(samples)
    for s in samples:
        ids, values = got[(s["model"], s["dataset"], s["shift"], params_key(s["params"]), s["severity"], s["metric"],
                           s["kind"])]
        assert ids == s["ids"] and np.array_equal(np.asarray(values, dtype=np.float64), s["values"])
    for r in rows:  # and the rows are the statistic of those values
        key = (r["model"], r["dataset"], r["shift"], params_key(r["params"]), r["severity"], r["metric"])
        kind = "mean" if r["metric"] == "top1" else "ece:15"
        assert sample_statistic(kind, np.asarray(got[(*key, kind)][1])) == pytest.approx(r["value"], abs=1e-12)


def test_several_runs_and_all(tmp_path, capsys):
    samples, rows = synthetic_samples(models=("m_a",), n=8, metrics=(("top1", "mean"),))
    db = tmp_path / "r.db"
    first = write_store(db, samples, rows, {**SMALL_SPEC, "models": ["m_a"], "metrics": ["top1"]})
    second = write_store(db, samples, rows, {**SMALL_SPEC, "models": ["m_a"], "metrics": ["top1"], "seed": 1})
    code, _, _ = export(capsys, "--store", str(db), "--format", "results", "--out", str(tmp_path / "one"))
    assert code == 0 and files_of(tmp_path / "one") == [".shiftbench-export.json", f"{second}.json"]
    code, out, _ = export(capsys, "--store", str(db), "--format", "results", "--out", str(tmp_path / "all"), "--all")
    assert code == 0 and "2 files of 2 runs" in out
    assert files_of(tmp_path / "all") == sorted([".shiftbench-export.json", f"{first}.json", f"{second}.json"])
    code, _, _ = export(capsys, "--store", str(db), "--format", "robustbench", "--out", str(tmp_path / "rb"),
                        "--run-id", first, "--run-id", second)
    assert code == 0
    assert {f.split("/")[0] for f in files_of(tmp_path / "rb")} == {".shiftbench-export.json", first, second}
    code, _, _ = export(capsys, "--store", str(db), "--format", "jsonl", "--out", str(tmp_path / "jl"), "--all")
    runs = {line["run"] for line in joined_jsonl(tmp_path / "jl")}
    assert code == 0 and runs == {first, second}


# -- older stores ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ex.FORMATS)
def test_a_store_of_an_older_shiftbench_exports_with_a_note_per_lack(tmp_path, capsys, fmt):
    """No per-sample values (the table itself absent), no run identity, no versions: each said in one line."""
    _, rows = synthetic_samples(models=("m_a",), n=8, metrics=(("top1", "mean"),))
    db = tmp_path / "old.db"
    run = write_store(db, None, rows, {**SMALL_SPEC, "models": ["m_a"], "metrics": ["top1"]})
    with sqlite3.connect(db) as con:  # as an older shiftbench left it
        con.execute("DROP TABLE samples")
    con.close()
    code, out, err = export(capsys, "--store", str(db), "--format", fmt, "--out", str(tmp_path / "x"))
    assert code == 0, err
    said = notes(err)
    assert all(n.count("\n") == 0 for n in said) and len(said) == len(set(said))
    if fmt == "results":
        doc = json.loads((tmp_path / "x" / f"{run}.json").read_text())
        validator("results").validate(doc)
        assert len(said) == 3 and doc["notes"] == [n[len("note: "):] for n in said]
        assert "no per-sample values" in said[0] and "no run identity" in said[1] and "no package versions" in said[2]
        assert all(r["ci95"] is None and r["change"] is None for r in doc["rows"]) and doc["failure_points"] == []
        assert doc["provenance"]["weights"] is None and doc["provenance"]["dataset"] is None
        assert [r["value"] for r in doc["rows"]] == [r["value"] for r in rows]
    elif fmt in ("jsonl", "parquet"):
        if fmt == "jsonl":
            assert (tmp_path / "x" / "samples.jsonl").read_text() == ""
            conditions = joined_jsonl(tmp_path / "x", "conditions.jsonl")
            assert len(conditions) == len({(r["shift"], r["severity"]) for r in rows})
        else:
            import pyarrow.parquet as pq
            assert pq.read_table(tmp_path / "x" / "samples.parquet").num_rows == 0
        assert len(said) == 2 and "no per-sample values" in said[0] and ": no lines" in said[0]
    else:
        others = ", ".join(c for c in ex.ROBUSTBENCH_CORRUPTIONS if c != "gaussian_noise")
        assert said == [f"note: run {run}: shifts outside ImageNet-C's 15 corruptions left out: background_color",
                        f"note: run {run}: m_a: corruptions_acc omitted: 0 of 15 corruptions have all of severities "
                        f"1-5 (missing corruptions: {others}; missing severities: 2, 4)"]


def test_predictions_without_per_sample_values_still_give_lines(tmp_path, capsys):
    db = tmp_path / "p.db"
    store = Store(db)
    run = store.start_run({"dataset": "objects"}, seed=0)
    cid = store.condition(run, Condition("m", "objects", "clean", {}, 0))
    store.save_batch(cid, 0, {"n": 2}, predictions=[("a", {"pred": 1, "correct": True}), ("b", {"pred": 0, "correct": False})])
    store.finish_condition(cid, {"top1": (0.5, 2)})
    store.close()
    code, _, err = export(capsys, "--store", str(db), "--format", "jsonl", "--out", str(tmp_path / "jl"))
    assert code == 0 and "its predictions only (predictions.jsonl), nothing in samples.jsonl" in err
    assert (tmp_path / "jl" / "samples.jsonl").read_text() == ""
    lines = joined_jsonl(tmp_path / "jl", "predictions.jsonl")
    assert [(x["sample_id"], x["prediction"], x["correct"], x["dataset"], x["shift"]) for x in lines] == \
           [("a", {"pred": 1, "correct": True}, True, "objects", "clean"),
            ("b", {"pred": 0, "correct": False}, False, "objects", "clean")]


# -- bad input, and nothing half-written -----------------------------------------------------------------------

def one_error(capsys, *args: str) -> str:
    code, out, err = export(capsys, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_bad_input_is_one_line_and_exit_2(small_store, tmp_path, capsys):
    db, run = small_store
    out = tmp_path / "out"
    assert "no run 'nope'" in one_error(capsys, "--store", str(db), "--format", "results", "--out", str(out),
                                        "--run-id", "nope")
    assert "store not found" in one_error(capsys, "--store", str(tmp_path / "none.db"), "--format", "jsonl",
                                          "--out", str(out))
    said = one_error(capsys, "--store", str(db), "--format", "robustbenc", "--out", str(out))
    assert "unknown format 'robustbenc'; did you mean 'robustbench'?" in said and "jsonl, results" in said
    assert "not both" in one_error(capsys, "--store", str(db), "--format", "jsonl", "--out", str(out), "--all",
                                   "--run-id", run)
    (tmp_path / "notes.txt").write_text("mine")
    assert "exists and is not a folder" in one_error(capsys, "--store", str(db), "--format", "jsonl",
                                                     "--out", str(tmp_path / "notes.txt"))
    assert "not a shiftbench store" in one_error(capsys, "--store", str(tmp_path / "notes.txt"), "--format", "jsonl",
                                                 "--out", str(out))
    assert not out.exists()  # no folder left behind by a refused export
    assert (tmp_path / "notes.txt").read_text() == "mine"
    # a run without a top-1 result has nothing in RobustBench's layout
    samples, rows = synthetic_samples(models=("m",), n=4, metrics=(("ece", "ece:15"),), missing={})
    write_store(tmp_path / "e.db", samples, rows, {"dataset": "objects", "models": ["m"], "metrics": ["ece"]})
    assert "nothing to write" in one_error(capsys, "--store", str(tmp_path / "e.db"), "--format", "robustbench",
                                           "--out", str(out))
    assert not out.exists()


def test_a_failing_export_leaves_nothing_and_a_foreign_file_is_never_replaced(small_store, tmp_path, capsys,
                                                                              monkeypatch):
    db, run = small_store
    out = tmp_path / "out"
    out.mkdir()

    def broken(stage, loaded):
        (stage / "half.json").write_text("{")
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setitem(ex.WRITERS, "results", broken)
        with pytest.raises(OSError):
            ex.export_store(db, out, "results")
    assert list(out.iterdir()) == []  # neither the half file nor the temporary folder
    # an export replaces what an earlier export wrote, and nothing else
    assert export(capsys, "--store", str(db), "--format", "results", "--out", str(out))[0] == 0
    before = (out / f"{run}.json").read_bytes()
    assert export(capsys, "--store", str(db), "--format", "results", "--out", str(out))[0] == 0
    assert (out / f"{run}.json").read_bytes() == before
    (out / "samples.jsonl").write_text("a user's file\n")
    said = one_error(capsys, "--store", str(db), "--format", "jsonl", "--out", str(out))
    assert "already holds samples.jsonl, which no earlier shiftbench export wrote" in said
    assert (out / "samples.jsonl").read_text() == "a user's file\n"
    assert not any(is_temp(p) for p in out.iterdir())


def test_the_schemas_are_package_data_and_valid():
    for fmt in ex.FORMATS:
        for part in ex.SCHEMA_FILES[fmt]:
            jsonschema.Draft202012Validator.check_schema(ex.schema(fmt, part))
    assert ex.schema("jsonl") == ex.schema("jsonl", "samples")
    with pytest.raises(Exception, match="jsonl has no part 'rows'"):
        ex.schema("jsonl", "rows")
    with pytest.raises(Exception, match="unknown format"):
        ex.schema("csv")
    # the values the schemas refuse: a percentage that is not RobustBench's string, a row without a CI field
    with pytest.raises(jsonschema.ValidationError):
        validator("robustbench").validate({"link": "", "name": "m", "authors": "", "additional_data": None,
                                           "number_forward_passes": 1, "dataset": "d", "venue": "",
                                           "architecture": "m", "eps": None, "reported": "", "clean_acc": 76.5})
