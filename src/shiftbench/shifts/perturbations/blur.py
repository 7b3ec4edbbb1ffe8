"""ImageNet-P blur sequences: p_motion_blur, p_zoom_blur (the benchmark's) and p_gaussian_blur (validation extra).

Deterministic: the frames follow the reference (hendrycks/robustness, ImageNet-P/create_p/make_imagenet_p.py)
and draw nothing; the difficulty only sets the step between compared frames.

- motion blur: frame i is ImageMagick's motion blur (radius 10, sigma 3) at angle (i - 30) * 4 degrees
  (-120..0), made with the ImageNet-C motion blur (``corruptions._common.motion_blur``: the same streak,
  edges replicated, taps dropped past a small image's side as ImageMagick does).
- zoom blur: frame i is the running mean of the image zoomed about its centre by 1 + 0.004 j, j = 0..i
  (bilinear, as ``torchvision.transforms.functional.affine`` with Pillow), frame 0 the image.
- gaussian blur: frame i is ``skimage.filters.gaussian`` with sigma 0.25 + 0.035 i, truncate 6, edges
  replicated (its "nearest"), on x / 255, then ``uint8(255 * .)``.

Pixel constants (the streak's radius and sigma, the zoom's steps, the Gaussian sigmas) are kept in pixels at
any image size, as the ImageNet-C corruptions do: at the published size (the 224 crop) they are the reference's.

Where the reference is ambiguous, we chose:
- motion blur rounds to the nearest level (half up): ImageMagick quantises its result to the 8-bit PNG the
  reference decodes (the ImageNet-C port in imagecorruptions, and ``motion_blur`` there, truncate instead).
- zoom blur zooms about the exact image centre (today's torchvision: centre w / 2 in Pillow's coordinates);
  the torchvision of 2018 used w / 2 + 0.5, half a pixel off. Each zoomed layer is truncated to a level, as
  Pillow's 8-bit bilinear affine does (measured against it), then frame i is the floor of the exact mean of layers 0..i (integer sums): the reference's
  float32 mean of the layers / 255 can land a hair under a whole level and ``ToPILImage`` truncates it one lower.
  The reference zooms the 256 px image and then crops 224: ``geometric`` (with ``crop=``, zoom then crop).
- gaussian blur: a value within 1e-3 of a whole level is that level before the truncation: a flat region's
  weighted sum lands a hair above or below it depending on the summation order, and truncation would turn
  that float noise into a one-level flip.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, ClassVar, Sequence

import cv2
import numpy as np

from ...registry import SHIFTS
from ..corruptions._common import gaussian_blur_like_skimage, motion_blur
from ._base import PerturbationSequence

__all__ = ["MotionBlurSequence", "ZoomBlurSequence", "GaussianBlurSequence", "MOTION_RADIUS", "MOTION_SIGMA",
           "motion_angle", "zoom_factor", "blur_sigma", "zoom_taps", "round_half_up"]

MOTION_RADIUS, MOTION_SIGMA = 10, 3.0
ZOOM_STEP = 0.004
BLUR_SIGMA0, BLUR_SIGMA_STEP, BLUR_TRUNCATE = 0.25, 0.035, 6.0
_SNAP = 1e-3  # a value this close to a whole level is that level (see the module docstring)


def motion_angle(i: int) -> float:
    return float((i - 30) * 4)


def zoom_factor(j: int) -> float:
    return 1.0 + ZOOM_STEP * j


def blur_sigma(i: int) -> float:
    return BLUR_SIGMA0 + BLUR_SIGMA_STEP * i


def round_half_up(x: np.ndarray) -> np.ndarray:
    """Nearest level, halves up, clipped to 0..255, as uint8."""
    return np.clip(np.floor(x + 0.5), 0, 255).astype(np.uint8)


def snap_truncate(x: np.ndarray) -> np.ndarray:
    """``uint8(clip(x))`` (truncation), a value within ``_SNAP`` of a whole level taken as that level."""
    whole = np.rint(x)
    x = np.where(np.abs(x - whole) < _SNAP, whole, x)
    return np.clip(x, 0, 255).astype(np.uint8)


@lru_cache(maxsize=512)
def zoom_taps(n: int, zoom: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i0, i1, f) along one axis of n pixels zoomed by ``zoom`` about its centre: output pixel k reads
    (1 - f) * in[i0] + f * in[i1]. Pillow's affine maps output pixel centre k + 1/2 to c + (k + 1/2 - c) / zoom,
    c = n / 2, and samples there bilinearly with edges clamped; in index units, u = m + (k - m) / zoom, m = (n - 1) / 2."""
    m = (n - 1) / 2.0
    u = m + (np.arange(n, dtype=np.float64) - m) / zoom
    i0 = np.floor(u).astype(np.int64)
    f = u - i0
    return np.clip(i0, 0, n - 1), np.clip(i0 + 1, 0, n - 1), f


def _zoom(image: np.ndarray, zoom: float) -> np.ndarray:
    """The image zoomed about its centre, bilinear (separable, float64), truncated to levels as Pillow does."""
    h, w = image.shape[:2]
    r0, r1, fy = zoom_taps(h, zoom)
    c0, c1, fx = zoom_taps(w, zoom)
    x = image.astype(np.float64)
    rows = x[r0] * (1.0 - fy)[:, None, None] + x[r1] * fy[:, None, None]
    out = rows[:, c0] * (1.0 - fx)[None, :, None] + rows[:, c1] * fx[None, :, None]
    return out.astype(np.uint8)  # in 0..255: a mix of levels


class _BlurSequence(PerturbationSequence):
    """A deterministic sequence of 31 frames, frame i a function of the image and i alone."""

    def sequence_tensor(self, x: Any, params: Sequence[dict[str, Any]]) -> Any:
        import torch

        n, _, h, w = x.shape
        xf = x.float()
        return torch.stack([self.frame_tensor(xf, i) for i in range(self.frames)], dim=1)

    def frame_tensor(self, xf: Any, i: int) -> Any:
        raise NotImplementedError


@SHIFTS.register("p_motion_blur", description="Motion blur turning through 120 degrees (ImageNet-P)", group="imagenet_p")
class MotionBlurSequence(_BlurSequence):
    """Motion blur sequence (ImageNet-P): a 21-tap streak (radius 10, sigma 3) at angles -120, -116, ..., 0 degrees."""

    def sequence(self, image, params):
        x = image.astype(np.float32)
        out = np.empty((self.frames, *image.shape), dtype=np.uint8)
        for i in range(self.frames):
            out[i] = round_half_up(motion_blur(x, MOTION_RADIUS, MOTION_SIGMA, motion_angle(i)))
        return out

    def frame_tensor(self, xf, i):
        import torch

        from ..corruptions._torch import motion_blur_tensor

        blurred = motion_blur_tensor(xf, MOTION_RADIUS, MOTION_SIGMA, [motion_angle(i)] * xf.shape[0])
        return torch.floor(blurred + 0.5).clamp_(0, 255).to(torch.uint8)


@SHIFTS.register("p_zoom_blur", description="Zoom blur growing frame by frame (ImageNet-P)", group="imagenet_p")
class ZoomBlurSequence(PerturbationSequence):
    """Zoom blur sequence (ImageNet-P): frame i the mean of the image zoomed by 1, 1.004, ..., 1 + 0.004 i."""

    geometric: ClassVar[bool] = True  # the reference zooms the 256 px image, then crops

    def sequence(self, image, params):
        out = np.empty((self.frames, *image.shape), dtype=np.uint8)
        out[0] = image
        total = image.astype(np.int32)
        for i in range(1, self.frames):
            total += _zoom(image, zoom_factor(i))
            out[i] = total // (i + 1)
        return out

    def sequence_tensor(self, x, params):
        import torch

        from ..corruptions._torch import on_device

        n, c, h, w = x.shape
        xf = x.double()
        out = torch.empty((n, self.frames, c, h, w), dtype=torch.uint8, device=x.device)
        out[:, 0] = x
        total = x.to(torch.int32)
        for i in range(1, self.frames):
            taps = [on_device(x.device, ("p_zoom", size, i, k), lambda a=a: a)
                    for size in (h, w) for k, a in enumerate(zoom_taps(size, zoom_factor(i)))]
            r0, r1, fy, c0, c1, fx = taps
            rows = xf[:, :, r0] * (1.0 - fy)[:, None] + xf[:, :, r1] * fy[:, None]
            layer = rows[..., c0] * (1.0 - fx) + rows[..., c1] * fx
            total += layer.to(torch.int32)  # truncated, as the numpy path
            out[:, i] = torch.div(total, i + 1, rounding_mode="floor").to(torch.uint8)
        return out


@SHIFTS.register("p_gaussian_blur", description="Gaussian blur growing frame by frame (ImageNet-P extra)",
                 group="imagenet_p_extra")
class GaussianBlurSequence(_BlurSequence):
    """Gaussian blur sequence (ImageNet-P extra): sigma 0.25 + 0.035 i px (0.25..1.3), kernel radius 6 sigma."""

    def sequence(self, image, params):
        x = image.astype(np.float32)
        out = np.empty((self.frames, *image.shape), dtype=np.uint8)
        for i in range(self.frames):
            out[i] = snap_truncate(gaussian_blur_like_skimage(x, blur_sigma(i), truncate=BLUR_TRUNCATE,
                                                              border=cv2.BORDER_REPLICATE))
        return out

    def frame_tensor(self, xf, i):
        import torch

        from ..corruptions._torch import gaussian_blur_tensor

        y = gaussian_blur_tensor(xf, blur_sigma(i), truncate=BLUR_TRUNCATE)
        whole = torch.round(y)
        y = torch.where((y - whole).abs() < _SNAP, whole, y)
        return y.clamp_(0, 255).to(torch.uint8)
