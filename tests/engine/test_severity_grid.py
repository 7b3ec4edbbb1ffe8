"""Severity grids through the paths users take: ``generate --severity 1-2:0.5`` writes ``<shift>/1.5/``, a spec's
``severities: 1-2:0.5`` runs (and resumes) conditions stored at 1.5, a shift without a dial refuses 2.5, and a
malformed grid is one line of error wherever it is written (shiftbench.severity is the one parser)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.cli import main
from shiftbench.engine.generate import parse_severities
from shiftbench.errors import SpecError
from shiftbench.results.artifacts import gradcam_key, thumb_condition, thumb_key
from shiftbench.results.store import Condition, Store
from shiftbench.sample import load_image
from shiftbench.spec import load_spec


def image_folder(root: Path) -> Path:
    """Two classes of two 32 px images (the smallest corruptions take), with texture so noise shows."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(rng.integers(40, 200, (32, 32, 3), dtype=np.uint8)).save(root / c / f"{i}.png")
    return root


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


# -- (a) generate ---------------------------------------------------------------------------------
def test_generate_a_grid_writes_a_folder_per_severity_and_the_manifest_records_1_5(tmp_path, capsys):
    src = image_folder(tmp_path / "src")
    out = tmp_path / "out"
    assert main(["generate", "--dataset", str(src), "--shift", "gaussian_noise", "--severity", "1-2:0.5",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in (out / "gaussian_noise").iterdir()) == ["1", "1.5", "2"]
    records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert sorted({r["severity"] for r in records}) == [1, 1.5, 2]
    assert {type(r["severity"]) for r in records if r["severity"] != 1.5} == {int}  # whole ones stay ints
    assert all(r["output"].startswith(f"gaussian_noise/{'1.5' if r['severity'] == 1.5 else r['severity']}/")
               for r in records)
    rel = "cat/0.png"
    one, mid, two = (load_image(out / "gaussian_noise" / s / rel).astype(int) for s in ("1", "1.5", "2"))
    clean = load_image(src / rel).astype(int)
    assert not np.array_equal(mid, one) and not np.array_equal(mid, two)
    # the dial turns between its levels: the noise at 1.5 lies between the noise at 1 and at 2
    spread = [float(np.abs(x - clean).mean()) for x in (one, mid, two)]
    assert spread[0] < spread[1] < spread[2], spread
    # the 1.5 outputs are the shift replayed from their recorded params
    from shiftbench.datasets import load

    shift = sb.create_shift("gaussian_noise")
    rec = next(r for r in records if r["severity"] == 1.5 and r["output"].endswith(rel))
    sample = load(str(src)).load(rec["index"])
    assert np.array_equal(load_image(out / rec["output"]), shift.replay(sample, rec["params"]).image)
    # a second call finds everything done: nothing written again
    assert main(["generate", "--dataset", str(src), "--shift", "gaussian_noise", "--severity", "1-2:0.5",
                 "--out", str(out)]) == 0
    assert "wrote 0 outputs (12 already done" in capsys.readouterr().out
    # a run pointed at the 1.5 folder knows what made it (not "clean")
    from shiftbench.datasets.generated import generated_origin

    origin = generated_origin(out / "gaussian_noise" / "1.5")
    assert origin is not None and origin["shift"] == "gaussian_noise" and origin["severity"] == 1.5
    assert generated_origin(out / "gaussian_noise" / "2")["severity"] == 2


def test_generate_whole_severities_keep_their_folders(tmp_path, capsys):
    src = image_folder(tmp_path / "src")
    assert main(["generate", "--dataset", str(src), "--shift", "gaussian_noise", "--severity", "1,3",
                 "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in (tmp_path / "o" / "gaussian_noise").iterdir()) == ["1", "3"]


@pytest.mark.parametrize("grid, says", [("1-5:0.3", "whole steps"), ("1-5:0", "must be positive"),
                                         ("x", "not a severity"), ("5-1", "empty")])
def test_generate_refuses_a_malformed_grid_in_one_line(tmp_path, capsys, grid, says):
    src = image_folder(tmp_path / "src")
    assert main(["generate", "--dataset", str(src), "--shift", "gaussian_noise", "--severity", grid,
                 "--out", str(tmp_path / "o")]) == 2
    line = one_error_line(capsys)
    assert "--severity" in line and says in line, line
    assert not (tmp_path / "o").exists()


def test_generate_refuses_in_between_severities_for_a_shift_without_a_dial(tmp_path, capsys):
    src = image_folder(tmp_path / "src")
    assert main(["generate", "--dataset", str(src), "--shift", "background_color", "--severity", "2.5",
                 "--out", str(tmp_path / "o")]) == 2
    line = one_error_line(capsys)
    assert "'background_color'" in line and "2.5" in line and "whole" in line, line
    assert main(["generate", "--dataset", str(src), "--shift", "gaussian_noise", "--severity", "4-6",
                 "--out", str(tmp_path / "o")]) == 2
    assert "severity 6 is outside 1..5" in one_error_line(capsys)


def test_parse_severities_wrapper():
    assert parse_severities("1-2:0.5") == [1, 1.5, 2]
    assert parse_severities("1-3,5") == [1, 2, 3, 5] and parse_severities("3,1-3") == [1, 2, 3]
    assert parse_severities([2.5, 1]) == [1, 2.5] and parse_severities(3) == [3]


# -- (b) a spec with a grid, run and resumed ------------------------------------------------------------
SPEC = ("dataset: objects\nmodels: [dummy_classifier]\nmetrics: [top1]\nlimit: 3\n"
        "shifts: [clean, {name: gaussian_noise, severities: 1-2:0.5}]\n")


def test_a_spec_grid_runs_stores_1_5_and_resumes(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC)
    db = tmp_path / "r.db"
    assert [c.severity for c in load_spec(str(spec)).conditions()] == [0, 1, 1.5, 2]
    assert main(["evaluate", "--config", str(spec), "--store", str(db)]) == 0
    capsys.readouterr()
    with Store(db) as store:
        rows = store.rows()
        samples = store.samples(rows[0]["run_id"])
    got = sorted((r["shift"], r["severity"]) for r in rows)
    assert got == [("clean", 0), ("gaussian_noise", 1), ("gaussian_noise", 1.5), ("gaussian_noise", 2)]
    by_sev = {r["severity"]: r for r in rows if r["shift"] == "gaussian_noise"}
    assert type(by_sev[1.5]["severity"]) is float and type(by_sev[1]["severity"]) is int
    assert type(by_sev[2]["severity"]) is int and all(r["n"] == 3 for r in rows)
    assert samples  # per-sample values keep 1.5 too
    assert sorted({s["severity"] for s in samples if s["shift"] == "gaussian_noise"}) == [1, 1.5, 2]
    # the report of the store: 1.5 its own row, a failure curve through it, the family figure
    out = tmp_path / "report"
    assert main(["report", "--store", str(db), "--out", str(out)]) == 0
    capsys.readouterr()
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "gaussian_noise s1.5" in html and "gaussian_noise s1.0" not in html
    assert (out / "failure_noise.png").is_file() and "failure_noise.png" in html
    assert "1.5" in (out / "failure_points.md").read_text(encoding="utf-8")
    # the stored spec (the run's identity) holds the grid's values
    with Store(db) as store:
        run = store.run()
    assert run["spec"]["shifts"][1]["severities"] == [1, 1.5, 2]

    # the Python path finds the same run, and a second CLI run adds nothing
    again = sb.evaluate(str(spec), store=db)
    assert sorted((r["shift"], r["severity"], r["value"]) for r in again) == \
        sorted((r["shift"], r["severity"], r["value"]) for r in rows)
    assert main(["evaluate", "--config", str(spec), "--store", str(db)]) == 0
    assert "resumed: 4 of 4 conditions already done" in capsys.readouterr().out
    with Store(db) as store:
        assert len(store.runs()) == 1 and len(store.rows()) == len(rows)
        assert store.condition_counts(run["run_id"]) == (4, 4)


def test_a_whole_spec_keeps_its_identity_when_written_as_a_grid_of_step_one(tmp_path):
    base = {"dataset": "objects", "models": ["dummy_classifier"], "metrics": ["top1"]}
    listed = load_spec({**base, "shifts": [{"name": "gaussian_noise", "severities": [1, 2, 3]}]})
    grid = load_spec({**base, "shifts": [{"name": "gaussian_noise", "severities": "1-3:1"}]})
    floats = load_spec({**base, "shifts": [{"name": "gaussian_noise", "severities": [1.0, 2.0, 3.0]}]})
    assert listed.raw == grid.raw == floats.raw
    assert all(type(c.severity) is int for c in floats.conditions())


# -- (c) a shift without a dial refuses 2.5, in the dry run and in the run --------------------------------
def test_a_spec_giving_background_color_2_5_is_refused_by_dry_run_and_run(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("dataset: objects\nmodels: [dummy_classifier]\nmetrics: [top1]\nlimit: 2\n"
                    "shifts: [clean, {name: background_color, severity: 2.5}]\n")
    assert main(["evaluate", "--config", str(spec), "--dry-run", "--store", str(tmp_path / "d.db")]) == 2
    dry = one_error_line(capsys)
    assert main(["evaluate", "--config", str(spec), "--store", str(tmp_path / "r.db")]) == 2
    real = one_error_line(capsys)
    assert dry == real
    assert "shifts[1].severities" in dry and "'background_color'" in dry and "2.5" in dry, dry
    assert not (tmp_path / "r.db").exists() and not (tmp_path / "d.db").exists()
    with pytest.raises(SpecError, match="takes whole severities"):
        sb.evaluate({"dataset": "objects", "models": ["dummy_classifier"], "metrics": ["top1"], "limit": 2,
                     "shifts": [{"name": "background_color", "severities": [2.5]}]}, store=tmp_path / "p.db")


def test_a_spec_severity_outside_the_range_is_refused(tmp_path):
    with pytest.raises(SpecError, match=r"shifts\[0\]\.severities: \[5\.5\] outside 1..5 for shift 'gaussian_noise'"):
        load_spec({"dataset": "objects", "models": ["dummy_classifier"],
                   "shifts": [{"name": "gaussian_noise", "severities": "4-5.5:0.5"}]})


# -- (d) malformed grids at spec load ------------------------------------------------------------------
@pytest.mark.parametrize("grid, says", [("1-5:0.3", "whole steps"), ("1-5:0", "must be positive"),
                                         ("1-5:x", "not a severity")])
def test_a_malformed_grid_in_a_spec_is_one_spec_error(tmp_path, capsys, grid, says):
    spec = tmp_path / "s.yaml"
    spec.write_text("dataset: objects\nmodels: [dummy_classifier]\nmetrics: [top1]\n"
                    f"shifts: [{{name: gaussian_noise, severities: '{grid}'}}]\n")
    with pytest.raises(SpecError) as exc:
        load_spec(str(spec))
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"{spec}: shifts[0].severities: ") and says in message
    assert main(["evaluate", "--config", str(spec), "--dry-run"]) == 2
    assert one_error_line(capsys) == f"error: {message}"


# -- (e) the store and the artifact keys ---------------------------------------------------------------
def test_store_round_trip_of_2_5(tmp_path):
    db = tmp_path / "r.db"
    with Store(db) as store:
        run = store.start_run({"dataset": "d"}, seed=0)
        half = store.condition(run, Condition("m", "d", "gaussian_noise", {}, 2.5))
        three = store.condition(run, Condition("m", "d", "gaussian_noise", {}, 3.0))  # whole: the int 3
        assert store.condition(run, Condition("m", "d", "gaussian_noise", {}, 2.5)) == half  # found, not truncated
        assert store.condition(run, Condition("m", "d", "gaussian_noise", {}, np.int64(3))) == three
        assert half != three and half != store.condition(run, Condition("m", "d", "gaussian_noise", {}, 2))
        store.finish_condition(half, {"top1": (0.25, 4)})
        store.finish_condition(three, {"top1": (0.5, 4)})
        rows = {r["severity"]: r for r in store.rows(run)}
    assert set(rows) == {2.5, 3} and type(rows[2.5]["severity"]) is float and type(rows[3]["severity"]) is int
    assert rows[2.5]["value"] == 0.25
    # SQLite's INTEGER affinity: 2.5 is kept as a REAL, 3 as an integer (no schema change)
    with sqlite3.connect(db) as conn:
        stored = dict(conn.execute("SELECT severity, typeof(severity) FROM conditions").fetchall())
    assert stored[2.5] == "real" and stored[3] == "integer"


def test_artifact_keys_write_severities_as_labels():
    assert thumb_key("gaussian_noise", "{}", 2.5, "a").endswith("/2.5/a")
    assert thumb_key("gaussian_noise", "{}", 3.0, "a") == thumb_key("gaussian_noise", "{}", 3, "a")
    assert thumb_key("gaussian_noise", "{}", 3, "a").endswith("/3/a")
    assert "/2.5/" in gradcam_key("m", "gaussian_noise", "{}", 2.5, "a")
    key = thumb_key("gaussian_noise", "{}", 2.5, "a")
    assert thumb_condition({"key": key, "meta": None}) == ("gaussian_noise", "%7B%7D", 2.5, "a")
    meta = {"shift": "gaussian_noise", "params_key": "{}", "severity": 2.5, "sample_id": "a"}
    assert thumb_condition({"key": key, "meta": meta})[2] == 2.5
    assert type(thumb_condition({"key": thumb_key("s", "{}", 3, "a"), "meta": None})[2]) is int


def test_a_policy_and_a_chain_take_grids():
    from shiftbench.training import ShiftPolicy

    policy = ShiftPolicy(["gaussian_noise"], severities="1-2:0.5")
    assert policy.entries[0].severities == (1, 1.5, 2)
    with pytest.raises(sb.errors.SeverityError, match=r"shifts\[0\] \(background_color\).*takes whole severities"):
        ShiftPolicy(["background_color"], severities="1-2:0.5")
    chain = sb.chain({"name": "gaussian_noise", "severity": 2.5}, "brightness")
    assert chain.fixed[0] == 2.5 and "gaussian_noise@2.5" in repr(chain)
    assert chain.check_severity(1.5) == 1.5  # every free step has a dial
    with pytest.raises(sb.errors.SeverityError, match="no severities in between"):
        sb.chain("background_color", "gaussian_noise").check_severity(2.5)
