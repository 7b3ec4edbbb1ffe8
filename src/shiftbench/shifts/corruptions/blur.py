"""Blur corruptions: defocus_blur, glass_blur, motion_blur, zoom_blur (ImageNet-C) and gaussian_blur (extra).

Filtering runs in OpenCV on float32 images (defocus through a DFT with a cached kernel
spectrum, motion blur as banded direct filters, zoom as 4-channel uint8 warps); glass_blur's
sequential shuffle is compiled (numba). Kernels, radii and border rules follow the reference
(the scikit-image / scipy / OpenCV calls of imagecorruptions). The tensor paths (``corrupt_tensor``)
run the same filters as convolutions, gathers and grid samples on the tensor's device.

Severity is a dial (any real number in 1..5): whole severities read the published tables exactly; in
between, each class's docstring states how its parameters move from one level to the next.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Any

import cv2
import numpy as np

from ...registry import SHIFTS
from ...severity import between, interpolate, is_whole
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


def defocus_params(severity: float) -> tuple[int | float, float]:
    """(disk radius, anti-alias sigma): the published pair at whole severities, both linear in between
    (the radius a real number: see ``defocus_kernel``)."""
    return interpolate(DEFOCUS, severity, integer="float")


def glass_params(severity: float) -> tuple[float, int, int | float]:
    """(sigma, max shift, iterations) of glass blur: see GlassBlur. Iterations are an int when whole."""
    i, j, t = between(severity, len(GLASS))
    if i != j and GLASS[j][2] < GLASS[i][2]:
        # a larger shift with fewer iterations (1->2, 3->4): the published change falls, and only
        # switching all three together (at the midpoint) lets it fall monotonically
        return GLASS[j] if t >= 0.5 else GLASS[i]
    sigma, delta, iterations = interpolate(GLASS, severity, integer=("float", "round", "float"))
    return sigma, delta, int(iterations) if float(iterations).is_integer() else iterations


def motion_params(severity: float) -> tuple[int, float]:
    """(radius, sigma): the radius linear then rounded half up, the sigma linear."""
    return interpolate(MOTION, severity, integer=("lerp-round", "float"))


def gaussian_sigma(severity: float) -> float:
    return interpolate(GAUSSIAN_SIGMA, severity, integer="float")


@lru_cache(maxsize=64)
def disk_kernel(radius: int, alias_blur: float) -> np.ndarray:
    """The reference's anti-aliased disk: a binary disk on a grid of at least 17x17, Gaussian-smoothed."""
    half = max(8, radius)
    grid = np.arange(-half, half + 1)
    xx, yy = np.meshgrid(grid, grid)
    disk = ((xx**2 + yy**2) <= radius**2).astype(np.float32)
    disk /= disk.sum()
    ksize = (3, 3) if radius <= 8 else (5, 5)
    return cv2.GaussianBlur(disk, ksize, sigmaX=alias_blur)


@lru_cache(maxsize=64)
def defocus_kernel(radius: float, alias_blur: float) -> np.ndarray:
    """The anti-aliased disk of a real radius: ``disk_kernel`` itself at a whole radius; between whole radii
    n < r < n + 1, (1 - f) disk_kernel(n, sigma) + f disk_kernel(n + 1, sigma) with f = r - n, the smaller
    kernel zero-padded to the larger's grid.

    The alias blur is linear, so this is the mix of the two normalised binary disks anti-aliased with sigma
    wherever both radii share the reference's grid (17x17) and ksize (3x3), i.e. up to r = 8 (severity 4).
    Above that each disk keeps its own grid and ksize (3x3 up to radius 8, 5x5 above): the reference's
    kernels (whose Gaussian's reflected border leaves them summing to 1.003..1.014 from radius 7 on) are then
    the exact ends of every mix, and the kernel, so the change, is continuous in r. Blurring the mix once on
    the larger grid instead drops the kernel's sum at r = 8+ and 9+ (1.013 -> 1.003), and the change fell there.
    """
    low = math.floor(radius)
    f = float(radius) - low
    if f == 0.0:
        return disk_kernel(int(low), alias_blur)
    small, large = disk_kernel(int(low), alias_blur), disk_kernel(int(low) + 1, alias_blur)
    pad = (large.shape[0] - small.shape[0]) // 2
    mix = f * large.astype(np.float64)
    mix[pad : pad + small.shape[0], pad : pad + small.shape[1]] += (1.0 - f) * small
    return mix.astype(np.float32)


@SHIFTS.register("defocus_blur", description="Defocus (disk) blur (ImageNet-C)", group="blur")
class DefocusBlur(Corruption):
    """Defocus blur (ImageNet-C): convolution with an anti-aliased disk of radius 3..10 px.

    Continuous severity: the disk radius r and the anti-alias sigma both linear between the levels; a real r
    between whole radii n and n + 1 blurs with (1 - f) K(n) + f K(n + 1), f = r - n, where K is the reference's
    anti-aliased disk of that whole radius (its grid, and ksize 3x3 up to radius 8, 5x5 above) at that sigma.
    """

    def corrupt(self, image, severity, params):
        radius, alias_blur = defocus_params(severity)
        return to_uint8(disk_convolve(image, radius, alias_blur))

    def corrupt_tensor(self, x, severity, params):
        import torch.nn.functional as F

        radius, alias_blur = defocus_params(severity)
        kernel = defocus_kernel(radius, alias_blur)
        half = kernel.shape[0] // 2
        n, c, h, w = x.shape
        weight = on_device(x.device, ("disk", radius, alias_blur), lambda: kernel.astype(np.float32)[None, None])
        planes = pad_border(x.reshape(n * c, 1, h, w).float(), half, half, half, half, "reflect101")
        return trunc(F.conv2d(planes, weight).reshape(n, c, h, w))


@lru_cache(maxsize=32)
def _disk_spectrum(rows: int, cols: int, radius: int | float, alias_blur: float) -> np.ndarray:
    kernel = defocus_kernel(radius, alias_blur)
    padded = np.zeros((rows, cols), dtype=np.float64)
    padded[: kernel.shape[0], : kernel.shape[1]] = kernel
    return cv2.dft(padded)


def disk_convolve(image: np.ndarray, radius: int | float, alias_blur: float) -> np.ndarray:
    """``cv2.filter2D(image, CV_32F, defocus_kernel(...))`` (BORDER_REFLECT_101, the reference's) via a cached DFT.

    The disk is dense (up to 21x21), so a DFT beats direct taps; unlike ``cv2.filter2D`` this
    keeps the kernel's spectrum across calls (one per image size and severity). The kernel is
    symmetric, so convolution and correlation agree.

    The same bytes on every processor: the DFT runs in float64 and a value within 1e-6 of a whole grey level is
    that level, so the truncation to uint8 that follows never depends on the last bits of a SIMD sum (in float32,
    a flat region's 100 came out as 99.99998 on one processor and 100.00001 on another, and truncated to 99 or 100).
    """
    h, w = image.shape[:2]
    half = defocus_kernel(radius, alias_blur).shape[0] // 2
    rows = cv2.getOptimalDFTSize(h + 2 * half)
    cols = cv2.getOptimalDFTSize(w + 2 * half)
    spectrum = _disk_spectrum(rows, cols, radius, alias_blur)
    padded = cv2.copyMakeBorder(image, half, rows - h - half, half, cols - w - half, cv2.BORDER_REFLECT_101)
    planes = []
    for plane in cv2.split(padded.astype(np.float64)):
        product = cv2.mulSpectrums(cv2.dft(plane), spectrum, 0)
        full = cv2.dft(product, flags=cv2.DFT_INVERSE | cv2.DFT_SCALE | cv2.DFT_REAL_OUTPUT)
        planes.append(full[2 * half : 2 * half + h, 2 * half : 2 * half + w])
    out = cv2.merge(planes)
    whole = np.rint(out)
    return np.where(np.abs(out - whole) < 1e-6, whole, out)


@SHIFTS.register("glass_blur", description="Frosted-glass blur: blur, local pixel shuffle, blur (ImageNet-C)", group="blur")
class GlassBlur(Corruption):
    """Glass blur (ImageNet-C): Gaussian blur, sequential local pixel shuffle, Gaussian blur.

    Continuous severity: sigma and the number of shuffle passes linear, the max shift from the nearer level
    (a fractional pass: after the whole passes, a random fraction of the pixels take one more); but where a
    larger shift meets fewer passes (1->2, 3->4, whose published change falls) all three come from the
    nearer level, switching together at the midpoint: any other path raises the change on the way down.
    """

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        return {"noise_seed": draw_seed(rng)}

    @staticmethod
    def _n_words(shape: tuple[int, ...], delta: int, passes: int) -> int:
        h, w = shape[:2]
        return 2 * passes * (h - 2 * delta) * (w - 2 * delta)

    @staticmethod
    def raw_words(shape: tuple[int, ...], severity: float, params: dict[str, Any]) -> np.ndarray:
        """The 64-bit words holding every copy's two 16-bit offset words (see _kernels.shuffle_in_place),
        for every pass (a fractional last pass counted whole).

        Raw PCG64 output, 4 offsets per word: 6x cheaper than numpy's bounded integers.
        """
        _, delta, iterations = glass_params(severity)
        n_words = GlassBlur._n_words(shape, delta, math.ceil(iterations))
        return noise_rng(params).bit_generator.random_raw((n_words + 3) // 4)

    @staticmethod
    def offsets(shape: tuple[int, ...], severity: float, params: dict[str, Any]) -> np.ndarray:
        """The (dx, dy) of every copy in scan order, (passes, H-2d, W-2d, 2), each in [-d, d-1]."""
        _, delta, iterations = glass_params(severity)
        passes = math.ceil(iterations)
        h, w = shape[:2]
        raw = GlassBlur.raw_words(shape, severity, params)
        n = GlassBlur._n_words(shape, delta, passes)
        values = ((_words16(raw)[:n].astype(np.int64) * (2 * delta)) >> 16) - delta
        return values.reshape(passes, h - 2 * delta, w - 2 * delta, 2)

    @staticmethod
    def shuffle(image: np.ndarray, severity: float, params: dict[str, Any]) -> None:
        """The reference's sequential copies, in place on a C-contiguous uint8 (H, W, C) image.

        A fractional number of passes n + f: n whole passes, then a fraction f of the pixels (those whose
        uniform draw, made after the offset words, is below f) take their value after pass n + 1, whose
        copies read the offset words that follow pass n's, as a whole pass n + 1 would.
        """

        _, delta, iterations = glass_params(severity)
        passes = math.ceil(iterations)
        rng = noise_rng(params)
        raw = rng.bit_generator.random_raw((GlassBlur._n_words(image.shape, delta, passes) + 3) // 4)
        whole = int(iterations)
        from ._kernels import shuffle_in_place  # deferred: start-up cost (pulls numba)
        shuffle_in_place(image, raw, delta, whole)
        if whole == passes:
            return
        extra = image.copy()
        shuffle_in_place(extra, _pack16(_words16(raw)[GlassBlur._n_words(image.shape, delta, whole):]), delta, 1)
        take = rng.random(image.shape[:2]) < iterations - whole
        image[take] = extra[take]

    def corrupt(self, image, severity, params):
        sigma, _, _ = glass_params(severity)
        blurred = gaussian_blur_like_skimage(image.astype(np.float32), sigma)
        shuffled = blurred.astype(np.uint8)  # the reference truncates to uint8 between the blurs
        self.shuffle(shuffled, severity, params)
        return to_uint8(gaussian_blur_like_skimage(shuffled.astype(np.float32), sigma))

    def corrupt_tensor(self, x, severity, params):
        import torch

        sigma, _, _ = glass_params(severity)
        shuffled = gaussian_blur_tensor(x.float(), sigma).to(torch.uint8)  # truncated between the blurs, as the reference
        # the shuffle is sequential (each swap moves pixels an earlier swap moved): compiled, on the CPU
        hwc = shuffled.permute(0, 2, 3, 1).contiguous().cpu().numpy()
        for i, p in enumerate(params):
            self.shuffle(hwc[i], severity, p)
        back = torch.from_numpy(hwc).to(x.device).permute(0, 3, 1, 2).float()
        return trunc(gaussian_blur_tensor(back, sigma))


_SHIFTS16 = np.array([0, 16, 32, 48], dtype=np.uint64)


def _words16(raw: np.ndarray) -> np.ndarray:
    """The 16-bit words of 64-bit ``raw`` words, word k being bits 16*(k%4).. of raw[k//4]."""
    return ((raw[:, None] >> _SHIFTS16) & np.uint64(0xFFFF)).reshape(-1)


def _pack16(words: np.ndarray) -> np.ndarray:
    """The inverse of ``_words16`` (the last 64-bit word padded with zeros)."""
    words = np.concatenate([words, np.zeros(-len(words) % 4, dtype=np.uint64)]).reshape(-1, 4)
    return np.bitwise_or.reduce(words << _SHIFTS16, axis=1)


@SHIFTS.register("motion_blur", description="Motion blur along a random direction (ImageNet-C)", group="blur")
class MotionBlur(Corruption):
    """Motion blur (ImageNet-C): one-sided half-Gaussian streak of 2r+1 px at an angle in [-45, 45) degrees.

    Continuous severity: the streak's sigma linear; its radius (whole taps) linear then rounded half up.
    """

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        return {"angle": float(rng.uniform(-45.0, 45.0))}

    def corrupt(self, image, severity, params):
        radius, sigma = motion_params(severity)
        return to_uint8(motion_blur(image.astype(np.float32), radius, sigma, params["angle"]))

    def corrupt_tensor(self, x, severity, params):
        radius, sigma = motion_params(severity)
        return trunc(motion_blur_tensor(x.float(), radius, sigma, [p["angle"] for p in params]))


@SHIFTS.register("zoom_blur", description="Zoom (radial) blur (ImageNet-C)", group="blur")
class ZoomBlur(Corruption):
    """Zoom blur (ImageNet-C): the mean of the image and its central zooms by 1.0..1.3.

    Continuous severity: the distribution of zooms slides from one level's to the next (its q-th quantile
    linear, the image's own weight included), each zoom split between the multiples of 0.01 either side
    (all published zooms are such multiples). Interpolating the arange's stop and step instead changes the
    number of zooms in steps, and the change did not grow monotonically.
    """

    @staticmethod
    def factors(severity: int) -> np.ndarray:
        """The zoom factors of a published level (the reference's np.arange)."""
        return np.arange(*ZOOM_FACTORS[int(severity) - 1])

    def corrupt(self, image, severity, params):
        h, w = image.shape[:2]
        # uint8 warps (OpenCV's fixed-point path) summed in float32: each layer is rounded to the
        # nearest level, and the mean of 11-16 layers averages that rounding away. Four-channel
        # images take OpenCV's vectorised path: 3x faster per warp than three channels.
        rgba = cv2.cvtColor(image, cv2.COLOR_RGB2RGBA)
        layer = np.empty_like(rgba)
        if not is_whole(severity):
            identity, layers = _zoom_between_matrices(h, w, severity)
            total = rgba.astype(np.float32)
            total *= identity
            for matrix, weight in layers:
                cv2.warpAffine(rgba, matrix, (w, h), dst=layer, flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
                total += np.float32(weight) * layer
            return to_uint8(cv2.cvtColor(total, cv2.COLOR_RGBA2RGB))
        factors = self.factors(severity)
        total = rgba.astype(np.float32)
        total *= 2.0  # the image itself and the zoom by 1.0 (factors[0]), which is the identity
        for matrix in _zoom_matrices(h, w, int(severity)):
            cv2.warpAffine(rgba, matrix, (w, h), dst=layer, flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
            cv2.accumulate(layer, total)
        out = cv2.cvtColor(total, cv2.COLOR_RGBA2RGB)  # contiguous: numpy on a strided view is 10x slower
        out *= 1.0 / (len(factors) + 1)
        return to_uint8(out)

    def corrupt_tensor(self, x, severity, params):
        import torch
        import torch.nn.functional as F

        n, c, h, w = x.shape
        if is_whole(severity):
            factors = self.factors(severity)
            weights = [(float(f), 1.0) for f in factors[1:]]
            identity, scale = 2.0, 1.0 / (len(factors) + 1)  # the image and the zoom by 1.0
        else:
            identity, weights = zoom_weights(severity)
            scale = 1.0
        xf = x.float()
        total = xf * identity
        for factor, weight in weights:
            # published zooms and multiples of 0.01 only: the device keeps a bounded set of grids
            grid = on_device(x.device, ("zoom", h, w, factor),
                             lambda f=factor: warp_grid((h, w), (h, w), zoom_crop_matrix((h, w), f)))
            layer = F.grid_sample(xf, grid.expand(n, h, w, 2), mode="bilinear", padding_mode="border", align_corners=True)
            layer = torch.round(layer)  # the numpy path warps in uint8: each layer rounded to a level
            total += layer if weight == 1.0 else layer * weight
        total *= scale
        return trunc(total)


@lru_cache(maxsize=64)
def _zoom_matrices(h: int, w: int, severity: int) -> tuple[np.ndarray, ...]:
    factors = ZoomBlur.factors(severity)
    assert factors[0] == 1.0
    return tuple(zoom_crop_matrix((h, w), factor) for factor in factors[1:])


ZOOM_GRID = 0.01  # every published zoom factor is a multiple of this above 1


def _zoom_quantiles(level: int) -> list[tuple[Fraction, float]]:
    """A published level's zooms as (upper end of its quantile range, factor): the image itself twice
    (itself and the zoom by 1.0), every other zoom once, out of n + 1."""
    factors = np.arange(*ZOOM_FACTORS[level])
    n = len(factors)
    return [(Fraction(2, n + 1), 1.0)] + [(Fraction(k + 1, n + 1), float(f)) for k, f in enumerate(factors[1:], start=2)]


@lru_cache(maxsize=64)
def zoom_weights(severity: float) -> tuple[float, tuple[tuple[float, float], ...]]:
    """(weight of the image itself, ((zoom, weight), ...)) of zoom blur between published levels.

    Displacement interpolation of the two levels' distributions of zoom: over each range of quantiles on
    which both are constant, the zoom is (1 - t) * level i's + t * level j's; a zoom between two multiples of
    ``ZOOM_GRID`` is split between them linearly. The reference crops to whole pixels, so zooms off that
    grid make the result jitter as they move; the grid's own are the published ones. Weights sum to 1.
    """
    i, j, t = between(severity, len(ZOOM_FACTORS))
    a, b = _zoom_quantiles(i), _zoom_quantiles(j)
    cuts = sorted({Fraction(0)} | {q for q, _ in a} | {q for q, _ in b})
    grid: dict[int, float] = {}
    ia = ib = 0
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        while a[ia][0] <= lo:
            ia += 1
        while b[ib][0] <= lo:
            ib += 1
        zoom = (1.0 - t) * a[ia][1] + t * b[ib][1]
        x = round((zoom - 1.0) / ZOOM_GRID, 9)
        k = math.floor(x)
        for cell, share in ((k, 1.0 - (x - k)), (k + 1, x - k)):
            if share > 0:
                grid[cell] = grid.get(cell, 0.0) + float(hi - lo) * share
    identity = grid.pop(0, 0.0)
    return identity, tuple((1.0 + k * ZOOM_GRID, weight) for k, weight in sorted(grid.items()))


@lru_cache(maxsize=64)
def _zoom_between_matrices(h: int, w: int, severity: float) -> tuple[float, tuple[tuple[np.ndarray, float], ...]]:
    identity, weights = zoom_weights(severity)
    return identity, tuple((zoom_crop_matrix((h, w), f), weight) for f, weight in weights)


@SHIFTS.register("gaussian_blur", description="Gaussian blur (ImageNet-C extra)", group="extra")
class GaussianBlur(Corruption):
    """Gaussian blur (ImageNet-C extra): sigma 1..6 px, edges replicated.

    Continuous severity: sigma linear between the published levels (a real number; the kernel radius follows it).
    """

    def corrupt(self, image, severity, params):
        return to_uint8(gaussian_blur_like_skimage(image.astype(np.float32), gaussian_sigma(severity)))

    def corrupt_tensor(self, x, severity, params):
        return trunc(gaussian_blur_tensor(x.float(), gaussian_sigma(severity)))
