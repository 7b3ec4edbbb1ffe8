"""The dry run's promise, over every registered metric: a dry run (``engine.evaluate.prepare``, the function
behind ``shiftbench evaluate --dry-run``) passes if and only if the first batch runs, on a user's own image folder,
the standard cue-conflict stimuli, a COCO set, a set with captions and the built-in sets with masks, boxes and
cue-conflict meta; when both stop, they stop on the same one line. What a metric reads of a sample (a class
label, a mask, boxes, a caption, a cue-conflict image) is its declared ``needs``, asked of the first batch
before any model work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import coco_synth  # noqa: F401 - registers the colour detector
import tiny_registry  # noqa: F401 - registers _test_tiny (captions)
from shiftbench.engine.evaluate import evaluate, prepare
from shiftbench.registry import METRICS

from conftest import make_image
from test_dry_run_promise import outcome

TESTS = Path(__file__).resolve().parents[1]
CUE = TESTS / "data" / "cue-conflict-subset"
METRIC_NAMES = sorted(METRICS.names())
# a model of each metric's task (two where the label space decides what runs); quality metrics have no
# model of their task: any model, refused in both runs alike
MODELS = {"classification": [{"name": "dummy_classifier"},
                             {"name": "dummy_classifier", "params": {"label_space": ["cat", "dog"]}}],
          "segmentation": [{"name": "dummy_segmenter"}, {"name": "dummy_segmenter", "params": {"num_classes": 3}}],
          "detection": [{"name": "dummy_detector"}, {"name": coco_synth.DETECTOR}],
          "captioning": [{"name": "dummy_captioner"}],
          "question_answering": [{"name": "dummy_vlm"}],
          "retrieval": [{"name": "image_only"}],
          "quality": [{"name": "dummy_classifier"}]}
DATASETS = ("user", "cue-conflict-folder", "coco", "_test_tiny", "objects", "objects-cue-conflict")
CASES = [(metric, data, k) for metric in METRIC_NAMES for data in DATASETS
         for k in range(len(MODELS[METRICS.entry(metric).meta["task"]]))]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("metric-promise")
    for c in ("cat", "dog"):
        (root / "user" / c).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(make_image(40, 48, seed=i)).save(root / "user" / c / f"{i}.png")
    coco_synth.write_coco_set(root / "coco", n_images=2)
    return {"user": str(root / "user"), "cue-conflict-folder": str(CUE), "coco": str(root / "coco"),
            "_test_tiny": "_test_tiny", "objects": "objects", "objects-cue-conflict": "objects-cue-conflict"}




def test_every_metric_declares_what_it_reads_of_a_sample():
    """Promise: a dry run that passes means the run can start. Every registered metric says what it needs of a
    sample (``Metric.needs``, in words), and checks it without any output (``check_samples``)."""
    for name in METRIC_NAMES:
        cls = METRICS.entry(name).resolve()
        assert isinstance(cls.needs, str) and cls.needs, name
        assert callable(cls.check_samples) and callable(cls.check_model)


@pytest.mark.parametrize("metric,data,k", CASES, ids=[f"{m}-{d}-{k}" for m, d, k in CASES])
def test_dry_run_passes_iff_the_first_batch_runs(datasets, metric, data, k):
    """Promise: a dry run that passes means the run can start (every planned condition's first batch runs and
    is scored), and one that stops says the run's own line."""
    model = MODELS[METRICS.entry(metric).meta["task"]][k]
    spec = {"dataset": datasets[data], "models": [model], "metrics": [metric], "limit": 2, "batch_size": 2,
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [2]}]}
    dry = outcome(lambda: prepare(spec))
    real = outcome(lambda: evaluate(spec))
    assert (dry is None) == (real is None), f"dry run: {dry!r}; real run: {real!r}"
    if dry is not None:
        assert dry == real and "\n" not in dry


@pytest.mark.parametrize("on_error", ["fail", "skip"])
def test_what_a_metric_without_its_data_says(datasets, on_error):
    """Promise: a user mistake is one line naming the spec's entry, the metric, the sample and what to do, before
    any model work (on_error: skip leaves out unreadable samples, not the metric's needs)."""
    spec = {"dataset": datasets["user"], "models": [{"name": "dummy_classifier", "params": {"label_space": ["cat", "dog"]}}],
            "metrics": ["top1", "shape_bias"], "shifts": ["clean"], "on_error": on_error}
    msg = outcome(lambda: prepare(spec))
    assert msg.startswith("metrics[1]: shape_bias: sample 'cat/0.png' is not a cue-conflict image")
    assert "objects-cue-conflict" in msg and "model 'dummy_classifier'" in msg
    assert outcome(lambda: evaluate(spec)) == msg
    caption = outcome(lambda: prepare(dict(spec, models=["dummy_captioner"], metrics=["text_similarity"])))
    assert caption.startswith("metrics[0]: text_similarity needs a reference caption") and "'cat/0.png'" in caption
    miou = outcome(lambda: prepare(dict(spec, dataset="objects", models=["dummy_segmenter"], metrics=["miou"])))
    assert "class-agnostic segmenter" in miou and "foreground_iou" in miou


def test_the_cli_dry_run_refuses_shape_bias_without_cue_conflict_images(datasets, tmp_path):
    """Promise: `shiftbench evaluate --dry-run` that passes means the run can start; shape bias on a plain image
    folder is one `error:` line and exit 2, in the dry run and in the run alike, and leaves no store."""
    config = tmp_path / "spec.yaml"
    config.write_text(f"dataset: {datasets['user']}\n"
                      "models: [{name: dummy_classifier, params: {label_space: [cat, dog]}}]\n"
                      "shifts: [clean, gaussian_noise]\nmetrics: [top1, shape_bias]\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent / "src")]), COLUMNS="200")
    code = "import sys\nfrom shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    lines = []
    for extra in (["--dry-run"], ["--store", str(tmp_path / "r.db")]):
        out = subprocess.run([sys.executable, "-c", code, "evaluate", "--config", str(config), *extra],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert out.returncode == 2, out.stdout + out.stderr
        line = out.stderr.strip()
        assert len(line.splitlines()) == 1 and line.startswith("error: ") and "Traceback" not in line
        lines.append(line)
    assert lines[0] == lines[1]
    assert f"{config}: metrics[1]: shape_bias: sample 'cat/0.png' is not a cue-conflict image" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # no store


def test_a_cue_conflict_run_is_unchanged_by_the_check():
    """Promise: asking the first batch up front takes nothing from the run: shape bias on the standard stimuli
    runs and gives its rows."""
    rows = evaluate({"dataset": str(CUE), "models": ["dummy_classifier"], "metrics": ["shape_bias"], "limit": 4,
                     "batch_size": 2, "shifts": ["clean"]})
    assert {r["metric"] for r in rows} >= {"shape_bias", "cue_decided"} and all(r["n"] == 4 for r in rows)
    assert not np.isnan([r["value"] for r in rows if r["value"] is not None]).any()
