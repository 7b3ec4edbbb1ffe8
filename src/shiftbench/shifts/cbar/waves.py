"""ImageNet-C-bar's procedural wave patterns: single_frequency_greyscale, cocentric_sine_waves, plasma_noise.

Each is a closed-form function of the pixel position (x the column, y the row) that the reference evaluates
pixel by pixel in Python; here it is evaluated over all pixels at once, in the reference's float64 operation
order (float64, the same numpy functions), so the numpy path gives the per-pixel formula's bytes
(tests/shifts/test_cbar_waves.py holds it to a pixel-by-pixel transcription). The tensor paths compute the same planes in float64 on
the tensor's device, for a whole batch at once (per-image parameters as (N, 1, 1) tensors).
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from ...registry import SHIFTS
from ..corruptions._common import to_uint8
from ._base import CBarCorruption, float_parameter

__all__ = ["SingleFrequencyGreyscale", "CocentricSineWaves", "PlasmaNoise"]


def _grid(h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates as float64: x (1, W) the column, y (H, 1) the row."""
    return np.arange(w, dtype=np.float64)[None, :], np.arange(h, dtype=np.float64)[:, None]


def _add_plane(image: np.ndarray, plane: np.ndarray) -> np.ndarray:
    """clip(image + plane) truncated, the float64 (H, W) plane added to every channel."""
    out = cv2.merge((plane, plane, plane))  # float64 HxWx3: a third of numpy's broadcast time
    out += image
    return to_uint8(out)


def _grid_tensor(n: int, h: int, w: int, device) -> tuple[Any, Any]:
    """The same as (1, 1, W) and (1, H, 1) float64 tensors on ``device``."""
    import torch

    x = torch.arange(w, dtype=torch.float64, device=device).view(1, 1, w)
    y = torch.arange(h, dtype=torch.float64, device=device).view(1, h, 1)
    return x, y


def _column(values: list[float], device) -> Any:
    """Per-image scalars as an (N, 1, 1) float64 tensor."""
    import torch

    return torch.tensor(values, dtype=torch.float64, device=device).view(-1, 1, 1)


@SHIFTS.register(
    "single_frequency_greyscale",
    description="A greyscale plane wave of one random spatial frequency added (ImageNet-C-bar)",
    group="cbar",
)
class SingleFrequencyGreyscale(CBarCorruption):
    """Single-frequency greyscale (ImageNet-C-bar): out = clip(I + a * sin(f0 x + f1 y + phase)), truncated.

    Draws: ``freq`` = [m, u] in random order, m ~ U(-pi, pi), u ~ U(-|m|, |m|); ``phase`` ~ U(0, 2 pi);
    ``intensity`` a = level * 196 / 10, the same plane added to the three channels. Severities 1..5
    (levels 1, 1.5, 2, 4.5, 5): a = 19.6, 29.4, 39.2, 88.2, 98.0 grey levels.

    Non-square images: nothing depends on the image size (the frequencies are per pixel), so an H x W
    image gets the wave at its own pixel positions, x = 0..W-1 (columns) and y = 0..H-1 (rows); any
    crop of the output equals the output of the same crop.
    """

    def sample_parameters(self, shape, level, rng):
        freq_mag = float(rng.uniform(-np.pi, np.pi))
        freq_2 = float(rng.uniform(-abs(freq_mag), abs(freq_mag)))
        order = rng.permutation(2)
        freq = [(freq_mag, freq_2)[int(k)] for k in order]
        phase = float(rng.uniform(0.0, 2 * np.pi))
        return {"freq": freq, "phase": phase, "intensity": float_parameter(level, 196)}

    @staticmethod
    def plane(h: int, w: int, params: dict[str, Any]) -> np.ndarray:
        """sin(x f0 + y f1 + phase), (H, W) float64."""
        x, y = _grid(h, w)
        f0, f1 = (float(v) for v in params["freq"])
        return np.sin((x * f0 + y * f1) + float(params["phase"]))

    def transform(self, image, params):
        h, w = image.shape[:2]
        noise = self.plane(h, w, params)
        noise *= float(params["intensity"])
        return _add_plane(image, noise)

    def corrupt_tensor(self, x, severity, params):
        import torch

        n, _, h, w = x.shape
        gx, gy = _grid_tensor(n, h, w, x.device)
        f0 = _column([float(p["freq"][0]) for p in params], x.device)
        f1 = _column([float(p["freq"][1]) for p in params], x.device)
        phase = _column([float(p["phase"]) for p in params], x.device)
        a = _column([float(p["intensity"]) for p in params], x.device)
        noise = torch.sin((gx * f0 + gy * f1) + phase) * a  # (N, H, W)
        return _add_and_truncate(x, noise.unsqueeze(1))


@SHIFTS.register(
    "cocentric_sine_waves",
    description="Wavy concentric rings about a random centre added (ImageNet-C-bar)",
    group="cbar",
)
class CocentricSineWaves(CBarCorruption):
    """Cocentric sine waves (ImageNet-C-bar): a sawtooth of the distance to a centre, made wavy by the angle.

    With dx = x - x0, dy = y - y0 (x the column, y the row):
    d = ((sqrt(dx^2 + dy^2) + sin(freq * atan2(dx, dy)) * amplitude) mod ring_width) / ring_width - 1/2,
    out_c = clip(I_c + intensity_c * d), truncated. Draws: ``offset`` = [x0, y0] (the centre),
    ``freq`` ~ U(0, 10), ``amplitude`` and ``ring_width`` ~ U(0, S/10); ``intensity`` = three equal values
    level * 128 / 10. Severities 1..5 (levels 3, 5, 8, 9, 10): 38.4, 64.0, 102.4, 115.2, 128.0.

    Non-square images: the centre is drawn per axis over that axis, x0 ~ U(0, W) and y0 ~ U(0, H) (one
    draw of two values, x first, as the reference's U(0, im_size, size=2)); the lengths ``amplitude`` and
    ``ring_width`` scale with the shorter side, S = min(H, W). The rings themselves depend only on the
    pixel position, so any crop of the output equals the output of the same crop with the same params.

    The plane is float64 throughout: the sawtooth jumps by ``intensity`` at each ring edge, so the float32
    rounding would move whole pixels across an edge.
    """

    def sample_parameters(self, shape, level, rng):
        h, w = shape[:2]
        side = min(h, w)
        offset = rng.uniform(0.0, np.array([w, h], dtype=np.float64), size=2)
        freq = float(rng.uniform(0.0, 10.0))
        amplitude = float(rng.uniform(0.0, side / 10))
        ring_width = float(rng.uniform(0.0, side / 10))
        intensity = [float_parameter(level, 128) for _ in range(3)]
        return {
            "offset": [float(v) for v in offset],
            "freq": freq,
            "amplitude": amplitude,
            "ring_width": ring_width,
            "intensity": intensity,
        }

    @staticmethod
    def plane(h: int, w: int, params: dict[str, Any]) -> np.ndarray:
        """The sawtooth d in -1/2..1/2, (H, W) float64."""
        x, y = _grid(h, w)
        x0, y0 = (float(v) for v in params["offset"])
        dx, dy = x - x0, y - y0
        angle = np.arctan2(dx, dy) * float(params["freq"])
        ring_width = float(params["ring_width"])
        d = np.sqrt(dx * dx + dy * dy) + np.sin(angle) * float(params["amplitude"])
        d %= ring_width
        d /= ring_width
        d -= 0.5
        return d

    def transform(self, image, params):
        h, w = image.shape[:2]
        noise = self.plane(h, w, params)
        a = [float(v) for v in params["intensity"]]
        if a[0] == a[1] == a[2]:  # as drawn
            noise *= a[0]
            return _add_plane(image, noise)
        return to_uint8(image + noise[:, :, None] * np.array(a, dtype=np.float64))

    def corrupt_tensor(self, x, severity, params):
        import torch

        n, _, h, w = x.shape
        gx, gy = _grid_tensor(n, h, w, x.device)
        dx = gx - _column([float(p["offset"][0]) for p in params], x.device)
        dy = gy - _column([float(p["offset"][1]) for p in params], x.device)
        angle = torch.atan2(dx, dy) * _column([float(p["freq"]) for p in params], x.device)
        ring_width = _column([float(p["ring_width"]) for p in params], x.device)
        d = torch.sqrt(dx * dx + dy * dy) + torch.sin(angle) * _column([float(p["amplitude"]) for p in params], x.device)
        d = torch.remainder(d, ring_width) / ring_width - 0.5  # remainder: numpy's % (sign of the divisor)
        a = torch.tensor([[float(v) for v in p["intensity"]] for p in params], dtype=torch.float64, device=x.device)
        return _add_and_truncate(x, d.unsqueeze(1) * a.view(n, 3, 1, 1))


@SHIFTS.register(
    "plasma_noise",
    description="Smooth colour plasma from an iterated warp of the pixel grid blended in (ImageNet-C-bar)",
    group="cbar",
)
class PlasmaNoise(CBarCorruption):
    """Plasma noise (ImageNet-C-bar): each pixel's position, scaled, goes through an iterated warp.

    Start from (x, y) / scale and i = (1, 1, 1, 0); each of ``iterations`` steps computes
    r = (cos(y i0 - i3 + t / i1), sin(x i0 - i3 + t / i1)) / i2, turns it, r += 0.3 (-r1, r0), moves
    (x, y) += r, and multiplies i by (1.93, 1.15, 2.25 - sharpness, t i1) (t = ``time``; i3 stays 0).
    The colour is (sin(x - t), sin((x + y + sin t) / 2), sin(y + t)) and
    out = clip((1 - a / 255) I + a * colour), truncated. Draws: ``time`` ~ U(0, 6 pi), ``iterations``
    an integer in 4..6, ``sharpness`` ~ U(0.5, 1), ``scale`` ~ U(0.075, 0.2) * S; ``intensity``
    a = level * 64 / 10. Severities 1..5 (levels 4.75, 7, 8.5, 9.25, 10): a = 30.4, 44.8, 54.4, 59.2, 64.0.

    Non-square images: ``scale`` (a length in pixels) is drawn against the shorter side, S = min(H, W);
    the warp is evaluated at each pixel's own position, x = 0..W-1, y = 0..H-1, so any crop of the output
    equals the output of the same crop with the same params.
    """

    def sample_parameters(self, shape, level, rng):
        h, w = shape[:2]
        time = float(rng.uniform(0.0, 6 * np.pi))
        iterations = int(rng.integers(4, 7))
        sharpness = float(rng.uniform(0.5, 1.0))
        scale = float(rng.uniform(0.075, 0.2) * min(h, w))
        return {
            "time": time,
            "iterations": iterations,
            "sharpness": sharpness,
            "scale": scale,
            "intensity": float_parameter(level, 64),
        }

    @staticmethod
    def steps(params: dict[str, Any]) -> list[tuple[float, float, float, float]]:
        """The (i0, i1, i2, i3) of every step, computed as the reference's float64 vector product."""
        t, sharp = float(params["time"]), float(params["sharpness"])
        i = (1.0, 1.0, 1.0, 0.0)
        out = []
        for _ in range(int(params["iterations"])):
            out.append(i)
            i = (i[0] * 1.93, i[1] * 1.15, i[2] * (2.25 - sharp), i[3] * (t * i[1]))
        return out

    @classmethod
    def colour(cls, h: int, w: int, params: dict[str, Any]) -> np.ndarray:
        """The plasma (H, W, 3) in -1..1, float64."""
        t = float(params["time"])
        scale = float(params["scale"])
        x, y = _grid(h, w)
        x = x / scale  # (1, W) and (H, 1): the first step's r0 depends on the row only, r1 on the column,
        y = y / scale  # so it runs on H + W values; its moves make x and y full (H, W) planes
        for i0, i1, i2, i3 in cls.steps(params):
            phase = t / i1
            r0 = np.cos(y * i0 - i3 + phase) / i2
            r1 = np.sin(x * i0 - i3 + phase) / i2
            x = x + (r0 + (-r1 * 0.3))
            y = y + (r1 + r0 * 0.3)
        out = np.empty((h, w, 3), dtype=np.float64)
        np.sin(x - t, out=out[:, :, 0])
        np.sin((x + y + np.sin(t)) * 0.5, out=out[:, :, 1])
        np.sin(y + t, out=out[:, :, 2])
        return out

    def transform(self, image, params):
        h, w = image.shape[:2]
        a = float(params["intensity"])
        noise = self.colour(h, w, params)
        noise *= a
        noise += (1 - a / 255) * image
        return to_uint8(noise)

    def corrupt_tensor(self, x, severity, params):
        import torch

        n, _, h, w = x.shape
        gx, gy = _grid_tensor(n, h, w, x.device)
        t = _column([float(p["time"]) for p in params], x.device)
        scale = _column([float(p["scale"]) for p in params], x.device)
        px, py = gx / scale, gy / scale  # (N, 1, W) and (N, H, 1) until the first step's moves (as the numpy path)
        steps = [self.steps(p) for p in params]
        for s in range(max(len(st) for st in steps)):
            # images whose warp has fewer steps take (1, 1, 1, 0) and a zero step
            i = [st[s] if s < len(st) else (1.0, 1.0, 1.0, 0.0) for st in steps]
            i0, i1, i2, i3 = (_column([v[k] for v in i], x.device) for k in range(4))
            on = _column([1.0 if s < len(st) else 0.0 for st in steps], x.device)
            phase = t / i1
            r0 = torch.cos(py * i0 - i3 + phase) / i2
            r1 = torch.sin(px * i0 - i3 + phase) / i2
            px = px + (r0 + (-r1 * 0.3)) * on
            py = py + (r1 + r0 * 0.3) * on
        colour = torch.stack((torch.sin(px - t), torch.sin((px + py + torch.sin(t)) * 0.5), torch.sin(py + t)), dim=1)
        a = _column([float(p["intensity"]) for p in params], x.device).view(n, 1, 1, 1)
        out = (1 - a / 255) * x.to(torch.float64) + a * colour
        return out.clamp_(0, 255).to(torch.uint8)


def _add_and_truncate(x, noise):
    """clip(x + noise) truncated to uint8, noise (N, 1 or 3, H, W) float64."""
    import torch

    return (x.to(torch.float64) + noise).clamp_(0, 255).to(torch.uint8)
