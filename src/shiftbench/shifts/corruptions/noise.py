"""Noise corruptions: gaussian_noise, shot_noise, impulse_noise (ImageNet-C) and speckle_noise (extra).

Each output channel value depends only on the input value and the noise, so the exact output
distribution of the reference formula is tabulated per grey level (256 x 256) once per severity
(any real severity in 1..5: the published constant moves linearly from one level to the next)
and sampled with the alias method (see _common). The result has the same distribution as the
reference output, at a fraction of the cost of drawing Gaussian or Poisson variates in float64.
The tensor path reads the same tables with the same random words, bit for bit.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from ...registry import SHIFTS
from ...severity import interpolate
from ._common import Corruption, alias_table, draw_seed, noise_rng, normal_cdf, sample_from_table
from ._torch import on_device

__all__ = ["GaussianNoise", "ShotNoise", "ImpulseNoise", "SpeckleNoise"]

GAUSSIAN_SCALE = (0.08, 0.12, 0.18, 0.26, 0.38)
SHOT_PHOTONS = (60, 25, 12, 5, 3)
IMPULSE_AMOUNT = (0.03, 0.06, 0.09, 0.17, 0.27)
SPECKLE_SCALE = (0.15, 0.2, 0.35, 0.45, 0.6)

_LEVELS = np.arange(256, dtype=np.float64)


def _pmf_from_cdf(cdf_below: np.ndarray) -> np.ndarray:
    """``cdf_below[v, k]`` = P(output <= k) for k in 0..254; returns the 256x256 pmf."""
    cdf = np.concatenate([cdf_below, np.ones((256, 1))], axis=1)
    return np.diff(cdf, axis=1, prepend=0.0).clip(min=0.0)


@lru_cache(maxsize=64)
def gaussian_table(severity: float):
    # reference: uint8(clip(v/255 + c*n, 0, 1) * 255); output <= k  <=>  v + 255*c*n < k + 1
    c = interpolate(GAUSSIAN_SCALE, severity)
    k = _LEVELS[None, :255]
    return alias_table(_pmf_from_cdf(normal_cdf((k + 1 - _LEVELS[:, None]) / (255.0 * c))))


@lru_cache(maxsize=64)
def speckle_table(severity: float):
    # reference: uint8(clip(x + x*c*n, 0, 1) * 255) = v*(1 + c*n); grey level 0 stays 0
    c = interpolate(SPECKLE_SCALE, severity)
    k = _LEVELS[None, :255]
    v = np.maximum(_LEVELS[:, None], 1e-300)
    cdf = normal_cdf(((k + 1) / v - 1.0) / c)
    cdf[0] = 1.0
    return alias_table(_pmf_from_cdf(cdf))


@lru_cache(maxsize=64)
def shot_table(severity: float):
    # reference: uint8(clip(poisson(x*c)/c, 0, 1) * 255) with x = v/255
    c = interpolate(SHOT_PHOTONS, severity, integer="float")
    pmf = np.zeros((256, 256))
    counts = np.arange(c)  # counts >= c all give 255
    outputs = (np.clip(counts / float(c), 0, 1) * 255).astype(np.uint8)
    log_factorial = np.array([math.lgamma(n + 1.0) for n in counts])
    for v in range(256):
        lam = v / 255.0 * c
        if lam == 0.0:
            p = (counts == 0).astype(np.float64)
        else:
            p = np.exp(counts * math.log(lam) - lam - log_factorial)
        np.add.at(pmf[v], outputs, p)
        pmf[v, 255] += max(0.0, 1.0 - p.sum())
    return alias_table(pmf)


@lru_cache(maxsize=64)
def impulse_table(severity: float):
    # reference (skimage s&p, salt_vs_pepper=0.5): each channel value is replaced with
    # probability c, by 0 or 255 with equal odds
    c = interpolate(IMPULSE_AMOUNT, severity)
    pmf = np.zeros((256, 256))
    pmf[np.arange(256), np.arange(256)] = 1.0 - c
    pmf[:, 0] += c / 2
    pmf[:, 255] += c / 2
    return alias_table(pmf)


class _TabulatedNoise(Corruption):
    """Noise whose per-value output distribution is tabulated; draws one seed per image."""

    def table(self, severity: float):
        raise NotImplementedError

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        return {"noise_seed": draw_seed(rng)}

    def corrupt(self, image: np.ndarray, severity: float, params: dict[str, Any]) -> np.ndarray:
        return sample_from_table(image, self.table(severity), noise_rng(params))

    def corrupt_tensor(self, x, severity, params):
        import torch

        n, _, h, w = x.shape
        table = on_device(x.device, ("alias", self.name, severity), lambda: self.table(severity).astype(np.int64))
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


@SHIFTS.register("gaussian_noise", description="Additive Gaussian noise (ImageNet-C)", group="noise")
class GaussianNoise(_TabulatedNoise):
    """Additive Gaussian noise (ImageNet-C): x + N(0, c), c = 0.08..0.38 of the range.

    Continuous severity: c linear between the published levels.
    """

    def table(self, severity: float):
        return gaussian_table(severity)


@SHIFTS.register("shot_noise", description="Poisson (photon) noise (ImageNet-C)", group="noise")
class ShotNoise(_TabulatedNoise):
    """Poisson noise (ImageNet-C): Poisson(x * c) / c with c = 60..3 photons at full scale.

    Continuous severity: the photon count c linear (a real number, not rounded) between the published levels.
    """

    def table(self, severity: float):
        return shot_table(severity)


@SHIFTS.register("impulse_noise", description="Salt-and-pepper noise (ImageNet-C)", group="noise")
class ImpulseNoise(_TabulatedNoise):
    """Salt-and-pepper noise (ImageNet-C): a fraction c = 0.03..0.27 of values set to 0 or 255.

    Continuous severity: the fraction c linear between the published levels.
    """

    def table(self, severity: float):
        return impulse_table(severity)


@SHIFTS.register("speckle_noise", description="Multiplicative Gaussian noise (ImageNet-C extra)", group="extra")
class SpeckleNoise(_TabulatedNoise):
    """Multiplicative noise (ImageNet-C extra): x + x * N(0, c), c = 0.15..0.6.

    Continuous severity: c linear between the published levels.
    """

    def table(self, severity: float):
        return speckle_table(severity)
