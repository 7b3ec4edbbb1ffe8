"""ImageNet-P noise sequences: p_gaussian_noise, p_shot_noise (the benchmark's) and p_speckle_noise (validation extra).

Frame 0 is the image itself; frames 1..30 are 30 independent noisy copies of it, each a fresh draw of the
reference formula (hendrycks/robustness, ImageNet-P/create_p/make_imagenet_p.py), which ends in a truncation
to uint8 (``ToPILImage`` of a float tensor, ``np.uint8``), as ours does:

- gaussian: ``uint8(255 * clip(x + sigma * N(0, 1), 0, 1))``, sigma 0.03 / 0.05 / 0.08 at difficulty 1 / 2 / 3
  (the published ``gaussian_noise``, ``_2`` and ``_3``);
- shot: ``uint8(255 * clip(Poisson(x * c) / c, 0, 1))``, c = 300 / 120 / 60 photons at full scale;
- speckle: ``uint8(255 * clip(x + x * N(0, s), 0, 1))``, s = 0.05 / 0.10 / 0.15.

Each output value depends only on its input value and the noise, so (as the ImageNet-C noise corruptions,
``corruptions/noise.py``) the exact output distribution per grey level is tabulated (256 x 256) once per
constant and sampled with the alias method from one recorded 63-bit ``noise_seed``: the frames have the
reference's distribution exactly, with one 32-bit random word per value instead of a Gaussian or Poisson
variate. The reference computes the gaussian sequence in float32 (torch) and the others in float64; the
tables use float64 (the two differ on a set of noise values of probability about 1e-7). Noise is made at
whatever size the image has: no pixel constant is involved. The tensor path reads the same tables with the
same random words (drawn on the CPU from the seed, moved to the device as 32-bit words): bit for bit the
numpy path.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, ClassVar, Sequence

import numpy as np

from ...errors import ShiftbenchError
from ...registry import SHIFTS
from ..corruptions._common import alias_table, draw_seed, noise_rng, normal_cdf, sample_from_table
from ._base import PerturbationSequence

__all__ = ["NoiseSequence", "GaussianNoiseSequence", "ShotNoiseSequence", "SpeckleNoiseSequence",
           "GAUSSIAN_SIGMA", "SHOT_PHOTONS", "SPECKLE_SCALE", "gaussian_pmf", "shot_pmf", "speckle_pmf"]

GAUSSIAN_SIGMA = (0.03, 0.05, 0.08)  # per difficulty 1, 2, 3
SHOT_PHOTONS = (300, 120, 60)
SPECKLE_SCALE = (0.05, 0.10, 0.15)

_LEVELS = np.arange(256, dtype=np.float64)


def _pmf_from_cdf(cdf_below: np.ndarray) -> np.ndarray:
    """``cdf_below[v, k]`` = P(output <= k | input v) for k in 0..254 -> the 256 x 256 pmf."""
    cdf = np.concatenate([cdf_below, np.ones((256, 1))], axis=1)
    return np.diff(cdf, axis=1, prepend=0.0).clip(min=0.0)


def gaussian_pmf(sigma: float) -> np.ndarray:
    """P(output = k | input v) of uint8(255 * clip(v/255 + sigma * n, 0, 1)): output <= k iff v + 255 sigma n < k + 1."""
    k = _LEVELS[None, :255]
    return _pmf_from_cdf(normal_cdf((k + 1 - _LEVELS[:, None]) / (255.0 * sigma)))


def speckle_pmf(scale: float) -> np.ndarray:
    """P(output = k | input v) of uint8(255 * clip(x + x * scale * n, 0, 1)) = trunc(v (1 + scale n)); 0 stays 0."""
    k = _LEVELS[None, :255]
    v = np.maximum(_LEVELS[:, None], 1e-300)
    cdf = normal_cdf(((k + 1) / v - 1.0) / scale)
    cdf[0] = 1.0
    return _pmf_from_cdf(cdf)


def shot_pmf(photons: int) -> np.ndarray:
    """P(output = k | input v) of uint8(255 * clip(Poisson(v/255 * c) / c, 0, 1)), c = ``photons``.

    Counts below c map to levels through the reference's own float64 expression; counts >= c give 255.
    """
    counts = np.arange(int(photons))
    outputs = (np.clip(counts / float(photons), 0, 1) * 255).astype(np.uint8)
    log_factorial = np.array([math.lgamma(n + 1.0) for n in counts])
    lam = _LEVELS[:, None] / 255.0 * photons
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.exp(counts[None, :] * np.log(lam) - lam - log_factorial[None, :])
    p[0] = (counts == 0).astype(np.float64)  # v = 0: lambda 0, count 0 surely
    pmf = np.zeros((256, 256))
    for k in np.unique(outputs):  # several counts share a level: sum their mass
        pmf[:, k] += p[:, outputs == k].sum(axis=1)
    pmf[:, 255] += np.maximum(0.0, 1.0 - p.sum(axis=1))
    return pmf


@lru_cache(maxsize=16)
def _table(kind: str, constant: float) -> np.ndarray:
    pmf = {"gaussian": gaussian_pmf, "shot": shot_pmf, "speckle": speckle_pmf}[kind](constant)
    return alias_table(pmf)


class NoiseSequence(PerturbationSequence):
    """Frame 0 the image, frames 1..30 independent draws of a per-value noise (its table: ``kind``, ``constants``)."""

    noise: ClassVar[bool] = True
    kind: ClassVar[str] = ""
    constants: ClassVar[tuple[float, float, float]] = (0.0, 0.0, 0.0)

    def constant(self, difficulty: int) -> float:
        if difficulty not in (1, 2, 3):
            raise ShiftbenchError(f"shift {self.name!r}: difficulty must be 1, 2 or 3, got {difficulty!r}")
        return self.constants[difficulty - 1]

    def table(self, difficulty: int) -> np.ndarray:
        return _table(self.kind, self.constant(difficulty))

    def draws(self, shape, difficulty, rng) -> dict[str, Any]:
        return {"noise_seed": draw_seed(rng)}

    def sequence(self, image: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        t = self.frames
        out = np.empty((t, *image.shape), dtype=np.uint8)
        out[0] = image
        # the T-1 noisy frames in one pass: the words of frame i follow those of frame i-1 in the stream
        out[1:] = sample_from_table(np.broadcast_to(image, out[1:].shape), self.table(int(params["difficulty"])),
                                    noise_rng(params))
        return out

    def sequence_tensor(self, x: Any, params: Sequence[dict[str, Any]]) -> Any:
        """uint8 (N, 3, H, W) -> uint8 (N, T, 3, H, W) on x's device, bit for bit the numpy path."""
        import torch

        from ..corruptions._torch import on_device

        n, _, h, w = x.shape
        params = list(params)
        if len(params) != n:
            raise ShiftbenchError(f"shift {self.name!r}: {n} images but {len(params)} params")
        t = self.frames
        size = (t - 1) * h * w * 3
        out = torch.empty((n, t, 3, h, w), dtype=torch.uint8, device=x.device)
        out[:, 0] = x
        values = x.permute(0, 2, 3, 1).reshape(n, 1, h * w * 3).to(torch.int64)
        for i, p in enumerate(params):
            difficulty = int(p["difficulty"])
            table = on_device(x.device, ("p_alias", self.kind, self.constant(difficulty)),
                              lambda d=difficulty: self.table(d).astype(np.int64))
            # the numpy path's 32-bit words (low half of each 64-bit PCG64 output first), frame-major, HWC
            words = noise_rng(p).bit_generator.random_raw((size + 1) // 2).view(np.uint32)[:size]
            word = torch.from_numpy(words.view(np.int32)).to(x.device).to(torch.int64).reshape(t - 1, -1) & 0xFFFFFFFF
            column = word >> 24
            entry = table[(values[i] << 8) | column]
            frames = torch.where((word & 0xFFFFFF) < (entry >> 8), column, entry & 0xFF).to(torch.uint8)
            out[i, 1:] = frames.reshape(t - 1, h, w, 3).permute(0, 3, 1, 2)
        return out


@SHIFTS.register("p_gaussian_noise", description="Gaussian noise sequence: 30 fresh draws (ImageNet-P)", group="imagenet_p")
class GaussianNoiseSequence(NoiseSequence):
    """Gaussian noise sequence (ImageNet-P): frames 1..30 are x + N(0, sigma) each, sigma 0.03 / 0.05 / 0.08 of the range."""

    kind: ClassVar[str] = "gaussian"
    constants = GAUSSIAN_SIGMA


@SHIFTS.register("p_shot_noise", description="Shot (Poisson) noise sequence: 30 fresh draws (ImageNet-P)", group="imagenet_p")
class ShotNoiseSequence(NoiseSequence):
    """Shot noise sequence (ImageNet-P): frames 1..30 are Poisson(x c) / c each, c = 300 / 120 / 60 photons."""

    kind: ClassVar[str] = "shot"
    constants = SHOT_PHOTONS


@SHIFTS.register("p_speckle_noise", description="Speckle noise sequence: 30 fresh draws (ImageNet-P extra)",
                 group="imagenet_p_extra")
class SpeckleNoiseSequence(NoiseSequence):
    """Speckle noise sequence (ImageNet-P extra): frames 1..30 are x + x N(0, s) each, s = 0.05 / 0.10 / 0.15."""

    kind: ClassVar[str] = "speckle"
    constants = SPECKLE_SCALE
