"""Write a small folder of real photos to follow the docs with, as an image folder, COCO or Pascal VOC.

    python tools/example_folder.py my_photos [--format imagefolder|coco|voc] [--per-class 3] [--classes 4]

The photos are renders of the built-in ``objects`` dataset (photographed objects on photographed scenes of
their natural context), saved as JPEG (quality 95), one object per photo, in one of three layouts:

- ``imagefolder`` (default): ``<wnid>/<object>_<scene>.jpg``, the layout of a user's own image folder: the
  bundled ImageNet classifiers read the labels from the folder names.
- ``coco``: ``val/<object>_<scene>.jpg`` and ``annotations/instances_val.json``, one annotation per photo:
  category = the object's ImageNet class name (ids 1..K), bbox [x, y, w, h] and area of the exact mask,
  segmentation = polygons that rasterise to the exact mask, iscrowd 0. ``sb.load_dataset(folder)`` detects it.
- ``voc``: ``JPEGImages/<id>.jpg``, ``SegmentationClass/<id>.png`` (palette PNG: 0 background, the VOC class
  index on the object), ``SegmentationObject/<id>.png`` (1 on the object, so the reader gives its box) and
  ``ImageSets/Segmentation/val.txt``: ``sb.load_dataset(folder, format="voc", split="val")``. VOC has 20
  fixed classes, so only objects with an obvious VOC class are used (:data:`VOC_CLASS`), classes are VOC's.

Classes are the first ``--classes`` in dataset order, each with its first ``--per-class`` samples (a
repeated object-scene pair is named ``<object>_<scene>_<r>``). The folder is new: an existing one is
refused, so nothing of the user's is overwritten.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

FORMATS = ("imagefolder", "coco", "voc")

# the objects' ImageNet classes (by name) that are plainly one of Pascal VOC's 20 classes; others are left out
VOC_CLASS = {
    **dict.fromkeys(["hen", "cock", "ostrich", "vulture", "peacock", "lorikeet", "toucan", "drake", "goose",
                     "flamingo", "crane", "pelican", "king penguin"], "bird"),  # crane: the bird, objects' only one
    "ox": "cow", "ram": "sheep", "sorrel": "horse", "warplane": "aeroplane", "airliner": "aeroplane", "racer": "car",
}


def choose(data: Any, classes: int, per_class: int, class_of: Callable[[str], str | None]) -> dict[str, list[int]]:
    """Sample indices by class: the first ``per_class`` samples of the first ``classes`` classes (dataset
    order), ``class_of(object_id)`` naming an object's class (None: left out)."""
    chosen: dict[str, list[int]] = {}
    for i in range(len(data)):
        name = class_of(data.pair(i)[0])
        if name is not None and (name in chosen or len(chosen) < classes):
            indices = chosen.setdefault(name, [])
            if len(indices) < per_class:
                indices.append(i)
    return chosen


def stem(sample: Any) -> str:
    """``<object>_<scene>``, plus ``_<r>`` for the r-th repeat of a pair (an object with few scenes)."""
    repeat = sample.id.partition("#")[2]
    return f"{sample.meta['object_id']}_{sample.meta['scene_id']}" + (f"_{repeat}" if repeat else "")


def coco_annotation(mask: Any) -> dict[str, Any]:
    """bbox [x, y, w, h], area and polygons of a bool mask; the polygons rasterise (as pycocotools does) to
    the mask exactly: they run along pixel edges (contours of the mask at 2x, their points halved up) and
    each hole is joined to its outer boundary by a cut traced both ways, which the parity fill cancels."""
    import cv2
    import numpy as np

    ys, xs = np.nonzero(mask)
    up = mask.repeat(2, axis=0).repeat(2, axis=1).astype(np.uint8)
    contours, hierarchy = cv2.findContours(up, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
    rings = [(c.reshape(-1, 2) + 1) // 2 for c in contours]
    polygons = []
    for k, ring in enumerate(rings):
        if hierarchy[0][k][3] < 0:  # an outer boundary; its holes are its children
            parts, hole = [ring, ring[:1]], hierarchy[0][k][2]
            while hole >= 0:
                parts += [rings[hole], rings[hole][:1], ring[:1]]
                hole = hierarchy[0][hole][0]
            polygons.append(np.concatenate(parts).reshape(-1).astype(float).tolist())
    return {"bbox": [int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)],
            "area": int(mask.sum()), "iscrowd": 0, "segmentation": polygons}


def write_folder(out: Path, classes: int = 4, per_class: int = 3, format: str = "imagefolder") -> list[Path]:
    """The chosen samples (see the module docstring) in the ``format`` layout; the photos written."""
    import numpy as np
    from PIL import Image

    import shiftbench as sb
    from shiftbench.datasets.objects import object_info
    from shiftbench.datasets.voc import VOC_CLASSES, voc_colormap

    data = sb.load_dataset("objects")
    if format == "voc":
        chosen = choose(data, classes, per_class, lambda oid: VOC_CLASS.get(object_info(oid).imagenet_name))
    else:
        chosen = choose(data, classes, per_class, lambda oid: object_info(oid).wnid)
    folders = {"imagefolder": list(chosen), "coco": ["val", "annotations"],
               "voc": ["JPEGImages", "SegmentationClass", "SegmentationObject", "ImageSets/Segmentation"]}[format]
    for folder in folders:
        (out / folder).mkdir(parents=True)
    palette = voc_colormap().reshape(-1).tolist()
    written: list[Path] = []
    coco: dict[str, list] = {"images": [], "annotations": [], "categories": []}
    for k, (name, indices) in enumerate(chosen.items(), start=1):
        if format == "coco":
            coco["categories"].append({"id": k, "name": object_info(data.pair(indices[0])[0]).imagenet_name})
        for i in indices:
            sample = data.load(i)
            path = out / (name if format == "imagefolder" else folders[0]) / f"{stem(sample)}.jpg"
            Image.fromarray(sample.image).save(path, quality=95)
            written.append(path)
            h, w = sample.mask.shape
            if format == "coco":
                image_id = len(written)
                coco["images"].append({"id": image_id, "file_name": path.name, "height": h, "width": w})
                if sample.mask.any():
                    coco["annotations"].append({"id": len(coco["annotations"]) + 1, "image_id": image_id,
                                                "category_id": k, **coco_annotation(sample.mask)})
            elif format == "voc":
                for labels, value in (("SegmentationClass", VOC_CLASSES.index(name)), ("SegmentationObject", 1)):
                    png = Image.frombytes("P", (w, h), np.where(sample.mask, value, 0).astype(np.uint8).tobytes())
                    png.putpalette(palette)
                    png.save(out / labels / f"{path.stem}.png")
    if format == "coco":
        (out / "annotations" / "instances_val.json").write_text(json.dumps(coco), encoding="utf-8")
    elif format == "voc":
        (out / "ImageSets" / "Segmentation" / "val.txt").write_text("".join(f"{p.stem}\n" for p in written))
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="a new folder")
    ap.add_argument("--format", choices=FORMATS, default="imagefolder")
    ap.add_argument("--classes", type=int, default=4)
    ap.add_argument("--per-class", type=int, default=3)
    args = ap.parse_args(argv)
    if args.out.exists():
        ap.error(f"{args.out} exists; give a new folder")
    if args.classes < 1 or args.per_class < 1:
        ap.error("--classes and --per-class must be at least 1")
    voc_classes = len(set(VOC_CLASS.values()))
    if args.format == "voc" and args.classes > voc_classes:
        ap.error(f"--format voc has {voc_classes} classes ({', '.join(dict.fromkeys(VOC_CLASS.values()))})")
    written = write_folder(args.out, args.classes, args.per_class, args.format)
    where = "class folders" if args.format == "imagefolder" else f"classes ({args.format} layout)"
    print(f"wrote {len(written)} photos in {args.classes} {where} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
