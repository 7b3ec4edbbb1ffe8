"""Task protocols every model adapter implements, with label spaces, declared preprocessing and output checks.

How the runner uses a model (the whole contract; nothing here imports torch)
---------------------------------------------------------------------------

``model = MODELS.create(name, **kw)`` (or ``sb.create_model``) gives an object with

- ``task``: ``"classification"``, ``"segmentation"``, ``"detection"`` or ``"captioning"``;
  ``model.kind`` adds the finer protocol name (``"classifier"``, ``"zero_shot_classifier"``, ...).
- ``name``: the registered name it was created under (``"efficientnet_lite0"``, ``"hf:./clip"``).
- ``label_space``: a :class:`~shiftbench.labelspace.LabelSpace` (``name``, ``class_names``, ``ids``,
  ``id_kind``, ``num_classes``) or ``None`` for captioners. Class-agnostic segmenters have the two-class space ``"foreground"`` (background, foreground).
- ``preprocess``: a :class:`Preprocess` declaring the input size, resize/crop rule, mean/std, colour
  order and value range, read from the model's own config. ``preprocess.to_dict()`` is JSON for the store.
- ``device`` / ``dtype``: strings, ``"cpu"`` / ``"float32"`` unless the caller chose otherwise.
- ``info()``: a JSON-serialisable dict of all of the above (for the store's run record).

Batched prediction, numpy in, numpy out. ``images`` is always a sequence of HxWx3 uint8 RGB arrays of any
sizes (what ``Sample.image`` holds); outputs are aligned with the input order:

=====================  ===========================================================================
protocol               prediction method
=====================  ===========================================================================
``Classifier``         ``predict_logits(images) -> float32 (N, C)``, C = ``label_space.num_classes``
``ZeroShotClassifier`` the same, over the classes set by ``set_classes(names, templates)``;
                       also ``encode_images(images)`` and ``encode_texts(texts)`` (L2-normalised)
``Segmenter``          ``predict(images) -> list`` of float32 ``(C, H, W)`` class scores, or ``(H, W)``
                       foreground probability when ``class_agnostic``; H, W = that input's size.
                       ``predict_masks(images)`` gives int64 ``(H, W)`` label maps (0/1 if agnostic)
``Detector``           ``predict(images) -> list[Detections]`` (boxes xyxy in input pixels, scores,
                       labels into ``label_space``, optional ``(K, H, W)`` bool masks)
``Captioner``          ``predict(images) -> list[str]``
=====================  ===========================================================================

Torch classifiers (:class:`TorchClassifier`) also expose a differentiable path for attacks:
``preprocess_tensor(images) -> Tensor (N, 3, h, w)`` (normalised model input), ``forward(x) -> logits``
on that tensor, and ``forward_images(x01)`` taking float RGB ``(N, 3, H, W)`` in [0, 1] of any size and
resizing / cropping / normalising with differentiable ops. ``model.module`` is the ``torch.nn.Module``.

Checks the runner should call: :func:`check_outputs` (NaN/inf, shape) on every batch and
:func:`check_label_space` once per (model, dataset); both raise :class:`ShiftbenchError`.
:func:`shiftbench.tasks.predict_batch` (the tasks layer, above this one) runs a model as its task asks and
returns what that task's metrics take in ``update`` (logits; foreground probabilities or label maps;
``Detections``; captions), already checked.

>>> space = LabelSpace("toy", ("cat", "dog"))
>>> space.num_classes, space.index("dog")
(2, 1)
>>> check_outputs(np.zeros((2, 2), np.float32), "toy_model", num_classes=2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..labelspace import LabelSpace, builtin_spaces, map_spaces  # torch-free, re-exported here
from ..resize import (
    INTERPOLATIONS, SizeError, check_pixels, check_shorter, check_size, crop_corner, crop_then_resize,
    crop_then_resize_tensor, pil_weights, resize, resize_tensor, resized_size, tf_crop_box, vertical_first,
)
from ..sample import to_rgb_uint8

__all__ = [
    "LabelSpace", "Preprocess", "Detections", "Model", "Classifier", "ZeroShotClassifier",
    "Segmenter", "Detector", "Captioner", "Answerer", "TorchClassifier", "check_outputs", "check_label_space",
    "as_image_list", "parse_dtype",
]


# -- preprocessing ----------------------------------------------------------------------------------
RECIPES = ("torchvision", "tf")


@dataclass(frozen=True)
class Preprocess:
    """Declared input transform: HxWx3 uint8 RGB -> float32 (N, 3, h, w) model input, computed by
    :mod:`shiftbench.resize` (the one resize / crop of the code base).

    ``recipe="torchvision"`` (timm, open_clip, torchvision, transformers): with ``resize="shorter"``, resize
    as torchvision's ``Resize(resize_size)`` does (Pillow's filter, antialiased when reducing), then take
    torchvision's ``CenterCrop(size)``. ``resize_size`` is the shorter side (an int) or an exact (height, width);
    None means timm's rule, ``floor(size / crop_fraction)`` per axis (one int when both agree).
    ``resize="exact"`` stretches to ``resize_size`` (default ``size``), then centre-crops ``size`` (timm's and
    open_clip's "squash", segmenters at a fixed size).
    Pixel values are divided by ``255 / value_range`` (value_range 1 gives torchvision's ``ToTensor``), then
    ``(x - mean) / std`` per channel, in ``color_order``. ``scale_by_max`` divides by the image's own maximum
    instead (U2-Net's convention).

    ``recipe="tf"`` (the bundled models): a centre crop of ``crop_fraction`` of the shorter side, then one
    resize to ``size`` without antialiasing (:func:`shiftbench.resize.crop_then_resize`).
    """

    size: tuple[int, int]  # (height, width) of the model input
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    resize: str = "shorter"
    crop_fraction: float = 0.875
    interpolation: str = "bicubic"
    value_range: float = 1.0
    color_order: str = "RGB"
    scale_by_max: bool = False
    resize_size: int | tuple[int, int] | None = None
    recipe: str = "torchvision"

    def __post_init__(self) -> None:
        if self.resize not in ("shorter", "exact"):
            raise ValueError(f"resize must be 'shorter' or 'exact', got {self.resize!r}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {tuple(INTERPOLATIONS)}, got {self.interpolation!r}")
        if self.color_order not in ("RGB", "BGR"):
            raise ValueError(f"color_order must be 'RGB' or 'BGR', got {self.color_order!r}")
        if isinstance(self.crop_fraction, bool) or not isinstance(self.crop_fraction, (int, float)) \
                or not 0 < self.crop_fraction <= 1:
            raise ValueError(f"crop_fraction must be in (0, 1], got {self.crop_fraction}")
        if self.recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {RECIPES}, got {self.recipe!r}")
        # sizes: positive integers within the one limit on image sizes (resize.LIMIT), one SizeError line
        # (a ShiftbenchError and a ValueError) naming the field, never Pillow's MemoryError later
        size = self.size
        if isinstance(size, (int, np.integer)) or not isinstance(size, (list, tuple)):
            raise SizeError(f"Preprocess.size: expected (height, width) of the model input in pixels, got {size!r}")
        object.__setattr__(self, "size", check_size(tuple(size), "Preprocess.size (the model input)"))
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))
        rs = self.resize_size
        if rs is not None:
            # an int is the shorter side (torchvision's Resize(int)), a pair the exact or the fitted box
            rs = check_shorter(rs, "Preprocess.resize_size") if isinstance(rs, (int, np.integer)) and \
                not isinstance(rs, bool) else check_size(rs, "Preprocess.resize_size")
            object.__setattr__(self, "resize_size", rs)
        scale = self.scale_size  # timm's rule when not given: size / crop_fraction
        if isinstance(scale, int):
            check_shorter(scale, "Preprocess.resize_size (size / crop_fraction)")
        else:
            check_pixels(*scale, "Preprocess.resize_size (size / crop_fraction)")

    def to_dict(self) -> dict[str, Any]:
        out = {
            "size": list(self.size), "resize": self.resize, "crop_fraction": self.crop_fraction,
            "interpolation": self.interpolation, "mean": list(self.mean), "std": list(self.std),
            "value_range": self.value_range, "color_order": self.color_order, "scale_by_max": self.scale_by_max,
        }
        if self.recipe != "tf":  # the bundled models' records keep their keys (their runs' identities stand)
            out["recipe"] = self.recipe
            scale = self.scale_size
            out["resize_size"] = list(scale) if isinstance(scale, tuple) else scale
        return out

    @property
    def scale_size(self) -> int | tuple[int, int]:
        """What the resize before the crop is given: the shorter side (an int: torchvision's ``Resize(int)``) or a
        (height, width): the exact size for ``resize="exact"``, the box whose shorter-ratio side the image fits
        for ``resize="shorter"`` (timm's ``ResizeKeepRatio``, for non-square inputs)."""
        if self.resize_size is not None:
            return self.resize_size
        if self.resize == "exact":
            return self.size
        h, w = (int(math.floor(s / self.crop_fraction)) for s in self.size)
        return h if h == w else (h, w)

    def geometry(self, height: int, width: int) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
        """((resized height, width), (top, left, crop height, crop width)) of the "torchvision" recipe; a crop
        larger than the resized image reaches outside it (torchvision pads with zeros there)."""
        scale = self.scale_size
        if isinstance(scale, int):
            resized = resized_size(height, width, scale)
        elif self.resize == "exact":
            resized = scale
        else:  # timm's ResizeKeepRatio: the shorter ratio decides, each side rounded
            ratio = min(height / scale[0], width / scale[1])
            resized = (max(1, int(round(height / ratio))), max(1, int(round(width / ratio))))
        th, tw = self.size
        top, left = crop_corner(resized[0], resized[1], th, tw)
        # torchvision pads a crop larger than the image with (crop - size) // 2 before it, then crops at 0
        top = -((th - resized[0]) // 2) if th > resized[0] else top
        left = -((tw - resized[1]) // 2) if tw > resized[1] else left
        return resized, (top, left, th, tw)

    def crop_box(self, height: int, width: int) -> tuple[int, int, int, int]:
        """(top, left, crop_h, crop_w) of the region of an HxW image that the model sees, in its pixels."""
        if self.recipe == "tf":
            if self.resize == "exact":
                return 0, 0, height, width
            return tf_crop_box(height, width, self.size, self.crop_fraction)
        (rh, rw), (top, left, ch, cw) = self.geometry(height, width)
        sy, sx = height / rh, width / rw
        t, lf = max(0, int(round(top * sy))), max(0, int(round(left * sx)))
        return t, lf, max(1, min(height - t, int(round(ch * sy)))), max(1, min(width - lf, int(round(cw * sx))))

    def resize_image(self, image: np.ndarray) -> np.ndarray:
        """The uint8 HxWx3 image the model sees, at ``size``."""
        h, w = image.shape[:2]
        if self.recipe == "tf":
            return crop_then_resize(image, self.crop_box(h, w), self.size, self.interpolation)
        resized, (top, left, ch, cw) = self.geometry(h, w)
        out = resize(image, resized, self.interpolation)
        return _crop_or_pad(out, top, left, ch, cw)

    def normalize(self, batch: np.ndarray) -> np.ndarray:
        """uint8 (N, h, w, 3) RGB -> float32 (N, 3, h, w) normalised model input."""
        x = batch.astype(np.float32)
        if self.scale_by_max:
            peak = x.reshape(len(x), -1).max(axis=1).reshape(-1, 1, 1, 1)
            x = x / np.maximum(peak, 1.0)
        else:
            x = x / np.float32(255.0 / self.value_range)
        if self.color_order == "BGR":
            x = x[..., ::-1]
        mean = np.asarray(self.mean, np.float32)
        std = np.asarray(self.std, np.float32)
        x = (x - mean) / std
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))

    def tensor(self, images: Any) -> Any:
        """The same transform on a uint8 (N, 3, H, W) torch tensor, on its device -> float32 (N, 3, h, w).

        "torchvision": Pillow's own fixed-point resampling as matrices (:func:`shiftbench.resize.resize_tensor`),
        the same bytes as :meth:`__call__`; "tf": OpenCV's weights, within a fraction of a grey level."""
        import torch

        h, w = int(images.shape[-2]), int(images.shape[-1])
        if self.recipe == "tf":
            x = crop_then_resize_tensor(images, self.crop_box(h, w), self.size, self.interpolation)
        else:
            resized, (top, left, ch, cw) = self.geometry(h, w)
            x = _crop_or_pad(resize_tensor(images, resized, self.interpolation), top, left, ch, cw,
                             channels_first=True)
        if self.scale_by_max:
            x = x / x.flatten(1).amax(dim=1).clamp_min(1.0).view(-1, 1, 1, 1)
        else:
            x = x / (255.0 / self.value_range)
        if self.color_order == "BGR":
            x = x.flip(1)
        mean = torch.tensor(self.mean, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
        return (x - mean) / std

    def __call__(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Images of any sizes -> float32 (N, 3, h, w)."""
        images = as_image_list(images)
        return self.normalize(np.stack([self.resize_image(im) for im in images]))


def _crop_or_pad(x: Any, top: int, left: int, ch: int, cw: int, channels_first: bool = False) -> Any:
    """The window (top, left, ch, cw) of an image (HxWxC array, or (..., H, W) tensor when ``channels_first``),
    zeros where it reaches outside (torchvision's ``CenterCrop`` pads a crop larger than the image)."""
    h, w = (x.shape[-2], x.shape[-1]) if channels_first else x.shape[:2]
    if top >= 0 and left >= 0 and top + ch <= h and left + cw <= w:
        if channels_first:
            return x[..., top:top + ch, left:left + cw]
        return np.ascontiguousarray(x[top:top + ch, left:left + cw])
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + ch, h), min(left + cw, w)
    if channels_first:
        out = x.new_zeros((*x.shape[:-2], ch, cw))
        out[..., y0 - top:y1 - top, x0 - left:x1 - left] = x[..., y0:y1, x0:x1]
        return out
    out = np.zeros((ch, cw, *x.shape[2:]), x.dtype)
    out[y0 - top:y1 - top, x0 - left:x1 - left] = x[y0:y1, x0:x1]
    return out


@dataclass
class Detections:
    """One image's detections. Boxes are ``x0, y0, x1, y1`` in the input image's pixels."""

    boxes: np.ndarray  # float32 (K, 4)
    scores: np.ndarray  # float32 (K,)
    labels: np.ndarray  # int64 (K,), indices into the model's label space
    masks: np.ndarray | None = None  # bool (K, H, W) when the model predicts instance masks

    def __post_init__(self) -> None:
        self.boxes = np.asarray(self.boxes, np.float32).reshape(-1, 4)
        self.scores = np.asarray(self.scores, np.float32).reshape(-1)
        self.labels = np.asarray(self.labels, np.int64).reshape(-1)
        k = len(self.boxes)
        if len(self.scores) != k or len(self.labels) != k:
            raise ValueError(f"detections: {k} boxes, {len(self.scores)} scores, {len(self.labels)} labels")
        if self.masks is not None:
            self.masks = np.asarray(self.masks).astype(bool)
            if self.masks.ndim != 3 or len(self.masks) != k:
                raise ValueError(f"detections: masks must be (K, H, W) with K={k}, got {self.masks.shape}")

    def __len__(self) -> int:
        return len(self.boxes)


# -- helpers ----------------------------------------------------------------------------------------
def as_image_list(images: Any) -> list[np.ndarray]:
    """A batch of images (list of arrays, or one (N, H, W, 3) array) as a list of HxWx3 uint8 RGB."""
    if isinstance(images, np.ndarray) and images.ndim == 4:
        images = list(images)
    if isinstance(images, np.ndarray) and images.ndim in (2, 3):
        raise ShiftbenchError("predict methods take a batch (a list of images), got a single image array")
    out = []
    for image in images:
        if isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3:
            out.append(image)
        else:
            out.append(to_rgb_uint8(image))
    return out


def parse_dtype(dtype: Any) -> str:
    """Normalise a dtype given as a string or torch dtype to ``"float32"`` / ``"float16"`` / ``"bfloat16"``."""
    text = str(dtype).replace("torch.", "")
    aliases = {"float": "float32", "fp32": "float32", "half": "float16", "fp16": "float16", "bf16": "bfloat16"}
    text = aliases.get(text, text)
    if text not in ("float32", "float16", "bfloat16"):
        raise ShiftbenchError(f"dtype must be float32, float16 or bfloat16, got {dtype!r}")
    return text


def check_outputs(
    outputs: Any, model_name: str, *, num_classes: int | None = None, batch_size: int | None = None
) -> None:
    """Raise ShiftbenchError if model outputs hold NaN/inf or have the wrong shape.

    ``outputs`` is an array (logits, scores), or a list of arrays / :class:`Detections`.
    """
    items = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    if batch_size is not None and isinstance(outputs, (list, tuple)) and len(outputs) != batch_size:
        raise ShiftbenchError(f"model {model_name!r} returned {len(outputs)} outputs for {batch_size} images")
    for item in items:
        arrays = [item.boxes, item.scores] if isinstance(item, Detections) else [item]
        for arr in arrays:
            if isinstance(arr, str):
                continue
            arr = np.asarray(arr)
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                bad = int((~np.isfinite(arr)).sum())
                raise ShiftbenchError(f"model {model_name!r} produced {bad} NaN/inf values in its outputs")
    if isinstance(outputs, np.ndarray) and outputs.ndim == 2:
        if num_classes is not None and outputs.shape[1] != num_classes:
            raise ShiftbenchError(
                f"model {model_name!r} returned {outputs.shape[1]} scores per image, its label space has {num_classes}"
            )
        if batch_size is not None and outputs.shape[0] != batch_size:
            raise ShiftbenchError(f"model {model_name!r} returned {outputs.shape[0]} rows for {batch_size} images")


def check_label_space(model: Any, dataset_space: Any, dataset_name: str = "dataset") -> None:
    """Raise ShiftbenchError unless every class of the dataset maps exactly onto a class the model predicts.

    ``dataset_space`` is a :class:`LabelSpace`, a built-in space name (``"imagenet1k"``, ``"voc21"``), or a
    sequence of class names. Exact means: the same space, shared identifiers (wnids, COCO category ids)
    or the same unique names (see :func:`shiftbench.labelspace.map_spaces`); never a class count.
    Class-agnostic segmenters and captioners accept any dataset. The runner's fuller check, which also
    configures zero-shot classifiers and applies ``label_map``, is ``shiftbench.tasks.labels.plan_labels``.
    """
    space = getattr(model, "label_space", None)
    name = getattr(model, "name", type(model).__name__)
    if space is None or getattr(model, "class_agnostic", False):
        return
    if isinstance(dataset_space, str):
        known = builtin_spaces()
        if dataset_space not in known:
            raise ShiftbenchError(f"unknown label space {dataset_space!r}; built-in: {', '.join(known)}")
        dataset_space = known[dataset_space]
    elif not isinstance(dataset_space, LabelSpace):
        dataset_space = LabelSpace.custom([str(c) for c in dataset_space])
    if map_spaces(dataset_space, space) is None:
        raise ShiftbenchError(
            f"model {name!r} predicts label space {space.describe()} but {dataset_name} uses "
            f"{dataset_space.describe()}; map the labels (label_map: in the spec) or pick a model for this label space"
        )


# -- protocols --------------------------------------------------------------------------------------
class Model:
    """Common attributes of every adapter."""

    task: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    name: str = ""
    label_space: LabelSpace | None = None
    preprocess: Preprocess | None = None
    device: str = "cpu"
    dtype: str = "float32"

    def info(self) -> dict[str, Any]:
        """JSON-serialisable description for the run record."""
        return {
            "name": self.name, "task": self.task, "kind": self.kind,
            "label_space": self.label_space.to_dict() if self.label_space else None,
            "preprocess": self.preprocess.to_dict() if self.preprocess else None,
            "device": self.device, "dtype": self.dtype,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, task={self.task!r})"


class Classifier(Model):
    """Logits over ``label_space`` for a batch of images."""

    task = "classification"
    kind = "classifier"

    def predict_logits(self, images: Sequence[np.ndarray]) -> np.ndarray:  # pragma: no cover - protocol
        raise NotImplementedError

    def predict_proba(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """Softmax of the logits (float64 for stable sums)."""
        logits = self.predict_logits(images).astype(np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)


class ZeroShotClassifier(Classifier):
    """A classifier whose classes are text prompts: logits = scale * image_features @ class_features.T.

    ``set_classes(names, templates)`` builds the class features as the normalised mean of the
    normalised text features of every template filled with the class name (CLIP's prompt ensemble).
    """

    kind = "zero_shot_classifier"
    templates: tuple[str, ...] = ("a photo of a {}.",)
    logit_scale: float = 100.0
    _class_features: np.ndarray | None = None

    def encode_images(self, images: Sequence[np.ndarray]) -> np.ndarray:  # pragma: no cover - protocol
        raise NotImplementedError

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:  # pragma: no cover - protocol
        raise NotImplementedError

    def set_classes(
        self, class_names: Sequence[str] | LabelSpace, templates: Sequence[str] | None = None,
        space_name: str | None = None,
    ) -> None:
        """Point the classifier at new classes (a LabelSpace or names), with prompt ``templates``."""
        if isinstance(class_names, LabelSpace):
            space = class_names
        else:
            names = [str(c) for c in class_names]
            space = LabelSpace(space_name or "custom", tuple(names))
        if space.num_classes == 0:
            raise ShiftbenchError(f"model {self.name!r}: set_classes needs at least one class name")
        templates = tuple(templates) if templates is not None else tuple(self.templates)
        for t in templates:
            if "{}" not in t:
                raise ShiftbenchError(f"template {t!r} has no '{{}}' placeholder for the class name")
        self.templates = templates
        self.label_space = space
        self._class_features = None  # built on first use: 80 templates x 1000 classes is costly

    def class_features(self) -> np.ndarray:
        """(C, D) normalised class embeddings (prompt-ensembled), built once per set_classes."""
        if self._class_features is None:
            assert self.label_space is not None
            prompts = [t.format(c) for c in self.label_space.class_names for t in self.templates]
            # encode in chunks (one call per class would be 1,000 tiny batches for ImageNet)
            chunk = max(len(self.templates), 256)
            text = np.concatenate([self.encode_texts(prompts[i:i + chunk]) for i in range(0, len(prompts), chunk)])
            mean = text.astype(np.float64).reshape(self.label_space.num_classes, len(self.templates), -1).mean(axis=1)
            mean /= np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)
            self._class_features = mean.astype(np.float32)
        return self._class_features

    def predict_logits(self, images: Sequence[np.ndarray]) -> np.ndarray:
        image_features = self.encode_images(images)
        return (np.float32(self.logit_scale) * image_features @ self.class_features().T).astype(np.float32)


class Segmenter(Model):
    """Per-pixel class scores, or a foreground probability for class-agnostic models, at input size."""

    task = "segmentation"
    kind = "segmenter"
    class_agnostic: bool = False

    def predict(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:  # pragma: no cover - protocol
        raise NotImplementedError

    def predict_masks(self, images: Sequence[np.ndarray], threshold: float = 0.5) -> list[np.ndarray]:
        """int64 (H, W) label maps: argmax of the scores, or (probability >= threshold) if agnostic."""
        out = []
        for scores in self.predict(images):
            if self.class_agnostic:
                out.append((scores >= threshold).astype(np.int64))
            else:
                out.append(scores.argmax(axis=0).astype(np.int64))
        return out


class Detector(Model):
    """Boxes, scores, labels (and optionally instance masks) per image."""

    task = "detection"
    kind = "detector"
    score_threshold: float = 0.0

    def predict(self, images: Sequence[np.ndarray]) -> list[Detections]:  # pragma: no cover - protocol
        raise NotImplementedError


class Captioner(Model):
    """One caption per image."""

    task = "captioning"
    kind = "captioner"
    label_space = None

    def predict(self, images: Sequence[np.ndarray]) -> list[str]:  # pragma: no cover - protocol
        raise NotImplementedError


class Answerer(Model):
    """An image-text-to-text model asked a question about each image: ``answer(images, prompts)`` -> one
    answer (str) per (image, prompt) pair, greedy unless ``generation`` says otherwise."""

    task = "question_answering"
    kind = "answerer"
    label_space = None
    generation: dict = {}

    def answer(self, images: Sequence[np.ndarray], prompts: Sequence[str]) -> list[str]:  # pragma: no cover - protocol
        raise NotImplementedError


# -- torch classifiers ------------------------------------------------------------------------------
class TorchClassifier(Classifier):
    """A classifier around a ``torch.nn.Module`` mapping normalised (N, 3, h, w) input to logits.

    Subclasses set ``module``, ``preprocess`` and ``label_space``; this class supplies batching, the
    numpy path and the differentiable tensor path. torch is imported only when an instance is made.
    """

    module: Any = None

    def _setup(self, module: Any, device: str = "cpu", dtype: Any = "float32") -> None:
        import torch

        self.device = str(torch.device(device))
        self.dtype = parse_dtype(dtype)
        self._torch_dtype = getattr(torch, self.dtype)
        self.module = module.to(device=self.device, dtype=self._torch_dtype).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)  # weights are never trained here; input gradients still flow

    def preprocess_tensor(self, images: Sequence[np.ndarray]) -> Any:
        """Images -> normalised model input tensor (N, 3, h, w) on the model's device and dtype."""
        import torch

        assert self.preprocess is not None
        x = torch.from_numpy(self.preprocess(images))
        return x.to(device=self.device, dtype=self._torch_dtype)

    def forward(self, x: Any) -> Any:
        """Logits tensor for a normalised input tensor; differentiable with respect to ``x``."""
        return self.module(x)

    def forward_images(self, x01: Any) -> Any:
        """Differentiable preprocessing + forward: float RGB (N, 3, H, W) in [0, 1] of any size -> logits.

        "torchvision" recipe: the geometry of :meth:`Preprocess.resize_image`, Pillow's filter weights as matrices in
        its pass order, clipped after each pass as Pillow clips, without its rounding to whole grey levels (within
        1.5 grey levels of the model's input); "tf": the same crop box, bilinear resize with antialiasing."""
        import torch
        import torch.nn.functional as F

        assert self.preprocess is not None
        p = self.preprocess
        h, w = int(x01.shape[-2]), int(x01.shape[-1])
        if p.recipe == "tf":
            top, left, ch, cw = p.crop_box(h, w)
            x = x01[..., top:top + ch, left:left + cw]
            if (ch, cw) != p.size:
                x = F.interpolate(x, size=p.size, mode="bilinear", align_corners=False, antialias=True)
        else:
            (rh, rw), (top, left, ch, cw) = p.geometry(h, w)
            unit = float(1 << 22)

            def horizontal(x: Any) -> Any:
                if rw == w:
                    return x
                cols = torch.from_numpy(pil_weights(w, rw, p.interpolation) / unit).to(x.device, x.dtype)
                return torch.matmul(x, cols.T).clamp(0.0, 1.0)  # clipped after each pass, as Pillow clips

            def vertical(x: Any) -> Any:
                if rh == h:
                    return x
                rows = torch.from_numpy(pil_weights(h, rh, p.interpolation) / unit).to(x.device, x.dtype)
                return torch.matmul(rows, x).clamp(0.0, 1.0)

            x = horizontal(vertical(x01)) if vertical_first(h, w, rh, rw) else vertical(horizontal(x01))
            x = _crop_or_pad(x, top, left, ch, cw, channels_first=True)
        if p.scale_by_max:
            x = x / x.flatten(1).amax(dim=1).clamp_min(1e-6).view(-1, 1, 1, 1)
        else:
            x = x * p.value_range
        if p.color_order == "BGR":
            x = x.flip(1)
        mean = x.new_tensor(p.mean).view(1, 3, 1, 1)
        std = x.new_tensor(p.std).view(1, 3, 1, 1)
        return self.forward(((x - mean) / std).to(self._torch_dtype))

    @property
    def tensor_device(self) -> str:
        """Where :meth:`predict_logits_tensor` wants its pixels: the module's device."""
        return self.device

    def predict_logits_tensor(self, images: Any) -> np.ndarray:
        """Logits of a uint8 (N, 3, H, W) tensor of same-sized images, preprocessed on the model's device
        (:meth:`Preprocess.tensor`): the runner's path when corruptions run on that device too."""
        import torch

        assert self.preprocess is not None
        with torch.inference_mode():
            x = self.preprocess.tensor(images.to(self.device)).to(self._torch_dtype)
            logits = self.forward(x)
        out = logits.float().cpu().numpy()
        check_outputs(out, self.name, num_classes=self.label_space.num_classes if self.label_space else None,
                      batch_size=int(images.shape[0]))
        return out

    def predict_logits(self, images: Sequence[np.ndarray]) -> np.ndarray:
        import torch

        images = as_image_list(images)
        if not images:
            n = self.label_space.num_classes if self.label_space else 0
            return np.zeros((0, n), np.float32)
        with torch.inference_mode():
            logits = self.forward(self.preprocess_tensor(images))
        out = logits.float().cpu().numpy()
        check_outputs(out, self.name, num_classes=self.label_space.num_classes if self.label_space else None,
                      batch_size=len(images))
        return out
