"""Preprocessing of a sample before any shift: resize the shorter side, then take a centre crop, with every
annotation following the image exactly.

The geometry and the pixels are :mod:`shiftbench.resize`'s, the one resize of the code base, which every
model's input transform uses too: torchvision's on a PIL image (``transforms.Resize(size)`` then
``CenterCrop``), so that ``resize=256, crop=224`` is the ImageNet(-C) procedure to the byte:

- resize: the shorter side becomes ``size`` and the longer ``int(size * long / short)`` (truncated); the
  pixels are computed by Pillow, ``Image.resize`` with the named filter (:data:`INTERPOLATIONS`), which
  antialiases when it reduces (the filter's support grows with the scale), as torchvision does on PIL images;
- crop: ``top = int(round((h - crop_h) / 2.0))`` and ``left`` likewise (Python's round: halves to even), a
  crop larger than the image is refused (:class:`~shiftbench.errors.ImageError`: with ``on_error: skip``
  the sample is left out) where torchvision would pad with black.

Annotations: the mask (a binary mask, a class map, an instance map) and the per-annotation masks
(``meta["instance_mask"]``, ``meta["instance_masks"]``) take Pillow's nearest-neighbour mapping of the same
resize, so each output pixel's label is the label of the input pixel the image's nearest filter reads, and
then the same crop. Boxes (``x0, y0, x1, y1`` pixel corners) are scaled by ``new / old`` per axis, shifted by
the crop's corner and clipped to it; a box that lies wholly outside the crop is dropped, with its label, its
instance mask and its per-annotation meta (``ann_ids``, ``iscrowd``, ``area``, ``bbox``, ``category_names``),
and an instance map's ids are renumbered to stay the box indices (torchvision v2's ``SanitizeBoundingBoxes``
also drops such boxes). COCO's ``area`` is scaled by the resize and by the share of the box the crop keeps
(an estimate of the visible segment area; COCOeval sizes objects by it). Labels and captions are unchanged.

>>> import numpy as np
>>> from shiftbench.sample import Sample
>>> s = Sample(image=np.zeros((300, 400, 3), np.uint8), label=1, mask=np.ones((300, 400), bool), id="a")
>>> out = Preprocessing(resize=256, crop=(224, 224)).apply(s)
>>> out.image.shape, out.mask.shape, out.label, out.meta["preprocess"]["resized"]
((224, 224, 3), (224, 224), 1, [256, 341])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import ImageError, ShiftbenchError
from ..resize import INTERPOLATIONS, check_interpolation, crop_corner, nearest_index as _nearest_index
from ..resize import LIMIT, MAX_PIXELS, MAX_SIDE, check_pixels, check_shorter, resize_nearest, resized_size
from ..resize import resample, resize as resize_image
from ..sample import Sample

__all__ = ["INTERPOLATIONS", "Preprocessing", "Geometry", "resized_size", "crop_corner", "resize_image",
           "resize_nearest", "transform_boxes", "PreprocessedMasks", "PER_BOX_META"]

# per-annotation entries of a sample's meta (one per box, in box order): filtered with the boxes
PER_BOX_META = ("ann_ids", "iscrowd", "area", "bbox", "category_names")


@dataclass(frozen=True)
class Geometry:
    """Where an image of ``size`` goes: resized to ``resized``, then the crop ``(top, left, height, width)``."""

    size: tuple[int, int]
    resized: tuple[int, int]
    crop: tuple[int, int, int, int]

    @property
    def scale(self) -> tuple[float, float]:
        """(y, x) factors of the resize."""
        return self.resized[0] / self.size[0], self.resized[1] / self.size[1]

    def to_dict(self) -> dict[str, list[int]]:
        return {"size": list(self.size), "resized": list(self.resized), "crop": list(self.crop)}


def transform_boxes(boxes: np.ndarray, geometry: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """Boxes (N, 4) ``x0, y0, x1, y1`` in float64 moved with the image: scaled, shifted by the crop's corner,
    clipped to it. Returns the boxes kept and the mask of those kept (a box wholly outside the crop is not)."""
    sy, sx = geometry.scale
    top, left, ch, cw = geometry.crop
    b = np.asarray(boxes, np.float64).reshape(-1, 4) * np.array([sx, sy, sx, sy]) - np.array([left, top, left, top])
    keep = (b[:, 2] > 0) & (b[:, 0] < cw) & (b[:, 3] > 0) & (b[:, 1] < ch)
    b = np.clip(b, 0, [cw, ch, cw, ch])
    return b[keep], keep


class PreprocessedMasks:
    """Per-annotation masks (an (N, H, W) stack, or a lazy one such as ``datasets.coco.InstanceMasks``) moved
    with the image, decoded only when read, keeping the annotations ``keep`` (those whose box is in the crop).
    Like the stack it wraps it has ``shape``, ``len``, ``[k]``, ``decode()`` and ``np.asarray``; a COCO stack's
    ``segmentations`` (what mask AP checks) stay with it."""

    def __init__(self, inner: Any, geometry: Geometry, keep: Sequence[int]):
        self.inner, self.geometry, self.keep = inner, geometry, [int(k) for k in keep]
        self.shape = (len(self.keep), geometry.crop[2], geometry.crop[3])
        segmentations = getattr(inner, "segmentations", None)
        if segmentations is not None:
            self.segmentations = [segmentations[k] for k in self.keep]

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, k: int) -> np.ndarray:
        return _move_mask(np.asarray(self.inner[self.keep[k]]), self.geometry)

    def decode(self) -> np.ndarray:
        if not self.keep:
            return np.zeros(self.shape, dtype=bool)
        index = _nearest_index(*self.geometry.size, self.geometry.resized) if self.geometry.resized != self.geometry.size else None
        return np.stack([_move_mask(np.asarray(self.inner[k]), self.geometry, index) for k in self.keep])

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        stack = self.decode()
        return stack if dtype is None else stack.astype(dtype)

    def __repr__(self) -> str:
        return f"PreprocessedMasks(shape={self.shape})"


def _move_mask(mask: np.ndarray, geometry: Geometry, index: np.ndarray | None = None) -> np.ndarray:
    top, left, ch, cw = geometry.crop
    resized = resize_nearest(mask, geometry.resized, index)
    return np.ascontiguousarray(resized[top:top + ch, left:left + cw])


@dataclass(frozen=True)
class Preprocessing:
    """Resize the shorter side to ``resize`` (None: keep the size) with ``interpolation``, then take the centre
    crop ``crop`` (height, width; None: no crop). :meth:`apply` moves a sample with its annotations."""

    resize: int | None = None
    crop: tuple[int, int] | None = None
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        if self.resize is not None and (isinstance(self.resize, bool) or not isinstance(self.resize, int)
                                        or self.resize < 1):
            raise ShiftbenchError(f"resize: expected a positive integer (the shorter side in pixels), got {self.resize!r}")
        if self.resize is not None:
            check_shorter(self.resize, "resize")  # the one limit on image sizes (resize.LIMIT)
        if self.crop is not None:
            crop = (self.crop, self.crop) if isinstance(self.crop, int) and not isinstance(self.crop, bool) else self.crop
            if (not isinstance(crop, (tuple, list)) or len(crop) != 2
                    or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in crop)):
                raise ShiftbenchError(f"crop: expected a positive integer or [height, width], got {self.crop!r}")
            object.__setattr__(self, "crop", check_pixels(int(crop[0]), int(crop[1]), "crop"))
        check_interpolation(self.interpolation)

    @property
    def active(self) -> bool:
        return self.resize is not None or self.crop is not None

    def geometry(self, height: int, width: int, what: str = "image") -> Geometry:
        """Where an image of ``height`` x ``width`` goes; a crop larger than the resized image is refused."""
        resized = resized_size(height, width, self.resize) if self.resize is not None else (int(height), int(width))
        if self.resize is not None and (resized[0] > MAX_SIDE or resized[1] > MAX_SIDE
                                        or resized[0] * resized[1] > MAX_PIXELS):  # a long, thin image
            raise ImageError(f"{what}: its {height}x{width} px with the shorter side resized to {self.resize} would be "
                             f"{resized[0]}x{resized[1]} px, over the limit of {LIMIT}; resize it less")
        if self.crop is None:
            return Geometry((int(height), int(width)), resized, (0, 0, *resized))
        ch, cw = self.crop
        if ch > resized[0] or cw > resized[1]:
            after = f" ({resized[0]}x{resized[1]} after resizing its shorter side to {self.resize})" if self.resize else ""
            raise ImageError(f"{what}: the centre crop {ch}x{cw} is larger than the image, {height}x{width}{after}; "
                             f"resize it first or crop less")
        return Geometry((int(height), int(width)), resized, (*crop_corner(*resized, ch, cw), ch, cw))

    def apply_image(self, image: np.ndarray) -> np.ndarray:
        """An HxWx3 uint8 image resized and cropped (the pixels alone)."""
        return self._pixels(image, self.geometry(*image.shape[:2]))

    def _pixels(self, image: np.ndarray, g: Geometry) -> np.ndarray:
        """The pixels moved: the filter was checked when this object was built, the size by ``geometry``."""
        top, left, ch, cw = g.crop
        return np.ascontiguousarray(resample(image, g.resized, self.interpolation)[top:top + ch, left:left + cw])

    def apply(self, sample: Sample) -> Sample:
        """``sample`` resized and cropped, its mask, boxes and per-annotation masks and meta following (see the
        module docstring); the label, caption and id unchanged. A sample is returned as it is when nothing is set."""
        if not self.active:
            return sample
        h, w = sample.size
        g = self.geometry(h, w, f"sample {sample.id}")
        index = _nearest_index(h, w, g.resized) if g.resized != (h, w) and _has_masks(sample) else None
        meta = dict(sample.meta or {})
        changes: dict[str, Any] = {"image": self._pixels(sample.image, g)}
        keep = None
        if sample.boxes is not None:
            boxes, keep_mask = self._boxes(sample, g, meta)
            keep = np.flatnonzero(keep_mask)
            changes["boxes"] = boxes
            if sample.box_labels is not None:
                changes["box_labels"] = np.asarray(sample.box_labels)[keep_mask]
            n = len(keep_mask)
            for key in PER_BOX_META:
                value = meta.get(key)
                if key not in ("bbox", "area") and value is not None and len(value) == n:
                    meta[key] = [value[k] for k in keep]
        if sample.mask is not None:
            mask = _move_mask(sample.mask, g, index)
            if keep is not None and len(keep) < len(sample.boxes) and meta.get("mask_type") == "instance" \
                    and mask.dtype != bool:
                mask = _renumber(mask, keep, len(sample.boxes))
            changes["mask"] = mask
        if isinstance(meta.get("instance_mask"), np.ndarray):  # VOC's object map: object ids, not box indices
            meta["instance_mask"] = _move_mask(meta["instance_mask"], g, index)
        if meta.get("instance_masks") is not None:
            stack = meta["instance_masks"]
            kept = keep if keep is not None and len(keep_mask) == len(stack) else range(len(stack))
            meta["instance_masks"] = PreprocessedMasks(stack, g, kept)
        meta["preprocess"] = g.to_dict()
        changes["meta"] = meta
        return sample.replace(**changes)

    def _boxes(self, sample: Sample, g: Geometry, meta: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """The sample's boxes moved (float32 corners), the kept ones' mask; ``meta`` bbox (x, y, w, h in float64,
        COCOeval's) and area follow, so that the corners and ``bbox`` stay the same boxes."""
        n = len(sample.boxes)
        exact = meta.get("bbox")
        if exact is not None and len(exact) == n:  # the file's own x, y, w, h: moved in float64
            xywh = np.asarray(exact, np.float64).reshape(-1, 4)
            corners = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
        else:
            corners = np.asarray(sample.boxes, np.float64).reshape(-1, 4)
        moved, keep = transform_boxes(corners, g)
        wh = moved[:, 2:] - moved[:, :2]
        if exact is not None and len(exact) == n:
            meta["bbox"] = np.concatenate([moved[:, :2], wh], axis=1).tolist()
        area = meta.get("area")
        if area is not None and len(area) == n:
            sy, sx = g.scale
            scaled = corners[keep] * np.array([sx, sy, sx, sy])
            full = (scaled[:, 2] - scaled[:, 0]) * (scaled[:, 3] - scaled[:, 1])
            share = np.where(full > 0, wh[:, 0] * wh[:, 1] / np.where(full > 0, full, 1), 1.0)
            meta["area"] = [float(a * sx * sy * s) for a, s in zip(np.asarray(area, np.float64)[keep], share)]
        boxes = np.concatenate([moved[:, :2], moved[:, :2] + wh], axis=1).astype(np.float32)
        return boxes, keep


def _has_masks(sample: Sample) -> bool:
    meta = sample.meta or {}
    return sample.mask is not None or isinstance(meta.get("instance_mask"), np.ndarray)


def _renumber(mask: np.ndarray, keep: np.ndarray, n: int) -> np.ndarray:
    """An instance map whose value k + 1 marks box k, after the boxes ``keep`` were kept: ids 1..len(keep) again
    (a dropped box's pixels, none or few after the crop, become background)."""
    lut = np.zeros(max(int(mask.max(initial=0)), n) + 1, dtype=mask.dtype)
    lut[np.asarray(keep) + 1] = np.arange(1, len(keep) + 1, dtype=mask.dtype)
    valid = (mask >= 0) & (mask < len(lut))
    return np.where(valid, lut[np.where(valid, mask, 0)], mask)
