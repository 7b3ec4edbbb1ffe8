"""COCO instances reader (boxes, category ids, instance masks from polygons and RLE) with its own mask decoder.

The decoder reproduces pycocotools' rasterisation (tested against it): RLE runs are column-major and start
with background; polygons are traced at 5x resolution and filled by the parity of their column boundary
crossings, as pycocotools' ``frPoly`` does, so masks match it pixel for pixel.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..files import write_atomic
from ..labelspace import LabelSpace
from ..registry import DATASETS
from ..sample import Sample, load_image
from .coco_file import read_instances, rle_string_counts
from .common import ON_ERROR, VERIFY, ReaderDataset, check_choice, check_root, screen

__all__ = ["CocoInstances", "InstanceMasks", "decode_rle", "encode_rle_string", "polygon_to_mask",
           "annotation_to_mask", "annotation_area"]


# -- masks -------------------------------------------------------------------------------------------
def _runs_to_mask(counts: Sequence[int], height: int, width: int) -> np.ndarray:
    counts = np.asarray(counts, dtype=np.int64)
    if counts.sum() != height * width or (counts < 0).any():
        raise ShiftbenchError(f"RLE counts sum to {int(counts.sum())}, expected {height}x{width}={height * width}")
    values = np.arange(len(counts)) % 2 == 1  # runs alternate, starting with background
    flat = np.repeat(values, counts)
    return flat.reshape(width, height).T.copy()  # column-major order


def encode_rle_string(mask: np.ndarray) -> dict[str, Any]:
    """Encode an HxW bool mask as COCO compressed RLE ``{"size": [h, w], "counts": str}``."""
    mask = np.asarray(mask, dtype=bool)
    h, w = mask.shape
    flat = mask.T.reshape(-1)
    change = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat.size and flat[0]:
        counts = [0] + counts
    chars = []
    for i, count in enumerate(counts):
        value = count - counts[i - 2] if i > 2 else count
        more = True
        while more:
            chunk = value & 0x1F
            value >>= 5
            more = not ((value == 0 and not chunk & 0x10) or (value == -1 and chunk & 0x10))
            chars.append(chr((chunk | (0x20 if more else 0)) + 48))
    return {"size": [h, w], "counts": "".join(chars)}


def decode_rle(rle: dict[str, Any]) -> np.ndarray:
    """An HxW bool mask from a COCO RLE dict (``counts`` as a list or a compressed string)."""
    try:
        height, width = (int(v) for v in rle["size"])
        counts = rle["counts"]
    except (KeyError, TypeError, ValueError):
        raise ShiftbenchError(f"malformed RLE (needs 'size' [h, w] and 'counts'): {str(rle)[:80]}") from None
    if isinstance(counts, bytes):
        counts = counts.decode("ascii")
    if isinstance(counts, str):
        counts = rle_string_counts(counts)
    return _runs_to_mask(counts, height, width)


def polygon_to_mask(polygon: Sequence[float], height: int, width: int) -> np.ndarray:
    """Rasterise one polygon ``[x0, y0, x1, y1, ...]`` exactly as pycocotools does."""
    xy = np.asarray(polygon, dtype=np.float64).reshape(-1, 2)
    scale = 5.0
    # vertices at 5x resolution, rounded like C's (int)(v + .5) (truncation toward zero)
    x = np.trunc(scale * xy[:, 0] + 0.5).astype(np.int64)
    y = np.trunc(scale * xy[:, 1] + 0.5).astype(np.int64)
    x = np.append(x, x[0])
    y = np.append(y, y[0])
    us, vs = [], []
    for j in range(len(xy)):  # one vectorised segment per polygon edge
        xs, xe, ys, ye = int(x[j]), int(x[j + 1]), int(y[j]), int(y[j + 1])
        dx, dy = abs(xe - xs), abs(ys - ye)
        flip = (dx >= dy and xs > xe) or (dx < dy and ys > ye)
        if flip:
            xs, xe, ys, ye = xe, xs, ye, ys
        if dx >= dy:
            slope = (ye - ys) / dx if dx else 0.0
            d = np.arange(dx + 1)
            t = dx - d if flip else d
            us.append(t + xs)
            vs.append(np.trunc(ys + slope * t + 0.5).astype(np.int64))
        else:
            slope = (xe - xs) / dy
            d = np.arange(dy + 1)
            t = dy - d if flip else d
            vs.append(t + ys)
            us.append(np.trunc(xs + slope * t + 0.5).astype(np.int64))
    u = np.concatenate(us)
    v = np.concatenate(vs)
    # keep the points where the traced boundary crosses a pixel-column centre, back at 1x resolution
    moved = np.flatnonzero(u[1:] != u[:-1]) + 1
    xd = np.where(u[moved] < u[moved - 1], u[moved], u[moved] - 1).astype(np.float64)
    xd = (xd + 0.5) / scale - 0.5
    keep = (np.floor(xd) == xd) & (xd >= 0) & (xd <= width - 1)
    yd = np.minimum(v[moved], v[moved - 1]).astype(np.float64)
    yd = (yd + 0.5) / scale - 0.5
    yd = np.ceil(np.clip(yd, 0, height))
    positions = xd[keep].astype(np.int64) * height + yd[keep].astype(np.int64)
    # each crossing toggles inside/outside from its position on (column-major order); crossings at the
    # same position cancel in pairs, and the remaining toggle positions are the run boundaries
    unique, count = np.unique(positions[positions < height * width], return_counts=True)
    bounds = np.concatenate([[0], unique[count % 2 == 1], [height * width]])
    return _runs_to_mask(np.diff(bounds), height, width)


def annotation_to_mask(segmentation: Any, height: int, width: int) -> np.ndarray:
    """The HxW bool mask of a COCO ``segmentation`` (list of polygons, or an RLE dict)."""
    if isinstance(segmentation, dict):
        if isinstance(segmentation.get("counts"), list) and not isinstance(segmentation.get("size"), list):
            raise ShiftbenchError("malformed RLE segmentation: 'size' must be [h, w]")
        mask = decode_rle(segmentation)
        if mask.shape != (height, width):
            raise ShiftbenchError(f"RLE size {mask.shape} differs from the image size {(height, width)}")
        return mask
    if isinstance(segmentation, list):
        mask = np.zeros((height, width), dtype=bool)
        for polygon in segmentation:
            if len(polygon) < 6 or len(polygon) % 2:
                raise ShiftbenchError(f"polygon needs an even number (>= 6) of coordinates, got {len(polygon)}")
            mask |= polygon_to_mask(polygon, height, width)
        return mask
    raise ShiftbenchError(f"unknown segmentation type {type(segmentation).__name__}")


def annotation_area(ann: dict[str, Any], height: int, width: int) -> float:
    """The area COCOeval sizes an annotation by: its ``area`` field; without one, its mask's pixel count
    (the box area when it has no segmentation). pycocotools requires the field; files written by hand may lack it."""
    if ann.get("area") is not None:
        return float(ann["area"])  # checked to be a number when the file is read
    if ann.get("segmentation"):
        return float(annotation_to_mask(ann["segmentation"], height, width).sum())
    return float(ann["bbox"][2]) * float(ann["bbox"][3])


class InstanceMasks:
    """One image's per-annotation masks as an (N, H, W) bool stack, decoded when read (``np.asarray``).

    It keeps only the annotations' polygons / RLE strings, so a batch of samples (or a dataset) does not
    hold N full-size masks per image until a metric asks for them. Overlapping instances keep all their
    pixels (the image-level instance map cannot: a later annotation covers an earlier one).
    """

    def __init__(self, segmentations: Sequence[Any], height: int, width: int):
        self.segmentations = list(segmentations)
        self.shape = (len(self.segmentations), int(height), int(width))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, k: int) -> np.ndarray:
        seg = self.segmentations[k]
        h, w = self.shape[1:]
        return annotation_to_mask(seg, h, w) if seg else np.zeros((h, w), dtype=bool)

    def decode(self) -> np.ndarray:
        """The (N, H, W) bool stack."""
        if not self.shape[0]:
            return np.zeros(self.shape, dtype=bool)
        return np.stack([self[k] for k in range(self.shape[0])])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        stack = self.decode()
        return stack if dtype is None else stack.astype(dtype)

    def __repr__(self) -> str:
        return f"InstanceMasks(shape={self.shape})"


# -- reader ------------------------------------------------------------------------------------------
def _find_annotation_file(root: Path) -> Path:
    candidates = sorted((root / "annotations").glob("instances_*.json")) if (root / "annotations").is_dir() else []
    candidates += sorted(root.glob("instances_*.json"))
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise ShiftbenchError(f"coco: no annotations/instances_*.json under {root}; pass annotations=FILE")
    names = ", ".join(str(c.relative_to(root)) for c in candidates)
    raise ShiftbenchError(f"coco: several annotation files under {root} ({names}); pass annotations=FILE")


@DATASETS.register("coco", description="COCO instances json reader: boxes, category ids, instance masks "
                   "(polygons and RLE)", reader=True, annotations=("boxes", "mask", "box_labels"))
class CocoInstances(ReaderDataset):
    """COCO ``instances_*.json`` with its images, one Sample per image (in the file's image order).

    ``root`` is the COCO folder (with ``annotations/instances_<split>.json`` and ``<split>/``) or the json
    file itself. ``annotations`` picks the json; ``images`` the image folder (default: ``<split>/`` next to
    ``annotations/``, else the json's folder). Each Sample has ``boxes`` (x0, y0, x1, y1), ``box_labels``
    (COCO category ids), and ``mask``: an int32 instance map (0 background, k for the k-th annotation; a
    later annotation covers an earlier one where they overlap) unless ``masks=False``. ``meta`` holds, one
    entry per annotation in file order, what COCOeval reads: ``ann_ids``, ``iscrowd`` flags, ``area`` (the
    annotation's ``area`` field, which sizes it as small/medium/large), ``bbox`` (the file's x, y, w, h, which
    ``boxes`` hold as float32 corners: box AP takes IoUs from these, as COCOeval) and ``instance_masks`` (an
    :class:`InstanceMasks`, decoded only when read, overlaps intact; absent when ``masks=False``), plus the
    image's ``coco_id``. Ids are the COCO image ids.

    ``shiftbench generate`` writes a COCO folder again: ``annotations/instances_<split>.json`` (this file
    with each generated image's ``file_name`` rewritten and the images not generated left out; every other
    value as it was) and the images under ``<split>/``. Image ids, and so sample ids, are unchanged.

    Every record is checked when the reader is built (:mod:`shiftbench.datasets.coco_file`): a file is read
    as COCOeval reads it, or refused with one :class:`~shiftbench.errors.DatasetError` line naming the record.
    """

    annotations = ("boxes", "box_labels", "mask")
    mirror_keeps = frozenset({"boxes", "mask"})  # the copied boxes and segmentations must still be true

    def __init__(self, root: Any = None, annotations: Any = None, images: Any = None, masks: bool = True,
                 on_error: str = "fail", verify: str = "header"):
        path = check_root(root, "coco", want_dir=False)
        self.on_error = check_choice("on_error", on_error, ON_ERROR)
        check_choice("verify", verify, VERIFY)
        if annotations is not None:
            ann_file = Path(annotations)
            if not ann_file.is_absolute() and path.is_dir():
                ann_file = path / ann_file
        elif path.is_file():
            ann_file = path
        else:
            ann_file = _find_annotation_file(path)
        if not ann_file.is_file():
            raise ShiftbenchError(f"coco: annotation file {ann_file} not found")
        if images is not None:
            image_dir = Path(images) if Path(images).is_absolute() or not path.is_dir() else path / images
        else:
            split = ann_file.stem.split("_", 1)[-1]
            base = ann_file.parent.parent if ann_file.parent.name == "annotations" else ann_file.parent
            image_dir = base / split if (base / split).is_dir() else base
        if not image_dir.is_dir():
            raise ShiftbenchError(f"coco: image folder {image_dir} not found; pass images=FOLDER")
        self.root = image_dir
        self.annotation_file = ann_file
        split = ann_file.stem.split("_", 1)[-1]
        # the split names the generated copy's json and image folder; a name unfit for a folder becomes "images"
        self.split = split if split.strip(".") and all(c.isalnum() or c in "._-" for c in split) else "images"
        self.masks = bool(masks)
        content = read_instances(ann_file, image_dir)  # every record checked; a bad one is one line
        self.categories = content.categories
        max_id = max(self.categories, default=-1)
        self.num_classes = max_id + 1 if self.categories else None
        self.class_names = [self.categories.get(i, "") for i in range(max_id + 1)] if self.categories else None
        # box labels are category ids: slot = category id (COCO's own ids when the categories are COCO's)
        self.label_space = LabelSpace.from_coco_categories(self.categories) if self.categories else None
        records = content.images
        self._records, self.skipped = screen(records, lambda r: [image_dir / r["file_name"]], image_dir,
                                             on_error, verify)
        self.description = f"COCO instances {ann_file.name} ({len(self.categories)} categories)"

    @staticmethod
    def detect(path: Path) -> bool:
        path = Path(path)
        if path.is_file() and path.suffix == ".json":
            try:
                with open(path, encoding="utf-8") as f:
                    head = f.read(4096)
            except (OSError, UnicodeDecodeError):
                return False
            return '"images"' in head or '"annotations"' in head or '"info"' in head
        return path.is_dir() and (any((path / "annotations").glob("instances_*.json"))
                                  or any(path.glob("instances_*.json")))

    def __len__(self) -> int:
        return len(self._records)

    def sample_id(self, index: int) -> str:
        return str(self._records[index]["id"])

    def source_path(self, index: int) -> str:
        return Path(self._records[index]["file_name"]).as_posix()

    def mirror_path(self, index: int) -> str:
        # below <split>/, where the reader looks for the images of annotations/instances_<split>.json:
        # a file_name that itself starts with the split's name cannot make the layout ambiguous
        return f"{self.split}/{self.source_path(index)}"

    def write_mirror_index(self, folder: Path, written: Mapping[int, str]) -> None:
        """``folder/annotations/instances_<split>.json``: this file, restricted to the generated images
        (a limit or skipped files leave some out), their ``file_name`` pointing at the generated files."""
        data = json.loads(self.annotation_file.read_text(encoding="utf-8"))
        prefix = f"{self.split}/"
        names = {int(self._records[i]["id"]): rel[len(prefix):] for i, rel in written.items()}
        images = []
        for img in data["images"]:
            if int(img["id"]) in names:
                images.append({**img, "file_name": names[int(img["id"])]})  # key order kept
        data["images"] = images
        data["annotations"] = [a for a in data["annotations"] if int(a["image_id"]) in names]
        target = Path(folder) / "annotations" / f"instances_{self.split}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, json.dumps(data, ensure_ascii=False))

    def load(self, index: int) -> Sample:
        rec = self._records[index]
        path = self.root / rec["file_name"]
        image = load_image(path)
        h, w = image.shape[:2]
        if (h, w) != (rec["height"], rec["width"]):
            raise ShiftbenchError(f"{path}: image is {w}x{h} but the annotation says {rec['width']}x{rec['height']}")
        anns = rec["anns"]
        boxes = np.array([[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]]
                          for a in anns], dtype=np.float32).reshape(-1, 4)
        labels = np.array([int(a["category_id"]) for a in anns], dtype=np.int64)
        mask = None
        if self.masks:
            mask = np.zeros((h, w), dtype=np.int32)
            for k, ann in enumerate(anns, start=1):
                if "segmentation" in ann and ann["segmentation"]:
                    mask[annotation_to_mask(ann["segmentation"], h, w)] = k
        meta = {"path": str(path), "coco_id": rec["id"], "ann_ids": [int(a.get("id", -1)) for a in anns],
                "iscrowd": [int(a.get("iscrowd", 0)) for a in anns], "mask_type": "instance",
                "area": [annotation_area(a, h, w) for a in anns],
                "bbox": [[float(v) for v in a["bbox"]] for a in anns],  # x, y, w, h as COCOeval reads them
                "category_names": [self.categories.get(int(a["category_id"]), "") for a in anns]}
        if self.masks:
            meta["instance_masks"] = InstanceMasks([a.get("segmentation") for a in anns], h, w)
        return Sample(image=image, mask=mask, boxes=boxes, box_labels=labels, id=str(rec["id"]), meta=meta)

    def instance_masks(self, index: int) -> np.ndarray:
        """An (N, H, W) bool stack, one mask per annotation, overlaps kept (for mask AP)."""
        rec = self._records[index]
        return InstanceMasks([a.get("segmentation") for a in rec["anns"]], rec["height"], rec["width"]).decode()
