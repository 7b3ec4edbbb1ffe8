"""Shared machinery of the ImageNet-C corruptions: the base class, size checks and fast samplers.

Every corruption reproduces the output of the reference definitions (Hendrycks & Dietterich,
ImageNet-C; the ``imagecorruptions`` package) on uint8 RGB images: the float pipeline of the
reference ends in ``np.uint8(...)``, which truncates, so ours truncates too.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, ClassVar, Sequence

import cv2
import numpy as np

from ...errors import ShiftbenchError
from ..base import ImageShift

__all__ = [
    "Corruption",
    "MIN_SIDE",
    "check_image",
    "check_tensor",
    "noise_rng",
    "draw_seed",
    "to_uint8",
    "grey3",
    "sample_from_table",
    "alias_table",
    "gaussian_blur_like_skimage",
    "zoom_crop_matrix",
    "motion_kernel",
    "motion_blur",
    "correlate",
]

MIN_SIDE = 32  # the reference refuses smaller images; several parameters assume at least this



class Corruption(ImageShift):
    """An ImageNet-C corruption: params always carry ``severity``; random ones add their draws.

    Subclasses implement ``draws(image_shape, severity, rng)`` (random corruptions only),
    ``corrupt(image, severity, params)`` and, for the tensor path, ``corrupt_tensor(x, severity,
    params)``. Its family (ImageNet-C's, or ``cbar``) is the registry's: ``shift_info(name).family``.
    """

    role: ClassVar[str] = "corruption"
    continuous: ClassVar[bool] = True  # any real severity in 1..5: each class states how its levels interpolate
    keeps: ClassVar[frozenset[str]] = frozenset({"label", "mask", "boxes", "caption", "layout"})

    def draws(self, shape: tuple[int, ...], severity: int, rng: np.random.Generator) -> dict[str, Any]:
        """Random draws for one image of ``shape``; deterministic corruptions draw nothing."""
        return {}

    def corrupt(self, image: np.ndarray, severity: int, params: dict[str, Any]) -> np.ndarray:
        raise NotImplementedError

    def corrupt_tensor(self, x: Any, severity: int, params: list[dict[str, Any]]) -> Any:
        """The corruption of a contiguous uint8 (N, 3, H, W) tensor whose images share ``severity``."""
        raise NotImplementedError

    @classmethod
    def runs_on_tensors(cls) -> bool:
        """Whether this corruption has a tensor path (its family's file defines ``corrupt_tensor``)."""
        return cls.corrupt_tensor is not Corruption.corrupt_tensor

    @property
    def random(self) -> bool:
        """Whether this corruption draws anything (deterministic ones keep the base ``draws``)."""
        return type(self).draws is not Corruption.draws

    @property
    def draws_randomly(self) -> bool:
        return self.random

    def rng(self, seed: int, sample_id: str | None) -> np.random.Generator | None:
        # deterministic corruptions never touch the generator: skip building it (about 30 us)
        return super().rng(seed, sample_id) if self.random else None

    # -- ImageShift hooks ---------------------------------------------------------------------
    def image_params(self, image: np.ndarray, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        check_image(image, self.name)
        return {"severity": severity, **self.draws(image.shape, severity, rng)}

    def apply_image(self, image: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        check_image(image, self.name)
        severity = self.check_severity(params.get("severity"))
        return self.corrupt(np.ascontiguousarray(image), severity, params)

    def apply_images(self, images: Sequence[np.ndarray], params: Sequence[dict[str, Any]]) -> list[np.ndarray]:
        return [self.apply_image(im, p) for im, p in zip(images, params)]

    def apply_tensor(self, images: Any, params: Sequence[dict[str, Any]]) -> Any:
        """The corruption of a uint8 (N, 3, H, W) torch tensor on any device, the same out.

        Takes the params the numpy path draws (``draw`` / a manifest) and gives its output within a
        fraction of a grey level; pixels stay on the tensor's device (see ``_torch``). Needs torch.
        """
        import torch  # on first use: ``import shiftbench`` never loads torch

        params = check_tensor(images, params, self.name)
        if not self.runs_on_tensors():
            raise ShiftbenchError(f"corruption {self.name!r} has no torch path")
        n = len(params)
        if n == 0:
            return images.clone()
        severities = [self.check_severity(p.get("severity")) for p in params]
        out = torch.empty_like(images)
        for severity in sorted(set(severities)):  # the runner's batches share one severity: one group
            rows = [i for i, s in enumerate(severities) if s == severity]
            sub = images if len(rows) == n else images[rows]
            part = self.corrupt_tensor(sub.contiguous(), severity, [params[i] for i in rows])
            if len(rows) == n:
                return part
            out[rows] = part
        return out


def check_image(image: np.ndarray, shift_name: str) -> None:
    """Corruptions take HxWx3 uint8 images of at least 32x32 pixels."""
    if not isinstance(image, np.ndarray) or image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        shape = getattr(image, "shape", None)
        dtype = getattr(image, "dtype", None)
        raise ShiftbenchError(f"corruption {shift_name!r} needs an HxWx3 uint8 image, got {dtype} {shape}")
    h, w = image.shape[:2]
    if h < MIN_SIDE or w < MIN_SIDE:
        raise ShiftbenchError(
            f"corruption {shift_name!r} needs images of at least {MIN_SIDE}x{MIN_SIDE} px, got {w}x{h} (WxH)"
        )


def check_tensor(images: Any, params: Sequence[dict[str, Any]], shift_name: str) -> list[dict[str, Any]]:
    """Tensor corruptions take a uint8 (N, 3, H, W) torch tensor, images of at least 32x32 pixels and
    one params dict per image (returned as a list)."""
    import torch

    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] != 3 or images.dtype != torch.uint8:
        shape = tuple(images.shape) if hasattr(images, "shape") else None
        raise ShiftbenchError(
            f"corruption {shift_name!r} on tensors needs a uint8 (N, 3, H, W) tensor, got {getattr(images, 'dtype', type(images).__name__)} {shape}"
        )
    n, _, h, w = images.shape
    if h < MIN_SIDE or w < MIN_SIDE:
        raise ShiftbenchError(f"corruption {shift_name!r} needs images of at least {MIN_SIDE}x{MIN_SIDE} px, got {w}x{h} (WxH)")
    params = list(params)
    if len(params) != n:
        raise ShiftbenchError(f"corruption {shift_name!r}: {n} images but {len(params)} params")
    return params


def grey3(x: np.ndarray) -> np.ndarray:
    """An HxW plane repeated into HxWx3 (OpenCV copy: numpy broadcasting over a last axis of 3 is slow)."""
    return cv2.cvtColor(np.ascontiguousarray(x), cv2.COLOR_GRAY2RGB)


def draw_seed(rng: np.random.Generator) -> int:
    """A 63-bit seed for the bulk noise of one image (a plain int, so params stay JSON)."""
    return int(rng.integers(0, 2**63 - 1))


def noise_rng(params: dict[str, Any], key: str = "noise_seed") -> np.random.Generator:
    """The generator for the bulk noise, rebuilt from the seed recorded in ``params``."""
    return np.random.Generator(np.random.PCG64(int(params[key])))


def to_uint8(x: np.ndarray) -> np.ndarray:
    """Clip to 0..255 and truncate, as the reference's ``np.uint8(np.clip(x, 0, 255))`` does.

    Float input is clipped in place (callers pass their own temporaries).
    """
    return np.clip(x, 0, 255, out=x if x.dtype.kind == "f" else None).astype(np.uint8)


# -- exact sampling of per-pixel output distributions --------------------------------------------
#
# The noise corruptions map a grey level v to a random uint8 output whose distribution depends
# only on v (and the severity). We compute that distribution exactly from the reference formula
# and sample it with Walker's alias method: one 32-bit random word and one packed-table read per
# channel value, instead of a Gaussian or Poisson draw followed by float arithmetic.


def alias_table(pmf: np.ndarray) -> np.ndarray:
    """Packed alias tables for 256 discrete distributions over 0..255 (rows of ``pmf``).

    Entry v*256 + j is (threshold << 8) | alias: outcome j of row v is kept when 24 random bits
    are below the threshold (its probability mass in units of 2**-24), else the alias is taken.
    """
    pmf = np.ascontiguousarray(pmf, dtype=np.float64)
    if pmf.shape != (256, 256):
        raise ValueError(f"alias tables are built for 256x256 pmfs, got {pmf.shape}")
    thresholds = np.zeros(pmf.shape, dtype=np.uint32)
    aliases = np.zeros(pmf.shape, dtype=np.uint8)
    from ._kernels import build_alias  # deferred: start-up cost (pulls numba)
    build_alias(pmf, thresholds, aliases)
    # a threshold of 2**24 (always keep) does not fit 24 bits: stored as 2**24 - 1 it keeps all
    # draws but the one equal to 2**24 - 1, which takes the alias: make that alias the column
    # itself, so the outcome is the same either way
    full = thresholds >= (1 << 24)
    aliases[full] = np.broadcast_to(np.arange(256, dtype=np.uint8), pmf.shape)[full]
    packed = (np.minimum(thresholds, (1 << 24) - 1) << 8) | aliases
    return packed.astype(np.uint32).reshape(-1)


def sample_from_table(image: np.ndarray, table: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draw, for every uint8 value of ``image``, an output from its row of the packed alias table."""

    raw = rng.bit_generator.random_raw((image.size + 1) // 2)
    out = np.empty(image.shape, dtype=np.uint8)
    from ._kernels import alias_sample  # deferred: start-up cost (pulls numba)
    alias_sample(np.ascontiguousarray(image).reshape(-1), raw, table, out.reshape(-1))
    return out


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """Standard normal CDF (numpy has no erf; 65k scalar calls once per table are cheap)."""
    erf = np.frompyfunc(math.erf, 1, 1)
    return 0.5 * (1.0 + erf(np.asarray(z, dtype=np.float64) / math.sqrt(2.0)).astype(np.float64))


# -- filters matching scikit-image / scipy conventions -------------------------------------------


def gaussian_blur_like_skimage(
    x: np.ndarray, sigma: float | tuple[float, float], truncate: float = 4.0, border: int = cv2.BORDER_REPLICATE
) -> np.ndarray:
    """``skimage.filters.gaussian`` with OpenCV: same radius rule (int(truncate*sigma+0.5)).

    ``sigma`` is one value or (sigma_rows, sigma_cols). skimage's default mode "nearest" is
    OpenCV's BORDER_REPLICATE; scipy's "reflect" is BORDER_REFLECT.
    """
    sy, sx = (sigma, sigma) if np.isscalar(sigma) else sigma
    ky = 2 * int(truncate * float(sy) + 0.5) + 1
    kx = 2 * int(truncate * float(sx) + 0.5) + 1
    return cv2.GaussianBlur(x, (kx, ky), sigmaX=float(sx), sigmaY=float(sy), borderType=border)


def zoom_crop_matrix(shape: tuple[int, int], zoom: float) -> np.ndarray:
    """Inverse affine map of the reference's ``clipped_zoom`` (central crop, scipy zoom, crop).

    The reference crops ceil(H/zoom) rows around the centre, zooms them with
    ``scipy.ndimage.zoom(order=1)`` (corner-aligned grid: out -> in * (n_in-1)/(n_out-1)) and
    keeps the first H rows; the same for columns. As one affine map, ``cv2.warpAffine`` with
    WARP_INVERSE_MAP does it in one pass.
    """
    h, w = shape
    ch = int(np.ceil(h / float(zoom)))
    cw = int(np.ceil(w / float(zoom)))
    top, left = (h - ch) // 2, (w - cw) // 2
    out_h, out_w = int(round(ch * zoom)), int(round(cw * zoom))
    sy = (ch - 1) / (out_h - 1) if out_h > 1 else 0.0
    sx = (cw - 1) / (out_w - 1) if out_w > 1 else 0.0
    return np.array([[sx, 0.0, left], [0.0, sy, top]], dtype=np.float64)


@lru_cache(maxsize=256)
def _motion_kernel_cached(radius: int, sigma: float, angle: float, height: int, width: int) -> tuple[np.ndarray, tuple[int, int]]:
    n_taps = 2 * radius + 1
    steps = np.arange(n_taps, dtype=np.float64)
    taps = np.exp(-(steps**2) / (2 * sigma**2))
    taps /= taps.sum()
    # the reference shifts the image by (dx, dy) for tap i: out(y, x) += w_i * in(y - dy, x - dx)
    dys = -np.ceil(steps * math.sin(math.radians(angle)) - 0.5).astype(np.int64)
    dxs = -np.ceil(steps * math.cos(math.radians(angle)) - 0.5).astype(np.int64)
    # ... and stops at the first shift as large as the image (weights not renormalised)
    beyond = np.flatnonzero((np.abs(dys) >= height) | (np.abs(dxs) >= width))
    if beyond.size:
        taps, dys, dxs = taps[: beyond[0]], dys[: beyond[0]], dxs[: beyond[0]]
    top, left = int(dys.max()), int(dxs.max())
    shape = (top - int(dys.min()) + 1, left - int(dxs.min()) + 1)
    flat_index = (top - dys) * shape[1] + (left - dxs)  # taps may share a cell: sum them
    kernel = np.bincount(flat_index, weights=taps, minlength=shape[0] * shape[1]).reshape(shape)
    return kernel.astype(np.float32), (left, top)


def motion_kernel(radius: int, sigma: float, angle: float, shape: tuple[int, int] = (1 << 30, 1 << 30)) -> tuple[np.ndarray, tuple[int, int]]:
    """The reference's motion blur as one correlation kernel and its anchor (x, y).

    The reference sums 2*radius+1 shifted copies (edge pixels replicated) with half-Gaussian
    weights along ``angle``, stopping at the first shift as large as the image ``shape`` (only
    possible below 41 px); with BORDER_REPLICATE ``cv2.filter2D`` gives the same sum in one pass.
    """
    return _motion_kernel_cached(int(radius), float(sigma), float(angle), int(shape[0]), int(shape[1]))


def motion_blur(x: np.ndarray, radius: int, sigma: float, angle: float) -> np.ndarray:
    """The reference's motion blur of a float32 image (any channel count)."""
    kernel, anchor = motion_kernel(radius, sigma, angle, x.shape[:2])
    return correlate(x, kernel, anchor, cv2.BORDER_REPLICATE)


# OpenCV switches cv2.filter2D to a DFT when a float32 kernel covers 50 cells or more; below
# that it loops over the non-zero taps only. A sparse line kernel (motion blur) or a 15x15 disk
# is much cheaper as a few small direct filters on bands of kernel rows than as one DFT.
_DIRECT_FILTER_CELLS = 50


def correlate(x: np.ndarray, kernel: np.ndarray, anchor: tuple[int, int], border: int) -> np.ndarray:
    """``cv2.filter2D(x, -1, kernel, anchor=anchor, borderType=border)`` for float32 ``x``, by bands.

    The image is padded once with the border rule, so that each band (a run of kernel rows cut
    to its non-zero columns) is a plain correlation whose output is read at the band's offset.
    """
    kh, kw = kernel.shape
    ax, ay = anchor
    if kh * kw < _DIRECT_FILTER_CELLS:
        return cv2.filter2D(x, -1, kernel, anchor=anchor, borderType=border)
    h, w = x.shape[:2]
    padded = cv2.copyMakeBorder(x, ay, kh - 1 - ay, ax, kw - 1 - ax, border)
    channels = x.shape[2] if x.ndim == 3 else 1
    out = None
    for r0, r1, c0, c1 in _bands(kernel):
        band = np.ascontiguousarray(kernel[r0:r1, c0:c1])
        part = cv2.filter2D(padded, -1, band, anchor=(0, 0), borderType=cv2.BORDER_CONSTANT)
        # as rows of w*channels values: numpy on an (h, w, 3) strided view loops 3 at a time
        part = part[r0 : r0 + h, c0 : c0 + w].reshape(h, w * channels)
        if out is None:
            out = part.copy()
        else:
            out += part
    return out.reshape(x.shape)


def _bands(kernel: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Split kernel rows greedily into bands whose non-zero bounding box stays under the DFT threshold."""
    nonzero = kernel != 0
    rows = np.flatnonzero(nonzero.any(axis=1)).tolist()
    firsts = nonzero.argmax(axis=1).tolist()
    lasts = (kernel.shape[1] - 1 - nonzero[:, ::-1].argmax(axis=1)).tolist()
    bands: list[tuple[int, int, int, int]] = []
    start = prev = lo = hi = -1
    for r in rows:
        if start >= 0 and r == prev + 1:
            new_lo, new_hi = min(lo, firsts[r]), max(hi, lasts[r] + 1)
            if (r + 1 - start) * (new_hi - new_lo) < _DIRECT_FILTER_CELLS:
                prev, lo, hi = r, new_lo, new_hi
                continue
        if start >= 0:
            bands.append((start, prev + 1, lo, hi))
        start, prev, lo, hi = r, r, firsts[r], lasts[r] + 1
    if start >= 0:
        bands.append((start, prev + 1, lo, hi))
    return bands
