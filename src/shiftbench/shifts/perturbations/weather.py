"""ImageNet-P weather sequences: p_snow (the benchmark's) and p_spatter (validation extra).

Both draw one layer per sequence (from a recorded 63-bit ``noise_seed``: standard normals, float64, as the
reference's ``np.random.normal``) and move it from frame to frame, as the reference does
(hendrycks/robustness, ImageNet-P/create_p/make_imagenet_p.py):

- snow: normals N(0.05, 0.3) zoomed 3x about the centre (scipy's ``zoom(order=1)`` of the central crop, as the
  reference's ``clipped_zoom``), zeroed below 0.5, stored as 8 bits (truncated); frame i blurs that one layer
  with ImageMagick's motion blur (radius 14, sigma 4) at angle i * 4 - 150 degrees, and adds it, and its 180
  degree rotation, to 0.85 x + 0.15 max(x, 1.5 grey(x) + 0.5).
- spatter: normals N(0.65, 0.27) smoothed by a Gaussian (sigma 3.7, skimage's truncate 4, edges replicated),
  zeroed below 0.69; frame i draws water drops from it (ImageNet-C's spatter recipe: Canny edges, distance
  transform, emboss, brightness 0.6 of the range at the peak, pale turquoise) and then advects it: every
  column is convolved with (0.05, 0.1, 0.15, 0.7) (``np.convolve(mode="same")``: row r becomes
  0.05 l[r+1] + 0.1 l[r] + 0.15 l[r-1] + 0.7 l[r-2], zeros beyond the edges), so the drops run down.

Only the central crop of the snow noise reaches the output (ceil(H/3) x ceil(W/3)): only it is drawn. Pixel
constants (the zoom, the streak, the spatter sigma, edge thresholds and the 20 px distance cap, the advection)
stay in pixels at any image size, as the ImageNet-C corruptions do; the reference's ``clipped_zoom`` assumes a
square image, ours zooms each axis by itself.

Where the reference is ambiguous, we chose:
- the snow layer's motion blur is rounded to the nearest level (half up), as ImageMagick's 8-bit PNG output
  that the reference decodes; its float blend then truncates (``np.uint8``), computed in the reference's order
  and precision (float64, the grey plane in float32 as OpenCV makes it).
- spatter's colour: the reference treats the RGB image as BGR (``COLOR_BGR2BGRA``) and builds its colour as
  (175, 238, 238) in that same order, so the two confusions cancel: R gains 175/255 of the drop strength, G
  and B 238/255 (pale turquoise in RGB), as ImageNet-C's spatter here. The alpha channel the conversions add is
  dropped at the end and changes nothing. The emboss kernel is float32 (the reference passes int64).
- spatter with no drops at all (nothing above 0.69, a tiny image) divides 0 by 0 in the reference (NaN, then
  undefined bytes): ours adds nothing to that frame.
- the blends follow the reference's dtypes: snow in float64, spatter in float32 (its image is float32).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Sequence

import cv2
import numpy as np

from ...registry import SHIFTS
from ..corruptions._common import draw_seed, gaussian_blur_like_skimage, motion_blur, noise_rng
from ._base import PerturbationSequence

__all__ = ["SnowSequence", "SpatterSequence", "snow_layer", "snow_angle", "snow_base", "spatter_liquid",
           "spatter_drops", "advect", "SNOW", "SPATTER", "WATER"]

# (mean, std, zoom, threshold, blur radius, blur sigma, image weight)
SNOW = (0.05, 0.3, 3, 0.5, 14, 4.0, 0.85)
# (mean, std, sigma, threshold, peak strength)
SPATTER = (0.65, 0.27, 3.7, 0.69, 0.6)
ADVECTION = (0.05, 0.1, 0.15, 0.7)  # np.convolve's kernel (flipped when applied)
WATER = (np.array([175, 238, 238], dtype=np.float32) / np.float32(255.0)).astype(np.float32)
_EMBOSS = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], dtype=np.float32)


def snow_angle(i: int) -> float:
    return float(i * 4 - 150)


def _crop_shape(shape: tuple[int, ...]) -> tuple[int, int]:
    zoom = SNOW[2]
    return int(math.ceil(shape[0] / zoom)), int(math.ceil(shape[1] / zoom))


@lru_cache(maxsize=256)
def _zoom_axis(n: int, zoom: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i0, i1, f) of the reference's clipped_zoom along one axis of n pixels: the central ceil(n / zoom)
    read by scipy's zoom(order=1) (out k -> in k (c - 1) / (m - 1), m = round(c zoom)), the central n kept."""
    c = int(math.ceil(n / zoom))
    top = (n - c) // 2
    m = int(round(c * zoom))
    trim = (m - n) // 2
    u = (np.arange(trim, trim + n, dtype=np.float64) * ((c - 1) / (m - 1))) if m > 1 else np.zeros(n)
    i0 = np.minimum(np.floor(u).astype(np.int64), c - 1)
    f = u - i0
    return top + i0, top + np.minimum(i0 + 1, c - 1), f


def snow_layer(shape: tuple[int, ...], params: dict[str, Any]) -> np.ndarray:
    """The (H, W) uint8 snow layer of one sequence, before its motion blur: a function of the seed alone."""
    mean, std, zoom, threshold = SNOW[:4]
    h, w = shape[:2]
    ch, cw = _crop_shape(shape)
    noise = noise_rng(params).standard_normal((ch, cw))
    full = np.zeros((h, w))  # the reference's H x W draw: only its central crop is read
    top, left = (h - ch) // 2, (w - cw) // 2
    full[top:top + ch, left:left + cw] = mean + std * noise
    r0, r1, fy = _zoom_axis(h, float(zoom))
    c0, c1, fx = _zoom_axis(w, float(zoom))
    rows = full[r0] * (1.0 - fy)[:, None] + full[r1] * fy[:, None]
    layer = rows[:, c0] * (1.0 - fx) + rows[:, c1] * fx
    layer[layer < threshold] = 0
    return (np.clip(layer, 0, 1) * 255).astype(np.uint8)


def snow_base(image: np.ndarray) -> np.ndarray:
    """0.85 x + 0.15 max(x, 1.5 grey + 0.5), float64 in 0..1, in the reference's order and dtypes."""
    weight = SNOW[6]
    x = image / 255.0
    grey = cv2.cvtColor(np.float32(x), cv2.COLOR_RGB2GRAY)[..., None] * np.float32(1.5) + np.float32(0.5)
    return weight * x + (1 - weight) * np.maximum(x, grey)


@SHIFTS.register("p_snow", description="Snow streaks turning frame by frame (ImageNet-P)", group="imagenet_p")
class SnowSequence(PerturbationSequence):
    """Snow sequence (ImageNet-P): one snow layer, motion-blurred at -150, -146, ..., -30 degrees, over a greyed image."""

    def draws(self, shape, difficulty, rng) -> dict[str, Any]:
        return {"noise_seed": draw_seed(rng)}

    def sequence(self, image, params):
        _, _, _, _, radius, sigma, _ = SNOW
        layer = snow_layer(image.shape, params).astype(np.float32)
        base = snow_base(image)
        out = np.empty((self.frames, *image.shape), dtype=np.uint8)
        for i in range(self.frames):
            flakes = (np.clip(np.floor(motion_blur(layer, radius, sigma, snow_angle(i)) + 0.5), 0, 255)
                      .astype(np.uint8) / 255.0)[..., None]  # float64, as the reference's decoded PNG / 255.
            z = base + flakes + flakes[::-1, ::-1]
            out[i] = (np.clip(z, 0, 1) * 255).astype(np.uint8)
        return out

    def sequence_tensor(self, x: Any, params: Sequence[dict[str, Any]]) -> Any:
        """The layers drawn on the CPU from the seeds (as the numpy path), blurred and blended on x's device (float64)."""
        import torch

        from ..corruptions._torch import motion_blur_tensor, stack_to_device

        _, _, _, _, radius, sigma, _ = SNOW
        n, c, h, w = x.shape
        layer = stack_to_device([snow_layer((h, w), p) for p in params], x)[:, None].float()
        xd = x.double() / 255.0
        grey = (torch.tensor([0.299, 0.587, 0.114], dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
                * xd.float()).sum(dim=1, keepdim=True) * 1.5 + 0.5
        base = SNOW[6] * xd + (1 - SNOW[6]) * torch.maximum(xd, grey.double())
        out = torch.empty((n, self.frames, c, h, w), dtype=torch.uint8, device=x.device)
        for i in range(self.frames):
            flakes = torch.floor(motion_blur_tensor(layer, radius, sigma, [snow_angle(i)] * n) + 0.5).clamp_(0, 255)
            flakes = flakes.double() / 255.0
            z = base + flakes + flakes.flip(-1, -2)
            out[:, i] = (z.clamp_(0, 1) * 255).to(torch.uint8)
        return out


def spatter_liquid(shape: tuple[int, ...], params: dict[str, Any]) -> np.ndarray:
    """The (H, W) float64 liquid layer of frame 0: a function of the seed alone."""
    mean, std, sigma, threshold, _ = SPATTER
    liquid = mean + std * noise_rng(params).standard_normal(shape[:2])
    liquid = gaussian_blur_like_skimage(liquid, sigma)
    liquid[liquid < threshold] = 0
    return liquid


def advect(liquid: np.ndarray) -> np.ndarray:
    """One step of the reference's column-wise ``np.convolve(col, ADVECTION, mode="same")``."""
    k = ADVECTION
    padded = np.zeros((liquid.shape[0] + 3, liquid.shape[1]))
    padded[2:-1] = liquid  # padded[r + 2] = liquid[r]
    return k[0] * padded[3:] + k[1] * padded[2:-1] + k[2] * padded[1:-2] + k[3] * padded[:-3]


def spatter_drops(liquid: np.ndarray) -> np.ndarray:
    """The (H, W) float32 drop strength of one frame (0..0.6): the reference's Canny / distance / emboss recipe."""
    liquid8 = (liquid * 255).astype(np.uint8)
    dist = 255 - cv2.Canny(liquid8, 50, 150)
    dist = cv2.distanceTransform(dist, cv2.DIST_L2, 5)
    _, dist = cv2.threshold(dist, 20, 20, cv2.THRESH_TRUNC)
    dist = cv2.blur(dist, (3, 3)).astype(np.uint8)
    dist = cv2.equalizeHist(dist)
    dist = cv2.filter2D(dist, cv2.CV_8U, _EMBOSS)
    dist = cv2.blur(dist, (3, 3)).astype(np.float32)
    m = liquid8 * dist
    peak = m.max()
    if peak > 0:
        m /= peak
    m *= np.float32(SPATTER[4])
    return m


def spatter_frames(shape: tuple[int, ...], frames: int, params: dict[str, Any]) -> np.ndarray:
    """The (T, H, W) float32 drop strengths of a sequence: frame i from the liquid advected i times."""
    liquid = spatter_liquid(shape, params)
    out = np.empty((frames, *shape[:2]), dtype=np.float32)
    for i in range(frames):
        out[i] = spatter_drops(liquid)
        liquid = advect(liquid)
    return out


@SHIFTS.register("p_spatter", description="Water spatter running down frame by frame (ImageNet-P extra)",
                 group="imagenet_p_extra")
class SpatterSequence(PerturbationSequence):
    """Spatter sequence (ImageNet-P extra): one liquid layer, advected down about 2 px a frame, drawn as water drops."""

    def draws(self, shape, difficulty, rng) -> dict[str, Any]:
        return {"noise_seed": draw_seed(rng)}

    def sequence(self, image, params):
        drops = spatter_frames(image.shape, self.frames, params)
        x = image.astype(np.float32) / np.float32(255.0)
        z = x[None] + drops[..., None] * WATER
        return (np.clip(z, 0, 1) * np.float32(255)).astype(np.uint8)

    def sequence_tensor(self, x: Any, params: Sequence[dict[str, Any]]) -> Any:
        """The drops made on the CPU from the seeds (OpenCV's Canny and distance transform), blended on x's device."""
        import torch

        from ..corruptions._torch import stack_to_device

        n, c, h, w = x.shape
        drops = stack_to_device([spatter_frames((h, w), self.frames, p) for p in params], x)  # (N, T, H, W)
        xf = x.float() / 255.0
        water = torch.from_numpy(WATER).to(x.device).view(1, 1, 3, 1, 1)
        z = xf[:, None] + drops[:, :, None] * water
        return (z.clamp_(0, 1) * 255.0).to(torch.uint8)
