"""A small synthetic COCO-format set and a colour-blob detector, for detection tests through the runner.

The set: a few images of coloured shapes on a textured grey ground, one colour per category (ids 1, 3 and
18: non-contiguous, as in COCO), with instances that overlap (a later shape hides part of an earlier one),
a crowd region (a comb of thin person-coloured stripes, uncompressed RLE), polygon and compressed-RLE
segmentations, and areas as COCO writes them (polygon area / pixel count), which differ from box areas.
Triangles whose box is medium-sized (> 32^2 px) but whose area is small make the size ranges depend on
using the annotation's area. No image is larger than 96^2 px, so the "large" stats are undefined.

The detector (registered as ``_test_colour_detector``) reads nothing but the image: it thresholds each
category colour and reports connected components as instances (box, mask, a score from the colour
distance). It finds visible parts of shapes, so occlusion, merged neighbours and crowd stripes give it a
COCO AP well inside (0, 1), and noise corruptions lower it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from shiftbench.datasets.coco import annotation_to_mask, encode_rle_string
from shiftbench.models.base import Detections, Detector, LabelSpace, as_image_list
from shiftbench.registry import MODELS

CATEGORIES = {1: "person", 3: "car", 18: "dog"}
COLOURS = {1: (215, 45, 40), 3: (40, 190, 60), 18: (45, 70, 225)}
DETECTOR = "_test_colour_detector"


def _polygon_area(poly: Sequence[float]) -> float:
    xy = np.asarray(poly, float).reshape(-1, 2)
    x, y = xy[:, 0], xy[:, 1]
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2)


def _uncompressed_rle(mask: np.ndarray) -> dict:
    flat = mask.T.reshape(-1)
    bounds = np.concatenate([[0], np.flatnonzero(flat[1:] != flat[:-1]) + 1, [flat.size]])
    counts = np.diff(bounds).tolist()
    return {"size": list(mask.shape), "counts": ([0] + counts) if flat[0] else counts}


def _bbox(mask: np.ndarray) -> list[float]:
    ys, xs = np.nonzero(mask)
    return [float(xs.min()), float(ys.min()), float(xs.max() + 1 - xs.min()), float(ys.max() + 1 - ys.min())]


def _image_annotations(k: int, h: int, w: int, rng: np.random.Generator) -> list[dict]:
    """Annotations of image ``k`` (without ids), in drawing order."""
    anns = []

    def polygon(cat: int, points: list[float]) -> None:
        xy = np.asarray(points, float).reshape(-1, 2)
        x0, y0 = xy.min(axis=0)
        x1, y1 = xy.max(axis=0)
        anns.append({"category_id": cat, "iscrowd": 0, "segmentation": [[round(v, 1) for v in points]],
                     "area": _polygon_area(points), "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)]})

    def rle(cat: int, mask: np.ndarray, crowd: bool = False) -> None:
        seg = _uncompressed_rle(mask) if crowd else encode_rle_string(mask)
        anns.append({"category_id": cat, "iscrowd": int(crowd), "segmentation": seg, "area": float(mask.sum()),
                     "bbox": _bbox(mask)})

    jitter = lambda: float(rng.integers(-3, 4))  # noqa: E731 - tiny helper
    # a triangle with a medium box and a small area, category by image
    cat = (1, 3, 18)[k % 3]
    x, y = 3 + jitter(), 3 + jitter()
    polygon(cat, [x, y, x + 38, y, x, y + 36])
    # a rectangle (RLE) of another category overlapping the triangle's corner: occludes part of it
    m = np.zeros((h, w), bool)
    y0, x0 = 14 + int(jitter()), 16 + int(jitter())
    m[y0:y0 + 30 + k, x0:x0 + 34] = True
    rle((3, 18, 1)[k % 3], m)
    # a small octagon of a third category, away from the others
    cx, cy, r = w - 14 + jitter(), h - 16 + jitter(), 6 + k % 3
    angles = np.linspace(0, 2 * np.pi, 9)[:-1]
    polygon((18, 1, 3)[k % 3], [v for a in angles for v in (cx + r * np.cos(a), cy + r * np.sin(a))])
    if k % 2 == 0:  # a crowd region: thin vertical person stripes, which the detector sees as many blobs
        m = np.zeros((h, w), bool)
        m[h - 12:h - 3, 4:40:3] = True
        rle(1, m, crowd=True)
    if k % 3 == 1:  # two same-category instances that touch: the detector merges them into one blob
        polygon(3, [w - 30, 4, w - 18, 4, w - 18, 16, w - 30, 16])
        polygon(3, [w - 18, 10, w - 6, 10, w - 6, 22, w - 18, 22])
    return anns


def write_coco_set(root: Path, n_images: int = 6, seed: int = 0) -> Path:
    """Write ``root/annotations/instances_val.json`` and ``root/val/*.png``; returns ``root``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    root = Path(root)
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "val").mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    sizes = [(64, 80), (72, 88), (60, 76), (70, 70), (66, 90), (62, 84), (68, 80), (64, 86)]
    for k in range(n_images):
        h, w = sizes[k % len(sizes)]
        image_id = 100 + 7 * k  # not 0..n-1: ids are COCO's, not positions
        image = np.clip(110 + rng.normal(0, 8, (h, w, 3)), 0, 255)
        for ann in _image_annotations(k, h, w, rng):
            mask = annotation_to_mask(ann["segmentation"], h, w)
            image[mask] = np.clip(np.asarray(COLOURS[ann["category_id"]]) + rng.normal(0, 6, (int(mask.sum()), 3)), 0, 255)
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, **ann})
        name = f"img_{k:02d}.png"
        Image.fromarray(image.astype(np.uint8)).save(root / "val" / name)
        images.append({"id": image_id, "file_name": name, "height": h, "width": w})
    data = {"images": images, "annotations": annotations,
            "categories": [{"id": c, "name": n, "supercategory": "thing"} for c, n in CATEGORIES.items()]}
    (root / "annotations" / "instances_val.json").write_text(json.dumps(data))
    return root


class ColourDetector(Detector):
    """Connected blobs of each category's colour, as instances (boxes, masks, scores), labels = category ids."""

    def __init__(self, threshold: float = 60.0, min_area: int = 4, device: str = "cpu", dtype: str = "float32"):
        self.name = DETECTOR
        names = ["N/A"] * (max(CATEGORIES) + 1)
        for c, n in CATEGORIES.items():
            names[c] = n
        self.label_space = LabelSpace("coco_synth", tuple(names))
        self.threshold, self.min_area = float(threshold), int(min_area)

    def predict(self, images: Sequence[np.ndarray]) -> list[Detections]:
        import cv2

        out = []
        for image in as_image_list(images):
            boxes, scores, labels, masks = [], [], [], []
            pixels = image.astype(np.int16)
            for cat, colour in COLOURS.items():
                distance = np.abs(pixels - np.asarray(colour, np.int16)).max(axis=2)
                on = (distance < self.threshold).astype(np.uint8)
                count, comp, stats, _ = cv2.connectedComponentsWithStats(on, connectivity=8)
                for j in range(1, count):
                    x, y, bw, bh, area = (int(v) for v in stats[j])
                    if area < self.min_area:
                        continue
                    mask = comp == j
                    # close colours and solid blobs score high; noise specks and thin stripes low
                    fill = area / (bw * bh)
                    scores.append(round(float((1 - distance[mask].mean() / self.threshold) * fill), 6))
                    boxes.append([x, y, x + bw, y + bh])
                    labels.append(cat)
                    masks.append(mask)
            h, w = image.shape[:2]
            out.append(Detections(np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(scores, np.float32),
                                  np.asarray(labels, np.int64),
                                  np.stack(masks) if masks else np.zeros((0, h, w), bool)))
        return out


if DETECTOR not in MODELS:
    MODELS.add(DETECTOR, ColourDetector, description="colour-blob detector for tests", task="detection")
