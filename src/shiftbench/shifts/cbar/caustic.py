"""Caustic refraction (ImageNet-C-bar): the image seen through a rippled water surface lit by caustics.

The reference evaluates a caustic kernel, a lens normal, Snell's law and a bilinear sample once per
pixel in Python. Here every step is one array expression over the whole pixel grid (numpy on the
CPU, torch on the tensor's device, float64 on both, the reference's operations in its order), so
the two paths and the reference agree to the last grey level but for rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...registry import SHIFTS
from ..corruptions._torch import pad_border
from ._base import CBarCorruption, float_parameter

__all__ = ["CausticRefraction"]

TWO_PI = 6.28318530718  # the reference's literal, not math.tau
INTENSITY = 0.005  # the kernel's ``inten``
ITERATIONS = 5
FLAT = 1.0 - 1e-3  # |cos| of the incidence angle at and above which the ray passes unbent
LUMA = (0.2126, 0.7152, 0.0722)
CHUNK = 64  # images per pass of the tensor path (bounds its float64 temporaries)


def caustic_field(xp: Any, rows: Any, cols: Any, time: Any, size: Any) -> Any:
    """The caustic kernel at every pixel: (..., H, W) intensities in 0..1 (before softening).

    ``rows`` (H, 1) and ``cols`` (1, W) are the float64 pixel coordinates; ``time`` and ``size`` are
    scalars or broadcast over leading axes. ``xp`` is numpy or torch.
    """
    p0 = (rows / size) % 1.0 * TWO_PI - 250.0
    p1 = (cols / size) % 1.0 * TWO_PI - 250.0
    i0, i1 = p0, p1  # (H, 1) and (1, W): the first step stays separable
    c = 1.0
    for n in range(ITERATIONS):
        t = time * (1.0 - (3.5 / (n + 1)))
        i0, i1 = p0 + (xp.cos(t - i0) + xp.sin(t + i1)), p1 + (xp.sin(t - i1) + xp.cos(t + i0))
        length = xp.sqrt((p0 / (xp.sin(i0 + t) / INTENSITY)) ** 2 + (p1 / (xp.cos(i1 + t) / INTENSITY)) ** 2)
        c = c + 1.0 / length
    c = c / 5.0
    c = 1.17 - c**1.4
    return (abs(c) ** 8.0).clip(0, 1)


def luma(field: Any) -> Any:
    """The reference's luma of a grey pixel (field, field, field): its dot with the Rec. 709 weights."""
    return field * LUMA[0] + field * LUMA[1] + field * LUMA[2]


def refraction(xp: Any, padded: Any, eta: Any, lens_scale: Any, lighting_amount: Any) -> tuple[Any, Any, Any]:
    """(row displacement, column displacement, lighting) of every pixel from the zero-padded luma.

    ``padded`` is (..., H+2, W+2): the caustics' luma with a one-pixel border of zeros (a neighbour
    outside the image reads 0). The lens normal is (L[y+1,x] - L[y-1,x], L[y,x+1] - L[y,x-1], 1),
    normalised; the vertical ray (0, 0, 1) refracts through it by Snell's law with ``eta`` unless
    the normal is within 1e-3 of vertical (then it passes unbent), and its first two components
    times ``lens_scale``, rounded to 3 decimals, displace the sample.
    """
    north = padded[..., 1:-1, :-2]  # the reference's names: offset (0, -1) is the left neighbour
    south = padded[..., 1:-1, 2:]
    west = padded[..., :-2, 1:-1]  # offset (-1, 0): the row above
    east = padded[..., 2:, 1:-1]
    a = east - west
    b = south - north
    norm = xp.sqrt(a * a + b * b + 1.0)
    n0, n1, n2 = a / norm, b / norm, 1.0 / norm
    flat = abs(n2) >= FLAT
    out_angle = xp.arcsin(xp.sin(xp.arccos(n2)) / eta)
    # the basis (normal, normal x spectator, spectator), spectator = (0, 0, 1) x normal, normalised;
    # the refracted ray is (cos, sin, 0) in it: cos * normal + sin * (normal x spectator)
    r = xp.sqrt(n1 * n1 + n0 * n0)
    r = xp.where(flat, 1.0, r)  # the unbent rays never read it: keeps 0/0 out
    s0, s1 = -n1 / r, n0 / r
    o0, o1 = -(n2 * s1), n2 * s0
    co, so = xp.cos(out_angle), xp.sin(out_angle)
    v0 = xp.where(flat, 0.0, co * n0 + so * o0)
    v1 = xp.where(flat, 0.0, co * n1 + so * o1)
    dy = xp.round(v0 * lens_scale * 1000.0) / 1000.0  # np.round(v, 3): rint(v * 1000) / 1000
    dx = xp.round(v1 * lens_scale * 1000.0) / 1000.0
    return dy, dx, ((north - south) * lighting_amount, (east - west) * lighting_amount)


def bilinear_weights(xp: Any, py: Any, px: Any) -> tuple[Any, Any, Any, Any, Any, Any]:
    """Top row, left column and the four weights of the reference's bilinear sample at (py, px)."""
    top, left = xp.floor(py), xp.floor(px)
    w_top = 1.0 - py + top
    w_bottom = 1.0 - (top + 1.0) + py
    w_left = 1.0 - px + left
    w_right = 1.0 - (left + 1.0) + px
    return top, left, w_top, w_bottom, w_left, w_right


def gaussian_taps(sigma: float, truncate: float = 4.0) -> np.ndarray:
    """scipy.ndimage's Gaussian kernel (radius int(truncate * sigma + 0.5)), float64."""
    radius = int(truncate * float(sigma) + 0.5)
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    phi = np.exp(-0.5 / float(sigma) ** 2 * x**2)
    return phi / phi.sum()


def param_values(params: dict[str, Any]) -> tuple[float, ...]:
    """(time, size, eta, lens_scale, lighting_amount, softening) of a record, as floats."""
    return tuple(float(params[k]) for k in ("time", "size", "eta", "lens_scale", "lighting_amount", "softening"))


@SHIFTS.register(
    "caustic_refraction", description="Image refracted through a caustic water surface (ImageNet-C-bar)", group="cbar"
)
class CausticRefraction(CBarCorruption):
    """Caustic refraction (ImageNet-C-bar): the image seen through water, displaced and lit by caustics.

    A caustic field C(y, x) in 0..1 is the reference's iterated kernel (5 steps) at p = 2*pi*((y, x) /
    size mod 1) - 250 with the phase ``time``, Gaussian-softened (sigma ``softening``, scipy's
    reflect border). From the luma L of C, each pixel's lens normal is n ~ (L[y+1,x] - L[y-1,x],
    L[y,x+1] - L[y,x-1], 1) (neighbours outside the image read 0); the vertical ray refracts through
    it by Snell's law with ``eta`` (not at all when n_z >= 1 - 1e-3) and ``lens_scale`` times its
    (row, column) part, rounded to 3 decimals, displaces the sample. The output is the bilinear
    sample of the image (in 0..1; corners outside the image read 0) at the displaced point plus
    ``lighting_amount`` * ((L[y,x-1] - L[y,x+1]) + (L[y+1,x] - L[y-1,x])) on every channel, clipped to
    0..1, times 255, truncated.

    Draws: ``time`` ~ U(0.5, 2), ``size`` ~ U(0.75, 1.25) * im_size. Fixed: ``eta`` = 4, ``softening`` = 1.
    Severities 1..5 (levels 2.35, 3.2, 4.9, 6.6, 9.15): ``lens_scale`` = level * 0.05 * im_size
    = 0.1175, 0.16, 0.245, 0.33, 0.4575 x im_size (26.3 .. 102.5 px at 224); ``lighting_amount``
    = level * 0.2 = 0.47, 0.64, 0.98, 1.32, 1.83.

    Non-square images: im_size is the shorter side min(H, W) (for ``size`` and ``lens_scale``); the
    field, the normals and the samples are computed at every pixel of the H x W grid at its own
    (row, column) position, each axis bounded by its own size. A square image is the reference's.
    """

    def sample_parameters(self, shape, level, rng):
        im_size = min(int(shape[0]), int(shape[1]))
        time = float(rng.uniform(0.5, 2.0))
        size = float(rng.uniform(0.75, 1.25)) * im_size
        return {
            "time": time,
            "size": size,
            "eta": 4.0,
            "lens_scale": float_parameter(level, 0.5 * im_size),
            "lighting_amount": float_parameter(level, 2.0),
            "softening": 1,
        }

    def transform(self, image, params):
        from scipy.ndimage import gaussian_filter

        time, size, eta, lens_scale, lighting_amount, softening = param_values(params)
        h, w = image.shape[:2]
        rows = np.arange(h, dtype=np.float64)[:, None]
        cols = np.arange(w, dtype=np.float64)[None, :]
        field = caustic_field(np, rows, cols, time, size)
        field = gaussian_filter(field, sigma=softening)  # the reference's filter of its 3 equal planes
        padded = np.pad(luma(field), 1)
        dy, dx, (light_a, light_b) = refraction(np, padded, eta, lens_scale, lighting_amount)

        py, px = rows + dy, cols + dx
        top, left, w_top, w_bottom, w_left, w_right = bilinear_weights(np, py, px)
        # a black margin wider than the largest displacement: every corner outside the image reads 0
        margin = int(np.ceil(max(np.abs(dy).max(), np.abs(dx).max()))) + 2
        wide = w + 2 * margin
        pixels = np.zeros((h + 2 * margin, wide, 3), dtype=np.float64)
        pixels[margin : margin + h, margin : margin + w] = image.astype(np.float32) / np.float32(255)
        pixels = pixels.reshape(-1, 3)
        index = (top.astype(np.int64) + margin) * wide + (left.astype(np.int64) + margin)
        w_left, w_right, w_top, w_bottom = (a[..., None] for a in (w_left, w_right, w_top, w_bottom))
        upper = pixels[index] * w_left + pixels[index + 1] * w_right
        lower = pixels[index + wide] * w_left + pixels[index + wide + 1] * w_right
        out = upper * w_top + lower * w_bottom
        out += light_a[..., None]
        out += light_b[..., None]
        np.clip(out, 0.0, 1.0, out=out)
        out *= 255.0
        return out.astype(np.uint8)

    def corrupt_tensor(self, x, severity, params):
        import torch

        out = torch.empty_like(x)
        for start in range(0, x.shape[0], CHUNK):
            part = slice(start, start + CHUNK)
            out[part] = self._refract_tensor(x[part], params[part])
        return out

    def _refract_tensor(self, x, params):
        import torch

        n, _, h, w = x.shape
        dev, f64 = x.device, torch.float64
        values = torch.tensor([param_values(p) for p in params], dtype=f64, device=dev).view(n, 6, 1, 1)
        time, size, eta, lens_scale, lighting_amount = (values[:, k] for k in range(5))
        rows = torch.arange(h, dtype=f64, device=dev).view(h, 1)
        cols = torch.arange(w, dtype=f64, device=dev).view(1, w)
        field = caustic_field(torch, rows, cols, time, size)  # (N, H, W)

        softening = [float(p["softening"]) for p in params]
        for sigma in sorted(set(softening)):
            if sigma <= 1e-15:  # scipy skips such an axis
                continue
            pick = [i for i, s in enumerate(softening) if s == sigma]
            taps = gaussian_taps(sigma)
            radius = len(taps) // 2
            plane = field[pick]
            for axis in (-2, -1):  # scipy's order: rows, then columns
                pad = (radius, radius, 0, 0) if axis == -2 else (0, 0, radius, radius)
                src = pad_border(plane, *pad, mode="reflect")
                size_ = plane.shape[axis]
                acc = torch.zeros_like(plane)
                for k, tap in enumerate(taps):
                    acc += float(tap) * src.narrow(axis, k, size_)
                plane = acc
            field[pick] = plane

        padded = torch.nn.functional.pad(luma(field), (1, 1, 1, 1))
        dy, dx, (light_a, light_b) = refraction(torch, padded, eta, lens_scale, lighting_amount)

        top, left, w_top, w_bottom, w_left, w_right = bilinear_weights(torch, rows + dy, cols + dx)
        top, left = top.long(), left.long()
        pixels = (x.float() / 255.0).to(f64).reshape(n, 3, h * w)

        def corner(r, c):
            inside = ((r >= 0) & (r < h) & (c >= 0) & (c < w)).unsqueeze(1)
            index = (r.clamp(0, h - 1) * w + c.clamp(0, w - 1)).reshape(n, 1, h * w).expand(n, 3, h * w)
            return pixels.gather(2, index).reshape(n, 3, h, w) * inside

        w_top, w_bottom, w_left, w_right = (t.unsqueeze(1) for t in (w_top, w_bottom, w_left, w_right))
        upper = corner(top, left) * w_left + corner(top, left + 1) * w_right
        lower = corner(top + 1, left) * w_left + corner(top + 1, left + 1) * w_right
        out = upper * w_top + lower * w_bottom
        out += light_a.unsqueeze(1)
        out += light_b.unsqueeze(1)
        return (out.clamp_(0.0, 1.0) * 255.0).to(torch.uint8)
