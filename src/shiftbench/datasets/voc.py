"""Pascal VOC segmentation reader: JPEGImages + SegmentationClass / SegmentationObject palette PNGs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import DatasetError, ImageError, ShiftbenchError
from ..files import write_atomic
from ..labelspace import LabelSpace
from ..registry import DATASETS
from ..sample import Sample, decode_image, image_error_reason
from .common import ON_ERROR, VERIFY, ReaderDataset, check_choice, check_root, one_line, resolve_inside, screen, shown

VOC_CLASSES = [
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor",
]
VOID = 255
VALUES = np.array(list(range(len(VOC_CLASSES))) + [VOID], dtype=np.uint8)  # what a class map may hold


def read_id_list(path: Path) -> list[str]:
    """The image ids of a split file (the first word of each line); an unreadable file or an id listed
    twice is one line naming the file (and both lines)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"voc: cannot read {shown(path)} ({one_line(exc)})") from None
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        image_id = line.split()[0]
        if image_id in seen:
            raise DatasetError(f"voc: {shown(path)}: line {number} lists {shown(image_id)} again "
                               f"(first on line {seen[image_id]}); ids must be unique")
        seen[image_id] = number
    return list(seen)


def voc_colormap(n: int = 256) -> np.ndarray:
    """The VOC palette: index bits spread over the high bits of R, G and B (index 255 is the void colour)."""
    index = np.arange(n)
    cmap = np.zeros((n, 3), dtype=np.int64)
    for shift in range(8):
        for channel in range(3):
            bit = (index >> (shift * 3 + channel)) & 1
            cmap[:, channel] |= bit << (7 - shift)
    return cmap.astype(np.uint8)


def read_label_png(path: Path) -> np.ndarray:
    """An HxW uint8 index map from a VOC label PNG: palette indices, or RGB mapped back through the VOC palette."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            img.load()
            if img.mode in ("P", "L"):
                return np.asarray(img, dtype=np.uint8).copy()
            rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
    except FileNotFoundError:
        raise ImageError(f"{shown(path)}: label file not found") from None
    except Exception as exc:  # noqa: BLE001 - any decoder error is one line naming the file
        raise ImageError(f"{shown(path)}: label image: {image_error_reason(exc)}") from None
    cmap = voc_colormap().astype(np.int64)
    codes = (cmap[:, 0] << 16) | (cmap[:, 1] << 8) | cmap[:, 2]
    lookup = dict(zip(codes.tolist(), range(256)))
    pixel_codes = (rgb[..., 0].astype(np.int64) << 16) | (rgb[..., 1].astype(np.int64) << 8) | rgb[..., 2]
    unique, inverse = np.unique(pixel_codes, return_inverse=True)
    unknown = [u for u in unique.tolist() if u not in lookup]
    if unknown:
        raise ImageError(f"{shown(path)}: RGB label image has colours outside the VOC palette (e.g. #{unknown[0]:06x})")
    return np.array([lookup[u] for u in unique.tolist()], dtype=np.uint8)[inverse.reshape(rgb.shape[:2])]


@DATASETS.register("voc", description="Pascal VOC segmentation reader: JPEGImages + SegmentationClass / "
                   "SegmentationObject palette PNGs", reader=True, annotations=("mask", "boxes", "box_labels"))
class VocSegmentation(ReaderDataset):
    """Pascal VOC segmentation layout (``root`` is ``VOC2012/`` or a ``VOCdevkit/`` holding one year).

    Image ids come from ``ImageSets/Segmentation/<split>.txt`` (when present; else every
    ``SegmentationClass/*.png``). Each Sample's ``mask`` is the uint8 class map (0 background, 1..20 the
    VOC classes, 255 void/boundary); with SegmentationObject, ``meta["instance_mask"]`` is the object map
    and ``boxes`` / ``box_labels`` are each object's extent and majority class.

    An image is ``JPEGImages/<id>.jpg`` or, as ``shiftbench generate`` writes it (lossless),
    ``JPEGImages/<id>.png``; an id with both files is refused as ambiguous. A generated folder holds the
    shifted images and, copied unchanged, each one's SegmentationClass / SegmentationObject / Annotations
    files, with ``ImageSets/Segmentation/<split>.txt`` listing the generated ids; ids are unchanged.
    """

    annotations = ("mask", "boxes", "box_labels")
    num_classes = len(VOC_CLASSES)
    class_names = list(VOC_CLASSES)
    label_space = LabelSpace.voc21()  # box labels and mask values alike: 0 background, 1..20, 255 void
    mask_space = LabelSpace.voc21()

    def __init__(self, root: Any = None, split: str = "val", on_error: str = "fail", verify: str = "header"):
        root = check_root(root, "voc")
        if not (root / "JPEGImages").is_dir():
            years = sorted(p for p in root.glob("VOC*") if (p / "JPEGImages").is_dir())
            if len(years) != 1:
                raise ShiftbenchError(f"voc: {root} has no JPEGImages/ folder (nor exactly one VOC*/ holding one)")
            root = years[0]
        if not (root / "SegmentationClass").is_dir():
            raise ShiftbenchError(f"voc: {root} has no SegmentationClass/ folder")
        self.root = root
        self.split = split
        self.on_error = check_choice("on_error", on_error, ON_ERROR)
        check_choice("verify", verify, VERIFY)
        list_file = root / "ImageSets" / "Segmentation" / f"{split}.txt"
        if list_file.is_file():
            ids = read_id_list(list_file)
        elif (root / "ImageSets" / "Segmentation").is_dir():
            raise ShiftbenchError(f"voc: no split {split!r} ({list_file} not found)")
        else:
            ids = sorted(p.stem for p in (root / "SegmentationClass").glob("*.png"))
        self.has_objects = (root / "SegmentationObject").is_dir()
        self.has_list = list_file.is_file()
        # what a shift must keep for the copied label files to stay true: the class maps, and the objects'
        # extents when there are object maps or box files
        self.mirror_keeps = frozenset({"mask"} | ({"boxes"} if self.has_objects or (root / "Annotations").is_dir()
                                                  else set()))
        present = set(os.listdir(root / "JPEGImages"))  # one listing, not a stat per id and suffix
        self._image_ext: dict[str, str] = {}
        for image_id in ids:
            for folder, ext in self._parts():
                resolve_inside(root, f"{folder}/{image_id}{ext}", "image id")
            jpg, png = f"{image_id}.jpg" in present, f"{image_id}.png" in present
            if jpg and png:
                raise ShiftbenchError(f"voc: {shown(root / 'JPEGImages')} holds both {shown(image_id + '.jpg')} and "
                                      f"{shown(image_id + '.png')}; keep one")
            # a missing image stays .jpg, the name VOC's own layout has, for the screen's message
            self._image_ext[image_id] = ".png" if png else ".jpg"

        def files(image_id: str) -> list[Path]:
            return [self._image_path(image_id)] + [root / folder / f"{image_id}{ext}"
                                                   for folder, ext in self._parts()[1:]]

        self._ids, self.skipped = screen(ids, files, root, on_error, verify)
        self.description = f"Pascal VOC segmentation {root.name} ({split})"

    def _parts(self) -> list[tuple[str, str]]:
        parts = [("JPEGImages", ".jpg"), ("SegmentationClass", ".png")]
        return parts + ([("SegmentationObject", ".png")] if self.has_objects else [])

    def _image_path(self, image_id: str) -> Path:
        return self.root / "JPEGImages" / f"{image_id}{self._image_ext.get(image_id, '.jpg')}"

    @staticmethod
    def detect(path: Path) -> bool:
        path = Path(path)
        if not path.is_dir():
            return False
        if (path / "JPEGImages").is_dir() and (path / "SegmentationClass").is_dir():
            return True
        return any((p / "JPEGImages").is_dir() and (p / "SegmentationClass").is_dir() for p in path.glob("VOC*"))

    def __len__(self) -> int:
        return len(self._ids)

    def sample_id(self, index: int) -> str:
        return self._ids[index]

    def source_path(self, index: int) -> str:
        return self._image_path(self._ids[index]).relative_to(self.root).as_posix()

    def mirror_files(self, index: int) -> list[tuple[Path, str]]:
        image_id = self._ids[index]
        files = [(self.root / folder / f"{image_id}{ext}", f"{folder}/{image_id}{ext}")
                 for folder, ext in self._parts()[1:]]
        xml = self.root / "Annotations" / f"{image_id}.xml"
        if xml.is_file():
            files.append((xml, f"Annotations/{image_id}.xml"))
        return files

    def write_mirror_index(self, folder: Path, written: Mapping[int, str]) -> None:
        """``ImageSets/Segmentation/<split>.txt`` listing the generated ids (when the source has a list);
        without one the reader lists SegmentationClass/, which holds exactly the generated ids."""
        folder = Path(folder)
        (folder / "SegmentationClass").mkdir(parents=True, exist_ok=True)  # an empty set is still a VOC folder
        (folder / "JPEGImages").mkdir(parents=True, exist_ok=True)
        if not self.has_list:
            return
        target = folder / "ImageSets" / "Segmentation" / f"{self.split}.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, "".join(f"{self._ids[i]}\n" for i in sorted(written)))

    def load(self, index: int) -> Sample:
        image_id = self._ids[index]
        path = self._image_path(image_id)
        image = decode_image(path, shown(path))
        class_file = self.root / "SegmentationClass" / f"{image_id}.png"
        classes = read_label_png(class_file)
        if classes.shape != image.shape[:2]:
            raise ImageError(f"{shown(class_file)}: label map {classes.shape} differs from image {image.shape[:2]}")
        outside = np.setdiff1d(np.unique(classes), VALUES)
        if outside.size:
            raise ImageError(f"{shown(class_file)}: label map holds value {int(outside[0])}, not a VOC class "
                             f"(0..{len(VOC_CLASSES) - 1}) nor void ({VOID})")
        meta: dict[str, Any] = {"path": str(path), "mask_type": "semantic", "void": VOID}
        boxes = labels = None
        if self.has_objects:
            object_file = self.root / "SegmentationObject" / f"{image_id}.png"
            objects = read_label_png(object_file)
            if objects.shape != classes.shape:
                raise ImageError(f"{shown(object_file)}: object map {objects.shape} differs from image {classes.shape}")
            meta["instance_mask"] = objects
            box_list, label_list = [], []
            for k in np.unique(objects):
                if k in (0, VOID):
                    continue
                ys, xs = np.nonzero(objects == k)
                box_list.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
                cls = classes[ys, xs]
                cls = cls[(cls != 0) & (cls != VOID)]
                label_list.append(int(np.bincount(cls).argmax()) if cls.size else 0)
            boxes = np.array(box_list, dtype=np.float32).reshape(-1, 4)
            labels = np.array(label_list, dtype=np.int64)
        return Sample(image=image, mask=classes, boxes=boxes, box_labels=labels, id=image_id, meta=meta)
