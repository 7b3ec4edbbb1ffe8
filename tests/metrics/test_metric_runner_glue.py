"""The parts of the metric API the runner calls: registry listing, task checks, update_from_samples."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shiftbench as sb
from shiftbench import Sample
from shiftbench.errors import ShiftbenchError
from shiftbench.metrics import check_task

SRC = Path(__file__).resolve().parents[2] / "src"


def test_registered_metrics_declare_task_and_direction():
    expected = {"top1": True, "top5": True, "ece": False, "miou": True, "foreground_iou": True,
                "box_ap": True, "mask_ap": True, "text_similarity": True}
    assert set(expected) <= set(sb.list_metrics())
    for name, higher in expected.items():
        assert sb.METRICS.entry(name).meta["higher_is_better"] is higher
    # listing (in a fresh process: this one may have used the metric already) loads no sentence encoder
    code = ("import sys, shiftbench as sb; sb.list_metrics(); sb.METRICS.entry('text_similarity').meta;"
            "bad = [m for m in ('sentence_transformers', 'torch', 'transformers') if m in sys.modules];"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(SRC)})


def test_check_task():
    classifier = sb.create_model("dummy_classifier")
    check_task(sb.create_metric("top1"), classifier)
    with pytest.raises(ShiftbenchError, match="segmentation"):
        check_task(sb.create_metric("miou", num_classes=3), classifier)
    check_task(sb.create_metric("box_ap"), sb.create_model("dummy_detector"))


def test_update_from_samples_reads_labels_masks_and_boxes():
    image = np.zeros((20, 30, 3), np.uint8)
    image[5:15, 10:20] = 250
    mask = np.zeros((20, 30), bool)
    mask[5:15, 10:20] = True
    samples = [Sample(image=image, label=3, mask=mask, boxes=[[10, 5, 20, 15]], box_labels=[2], id="a")]
    top1 = sb.create_metric("top1")
    logits = np.zeros((1, 5))
    logits[0, 3] = 1
    top1.update_from_samples(logits, samples)
    assert top1.compute() == {"top1": 1.0}
    seg = sb.create_model("dummy_segmenter")
    fg = sb.create_metric("foreground_iou")
    fg.update_from_samples(seg.predict([image]), samples)
    assert fg.compute()["foreground_iou"] == pytest.approx(1.0)
    box = sb.create_metric("box_ap")
    box.update_from_samples([{"boxes": [[10, 5, 20, 15]], "scores": [0.9], "labels": [2]}], samples)
    assert box.compute()["box_ap"] == pytest.approx(1.0)
    with pytest.raises(ShiftbenchError, match="class label"):
        top1.update_from_samples(logits, [Sample(image=image)])
