"""Corpus cases for COCO files: each record COCOeval cannot score as shiftbench would is refused in one line.

Before, a category missing from ``categories`` halved box AP silently (COCOeval leaves it out); two images
with one id shared one row of predictions; a NaN in a box passed the dry run and broke the store's JSON; a
polygon point at 1e9 asked for a 37 GiB mask; an RLE of another size than its image failed in the middle of
a run. Each case is a valid COCO folder (two images, polygons, a crowd RLE) and spec but for one record;
the dry run opens the dataset, so it is refused before any work, naming the image or annotation.
"""

from __future__ import annotations

from dataclasses import replace

import copy
import math
from pathlib import Path
from typing import Callable

from corpus.case import Case, write_json, write_png, write_text

SPEC = ("dataset: coco\n"
        "models: [{name: dummy_detector, params: {label_space: [person, car]}}]\n"
        "shifts: [clean]\nmetrics: [box_ap, mask_ap]\nbatch_size: 2\nseed: 0\n")
ARGV = ["evaluate", "--config", "spec.yaml", "--store", "{out}/results.db", "--dry-run"]
WHERE = "coco: instances_val.json: "


def instances() -> dict:
    """The valid file: two 24x32 images, a polygon and a crowd RLE (uncompressed) on the first."""
    crowd = [484, 4, 20, 4, 20, 4, 20, 4, 208]  # rows 4..7 of columns 20..23, column-major runs
    return {
        "images": [{"id": 1, "file_name": "a.png", "height": 24, "width": 32},
                   {"id": 2, "file_name": "b.png", "height": 24, "width": 32}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [2.0, 3.0, 10.0, 8.0], "area": 80.0, "iscrowd": 0,
             "segmentation": [[2.0, 3.0, 12.0, 3.0, 12.0, 11.0, 2.0, 11.0]]},
            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [20.0, 4.0, 4.0, 4.0], "area": 16.0, "iscrowd": 1,
             "segmentation": {"size": [24, 32], "counts": crowd}},
            {"id": 3, "image_id": 2, "category_id": 3, "bbox": [4.5, 6.5, 15.0, 9.0], "area": 120.0, "iscrowd": 0,
             "segmentation": [[4.5, 6.5, 19.5, 6.5, 12.0, 15.5]]},
        ],
        "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}],
    }


def folder(change: Callable[[dict], None] | None = None) -> Callable[[Path], None]:
    """A builder: the COCO folder and spec, with ``change`` applied to the annotation file's content."""

    def build(root: Path) -> None:
        data = copy.deepcopy(instances())
        if change is not None:
            change(data)
        write_png(root / "coco" / "val" / "a.png", 24, 32, seed=1)
        write_png(root / "coco" / "val" / "b.png", 24, 32, seed=2)
        write_json(root / "coco" / "annotations" / "instances_val.json", data)
        write_text(root / "spec.yaml", SPEC)

    return build


def _set(path: tuple, value) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        node = data
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return change


CASES = [
    Case("coco-category-not-listed", folder(_set(("annotations", 2, "category_id"), 99)), ARGV, 2,
         WHERE + "annotation 3: category_id 99 is not in categories",
         "an annotation of an unlisted category halved box AP (COCOeval leaves it out)", "numbers"),
    Case("coco-duplicate-image-id", folder(_set(("images", 1, "id"), 1)), ARGV, 2,
         WHERE + "image id 1 appears twice in 'images' (images[0] and images[1])",
         "two images with one id shared one row of predictions in the store", "numbers"),
    Case("coco-duplicate-annotation-id", folder(_set(("annotations", 2, "id"), 1)), ARGV, 2,
         WHERE + "annotation id 1 appears twice in 'annotations' (annotations[0] and annotations[2])",
         "pycocotools keeps the last annotation of an id and scores it twice", "numbers"),
    Case("coco-nan-bbox", folder(_set(("annotations", 0, "bbox", 1), math.nan)), ARGV, 2,
         WHERE + "annotation 1: needs a 4-number bbox [x, y, width, height] of finite numbers, "
                 "got [2.0, nan, 10.0, 8.0]",
         "a NaN box (Python's json reads NaN) passed the dry run and broke the store's JSON", "dry-run"),
    Case("coco-huge-polygon", folder(_set(("annotations", 2, "segmentation", 0, 4), 1e9)), ARGV, 2,
         WHERE + "annotation 3 (image 2): segmentation polygon 0 has a point more than one image size beyond",
         "a polygon point at 1e9 asked for a 37 GiB mask when the image was loaded", "dry-run"),
    Case("coco-rle-wrong-size", folder(_set(("annotations", 1, "segmentation", "size"), [32, 24])), ARGV, 2,
         WHERE + "annotation 2 (image 1): segmentation RLE size [32, 24] differs from the image's [height, width] "
                 "[24, 32]",
         "an RLE of another size than its image failed in the middle of a run", "dry-run"),
    Case("coco-file-name-escapes", folder(_set(("images", 1, "file_name"), "../../spec.yaml")), ARGV, 2,
         WHERE + "image 2: file_name '../../spec.yaml' escapes the dataset root",
         "a file_name with '..' reads a file outside the image folder", "paths"),
    Case("coco-annotation-id-zero", folder(_set(("annotations", 0, "id"), 0)), ARGV, 2,
         WHERE + "annotation 0: id 0 is refused (COCOeval counts a detection matched to annotation id 0 as a "
                 "false positive)",
         "COCOeval records a match by the annotation's id, so a match to id 0 counts as a miss", "numbers"),
]

# the issue-25 class of each case (files-lost, numbers silently wrong, traceback, dry-run promise)
KINDS = {
    "coco-category-not-listed": "numbers",
    "coco-duplicate-image-id": "numbers",
    "coco-duplicate-annotation-id": "numbers",
    "coco-nan-bbox": "traceback",
    "coco-huge-polygon": "traceback",
    "coco-rle-wrong-size": "dry-run",
    "coco-file-name-escapes": "numbers",
    "coco-annotation-id-zero": "numbers",
}
CASES = [replace(case, kind=KINDS[case.name]) for case in CASES]
