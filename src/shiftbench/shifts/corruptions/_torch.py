"""The pieces the corruptions' tensor paths share: device tables, borders, separable and motion blur, warp grids.

Each family's file gives its corruptions a ``corrupt_tensor(x, severity, params)``: (N, 3, H, W) uint8 in,
the same out, on the input's device; ``Corruption.apply_tensor`` (in ``_common``) checks the batch and
calls it once per severity. Every tensor path takes the params of the numpy path (drawn by the same
per-sample generators, so a seed and a replay mean the same thing on both paths) and gives the numpy
path's output within a fraction of a grey level (tests/shifts/test_corruptions_torch.py holds every corruption
and severity to a mean absolute difference under 1 per image). Pixel arithmetic runs on the tensor's
device. What is drawn from a recorded seed is drawn where the numpy path draws it, on the CPU from the
same PCG64 stream, and moved to the device as random words or fields: the noise words, the snow and
spatter noise, the fog fractal and the elastic displacement. Two steps have no device form and run on
the CPU per image: glass blur's sequential pixel shuffle (each swap reads the result of the one before)
and JPEG encoding (libjpeg-turbo, whose bytes the reference's Pillow encoder gives).

torch is imported on first use; nothing here loads it at import, so ``import shiftbench`` never does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any, Callable, Sequence

import cv2
import numpy as np

from ...registry import SHIFTS
from ._common import Corruption, motion_kernel

__all__ = [
    "TORCH_CORRUPTIONS",
    "trunc",
    "on_device",
    "pad_border",
    "gaussian_blur_tensor",
    "motion_blur_tensor",
    "warp_grid",
    "stack_to_device",
]


class _TensorPaths(Mapping[str, type]):
    """name -> class of every registered corruption that has a tensor path, read from SHIFTS on each use."""

    def _found(self) -> dict[str, type]:
        return {
            e.name: e.target
            for e in SHIFTS.entries()
            if isinstance(e.target, type) and issubclass(e.target, Corruption) and e.target.runs_on_tensors()
        }

    def __getitem__(self, name: str) -> type:
        return self._found()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._found())

    def __len__(self) -> int:
        return len(self._found())


TORCH_CORRUPTIONS: Mapping[str, type] = _TensorPaths()


def trunc(x):
    """Clip to 0..255 and truncate to uint8, as the reference's ``np.uint8(np.clip(x, 0, 255))``."""
    import torch

    return x.clamp_(0, 255).to(torch.uint8)


_DEVICE_TABLES: dict[tuple[Any, ...], Any] = {}
_MAX_TABLES = 256  # device tables kept (least recently used dropped first)


def on_device(device, key: tuple[Any, ...], make: Callable[[], np.ndarray]):
    """A table built once on the CPU and kept on ``device`` (tables are small: at most 512 KB). The most recently
    used ``_MAX_TABLES`` are kept: a grid of in-between severities makes a table per severity, not without end."""
    import torch

    full = (str(device), *key)
    t = _DEVICE_TABLES.pop(full, None)
    if t is None:
        t = torch.from_numpy(np.ascontiguousarray(make())).to(device)
        while len(_DEVICE_TABLES) >= _MAX_TABLES:
            _DEVICE_TABLES.pop(next(iter(_DEVICE_TABLES)))
    _DEVICE_TABLES[full] = t  # (re)inserted last: the dict's order is the order of use
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


def pad_border(x, top: int, bottom: int, left: int, right: int, mode: str):
    """Pad the last two axes of ``x`` with an OpenCV border rule (by index: any width, any rule)."""
    h, w = x.shape[-2:]
    rows = on_device(x.device, ("pad", h, top, bottom, mode), lambda: _border_index(h, top, bottom, mode))
    cols = on_device(x.device, ("pad", w, left, right, mode), lambda: _border_index(w, left, right, mode))
    return x.index_select(-2, rows).index_select(-1, cols)


def _separable(x, ky: np.ndarray, kx: np.ndarray, mode: str):
    """Correlate every plane of float (N, C, H, W) ``x`` with ``ky`` down the rows and ``kx`` along
    them (odd lengths, centred), the border by ``mode``."""
    import torch.nn.functional as F

    n, c, h, w = x.shape
    ry, rx = len(ky) // 2, len(kx) // 2
    planes = pad_border(x.reshape(n * c, 1, h, w), ry, ry, rx, rx, mode)
    wy = on_device(x.device, ("kernel", ky.tobytes(), "y"), lambda: ky.astype(np.float32).reshape(1, 1, -1, 1))
    wx = on_device(x.device, ("kernel", kx.tobytes(), "x"), lambda: kx.astype(np.float32).reshape(1, 1, 1, -1))
    out = F.conv2d(F.conv2d(planes, wy.to(x.dtype)), wx.to(x.dtype))
    return out.reshape(n, c, h, w)


@lru_cache(maxsize=128)
def _gaussian_taps(sigma: float, truncate: float) -> np.ndarray:
    # the radius rule of skimage (int(truncate * sigma + 0.5)), OpenCV's float kernel (as the numpy path)
    k = 2 * int(truncate * float(sigma) + 0.5) + 1
    return cv2.getGaussianKernel(k, float(sigma), ktype=cv2.CV_32F).reshape(-1)


def gaussian_blur_tensor(x, sigma: float, mode: str = "replicate", truncate: float = 4.0):
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


def motion_blur_tensor(x, radius: int, sigma: float, angles: Sequence[float]):
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


def warp_grid(out_hw: tuple[int, int], in_hw: tuple[int, int], matrix: np.ndarray) -> np.ndarray:
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


def stack_to_device(arrays: Sequence[np.ndarray], like):
    """Arrays made on the CPU, stacked and moved to the device of tensor ``like``."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(np.stack(arrays))).to(like.device)
