"""Object masks for background shifts: providers (exact, U2-Net-p, GrabCut, SAM), clean-up, dilation, quality.

Every provider answers ``provider(samples) -> list[MaskResult]``: a boolean HxW object mask at the image's
size plus a quality score. Post-processing follows ObjectCompose: keep the largest connected component,
fill holes, then (in the shifts, around an estimated mask) dilate with an elliptical kernel of radius 6 px
so that a new textured background can neither camouflage nor extend the object. A sample's own mask is
exact (:func:`mask_is_exact`) and is used as it is.

>>> import numpy as np
>>> m = np.zeros((9, 9), bool); m[2:7, 2:7] = True; m[4, 4] = False; m[0, 8] = True
>>> clean = postprocess(m)
>>> int(clean.sum()), bool(clean[4, 4]), bool(clean[0, 8])
(25, True, False)
>>> int(dilate(clean, 1).sum())  # a 3x3 ellipse (a plus sign) grows the 5x5 square by one px per side
45
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..install import install_command
from ..models.u2net import U2NetP
from ..sample import Sample

__all__ = [
    "DEFAULT_DILATION", "MaskResult", "mask_is_exact", "MaskProvider", "GroundTruthMasks", "U2NetPMasks",
    "GrabCutMasks", "SamMasks",
    "MASK_PROVIDERS", "create_mask_provider", "postprocess", "largest_component", "fill_holes", "dilate",
    "stability_score", "mask_quality", "mask_iou", "foreground", "check_object_mask", "sample_box",
]

DEFAULT_DILATION = 6  # px, as ObjectCompose expands SAM masks before inpainting


@dataclass
class MaskResult:
    """One object mask (HxW bool), its quality in [0, 1] (see :func:`mask_quality`) and its provenance:
    ``exact`` when it is the sample's own annotated mask (:func:`mask_is_exact`), False when a provider
    estimated it (u2netp, grabcut, sam). Background shifts feather a band around estimated masks only."""

    mask: np.ndarray
    quality: float
    probability: np.ndarray | None = None
    exact: bool = False


def mask_is_exact(sample: Sample) -> bool:
    """Whether ``sample.mask`` is exact: drawn from the image's own alpha or annotation (the ``objects``
    cut-outs, COCO / VOC polygons, any dataset mask), not estimated. A dataset mask is exact unless the
    sample says otherwise with ``meta["mask_exact"] = False`` (masks you estimated yourself); False when
    the sample has no mask."""
    if sample.mask is None:
        return False
    flag = (sample.meta or {}).get("mask_exact", True)
    if not isinstance(flag, (bool, np.bool_)):
        raise ShiftbenchError(f"sample {sample.id}: meta 'mask_exact' must be true or false, got {flag!r}")
    return bool(flag)


# -- post-processing --------------------------------------------------------------------------------
def foreground(mask: np.ndarray) -> np.ndarray:
    """A binary object mask from a bool mask or an integer instance map (every instance > 0)."""
    mask = np.asarray(mask)
    return mask if mask.dtype == np.bool_ else mask > 0


def largest_component(mask: np.ndarray) -> np.ndarray:
    """The largest 8-connected component of a binary mask (an empty mask stays empty)."""
    import cv2

    mask = foreground(mask)
    n, labels, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    if n <= 2:  # background plus at most one component
        return mask.copy()
    keep = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    return labels == keep


def fill_holes(mask: np.ndarray) -> np.ndarray:
    """Fill background regions that do not touch the image border."""
    import cv2

    mask = foreground(mask)
    h, w = mask.shape
    # flood the background from a one-pixel frame around the image; what the flood cannot reach is a hole
    padded = np.zeros((h + 2, w + 2), np.uint8)
    padded[1:-1, 1:-1] = mask
    flood = np.zeros((h + 4, w + 4), np.uint8)
    cv2.floodFill(padded, flood, (0, 0), 1, flags=4 | (1 << 8))
    outside = flood[2:-2, 2:-2].astype(bool)
    return mask | ~outside


def postprocess(mask: np.ndarray, largest: bool = True, holes: bool = True) -> np.ndarray:
    """Largest component, then hole filling (the order matters: a hole may hold a stray component)."""
    out = foreground(mask)
    if largest:
        out = largest_component(out)
    if holes:
        out = fill_holes(out)
    return np.ascontiguousarray(out, dtype=bool)


def _ellipse(radius: int) -> np.ndarray:
    import cv2

    return cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * radius + 1, 2 * radius + 1))


def dilate(mask: np.ndarray, radius: int = DEFAULT_DILATION) -> np.ndarray:
    """Grow a mask by ``radius`` px with an elliptical (disc-like) kernel of size 2*radius+1."""
    import cv2

    if isinstance(radius, bool) or not isinstance(radius, (int, np.integer)) or radius < 0:
        raise ShiftbenchError(f"dilation must be a non-negative int of pixels, got {radius!r}")
    mask = foreground(mask)
    if radius == 0:
        return mask.copy()
    return cv2.dilate(mask.astype(np.uint8), _ellipse(int(radius))).astype(bool)


def stability_score(probability: np.ndarray, threshold: float = 0.5, offset: float = 0.2) -> float:
    """IoU of the masks thresholded at ``threshold - offset`` and ``threshold + offset`` (SAM's stability).

    1.0 when the probability map is confident everywhere; lower when much of the object is uncertain.
    """
    p = np.asarray(probability, dtype=np.float32)
    hi = p > threshold + offset
    lo = p > threshold - offset
    union = int(lo.sum())
    return 1.0 if union == 0 else float(hi.sum()) / union


def mask_quality(mask: np.ndarray, raw: np.ndarray | None = None, probability: np.ndarray | None = None) -> float:
    """A score in [0, 1]: stability of the probability map (1 for hard masks) times the share of the raw
    mask's area that survives post-processing (stray blobs and ragged pieces lower it). 0 for an empty
    mask or one that covers the whole image (neither leaves an object and a background).
    """
    mask = foreground(mask)
    area = int(mask.sum())
    if area == 0 or area == mask.size:
        return 0.0
    stability = 1.0 if probability is None else stability_score(probability)
    kept = 1.0
    if raw is not None:
        raw = foreground(raw)
        raw_area = int(raw.sum())
        kept = float((raw & mask).sum()) / raw_area if raw_area else 0.0
    return float(np.clip(stability * kept, 0.0, 1.0))


def mask_iou(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two binary masks (1.0 when both are empty)."""
    a, b = foreground(a), foreground(b)
    if a.shape != b.shape:
        raise ShiftbenchError(f"mask shapes differ: {a.shape} vs {b.shape}")
    union = int((a | b).sum())
    return 1.0 if union == 0 else float((a & b).sum()) / union


def check_object_mask(mask: Any, shape: tuple[int, int], where: str) -> np.ndarray:
    """The binary object mask, or a one-line error for a mask a background shift cannot use."""
    if mask is None:
        raise ShiftbenchError(f"{where}: no object mask")
    mask = np.asarray(mask)
    if mask.shape != tuple(shape):
        raise ShiftbenchError(f"{where}: mask shape {mask.shape} does not match the image's {tuple(shape)}")
    fg = foreground(mask)
    area = int(fg.sum())
    if area == 0:
        raise ShiftbenchError(f"{where}: the object mask is empty, so there is no object to keep")
    if area == fg.size:
        raise ShiftbenchError(f"{where}: the object mask covers the whole image, so there is no background to change")
    return fg


def sample_box(sample: Sample, margin: float = 0.1) -> list[int] | None:
    """The sample's first box (x0, y0, x1, y1) grown by ``margin`` of its size and clipped, or None."""
    if sample.boxes is None or len(sample.boxes) == 0:
        return None
    h, w = sample.size
    x0, y0, x1, y1 = (float(v) for v in sample.boxes[0])
    mx, my = margin * (x1 - x0), margin * (y1 - y0)
    box = [int(max(0, np.floor(x0 - mx))), int(max(0, np.floor(y0 - my))),
           int(min(w, np.ceil(x1 + mx))), int(min(h, np.ceil(y1 + my)))]
    if box[2] - box[0] < 2 or box[3] - box[1] < 2:
        return None
    return box


# -- providers -----------------------------------------------------------------------------------------
class MaskProvider:
    """Base: ``__call__(samples)`` -> list of MaskResult. Subclasses implement ``raw(sample)``.

    ``raw`` returns ``(binary mask, probability map or None)`` before post-processing. Results are
    cached by image content so that a shift's ``sample_params`` and ``apply`` compute a mask once.
    """

    name = "provider"
    cache_size = 64

    def __init__(self, largest: bool = True, holes: bool = True):
        self.largest, self.holes = bool(largest), bool(holes)
        self._cache: OrderedDict[bytes, MaskResult] = OrderedDict()

    def raw(self, sample: Sample) -> tuple[np.ndarray, np.ndarray | None]:  # pragma: no cover - protocol
        raise NotImplementedError

    def _key(self, sample: Sample) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        h.update(repr((sample.image.shape, self.config_key(sample))).encode())
        h.update(np.ascontiguousarray(sample.image).data)
        return h.digest()

    def config_key(self, sample: Sample) -> Any:
        return None

    def one(self, sample: Sample) -> MaskResult:
        key = self._key(sample)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        raw, prob = self.raw(sample)
        raw = foreground(raw)
        if raw.shape != sample.size:
            raise ShiftbenchError(f"mask provider {self.name!r} gave a {raw.shape} mask for a {sample.size} image")
        mask = postprocess(raw, self.largest, self.holes)
        result = MaskResult(mask, mask_quality(mask, raw, prob), prob)
        self._cache[key] = result
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return result

    def __call__(self, samples: Sample | Sequence[Sample]) -> Any:
        if isinstance(samples, Sample):
            return self.one(samples)
        return [self.one(s) for s in samples]

    def load(self) -> None:
        """Load the provider's weights now (a dry run's check); providers without weights need nothing."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class GroundTruthMasks(MaskProvider):
    """The sample's own mask (bool, or every instance of an instance map); no post-processing by default."""

    name = "ground_truth"

    def __init__(self, largest: bool = False, holes: bool = False):
        super().__init__(largest, holes)

    def one(self, sample: Sample) -> MaskResult:
        if sample.mask is None:
            raise ShiftbenchError(f"sample {sample.id} has no mask for the 'ground_truth' provider; "
                                  "choose mask='u2netp', 'grabcut' or 'sam'")
        raw = foreground(sample.mask)
        mask = postprocess(raw, self.largest, self.holes) if (self.largest or self.holes) else raw
        return MaskResult(mask, mask_quality(mask, raw), exact=mask_is_exact(sample))


class U2NetPMasks(MaskProvider):
    """U2-Net-p salient-object probability > ``threshold``; with ``box=True`` it looks only inside the
    sample's box (grown by 10 %), which helps when several things are salient. ``threads``: onnxruntime
    intra-op threads (default: its own choice; 1 is faster on a busy machine)."""

    name = "u2netp"

    def __init__(self, threshold: float = 0.5, box: bool = False, threads: int | None = None, largest: bool = True,
                 holes: bool = True):
        super().__init__(largest, holes)
        self.threads = threads
        if not 0.0 < float(threshold) < 1.0:
            raise ShiftbenchError(f"u2netp threshold must lie in (0, 1), got {threshold!r}")
        self.threshold, self.box = float(threshold), bool(box)
        self._model = None

    def config_key(self, sample: Sample) -> Any:
        return ("u2netp", self.threshold, self.box, sample_box(sample) if self.box else None)

    def load(self) -> None:
        if self._model is None:
            self._model = _u2netp(self.threads)

    def raw(self, sample: Sample) -> tuple[np.ndarray, np.ndarray | None]:
        self.load()
        image = sample.image
        box = sample_box(sample) if self.box else None
        prob = np.zeros(sample.size, dtype=np.float32)
        if box is None:
            prob = self._model.predict([image])[0]
        else:
            x0, y0, x1, y1 = box
            prob[y0:y1, x0:x1] = self._model.predict([np.ascontiguousarray(image[y0:y1, x0:x1])])[0]
        return prob > self.threshold, prob


_U2NETP: dict[int | None, Any] = {}


def _u2netp(threads: int | None = None):
    """One U2-Net-p session per process and thread count (loading the graph costs more than a prediction)."""
    if threads not in _U2NETP:
        _U2NETP[threads] = U2NetP(threads=threads)
    return _U2NETP[threads]


class GrabCutMasks(MaskProvider):
    """OpenCV GrabCut initialised with the sample's box grown by ``margin`` (no weights); a sample
    without a box is refused (GrabCut has nothing to start from)."""

    name = "grabcut"

    def __init__(self, iterations: int = 5, margin: float = 0.05, largest: bool = True, holes: bool = True):
        super().__init__(largest, holes)
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
            raise ShiftbenchError(f"grabcut iterations must be a positive int, got {iterations!r}")
        self.iterations, self.margin = int(iterations), float(margin)

    def config_key(self, sample: Sample) -> Any:
        return ("grabcut", self.iterations, self.margin, sample_box(sample, self.margin))

    def raw(self, sample: Sample) -> tuple[np.ndarray, np.ndarray | None]:
        import cv2

        h, w = sample.size
        box = sample_box(sample, self.margin)
        if box is None:
            raise ShiftbenchError(f"sample {sample.id}: the 'grabcut' mask provider needs a box (sample.boxes)")
        x0, y0, x1, y1 = box
        if x1 - x0 >= w and y1 - y0 >= h:  # GrabCut needs some background outside the rectangle
            x0, y0, x1, y1 = 1, 1, w - 1, h - 1
        state = np.zeros((h, w), np.uint8)
        bgd, fgd = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
        # OpenCV's GrabCut seeds its GMMs with its own RNG (cv::theRNG); reset it so results repeat.
        cv2.setRNGSeed(0)
        image_bgr = np.ascontiguousarray(sample.image[..., ::-1])
        cv2.grabCut(image_bgr, state, (x0, y0, x1 - x0, y1 - y0), bgd, fgd, self.iterations, cv2.GC_INIT_WITH_RECT)
        return (state == cv2.GC_FGD) | (state == cv2.GC_PR_FGD), None


class SamMasks(MaskProvider):
    """transformers SAM prompted with the sample's box, given points, or a text prompt.

    ``model``: a hub id or local folder of a ``SamModel`` (e.g. facebook/sam-vit-base), or a
    ``(model, processor)`` pair. ``prompt="box"`` uses the sample's box; ``prompt="points"`` uses
    ``points`` (a list of [x, y]); ``prompt="text"`` first asks a transformers zero-shot detector
    (``detector``: an OWL-ViT / OWLv2 id or folder, or a ``(model, processor)`` pair) for the
    best box of ``text`` (default: the sample's class name). Of SAM's multimask outputs the one with the
    highest predicted IoU is kept; its probability map gives the stability part of the quality.
    """

    name = "sam"

    def __init__(self, model: Any = "facebook/sam-vit-base", prompt: str = "box", points: Any = None,
                 text: str | None = None, detector: Any = None, device: str = "cpu",
                 largest: bool = True, holes: bool = True):
        super().__init__(largest, holes)
        if prompt not in ("box", "points", "text"):
            raise ShiftbenchError(f"sam prompt must be 'box', 'points' or 'text', got {prompt!r}")
        if prompt == "points" and not points:
            raise ShiftbenchError("sam prompt='points' needs points=[[x, y], ...]")
        if prompt == "text" and detector is None:
            raise ShiftbenchError("sam prompt='text' needs detector= (an OWL-ViT / OWLv2 id or folder)")
        self.source, self.prompt, self.text, self.device = model, prompt, text, device
        self.points = None if points is None else [[float(p[0]), float(p[1])] for p in points]
        self.detector_source = detector
        self._sam = None
        self._detector = None

    def config_key(self, sample: Sample) -> Any:
        return ("sam", str(self.source), self.prompt, self.points, self.text, sample_box(sample, 0.0),
                sample.class_name)

    def load(self) -> None:
        self._load()

    def _load(self):
        if self._sam is None:
            self._sam = _load_pair(self.source, "SamModel", "SamProcessor", self.device)
        return self._sam

    def detect_box(self, sample: Sample) -> list[float]:
        """The detector's highest-scoring box for the text prompt (x0, y0, x1, y1 pixels)."""
        import torch

        text = self.text or sample.class_name
        if not text:
            raise ShiftbenchError(f"sample {sample.id}: sam text prompt needs text= or a class name")
        if self._detector is None:
            self._detector = _load_pair(self.detector_source, "AutoModelForZeroShotObjectDetection", "AutoProcessor",
                                        self.device)
        model, processor = self._detector
        inputs = processor(text=[[text]], images=[sample.image], return_tensors="pt")
        inputs = {k: v.to(self.device) if hasattr(v, "to") else v for k, v in inputs.items()}
        with torch.inference_mode():
            outputs = model(**inputs)
        boxes, scores = _detector_boxes(outputs, sample.size)
        if len(scores) == 0:
            raise ShiftbenchError(f"sample {sample.id}: the detector found no box for {text!r}")
        return [float(v) for v in boxes[int(np.argmax(scores))]]

    def raw(self, sample: Sample) -> tuple[np.ndarray, np.ndarray | None]:
        import torch

        model, processor = self._load()
        kwargs: dict[str, Any] = {}
        if self.prompt == "points":
            kwargs["input_points"] = [[self.points]]
        else:
            box = self.detect_box(sample) if self.prompt == "text" else sample_box(sample, 0.0)
            if box is None:
                raise ShiftbenchError(f"sample {sample.id}: sam prompt='box' needs a box (sample.boxes)")
            kwargs["input_boxes"] = [[[float(v) for v in box]]]
        inputs = processor(images=[sample.image], return_tensors="pt", **kwargs)
        inputs = {k: v.to(self.device) if hasattr(v, "to") else v for k, v in inputs.items()}
        with torch.inference_mode():
            out = model(**{k: v for k, v in inputs.items() if k in ("pixel_values", "input_points", "input_boxes")},
                        multimask_output=True)
        logits = processor.image_processor.post_process_masks(
            out.pred_masks.cpu(), inputs["original_sizes"].cpu(), inputs["reshaped_input_sizes"].cpu(), binarize=False,
        )[0][0]  # (masks, H, W) logits at the original size
        best = int(torch.argmax(out.iou_scores[0, 0]).item())
        prob = torch.sigmoid(logits[best].float()).numpy()
        return prob > 0.5, prob


def _detector_boxes(outputs: Any, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """(N, 4) pixel boxes and N scores from OWL-ViT-style (``logits``, ``pred_boxes`` cxcywh in 0..1) output."""
    import torch

    logits = outputs.logits[0]  # (queries, texts)
    scores = torch.sigmoid(logits.float()).max(dim=-1).values.cpu().numpy()
    cx, cy, bw, bh = outputs.pred_boxes[0].float().cpu().numpy().T
    h, w = size
    # OWL-ViT pads the image to a square of its longer side before predicting normalised boxes
    side = float(max(h, w))
    boxes = np.stack([(cx - bw / 2) * side, (cy - bh / 2) * side, (cx + bw / 2) * side, (cy + bh / 2) * side], 1)
    boxes = np.clip(boxes, 0, [w, h, w, h])
    return boxes, scores


def _load_pair(source: Any, model_cls: str, processor_cls: str, device: str):
    if isinstance(source, (tuple, list)) and len(source) == 2:
        model, processor = source
        return model.to(device).eval(), processor
    try:
        import transformers
    except ImportError:
        raise ShiftbenchError(f"the sam mask provider needs transformers: {install_command('gen')}") from None
    try:
        model = getattr(transformers, model_cls).from_pretrained(source)
        processor = getattr(transformers, processor_cls).from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise ShiftbenchError(f"cannot load {model_cls} {source!r}: {str(exc).splitlines()[0]}") from None
    return model.to(device).eval(), processor


MASK_PROVIDERS: dict[str, Callable[..., MaskProvider]] = {
    "ground_truth": GroundTruthMasks, "u2netp": U2NetPMasks, "grabcut": GrabCutMasks, "sam": SamMasks,
}


def create_mask_provider(name: Any = "ground_truth", **kwargs: Any) -> MaskProvider:
    """A mask provider by name (``ground_truth``, ``u2netp``, ``grabcut``, ``sam``) or a provider passed through."""
    if isinstance(name, MaskProvider):
        return name
    if name not in MASK_PROVIDERS:
        import difflib

        close = difflib.get_close_matches(str(name), list(MASK_PROVIDERS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ShiftbenchError(f"unknown mask provider {name!r}{hint} (choose from {', '.join(MASK_PROVIDERS)})")
    try:
        return MASK_PROVIDERS[name](**kwargs)
    except TypeError as exc:
        raise ShiftbenchError(f"mask provider {name!r}: {exc}") from None
