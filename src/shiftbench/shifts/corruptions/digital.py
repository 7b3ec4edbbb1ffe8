"""Digital corruptions: contrast, elastic_transform, pixelate, jpeg_compression (ImageNet-C) and saturate (extra).

Severity is a dial over 1..5: whole severities are the published levels (same bytes as ever), in
between each class docstring states how its parameter moves from one level to the next
(``shiftbench.severity.interpolate``).

The tensor paths (``corrupt_tensor``) read the numpy paths' tables and fields on the tensor's device;
JPEG has no device codec with libjpeg-turbo's bytes and is encoded on the CPU.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import cv2
import numpy as np

from ...registry import SHIFTS
from ...severity import between, interpolate, is_whole
from ._common import Corruption, draw_seed, gaussian_blur_like_skimage, noise_rng, to_uint8
from ._torch import on_device, trunc

__all__ = ["Contrast", "ElasticTransform", "Pixelate", "JpegCompression", "Saturate"]

CONTRAST = (0.4, 0.3, 0.2, 0.1, 0.05)
ELASTIC_ALPHA = (250 * 0.05, 250 * 0.065, 250 * 0.085, 250 * 0.1, 250 * 0.12)
PIXELATE = (0.6, 0.5, 0.4, 0.3, 0.25)
JPEG_QUALITY = (25, 18, 15, 10, 7)
SATURATE = ((0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (20, 0.2))  # (saturation gain, offset)


def _kept_on_device(device, key: tuple[Any, ...], severity, make):
    """``on_device`` for tables of whole severities (a handful, kept); tables of in-between severities are
    moved over each call, so that a stream of dial values does not grow the device cache without bound."""
    if is_whole(severity):
        return on_device(device, key, make)
    import torch

    return torch.from_numpy(np.ascontiguousarray(make())).to(device)


def _bayer(n: int) -> np.ndarray:
    """The n x n ordered-dither (Bayer) matrix: ranks 0..n*n-1, each run of ranks spread evenly over the tile."""
    m = np.zeros((1, 1), dtype=np.int64)
    while m.shape[0] < n:
        m = np.block([[4 * m, 4 * m + 2], [4 * m + 3, 4 * m + 1]])
    return m


DITHER = (_bayer(16) + 0.5) / 256.0  # a pixel's rank in the tile as a fraction: it switches when t passes it


@lru_cache(maxsize=16)
def dither_thresholds(height: int, width: int) -> np.ndarray:
    """``DITHER`` tiled over an image of ``height`` x ``width`` (float64, read-only: shared by the cache)."""
    tiled = np.ascontiguousarray(DITHER[np.arange(height)[:, None] % 16, np.arange(width)[None, :] % 16])
    tiled.flags.writeable = False
    return tiled


def ordered_switch(low: np.ndarray, high: np.ndarray, t: float) -> np.ndarray:
    """Two levels' HxWx3 outputs mixed pixel by pixel: where the dither threshold is below ``t`` the pixel is
    ``high``'s, elsewhere ``low``'s (a fraction t of every 16 x 16 tile; a pixel once switched stays switched)."""
    take = dither_thresholds(*low.shape[:2]) < t
    return np.where(take[..., None], high, low)


def ordered_switch_tensor(low, high, t: float):
    """``ordered_switch`` on uint8 (N, 3, H, W) tensors: the same pixels."""
    import torch

    h, w = low.shape[2:]
    take = on_device(low.device, ("dither", h, w), lambda: dither_thresholds(h, w).copy()) < t
    return torch.where(take, high, low)


def ordered_fade(low: np.ndarray, high: np.ndarray, t: float) -> np.ndarray:
    """Two levels' HxWx3 outputs cross-faded, ``low + (high - low) * t`` rounded by the dither threshold of
    each pixel (floor(x + threshold)): unbiased in the mean, so the fade moves evenly; each value moves
    monotonically from ``low``'s to ``high``'s as t grows, exact at t = 0 and 1."""
    base = low.astype(np.int16)
    step = np.floor(t * (high.astype(np.float64) - base) + dither_thresholds(*low.shape[:2])[..., None])
    return (base + step).astype(np.uint8)


def ordered_fade_tensor(low, high, t: float):
    """``ordered_fade`` on uint8 (N, 3, H, W) tensors, in the same float64 arithmetic: the same values."""
    import torch

    h, w = low.shape[2:]
    thresholds = on_device(low.device, ("dither", h, w), lambda: dither_thresholds(h, w).copy())
    base = low.to(torch.float64)
    return (base + torch.floor(t * (high.to(torch.float64) - base) + thresholds)).to(torch.uint8)


@SHIFTS.register("contrast", description="Contrast reduced towards the channel means (ImageNet-C)", group="digital")
class Contrast(Corruption):
    """Contrast (ImageNet-C): (x - mean) * c + mean per channel, c = 0.4..0.05.

    In between levels c moves linearly (severity 4.5 keeps 0.075 of the contrast).

    The map is per channel and per value, so it runs as a 256-entry table per channel, computed
    with the reference's own float64 expression and applied in the same compiled pass.
    """

    def corrupt(self, image, severity, params):

        means = np.array(cv2.mean(image)[:3], dtype=np.float64) / 255.0
        out = np.empty_like(image)
        from ._kernels import contrast_pass  # deferred: start-up cost (pulls numba)
        contrast_pass(image, means, float(interpolate(CONTRAST, severity)), out)  # the tables and their reads, one pass
        return out

    def corrupt_tensor(self, x, severity, params):
        import torch

        n, c, h, w = x.shape
        c_ = float(interpolate(CONTRAST, severity))
        flat = x.reshape(n, c, h * w)
        means = flat.to(torch.float64).mean(dim=2, keepdim=True) / 255.0  # (N, 3, 1), as cv2.mean
        levels = torch.arange(256, device=x.device, dtype=torch.float64).view(1, 1, 256) / 255.0
        table = (((levels - means) * c_ + means).clamp_(0.0, 1.0) * 255.0).to(torch.uint8)  # (N, 3, 256), the reference's float64
        return table.gather(2, flat.to(torch.int64)).reshape(n, c, h, w)


@SHIFTS.register("elastic_transform", description="Smooth random elastic warp (ImageNet-C)", group="digital")
class ElasticTransform(Corruption):
    """Elastic transform (ImageNet-C): uniform displacement noise, Gaussian-smoothed, bilinear remap.

    Smoothing sigma (1% of each side) and displacement range (0.5% of the height) scale with the
    image, as in the reference. In between levels the displacement gain alpha moves linearly; the
    noise is the same at every severity, so the warp grows along the same field.
    """

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        return {"noise_seed": draw_seed(rng)}

    def displacement(self, shape: tuple[int, ...], severity: int, params: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """(dx, dy) in pixels: column and row displacement of every output pixel."""
        h, w = shape[:2]
        alpha = interpolate(ELASTIC_ALPHA, severity)
        max_shift = h * 0.005
        rng = noise_rng(params)
        fields = []
        for _ in range(2):  # dx first, then dy, as the reference draws them
            field = rng.random((h, w), dtype=np.float32)
            field *= 2.0 * max_shift
            field -= max_shift
            field = gaussian_blur_like_skimage(field, (0.01 * h, 0.01 * w), truncate=3.0, border=cv2.BORDER_REFLECT)
            field *= alpha
            fields.append(field)
        return fields[0], fields[1]

    def corrupt(self, image, severity, params):
        h, w = image.shape[:2]
        dx, dy = self.displacement(image.shape, severity, params)
        dx += np.arange(w, dtype=np.float32)[None, :]
        dy += np.arange(h, dtype=np.float32)[:, None]
        # four channels take OpenCV's vectorised remap path: 2x faster than three
        rgba = cv2.cvtColor(image, cv2.COLOR_RGB2RGBA).astype(np.float32)
        out = cv2.remap(rgba, dx, dy, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
        return to_uint8(cv2.cvtColor(out, cv2.COLOR_RGBA2RGB))

    def corrupt_tensor(self, x, severity, params):
        import torch
        import torch.nn.functional as F

        n, _, h, w = x.shape
        grids = np.empty((n, h, w, 2), dtype=np.float32)
        for i, p in enumerate(params):  # the displacement fields: drawn and smoothed from the seed on the CPU
            dx, dy = self.displacement((h, w), severity, p)
            # source positions, normalised for align_corners=False
            sx = dx + np.arange(w, dtype=np.float32)[None, :]
            sy = dy + np.arange(h, dtype=np.float32)[:, None]
            grids[i, ..., 0] = (2.0 * sx + 1.0) / w - 1.0
            grids[i, ..., 1] = (2.0 * sy + 1.0) / h - 1.0
        grid = torch.from_numpy(grids).to(x.device)
        # "reflection" with align_corners=False mirrors about the outer pixel edges: OpenCV's BORDER_REFLECT
        out = F.grid_sample(x.float(), grid, mode="bilinear", padding_mode="reflection", align_corners=False)
        return trunc(out)


@lru_cache(maxsize=64)
def box_coefficients(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pillow's BOX-filter resampling weights for in_size -> out_size, as 22-bit fixed point.

    Follows Pillow's Resample.c: the box of width ``scale`` centred on each output pixel,
    weights normalised in double precision, then rounded to integers of 2**22. Returns
    (first tap, tap count, weights) per output pixel, zero weights trimmed.
    """
    scale = in_size / out_size
    support = 0.5 * max(scale, 1.0)
    inv = 1.0 / max(scale, 1.0)
    taps = int(math.ceil(support)) * 2 + 1
    starts = np.zeros(out_size, dtype=np.int64)
    counts = np.zeros(out_size, dtype=np.int64)
    coeffs = np.zeros((out_size, taps), dtype=np.int32)
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        weights = [1.0 if -0.5 < (x + lo - center + 0.5) * inv <= 0.5 else 0.0 for x in range(hi - lo)]
        total = sum(weights)
        fixed = [int(0.5 + (w / total if total else w) * (1 << 22)) for w in weights]
        used = [i for i, k in enumerate(fixed) if k]
        if used:
            first, last = used[0], used[-1]
            starts[xx], counts[xx] = lo + first, last - first + 1
            coeffs[xx, : last - first + 1] = fixed[first : last + 1]
    return starts, counts, coeffs


def box_downscale(image: np.ndarray, out_w: int, out_h: int) -> np.ndarray:
    """Pillow's ``resize((out_w, out_h), BOX)`` for uint8 RGB, bit for bit: columns, then rows."""

    h, w = image.shape[:2]
    columns = np.empty((h, out_w, 3), dtype=np.uint8)
    from ._kernels import resample_columns, resample_lines  # deferred: start-up cost (pulls numba)
    resample_columns(image, *box_coefficients(w, out_w), columns)
    out = np.empty((out_h, out_w, 3), dtype=np.uint8)
    resample_lines(columns.reshape(h, out_w * 3), *box_coefficients(h, out_h), out.reshape(out_h, out_w * 3))
    return out


def _box_pass_tensor(x, starts: np.ndarray, counts: np.ndarray, coeffs: np.ndarray, axis: int):
    """Pillow's 8-bit BOX resampling along ``axis`` of an int64 tensor: 22-bit fixed-point taps from a
    rounding offset of 2**21, shifted right by 22 and clamped (bit for bit as the numpy kernels)."""
    import torch

    size = x.shape[axis]
    acc = None
    for t in range(int(counts.max())):
        index = torch.from_numpy(np.minimum(starts + t, size - 1)).to(x.device)
        k = torch.from_numpy(np.where(t < counts, coeffs[:, t], 0).astype(np.int64)).to(x.device)
        shape = [1] * x.ndim
        shape[axis] = -1
        term = x.index_select(axis, index) * k.view(shape)
        acc = term if acc is None else acc + term
    return ((acc + (1 << 21)) >> 22).clamp_(0, 255)


@lru_cache(maxsize=64)
def _nearest_exact(in_size: int, out_size: int) -> np.ndarray:
    """Source index of every output pixel of OpenCV's INTER_NEAREST_EXACT resize: floor((dst + 0.5) * in / out)."""
    probe = cv2.resize(np.arange(in_size, dtype=np.float32)[None, :], (out_size, 1), interpolation=cv2.INTER_NEAREST_EXACT)
    return probe[0].astype(np.int64)


@SHIFTS.register("pixelate", description="Box downscale then nearest upscale (ImageNet-C)", group="digital")
class Pixelate(Corruption):
    """Pixelate (ImageNet-C): box-filter down to 0.6..0.25 of the size, nearest-neighbour back.

    The downscale reproduces Pillow's BOX resampling (the reference's) in a compiled kernel, the
    upscale is OpenCV's pixel-centre nearest neighbour (Pillow's NEAREST picks the same pixels):
    identical output, without Pillow's image copies.

    In between levels a fraction t of the pixels (an ordered 16 x 16 Bayer dither, ``ordered_switch``) take
    the next level's pixelation, the rest the previous level's. The small size is a whole number of pixels
    and the change is not monotone in it (on 224 px photos blocks of 224/128 change them more than 224/126),
    so no scale between the levels' gives a monotone dial.
    """

    def corrupt(self, image, severity, params):
        i, j, t = between(severity, len(PIXELATE))
        if i != j:
            return ordered_switch(self.corrupt(image, i + 1, params), self.corrupt(image, j + 1, params), t)
        c = PIXELATE[i]
        h, w = image.shape[:2]
        small = box_downscale(image, int(w * c), int(h * c))
        return cv2.resize(small, (w, h), interpolation=cv2.INTER_NEAREST_EXACT)

    def corrupt_tensor(self, x, severity, params):
        import torch

        i, j, t = between(severity, len(PIXELATE))
        if i != j:
            return ordered_switch_tensor(self.corrupt_tensor(x, i + 1, params), self.corrupt_tensor(x, j + 1, params), t)
        c = PIXELATE[i]
        n, _, h, w = x.shape
        out_w, out_h = int(w * c), int(h * c)
        small = _box_pass_tensor(x.to(torch.int64), *box_coefficients(w, out_w), axis=3)
        small = _box_pass_tensor(small, *box_coefficients(h, out_h), axis=2)
        # OpenCV's INTER_NEAREST_EXACT back up: source = floor((dst + 0.5) * in / out)
        rows = torch.from_numpy(_nearest_exact(out_h, h)).to(x.device)
        cols = torch.from_numpy(_nearest_exact(out_w, w)).to(x.device)
        return small.index_select(2, rows).index_select(3, cols).to(torch.uint8)


@SHIFTS.register("jpeg_compression", description="JPEG re-encoding at quality 25..7 (ImageNet-C)", group="digital")
class JpegCompression(Corruption):
    """JPEG compression (ImageNet-C): encode at quality 25, 18, 15, 10, 7 (4:2:0) and decode.

    In between levels the quality, a whole number, moves linearly and is rounded half up (severity 1.5
    encodes at 22): it steps down one quality at a time, never up.

    OpenCV's libjpeg-turbo gives the same bytes as the reference's Pillow encoder here
    (tests/shifts/test_corruptions_reference.py checks it) in about 2/3 of the time, mostly saved
    in copies between Pillow and numpy.
    """

    def corrupt(self, image, severity, params):
        ok, encoded = cv2.imencode(
            ".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality(severity)]
        )
        if not ok:  # pragma: no cover - OpenCV always encodes a uint8 RGB image
            raise RuntimeError("OpenCV failed to encode a JPEG")
        if _IMREAD_RGB is not None:
            return cv2.imdecode(encoded, _IMREAD_RGB)
        return cv2.cvtColor(cv2.imdecode(encoded, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)

    def corrupt_tensor(self, x, severity, params):
        import torch

        # no device JPEG codec gives libjpeg-turbo's bytes: encode and decode on the CPU, per image
        hwc = x.permute(0, 2, 3, 1).contiguous().cpu().numpy()
        out = np.stack([self.corrupt(im, severity, p) for im, p in zip(hwc, params)])
        return torch.from_numpy(out).to(x.device).permute(0, 3, 1, 2).contiguous()


def jpeg_quality(severity: float) -> int:
    """The JPEG quality at ``severity``: the published ones at the levels, linear and rounded half up between."""
    return int(interpolate(JPEG_QUALITY, severity, "lerp-round"))


_IMREAD_RGB = getattr(cv2, "IMREAD_COLOR_RGB", None)  # OpenCV >= 4.10 decodes straight to RGB


def _saturates(level: int) -> bool:
    gain, offset = SATURATE[level - 1]
    return gain > 1 or offset > 0


@SHIFTS.register("saturate", description="HSV saturation scaled (ImageNet-C extra)", group="extra")
class Saturate(Corruption):
    """Saturate (ImageNet-C extra): HSV saturation * a + b, hue and value kept.

    With hue and value fixed each channel moves along its line to the maximum channel:
    ch' = V - (V - ch) * S'/S; grey pixels take the reference's hue 0 (red) when b > 0.

    In between levels a and b move linearly, except from 2 to 3, where the levels go from desaturating
    (a = 0.1) to saturating (a = 2): any gain between passes through the unchanged image, so there a
    fraction t of the pixels (an ordered 16 x 16 Bayer dither, the same pixels at every t before them)
    take level 3's output and the rest level 2's.
    """

    @staticmethod
    def _dither(severity) -> tuple[int, int, float] | None:
        """(level, level, t) where ``severity`` lies strictly between a desaturating and a saturating level."""
        i, j, t = between(severity, len(SATURATE))
        return (i + 1, j + 1, t) if _saturates(i + 1) != _saturates(j + 1) else None

    def corrupt(self, image, severity, params):

        mixed = self._dither(severity)
        if mixed is not None:
            low, high, t = mixed
            return ordered_switch(self.corrupt(image, low, params), self.corrupt(image, high, params), t)
        out = np.empty_like(image)
        from ._kernels import saturate_pass  # deferred: start-up cost (pulls numba)
        saturate_pass(image, *saturate_tables(severity), out)  # one pass, one table read per pixel
        return out

    def corrupt_tensor(self, x, severity, params):
        import torch

        mixed = self._dither(severity)
        if mixed is not None:
            low, high, t = mixed
            return ordered_switch_tensor(self.corrupt_tensor(x, low, params), self.corrupt_tensor(x, high, params), t)
        factors = _kept_on_device(x.device, ("saturate", severity), severity, lambda: saturate_tables(severity)[0])
        grey = _kept_on_device(x.device, ("saturate-grey", severity), severity, lambda: saturate_tables(severity)[1])
        v = x.amax(dim=1, keepdim=True)
        spread = (v - x.amin(dim=1, keepdim=True)).to(torch.int64)
        vi = v.to(torch.int64)
        factor = factors[(vi << 8) | spread]
        value = v.float()
        moved = trunc(value - (value - x.float()) * factor)
        grey_pixel = torch.cat([x[:, 0:1], grey[vi], grey[vi]], dim=1)
        return torch.where(spread > 0, moved, grey_pixel)


@lru_cache(maxsize=64)
def saturate_tables(severity: float) -> tuple[np.ndarray, np.ndarray]:
    """(factors, grey) of saturate at ``severity``, in the float32 arithmetic of the per-pixel form:
    ``factors[(V << 8) | spread]`` = clip((spread / V) * gain + offset, 0, 1) * V / spread for
    0 < spread <= V, and ``grey[V]`` = the green and blue level of a grey pixel of value V (V itself,
    or V * (1 - clip(offset)) when the offset gives greys hue 0), truncated as the reference does.
    Gain and offset are the levels' linearly interpolated (``Saturate`` dithers levels 2 and 3 instead)."""
    gain, offset = interpolate(SATURATE, severity, "float")
    value = np.arange(256, dtype=np.float32)[:, None]
    spread = np.arange(256, dtype=np.float32)[None, :]
    valid = (spread > 0) & (spread <= value)
    with np.errstate(divide="ignore", invalid="ignore"):
        new = np.clip((spread / value) * np.float32(gain) + np.float32(offset), 0.0, 1.0).astype(np.float32)
        factors = np.where(valid, new * value / spread, np.float32(0.0)).astype(np.float32).reshape(-1)
    grey_new = np.float32(min(max(offset, 0.0), 1.0))
    levels = np.arange(256, dtype=np.float32)
    grey = levels * (np.float32(1.0) - grey_new) if offset > 0 else levels
    return np.ascontiguousarray(factors), np.clip(grey, 0, 255).astype(np.uint8)
