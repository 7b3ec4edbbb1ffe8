"""The published shape-bias protocol on the standard cue-conflict stimuli (Geirhos et al., ICLR 2019), the user's
way: ``shiftbench evaluate`` on a folder of the stimuli (the shipped 32-image subset, tests/data) with
``metrics: [shape_bias]`` and a bundled ImageNet-1k classifier -> store -> ``shiftbench report``, the stored
values equal to the procedure of the texture-vs-shape repository written out here: softmax over the 1,000
outputs, each category the mean (or max) of its classes' probabilities, the first highest category decides,
images without a cue conflict left out, shape bias = shape / (shape + texture decisions)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.cli import main
from shiftbench.results.store import Store

SUBSET = Path(__file__).resolve().parent / "data" / "cue-conflict-subset"
TABLE = Path(__file__).resolve().parents[1] / "src" / "shiftbench" / "data" / "imagenet" / "geirhos16.tsv"
SPEC = "name: stimuli-smoke\ndataset: {root}\nmodels: [efficientnet_lite0]\nshifts: [clean]\n" \
       "metrics: [shape_bias, top1]\nseed: 0\nbatch_size: 16\n"


def published(logits: np.ndarray, files: list[str], aggregation: str = "mean") -> dict:
    """The texture-vs-shape procedure on the given images' logits, from the category table's text."""
    rows = [line.split("\t") for line in TABLE.read_text().splitlines() if line and not line.startswith("#")][1:]
    categories = sorted(c for c, _ in rows)
    indices = {c: [int(x) for x in i.split(",")] for c, i in rows}
    agg = {"mean": np.mean, "max": np.max}[aggregation]
    z = logits.astype(np.float64)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    shape = texture = correct = 0
    for row, rel in zip(p, files):
        best, decision = -np.inf, None
        for c in categories:
            value = agg(row[indices[c]])
            if value > best:
                best, decision = value, c
        folder, stem = rel.split("/")[0], rel.split("/")[1].rsplit(".", 1)[0]
        texture_class = stem.split("-")[1].rstrip("0123456789")
        correct += decision == folder
        if texture_class == folder:
            continue  # no cue conflict: in no fraction
        shape += decision == folder
        texture += decision == texture_class
    return {"shape_bias": shape / (shape + texture), "cue_decided": (shape + texture) / 30, "top1": correct / 32,
            "shape": shape, "texture": texture}


@pytest.fixture(scope="module")
def lite0_logits():
    files = sorted(p.relative_to(SUBSET).as_posix() for p in SUBSET.glob("*/*.png"))
    ds = sb.load_dataset(str(SUBSET))
    assert [ds.sample_id(i) for i in range(len(ds))] == files
    return sb.create_model("efficientnet_lite0").predict_logits([ds.load(i).image for i in range(len(ds))]), files


def test_evaluate_store_report_on_the_stimuli_runs_the_published_protocol(tmp_path, capsys, lite0_logits):
    spec = tmp_path / "stimuli.yaml"
    spec.write_text(SPEC.format(root=SUBSET))
    db, results = tmp_path / "stimuli.db", tmp_path / "rows.json"
    assert main(["evaluate", "--config", str(spec), "--store", str(db), "--results-json", str(results)]) == 0
    assert "shape_bias" in capsys.readouterr().out
    rows = {r["metric"]: r for r in json.loads(results.read_text())}
    assert set(rows) == {"shape_bias", "cue_decided", "cue_chance", "top1"}  # no controls in these stimuli
    expected = published(*lite0_logits)
    assert rows["shape_bias"]["value"] == pytest.approx(expected["shape_bias"], abs=1e-12)
    assert rows["cue_decided"]["value"] == pytest.approx(expected["cue_decided"], abs=1e-12)
    assert rows["top1"]["value"] == pytest.approx(expected["top1"], abs=1e-12)  # the 16-way shape decision
    assert rows["cue_chance"]["value"] == pytest.approx(1 / 16)
    extra = rows["shape_bias"]["extra"]
    assert (extra["shape_decisions"], extra["texture_decisions"]) == (expected["shape"], expected["texture"])
    assert extra["conflict_images"] == 30 and extra["no_conflict_images"] == 2 and extra["classes"] == 16
    with Store(db) as store:
        run = store.runs()[-1]
        stored = {s["metric"]: s for s in store.samples(run["run_id"])}
    # the decision map and its aggregation are part of the run's identity, the default written out
    assert run["identity"]["decision"]["name"] == "geirhos16" and run["identity"]["decision"]["aggregation"] == "mean"
    assert run["identity"]["decision"]["categories"]["knife"] == [499]
    ids = stored["shape_bias"]["ids"]
    assert len(ids) == 30 and "bear/bear1-bear3.png" not in ids and "car/car1-car2.png" not in ids

    from shiftbench.report import run_headline

    head = run_headline(db)
    assert head.metric == "shape_bias"
    cells = head.rows[0].cells
    assert cells[0].ci.startswith("[") and head.columns[1].head == "cue decided (%)"
    out = tmp_path / "report"
    assert main(["report", "--store", str(db), "--out", str(out)]) == 0
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "shape_bias (%)" in html and cells[0].ci in html


def test_the_aggregation_is_named_in_the_spec_and_changes_the_run(tmp_path, lite0_logits):
    base = {"dataset": str(SUBSET), "models": ["efficientnet_lite0"], "shifts": ["clean"], "metrics": ["shape_bias"]}
    db = tmp_path / "r.db"
    mean = sb.evaluate(base, store=db)
    by_max = sb.evaluate({**base, "dataset_params": {"aggregation": "max"}}, store=db)
    assert mean[0]["run_id"] != by_max[0]["run_id"]
    value = {r["metric"]: r["value"] for r in by_max}["shape_bias"]
    assert value == pytest.approx(published(*lite0_logits, aggregation="max")["shape_bias"], abs=1e-12)
    with Store(db) as store:
        assert [r["identity"]["decision"]["aggregation"] for r in store.runs()] == ["mean", "max"]


def test_a_bad_aggregation_is_refused_by_the_dry_run(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(SPEC.format(root=SUBSET) + "dataset_params: {aggregation: median}\n")
    assert main(["evaluate", "--config", str(spec), "--dry-run"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == "error: cue-conflict folder: aggregation: unknown 'median' (did you mean 'mean'?); choose from " \
                   "mean, max, sum (mean: the published protocol)"
    spec.write_text(SPEC.format(root=SUBSET) + "class_subset: imagenet-r\n")
    assert main(["evaluate", "--config", str(spec), "--dry-run"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"error: {spec}: class_subset: dataset ") and "remove class_subset" in line
