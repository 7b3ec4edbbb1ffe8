"""ImageNet-C-bar's sparkles and inverse_sparkles: star-shaped bursts of white light / a white veil with a star hole.

Both are built from one star of ``rays`` rays around a centre (cy, cx). For the pixel at row y, column x,
with dy = y - cy, dx = x - cx and dist = sqrt(dy^2 + dx^2), the reference takes the angle from the row
axis, ``arctan2(dx, dy)`` (its point is (y, x) and it calls ``arctan2(dp[1], dp[0])``), and

    d = (angle + pi) / (2 pi) * rays,   i = int(d),   f = d - i
    length = L[i % rays] + f * (L[(i+1) % rays] - L[i % rays])      (ray lengths L, linearly interpolated)
    g = (length^2 / (dist^2 + 1e-4)) ** ((100 - amount) / 50)
    w = clip((1 - (f - 1/2)^2) * g, 0, 1)          (a radius of 0 skips the star: w = clip(f, 0, 1))

The ray lengths come from ``np.random.RandomState(seed).randn()``, one draw per ray in order: sparkle by
sparkle, ray by ray, so a record replays here as in the reference. Everything is computed on whole planes
in float64 as the reference's scalars are; between two sparkles the image is rounded to float32 where the
reference casts each pixel with ``astype(np.float32)``; the end clips and truncates to uint8.

The tensor paths compute the same planes in float32 on the tensor's device (the ray lengths are drawn
on the CPU from the recorded seed) and agree with the numpy path within one grey level.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...registry import SHIFTS
from ..corruptions._common import to_uint8
from ._base import CBarCorruption, draw_seed32, float_parameter

__all__ = ["Sparkles", "InverseSparkles", "star_weight"]

_N_SPARKLES = 5


def _ray_lengths(random_state: np.random.RandomState, rays: int, radius: float, randomness: float,
                 at_least_one: bool) -> np.ndarray:
    """``rays`` lengths radius + randomness/100 * radius * randn(), in the reference's draw order
    (``randn(n)`` continues the legacy Gaussian stream exactly as n calls of ``randn()`` do)."""
    lengths = radius + randomness / 100.0 * radius * random_state.randn(int(rays))
    return np.maximum(lengths, 1.0) if at_least_one else lengths


def star_weight(shape: tuple[int, int], center: Any, radius: float, lengths: np.ndarray, amount: float) -> np.ndarray:
    """The star weight w (H x W, float64, 0..1) of the module's formula; ``center`` is (row, column)."""
    h, w = shape
    dy = np.arange(h, dtype=np.float64)[:, None] - float(center[0])
    dx = np.arange(w, dtype=np.float64)[None, :] - float(center[1])
    angle = np.arctan2(dx, dy)  # (H, W): the reference's arctan2(dp[1], dp[0]) for dp = (y, x) - center
    rays = len(lengths)
    d = angle
    d += np.pi
    d /= 2 * np.pi
    d *= rays
    i = d.astype(np.int64)  # d >= 0: truncation is the reference's int(); i = rays when the angle is pi
    f = d
    f -= i
    if radius != 0:
        dist2 = dy * dy + dx * dx
        np.sqrt(dist2, out=dist2)
        dist2 **= 2  # the reference squares np.linalg.norm
        dist2 += 1e-4
        wrapped = np.concatenate([lengths, lengths[:2]])  # wrapped[i] = lengths[i % rays] for i <= rays + 1
        lo = wrapped[:-1]
        length = np.take(np.diff(wrapped), i)
        length *= f
        length += np.take(lo, i)  # lo + f * (next - lo)
        length **= 2
        length /= dist2
        g = length
        exponent = (100 - amount) / 50.0
        if exponent != 1.0:
            g **= exponent
        f -= 0.5
        f **= 2
        np.subtract(1, f, out=f)
        f *= g
    return np.clip(f, 0, 1, out=f)


def _star_weight_tensor(h: int, w: int, centers, radii, lengths, rays, amounts):
    """``star_weight`` of one star per image, float32 (N, 1, H, W) on the device of ``centers`` (N, 2):
    ``lengths`` (N, R) padded past each image's ``rays`` (N,), ``radii`` and ``amounts`` (N,)."""
    import torch

    dev = centers.device
    n = centers.shape[0]
    dy = torch.arange(h, device=dev, dtype=torch.float32).view(1, h, 1) - centers[:, 0].view(n, 1, 1)
    dx = torch.arange(w, device=dev, dtype=torch.float32).view(1, 1, w) - centers[:, 1].view(n, 1, 1)
    angle = torch.atan2(dx, dy)
    r = rays.view(n, 1, 1)
    d = (angle + np.pi) / (2 * np.pi) * r.to(torch.float32)
    i = d.to(torch.int64)
    f = d - i
    lo = lengths.gather(1, (i % r).view(n, -1)).view(n, h, w)
    hi = lengths.gather(1, ((i + 1) % r).view(n, -1)).view(n, h, w)
    g = (lo + f * (hi - lo)) ** 2 / (dy * dy + dx * dx + 1e-4)
    g = g ** ((100 - amounts) / 50.0).view(n, 1, 1)
    star = (1 - (f - 0.5) ** 2) * g
    weight = torch.where(radii.view(n, 1, 1) != 0, star, f)
    return weight.clamp_(0, 1).unsqueeze(1)


def _to_device(values, like, dtype=None):
    import torch

    return torch.as_tensor(np.asarray(values), device=like.device, dtype=dtype)


@SHIFTS.register("sparkles", description="Five star-shaped bursts of white light (ImageNet-C-bar)", group="cbar")
class Sparkles(CBarCorruption):
    """Sparkles (ImageNet-C-bar): five white stars composited one after the other.

    Star k has its centre ``centers[k]`` (row, column), radius ``radii[k]`` = level * 0.01 * S (S the image
    side), ``nrays[k]`` rays in 50..199 whose lengths are max(1, r + 0.25 r randn()) (``randomness`` 25),
    ``amounts[k]`` = 50 (so g = length^2 / (dist^2 + 1e-4)); each pixel becomes v + w * (255 - v)
    (``color`` white) with w the star weight of the module's formula. The weight falls off as 1/dist^2 and
    never reaches 0: every star lightens the whole image a little.

    Severities 1..5 are levels 1, 2, 3, 5, 6: radii 0.01, 0.02, 0.03, 0.05, 0.06 of S (2.2 .. 13.4 px at 224).

    Params (the reference's record): ``centers`` (5 x [row, column]), ``radii`` (5 floats), ``nrays``
    (5 ints), ``amounts`` (5 ints), ``color`` ([255, 255, 255]), ``randomness`` (25), ``seed`` (for
    ``RandomState``, which draws the ray lengths).

    Non-square images: positions per axis (a centre's row uniform in [0, H), its column in [0, W)),
    the radii from the shorter side (S = min(H, W)). On a square image this is the reference.
    """

    def sample_parameters(self, shape, level, rng):
        h, w = shape[:2]
        centers = rng.uniform(0.0, 1.0, size=(_N_SPARKLES, 2)) * np.array([h, w], dtype=np.float64)
        radius = float_parameter(level, 0.1) * min(h, w)
        seed = draw_seed32(rng)
        nrays = rng.integers(50, 200, size=_N_SPARKLES)
        return {
            "centers": centers.tolist(),
            "radii": [float(radius)] * _N_SPARKLES,
            "color": [255, 255, 255],
            "randomness": 25,
            "seed": seed,
            "nrays": [int(r) for r in nrays],
            "amounts": [50] * _N_SPARKLES,
        }

    def transform(self, image, params):
        h, w = image.shape[:2]
        random_state = np.random.RandomState(seed=int(params["seed"]))
        color = np.asarray(params["color"], dtype=np.float64)
        color = color[:, None, None]
        out = np.ascontiguousarray(image.transpose(2, 0, 1))  # planes (3, H, W): the weight broadcasts over them
        for center, rays, amount, radius in zip(params["centers"], params["nrays"], params["amounts"], params["radii"]):
            lengths = _ray_lengths(random_state, rays, float(radius), float(params["randomness"]), at_least_one=True)
            weight = star_weight((h, w), center, float(radius), lengths, float(amount))
            value = out.astype(np.float32).astype(np.float64)  # the reference's per-pixel astype(np.float32)
            out = color - value
            out *= weight
            out += value  # v + w (c - v), in the reference's order
        return to_uint8(out).transpose(1, 2, 0).copy()

    def corrupt_tensor(self, x, severity, params):
        import torch

        n, _, h, w = x.shape
        out = x.to(torch.float32)
        states = [np.random.RandomState(seed=int(p["seed"])) for p in params]
        color = _to_device([p["color"] for p in params], x, torch.float32).view(n, 3, 1, 1)
        for k in range(_N_SPARKLES):
            rays = [int(p["nrays"][k]) for p in params]
            lengths = np.zeros((n, max(rays)), dtype=np.float64)
            for j, p in enumerate(params):
                lengths[j, : rays[j]] = _ray_lengths(states[j], rays[j], float(p["radii"][k]), float(p["randomness"]), True)
            weight = _star_weight_tensor(
                h, w,
                _to_device([p["centers"][k] for p in params], x, torch.float32),
                _to_device([float(p["radii"][k]) for p in params], x, torch.float32),
                _to_device(lengths, x, torch.float32),
                _to_device(rays, x, torch.int64),
                _to_device([float(p["amounts"][k]) for p in params], x, torch.float32),
            )
            out = out + weight * (color - out)  # v + w (c - v)
        return out.clamp_(0, 255).to(torch.uint8)


@SHIFTS.register("inverse_sparkles", description="A white veil with one star-shaped hole (ImageNet-C-bar)", group="cbar")
class InverseSparkles(CBarCorruption):
    """Inverse sparkles (ImageNet-C-bar): the image seen through a star-shaped hole in a white veil.

    One star of centre ``center`` (row, column), radius ``radius`` = 0.25 S (S the image side), ``rays``
    rays in 50..199 of lengths r + 0.25 r randn() (``randomness`` 25; no floor at 1, unlike sparkles),
    and ``amount`` = 100 - level * 6.5; each pixel becomes c + w * (v - c) (``color`` white) with w the
    star weight of the module's formula: the image inside the star, white far from it. The falloff
    exponent (100 - amount) / 50 = 0.13 * level grows with the severity.

    Severities 1..5 are levels 1, 2, 4, 9, 10: amount 93.5, 87, 74, 41.5, 35 (exponents 0.13, 0.26, 0.52,
    1.17, 1.3).

    Params (the reference's record): ``center`` ([row, column]), ``radius``, ``color`` ([255, 255, 255]),
    ``randomness`` (25), ``seed`` (for ``RandomState``, which draws the ray lengths), ``rays``, ``amount``.

    Non-square images: the centre per axis (row uniform in [0.25 H, 0.75 H), column in [0.25 W, 0.75 W)),
    the radius from the shorter side (S = min(H, W)). On a square image this is the reference.
    """

    def sample_parameters(self, shape, level, rng):
        h, w = shape[:2]
        center = rng.uniform(0.25, 0.75, size=2) * np.array([h, w], dtype=np.float64)
        seed = draw_seed32(rng)
        rays = int(rng.integers(50, 200))
        return {
            "center": center.tolist(),
            "radius": 0.25 * min(h, w),
            "color": [255, 255, 255],
            "randomness": 25,
            "seed": seed,
            "rays": rays,
            "amount": 100 - float_parameter(level, 65),
        }

    def transform(self, image, params):
        h, w = image.shape[:2]
        radius = float(params["radius"])
        lengths = _ray_lengths(np.random.RandomState(seed=int(params["seed"])), params["rays"], radius,
                               float(params["randomness"]), at_least_one=False)
        weight = star_weight((h, w), params["center"], radius, lengths, float(params["amount"]))
        color = np.asarray(params["color"], dtype=np.float64)[:, None, None]
        out = image.transpose(2, 0, 1).astype(np.float64)  # planes (3, H, W): the weight broadcasts over them
        out -= color
        out *= weight
        out += color  # c + w (v - c), in the reference's order
        return to_uint8(out).transpose(1, 2, 0).copy()

    def corrupt_tensor(self, x, severity, params):
        import torch

        n, _, h, w = x.shape
        rays = [int(p["rays"]) for p in params]
        lengths = np.zeros((n, max(rays)), dtype=np.float64)
        for j, p in enumerate(params):
            lengths[j, : rays[j]] = _ray_lengths(np.random.RandomState(seed=int(p["seed"])), rays[j], float(p["radius"]),
                                                 float(p["randomness"]), False)
        weight = _star_weight_tensor(
            h, w,
            _to_device([p["center"] for p in params], x, torch.float32),
            _to_device([float(p["radius"]) for p in params], x, torch.float32),
            _to_device(lengths, x, torch.float32),
            _to_device(rays, x, torch.int64),
            _to_device([float(p["amount"]) for p in params], x, torch.float32),
        )
        color = _to_device([p["color"] for p in params], x, torch.float32).view(n, 3, 1, 1)
        out = color + weight * (x.to(torch.float32) - color)
        return out.clamp_(0, 255).to(torch.uint8)
