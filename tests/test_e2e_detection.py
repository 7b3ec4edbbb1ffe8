"""Detection end to end: a COCO-format set through `shiftbench evaluate` -> store -> report, equal to pycocotools.

The set (tests/coco_synth.py) has overlapping instances, crowd regions, annotation areas that differ from box
areas and non-contiguous category ids. The reference is pycocotools' COCOeval reading the same annotation file,
given the predictions of the same model on the same shifted images (made here, outside the runner).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import coco_synth
import shiftbench as sb
from e2e import kill_and_resume, report_tables, row_key
from shiftbench.metrics.detection import STAT_NAMES, coco_evaluate

pytest.importorskip("pycocotools")
from pycocotools import mask as mask_utils  # noqa: E402
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
SHIFTS = ["clean", {"name": "gaussian_noise", "severities": [2]}]
CONDITIONS = [("clean", 0), ("gaussian_noise", 2)]
BATCH = 2


def _cli_evaluate(spec: dict, tmp_path: Path, name: str) -> list[dict]:
    """`shiftbench evaluate --config --store --results-json` in a child process (the colour detector registered)."""
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(spec))
    out = tmp_path / f"{name}.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(SRC), os.environ.get("PYTHONPATH", "")]))
    code = "import sys, coco_synth; from shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, "evaluate", "--config", str(config), "--store",
                           str(tmp_path / f"{name}.db"), "--results-json", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def _shifted(root: Path, shift: str, severity: int, seed: int = 0) -> list[sb.Sample]:
    """The images the runner scores for a condition, made with the public call contract."""
    dataset = sb.load_dataset(str(root))
    samples = [dataset.load(i) for i in range(len(dataset))]
    if shift == "clean":
        return samples
    fn = sb.create_shift(shift)
    return [fn(s, severity=severity, seed=seed) for s in samples]


def _predict(model, samples: list[sb.Sample]) -> list:
    # the runner's batches: batch composition can change a padded hub model's outputs in the last bits
    out = []
    for i in range(0, len(samples), BATCH):
        out += model.predict([s.image for s in samples[i:i + BATCH]])
    return out


def _cocoeval(annotation_file: Path, samples: list[sb.Sample], detections: list, iou_type: str) -> dict[str, float]:
    """pycocotools' 12 stats for these predictions against the annotation file itself."""
    results = []
    for s, det in zip(samples, detections):
        for k in range(len(det)):
            x0, y0, x1, y1 = (float(v) for v in det.boxes[k])
            res = {"image_id": int(s.meta["coco_id"]), "category_id": int(det.labels[k]),
                   "score": float(det.scores[k]), "bbox": [x0, y0, x1 - x0, y1 - y0]}
            if iou_type == "segm":
                rle = mask_utils.encode(np.asfortranarray(det.masks[k].astype(np.uint8)))
                rle["counts"] = rle["counts"].decode()
                res["segmentation"] = rle
                del res["bbox"]
            results.append(res)
    assert results, "no predictions: the comparison would be empty"
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(annotation_file))
        ev = COCOeval(gt, gt.loadRes(results), iou_type)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return dict(zip(STAT_NAMES, (float(v) for v in ev.stats)))


def _assert_equal_to_cocoeval(rows: list[dict], model: str, prefix: str, shift: str, severity: int,
                              reference: dict[str, float]) -> None:
    ours = {r["metric"]: r["value"] for r in rows
            if r["model"] == model and r["shift"] == shift and r["severity"] == severity}
    for stat in STAT_NAMES:
        key = f"{prefix}_{stat}"
        assert key in ours, key
        if reference[stat] == -1:  # COCOeval's "undefined"
            assert ours[key] is None, (key, ours[key])
        else:
            assert ours[key] == pytest.approx(reference[stat], abs=1e-9), (shift, key)


@pytest.fixture(scope="module")
def coco_root(tmp_path_factory) -> Path:
    return coco_synth.write_coco_set(tmp_path_factory.mktemp("coco"))


def test_colour_detector_box_and_mask_ap_equal_cocoeval(coco_root, tmp_path):
    spec = {"dataset": str(coco_root), "models": [coco_synth.DETECTOR], "shifts": SHIFTS,
            "metrics": ["box_ap", "mask_ap"], "batch_size": BATCH, "seed": 0}
    rows = _cli_evaluate(spec, tmp_path, "colour")
    annotation_file = coco_root / "annotations" / "instances_val.json"
    model = coco_synth.ColourDetector()
    aps = {}
    for shift, severity in CONDITIONS:
        samples = _shifted(coco_root, shift, severity)
        detections = _predict(model, samples)
        for iou_type, prefix in (("bbox", "box"), ("segm", "mask")):
            reference = _cocoeval(annotation_file, samples, detections, iou_type)
            _assert_equal_to_cocoeval(rows, coco_synth.DETECTOR, prefix, shift, severity, reference)
            aps[(shift, prefix)] = reference
            # far from 0 and 1, so matching, crowd and sizing decide the numbers; small and medium both
            # populated, large undefined (no image exceeds 96^2 px)
            assert 0.3 < reference["ap"] < 0.95 and 0.3 < reference["ap_small"] < 0.99
            assert reference["ap_medium"] > 0 and reference["ap_large"] == -1
        if shift == "clean":
            # the comparison catches the old mistakes: sizing by box area, crowd regions as plain
            # objects, mask AP against the flattened instance map
            targets = [{"boxes": s.boxes, "labels": s.box_labels, "iscrowd": s.meta["iscrowd"]} for s in samples]
            assert coco_evaluate(detections, targets)["ap_small"] != pytest.approx(aps[(shift, "box")]["ap_small"])
            targets = [{"boxes": s.boxes, "labels": s.box_labels, "area": s.meta["area"]} for s in samples]
            assert coco_evaluate(detections, targets)["ap"] < aps[(shift, "box")]["ap"] - 0.1
            flat = [{"boxes": s.boxes, "labels": s.box_labels, "iscrowd": s.meta["iscrowd"], "area": s.meta["area"],
                     "masks": s.mask[None] == np.arange(1, len(s.boxes) + 1)[:, None, None]} for s in samples]
            assert coco_evaluate(detections, flat, "segm")["ap"] != pytest.approx(aps[(shift, "mask")]["ap"])
    assert aps[("gaussian_noise", "mask")]["ap"] < aps[("clean", "mask")]["ap"]  # the shift is seen
    undefined = [r for r in rows if r["value"] is None]
    assert {r["metric"] for r in undefined} == {"box_ap_large", "box_ar_large", "mask_ap_large", "mask_ar_large"}


def test_hf_detr_box_ap_equals_cocoeval(coco_root, tmp_path):
    from tiny_hub import save_tiny_detr

    folder = save_tiny_detr(tmp_path / "detr", dict(coco_synth.CATEGORIES), num_queries=8)
    spec = {"dataset": str(coco_root), "models": [{"name": f"hf:{folder}", "params": {"score_threshold": 0.0}}],
            "shifts": SHIFTS, "metrics": ["box_ap"], "batch_size": BATCH, "seed": 0}
    rows = _cli_evaluate(spec, tmp_path, "detr")
    model = sb.create_model(f"hf:{folder}", score_threshold=0.0)
    annotation_file = coco_root / "annotations" / "instances_val.json"
    for shift, severity in CONDITIONS:
        samples = _shifted(coco_root, shift, severity)
        detections = _predict(model, samples)
        assert sum(len(d) for d in detections) == 8 * len(samples)  # threshold 0: every query is a detection
        reference = _cocoeval(annotation_file, samples, detections, "bbox")
        _assert_equal_to_cocoeval(rows, f"hf:{folder}", "box", shift, severity, reference)


def test_detection_killed_and_resumed_then_reported(coco_root, tmp_path):
    spec = {"dataset": str(coco_root), "models": [coco_synth.DETECTOR], "shifts": SHIFTS,
            "metrics": ["box_ap", "mask_ap"], "batch_size": BATCH, "seed": 0}
    ref, resumed, partial = kill_and_resume(spec, tmp_path, setup="import coco_synth", min_batches=2)
    assert row_key(resumed) == row_key(ref)
    assert len(partial) < len(ref)
    undefined = {(r["shift"], r["metric"]) for r in resumed if r["value"] is None}
    assert undefined == {(s, m) for s, _ in CONDITIONS for m in ("box_ap_large", "box_ar_large", "mask_ap_large",
                                                                 "mask_ar_large")}
    for r in resumed:
        if r["value"] is None:  # stored as NULL, with the reason beside it
            assert "no non-crowd ground truth of large size" in r["extra"]["undefined"]

    tables, _, html = report_tables(tmp_path / "resumed.db", tmp_path / "report")
    by_metric = _tables_by_metric(tables, html)
    cells = [c for t in by_metric.values() for row in t[1:] for c in row[1:]]
    assert len(cells) == 24 * 2 * 2 and not any(c.lower().startswith(("-1", "-100", "nan")) for c in cells)
    large = by_metric["box_ap_large"]
    for row in large[1:]:
        assert all(cell in ("–", "n/a") for cell in row[1:]), row  # undefined everywhere, mean included
    ap = by_metric["box_ap"]
    values = {r["shift"]: r["value"] for r in resumed if r["metric"] == "box_ap"}
    clean_row = next(row for row in ap if row[0] == "clean")
    assert clean_row[1] == f"{100 * values['clean']:.1f}" and clean_row[-1] == clean_row[1]  # mean of one model
    grid = next(t for t in tables if t[0][0] == "sample")  # the sample grid names the detections
    assert any("boxes" in cell for row in grid[1:] for cell in row), grid


def _tables_by_metric(tables: list[list[list[str]]], html: str) -> dict[str, list[list[str]]]:
    """The results table of each metric (the page marks each with data-metric, in document order)."""
    import re

    metrics = re.findall(r'<table class="results" data-metric="([^"]+)"', html)
    results = [t for t in tables if t and t[0] and t[0][0] == "condition"]
    assert len(results) == len(metrics), (len(results), metrics)
    return dict(zip(metrics, results))
