"""COCO files we did not make: scored exactly as pycocotools' COCOeval scores them, or refused in one line.

Hypothesis generates small COCO instances files (1-3 images of several sizes, ids in any order, polygons,
compressed and uncompressed RLE, crowd regions, zero and negative box sizes, areas in every size range,
decimal and integer coordinates, detections with tied scores, of unlisted categories and of degenerate
boxes) and detections for them. A file with no planted defect must be read, and box AP and mask AP (all
12 stats each) must equal COCOeval's on the same file and detections. A file with one planted defect
(a category missing from ``categories``, duplicate image or annotation ids, NaN / infinite / enormous
coordinates, short or odd polygons, RLE of the wrong size, a segmentation of the wrong type, ...) must be
refused with a DatasetError whose single line names the image or annotation. Then the same through the
CLI: a refused file exits 2 with one line and leaves no store behind (or the existing store as it was).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import coco_synth
from shiftbench.cli import main
from shiftbench.datasets.coco import CocoInstances
from shiftbench.errors import DatasetError, ShiftbenchError
from shiftbench.metrics.detection import STAT_NAMES, BoxAP, MaskAP
from shiftbench.models.base import Detections
from shiftbench.results.codec import decode_state, encode_state

pytest.importorskip("pycocotools")
from pycocotools import mask as mask_utils  # noqa: E402
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pycocotools on numpy 2

SIZES = [(12, 16), (20, 14), (36, 44), (70, 90)]  # (height, width); 70x90 holds medium-sized regions
CATEGORIES = {1: "person", 3: "car", 18: "dog"}
UNLISTED = 77  # a category no file lists: detections of it are left out by both
SCORES = [0.1, 0.3, 0.5, 0.5, 0.7, 0.9]  # repeats: ties within and across images
AREAS = [-4, 0, 3.5, 30, 1000, 1030.5, 5000, 9300, 20000]  # every COCO size range and outside them
VALID_EXAMPLES = 200
DEFECT_EXAMPLES = 100
SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- strategies ---------------------------------------------------------------------------------------
def _coord(size: int) -> st.SearchStrategy[float]:
    """A coordinate near the image (-1 .. size + 1): integers (exact IoU ties) or tenths (not exact in binary)."""
    return st.one_of(st.integers(-1, size + 1).map(float), st.integers(-10, 10 * size + 10).map(lambda v: v / 10))


@st.composite
def _segmentation(draw, bbox: list[float], h: int, w: int):
    """A polygon around the box (or any triangle), or an RLE (compressed or not) of a random mask."""
    kind = draw(st.sampled_from(["polygon", "triangle", "rle", "rle_list"]))
    if kind == "polygon" and bbox[2] > 0 and bbox[3] > 0:
        x, y, bw, bh = bbox
        return [[x, y, x + bw, y, x + bw, y + bh, x, y + bh]]
    if kind in ("polygon", "triangle"):
        polygons = [[draw(_coord(s)) for s in (w, h) * 3]]
        if draw(st.booleans()):  # a second part
            polygons.append([draw(_coord(s)) for s in (w, h) * draw(st.integers(3, 5))])
        return polygons
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    mask = np.zeros((h, w), bool)
    y0, x0 = draw(st.integers(0, h - 1)), draw(st.integers(0, w - 1))
    mask[y0:y0 + draw(st.integers(0, h)), x0:x0 + draw(st.integers(0, w))] = True
    mask ^= rng.random((h, w)) < draw(st.sampled_from([0.0, 0.05, 0.3]))
    rle = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    if kind == "rle":
        return {"size": [h, w], "counts": rle["counts"].decode("ascii")}
    flat = mask.T.reshape(-1)
    runs = np.diff(np.r_[0, np.flatnonzero(flat[1:] != flat[:-1]) + 1, flat.size]).tolist()
    return {"size": [h, w], "counts": ([0] if flat[0] else []) + runs}


@st.composite
def _annotation(draw, image: dict, categories: list[int]) -> dict:
    h, w = image["height"], image["width"]
    x, y = draw(_coord(w)), draw(_coord(h))
    bw = draw(st.one_of(st.integers(-2, w).map(float), st.integers(-20, 10 * w).map(lambda v: v / 10)))
    bh = draw(st.one_of(st.integers(-2, h).map(float), st.integers(-20, 10 * h).map(lambda v: v / 10)))
    bw, bh = min(bw, 2 * w - x), min(bh, 2 * h - y)  # within one image size of the image, as files must be
    crowd = draw(st.integers(0, 5)) == 0
    ann = {"image_id": image["id"], "category_id": draw(st.sampled_from(categories)), "bbox": [x, y, bw, bh],
           "iscrowd": int(crowd), "segmentation": draw(_segmentation([x, y, bw, bh], h, w))}
    ann["area"] = draw(st.one_of(st.sampled_from(AREAS), st.floats(0, 10000, allow_nan=False)))
    return ann


def _pycocotools_mask(seg, h: int, w: int) -> np.ndarray:
    rle = (mask_utils.merge(mask_utils.frPyObjects(seg, h, w)) if isinstance(seg, list)
           else mask_utils.frPyObjects(seg, h, w) if isinstance(seg["counts"], list) else seg)
    return mask_utils.decode(rle).astype(bool)


@st.composite
def _detection(draw, image: dict, anns: list[dict], categories: list[int]) -> tuple:
    h, w = image["height"], image["width"]
    label = draw(st.sampled_from(categories + [UNLISTED]))
    if anns and draw(st.integers(0, 3)) > 0:  # near a ground truth: matches at some IoU thresholds
        ann = draw(st.sampled_from(anns))
        label = ann["category_id"] if draw(st.integers(0, 3)) > 0 else label
        x, y, bw, bh = ann["bbox"]
        jitter = st.integers(-2, 2)
        box = [x + draw(jitter), y + draw(jitter), x + bw + draw(jitter), y + bh + draw(jitter)]
        mask = np.roll(_pycocotools_mask(ann["segmentation"], h, w), (draw(jitter), draw(jitter)), axis=(0, 1))
    else:
        x0, y0 = draw(_coord(w)), draw(_coord(h))
        box = [x0, y0, x0 + draw(st.integers(-1, w)), y0 + draw(st.integers(-1, h))]
        mask = np.zeros((h, w), bool)
        c0, r0 = (max(0, int(math.floor(v))) for v in box[:2])
        mask[r0:max(r0, int(math.ceil(box[3]))), c0:max(c0, int(math.ceil(box[2])))] = True
    return box, draw(st.sampled_from(SCORES)), label, mask


@st.composite
def coco_cases(draw, leave_out_fields: bool = True) -> tuple[dict, dict[int, list]]:
    """A COCO instances dict with only what COCOeval scores (no defect), and detections per image id."""
    ids = draw(st.lists(st.integers(1, 9), min_size=1, max_size=3, unique=True))  # file order, not sorted
    listed = draw(st.lists(st.sampled_from(sorted(CATEGORIES)), min_size=1, max_size=3, unique=True))
    images = [{"id": i, "file_name": f"img{i}.png", "height": h, "width": w}
              for i, (h, w) in zip(ids, (draw(st.sampled_from(SIZES)) for _ in ids))]
    annotations, detections = [], {}
    for k, image in enumerate(images):
        anns = [draw(_annotation(image, listed)) for _ in range(draw(st.integers(int(k == 0), 4)))]
        annotations += anns
        detections[image["id"]] = [draw(_detection(image, anns, listed))
                                   for _ in range(draw(st.integers(0, 12)))]
    ann_ids = draw(st.permutations(range(1, len(annotations) + 1)))
    for ann, ann_id in zip(annotations, ann_ids):
        ann["id"] = 100 + ann_id
        if leave_out_fields:  # hand-written files lack fields COCOeval needs: read as if filled in
            for key in ("area", "iscrowd", "id"):
                if draw(st.integers(0, 9)) == 0:
                    del ann[key]
    cats = [{"id": c, "name": CATEGORIES[c]} for c in sorted(set(listed) | set(draw(st.sets(st.sampled_from(
        sorted(CATEGORIES))))))]  # sometimes a category no annotation uses
    return {"images": images, "annotations": annotations, "categories": cats}, detections


# -- the two sides ------------------------------------------------------------------------------------
def write_coco(root: Path, data: dict) -> Path:
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    for img in data["images"]:
        h, w, name = img.get("height"), img.get("width"), img.get("file_name")
        if type(h) is int and type(w) is int and min(h, w) > 0 and isinstance(name, str) and "/" not in name:
            Image.new("RGB", (img["width"], img["height"]), (90, 120, 150)).save(root / img["file_name"])
    path = root / "instances_gen.json"
    path.write_text(json.dumps(data, allow_nan=True))
    return path


def _filled(data: dict) -> dict:
    """The file as COCOeval needs it: ids, iscrowd and areas (the mask's pixel count) filled in."""
    ref = copy.deepcopy(data)
    sizes = {img["id"]: (img["height"], img["width"]) for img in ref["images"]}
    fresh = max([a["id"] for a in ref["annotations"] if "id" in a], default=0) + 1
    for ann in ref["annotations"]:
        if "id" not in ann:
            ann["id"], fresh = fresh, fresh + 1
        ann.setdefault("iscrowd", 0)
        if "area" not in ann:
            h, w = sizes[ann["image_id"]]
            ann["area"] = float(_pycocotools_mask(ann["segmentation"], h, w).sum())
    return ref


def cocoeval_stats(data: dict, detections: dict[int, Detections], iou_type: str) -> list[float]:
    """COCOeval's 12 stats for these detections on this file (fields filled in where it lacks them)."""
    results = []
    for image_id, det in detections.items():
        results += _results(image_id, det, iou_type)
    if not results:  # loadRes needs one result: one of a category COCOeval does not evaluate
        img = data["images"][0]
        empty = np.zeros((img["height"], img["width"]), np.uint8)
        results = [{"image_id": img["id"], "category_id": UNLISTED, "score": 0.5, "bbox": [0.0, 0.0, 1.0, 1.0]}
                   if iou_type == "bbox" else {"image_id": img["id"], "category_id": UNLISTED, "score": 0.5,
                                               "segmentation": mask_utils.encode(np.asfortranarray(empty))}]
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = _filled(data)
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes(results), iou_type)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return [float(v) for v in ev.stats]


def _results(image_id: int, det: Detections, iou_type: str) -> list[dict]:
    out = []
    for k in range(len(det)):
        res = {"image_id": image_id, "category_id": int(det.labels[k]), "score": float(det.scores[k])}
        if iou_type == "bbox":
            x0, y0, x1, y1 = (float(v) for v in det.boxes[k])
            res["bbox"] = [x0, y0, x1 - x0, y1 - y0]
        else:
            res["segmentation"] = mask_utils.encode(np.asfortranarray(det.masks[k].astype(np.uint8)))
        out.append(res)
    return out


def as_detections(raw: dict[int, list], sizes: dict[int, tuple[int, int]]) -> dict[int, Detections]:
    out = {}
    for image_id, dets in raw.items():
        h, w = sizes[image_id]
        out[image_id] = Detections(np.array([d[0] for d in dets], np.float64).reshape(-1, 4),
                                   np.array([d[1] for d in dets]), np.array([d[2] for d in dets], np.int64),
                                   np.stack([d[3] for d in dets]) if dets else np.zeros((0, h, w), bool))
    return out


def shiftbench_stats(ann_file: Path, detections: dict[int, Detections]) -> dict[str, float | None]:
    """Box and mask AP as the runner computes them: the reader's samples, one metric state per image,
    each state saved as the store saves it (JSON) and the parts merged in reverse order."""
    dataset = CocoInstances(ann_file)
    samples = [dataset.load(i) for i in range(len(dataset))]
    values: dict[str, float | None] = {}
    for cls in (BoxAP, MaskAP):
        total = cls()
        for s in reversed(samples):
            part = cls()
            part.update_from_samples([detections[s.meta["coco_id"]]], [s])
            total.merge_state(decode_state(json.loads(json.dumps(encode_state(part.state_dict())))))
        values.update(total.compute())
    return values


def assert_equal_to_cocoeval(data: dict, raw: dict[int, list], ann_file: Path) -> dict[str, float | None]:
    sizes = {img["id"]: (img["height"], img["width"]) for img in data["images"]}
    detections = as_detections(raw, sizes)
    ours = shiftbench_stats(ann_file, detections)
    for prefix, iou_type in (("box", "bbox"), ("mask", "segm")):
        reference = cocoeval_stats(data, detections, iou_type)
        for name, ref in zip(STAT_NAMES, reference):
            value = ours[f"{prefix}_{name}"]
            if ref == -1:
                assert value is None, (prefix, name, value)
            else:
                assert value is not None and abs(value - ref) <= 1e-12, (prefix, name, value, ref)
    return ours


# -- files COCOeval scores: equal -------------------------------------------------------------------
@settings(max_examples=VALID_EXAMPLES, **SETTINGS)
@given(coco_cases())
def test_generated_files_score_as_cocoeval(case):
    data, raw = case
    with tempfile.TemporaryDirectory() as tmp:
        ann_file = write_coco(Path(tmp), data)
        assert_equal_to_cocoeval(data, raw, ann_file)


def test_the_generated_files_reach_what_they_must():
    """The strategy covers the cases the claim is about (checked on a fixed sample of it)."""
    seen = {"crowd": 0, "degenerate": 0, "rle": 0, "decimal": 0, "ties": 0, "unsorted": 0, "no_area": 0}
    for case in _examples(coco_cases(), 60):
        data, raw = case
        anns = data["annotations"]
        seen["crowd"] += any(a.get("iscrowd") for a in anns)
        seen["degenerate"] += any(a["bbox"][2] <= 0 or a["bbox"][3] <= 0 for a in anns)
        seen["rle"] += any(isinstance(a["segmentation"], dict) for a in anns)
        seen["decimal"] += any(v != int(v) for a in anns for v in a["bbox"])
        seen["ties"] += len([d for dets in raw.values() for d in dets]) > len(SCORES)
        seen["unsorted"] += [i["id"] for i in data["images"]] != sorted(i["id"] for i in data["images"])
        seen["no_area"] += any("area" not in a for a in anns)
    assert all(count >= 3 for count in seen.values()), seen


def _examples(strategy, count: int) -> list:
    out = []

    @settings(max_examples=count, **SETTINGS)
    @given(strategy)
    def collect(value):
        out.append(value)

    collect()
    return out


# -- files with a defect: refused, naming the record -------------------------------------------------
def _plant(draw, data: dict) -> str:
    """Put one defect into ``data``; returns the piece of the message that names its record."""
    images, anns = data["images"], data["annotations"]
    kinds = ["duplicate_image", "bad_file_name", "image_size"]
    if anns:
        kinds += ["missing_category", "duplicate_annotation", "annotation_id_0", "unknown_image", "nonfinite_bbox",
                  "huge_bbox", "polygon", "rle_size", "rle_counts", "segmentation_type", "area", "iscrowd"]
    kind = draw(st.sampled_from(kinds))
    if kind == "duplicate_image":
        images.append(dict(images[0], file_name=images[0]["file_name"]))
        return f"image id {images[0]['id']} appears twice"
    if kind == "bad_file_name":
        images[0]["file_name"] = draw(st.sampled_from(["../outside.png", "/etc/hostname", "a/../../x.png", 3, ""]))
        return f"image {images[0]['id']}:"
    if kind == "image_size":
        images[0][draw(st.sampled_from(["height", "width"]))] = draw(st.sampled_from([0, -5, 12.5, "12", None]))
        return f"image {images[0]['id']}:"
    ann = draw(st.sampled_from(anns))
    ann["id"] = ann.get("id", 999)
    name = f"annotation {ann['id']}"
    h, w = next((i["height"], i["width"]) for i in images if i["id"] == ann["image_id"])
    nasty = st.sampled_from([math.nan, math.inf, -math.inf, 1e9, -1e12, 1e300])
    if kind == "missing_category":
        ann["category_id"] = draw(st.sampled_from([99, 2, 0]))
    elif kind == "duplicate_annotation":
        other = draw(st.sampled_from([a for a in anns if a is not ann] or [None]))
        if other is None:
            anns.append(dict(ann))
        else:
            other["id"] = ann["id"]
        name = f"annotation id {ann['id']} appears twice"
    elif kind == "annotation_id_0":
        ann["id"] = 0
        name = "annotation 0"
    elif kind == "unknown_image":
        ann["image_id"] = 1000
    elif kind in ("nonfinite_bbox", "huge_bbox"):
        ann["bbox"][draw(st.integers(0, 3))] = draw(nasty) if kind == "nonfinite_bbox" else 3.0 * max(h, w) + 1
    elif kind == "polygon":
        bad = draw(st.sampled_from(["short", "odd", "nasty", "far", "junk"]))
        poly = [1.0, 1.0, 5.0, 1.0, 5.0, 5.0]
        poly = {"short": poly[:4], "odd": poly + [2.0], "nasty": poly[:5] + [draw(nasty)],
                "far": poly[:5] + [1e9], "junk": poly[:5] + ["3"]}[bad]
        ann["segmentation"] = [poly] if bad != "junk" or draw(st.booleans()) else [poly, {"x": 1}]
    elif kind == "rle_size":
        ann["segmentation"] = {"size": [h + 1, w], "counts": [(h + 1) * w]}
    elif kind == "rle_counts":
        ann["segmentation"] = {"size": [h, w], "counts": draw(st.sampled_from(
            [[h * w - 1], [h * w + 5, -5], [h * w - 0.5, 0.5], "0\x00", "é", "9", [True] * (h * w)]))}
    elif kind == "segmentation_type":
        ann["segmentation"] = draw(st.sampled_from(["polygon", 5, {"counts": [1]}, [[[1, 2, 3, 4, 5, 6]]]]))
    elif kind == "area":
        ann["area"] = draw(st.sampled_from([math.nan, math.inf, "12", True]))
    else:
        ann["iscrowd"] = draw(st.sampled_from([2, -1, "1", 0.5, None]))
    return name


@st.composite
def defective_cases(draw) -> tuple[dict, str]:
    data, _ = draw(coco_cases(leave_out_fields=False))
    return data, _plant(draw, data)


@settings(max_examples=DEFECT_EXAMPLES, **SETTINGS)
@given(defective_cases())
def test_generated_files_with_a_defect_are_refused_in_one_line_naming_the_record(case):
    data, name = case
    with tempfile.TemporaryDirectory() as tmp:
        ann_file = write_coco(Path(tmp) / "coco", data)
        with pytest.raises(DatasetError) as info:
            CocoInstances(ann_file)
    message = str(info.value)
    assert isinstance(info.value, ShiftbenchError) and "\n" not in message and len(message) < 400, message
    assert message.startswith("coco: instances_gen.json: ") and name in message, (name, message)


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "is not a COCO instances file"),
    ('{"annotations": []}', "is not a COCO instances file"),
    ('{"images": [], "annotations": {}}', "is not a COCO instances file"),
    ('{"images": [], "annotations": [], "categories": {"1": "a"}}', "'categories' must be a list, got dict"),
    ('{"images": [], "annotations": [], "categories": [{"id": NaN, "name": "a"}]}', "categories[0]: id nan is not"),
    ('{"images": [], "annotations": [], "categories": [{"id": 1}]}', "category 1: name None is not a string"),
    ('{"images": [], "annotations": [], "categories": [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}]}',
     "category id 1 appears twice"),
    ('{"images": [7], "annotations": []}', "images[0] is not an object: 7"),
    ('{"images": [{"id": "7", "file_name": "a.png", "height": 4, "width": 4}], "annotations": []}',
     "images[0]: id '7' is not an integer"),
    ('{"images": [], "annotations": [{"id": 3, "image_id": 1, "category_id": 1}]}',
     "annotation 3: needs a 4-number bbox [x, y, width, height] of finite numbers, got None"),
    ('{"images": [], "annotations": [{"id": 3, "bbox": [0, 0, 1, 1], "category_id": 1}]}',
     "annotation 3: image_id None is not an integer"),
    ('{"images": [], "annotations": [{"id": 1e400, "bbox": [0, 0, 1, 1]}]}',
     "annotations[0]: id inf is not an integer"),
    ('{"images": [], "annotations": [{"id": 3, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 1e999]}]}',
     "annotation 3: needs a 4-number bbox [x, y, width, height] of finite numbers, got [1, 2, 3, inf]"),
    ("{\"images\": [", "coco: cannot read"),
])
def test_file_level_defects_are_one_line(tmp_path, text, message):
    path = tmp_path / "instances_x.json"
    path.write_text(text)
    with pytest.raises(DatasetError) as info:
        CocoInstances(path)
    assert message in str(info.value) and "\n" not in str(info.value), str(info.value)


# -- the user's three reports ------------------------------------------------------------------------
def _one_image(tmp: Path, anns: list[dict], categories: dict[int, str] | None = None) -> Path:
    data = {"images": [{"id": 5, "file_name": "a.png", "height": 40, "width": 50}], "annotations": anns,
            "categories": [{"id": c, "name": n} for c, n in (categories or {1: "person"}).items()]}
    return write_coco(tmp, data)


def test_a_category_missing_from_categories_is_refused_not_halved(tmp_path):
    # COCOeval scores only listed categories: 1.0 on this file and a perfect detection; shiftbench gave 0.5
    anns = [{"id": 1, "image_id": 5, "category_id": 1, "bbox": [2, 2, 20, 20], "area": 400, "iscrowd": 0},
            {"id": 17, "image_id": 5, "category_id": 99, "bbox": [25, 5, 10, 10], "area": 100, "iscrowd": 0}]
    ann_file = _one_image(tmp_path, anns)
    det = Detections(np.array([[2.0, 2.0, 22.0, 22.0]]), np.array([0.9]), np.array([1]))
    assert cocoeval_stats(json.loads(ann_file.read_text()), {5: det}, "bbox")[0] == pytest.approx(1.0)
    with pytest.raises(DatasetError, match=r"^coco: instances_gen.json: annotation 17: category_id 99 is not in "
                                           r"categories$"):
        CocoInstances(ann_file)
    data = json.loads(ann_file.read_text())
    data["categories"].append({"id": 99, "name": "thing"})  # the user's fix: list it
    ann_file.write_text(json.dumps(data))
    dataset = CocoInstances(ann_file)
    metric = BoxAP()
    metric.update_from_samples([det], [dataset.load(0)])
    assert metric.compute()["box_ap"] == cocoeval_stats(data, {5: det}, "bbox")[0] == pytest.approx(0.5)


def test_box_only_annotations_give_box_ap_and_refuse_mask_ap(tmp_path):
    anns = [{"id": 3, "image_id": 5, "category_id": 1, "bbox": [2.5, 2.25, 20.1, 19.7], "area": 400, "iscrowd": 0}]
    ann_file = _one_image(tmp_path, anns)
    det = Detections(np.array([[2.0, 2.0, 22.0, 22.0]]), np.array([0.9]), np.array([1]),
                     np.ones((1, 40, 50), bool))
    sample = CocoInstances(ann_file).load(0)
    box = BoxAP()
    box.update_from_samples([det], [sample])
    reference = cocoeval_stats(json.loads(ann_file.read_text()), {5: det}, "bbox")
    assert [box.compute()[f"box_{k}"] for k in STAT_NAMES[:3]] == reference[:3]
    with pytest.raises(DatasetError, match="mask_ap: image 5: annotation 3 has no segmentation"):
        MaskAP().update_from_samples([det], [sample])


def test_exact_boxes_decide_an_iou_on_a_threshold(tmp_path):
    # IoU exactly 0.5 on the file's decimal box; float32 corners (Sample.boxes) give 0.49999998: no match
    anns = [{"id": 1, "image_id": 5, "category_id": 1, "bbox": [0.7, 0.1, 9.9, 6.6], "area": 65, "iscrowd": 0,
             "segmentation": [[0.7, 0.1, 10.6, 0.1, 10.6, 6.7, 0.7, 6.7]]}]
    ann_file = _one_image(tmp_path, anns)
    dets = {5: [([0.0, 0.0, 9.0, 11.0], 0.9, 1, np.zeros((40, 50), bool))]}
    ours = assert_equal_to_cocoeval(json.loads(ann_file.read_text()), dets, ann_file)
    assert ours["box_ap50"] == pytest.approx(1.0)


# -- through the CLI ---------------------------------------------------------------------------------
def _spec(root: Path, tmp: Path) -> Path:
    spec = tmp / "spec.yaml"
    spec.write_text(f"dataset: {root}\nmodels: [{coco_synth.DETECTOR}]\nshifts: [clean]\n"
                    "metrics: [box_ap]\nbatch_size: 3\nseed: 0\n")
    return spec


def _cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err


def test_cli_refuses_a_bad_coco_file_in_one_line_and_keeps_the_store(tmp_path, capsys):
    root = coco_synth.write_coco_set(tmp_path / "coco", n_images=3)
    ann_file = root / "annotations" / "instances_val.json"
    good = ann_file.read_text()
    spec, store = _spec(root, tmp_path), tmp_path / "results.db"
    data = json.loads(good)
    data["images"][2]["id"] = data["images"][0]["id"]  # two images, one id: one row of predictions for both
    ann_file.write_text(json.dumps(data))
    code, err = _cli(["evaluate", "--config", str(spec), "--store", str(store)], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0] == (f"error: coco: instances_val.json: image id {data['images'][0]['id']} appears twice in "
                        "'images' (images[0] and images[2])")
    assert not store.exists() and not list(tmp_path.glob("results.db*"))  # nothing half-written

    ann_file.write_text(good)  # a good run, then the same store with a NaN in a box
    code, err = _cli(["evaluate", "--config", str(spec), "--store", str(store)], capsys)
    assert code == 0, err
    before = store.read_bytes()
    data = json.loads(good)
    data["annotations"][4]["bbox"][1] = math.nan
    ann_file.write_text(json.dumps(data))
    for extra in ([], ["--dry-run"]):
        code, err = _cli(["evaluate", "--config", str(spec), "--store", str(store)] + extra, capsys)
        assert code == 2 and err.strip() == (
            f"error: coco: instances_val.json: annotation {data['annotations'][4]['id']}: needs a 4-number bbox "
            f"[x, y, width, height] of finite numbers, got {data['annotations'][4]['bbox']!r}"), err
        assert store.read_bytes() == before
