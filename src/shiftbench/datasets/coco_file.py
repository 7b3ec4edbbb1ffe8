"""Reads a COCO instances file and checks every record COCOeval reads, before any image is touched.

A file is either read as pycocotools reads it (so ``box_ap`` / ``mask_ap`` equal COCOeval's stats on it), or
refused with one :class:`~shiftbench.errors.DatasetError` line naming the file and the record:

- refused: a missing or non-list ``images`` / ``annotations``; an image without an integer ``id`` or positive
  integer ``height`` / ``width``, a ``file_name`` that leaves the image folder; two images, annotations or
  categories with one id (pycocotools keeps the last under that id and scores the wrong pairs); annotation
  id 0 (COCOeval records a match as the matched annotation's id, so a match to id 0 counts as a false
  positive); an ``image_id`` that no image has; a ``category_id`` that ``categories`` does not list (COCOeval
  leaves it out, shiftbench would score it); a bbox that is not 4 finite numbers, or reaches more than one
  image size beyond the image; an ``area`` that is not a finite number; ``iscrowd`` other than 0 / 1; a
  polygon of fewer than 3 points, of an odd length, with a non-finite coordinate or one more than one image
  size outside the image, or traced over more than :data:`MAX_PERIMETER` times the image's width + height
  (pycocotools would trace it, at 5x resolution, in memory); an RLE whose size is not the image's, whose
  counts are not non-negative integers summing to height x width, or a malformed compressed string;
- scored as COCOeval scores them: zero or negative box widths / heights (IoU 0 with every detection),
  negative or tiny areas (outside every size range), crowd regions (polygons or RLE), categories listed
  without annotations, images without annotations. Fields COCOeval needs but hand-written files may lack
  (an annotation's ``id``, ``area``, ``iscrowd``) are read as COCOeval reads the same file with them filled
  in: a fresh id, the mask's pixel count (the box area without a segmentation), 0.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError, ShiftbenchError
from .common import resolve_inside

__all__ = ["CocoFile", "read_instances", "rle_string_counts", "MAX_CATEGORY_ID", "MAX_PERIMETER"]

MAX_CATEGORY_ID = 1_000_000  # a category id is a label-space slot: slots 0..id are allocated
MAX_PERIMETER = 1000  # a polygon's traced length, in units of the image's (width + height)
_INT64 = 2 ** 63


@dataclass
class CocoFile:
    """The checked content: categories (id -> name) and image records in file order, each with its
    annotations in file order (``{"id", "file_name", "height", "width", "anns"}``)."""

    categories: dict[int, str]
    images: list[dict[str, Any]]


def rle_string_counts(text: str) -> list[int]:
    """Decode COCO's compressed RLE string (6-bit chunks, offset 48, deltas from two runs back).

    >>> rle_string_counts("326O")  # pycocotools' encoding of a 3x4 mask: 3 off, 2 on, 6 off, 1 on
    [3, 2, 6, 1]
    """
    data = np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.int64) - 48
    counts: list[int] = []
    pos = 0
    n = len(data)
    while pos < n:
        value, shift, more = 0, 0, True
        while more:
            if pos >= n:
                raise ShiftbenchError("truncated compressed RLE string")
            chunk = int(data[pos])
            value |= (chunk & 0x1F) << shift
            more = bool(chunk & 0x20)
            pos += 1
            shift += 5
            if not more and chunk & 0x10:
                value |= -1 << shift  # sign-extend the last chunk
        if len(counts) > 2:
            value += counts[-2]
        counts.append(value)
    return counts


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64


def _is_number(value: Any) -> bool:
    """A finite JSON number (an int too large for a float is not: no coordinate or area is that big)."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and -1e300 < value < 1e300


def _show(value: Any, limit: int = 60) -> str:
    """A value in a message: its repr (one line: newlines escaped), cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DatasetError(f"coco: cannot read {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("annotations"), list):
        raise DatasetError(f"coco: {path} is not a COCO instances file (needs 'images' and 'annotations' lists)")
    return data


def read_instances(path: Path, image_dir: Path) -> CocoFile:
    """Read ``path``, check every record (see the module's docstring) and group annotations by image."""
    data = _load(path)
    where = f"coco: {path.name}"
    categories = _categories(data.get("categories"), where)
    images = _images(data["images"], where, image_dir)
    by_id = {img["id"]: img for img in images}
    seen: dict[int, int] = {}
    for k, ann in enumerate(data["annotations"]):
        image = _annotation_fields(ann, k, where, seen, by_id, categories)
        _annotation_geometry(ann, _name(ann, k), where, image)
        image["anns"].append(ann)
    return CocoFile(categories, images)


def _categories(entries: Any, where: str) -> dict[int, str]:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise DatasetError(f"{where}: 'categories' must be a list, got {type(entries).__name__}")
    out: dict[int, str] = {}
    for k, cat in enumerate(entries):
        cid = cat.get("id") if isinstance(cat, dict) else None
        if not _is_int(cid) or not 0 <= cid <= MAX_CATEGORY_ID:
            raise DatasetError(f"{where}: categories[{k}]: id {_show(cid)} is not an integer 0..{MAX_CATEGORY_ID}")
        if not isinstance(cat.get("name"), str):
            raise DatasetError(f"{where}: category {cid}: name {_show(cat.get('name'))} is not a string")
        if cid in out:
            raise DatasetError(f"{where}: category id {cid} appears twice in 'categories'")
        out[cid] = cat["name"]
    return out


def _images(entries: list[Any], where: str, image_dir: Path) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    first: dict[int, int] = {}
    for k, img in enumerate(entries):
        if not isinstance(img, dict):
            raise DatasetError(f"{where}: images[{k}] is not an object: {_show(img)}")
        image_id = img.get("id")
        if not _is_int(image_id):
            raise DatasetError(f"{where}: images[{k}]: id {_show(image_id)} is not an integer")
        if image_id in first:
            raise DatasetError(f"{where}: image id {image_id} appears twice in 'images' "
                               f"(images[{first[image_id]}] and images[{k}])")
        first[image_id] = k
        height, width = img.get("height"), img.get("width")
        if not (_is_int(height) and _is_int(width) and height > 0 and width > 0):
            raise DatasetError(f"{where}: image {image_id}: height and width must be positive integers, "
                               f"got {_show(height)} and {_show(width)}")
        try:
            resolve_inside(image_dir, img.get("file_name"), "file_name")
        except ShiftbenchError as exc:
            raise DatasetError(f"{where}: image {image_id}: {exc}") from None
        records.append({"id": image_id, "file_name": img["file_name"], "height": height, "width": width,
                        "anns": []})
    return records


def _name(ann: dict[str, Any], k: int) -> str:
    return f"annotation {ann['id']}" if "id" in ann else f"annotations[{k}]"


def _annotation_fields(ann: Any, k: int, where: str, seen: dict[int, int], images: dict[int, dict[str, Any]],
                       categories: dict[int, str]) -> dict[str, Any]:
    """Check an annotation's ids, bbox, area and iscrowd; returns its image's record."""
    if not isinstance(ann, dict):
        raise DatasetError(f"{where}: annotations[{k}] is not an object: {_show(ann)}")
    if "id" in ann:
        if not _is_int(ann["id"]):
            raise DatasetError(f"{where}: annotations[{k}]: id {_show(ann['id'])} is not an integer")
        if ann["id"] == 0:
            raise DatasetError(f"{where}: annotation 0: id 0 is refused (COCOeval counts a detection matched to "
                               "annotation id 0 as a false positive); number annotations from 1")
        if ann["id"] in seen:
            raise DatasetError(f"{where}: annotation id {ann['id']} appears twice in 'annotations' "
                               f"(annotations[{seen[ann['id']]}] and annotations[{k}])")
        seen[ann["id"]] = k
    name = _name(ann, k)
    bbox = ann.get("bbox")
    if not isinstance(bbox, list) or len(bbox) != 4 or not all(_is_number(v) for v in bbox):
        raise DatasetError(f"{where}: {name}: needs a 4-number bbox [x, y, width, height] of finite numbers, "
                           f"got {_show(bbox)}")
    for key in ("image_id", "category_id"):
        if not _is_int(ann.get(key)):
            raise DatasetError(f"{where}: {name}: {key} {_show(ann.get(key))} is not an integer")
    if ann["image_id"] not in images:
        raise DatasetError(f"{where}: {name}: image_id {ann['image_id']} is not in 'images'")
    if ann["category_id"] not in categories:
        listed = "" if categories else " (the file lists none)"
        raise DatasetError(f"{where}: {name}: category_id {ann['category_id']} is not in categories{listed}")
    area = ann.get("area")
    if area is not None and (isinstance(area, bool) or not isinstance(area, (int, float))):
        raise DatasetError(f"{where}: {name}: area {_show(area)} is not a number")
    if area is not None and not _is_number(area):
        raise DatasetError(f"{where}: {name}: area {_show(area)} is not a finite number")
    if "iscrowd" in ann and (isinstance(ann["iscrowd"], float) or ann["iscrowd"] not in (0, 1)):
        raise DatasetError(f"{where}: {name}: iscrowd {_show(ann['iscrowd'])} is not 0 or 1")
    return images[ann["image_id"]]


def _annotation_geometry(ann: dict[str, Any], name: str, where: str, image: dict[str, Any]) -> None:
    """Check the bbox and the segmentation against the image's size."""
    h, w = image["height"], image["width"]
    x, y, bw, bh = ann["bbox"]
    if not (_inside(x, w) and _inside(x + bw, w) and _inside(y, h) and _inside(y + bh, h)):
        raise DatasetError(f"{where}: {name} (image {image['id']}): bbox {_show(ann['bbox'])} reaches more than "
                           f"one image size beyond the {w}x{h} image")
    seg = ann.get("segmentation")
    if not seg:
        return  # no mask: box AP only (mask AP refuses it)
    if isinstance(seg, list):
        reason = _polygons_problem(seg, h, w)
    elif isinstance(seg, dict):
        reason = _rle_problem(seg, h, w)
    else:
        reason = f"is a {type(seg).__name__}, not polygons (a list) or RLE (a dict)"
    if reason:
        raise DatasetError(f"{where}: {name} (image {image['id']}): segmentation {reason}")


def _inside(v: float, size: int) -> bool:
    """Within one image size of the image: -size <= v <= 2 * size."""
    return -size <= v <= 2 * size


def _polygons_problem(polygons: list[Any], h: int, w: int) -> str | None:
    for k, poly in enumerate(polygons):
        # types first (map(type) is fast on COCO's long polygons): numpy would read True and "3" as numbers
        numbers = isinstance(poly, list) and set(map(type, poly)) <= {int, float}
        try:
            xy = np.asarray(poly, np.float64) if numbers else None
        except OverflowError:  # an integer beyond float range
            xy = None
        if xy is None or not np.isfinite(xy).all():
            return f"polygon {k} is not a list of finite numbers: {_show(poly)}"
        if len(poly) < 6 or len(poly) % 2:
            return f"polygon {k} needs an even number (>= 6) of coordinates, got {len(poly)}"
        xy = xy.reshape(-1, 2)
        if not (_inside(xy[:, 0].min(), w) and _inside(xy[:, 0].max(), w)
                and _inside(xy[:, 1].min(), h) and _inside(xy[:, 1].max(), h)):
            return f"polygon {k} has a point more than one image size beyond the {w}x{h} image"
        steps = np.abs(np.diff(np.vstack([xy, xy[:1]]), axis=0)).max(axis=1).sum()
        if steps > MAX_PERIMETER * (w + h):
            return f"polygon {k} is {steps:.0f} px long, more than {MAX_PERIMETER} x (width + height)"
    return None


def _rle_problem(rle: dict[str, Any], h: int, w: int) -> str | None:
    size, counts = rle.get("size"), rle.get("counts")
    if not (isinstance(size, list) and len(size) == 2 and all(_is_int(v) for v in size)):
        return f"RLE needs 'size' [height, width], got {_show(size)}"
    if size != [h, w]:
        return f"RLE size {size} differs from the image's [height, width] {[h, w]}"
    if isinstance(counts, str):
        if any(not 48 <= ord(c) < 112 for c in counts):
            return "compressed RLE string has characters outside '0'..'o'"
        try:
            counts = rle_string_counts(counts)
        except ShiftbenchError as exc:
            return f"has a {exc}"
    elif not isinstance(counts, list) or not all(_is_int(v) for v in counts):
        return f"RLE counts must be a compressed string or a list of integers, got {_show(counts)}"
    if any(v < 0 for v in counts):
        return "RLE has a negative run length"
    if sum(counts) != h * w:
        return f"RLE counts sum to {sum(counts)}, not height x width = {h * w}"
    return None
