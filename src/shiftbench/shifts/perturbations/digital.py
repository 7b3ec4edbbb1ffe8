"""ImageNet-P sequences (digital): ``p_brightness``, the image's HSV value raised step by step.

Frame i (0..30) adds ``(i - 15) * 2 / 100`` to the HSV value (clipped to 0..1) of the image scaled to 0..1,
converts back to RGB and truncates ``x * 255`` to uint8, as the reference (hendrycks/robustness,
ImageNet-P/create_p/make_imagenet_p.py, ``brightness``) does through scikit-image's ``rgb2hsv``/``hsv2rgb``.
The HSV conversion here is written in numpy (and torch for the tensor path) with the same float64 arithmetic,
so the frames equal scikit-image's byte for byte (tests/shifts/test_perturbations_geometric.py). Choices
where the reference is silent: it truncates (``np.uint8``), so a grey level whose round trip lands a hair
under an integer drops by one, as there; the crop (``crop=``) comes first, as the reference crops to 224
before perturbing (a point-wise perturbation: the order changes nothing). No constant depends on the size.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...registry import SHIFTS
from ._base import PerturbationSequence

__all__ = ["PBrightness", "rgb_to_hsv", "hsv_to_rgb", "brightness_shifts"]


def brightness_shifts(frames: int = 31) -> np.ndarray:
    """The value added at each frame: (i - 15) * 2 / 100 for i = 0..30."""
    return np.array([(i - 15) * 2 / 100.0 for i in range(frames)])


def rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    """HSV of float RGB in 0..1 (last axis), hue in [0, 1); grey pixels get hue and saturation 0.

    >>> rgb_to_hsv(np.array([[1.0, 0.5, 0.0]])).round(4).tolist()
    [[0.0833, 1.0, 1.0]]
    """
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    v = rgb.max(axis=-1)
    spread = v - rgb.min(axis=-1)
    grey = spread == 0.0
    safe = np.where(grey, 1.0, spread)
    s = np.where(grey, 0.0, spread / np.where(v == 0.0, 1.0, v))
    # the channel holding the maximum decides the sextant; ties go to the later channel (blue, then green)
    h = np.where(b == v, 4.0 + (r - g) / safe, np.where(g == v, 2.0 + (b - r) / safe, (g - b) / safe))
    h = np.where(grey, 0.0, (h / 6.0) % 1.0)
    return np.stack([h, s, v], axis=-1)


def hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    """Float RGB in 0..1 of HSV (last axis), the inverse of :func:`rgb_to_hsv`.

    >>> hsv_to_rgb(rgb_to_hsv(np.array([[0.2, 0.4, 0.6]]))).round(6).tolist()
    [[0.2, 0.4, 0.6]]
    """
    h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    sector = np.floor(h * 6)
    f = h * 6 - sector
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    sector = sector.astype(np.int64) % 6
    table = np.stack([np.stack(c, axis=-1) for c in
                      ((v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q))])
    return np.take_along_axis(table, sector[None, ..., None].repeat(3, axis=-1), axis=0)[0]


@SHIFTS.register("p_brightness", description="Brightness rising through 31 frames (ImageNet-P)", group="imagenet_p")
class PBrightness(PerturbationSequence):
    """ImageNet-P brightness: 31 frames, HSV value + (i - 15) * 2 / 100; each frame compared with the one
    ``difficulty`` frames before."""

    frames = 31

    def sequence(self, image: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        hsv = rgb_to_hsv(image / 255.0)
        out = np.empty((self.frames, *image.shape), np.uint8)
        for i, c in enumerate(brightness_shifts(self.frames)):
            shifted = hsv.copy()
            shifted[..., 2] = np.clip(hsv[..., 2] + c, 0, 1)
            out[i] = hsv_to_rgb(shifted) * 255  # truncated, as the reference's np.uint8
        return out

    def sequence_tensor(self, x: Any, params: Sequence[dict[str, Any]]) -> Any:
        import torch

        rgb = x.permute(0, 2, 3, 1).to(torch.float64) / 255.0
        r, g, b = rgb.unbind(-1)
        v = rgb.amax(-1)
        spread = v - rgb.amin(-1)
        grey = spread == 0.0
        safe = torch.where(grey, torch.ones_like(spread), spread)
        s = torch.where(grey, torch.zeros_like(v), spread / torch.where(v == 0.0, torch.ones_like(v), v))
        h = torch.where(b == v, 4.0 + (r - g) / safe, torch.where(g == v, 2.0 + (b - r) / safe, (g - b) / safe))
        h = torch.where(grey, torch.zeros_like(h), torch.remainder(h / 6.0, 1.0))
        sector = torch.floor(h * 6)
        f = h * 6 - sector
        sector = (sector.long() % 6)[..., None].expand(*h.shape, 3)
        out = torch.empty((x.shape[0], self.frames, *x.shape[1:]), dtype=torch.uint8, device=x.device)
        for i, c in enumerate(brightness_shifts(self.frames).tolist()):
            val = torch.clamp(v + c, 0, 1)
            p, q, t = val * (1 - s), val * (1 - f * s), val * (1 - (1 - f) * s)
            table = torch.stack([torch.stack(k, -1) for k in
                                 ((val, t, p), (q, val, p), (p, val, t), (p, q, val), (t, p, val), (val, p, q))])
            frame = torch.gather(table, 0, sector[None]).squeeze(0) * 255
            out[:, i] = frame.to(torch.uint8).permute(0, 3, 1, 2)
        return out
