"""The corruptions on batches of torch tensors: (N, 3, H, W) uint8 in, the same out, on the input's device.

Every corruption here takes the params of the numpy path (drawn by the same per-sample generators,
so a seed and a replay mean the same thing on both paths) and gives the numpy path's output within
a fraction of a grey level (tests/test_corruptions_torch.py holds every corruption and severity to a
mean absolute difference under 1 per image). Pixel arithmetic runs on the tensor's device. What is
drawn from a recorded seed is drawn where the numpy path draws it, on the CPU from the same PCG64
stream, and moved to the device as random words or fields: the noise words, the snow and spatter
noise, the fog fractal and the elastic displacement. Two steps have no device form and run on the
CPU per image: glass blur's sequential pixel shuffle (each swap reads the result of the one before)
and JPEG encoding (libjpeg-turbo, whose bytes the reference's Pillow encoder gives).

torch is imported on first use; nothing here is loaded by ``import shiftbench``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Sequence

import cv2
import numpy as np

from ...errors import ShiftbenchError
from ._common import MIN_SIDE, motion_kernel, noise_rng

__all__ = ["apply_tensor", "TORCH_CORRUPTIONS"]

TORCH_CORRUPTIONS: dict[str, Callable[..., Any]] = {}


def _register(name: str):
    def deco(fn):
        TORCH_CORRUPTIONS[name] = fn
        return fn

    return deco


def apply_tensor(shift: Any, images: Any, params: Sequence[dict[str, Any]]) -> Any:
    """``shift``'s corruption of a uint8 (N, 3, H, W) tensor, with one params dict per image."""
    import torch

    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] != 3 or images.dtype != torch.uint8:
        shape = tuple(images.shape) if hasattr(images, "shape") else None
        raise ShiftbenchError(
            f"corruption {shift.name!r} on tensors needs a uint8 (N, 3, H, W) tensor, got {getattr(images, 'dtype', type(images).__name__)} {shape}"
        )
    n, _, h, w = images.shape
    if h < MIN_SIDE or w < MIN_SIDE:
        raise ShiftbenchError(f"corruption {shift.name!r} needs images of at least {MIN_SIDE}x{MIN_SIDE} px, got {w}x{h} (WxH)")
    params = list(params)
    if len(params) != n:
        raise ShiftbenchError(f"corruption {shift.name!r}: {n} images but {len(params)} params")
    fn = TORCH_CORRUPTIONS.get(shift.name)
    if fn is None:
        raise ShiftbenchError(f"corruption {shift.name!r} has no torch path")
    if n == 0:
        return images.clone()
    severities = [shift.check_severity(p.get("severity")) for p in params]
    out = torch.empty_like(images)
    for severity in sorted(set(severities)):  # the runner's batches share one severity: one group
        rows = [i for i, s in enumerate(severities) if s == severity]
        sub = images if len(rows) == n else images[rows]
        part = fn(sub.contiguous(), severity, [params[i] for i in rows])
        if len(rows) == n:
            return part
        out[rows] = part
    return out


# -- shared pieces ---------------------------------------------------------------------------------


def _trunc(x):
    """Clip to 0..255 and truncate to uint8, as the reference's ``np.uint8(np.clip(x, 0, 255))``."""
    import torch

    return x.clamp_(0, 255).to(torch.uint8)


_DEVICE_TABLES: dict[tuple[Any, ...], Any] = {}


def _on(device, key: tuple[Any, ...], make: Callable[[], np.ndarray]):
    """A table built once on the CPU and kept on ``device`` (tables are small: at most 256 KB)."""
    import torch

    full = (str(device), *key)
    t = _DEVICE_TABLES.get(full)
    if t is None:
        t = torch.from_numpy(np.ascontiguousarray(make())).to(device)
        _DEVICE_TABLES[full] = t
    return t


def _border_index(n: int, before: int, after: int, mode: str) -> np.ndarray:
    """Source index of every padded position: "replicate", "reflect101" (OpenCV's default) or
    "reflect" (OpenCV's BORDER_REFLECT, scipy's "reflect": the edge repeated)."""
    i = np.arange(-before, n + after)
    if mode == "replicate" or n == 1:
        return np.clip(i, 0, n - 1)
    if mode == "reflect101":
        period = 2 * n - 2
        i = np.mod(i, period)
        return np.where(i < n, i, period - i)
    if mode == "reflect":
        period = 2 * n
        i = np.mod(i, period)
        return np.where(i < n, i, period - 1 - i)
    raise ValueError(mode)


def _pad(x, top: int, bottom: int, left: int, right: int, mode: str):
    """Pad the last two axes of ``x`` with an OpenCV border rule (by index: any width, any rule)."""
    h, w = x.shape[-2:]
    rows = _on(x.device, ("pad", h, top, bottom, mode), lambda: _border_index(h, top, bottom, mode))
    cols = _on(x.device, ("pad", w, left, right, mode), lambda: _border_index(w, left, right, mode))
    return x.index_select(-2, rows).index_select(-1, cols)


def _separable(x, ky: np.ndarray, kx: np.ndarray, mode: str):
    """Correlate every plane of float (N, C, H, W) ``x`` with ``ky`` down the rows and ``kx`` along
    them (odd lengths, centred), the border by ``mode``."""
    import torch.nn.functional as F

    n, c, h, w = x.shape
    ry, rx = len(ky) // 2, len(kx) // 2
    planes = _pad(x.reshape(n * c, 1, h, w), ry, ry, rx, rx, mode)
    wy = _on(x.device, ("kernel", ky.tobytes(), "y"), lambda: ky.astype(np.float32).reshape(1, 1, -1, 1))
    wx = _on(x.device, ("kernel", kx.tobytes(), "x"), lambda: kx.astype(np.float32).reshape(1, 1, 1, -1))
    out = F.conv2d(F.conv2d(planes, wy.to(x.dtype)), wx.to(x.dtype))
    return out.reshape(n, c, h, w)


@lru_cache(maxsize=None)
def _gaussian_taps(sigma: float, truncate: float) -> np.ndarray:
    # the radius rule of skimage (int(truncate * sigma + 0.5)), OpenCV's float kernel (as the numpy path)
    k = 2 * int(truncate * float(sigma) + 0.5) + 1
    return cv2.getGaussianKernel(k, float(sigma), ktype=cv2.CV_32F).reshape(-1)


def gaussian_blur(x, sigma: float, mode: str = "replicate", truncate: float = 4.0):
    """``gaussian_blur_like_skimage`` on a float (N, C, H, W) tensor."""
    taps = _gaussian_taps(float(sigma), float(truncate))
    return _separable(x, taps, taps, mode)


def _gather_shifts(x, offsets, weights):
    """sum_t weights[n, t] * x[n, :, clamp(y + dy[n, t]), clamp(x + dx[n, t])] for float (N, C, H, W) ``x``:
    a correlation with a per-image sparse kernel, edges replicated (the motion-blur streak)."""
    import torch

    n, c, h, w = x.shape
    dev = x.device
    flat = x.reshape(n, c, h * w)
    ys = torch.arange(h, device=dev)
    xs = torch.arange(w, device=dev)
    out = torch.zeros_like(flat)
    for t in range(offsets.shape[1]):
        dy = offsets[:, t, 0].view(n, 1)
        dx = offsets[:, t, 1].view(n, 1)
        rows = (ys.view(1, h) + dy).clamp_(0, h - 1)  # (N, H)
        cols = (xs.view(1, w) + dx).clamp_(0, w - 1)  # (N, W)
        index = (rows.unsqueeze(2) * w + cols.unsqueeze(1)).reshape(n, 1, h * w).expand(n, c, h * w)
        out.addcmul_(flat.gather(2, index), weights[:, t].view(n, 1, 1))
    return out.reshape(n, c, h, w)


def motion_blur(x, radius: int, sigma: float, angles: Sequence[float]):
    """The reference's motion blur of float (N, C, H, W) ``x``, one angle per image (see ``_common.motion_kernel``)."""
    import torch

    n, _, h, w = x.shape
    taps = []
    for angle in angles:
        kernel, (left, top) = motion_kernel(radius, sigma, float(angle), (h, w))
        r, c = np.nonzero(kernel)
        taps.append((r - top, c - left, kernel[r, c]))
    most = max(len(t[0]) for t in taps)
    offsets = np.zeros((n, most, 2), dtype=np.int64)
    weights = np.zeros((n, most), dtype=np.float32)  # zero weight pads the shorter streaks
    for i, (dy, dx, k) in enumerate(taps):
        offsets[i, : len(dy), 0], offsets[i, : len(dy), 1], weights[i, : len(dy)] = dy, dx, k
    return _gather_shifts(x, torch.from_numpy(offsets).to(x.device), torch.from_numpy(weights).to(x.device, x.dtype))


def _warp_grid(out_hw: tuple[int, int], in_hw: tuple[int, int], matrix: np.ndarray) -> np.ndarray:
    """grid_sample grid (align_corners=True) of OpenCV's inverse-map warp by an axis-aligned ``matrix``."""
    (h, w), (ih, iw) = out_hw, in_hw
    sx, tx, sy, ty = matrix[0, 0], matrix[0, 2], matrix[1, 1], matrix[1, 2]
    xs = sx * np.arange(w) + tx
    ys = sy * np.arange(h) + ty
    gx = 2.0 * xs / max(iw - 1, 1) - 1.0
    gy = 2.0 * ys / max(ih - 1, 1) - 1.0
    grid = np.empty((1, h, w, 2), dtype=np.float32)
    grid[..., 0] = gx[None, :]
    grid[..., 1] = gy[:, None]
    return grid


def _stack_cpu(arrays: Sequence[np.ndarray], like):
    import torch

    return torch.from_numpy(np.ascontiguousarray(np.stack(arrays))).to(like.device)


# -- noise -----------------------------------------------------------------------------------------


def _tabulated_noise(table_fn):
    def run(x, severity, params):
        import torch

        n, _, h, w = x.shape
        table = _on(x.device, ("alias", table_fn.__name__, severity), lambda: table_fn(severity).astype(np.int64))
        size = h * w * 3
        # the numpy path's 32-bit words (low half of each 64-bit PCG64 output first), per image, in
        # HWC order; drawn on the CPU from the recorded seed, 4 bytes per value moved to the device
        words = np.empty((n, size), dtype=np.uint32)
        for i, p in enumerate(params):
            words[i] = noise_rng(p).bit_generator.random_raw((size + 1) // 2).view(np.uint32)[:size]
        word = torch.from_numpy(words.view(np.int32)).to(x.device).to(torch.int64) & 0xFFFFFFFF
        values = x.permute(0, 2, 3, 1).reshape(n, size).to(torch.int64)
        column = word >> 24
        entry = table[(values << 8) | column]
        out = torch.where((word & 0xFFFFFF) < (entry >> 8), column, entry & 0xFF)
        return out.to(torch.uint8).reshape(n, h, w, 3).permute(0, 3, 1, 2).contiguous()

    return run


def _register_noise() -> None:
    from . import noise

    for name, fn in (
        ("gaussian_noise", noise.gaussian_table),
        ("shot_noise", noise.shot_table),
        ("impulse_noise", noise.impulse_table),
        ("speckle_noise", noise.speckle_table),
    ):
        TORCH_CORRUPTIONS[name] = _tabulated_noise(fn)


_register_noise()


# -- blur ------------------------------------------------------------------------------------------


@_register("defocus_blur")
def _defocus(x, severity, params):
    import torch.nn.functional as F

    from .blur import DEFOCUS, disk_kernel

    radius, alias_blur = DEFOCUS[severity - 1]
    kernel = disk_kernel(radius, alias_blur)
    half = kernel.shape[0] // 2
    n, c, h, w = x.shape
    weight = _on(x.device, ("disk", radius, alias_blur), lambda: kernel.astype(np.float32)[None, None])
    planes = _pad(x.reshape(n * c, 1, h, w).float(), half, half, half, half, "reflect101")
    return _trunc(F.conv2d(planes, weight).reshape(n, c, h, w))


@_register("glass_blur")
def _glass(x, severity, params):
    import torch

    from ._kernels import shuffle_in_place
    from .blur import GLASS, GlassBlur

    sigma, delta, iterations = GLASS[severity - 1]
    shuffled = gaussian_blur(x.float(), sigma).to(torch.uint8)  # truncated between the blurs, as the reference
    # the shuffle is sequential (each swap moves pixels an earlier swap moved): compiled, on the CPU
    hwc = shuffled.permute(0, 2, 3, 1).contiguous().cpu().numpy()
    for i, p in enumerate(params):
        shuffle_in_place(hwc[i], GlassBlur.raw_words(hwc[i].shape, severity, p), delta, iterations)
    back = torch.from_numpy(hwc).to(x.device).permute(0, 3, 1, 2).float()
    return _trunc(gaussian_blur(back, sigma))


@_register("motion_blur")
def _motion(x, severity, params):
    from .blur import MOTION

    radius, sigma = MOTION[severity - 1]
    return _trunc(motion_blur(x.float(), radius, sigma, [p["angle"] for p in params]))


@_register("zoom_blur")
def _zoom(x, severity, params):
    import torch
    import torch.nn.functional as F

    from ._common import zoom_crop_matrix
    from .blur import ZoomBlur

    n, c, h, w = x.shape
    factors = ZoomBlur.factors(severity)
    xf = x.float()
    total = xf * 2.0  # the image and the zoom by 1.0
    for factor in factors[1:]:
        grid = _on(x.device, ("zoom", h, w, float(factor)), lambda f=factor: _warp_grid((h, w), (h, w), zoom_crop_matrix((h, w), f)))
        layer = F.grid_sample(xf, grid.expand(n, h, w, 2), mode="bilinear", padding_mode="border", align_corners=True)
        total += torch.round(layer)  # the numpy path warps in uint8: each layer rounded to a level
    total *= 1.0 / (len(factors) + 1)
    return _trunc(total)


@_register("gaussian_blur")
def _gaussian(x, severity, params):
    from .blur import GAUSSIAN_SIGMA

    return _trunc(gaussian_blur(x.float(), GAUSSIAN_SIGMA[severity - 1]))


# -- weather ---------------------------------------------------------------------------------------


def _grey(x):
    """OpenCV's RGB -> grey weights on a float (N, 3, H, W) tensor, as (N, 1, H, W)."""
    return 0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]


@_register("snow")
def _snow(x, severity, params):
    import torch
    import torch.nn.functional as F

    from ._common import zoom_crop_matrix
    from .weather import SNOW

    mean, std, zoom, threshold, radius, sigma, weight = SNOW[severity - 1]
    n, _, h, w = x.shape
    crop_h, crop_w = int(np.ceil(h / float(zoom))), int(np.ceil(w / float(zoom)))
    layers = []
    for p in params:  # the numpy path's draws: the central crop of standard normals, float32
        layer = noise_rng(p).standard_normal((crop_h, crop_w), dtype=np.float32)
        layer *= std
        layer += mean
        layers.append(layer)
    layer = _stack_cpu(layers, x)[:, None]
    matrix = zoom_crop_matrix((h, w), zoom)
    matrix[:, 2] = 0.0
    grid = _on(x.device, ("snow", h, w, float(zoom)), lambda: _warp_grid((h, w), (crop_h, crop_w), matrix))
    layer = F.grid_sample(layer, grid.expand(n, h, w, 2), mode="bilinear", padding_mode="zeros", align_corners=True)
    layer = torch.where(layer < threshold, torch.zeros_like(layer), layer).clamp_(0, 1)
    layer = motion_blur(layer, radius, sigma, [p["angle"] for p in params])
    layer = torch.round(layer * 255.0)
    flakes = layer + layer.flip(-1, -2)
    xf = x.float()
    lifted = torch.maximum(xf, _grey(xf) * 1.5 + 127.5)
    out = xf * weight + lifted * (1.0 - weight)
    out += flakes
    return _trunc(out)


@_register("frost")
def _frost(x, severity, params):
    import torch

    from .weather import FROST, rescaled_overlay

    image_weight, frost_weight = FROST[severity - 1]
    n, _, h, w = x.shape
    crops = []
    for p in params:
        index = int(p["overlay"])
        overlay = _on(x.device, ("frost", index, h, w), lambda i=index: rescaled_overlay(i, h, w).transpose(2, 0, 1))
        top, left = int(p["top"]), int(p["left"])
        crop = overlay[:, top : top + h, left : left + w]
        if tuple(crop.shape[1:]) != (h, w):
            raise ShiftbenchError(f"frost params {p} do not fit a {w}x{h} image")
        crops.append(crop)
    out = x.float() * image_weight + torch.stack(crops).float() * frost_weight
    return _trunc(out)


@_register("fog")
def _fog(x, severity, params):
    from .weather import FOG, plasma_fractal

    strength, decay = FOG[severity - 1]
    n, _, h, w = x.shape
    size = 1 << (max(h, w) - 1).bit_length()
    fractal = _stack_cpu([plasma_fractal(size, decay, noise_rng(p))[:h, :w] for p in params], x)[:, None]
    peak = x.reshape(n, -1).amax(dim=1).float() / 255.0
    scale = (peak / (peak + strength)).view(n, 1, 1, 1)
    out = x.float() * scale + fractal * (255.0 * strength * scale)
    return _trunc(out)


@_register("brightness")
def _brightness(x, severity, params):
    import torch

    from .weather import brightness_lut

    lut = _on(x.device, ("brightness", severity), lambda: brightness_lut(severity))
    v = x.amax(dim=1, keepdim=True).to(torch.int64) << 8
    return lut[v | x.to(torch.int64)]


@_register("spatter")
def _spatter(x, severity, params):
    import torch

    from .weather import MUD_RGB, SPATTER, WATER_RGB, Spatter

    mud = SPATTER[severity - 1][5]
    n, _, h, w = x.shape
    # the layer (drops or mud mask) is a function of the recorded seed alone: drawn and shaped on the
    # CPU (OpenCV's Canny, distance transform, equalisation), blended on the device
    layer = _stack_cpu([Spatter.layer((h, w), severity, p) for p in params], x)[:, None]
    xf = x.float() / 255.0
    if not mud:
        out = xf + layer * torch.from_numpy(WATER_RGB).to(x.device).view(1, 3, 1, 1)
    else:
        out = xf * (1.0 - layer) + layer * torch.from_numpy(MUD_RGB).to(x.device).view(1, 3, 1, 1)
    out *= 255.0
    return _trunc(out)


# -- digital ---------------------------------------------------------------------------------------


@_register("contrast")
def _contrast(x, severity, params):
    import torch

    from .digital import CONTRAST

    n, c, h, w = x.shape
    c_ = float(CONTRAST[severity - 1])
    flat = x.reshape(n, c, h * w)
    means = flat.to(torch.float64).mean(dim=2, keepdim=True) / 255.0  # (N, 3, 1), as cv2.mean
    levels = torch.arange(256, device=x.device, dtype=torch.float64).view(1, 1, 256) / 255.0
    table = (((levels - means) * c_ + means).clamp_(0.0, 1.0) * 255.0).to(torch.uint8)  # (N, 3, 256), the reference's float64
    return table.gather(2, flat.to(torch.int64)).reshape(n, c, h, w)


@_register("elastic_transform")
def _elastic(x, severity, params):
    import torch
    import torch.nn.functional as F

    from .digital import ElasticTransform

    n, _, h, w = x.shape
    shift = ElasticTransform()
    grids = np.empty((n, h, w, 2), dtype=np.float32)
    for i, p in enumerate(params):  # the displacement fields: drawn and smoothed from the seed on the CPU
        dx, dy = shift.displacement((h, w), severity, p)
        # source positions, normalised for align_corners=False
        sx = dx + np.arange(w, dtype=np.float32)[None, :]
        sy = dy + np.arange(h, dtype=np.float32)[:, None]
        grids[i, ..., 0] = (2.0 * sx + 1.0) / w - 1.0
        grids[i, ..., 1] = (2.0 * sy + 1.0) / h - 1.0
    grid = torch.from_numpy(grids).to(x.device)
    # "reflection" with align_corners=False mirrors about the outer pixel edges: OpenCV's BORDER_REFLECT
    out = F.grid_sample(x.float(), grid, mode="bilinear", padding_mode="reflection", align_corners=False)
    return _trunc(out)


def _box_pass(x, starts: np.ndarray, counts: np.ndarray, coeffs: np.ndarray, axis: int):
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


@_register("pixelate")
def _pixelate(x, severity, params):
    import torch

    from .digital import PIXELATE, box_coefficients

    c = PIXELATE[severity - 1]
    n, _, h, w = x.shape
    out_w, out_h = int(w * c), int(h * c)
    small = _box_pass(x.to(torch.int64), *box_coefficients(w, out_w), axis=3)
    small = _box_pass(small, *box_coefficients(h, out_h), axis=2)
    # OpenCV's INTER_NEAREST_EXACT back up: source = floor((dst + 0.5) * in / out)
    rows = torch.from_numpy(_nearest_exact(out_h, h)).to(x.device)
    cols = torch.from_numpy(_nearest_exact(out_w, w)).to(x.device)
    return small.index_select(2, rows).index_select(3, cols).to(torch.uint8)


@lru_cache(maxsize=64)
def _nearest_exact(in_size: int, out_size: int) -> np.ndarray:
    probe = cv2.resize(np.arange(in_size, dtype=np.float32)[None, :], (out_size, 1), interpolation=cv2.INTER_NEAREST_EXACT)
    return probe[0].astype(np.int64)


@_register("jpeg_compression")
def _jpeg(x, severity, params):
    import torch

    from .digital import JpegCompression

    # no device JPEG codec gives libjpeg-turbo's bytes: encode and decode on the CPU, per image
    shift = JpegCompression()
    hwc = x.permute(0, 2, 3, 1).contiguous().cpu().numpy()
    out = np.stack([shift.corrupt(im, severity, p) for im, p in zip(hwc, params)])
    return torch.from_numpy(out).to(x.device).permute(0, 3, 1, 2).contiguous()


@_register("saturate")
def _saturate(x, severity, params):
    import torch

    from .digital import saturate_tables

    factors = _on(x.device, ("saturate", severity), lambda: saturate_tables(severity)[0])
    grey = _on(x.device, ("saturate-grey", severity), lambda: saturate_tables(severity)[1])
    v = x.amax(dim=1, keepdim=True)
    spread = (v - x.amin(dim=1, keepdim=True)).to(torch.int64)
    vi = v.to(torch.int64)
    factor = factors[(vi << 8) | spread]
    value = v.float()
    moved = _trunc(value - (value - x.float()) * factor)
    grey_pixel = torch.cat([x[:, 0:1], grey[vi], grey[vi]], dim=1)
    return torch.where(spread > 0, moved, grey_pixel)
