"""COCO-style detection metrics (box and mask AP, AP50, AP75, AP by size, AR@1/10/100), in numpy.

The algorithm follows the COCO evaluation protocol as pycocotools implements it (greedy matching by
score, crowd regions and out-of-range areas ignored, 101-point interpolated precision), so values agree
with pycocotools to floating-point rounding; the test suite checks that on random fixtures.

Boxes enter as ``x0, y0, x1, y1`` pixel corners (what :class:`shiftbench.models.Detections` holds) and
are converted to COCO's ``x, y, w, h`` once, before any IoU is taken.

>>> gt = [{"boxes": [[0, 0, 10, 10]], "labels": [1]}]
>>> dt = [{"boxes": [[0, 0, 10, 10]], "scores": [0.9], "labels": [1]}]
>>> round(coco_evaluate(dt, gt)["ap"], 6)
1.0
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..datasets.coco import decode_rle, encode_rle_string
from ..errors import DatasetError, ShiftbenchError
from .base import Metric

__all__ = ["box_iou_xywh", "mask_iou", "coco_evaluate", "RLEMasks", "DetectionAP", "BoxAP", "MaskAP", "STAT_NAMES"]

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
RECALL_THRESHOLDS = np.linspace(0.0, 1.0, 101)
MAX_DETS = (1, 10, 100)
AREA_RANGES = {"all": (0.0, 1e10), "small": (0.0, 32.0 ** 2), "medium": (32.0 ** 2, 96.0 ** 2), "large": (96.0 ** 2, 1e10)}
STAT_NAMES = ("ap", "ap50", "ap75", "ap_small", "ap_medium", "ap_large",
              "ar1", "ar10", "ar100", "ar_small", "ar_medium", "ar_large")


def box_iou_xywh(dt: np.ndarray, gt: np.ndarray, iscrowd: np.ndarray) -> np.ndarray:
    """(D, G) IoU of ``x, y, w, h`` boxes; against a crowd box the union is the detection's area."""
    dt = np.asarray(dt, np.float64).reshape(-1, 4)
    gt = np.asarray(gt, np.float64).reshape(-1, 4)
    w = np.minimum(dt[:, None, 0] + dt[:, None, 2], gt[None, :, 0] + gt[None, :, 2]) - np.maximum(dt[:, None, 0], gt[None, :, 0])
    h = np.minimum(dt[:, None, 1] + dt[:, None, 3], gt[None, :, 1] + gt[None, :, 3]) - np.maximum(dt[:, None, 1], gt[None, :, 1])
    inter = np.clip(w, 0, None) * np.clip(h, 0, None)
    inter = np.where((w > 0) & (h > 0), inter, 0.0)
    area_d = (dt[:, 2] * dt[:, 3])[:, None]
    area_g = (gt[:, 2] * gt[:, 3])[None, :]
    union = np.where(np.asarray(iscrowd, bool)[None, :], area_d, area_d + area_g - inter)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def mask_iou(dt: np.ndarray, gt: np.ndarray, iscrowd: np.ndarray) -> np.ndarray:
    """(D, G) IoU of bool masks (D, H, W) and (G, H, W); crowd: intersection over the detection's area."""
    pixels = int(np.prod(np.shape(gt)[1:]))
    d = np.asarray(dt, bool).reshape(len(dt), pixels).astype(np.float64)
    g = np.asarray(gt, bool).reshape(len(gt), pixels).astype(np.float64)
    inter = d @ g.T  # exact: pixel counts are small integers in float64
    area_d = d.sum(axis=1)[:, None]
    area_g = g.sum(axis=1)[None, :]
    union = np.where(np.asarray(iscrowd, bool)[None, :], area_d, area_d + area_g - inter)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def _xyxy_to_xywh(boxes: Any) -> np.ndarray:
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    return np.stack([b[:, 0], b[:, 1], b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]], axis=1)


def _get(item: Any, key: str, default: Any = None) -> Any:
    if isinstance(item, Mapping):
        return item.get(key, default)
    return getattr(item, key, default)


class RLEMasks:
    """Instance masks (N, H, W) kept as COCO compressed RLE strings with their pixel areas; indexing
    (``masks[rows]``) decodes only the rows asked for, so a metric holding many images' masks stays
    small and a whole image set is never unpacked at once.

    >>> m = RLEMasks.encode(np.eye(3, dtype=bool)[None]); m.shape, m.areas.tolist(), int(m[[0]].sum())
    ((1, 3, 3), [3.0], 3)
    """

    def __init__(self, counts: Sequence[str], shape: Sequence[int], areas: Any):
        self.counts = list(counts)
        self.shape = tuple(int(v) for v in shape)
        self.areas = np.asarray(areas, np.float64).reshape(-1)
        if len(self.shape) != 3 or len(self.counts) != self.shape[0] or len(self.areas) != self.shape[0]:
            raise ShiftbenchError(f"RLE masks: {len(self.counts)} strings and {len(self.areas)} areas for shape {self.shape}")

    @classmethod
    def encode(cls, masks: Any) -> "RLEMasks":

        masks = np.asarray(masks, bool)
        if masks.ndim != 3:
            raise ShiftbenchError(f"instance masks must be (N, H, W), got shape {masks.shape}")
        counts = [encode_rle_string(m)["counts"] for m in masks]
        return cls(counts, masks.shape, masks.reshape(len(masks), int(np.prod(masks.shape[1:]))).sum(axis=1))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Any) -> np.ndarray:

        rows = np.arange(self.shape[0])[rows].reshape(-1)
        out = np.zeros((len(rows), *self.shape[1:]), bool)
        for i, r in enumerate(rows.tolist()):
            out[i] = decode_rle({"size": list(self.shape[1:]), "counts": self.counts[r]})
        return out


def _as_masks(masks: Any, count: int) -> Any:
    if isinstance(masks, RLEMasks):
        return masks
    return np.asarray(masks, bool).reshape(count, *np.shape(masks)[1:])


def _mask_areas(masks: Any) -> np.ndarray:
    if isinstance(masks, RLEMasks):
        return masks.areas
    return masks.reshape(len(masks), int(np.prod(masks.shape[1:]))).sum(axis=1).astype(np.float64)


class _Image:
    """One image's detections and ground truth, per category, in COCO's terms."""

    def __init__(self, dt: Any, gt: Any, iou_type: str):
        exact = _get(gt, "boxes_xywh")  # a COCO file's own x, y, w, h: the IoUs COCOeval takes, bit for bit
        self.gt_boxes = (np.asarray(exact, np.float64).reshape(-1, 4) if exact is not None
                         else _xyxy_to_xywh(_get(gt, "boxes", np.zeros((0, 4)))))
        g = len(self.gt_boxes)
        self.gt_labels = np.asarray(_get(gt, "labels", np.zeros(g)), np.int64).reshape(-1)
        crowd = _get(gt, "iscrowd")
        self.gt_crowd = np.zeros(g, bool) if crowd is None else np.asarray(crowd, bool).reshape(-1)
        self.gt_masks = _get(gt, "masks")
        self.dt_boxes = _xyxy_to_xywh(_get(dt, "boxes", np.zeros((0, 4))))
        d = len(self.dt_boxes)
        self.dt_scores = np.asarray(_get(dt, "scores", np.zeros(d)), np.float64).reshape(-1)
        self.dt_labels = np.asarray(_get(dt, "labels", np.zeros(d)), np.int64).reshape(-1)
        self.dt_masks = _get(dt, "masks")
        if len(self.gt_labels) != g or len(self.gt_crowd) != g:
            raise ShiftbenchError(f"ground truth: {g} boxes but {len(self.gt_labels)} labels / {len(self.gt_crowd)} iscrowd")
        if len(self.dt_scores) != d or len(self.dt_labels) != d:
            raise ShiftbenchError(f"detections: {d} boxes but {len(self.dt_scores)} scores / {len(self.dt_labels)} labels")
        if iou_type == "segm":
            if self.gt_masks is None or (d and self.dt_masks is None):
                raise ShiftbenchError("mask AP needs masks on both the detections and the ground truth")
            # RLEMasks (what the metric classes keep) stay encoded: matching decodes what it compares
            self.gt_masks = _as_masks(self.gt_masks, g)
            self.dt_masks = _as_masks(self.dt_masks, d) if d else np.zeros((0, *self.gt_masks.shape[1:]), bool)
        area = _get(gt, "area")
        if area is not None:
            self.gt_area = np.asarray(area, np.float64).reshape(-1)
        elif iou_type == "segm":
            self.gt_area = _mask_areas(self.gt_masks)
        else:
            self.gt_area = self.gt_boxes[:, 2] * self.gt_boxes[:, 3]
        if iou_type == "segm":
            self.dt_area = _mask_areas(self.dt_masks)
        else:
            self.dt_area = self.dt_boxes[:, 2] * self.dt_boxes[:, 3]
        self.iou_type = iou_type


def _evaluate_image(img: _Image, cat: int, area_rng: tuple[float, float], max_det: int,
                    ious: np.ndarray, gi: np.ndarray, di: np.ndarray) -> dict[str, np.ndarray] | None:
    """Greedy matching of one image / category / area range, as COCOeval.evaluateImg."""
    if not len(gi) and not len(di):
        return None
    g_area = img.gt_area[gi]
    g_ignore = img.gt_crowd[gi] | (g_area < area_rng[0]) | (g_area > area_rng[1])
    g_order = np.argsort(g_ignore.astype(np.int64), kind="mergesort")  # non-ignored first
    g_ignore = g_ignore[g_order]
    crowd = img.gt_crowd[gi][g_order]
    d_count = min(len(di), max_det)  # di is already sorted by score
    iou = ious[:d_count][:, g_order] if ious.size else np.zeros((d_count, len(gi)))
    t_count, g_count = len(IOU_THRESHOLDS), len(gi)
    dt_matched = np.zeros((t_count, d_count), bool)
    dt_ignore = np.zeros((t_count, d_count), bool)
    if g_count and d_count:
        # plain Python lists: per image and category there are few boxes, and numpy's per-call
        # overhead would dominate the greedy loop
        rows = iou.tolist()
        ignored = g_ignore.tolist()
        is_crowd = crowd.tolist()
        for t, threshold in enumerate(IOU_THRESHOLDS):
            taken = [False] * g_count
            for d in range(d_count):
                best, match = min(float(threshold), 1 - 1e-10), -1
                row = rows[d]
                for g in range(g_count):
                    if taken[g] and not is_crowd[g]:
                        continue  # a regular gt matches one detection at most
                    if match > -1 and not ignored[match] and ignored[g]:
                        break  # a match to a regular gt is never traded for an ignored one
                    if row[g] < best:
                        continue
                    best, match = row[g], g  # equal IoU: the later gt wins
                if match < 0:
                    continue
                dt_ignore[t, d] = ignored[match]
                dt_matched[t, d] = True
                taken[match] = True
    d_area = img.dt_area[di[:d_count]]
    out_of_range = (d_area < area_rng[0]) | (d_area > area_rng[1])
    dt_ignore |= ~dt_matched & out_of_range[None, :]
    return {"scores": img.dt_scores[di[:d_count]], "matched": dt_matched, "ignore": dt_ignore,
            "gt_ignore": g_ignore}


def coco_evaluate(detections: Sequence[Any], targets: Sequence[Any], iou_type: str = "bbox") -> dict[str, float]:
    """COCO AP/AR summary over images. ``detections[i]`` and ``targets[i]`` are the same image.

    Each detection entry has ``boxes`` (xyxy), ``scores``, ``labels`` (and ``masks`` for ``segm``);
    each target ``boxes``, ``labels``, optional ``iscrowd``, ``area``, ``masks``, ``boxes_xywh`` (the
    boxes as COCO writes them, used instead of ``boxes`` when given) and ``image_id``. Returns the 12
    COCO stats keyed by :data:`STAT_NAMES`; -1 where undefined (no ground truth), as pycocotools (the
    metric classes turn -1 into None). When every target has an ``image_id``, images are taken in id
    order, as COCOeval takes them (the order decides how detections of equal score are counted).
    """
    if iou_type not in ("bbox", "segm"):
        raise ShiftbenchError(f"iou_type must be 'bbox' or 'segm', got {iou_type!r}")
    if len(detections) != len(targets):
        raise ShiftbenchError(f"{len(detections)} detection entries for {len(targets)} images")
    ids = [_get(g, "image_id") for g in targets]
    known = all(i is not None for i in ids)
    order = sorted(range(len(targets)), key=lambda i: int(ids[i])) if known else range(len(targets))
    images = [_Image(detections[i], targets[i], iou_type) for i in order]
    categories = sorted(set(int(c) for img in images for c in img.gt_labels))
    areas = list(AREA_RANGES.values())
    T, R, K, A, M = len(IOU_THRESHOLDS), len(RECALL_THRESHOLDS), len(categories), len(areas), len(MAX_DETS)
    precision = -np.ones((T, R, K, A, M))
    recall = -np.ones((T, K, A, M))
    for k, cat in enumerate(categories):
        per_image = []
        for img in images:
            gi = np.nonzero(img.gt_labels == cat)[0]
            di = np.nonzero(img.dt_labels == cat)[0]
            di = di[np.argsort(-img.dt_scores[di], kind="mergesort")][:MAX_DETS[-1]]
            if len(gi) and len(di):
                if iou_type == "bbox":
                    ious = box_iou_xywh(img.dt_boxes[di], img.gt_boxes[gi], img.gt_crowd[gi])
                else:
                    ious = mask_iou(img.dt_masks[di], img.gt_masks[gi], img.gt_crowd[gi])
            else:
                ious = np.zeros((0, 0))
            per_image.append((img, gi, di, ious))
        for a, area_rng in enumerate(areas):
            # greedy matching visits detections in score order, so the matches of the top 1 or 10 are
            # the first 1 or 10 of the matches of the top 100: match once, truncate per max_det
            full = [e for e in (_evaluate_image(img, cat, area_rng, MAX_DETS[-1], ious, gi, di)
                                for img, gi, di, ious in per_image) if e is not None]
            for m, max_det in enumerate(MAX_DETS):
                evals = full
                if not evals:
                    continue
                scores = np.concatenate([e["scores"][:max_det] for e in evals])
                order = np.argsort(-scores, kind="mergesort")
                matched = np.concatenate([e["matched"][:, :max_det] for e in evals], axis=1)[:, order]
                ignore = np.concatenate([e["ignore"][:, :max_det] for e in evals], axis=1)[:, order]
                n_positive = int(np.count_nonzero(~np.concatenate([e["gt_ignore"] for e in evals])))
                if n_positive == 0:
                    continue
                tp = np.cumsum(matched & ~ignore, axis=1).astype(np.float64)
                fp = np.cumsum(~matched & ~ignore, axis=1).astype(np.float64)
                for t in range(T):
                    nd = tp.shape[1]
                    rc = tp[t] / n_positive
                    pr = tp[t] / (fp[t] + tp[t] + np.spacing(1))
                    recall[t, k, a, m] = rc[-1] if nd else 0.0
                    # precision envelope: running maximum from the right
                    pr = np.maximum.accumulate(pr[::-1])[::-1] if nd else pr
                    idx = np.searchsorted(rc, RECALL_THRESHOLDS, side="left")
                    q = np.zeros(R)
                    valid = idx < nd
                    q[valid] = pr[idx[valid]]
                    # the reference stops at the first recall threshold it cannot reach
                    if not valid.all():
                        q[np.argmin(valid):] = 0.0
                    precision[t, :, k, a, m] = q
    return _summarize(precision, recall)


def _summarize(precision: np.ndarray, recall: np.ndarray) -> dict[str, float]:
    def mean(values: np.ndarray) -> float:
        kept = values[values > -1]
        return float(kept.mean()) if kept.size else -1.0

    a = {name: i for i, name in enumerate(AREA_RANGES)}
    m100 = MAX_DETS.index(100)
    return {
        "ap": mean(precision[:, :, :, a["all"], m100]),
        "ap50": mean(precision[0, :, :, a["all"], m100]),
        "ap75": mean(precision[5, :, :, a["all"], m100]),
        "ap_small": mean(precision[:, :, :, a["small"], m100]),
        "ap_medium": mean(precision[:, :, :, a["medium"], m100]),
        "ap_large": mean(precision[:, :, :, a["large"], m100]),
        "ar1": mean(recall[:, :, a["all"], MAX_DETS.index(1)]),
        "ar10": mean(recall[:, :, a["all"], MAX_DETS.index(10)]),
        "ar100": mean(recall[:, :, a["all"], m100]),
        "ar_small": mean(recall[:, :, a["small"], m100]),
        "ar_medium": mean(recall[:, :, a["medium"], m100]),
        "ar_large": mean(recall[:, :, a["large"], m100]),
    }


def _coco_fields(s: Any) -> dict[str, Any]:
    """What a COCO sample adds for COCOeval's numbers: its image id (the order of images) and the file's
    own x, y, w, h boxes, when ``boxes`` still are those boxes (float32 corners lose the last bits)."""
    out: dict[str, Any] = {}
    if s.meta.get("coco_id") is not None:
        out["image_id"] = int(s.meta["coco_id"])
    exact = s.meta.get("bbox")
    if exact is not None and len(exact) == len(s.boxes):
        xywh = np.asarray(exact, np.float64).reshape(-1, 4)
        corners = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1).astype(np.float32)
        if np.array_equal(corners, s.boxes):
            out["boxes_xywh"] = xywh
    return out


def _check_segmentations(name: str, s: Any, instance_masks: Any) -> None:
    """COCOeval's mask AP reads a segmentation for every annotation: one without is refused, named."""
    segmentations = getattr(instance_masks, "segmentations", None)  # datasets.coco.InstanceMasks
    if segmentations is None:
        return
    for k, seg in enumerate(segmentations):
        if not seg:
            ids = s.meta.get("ann_ids") or []
            ann = f"annotation {ids[k]}" if k < len(ids) and ids[k] != -1 else f"annotation #{k + 1}"
            raise DatasetError(f"{name}: image {s.id}: {ann} has no segmentation (mask AP needs one for "
                               "every annotation, as COCOeval does)")


class DetectionAP(Metric):
    """COCO AP/AR over all images seen; ``compute`` gives ``{prefix}_ap``, ``{prefix}_ap50``, ... (12 stats).

    The evaluation needs every image's detections, so ``update`` keeps them (boxes; for ``segm`` the
    masks as COCO RLE strings, :class:`RLEMasks`, decoded only while an image is matched) and
    ``compute`` runs the matching once. ``merge`` appends another part's images after this one's: the
    images of a split, merged in data order, are the images of one pass, in the same order.
    """

    task = "detection"
    higher_is_better = True
    iou_type = "bbox"
    prefix = "box"

    def reset(self) -> None:
        self.n = 0
        self._dt: list[dict[str, Any]] = []
        self._gt: list[dict[str, Any]] = []

    def _pack(self, item: Any, keys: tuple[str, ...]) -> dict[str, Any]:
        out = {}
        for key in keys:
            value = _get(item, key)
            if value is None:
                continue
            if key == "masks" and self.iou_type == "segm":
                rle = value if isinstance(value, RLEMasks) else RLEMasks.encode(value)
                out["mask_shape"] = list(rle.shape)
                out["mask_area"] = rle.areas
                out["masks"] = rle.counts
                continue
            elif key == "masks":
                continue  # box AP never looks at masks: do not keep them
            out[key] = np.asarray(value)
        return out

    @staticmethod
    def _unpack(item: dict[str, Any]) -> dict[str, Any]:
        if "mask_shape" in item:
            item = dict(item, masks=RLEMasks(item["masks"], item["mask_shape"], item["mask_area"]))
        return item

    def merge(self, other: "DetectionAP") -> "DetectionAP":
        self.check_mergeable(other)
        self._dt.extend(other._dt)  # the records are never changed after update: sharing them is safe
        self._gt.extend(other._gt)
        self.n += other.n
        return self

    def update(self, predictions: Sequence[Any], targets: Sequence[Any]) -> None:
        if len(predictions) != len(targets):
            raise ShiftbenchError(f"{self.name}: {len(predictions)} predictions for {len(targets)} targets")
        for dt, gt in zip(predictions, targets):
            for arr in (_get(dt, "boxes"), _get(dt, "scores")):
                if arr is not None and not np.isfinite(np.asarray(arr, np.float64)).all():
                    raise ShiftbenchError(f"{self.name}: detections contain NaN/inf")
            self._dt.append(self._pack(dt, ("boxes", "scores", "labels", "masks")))
            self._gt.append(self._pack(gt, ("boxes", "labels", "iscrowd", "area", "masks", "boxes_xywh",
                                            "image_id")))
            self.n += 1

    def sample_targets(self, samples: Sequence[Any]) -> list[dict[str, Any]]:
        targets = []
        for s in samples:
            if s.boxes is None or s.box_labels is None:
                raise ShiftbenchError(f"{self.name} needs boxes and box_labels on every sample; sample "
                                      f"{str(s.id)!r} has none")
            target: dict[str, Any] = {"boxes": s.boxes, "labels": s.box_labels}
            if self.iou_type == "segm":
                instance_masks = s.meta.get("instance_masks")
                if instance_masks is None and s.mask is not None and s.mask.dtype != bool:
                    # an instance map: value i+1 marks the i-th box's object
                    instance_masks = s.mask[None] == np.arange(1, len(s.boxes) + 1)[:, None, None]
                if instance_masks is None:
                    raise ShiftbenchError(f"{self.name} needs instance masks (meta['instance_masks'] or an instance map) "
                                          f"on every sample; sample {str(s.id)!r} has none")
                _check_segmentations(self.name, s, instance_masks)
                if tuple(np.shape(instance_masks)[1:]) != s.image.shape[:2]:
                    # a shift that resized the image without its annotations would pair the wrong pixels
                    raise ShiftbenchError(f"{self.name}: sample {s.id}: instance masks are "
                                          f"{tuple(np.shape(instance_masks)[1:])} but the image is {s.image.shape[:2]}")
                target["masks"] = instance_masks
            # what COCOeval reads per annotation besides the box: crowd flags (ignored regions) and the
            # annotation's area (small/medium/large sizing by segment area, not by box area)
            for key in ("iscrowd", "area"):
                value = s.meta.get(key)
                if value is not None:
                    if len(value) != len(s.boxes):
                        raise ShiftbenchError(f"{self.name}: sample {s.id}: meta[{key!r}] has {len(value)} "
                                              f"entries for {len(s.boxes)} boxes")
                    target[key] = value
            target.update(_coco_fields(s))
            targets.append(target)
        return targets

    def compute(self) -> dict[str, float | None]:
        """The 12 stats; None where COCOeval says -1 (undefined: no ground truth to score), see
        :meth:`undefined_reason`. A -1 is not a value: averaging it with real values would be wrong."""
        if not self.n:
            return {f"{self.prefix}_{k}": None for k in STAT_NAMES}
        stats = coco_evaluate([self._unpack(d) for d in self._dt], [self._unpack(g) for g in self._gt], self.iou_type)
        return {f"{self.prefix}_{k}": (None if v == -1 else v) for k, v in stats.items()}

    def undefined_reason(self, key: str) -> str:
        """Why ``compute()[key]`` is None, in words (stored with the row)."""
        if not self.n:
            return "no images were scored"
        stat = key[len(self.prefix) + 1:] if key.startswith(self.prefix + "_") else key
        size = next((s for s in ("small", "medium", "large") if stat.endswith(s)), None)
        if size is None:
            return "undefined (COCOeval -1): no non-crowd ground truth in any image"
        lo, hi = AREA_RANGES[size]
        span = f"area {lo:g}..{hi:g}" if size != "large" else f"area > {lo:g}"
        return f"undefined (COCOeval -1): no non-crowd ground truth of {size} size ({span} px)"


class BoxAP(DetectionAP):
    """COCO box AP, AP50, AP75, AP by size and AR@1/10/100."""

    name = "box_ap"
    needs = "boxes with their labels (sample.boxes, sample.box_labels)"
    iou_type = "bbox"
    prefix = "box"


class MaskAP(DetectionAP):
    """COCO mask AP, AP50, AP75, AP by size and AR@1/10/100."""

    name = "mask_ap"
    needs = "boxes with their labels and instance masks (meta['instance_masks'] or an instance map)"
    iou_type = "segm"
    prefix = "mask"
