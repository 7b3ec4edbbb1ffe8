"""ImageNet-C-bar noise corruptions: perlin_noise, blue_noise_sample and brownish_noise.

All three build a noise field from a ``np.random.RandomState(seed)`` whose ``seed`` is recorded in the
params, consuming that state in the reference's order, so a record replays the reference's field:

* perlin_noise: Ken Perlin's classic 2-D gradient noise (a 256-entry permutation and 256 unit gradients
  drawn from the state), summed over octaves as turbulence and evaluated at every pixel at once;
* blue_noise_sample and brownish_noise: Fourier-domain noise, a power spectrum over the distance of each
  frequency from the centre of the (H, W) grid with uniform random phases, back through an inverse FFT.

The tensor paths draw the same tables and phases on the CPU from the recorded seed, move them to the
tensor's device, and evaluate the field (gathers, or a complex FFT) and the pixel arithmetic there, in
float64 as the numpy path.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import scipy.fft

from ...registry import SHIFTS
from ..corruptions._common import to_uint8
from ..corruptions._torch import on_device, stack_to_device
from ._base import CBarCorruption, draw_seed32, float_parameter

__all__ = [
    "PerlinNoise",
    "BlueNoiseSample",
    "BrownishNoise",
    "perlin_tables",
    "perlin_noise_field",
    "fourier_phases",
    "fourier_noise",
]

# -- Perlin noise --------------------------------------------------------------------------------------

_B = 256  # lattice period: the permutation and gradient tables have this many entries
_N = 16 * 256  # offset added to coordinates before the lattice cell is taken


def perlin_tables(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(perm, grad) of the reference's generator seeded with ``RandomState(seed)``.

    The state gives, in order: 2*(2B+2) words ``randint(0, 2**31)``, two per gradient (x, y), each mapped to
    ``(w % 2B - B) / B`` and normalised; then B words whose ``% B`` are the partners of a Fisher-Yates-like
    pass over the identity (i = B-1 .. 0 swaps entry i with entry j). Each word is one 32-bit draw whatever
    the call's size, so one call draws them all. The reference then repeats the first B+2 entries of both
    tables after the first B, so only gradients 0..B-1 are ever read: perm is returned with 2B entries
    (perm[k] = perm[k % B]), grad with B rows. A gradient drawn as (0, 0) (about one seed in a thousand)
    is a zero vector here; the reference divides it by its zero norm and its NaN ends in an undefined cast.
    """
    words = np.random.RandomState(seed).randint(0, 2**31, size=2 * (2 * _B + 2) + _B)
    raw = words[: 2 * (2 * _B + 2)].reshape(2 * _B + 2, 2)[:_B]
    grad = ((raw % (2 * _B)) - _B) / _B
    norm = np.sqrt(grad[:, 0] * grad[:, 0] + grad[:, 1] * grad[:, 1])
    grad = np.divide(grad, norm[:, None], out=np.zeros_like(grad), where=norm[:, None] > 0)
    perm = list(range(_B))
    for i, word in zip(range(_B - 1, -1, -1), (words[-_B:] % _B).tolist()):
        perm[i], perm[word] = perm[word], perm[i]
    perm = np.array(perm + perm, dtype=np.int64)
    return perm, np.ascontiguousarray(grad)


def _s_curve(t):
    return t * t * (3.0 - 2.0 * t)


def _perlin(xp, perm, grad0, grad1, x, y, take):
    """Perlin noise at arrays ``x``, ``y`` (the reference's ``noise(x, y)``), for numpy or torch (``xp``);
    ``take(table, index)`` reads a table at an index array."""
    def cell(t):  # the reference's int(t) % B and t % 1 (Python's modulo: numpy's and torch's too)
        whole = np.trunc(t).astype(np.int64) if xp is np else xp.trunc(t).long()
        return whole % _B, t % 1.0

    bx0, rx0 = cell(x + _N)
    by0, ry0 = cell(y + _N)
    bx1 = (bx0 + 1) % _B
    by1 = (by0 + 1) % _B
    rx1 = rx0 - 1.0
    ry1 = ry0 - 1.0
    i = take(perm, bx0)
    j = take(perm, bx1)
    sx = _s_curve(rx0)
    sy = _s_curve(ry0)

    def corner(b, rx, ry):
        return rx * take(grad0, b) + ry * take(grad1, b)

    u = corner(take(perm, i + by0), rx0, ry0)
    v = corner(take(perm, j + by0), rx1, ry0)
    a = u + sx * (v - u)
    u = corner(take(perm, i + by1), rx0, ry1)
    v = corner(take(perm, j + by1), rx1, ry1)
    b = u + sx * (v - u)
    return 1.5 * (a + sy * (b - a))


def _octaves(turbulence: float) -> list[float]:
    """The frequencies the reference's turbulence sums: 1, 2, 4, ... while at most ``turbulence``."""
    out, f = [], 1.0
    while f <= turbulence:
        out.append(f)
        f *= 2
    return out


def _turbulence(xp, perm, grad0, grad1, u, v, turbulence, take):
    """The reference's kernel before gain and bias: turbulence (sum of |noise(f u, f v)| / f), or plain noise
    when ``turbulence`` is 1."""
    if turbulence == 1.0:
        return _perlin(xp, perm, grad0, grad1, u, v, take)
    total = 0.0
    for f in _octaves(turbulence):
        total = total + xp.abs(_perlin(xp, perm, grad0, grad1, f * u, f * v, take)) / f
    return total


def _lattice_coords(h: int, w: int, m) -> tuple[np.ndarray, np.ndarray]:
    """(u, v) = (row, column) @ m at every pixel, as the reference's ``np.matmul([y, x], m)``.

    A diagonal ``m`` (the one drawn) gives u as an (H, 1) column and v as a (1, W) row (the terms times 0
    are exact zeros), so the lattice cells are found per row and per column and broadcast."""
    rows = np.arange(h, dtype=np.float64)[:, None]
    cols = np.arange(w, dtype=np.float64)[None, :]
    (m00, m01), (m10, m11) = (float(m[0][0]), float(m[0][1])), (float(m[1][0]), float(m[1][1]))
    if m10 == 0.0 and m01 == 0.0:
        return rows * m00, cols * m11
    return rows * m00 + cols * m10, rows * m01 + cols * m11


def perlin_noise_field(shape: tuple[int, ...], m, turbulence: float, seed: int, gain: float, bias: float) -> np.ndarray:
    """The reference's per-pixel Perlin value ``clip(gain * turbulence(point @ m) + bias, 0, 1)``, (H, W) float64."""
    h, w = int(shape[0]), int(shape[1])
    perm, grad = perlin_tables(int(seed))
    u, v = _lattice_coords(h, w, m)
    f = _turbulence(np, perm, grad[:, 0].copy(), grad[:, 1].copy(), u, v, float(turbulence), np.take)
    f = np.broadcast_to(f * gain + bias, (h, w))
    return np.clip(f, 0.0, 1.0)


@SHIFTS.register("perlin_noise", description="Perlin turbulence noise blended over the image (ImageNet-C-bar)", group="cbar")
class PerlinNoise(CBarCorruption):
    """Perlin noise (ImageNet-C-bar): ``out = (1 - alpha) * x + 255 * alpha * n``, truncated to uint8.

    ``n = clip(gain * T(p @ m) + bias, 0, 1)`` at pixel p = (row, column), grey (the same in the three
    channels), with T the turbulence ``sum_f |noise(f u, f v)| / f`` over f = 1, 2, 4, 8, 16 (``turbulence``
    16) of Perlin's gradient noise whose tables come from ``RandomState(seed)`` (``perlin_tables``),
    ``m = I / (32 * im_size / 224)`` (a lattice cell of 32 pixels at 224), gain = bias = 0.5, and
    ``alpha = level * 0.05``: 0.23, 0.26, 0.29, 0.38, 0.44 at severities 1..5.

    Non-square images: ``im_size`` is the shorter side (the lattice scale in ``m``); the noise is evaluated at
    every pixel (row, column) of the H x W grid, so a square image gives the reference's field. Params: ``m``
    (a nested 2x2 list), ``turbulence``, ``seed``, ``gain``, ``bias``, ``alpha``.
    """

    def sample_parameters(self, shape, level, rng) -> dict[str, Any]:
        im_size = min(int(shape[0]), int(shape[1]))
        scale = 32 * im_size / 224
        m = (np.array([[1, 0], [0, 1]]) / scale).tolist()
        return {"m": m, "turbulence": 16.0, "seed": draw_seed32(rng), "gain": 0.5, "bias": 0.5,
                "alpha": float_parameter(level, 0.50)}

    def transform(self, image, params):
        alpha = float(params["alpha"])
        noise = perlin_noise_field(image.shape, params["m"], params["turbulence"], params["seed"],
                                   float(params["gain"]), float(params["bias"]))
        # the reference: (1 - alpha) * float32 image (a float32 product), + 255 * alpha * noise in float64
        out = (image.astype(np.float32) * np.float32(1 - alpha)).astype(np.float64)
        out += (255 * alpha * noise)[:, :, None]
        return to_uint8(out)

    def corrupt_tensor(self, x, severity, params):
        import torch

        n, _, h, w = x.shape
        dev = x.device
        fields = []
        for p in params:  # tables drawn on the CPU from the seed; the field evaluated on the device
            perm, grad = perlin_tables(int(p["seed"]))
            perm_t = torch.from_numpy(perm).to(dev)
            grad_t = torch.from_numpy(grad).to(dev)
            u, v = _lattice_coords(h, w, p["m"])
            u_t, v_t = torch.from_numpy(u).to(dev), torch.from_numpy(v).to(dev)
            f = _turbulence(torch, perm_t, grad_t[:, 0].contiguous(), grad_t[:, 1].contiguous(), u_t, v_t,
                            float(p["turbulence"]), lambda tab, idx: tab[idx])
            fields.append((f * float(p["gain"]) + float(p["bias"])).clamp_(0.0, 1.0).expand(h, w))
        noise = torch.stack(fields)[:, None]  # (N, 1, H, W)
        alpha = torch.tensor([float(p["alpha"]) for p in params], dtype=torch.float64, device=dev).view(n, 1, 1, 1)
        keep = (1 - alpha).to(torch.float32)  # float32 (1 - alpha) * x, as the numpy path
        out = (x.to(torch.float32) * keep).to(torch.float64) + 255 * alpha * noise
        return out.clamp_(0, 255).to(torch.uint8)


# -- Fourier-domain noise -----------------------------------------------------------------------------


@lru_cache(maxsize=32)
def _centre_distance(h: int, w: int) -> np.ndarray:
    """Distance of every (row, column) from the grid's centre (W/2, H/2): the reference's ``norm([x, y] - im_size/2)``."""
    dy = np.arange(h, dtype=np.float64)[:, None] - h / 2
    dx = np.arange(w, dtype=np.float64)[None, :] - w / 2
    d = np.sqrt(dx * dx + dy * dy)
    d.setflags(write=False)
    return d


@lru_cache(maxsize=32)
def _blue_power(h: int, w: int) -> np.ndarray:
    """Blue noise's amplitude spectrum: the distance from the centre (rolled as the spectrum is)."""
    out = np.roll(_centre_distance(h, w), (h // 2, w // 2), axis=(0, 1))
    out.setflags(write=False)
    return out


@lru_cache(maxsize=32)
def _brown_power(h: int, w: int) -> np.ndarray:
    """Brownish noise's amplitude spectrum: 1 / (distance**2 + 1) (rolled as the spectrum is)."""
    out = np.roll(1.0 / (_centre_distance(h, w) ** 2 + 1), (h // 2, w // 2), axis=(0, 1))
    out.setflags(write=False)
    return out


def fourier_phases(random_state: np.random.RandomState, h: int, w: int) -> np.ndarray:
    """(H, W) phases drawn as the reference draws them, then rolled by (H//2, W//2) with the spectrum.

    ``uniform(0, 2 pi, (H, W//2))`` first, mirrored (both axes reversed) into the right half; an odd width
    then draws a centre column ``uniform(0, 2 pi, (H//2, 1))``, laid out as (draws, 0, draws reversed)
    and cut to H rows (the cut drops the last row when H is even; a square image never needs it).
    """
    phases = random_state.uniform(low=0, high=2 * np.pi, size=(h, w // 2))
    if w % 2 == 0:
        full = np.concatenate((phases, phases[::-1, ::-1]), axis=1)
    else:
        centre = random_state.uniform(low=0, high=2 * np.pi, size=(h // 2, 1))
        column = np.concatenate((centre, np.zeros((1, 1)), centre[::-1, :]), axis=0)[:h]
        full = np.concatenate((phases, column, phases[::-1, ::-1]), axis=1)
    return np.roll(full, (h // 2, w // 2), axis=(0, 1))


def fourier_noise(random_state: np.random.RandomState, power: np.ndarray) -> np.ndarray:
    """One plane: ``real(ifft2(power * exp(i phases)))`` divided by its standard deviation (``power`` rolled)."""
    h, w = power.shape
    phases = fourier_phases(random_state, h, w)
    spectrum = np.empty((h, w), dtype=np.complex128)
    spectrum.real = power * np.cos(phases)
    spectrum.imag = power * np.sin(phases)
    noise = scipy.fft.ifft2(spectrum, overwrite_x=True).real
    return noise / np.std(noise)


def _fourier_noise_tensor(phases, power):
    """``fourier_noise`` of (..., H, W) float64 phases on their device, ``power`` (H, W) there too."""
    import torch

    noise = torch.fft.ifft2(torch.polar(power.expand_as(phases).contiguous(), phases)).real
    return noise / noise.std(dim=(-2, -1), correction=0, keepdim=True)


@SHIFTS.register("blue_noise_sample", description="Pixels dropped to black where blue noise is low (ImageNet-C-bar)", group="cbar")
class BlueNoiseSample(CBarCorruption):
    """Blue noise sample (ImageNet-C-bar): ``out = x * (n > threshold)``, each pixel kept or set to black.

    ``n`` is one plane of blue noise (``fourier_noise`` with amplitude spectrum = distance from the centre,
    phases from ``RandomState(seed)``), divided by its standard deviation; ``threshold = level * 0.3 - 2.5``:
    -2.26, -2.02, -1.78, -1.30, -0.82 at severities 1..5 (the higher, the more pixels dropped).

    Non-square images: the noise is generated at H x W: the spectrum's centre is (W/2, H/2), the phases
    are drawn as the reference's with H rows and W columns (``fourier_phases``: the odd/even branch follows
    the width), and the spectrum is rolled by (H//2, W//2) before the inverse FFT; a square image gives the
    reference's noise, draw for draw. Params: ``seed``, ``threshold``.
    """

    def sample_parameters(self, shape, level, rng) -> dict[str, Any]:
        return {"seed": draw_seed32(rng), "threshold": float_parameter(level, 3.0) - 2.5}

    def transform(self, image, params):
        h, w = image.shape[:2]
        noise = fourier_noise(np.random.RandomState(int(params["seed"])), _blue_power(h, w))
        keep = (noise > float(params["threshold"])).astype(np.uint8)
        return image * keep[:, :, None]

    def corrupt_tensor(self, x, severity, params):
        import torch

        n, _, h, w = x.shape
        phases = stack_to_device([fourier_phases(np.random.RandomState(int(p["seed"])), h, w) for p in params], x)
        power = on_device(x.device, ("cbar_blue_power", h, w), lambda: _blue_power(h, w).copy())
        noise = _fourier_noise_tensor(phases, power)  # (N, H, W)
        threshold = torch.tensor([float(p["threshold"]) for p in params], dtype=torch.float64, device=x.device)
        keep = noise > threshold.view(n, 1, 1)
        return x * keep[:, None].to(torch.uint8)


@SHIFTS.register("brownish_noise", description="Additive brownish (1/f^2) Fourier noise (ImageNet-C-bar)", group="cbar")
class BrownishNoise(CBarCorruption):
    """Brownish noise (ImageNet-C-bar): ``out = x + intensity * n``, truncated to uint8.

    ``n`` has three planes (R, G, B, drawn in that order from one ``RandomState(seed)``), each
    ``fourier_noise`` with amplitude spectrum ``1 / (d**2 + 1)`` (d the distance from the centre), divided
    by its standard deviation; ``intensity = level * 6.4``: 6.4, 12.8, 19.2, 25.6, 32 at severities 1..5.

    Non-square images: the noise is generated at H x W: the spectrum's centre is (W/2, H/2), the phases
    are drawn as the reference's with H rows and W columns (``fourier_phases``: the odd/even branch follows
    the width), and the spectrum is rolled by (H//2, W//2) before the inverse FFT; a square image gives the
    reference's noise, draw for draw. Params: ``seed``, ``intensity``.
    """

    def sample_parameters(self, shape, level, rng) -> dict[str, Any]:
        return {"seed": draw_seed32(rng), "intensity": float_parameter(level, 64)}

    def transform(self, image, params):
        h, w = image.shape[:2]
        state = np.random.RandomState(int(params["seed"]))
        power = _brown_power(h, w)
        noise = np.stack([fourier_noise(state, power) for _ in range(3)], axis=2)
        noise *= float(params["intensity"])
        noise += image
        return to_uint8(noise)

    def corrupt_tensor(self, x, severity, params):
        import torch

        n, _, h, w = x.shape
        planes = []
        for p in params:
            state = np.random.RandomState(int(p["seed"]))
            planes.append(np.stack([fourier_phases(state, h, w) for _ in range(3)]))  # R, G, B in draw order
        phases = stack_to_device(planes, x)  # (N, 3, H, W)
        power = on_device(x.device, ("cbar_brown_power", h, w), lambda: _brown_power(h, w).copy())
        noise = _fourier_noise_tensor(phases, power)
        intensity = torch.tensor([float(p["intensity"]) for p in params], dtype=torch.float64, device=x.device)
        out = x.to(torch.float64) + intensity.view(n, 1, 1, 1) * noise
        return out.clamp_(0, 255).to(torch.uint8)

