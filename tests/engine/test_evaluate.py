"""The evaluation runner: rows, clean baseline, independent recomputation, resume after kill, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import shiftbench as sb
import tiny_registry  # noqa: F401
from shiftbench.errors import ShiftbenchError, SpecError
from shiftbench.results.store import Store
from tiny_registry import TinyDataset

TESTS = Path(__file__).resolve().parents[1]  # tests/: the shared helpers (conftest, tiny_registry, ...)
SPEC = {
    "dataset": "_test_tiny",
    "models": [{"name": "dummy_classifier", "params": {"label_space": 2}},
               {"name": "dummy_classifier", "params": {"label_space": 2, "seed": 1}}],
    "shifts": ["clean", {"name": "_test_noise", "severities": [1, 3, 5]}],
    "metrics": ["top1", "ece"],
    "seed": 0,
    "batch_size": 6,
}


def spec(**changes):
    out = json.loads(json.dumps(SPEC))
    out.update(changes)
    return out


def key(rows):
    return sorted((r["model"], r["shift"], r["severity"], r["metric"], round(r["value"], 12), r["n"]) for r in rows)


def test_rows_and_independent_clean_top1(tmp_path):
    one = spec(models=[{"name": "dummy_classifier", "params": {"label_space": 2}}])
    rows = sb.evaluate(one, store=tmp_path / "r.db")
    assert {(r["shift"], r["severity"]) for r in rows} == {("clean", 0), ("_test_noise", 1), ("_test_noise", 3),
                                                           ("_test_noise", 5)}
    assert set(rows[0]) >= {"run_id", "model", "dataset", "shift", "params", "severity", "metric", "value", "n"}
    assert all(r["n"] == 20 for r in rows)
    # independent computation: the model called directly on the same images
    model = sb.create_model("dummy_classifier", label_space=2)
    data = TinyDataset()
    logits = model.predict_logits([data.load(i).image for i in range(len(data))])
    labels = np.array([data.load(i).label for i in range(len(data))])
    expected = float((logits.argmax(1) == labels).mean())
    clean = [r for r in rows if r["shift"] == "clean" and r["metric"] == "top1"][0]
    assert clean["value"] == pytest.approx(expected, abs=1e-12)
    # a shifted condition sees exactly what the shift gives for each sample id and seed
    shift = sb.create_shift("_test_noise")
    shifted = [shift(data.load(i), severity=5, seed=0).image for i in range(len(data))]
    expected5 = float((model.predict_logits(shifted).argmax(1) == labels).mean())
    sev5 = [r for r in rows if r["severity"] == 5 and r["metric"] == "top1"][0]
    assert sev5["value"] == pytest.approx(expected5, abs=1e-12)
    ece = [r for r in rows if r["metric"] == "ece" and r["shift"] == "clean"][0]
    assert ece["extra"]["higher_is_better"] is False and len(ece["extra"]["counts"]) == 15


def test_same_model_with_other_params_is_another_column(tmp_path):
    rows = sb.evaluate(spec(), store=tmp_path / "r.db")
    assert {r["model"] for r in rows} == {"dummy_classifier(label_space=2)", "dummy_classifier(label_space=2, seed=1)"}
    assert len(rows) == 2 * 4 * 2
    with pytest.raises(SpecError, match="listed twice"):
        sb.evaluate(spec(models=["dummy_classifier", "dummy_classifier"]), store=tmp_path / "x.db")


def test_rerun_is_resumed_not_duplicated(tmp_path):
    db = tmp_path / "r.db"
    first = sb.evaluate(spec(), store=db)
    second = sb.evaluate(spec(), store=db)
    assert key(first) == key(second)
    store = Store(db)
    assert len(store.runs()) == 1 and len(store.rows()) == len(first)


def test_kill_mid_run_then_resume_matches_uninterrupted(tmp_path):
    from e2e import kill_and_resume, row_key, samples_key

    reference, resumed, partial = kill_and_resume(spec(), tmp_path, setup="import tiny_registry",
                                                  min_batches=3, min_done=1, delay=0.15)
    assert 0 < len(partial) < len(reference)
    assert row_key(resumed) == row_key(reference)
    # the per-sample values too: a condition resumed from saved batches stores what one pass stores
    ref_samples = samples_key(tmp_path / "ref.db")
    assert samples_key(tmp_path / "resumed.db") == ref_samples and len(ref_samples) == 2 * 4 * 2
    assert Store(tmp_path / "resumed.db").integrity_check() == "ok"


def test_log_samples_and_thumbnails(tmp_path):
    rows = sb.evaluate(spec(log_samples=True), store=tmp_path / "r.db")
    store = Store(tmp_path / "r.db")
    run_id = rows[0]["run_id"]
    preds = store.predictions(run_id)
    assert len(preds) == 2 * 4 * 20  # models x conditions x samples
    p = preds[0]["prediction"]
    assert set(p) >= {"label", "pred", "confidence", "correct", "top5"}
    thumbs = store.artifacts(run_id, "thumb/")
    assert len(thumbs) == 4 * 4 and thumbs[0]["data"][:4] == b"\x89PNG"


def test_bad_inputs(tmp_path):
    with pytest.raises(SpecError, match="scores classification models"):
        sb.evaluate(spec(models=["dummy_segmenter"]), store=tmp_path / "a.db")

    class NaNModel:
        task, kind, name = "classification", "classifier", "nan_model"

        def __init__(self):
            from shiftbench.models.base import LabelSpace

            self.label_space = LabelSpace.numbered("two", 2)

        def predict_logits(self, images):
            out = np.zeros((len(images), 2), np.float32)
            out[0, 0] = np.nan
            return out

    from shiftbench.registry import MODELS

    if "_test_nan" not in MODELS:
        MODELS.add("_test_nan", NaNModel)
    with pytest.raises(ShiftbenchError, match="NaN"):
        sb.evaluate(spec(models=["_test_nan"]), store=tmp_path / "b.db")

    from shiftbench.registry import DATASETS

    class Tiny10(TinyDataset):
        num_classes = 10
        class_names = [f"c{i}" for i in range(10)]

    if "_test_tiny10" not in DATASETS:
        DATASETS.add("_test_tiny10", Tiny10)
    with pytest.raises(ShiftbenchError, match="label space"):
        sb.evaluate(spec(dataset="_test_tiny10", models=["dummy_classifier"]), store=tmp_path / "c.db")
    assert not (tmp_path / "c.db").exists() or not Store(tmp_path / "c.db").rows()


def test_results_json_from_cli(tmp_path):
    path = tmp_path / "spec.yaml"
    import yaml

    path.write_text(yaml.safe_dump(spec()))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent / "src")]))
    code = "import sys, tiny_registry; from shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", code, "evaluate", "--config", str(path), "--store",
                          str(tmp_path / "r.db"), "--results-json", str(tmp_path / "rows.json"), "--limit", "8"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert rows and all(r["n"] == 8 for r in rows)
    assert {r["metric"] for r in rows} == {"top1", "ece"}


def test_every_task_runs_through_the_runner(tmp_path):
    from shiftbench.datasets.base import Dataset
    from shiftbench.registry import DATASETS
    from shiftbench.sample import Sample

    from conftest import make_sample

    class Masked(Dataset):
        name = "_test_masked"

        def __len__(self):
            return 6

        def load(self, i):
            s = make_sample(40, 48, seed=i, sid=f"m{i}")
            return s.replace(label=i % 2, box_labels=np.array([i % 2]))

    if "_test_masked" not in DATASETS:
        DATASETS.add("_test_masked", Masked)
    base = {"dataset": "_test_masked", "shifts": ["clean", {"name": "_test_noise", "severities": [2]}],
            "batch_size": 4, "log_samples": True}
    seg = sb.evaluate(dict(base, models=["dummy_segmenter"], metrics=["foreground_iou"]), store=tmp_path / "s.db")
    clean = [r for r in seg if r["shift"] == "clean"][0]
    model = sb.create_model("dummy_segmenter")
    data = Masked()
    inter = union = 0
    for i in range(len(data)):
        s = data.load(i)
        pred = model.predict([s.image])[0] >= 0.5
        inter += np.logical_and(pred, s.mask).sum()
        union += np.logical_or(pred, s.mask).sum()
    assert clean["metric"] == "foreground_iou" and 0 < clean["value"] <= 1
    det = sb.evaluate(dict(base, models=[{"name": "dummy_detector", "params": {"label_space": 2}}],
                           metrics=["box_ap"]), store=tmp_path / "d.db")
    assert {r["metric"] for r in det} >= {"box_ap", "box_ap50"}
    cap = sb.evaluate(dict(base, models=["dummy_captioner"], metrics=["text_similarity"]), store=tmp_path / "c.db")
    assert all(-1 <= r["value"] <= 1 for r in cap if r["metric"] == "text_similarity")
    preds = Store(tmp_path / "c.db").predictions(cap[0]["run_id"])
    assert preds[0]["prediction"]["caption"].startswith("a photo of a")


@pytest.mark.parametrize("name, task", [("top1", "classification"), ("top5", "classification"),
                                        ("ece", "classification"), ("foreground_iou", "segmentation"),
                                        ("box_ap", "detection"), ("text_similarity", "captioning")])
def test_metric_state_survives_the_store_round_trip(name, task):
    """Saving a metric's state after batch A (JSON, as the store keeps it) and continuing with batch B
    gives the same values as one metric that saw A and B."""
    from shiftbench.registry import METRICS
    from shiftbench.results.codec import decode_state, encode_state
    from shiftbench.tasks import task_of

    from conftest import make_sample

    model = {"classification": lambda: sb.create_model("dummy_classifier", label_space=2),
             "segmentation": lambda: sb.create_model("dummy_segmenter"),
             "detection": lambda: sb.create_model("dummy_detector", label_space=2),
             "captioning": lambda: sb.create_model("dummy_captioner")}[task]()
    samples = [make_sample(40, 48, seed=i, sid=f"x{i}").replace(label=i % 2, box_labels=np.array([i % 2]))
               for i in range(8)]
    a, b = samples[:5], samples[5:]
    predict = task_of(model).predict
    # one metric that sees A then B (the same batches: a sentence encoder's float32 embeddings depend, on some
    # CPUs, on the batch a caption is encoded with, and the runner's batches never change on a resume)
    whole = METRICS.create(name)
    for part in (a, b):
        whole.update_from_samples(predict(model, part), part)
    first = METRICS.create(name)
    first.update_from_samples(predict(model, a), a)
    saved = json.loads(json.dumps(encode_state(first.state_dict())))
    resumed = METRICS.create(name)
    resumed.load_state_dict(decode_state(saved))
    resumed.update_from_samples(predict(model, b), b)
    assert resumed.compute() == pytest.approx(whole.compute(), abs=1e-12)


def test_bundled_classifiers_clean_top1_equals_direct_computation(tmp_path):
    """The three EfficientNet-Lite models on `objects` through the runner give exactly the top-1 of the
    model called directly on the same images."""
    spec = {"dataset": "objects", "limit": 24, "models": ["efficientnet_lite0", "efficientnet_lite1",
                                                          "efficientnet_lite2"],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [3]}], "metrics": ["top1"],
            "batch_size": 10}
    rows = sb.evaluate(spec, store=tmp_path / "r.db")
    data = sb.load_dataset("objects", limit=24)
    samples = [data.load(i) for i in range(len(data))]
    labels = np.array([s.label for s in samples])
    noise = sb.create_shift("gaussian_noise")
    for name in spec["models"]:
        model = sb.create_model(name)
        clean = float((model.predict_logits([s.image for s in samples]).argmax(1) == labels).mean())
        shifted = [noise(s, severity=3, seed=0).image for s in samples]
        noisy = float((model.predict_logits(shifted).argmax(1) == labels).mean())
        got = {(r["shift"]): r["value"] for r in rows if r["model"] == name}
        assert got["clean"] == pytest.approx(clean, abs=1e-12), name
        assert got["gaussian_noise"] == pytest.approx(noisy, abs=1e-12), name


def test_curate_keeps_what_every_model_gets_right(tmp_path):
    from shiftbench.engine.curate import curate
    from shiftbench.registry import MODELS

    if "_test_dummy2" not in MODELS:
        MODELS.add("_test_dummy2", lambda: sb.create_model("dummy_classifier", label_space=2))
        MODELS.add("_test_dummy2b", lambda: sb.create_model("dummy_classifier", label_space=2, seed=5))
    data = TinyDataset()
    images = [data.load(i).image for i in range(len(data))]
    labels = np.array([data.load(i).label for i in range(len(data))])
    right_a = sb.create_model("dummy_classifier", label_space=2).predict_logits(images).argmax(1) == labels
    right_b = sb.create_model("dummy_classifier", label_space=2, seed=5).predict_logits(images).argmax(1) == labels
    out = tmp_path / "ids.txt"
    one = curate("_test_tiny", ["_test_dummy2"], out, batch_size=7)
    expected = [data.sample_id(i) for i in np.nonzero(right_a)[0]]
    assert expected and one["ids"] == expected and one["kept"] == len(expected) and one["total"] == 20
    lines = out.read_text().splitlines()
    assert lines[0].startswith("# shiftbench curate") and lines[1:] == expected
    both = curate("_test_tiny", ["_test_dummy2", "_test_dummy2b"], None, batch_size=7)
    assert both["ids"] == [data.sample_id(i) for i in np.nonzero(right_a & right_b)[0]]
    # the id list drives a spec: the curated samples are all right for that model
    rows = sb.evaluate({"dataset": "_test_tiny", "ids": str(out), "models": ["_test_dummy2"],
                        "shifts": ["clean"], "metrics": ["top1"]}, store=tmp_path / "r.db")
    assert rows[0]["value"] == 1.0 and rows[0]["n"] == len(expected)
    with pytest.raises(ShiftbenchError, match="needs classifiers"):
        curate("_test_tiny", ["dummy_segmenter"], None)


def test_another_batch_size_is_another_run(tmp_path):
    db = tmp_path / "r.db"
    a = sb.evaluate(spec(batch_size=6), store=db)
    b = sb.evaluate(spec(batch_size=7), store=db)
    assert a[0]["run_id"] != b[0]["run_id"]
    assert key(a) == key(b)  # same numbers whatever the batching


def test_every_condition_stores_its_per_sample_values_in_data_order(tmp_path):
    """Each (model, condition) keeps per-sample values for every metric, ids in data order (a sample the
    shift failed on under on_error: skip is absent from that condition only), and the contract's
    statistic of them is the stored row value."""
    run = spec(shifts=["clean", {"name": "_test_modeled", "severities": [2], "params": {"fail_on": "img013"}}],
               on_error="skip", batch_size=7)
    rows = sb.evaluate(run, store=tmp_path / "r.db")
    store = Store(tmp_path / "r.db")
    samples = store.samples(rows[0]["run_id"])
    values = {(r["model"], r["shift"], r["metric"]): r["value"] for r in rows}
    assert {(s["model"], s["shift"], s["metric"]) for s in samples} == set(values)
    data = TinyDataset()
    ids = [str(data.load(i).id) for i in range(len(data))]
    from sample_statistic import statistic

    for s in samples:
        expected_ids = ids if s["shift"] == "clean" else [i for i in ids if i != "img013"]
        assert s["ids"] == expected_ids
        assert s["kind"] == {"top1": "mean", "ece": "ece:15"}[s["metric"]]
        assert statistic(s["kind"], s["values"]) == pytest.approx(values[(s["model"], s["shift"], s["metric"])],
                                                                  abs=1e-9)
    # the top-1 hits are the model's own answers on those images, image by image
    model = sb.create_model("dummy_classifier", label_space=2)
    logits = model.predict_logits([data.load(i).image for i in range(len(data))])
    labels = np.array([data.load(i).label for i in range(len(data))])
    clean = next(s for s in samples if s["shift"] == "clean" and s["metric"] == "top1"
                 and s["model"] == "dummy_classifier(label_space=2)")
    np.testing.assert_array_equal(clean["values"], (logits.argmax(1) == labels).astype(float))
