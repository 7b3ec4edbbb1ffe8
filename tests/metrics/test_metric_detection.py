"""COCO box/mask AP and AR against pycocotools on random fixtures (crowd regions, all size ranges, ties)."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from shiftbench.errors import ShiftbenchError
from shiftbench.metrics.detection import STAT_NAMES, BoxAP, MaskAP, coco_evaluate

pycocotools = pytest.importorskip("pycocotools")
from pycocotools import mask as mask_utils  # noqa: E402
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402


def _random_fixture(seed: int, n_images: int = 6, n_classes: int = 3, size: int = 160, masks: bool = False):
    rng = np.random.default_rng(seed)
    detections, targets = [], []
    for _ in range(n_images):
        g = int(rng.integers(0, 7))
        # boxes of all COCO size ranges: sides 3..150 px
        xy = rng.uniform(0, size * 0.6, (g, 2))
        wh = rng.uniform(3, 150, (g, 2))
        gt_boxes = np.concatenate([xy, np.minimum(xy + wh, size)], axis=1).round(1)
        gt_labels = rng.integers(0, n_classes, g)
        crowd = rng.random(g) < 0.15
        d = int(rng.integers(0, 12))
        # detections: jittered copies of gts (true positives at varied IoU) plus random boxes
        src = rng.integers(0, max(g, 1), d)
        jitter = rng.normal(0, 6, (d, 4))
        rand_xy = rng.uniform(0, size * 0.6, (d, 2))
        rand_boxes = np.concatenate([rand_xy, np.minimum(rand_xy + rng.uniform(3, 120, (d, 2)), size)], axis=1)
        use_gt = (rng.random(d) < 0.7) & (g > 0)
        dt_boxes = np.where(use_gt[:, None], (gt_boxes[src % max(g, 1)] if g else rand_boxes) + jitter, rand_boxes)
        x0 = np.clip(np.minimum(dt_boxes[:, 0], dt_boxes[:, 2] - 2), 0, size - 3)
        y0 = np.clip(np.minimum(dt_boxes[:, 1], dt_boxes[:, 3] - 2), 0, size - 3)
        dt_boxes = np.stack([x0, y0, np.clip(dt_boxes[:, 2], x0 + 2, size), np.clip(dt_boxes[:, 3], y0 + 2, size)], 1)
        dt_labels = np.where(use_gt & (rng.random(d) < 0.85), gt_labels[src % max(g, 1)] if g else 0,
                             rng.integers(0, n_classes, d))
        scores = rng.choice([0.3, 0.5, 0.9], d) if seed % 2 else rng.random(d)  # odd seeds: tied scores
        target = {"boxes": gt_boxes, "labels": gt_labels, "iscrowd": crowd}
        det = {"boxes": dt_boxes.round(2), "scores": scores, "labels": dt_labels}
        if masks:
            target["masks"] = _box_masks(gt_boxes, size, rng)
            det["masks"] = _box_masks(dt_boxes, size, rng)
        detections.append(det)
        targets.append(target)
    return detections, targets


def _box_masks(boxes: np.ndarray, size: int, rng) -> np.ndarray:
    yy, xx = np.mgrid[:size, :size]
    out = np.zeros((len(boxes), size, size), bool)
    for i, (x0, y0, x1, y1) in enumerate(boxes):
        # ellipses inscribed in the boxes, with holes of random noise so masks are not boxes
        cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, max((x1 - x0) / 2, 1), max((y1 - y0) / 2, 1)
        out[i] = (((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1) & (rng.random((size, size)) > 0.1)
    return out


def _pycocotools(detections, targets, iou_type: str, n_classes: int = 3, size: int = 160) -> dict[str, float]:
    images, annotations, results = [], [], []
    ann_id = 1
    for i, (det, tgt) in enumerate(zip(detections, targets), start=1):
        images.append({"id": i, "width": size, "height": size})
        for j, (box, label, crowd) in enumerate(zip(tgt["boxes"], tgt["labels"], tgt["iscrowd"])):
            x0, y0, x1, y1 = (float(v) for v in box)
            ann = {"id": ann_id, "image_id": i, "category_id": int(label) + 1, "iscrowd": int(crowd),
                   "bbox": [x0, y0, x1 - x0, y1 - y0]}
            if iou_type == "segm":
                rle = mask_utils.encode(np.asfortranarray(tgt["masks"][j].astype(np.uint8)))
                rle["counts"] = rle["counts"].decode()
                ann["segmentation"] = rle
                ann["area"] = float(tgt["masks"][j].sum())
            else:
                ann["area"] = (x1 - x0) * (y1 - y0)
            annotations.append(ann)
            ann_id += 1
        for j, (box, score, label) in enumerate(zip(det["boxes"], det["scores"], det["labels"])):
            x0, y0, x1, y1 = (float(v) for v in box)
            res = {"image_id": i, "category_id": int(label) + 1, "score": float(score), "bbox": [x0, y0, x1 - x0, y1 - y0]}
            if iou_type == "segm":
                rle = mask_utils.encode(np.asfortranarray(det["masks"][j].astype(np.uint8)))
                rle["counts"] = rle["counts"].decode()
                res["segmentation"] = rle
                del res["bbox"]
            results.append(res)
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": images, "annotations": annotations,
                      "categories": [{"id": c + 1, "name": str(c)} for c in range(n_classes)]}
        gt.createIndex()
        dt = gt.loadRes(results) if results else COCO()
        if not results:
            return None
        ev = COCOeval(gt, dt, iou_type)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return dict(zip(STAT_NAMES, (float(s) for s in ev.stats)))


@pytest.mark.parametrize("seed", range(8))
def test_box_ap_matches_pycocotools(seed):
    detections, targets = _random_fixture(seed)
    reference = _pycocotools(detections, targets, "bbox")
    if reference is None:
        pytest.skip("fixture drew no detections")  # never happens for these seeds; guards the fixture
    ours = coco_evaluate(detections, targets, "bbox")
    for key in STAT_NAMES:
        assert ours[key] == pytest.approx(reference[key], abs=1e-6), key
    assert ours["ap"] > 0  # the fixture has true positives, so the comparison is not all -1 / 0


@pytest.mark.parametrize("seed", range(3))
def test_mask_ap_matches_pycocotools(seed):
    detections, targets = _random_fixture(100 + seed, n_images=4, masks=True)
    reference = _pycocotools(detections, targets, "segm")
    ours = coco_evaluate(detections, targets, "segm")
    for key in STAT_NAMES:
        assert ours[key] == pytest.approx(reference[key], abs=1e-6), key


def test_metric_classes_accumulate_across_batches_like_one_call():
    detections, targets = _random_fixture(3, masks=True)
    box, mask = BoxAP(), MaskAP()
    for i in range(0, len(targets), 4):  # two uneven batches
        box.update(detections[i:i + 4], targets[i:i + 4])
        mask.update(detections[i:i + 4], targets[i:i + 4])
    whole = coco_evaluate(detections, targets, "bbox")
    assert box.compute() == {f"box_{k}": (None if v == -1 else v) for k, v in whole.items()}
    assert mask.compute()["mask_ap"] == pytest.approx(coco_evaluate(detections, targets, "segm")["ap"], abs=1e-12)
    assert box.higher_is_better and box.n == len(targets)
    box.reset()
    assert box.compute()["box_ap"] is None and box.undefined_reason("box_ap") == "no images were scored"


def test_perfect_and_empty_detections():
    gt = [{"boxes": [[0, 0, 50, 50], [60, 60, 100, 120]], "labels": [0, 1]}]
    perfect = [{"boxes": [[0, 0, 50, 50], [60, 60, 100, 120]], "scores": [0.9, 0.8], "labels": [0, 1]}]
    assert coco_evaluate(perfect, gt)["ap"] == pytest.approx(1.0)
    none = [{"boxes": np.zeros((0, 4)), "scores": [], "labels": []}]
    assert coco_evaluate(none, gt)["ap"] == 0.0


def test_bad_input_is_a_clear_error():
    with pytest.raises(ShiftbenchError, match="masks"):
        coco_evaluate([{"boxes": [[0, 0, 1, 1]], "scores": [1], "labels": [0]}], [{"boxes": [[0, 0, 1, 1]], "labels": [0]}], "segm")
    with pytest.raises(ShiftbenchError, match="NaN"):
        BoxAP().update([{"boxes": [[0, 0, np.nan, 1]], "scores": [1], "labels": [0]}], [{"boxes": [], "labels": []}])


def test_undefined_stats_are_none_with_a_reason():
    # only small ground truth (and a crowd region of medium size): COCOeval gives -1 for medium and large
    gt = [{"boxes": [[0, 0, 10, 10], [20, 20, 60, 60]], "labels": [1, 1], "iscrowd": [0, 1]}]
    dt = [{"boxes": [[0, 0, 10, 10]], "scores": [0.9], "labels": [1]}]
    raw = coco_evaluate(dt, gt)
    assert raw["ap_medium"] == -1 and raw["ap_large"] == -1 and raw["ar_large"] == -1 and raw["ap_small"] == pytest.approx(1.0)
    box = BoxAP()
    box.update(dt, gt)
    out = box.compute()
    assert {k for k, v in out.items() if v is None} == {"box_ap_medium", "box_ap_large", "box_ar_medium",
                                                         "box_ar_large"}
    assert out["box_ap"] == pytest.approx(1.0)
    assert "medium size (area 1024..9216 px)" in box.undefined_reason("box_ap_medium")
    assert "large size (area > 9216 px)" in box.undefined_reason("box_ar_large")


def test_area_from_samples_sizes_by_segment_not_box():
    # a 40x40 box (medium by box area) around a thin diagonal segment of 600 px (small by its area)
    from shiftbench.sample import Sample

    sample = Sample(image=np.zeros((50, 50, 3), np.uint8), boxes=[[0, 0, 40, 40]], box_labels=[3], id="a",
                    meta={"iscrowd": [0], "area": [600.0]})
    box = BoxAP()
    box.update_from_samples([{"boxes": [[0, 0, 40, 40]], "scores": [0.8], "labels": [3]}], [sample])
    out = box.compute()
    assert out["box_ap_small"] == pytest.approx(1.0) and out["box_ap_medium"] is None
    bad = Sample(image=np.zeros((50, 50, 3), np.uint8), boxes=[[0, 0, 4, 4]], box_labels=[3], id="b",
                 meta={"area": [1.0, 2.0]})
    with pytest.raises(ShiftbenchError, match="sample b: meta\\['area'\\] has 2 entries for 1 boxes"):
        BoxAP().update_from_samples([{"boxes": [], "scores": [], "labels": []}], [bad])

    resized = Sample(image=np.zeros((20, 20, 3), np.uint8), boxes=[[0, 0, 4, 4]], box_labels=[3], id="c",
                     meta={"instance_masks": np.ones((1, 50, 50), bool)})
    with pytest.raises(ShiftbenchError, match="sample c: instance masks are \\(50, 50\\) but the image is \\(20, 20\\)"):
        MaskAP().update_from_samples([{"boxes": [], "scores": [], "labels": [], "masks": np.zeros((0, 20, 20), bool)}],
                                     [resized])
