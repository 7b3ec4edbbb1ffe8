"""Blur corruptions: defocus_blur, glass_blur, motion_blur, zoom_blur (ImageNet-C) and gaussian_blur (extra).

Filtering runs in OpenCV on float32 images (defocus through a DFT with a cached kernel
spectrum, motion blur as banded direct filters, zoom as 4-channel uint8 warps); glass_blur's
sequential shuffle is compiled (numba). Kernels, radii and border rules follow the reference
(the scikit-image / scipy / OpenCV calls of imagecorruptions). The tensor paths (``corrupt_tensor``)
run the same filters as convolutions, gathers and grid samples on the tensor's device.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cv2
import numpy as np

from ...registry import SHIFTS
from ._common import (
    Corruption,
    draw_seed,
    gaussian_blur_like_skimage,
    motion_blur,
    noise_rng,
    to_uint8,
    zoom_crop_matrix,
)
from ._torch import gaussian_blur_tensor, motion_blur_tensor, on_device, pad_border, trunc, warp_grid

__all__ = ["DefocusBlur", "GlassBlur", "MotionBlur", "ZoomBlur", "GaussianBlur"]

DEFOCUS = ((3, 0.1), (4, 0.5), (6, 0.5), (8, 0.5), (10, 0.5))  # (disk radius, anti-alias sigma)
GLASS = ((0.7, 1, 2), (0.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2))  # (sigma, max shift, iterations)
MOTION = ((10, 3), (15, 5), (15, 8), (15, 12), (20, 15))  # (radius, sigma)
ZOOM_FACTORS = (
    (1.0, 1.11, 0.01),
    (1.0, 1.16, 0.01),
    (1.0, 1.21, 0.02),
    (1.0, 1.26, 0.02),
    (1.0, 1.31, 0.03),
)  # np.arange(start, stop, step)
GAUSSIAN_SIGMA = (1, 2, 3, 4, 6)


@lru_cache(maxsize=None)
def disk_kernel(radius: int, alias_blur: float) -> np.ndarray:
    """The reference's anti-aliased disk: a binary disk on a grid of at least 17x17, Gaussian-smoothed."""
    half = max(8, radius)
    grid = np.arange(-half, half + 1)
    xx, yy = np.meshgrid(grid, grid)
    disk = ((xx**2 + yy**2) <= radius**2).astype(np.float32)
    disk /= disk.sum()
    ksize = (3, 3) if radius <= 8 else (5, 5)
    return cv2.GaussianBlur(disk, ksize, sigmaX=alias_blur)


@SHIFTS.register("defocus_blur", description="Defocus (disk) blur (ImageNet-C)", group="blur")
class DefocusBlur(Corruption):
    """Defocus blur (ImageNet-C): convolution with an anti-aliased disk of radius 3..10 px."""

    def corrupt(self, image, severity, params):
        radius, alias_blur = DEFOCUS[severity - 1]
        return to_uint8(disk_convolve(image, radius, alias_blur))

    def corrupt_tensor(self, x, severity, params):
        import torch.nn.functional as F

        radius, alias_blur = DEFOCUS[severity - 1]
        kernel = disk_kernel(radius, alias_blur)
        half = kernel.shape[0] // 2
        n, c, h, w = x.shape
        weight = on_device(x.device, ("disk", radius, alias_blur), lambda: kernel.astype(np.float32)[None, None])
        planes = pad_border(x.reshape(n * c, 1, h, w).float(), half, half, half, half, "reflect101")
        return trunc(F.conv2d(planes, weight).reshape(n, c, h, w))


@lru_cache(maxsize=32)
def _disk_spectrum(rows: int, cols: int, radius: int, alias_blur: float) -> np.ndarray:
    kernel = disk_kernel(radius, alias_blur)
    padded = np.zeros((rows, cols), dtype=np.float32)
    padded[: kernel.shape[0], : kernel.shape[1]] = kernel
    return cv2.dft(padded)


def disk_convolve(image: np.ndarray, radius: int, alias_blur: float) -> np.ndarray:
    """``cv2.filter2D(image, CV_32F, disk_kernel(...))`` (border BORDER_REFLECT_101, the reference's) via a cached DFT.

    The disk is dense (up to 21x21), so a DFT beats direct taps; unlike ``cv2.filter2D`` this
    keeps the kernel's spectrum across calls (one per image size and severity). The kernel is
    symmetric, so convolution and correlation agree.
    """
    h, w = image.shape[:2]
    half = disk_kernel(radius, alias_blur).shape[0] // 2
    rows = cv2.getOptimalDFTSize(h + 2 * half)
    cols = cv2.getOptimalDFTSize(w + 2 * half)
    spectrum = _disk_spectrum(rows, cols, radius, alias_blur)
    padded = cv2.copyMakeBorder(image, half, rows - h - half, half, cols - w - half, cv2.BORDER_REFLECT_101)
    planes = []
    for plane in cv2.split(padded.astype(np.float32)):
        product = cv2.mulSpectrums(cv2.dft(plane), spectrum, 0)
        full = cv2.dft(product, flags=cv2.DFT_INVERSE | cv2.DFT_SCALE | cv2.DFT_REAL_OUTPUT)
        planes.append(full[2 * half : 2 * half + h, 2 * half : 2 * half + w])
    return cv2.merge(planes)


@SHIFTS.register("glass_blur", description="Frosted-glass blur: blur, local pixel shuffle, blur (ImageNet-C)", group="blur")
class GlassBlur(Corruption):
    """Glass blur (ImageNet-C): Gaussian blur, sequential local pixel shuffle, Gaussian blur."""

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        return {"noise_seed": draw_seed(rng)}

    @staticmethod
    def raw_words(shape: tuple[int, ...], severity: int, params: dict[str, Any]) -> np.ndarray:
        """The 64-bit words holding every copy's two 16-bit offset words (see _kernels.shuffle_in_place).

        Raw PCG64 output, 4 offsets per word: 6x cheaper than numpy's bounded integers.
        """
        _, delta, iterations = GLASS[severity - 1]
        h, w = shape[:2]
        n_words = 2 * iterations * (h - 2 * delta) * (w - 2 * delta)
        return noise_rng(params).bit_generator.random_raw((n_words + 3) // 4)

    @staticmethod
    def offsets(shape: tuple[int, ...], severity: int, params: dict[str, Any]) -> np.ndarray:
        """The (dx, dy) of every copy in scan order, (iterations, H-2d, W-2d, 2), each in [-d, d-1]."""
        _, delta, iterations = GLASS[severity - 1]
        h, w = shape[:2]
        raw = GlassBlur.raw_words(shape, severity, params)
        words = (raw[:, None] >> np.array([0, 16, 32, 48], dtype=np.uint64)) & np.uint64(0xFFFF)
        n = 2 * iterations * (h - 2 * delta) * (w - 2 * delta)
        values = ((words.reshape(-1)[:n].astype(np.int64) * (2 * delta)) >> 16) - delta
        return values.reshape(iterations, h - 2 * delta, w - 2 * delta, 2)

    def corrupt(self, image, severity, params):
        from ._kernels import shuffle_in_place  # numba: compiled (and cached) on first use

        sigma, delta, iterations = GLASS[severity - 1]
        blurred = gaussian_blur_like_skimage(image.astype(np.float32), sigma)
        shuffled = blurred.astype(np.uint8)  # the reference truncates to uint8 between the blurs
        shuffle_in_place(shuffled, self.raw_words(image.shape, severity, params), delta, iterations)
        return to_uint8(gaussian_blur_like_skimage(shuffled.astype(np.float32), sigma))

    def corrupt_tensor(self, x, severity, params):
        import torch

        from ._kernels import shuffle_in_place

        sigma, delta, iterations = GLASS[severity - 1]
        shuffled = gaussian_blur_tensor(x.float(), sigma).to(torch.uint8)  # truncated between the blurs, as the reference
        # the shuffle is sequential (each swap moves pixels an earlier swap moved): compiled, on the CPU
        hwc = shuffled.permute(0, 2, 3, 1).contiguous().cpu().numpy()
        for i, p in enumerate(params):
            shuffle_in_place(hwc[i], self.raw_words(hwc[i].shape, severity, p), delta, iterations)
        back = torch.from_numpy(hwc).to(x.device).permute(0, 3, 1, 2).float()
        return trunc(gaussian_blur_tensor(back, sigma))


@SHIFTS.register("motion_blur", description="Motion blur along a random direction (ImageNet-C)", group="blur")
class MotionBlur(Corruption):
    """Motion blur (ImageNet-C): one-sided half-Gaussian streak of 2r+1 px at an angle in [-45, 45) degrees."""

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        return {"angle": float(rng.uniform(-45.0, 45.0))}

    def corrupt(self, image, severity, params):
        radius, sigma = MOTION[severity - 1]
        return to_uint8(motion_blur(image.astype(np.float32), radius, sigma, params["angle"]))

    def corrupt_tensor(self, x, severity, params):
        radius, sigma = MOTION[severity - 1]
        return trunc(motion_blur_tensor(x.float(), radius, sigma, [p["angle"] for p in params]))


@SHIFTS.register("zoom_blur", description="Zoom (radial) blur (ImageNet-C)", group="blur")
class ZoomBlur(Corruption):
    """Zoom blur (ImageNet-C): the mean of the image and its central zooms by 1.0..1.3."""

    @staticmethod
    def factors(severity: int) -> np.ndarray:
        return np.arange(*ZOOM_FACTORS[severity - 1])

    def corrupt(self, image, severity, params):
        h, w = image.shape[:2]
        factors = self.factors(severity)
        # uint8 warps (OpenCV's fixed-point path) summed in float32: each layer is rounded to the
        # nearest level, and the mean of 11-16 layers averages that rounding away. Four-channel
        # images take OpenCV's vectorised path: 3x faster per warp than three channels.
        rgba = cv2.cvtColor(image, cv2.COLOR_RGB2RGBA)
        total = rgba.astype(np.float32)
        total *= 2.0  # the image itself and the zoom by 1.0 (factors[0]), which is the identity
        layer = np.empty_like(rgba)
        for matrix in _zoom_matrices(h, w, severity):
            cv2.warpAffine(rgba, matrix, (w, h), dst=layer, flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
            cv2.accumulate(layer, total)
        out = cv2.cvtColor(total, cv2.COLOR_RGBA2RGB)  # contiguous: numpy on a strided view is 10x slower
        out *= 1.0 / (len(factors) + 1)
        return to_uint8(out)

    def corrupt_tensor(self, x, severity, params):
        import torch
        import torch.nn.functional as F

        n, c, h, w = x.shape
        factors = self.factors(severity)
        xf = x.float()
        total = xf * 2.0  # the image and the zoom by 1.0
        for factor in factors[1:]:
            grid = on_device(x.device, ("zoom", h, w, float(factor)),
                             lambda f=factor: warp_grid((h, w), (h, w), zoom_crop_matrix((h, w), f)))
            layer = F.grid_sample(xf, grid.expand(n, h, w, 2), mode="bilinear", padding_mode="border", align_corners=True)
            total += torch.round(layer)  # the numpy path warps in uint8: each layer rounded to a level
        total *= 1.0 / (len(factors) + 1)
        return trunc(total)


@lru_cache(maxsize=64)
def _zoom_matrices(h: int, w: int, severity: int) -> tuple[np.ndarray, ...]:
    factors = ZoomBlur.factors(severity)
    assert factors[0] == 1.0
    return tuple(zoom_crop_matrix((h, w), factor) for factor in factors[1:])


@SHIFTS.register("gaussian_blur", description="Gaussian blur (ImageNet-C extra)", group="extra")
class GaussianBlur(Corruption):
    """Gaussian blur (ImageNet-C extra): sigma 1..6 px, edges replicated."""

    def corrupt(self, image, severity, params):
        return to_uint8(gaussian_blur_like_skimage(image.astype(np.float32), GAUSSIAN_SIGMA[severity - 1]))

    def corrupt_tensor(self, x, severity, params):
        return trunc(gaussian_blur_tensor(x.float(), GAUSSIAN_SIGMA[severity - 1]))
