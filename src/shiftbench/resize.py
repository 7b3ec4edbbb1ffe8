"""The one resize and centre crop of shiftbench: the geometry of torchvision's ``Resize`` / ``CenterCrop``, the pixels
of Pillow's ``Image.resize``, and the same resampling as weight matrices for torch tensors.

Every path that changes an image's size goes through this module: the spec's ``preprocess:`` step
(:mod:`shiftbench.datasets.preprocess`), each model's declared input transform
(:class:`shiftbench.models.base.Preprocess`) and its torch path on a device. The libraries whose models
shiftbench runs (timm, open_clip, torchvision) resize a PIL image with these rules, so a model fed through
here sees, to the float, the tensor its own library's eval transform would give it:

- **size** (:func:`resized_size`): ``Resize(int)`` makes the shorter side ``int`` and the longer
  ``int(int * long / short)`` (truncated);
- **pixels** (:func:`resize`): Pillow's ``Image.resize`` with the named filter; it antialiases when it reduces
  (the filter's support grows with the scale), as torchvision does on PIL images;
- **crop** (:func:`crop_corner`): ``top = int(round((h - crop_h) / 2.0))``, ``left`` likewise (halves to even);
- **limit** (:data:`LIMIT`): no size a user gives, and no resize, makes an image over :data:`MAX_SIDE` px per side
  or :data:`MAX_PIXELS` px in all (:func:`check_size`, :func:`check_shorter` where a size is
  given, :func:`check_pixels` before Pillow is called).

:func:`pil_weights` gives Pillow's coefficients along one axis as integers in its fixed point (22 fraction
bits), and :func:`resize_tensor` applies them to a uint8 torch tensor with Pillow's rounding and clipping after
each pass, horizontal first: the same bytes as :func:`resize`, on any device (tested over generated sizes).

One older recipe remains, named: ``"tf"``, the bundled EfficientNet-Lite models' (their TensorFlow
evaluation: a centre crop of ``size / (size + 32)`` of the shorter side, then a bicubic resize without
antialiasing, OpenCV's, with area averaging past a 2x reduction) and U2-Net's squash. It keeps the bytes those
bundled models have always seen, so every number measured with them stands (:func:`crop_then_resize`).

>>> resized_size(375, 500, 256), crop_corner(256, 341, 224, 224)
((256, 341), (16, 58))
>>> import numpy as np
>>> resize(np.zeros((10, 20, 3), np.uint8), (5, 10), "bicubic").shape
(5, 10, 3)
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from .errors import ShiftbenchError

__all__ = ["INTERPOLATIONS", "PRECISION_BITS", "MAX_SIDE", "MAX_PIXELS", "MAX_SHORTER", "SizeError", "LIMIT",
           "check_pixels", "check_size", "check_shorter", "resized_size", "crop_corner", "resize", "resample",
           "pil_weights", "resize_tensor", "vertical_first", "nearest_index", "resize_nearest", "crop_then_resize",
           "crop_then_resize_tensor", "tf_crop_box", "opencv_weights", "check_interpolation"]

# name -> Pillow filter (Image.Resampling.<NAME>); "area" is Pillow's BOX filter (each output pixel the mean of
# the input pixels it covers)
INTERPOLATIONS = {"bilinear": "BILINEAR", "bicubic": "BICUBIC", "nearest": "NEAREST", "area": "BOX",
                  "lanczos": "LANCZOS", "hamming": "HAMMING"}
PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed point for 8-bit images (Resample.c)

# The largest image a size given by a user may make: a preprocess resize or crop, a model's input size or resize
# size, a shift's working size. Checked where the size is given (a spec, a command-line option, a model's or a
# shift's parameters), so that a slip such as ``resize: 1000000`` is one line rather than Pillow's MemoryError
# deep inside the run; :func:`resize` checks its output size too (a resize of the shorter side makes a long
# thin image longer still). 8192 x 8192 x 3 bytes is 192 MiB, and a shift's float64 copy 1.5 GiB.
MAX_SIDE = 16384  # pixels per side
MAX_PIXELS = 8192 * 8192  # pixels in all (67,108,864)
MAX_SHORTER = math.isqrt(MAX_PIXELS)  # the largest shorter side: it makes at least a square of that side
LIMIT = f"{MAX_SIDE} px per side and {MAX_PIXELS} px in all ({MAX_SHORTER}x{MAX_SHORTER})"


class SizeError(ShiftbenchError, ValueError):
    """A size in pixels that is not a positive integer, or that makes an image over the limit (:data:`LIMIT`)."""


def check_pixels(height: int, width: int, where: str) -> tuple[int, int]:
    """(height, width) when an image of that size is within the limit, else one :class:`SizeError` line.

    >>> check_pixels(8192, 8192, "crop")
    (8192, 8192)
    >>> check_pixels(1, 16385, "crop")
    Traceback (most recent call last):
    ...
    shiftbench.resize.SizeError: crop: 1x16385 px is over the limit of 16384 px per side and 67108864 px in all (8192x8192)
    """
    if height > MAX_SIDE or width > MAX_SIDE or height * width > MAX_PIXELS:
        raise SizeError(f"{where}: {height}x{width} px is over the limit of {LIMIT}")
    return int(height), int(width)


def check_size(value: Any, where: str) -> tuple[int, int]:
    """A (height, width) in pixels (one integer for a square), each side and the whole within the limit."""
    pair = [value, value] if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else value
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or any(
            isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in pair):
        raise SizeError(f"{where}: expected a positive integer or [height, width] (pixels), got {value!r}")
    return check_pixels(int(pair[0]), int(pair[1]), where)


def check_shorter(value: Any, where: str) -> int:
    """The shorter side of a resize (``Resize(int)``): it makes at least a square of that side, so at most
    :data:`MAX_SHORTER`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise SizeError(f"{where}: expected a positive integer (pixels), got {value!r}")
    if value > MAX_SHORTER:
        raise SizeError(f"{where}: {value} resizes an image to at least {value}x{value} px, over the limit of "
                        f"{LIMIT}; give at most {MAX_SHORTER}")
    return value


def check_interpolation(name: str, where: str = "interpolation") -> str:
    """``name`` if it is one of :data:`INTERPOLATIONS`, else a one-line error."""
    if name not in INTERPOLATIONS:
        raise ShiftbenchError(f"{where} {name!r}: expected one of {', '.join(INTERPOLATIONS)}")
    return name


def resized_size(height: int, width: int, shorter: int) -> tuple[int, int]:
    """(height, width) with the shorter side ``shorter`` and the longer ``int(shorter * long / short)``:
    torchvision's rule for ``Resize(int)``.

    >>> resized_size(375, 500, 256), resized_size(500, 375, 256), resized_size(512, 512, 256)
    ((256, 341), (341, 256), (256, 256))
    """
    if width <= height:
        return int(shorter * height / width), int(shorter)
    return int(shorter), int(shorter * width / height)


def crop_corner(height: int, width: int, crop_h: int, crop_w: int) -> tuple[int, int]:
    """(top, left) of the centre crop, as torchvision's ``center_crop``: ``int(round((h - crop_h) / 2.0))``.

    >>> crop_corner(256, 341, 224, 224), crop_corner(225, 225, 224, 224), crop_corner(227, 227, 224, 224)
    ((16, 58), (0, 0), (2, 2))
    """
    return int(round((height - crop_h) / 2.0)), int(round((width - crop_w) / 2.0))


def resize(image: np.ndarray, size: tuple[int, int], interpolation: str = "bilinear") -> np.ndarray:
    """An HxWx3 (or HxW) uint8 image resized to ``size`` (height, width) by Pillow's ``Image.resize`` with the
    named filter, both checked; returned as it is at its own size. :func:`resample`: the same, unchecked (per sample)."""
    h, w = int(size[0]), int(size[1])
    if image.shape[:2] != (h, w):
        check_interpolation(interpolation)
        check_pixels(h, w, f"resizing a {image.shape[0]}x{image.shape[1]} image")
    return resample(image, (h, w), interpolation)


def resample(image: np.ndarray, size: tuple[int, int], interpolation: str) -> np.ndarray:
    from PIL import Image

    if image.shape[:2] == tuple(size):
        return image
    pillow_filter = getattr(Image.Resampling, INTERPOLATIONS[interpolation])
    return np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize((size[1], size[0]), pillow_filter))


# -- labels: the nearest mapping, so masks, ids and class maps follow an image ----------------------------------
def nearest_index(height: int, width: int, size: tuple[int, int]) -> np.ndarray:
    """For each output pixel, the flat index of the input pixel Pillow's nearest filter reads: an int32 image of
    indices resized with ``Image.NEAREST`` (the same code path as the image's, so the same mapping)."""
    from PIL import Image

    if height * width >= 2 ** 31:
        raise ShiftbenchError(f"image of {height}x{width} pixels is too large to resize its masks")
    index = np.arange(height * width, dtype=np.int32).reshape(height, width)
    return np.asarray(Image.fromarray(index, mode="I").resize((int(size[1]), int(size[0])), Image.Resampling.NEAREST))


def resize_nearest(array: np.ndarray, size: tuple[int, int], index: np.ndarray | None = None) -> np.ndarray:
    """An HxW (or HxWxC) array of any dtype resized to ``size`` by Pillow's nearest-neighbour mapping: every output
    value is an input value (labels, ids and bools stay what they are). ``index``: the mapping, when known."""
    h, w = array.shape[:2]
    if (h, w) == tuple(size):
        return array
    if index is None:
        index = nearest_index(h, w, size)
    flat = array.reshape(h * w, *array.shape[2:])
    return np.ascontiguousarray(flat[index])


# -- Pillow's coefficients ----------------------------------------------------------------------------
def _bilinear(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


def _bicubic(x: np.ndarray) -> np.ndarray:
    a = -0.5  # Pillow's (and torchvision's antialiased) cubic coefficient
    x = np.abs(x)
    return np.where(x < 1.0, ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
                    np.where(x < 2.0, (((x - 5.0) * x + 8.0) * x - 4.0) * a, 0.0))


def _box(x: np.ndarray) -> np.ndarray:
    return np.where((x > -0.5) & (x <= 0.5), 1.0, 0.0)


def _sinc(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(x == 0.0, 1.0, np.sin(np.pi * x) / (np.pi * x))


def _lanczos(x: np.ndarray) -> np.ndarray:
    return np.where((x >= -3.0) & (x < 3.0), _sinc(x) * _sinc(x / 3.0), 0.0)


def _hamming(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.sin(np.pi * x) / (np.pi * x) * (0.54 + 0.46 * np.cos(np.pi * x))
    return np.where(x == 0.0, 1.0, np.where(x >= 1.0, 0.0, value))


# filter, support (Resample.c's filter table)
_FILTERS = {"bilinear": (_bilinear, 1.0), "bicubic": (_bicubic, 2.0), "area": (_box, 0.5),
            "lanczos": (_lanczos, 3.0), "hamming": (_hamming, 1.0)}


@lru_cache(maxsize=256)
def pil_weights(n_in: int, n_out: int, interpolation: str) -> np.ndarray:
    """(n_out, n_in) int64 weights of Pillow's resize along one axis, in its fixed point: output pixel
    ``i`` is ``clip((W[i] @ in + 2**21) >> 22, 0, 255)``. "nearest" is a 0/1 matrix (output pixel ``i`` reads the
    input pixel ``int(p_i)``, ``p_0 = scale / 2`` and ``p_i = p_(i-1) + scale`` summed as Pillow sums them). Computed as Pillow's ``precompute_coeffs`` and
    ``normalize_coeffs_8bpc`` compute them, in float64."""
    check_interpolation(interpolation)
    scale = n_in / n_out
    if interpolation == "nearest":  # Geometry.c's ImagingScaleAffine: positions accumulated in doubles
        weights = np.zeros((n_out, n_in), np.int64)
        position = scale * 0.5
        for i in range(n_out):
            weights[i, min(int(position), n_in - 1)] = 1 << PRECISION_BITS
            position += scale
        return weights
    kernel, support = _FILTERS[interpolation]
    filterscale = max(scale, 1.0)
    support = support * filterscale
    weights = np.zeros((n_out, n_in), np.float64)
    for i in range(n_out):
        center = (i + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)  # C's (int) truncates toward zero
        hi = min(int(center + support + 0.5), n_in)
        taps = np.arange(lo, hi)
        k = kernel((taps - center + 0.5) / filterscale)
        total = k.sum()
        weights[i, lo:hi] = k / total if total != 0 else k
    # normalize_coeffs_8bpc: round half away from zero into the fixed point
    scaled = weights * (1 << PRECISION_BITS)
    return np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5)).astype(np.int64)


@lru_cache(maxsize=1)
def _pillow_major() -> int:
    import PIL

    return int(PIL.__version__.split(".")[0])


def vertical_first(height: int, width: int, th: int, tw: int) -> bool:
    """Whether Pillow runs the vertical pass first for this resize: since Pillow 13, when the height shrinks by
    more than twice as many pixels as the width does (``Resample.c``); before, never. The pass order decides the
    intermediate rounding, so the tensor path follows the installed Pillow."""
    return _pillow_major() >= 13 and height - th > 0 and height - th > (width - tw) * 2


def resize_tensor(images: Any, size: tuple[int, int], interpolation: str = "bilinear") -> Any:
    """:func:`resize` on a uint8 (N, C, H, W) torch tensor on any device -> float32 (N, C, h, w) holding the same
    whole grey levels: Pillow's fixed-point weights, its pass order (:func:`vertical_first`), each pass rounded and
    clipped as Pillow's is (sums in float64, exact)."""
    import torch

    h, w = int(images.shape[-2]), int(images.shape[-1])
    th, tw = int(size[0]), int(size[1])
    check_pixels(th, tw, f"resizing a {h}x{w} image")
    x = images.to(torch.float64)
    half, unit = float(1 << (PRECISION_BITS - 1)), float(1 << PRECISION_BITS)

    def horizontal(x: Any) -> Any:
        if tw == w:
            return x
        cols = torch.from_numpy(pil_weights(w, tw, interpolation).astype(np.float64)).to(x.device)
        return torch.floor((torch.matmul(x, cols.T) + half) / unit).clamp_(0, 255)

    def vertical(x: Any) -> Any:
        if th == h:
            return x
        rows = torch.from_numpy(pil_weights(h, th, interpolation).astype(np.float64)).to(x.device)
        return torch.floor((torch.matmul(rows, x) + half) / unit).clamp_(0, 255)

    x = horizontal(vertical(x)) if vertical_first(h, w, th, tw) else vertical(horizontal(x))
    return x.to(torch.float32)


# -- the bundled models' TensorFlow recipe -------------------------------------------------------------------
def tf_crop_box(height: int, width: int, size: tuple[int, int], crop_fraction: float) -> tuple[int, int, int, int]:
    """(top, left, crop_h, crop_w) of the "tf" recipe: the window of ``size`` inside the shorter side scaled to
    ``size / crop_fraction``, in the original image's pixels (``crop_fraction = 1``: the long side only)."""
    th, tw = size
    scale = min(height / (th / crop_fraction), width / (tw / crop_fraction))
    ch = min(height, max(1, int(round(th * scale))))
    cw = min(width, max(1, int(round(tw * scale))))
    return (height - ch) // 2, (width - cw) // 2, ch, cw


_CV_FLAGS = {"nearest": "INTER_NEAREST", "bilinear": "INTER_LINEAR", "bicubic": "INTER_CUBIC", "area": "INTER_AREA",
             "lanczos": "INTER_LANCZOS4"}


def _tf_mode(interpolation: str, crop: tuple[int, int], size: tuple[int, int]) -> str:
    if interpolation in ("bilinear", "bicubic") and (crop[0] > 2 * size[0] or crop[1] > 2 * size[1]):
        return "area"  # strong reduction: bilinear/bicubic without an anti-alias filter alias
    return interpolation


def crop_then_resize(image: np.ndarray, box: tuple[int, int, int, int], size: tuple[int, int],
                     interpolation: str) -> np.ndarray:
    """The "tf" recipe's pixels: the region ``box`` (top, left, h, w) of ``image`` resized to ``size`` by OpenCV."""
    import cv2

    top, left, ch, cw = box
    region = image[top:top + ch, left:left + cw]
    th, tw = size
    if region.shape[:2] == (th, tw):
        return np.ascontiguousarray(region)
    mode = _tf_mode(interpolation, (ch, cw), size)
    if mode not in _CV_FLAGS:
        raise ShiftbenchError(f"interpolation {interpolation!r} is not available in the 'tf' recipe")
    return cv2.resize(region, (tw, th), interpolation=getattr(cv2, _CV_FLAGS[mode]))


def crop_then_resize_tensor(images: Any, box: tuple[int, int, int, int], size: tuple[int, int],
                            interpolation: str) -> Any:
    """:func:`crop_then_resize` on a uint8 (N, C, H, W) tensor -> float32 whole grey levels (OpenCV's weights as
    matrices; within a fraction of a grey level of OpenCV's fixed-point output)."""
    import torch

    top, left, ch, cw = box
    x = images[..., top:top + ch, left:left + cw].float()
    th, tw = size
    if (ch, cw) == (th, tw):
        return x
    mode = _tf_mode(interpolation, (ch, cw), size)
    rows = torch.from_numpy(opencv_weights(ch, th, mode)).to(x.device)
    cols = torch.from_numpy(opencv_weights(cw, tw, mode)).to(x.device)
    return torch.matmul(torch.matmul(rows, x), cols.T).round_().clamp_(0, 255)


_CUBIC_A = -0.75  # OpenCV's cubic convolution coefficient


def _cv_cubic(t: np.ndarray) -> np.ndarray:
    t = np.abs(t)
    a = _CUBIC_A
    return np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                    np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))


@lru_cache(maxsize=128)
def opencv_weights(n_in: int, n_out: int, mode: str) -> np.ndarray:
    """(n_out, n_in) float32 weights of OpenCV's ``resize`` along one axis: ``out = W @ in``.

    Pixel centres aligned (source = (dst + 0.5) * n_in / n_out - 0.5), edges replicated; "area" takes
    the box overlap when shrinking and OpenCV's own sharpened linear weights when enlarging."""
    scale = n_in / n_out
    weights = np.zeros((n_out, n_in), dtype=np.float64)
    dst = np.arange(n_out)
    if mode == "nearest":
        weights[dst, np.minimum(np.floor(dst * scale).astype(np.int64), n_in - 1)] = 1.0
        return weights.astype(np.float32)
    if mode == "area" and scale >= 1:
        for i in dst:
            lo, hi = i * scale, (i + 1) * scale
            for j in range(int(math.floor(lo)), min(int(math.ceil(hi)), n_in)):
                weights[i, j] = (min(hi, j + 1) - max(lo, j)) / scale
        return weights.astype(np.float32)
    src = (dst + 0.5) * scale - 0.5
    if mode == "area":  # enlarging: OpenCV's INTER_AREA weights
        base = np.floor(dst * scale)
        frac = (dst + 1) - (base + 1) / scale
        frac = np.where(frac <= 0, 0.0, frac - np.floor(frac))
        taps, coeffs = [base, base + 1], [1.0 - frac, frac]
    else:
        base = np.floor(src)
        t = src - base
        if mode == "bilinear":
            taps, coeffs = [base, base + 1], [1.0 - t, t]
        elif mode == "bicubic":
            taps = [base + k for k in range(-1, 3)]
            coeffs = [_cv_cubic(t - k) for k in range(-1, 3)]
        elif mode == "lanczos":
            taps = [base + k for k in range(-3, 5)]
            coeffs = [np.sinc(t - k) * np.sinc((t - k) / 4.0) for k in range(-3, 5)]
            total = sum(coeffs)
            coeffs = [c / total for c in coeffs]
        else:
            raise ValueError(f"unknown interpolation {mode!r}")
    for tap, coeff in zip(taps, coeffs):
        np.add.at(weights, (dst, np.clip(tap.astype(np.int64), 0, n_in - 1)), coeff)
    return weights.astype(np.float32)
