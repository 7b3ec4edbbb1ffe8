"""Generate the frost overlays shipped in src/shiftbench/data/frost (procedural, no photographs).

    python tools/make_frost_overlays.py [--out src/shiftbench/data/frost] [--seed 2024]

Each overlay is grown from a fixed seed out of three layers:

- crinkle: ridged noise, the dense crinkled ice skin that covers the whole pane. At four scales
  (Gaussian widths 0.7-5.6 px) and four orientations, white noise is band-passed with an elongated
  (oriented) difference of Gaussians; the absolute value turns its zero crossings into sharp
  creases. A smooth random field picks which orientation dominates where, so patches crinkle
  in different directions;
- feathers: many dendritic ice crystals (jittered needle polylines with dense, short side needles
  at about +-60 degrees), drawn anti-aliased, covering the pane rather than dotting it;
- haze: very smooth noise, the slow variation of light across the pane.

The sum is then matched to statistics measured on the five frost photographs ImageNet-C uses
(numbers only; none of their pixels), each as a 224 px image sees it (frost crops an overlay at a
random offset, so a pixel counts as often as the crops that contain it): first its spatial
structure, band by band (the standard deviation of each octave of a difference-of-Gaussians
pyramid, i.e. the radially averaged power spectrum in octaves), then the correlations between the
colour channels, then, channel by channel, the mean and spread of brightness. So frost changes an
image by the same amount, and with the same fine texture, as the reference.
The output is deterministic for a given seed and OpenCV/numpy version.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import cv2
import numpy as np

# Targets, measured on imagecorruptions 1.1.2's frost1.png, frost2.png, frost3.png (identical to
# frost2), frost4.jpg, frost5.jpg (it draws only these five) at their native resolution (the
# reference crops them unscaled): (height, width, RGB mean, RGB std, band stds, channel
# correlations R-G, R-B, G-B). Band stds: this tool's `band_stds` of the grey image (RGB mean),
# pixels weighted as a random 224 px crop sees them (`crop_weights`, see CROP_STATS below). Band k
# is G(s_{k-1}) - G(s_k) for Gaussian blurs s = 0, 1, 2, 4, 8, 16, 32 px; the last entry is what is
# left at 32 px. The RGB std (overall, unweighted) is for comparison only: the spread that is
# matched is the crop-weighted one. Sizes are those of the reference overlays, so random crops of a
# 224 px image move over the same range.
BAND_SIGMAS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
TARGETS = [
    (600, 900, (77.7, 149.1, 165.7), (26.9, 16.5, 15.3), (6.62, 2.85, 1.99, 1.90, 2.32, 2.84, 12.46),
     (0.8236, 0.5744, 0.9327)),
    (315, 560, (200.8, 205.4, 214.5), (21.4, 22.1, 22.6), (7.74, 4.41, 4.26, 3.57, 2.74, 2.23, 12.26),
     (0.9956, 0.9900, 0.9950)),
    (315, 560, (200.8, 205.4, 214.5), (21.4, 22.1, 22.6), (7.74, 4.41, 4.26, 3.57, 2.74, 2.23, 12.26),
     (0.9956, 0.9900, 0.9950)),
    (350, 527, (137.6, 152.8, 165.2), (28.5, 28.5, 29.9), (13.56, 6.82, 5.31, 4.03, 2.73, 1.80, 13.15),
     (0.9975, 0.9914, 0.9930)),
    (495, 660, (112.4, 123.4, 134.8), (44.4, 43.3, 41.7), (16.32, 7.94, 7.70, 7.41, 6.66, 4.68, 17.58),
     (0.9994, 0.9977, 0.9991)),
]
# What a random 224 px crop sees (crop offsets uniform in [0, size - 224), as frost draws them; a
# pixel is weighted by the number of crops that contain it, see `crop_weights`): RGB mean and RGB
# std, measured the same way on the reference's five. The centres of the reference photographs are
# not as bright as their borders (frost5: 100.8 / 112.2 / 124.1 against 112.4 / 123.4 / 134.8
# overall), and this, not the overall mean, is what frost adds to a 224 px image.
CROP_SIZE = 224
CROP_STATS = [
    ((77.0, 147.7, 164.1), (28.3, 16.5, 14.8)),
    ((197.9, 202.2, 211.5), (20.2, 21.0, 21.8)),
    ((197.9, 202.2, 211.5), (20.2, 21.0, 21.8)),
    ((144.9, 159.7, 172.6), (26.9, 27.0, 28.3)),
    ((100.8, 112.2, 124.1), (38.3, 37.7, 36.8)),
]
# Texture checks printed for each overlay (grey image; Sobel gradient magnitude / 8, 7x7 local
# standard deviation), measured the same way on the reference's five, for comparison:
# (gradient mean, gradient median, gradient 90th percentile, local-contrast mean)
REFERENCE_TEXTURE = [
    (6.17, 5.16, 11.96, 9.11),
    (7.44, 5.86, 14.98, 11.34),
    (7.44, 5.86, 14.98, 11.34),
    (12.13, 9.96, 23.92, 17.83),
    (14.48, 11.86, 29.21, 23.16),
]


def bands(grey: np.ndarray) -> list[np.ndarray]:
    """Difference-of-Gaussians pyramid: the bands and the coarse rest; they sum to ``grey``."""
    out, previous = [], grey
    for sigma in BAND_SIGMAS:
        blurred = cv2.GaussianBlur(grey, (0, 0), sigma)
        out.append(previous - blurred)
        previous = blurred
    out.append(previous)
    return out


def band_stds(grey: np.ndarray, weights: np.ndarray | None = None) -> list[float]:
    """Standard deviation of each pyramid band, pixels weighted by ``weights`` (default: equally)."""
    if weights is None:
        return [float(b.std()) for b in bands(grey.astype(np.float32))]
    out = []
    for band in bands(grey.astype(np.float32)):
        mean = float((band * weights).sum())
        out.append(math.sqrt(float(((band - mean) ** 2 * weights).sum())))
    return out


def texture(grey: np.ndarray) -> tuple[float, float, float, float]:
    grey = grey.astype(np.float32)
    gx = cv2.Sobel(grey, cv2.CV_32F, 1, 0, ksize=3) / 8
    gy = cv2.Sobel(grey, cv2.CV_32F, 0, 1, ksize=3) / 8
    magnitude = np.hypot(gx, gy)
    mean = cv2.blur(grey, (7, 7))
    local = np.sqrt(np.maximum(cv2.blur(grey * grey, (7, 7)) - mean * mean, 0))
    return (float(magnitude.mean()), float(np.median(magnitude)), float(np.percentile(magnitude, 90)),
            float(local.mean()))


def oriented_kernel(sigma: float, angle: float, elongation: float) -> np.ndarray:
    """A Gaussian stretched ``elongation`` times along ``angle``, normalised to sum 1."""
    radius = int(math.ceil(3 * sigma * elongation))
    y, x = np.mgrid[-radius:radius + 1, -radius:radius + 1].astype(np.float32)
    u = x * math.cos(angle) + y * math.sin(angle)
    v = -x * math.sin(angle) + y * math.cos(angle)
    kernel = np.exp(-0.5 * ((u / (sigma * elongation)) ** 2 + (v / sigma) ** 2))
    return kernel / kernel.sum()


def crinkle(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """Ridged, oriented, multi-octave noise: creases everywhere, in patch-wise directions."""
    n_orient = 4
    angles = rng.uniform(0, math.pi) + np.arange(n_orient) * math.pi / n_orient
    # which orientation dominates where: a soft arg-max over smooth random fields
    fields = np.stack([cv2.GaussianBlur(rng.standard_normal((height, width)).astype(np.float32), (0, 0), 20.0)
                       for _ in range(n_orient)])
    fields /= fields.std() + 1e-6
    weights = np.exp(3.0 * fields)
    weights /= weights.sum(0, keepdims=True)
    out = np.zeros((height, width), dtype=np.float32)
    for sigma, amplitude in ((0.7, 1.0), (1.4, 0.8), (2.8, 0.6), (5.6, 0.4)):
        for k, angle in enumerate(angles):
            noise = rng.standard_normal((height, width)).astype(np.float32)
            fine = cv2.filter2D(noise, -1, oriented_kernel(sigma, float(angle), 3.0), borderType=cv2.BORDER_REFLECT)
            coarse = cv2.filter2D(noise, -1, oriented_kernel(2 * sigma, float(angle), 3.0), borderType=cv2.BORDER_REFLECT)
            band = fine - coarse
            band /= band.std() + 1e-6
            out += amplitude * weights[k] * (1.0 - np.abs(band))  # bright thin creases at the zero crossings
    return out


def grow_branch(canvas: np.ndarray, rng: np.random.Generator, x: float, y: float, angle: float, length: float,
                depth: int, intensity: float) -> None:
    """Draw one needle as a jittered polyline; spawn dense side needles at about +-60 degrees."""
    step = 1.5
    n_steps = max(2, int(length / step))
    points = [(x, y)]
    for _ in range(n_steps):
        angle += rng.normal(0.0, 0.05)
        x += step * math.cos(angle)
        y += step * math.sin(angle)
        points.append((x, y))
        if depth > 0 and rng.random() < 0.55:
            side = angle + rng.choice([-1.0, 1.0]) * (math.pi / 3 + rng.normal(0.0, 0.1))
            grow_branch(canvas, rng, x, y, side, length * rng.uniform(0.1, 0.3), depth - 1, intensity * 0.75)
    pts = np.round(np.array(points) * 4).astype(np.int32)  # 2 bits of sub-pixel precision
    cv2.polylines(canvas, [pts], False, float(intensity), 1, cv2.LINE_AA, shift=2)


def feathers(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    canvas = np.zeros((height, width), dtype=np.float32)
    n_seeds = int(height * width / 1500)
    for _ in range(n_seeds):
        x, y = rng.uniform(0, width), rng.uniform(0, height)
        arms = int(rng.integers(2, 6))
        base = rng.uniform(0, 2 * math.pi)
        for k in range(arms):
            angle = base + 2 * math.pi * k / arms + rng.normal(0.0, 0.3)
            grow_branch(canvas, rng, x, y, angle, rng.uniform(15, 60), 2, rng.uniform(0.3, 1.0))
    return canvas


def haze(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """Frosted-glass haze: very smooth noise, the slow light variation across the pane (it supplies
    the coarse rest of the pyramid without leaking into its finer bands)."""
    out = np.zeros((height, width), dtype=np.float32)
    for sigma, weight in ((64.0, 1.0), (128.0, 3.0)):
        out += weight * cv2.GaussianBlur(rng.standard_normal((height, width)).astype(np.float32), (0, 0), sigma)
    return out - out.mean()


def match_bands(detail: np.ndarray, smooth: np.ndarray, targets, weights: np.ndarray) -> np.ndarray:
    """Weighted sum of the pyramid bands of ``detail`` and of ``smooth`` (as the coarse rest) whose
    own pyramid has the target band standard deviations (pixels weighted by ``weights``). Bands
    overlap (a blur of a band leaks into its neighbours), so the weights of the sum are refined
    from the measured result a few times."""
    parts = bands(detail)[:-1] + [smooth]
    targets = np.asarray(targets, dtype=np.float64)
    gains = targets / np.array([part.std() + 1e-6 for part in parts])
    for _ in range(12):
        grey = sum(float(g) * part for g, part in zip(gains, parts))
        gains *= targets / np.maximum(band_stds(grey, weights), 1e-6)
    return sum(float(g) * part for g, part in zip(gains, parts)).astype(np.float32)


def crop_weights(height: int, width: int, size: int = CROP_SIZE) -> np.ndarray:
    """How many of the random ``size`` px crops contain each pixel, normalised to sum 1."""
    def cover(n: int) -> np.ndarray:
        starts = np.zeros(n)
        starts[: max(1, n - size)] = 1.0  # valid crop offsets
        return np.convolve(starts, np.ones(size))[:n]

    weights = np.outer(cover(height), cover(width))
    return (weights / weights.sum()).astype(np.float64)


def fit_channel(z: np.ndarray, weights: np.ndarray, mean: float, crop_mean: float, crop_std: float) -> np.ndarray:
    """uint8 channel ``scale * z + shift + tilt * vignette`` with the given overall mean and the
    given crop-weighted mean and spread; the vignette (the crop weights, centred) is a smooth bump
    that lets the centre differ from the border as in the reference. Clipping at 0 / 255 moves the
    statistics, so the three numbers are corrected from the measured result a few times."""
    vignette = weights / weights.mean() - 1.0
    v_crop = float((vignette * weights).sum())
    scale, shift, tilt = crop_std, mean, 0.0
    for _ in range(20):
        result = np.clip(np.round(scale * z + shift + tilt * vignette), 0, 255)
        m = float(result.mean())
        cm = float((result * weights).sum())
        cs = math.sqrt(float(((result - cm) ** 2 * weights).sum()))
        shift += mean - m
        tilt += (crop_mean - cm) / v_crop
        scale *= crop_std / max(cs, 1e-6)
    return np.clip(np.round(scale * z + shift + tilt * vignette), 0, 255).astype(np.uint8)


def overlay(height: int, width: int, mean, crop_mean, crop_std, targets, correlations,
            rng: np.random.Generator) -> np.ndarray:
    ice = crinkle(height, width, rng)
    needles = feathers(height, width, rng)
    glow = cv2.GaussianBlur(needles, (0, 0), 2.0)
    detail = ice / ice.std() + 1.2 * needles / needles.std() + 0.6 * glow / glow.std()
    smooth = haze(height, width, rng)
    # colour: the channels are not copies of one another (the reference's red is only 0.82 / 0.57
    # correlated with its green / blue in frost1). Channel c mixes the base with a second,
    # independent crinkle of the same spectrum as cos(a_c) base + sin(a_c) other; the angles
    # (green 0, red -acos(r_RG), blue +acos(r_GB)) reproduce the measured correlations (and
    # r_RB = cos(a_B - a_R) to within 0.02).
    other_detail, other_smooth = crinkle(height, width, rng), haze(height, width, rng)
    r_rg, _, r_gb = correlations
    angles = (-math.acos(r_rg), 0.0, math.acos(r_gb))
    weights = crop_weights(height, width)
    # the channel fit (spread, vignette, clipping) moves the bands of the result a little: aim the
    # band matching at corrected targets, from the measured result, twice
    aim = np.asarray(targets, dtype=np.float64)
    out = np.empty((height, width, 3), dtype=np.uint8)
    for _ in range(3):
        base = match_bands(detail, smooth, aim, weights)
        other = match_bands(other_detail, other_smooth, aim, weights)
        base, other = base / base.std(), other / other.std()
        for c in range(3):
            channel = math.cos(angles[c]) * base + math.sin(angles[c]) * other
            channel = (channel - channel.mean()) / (channel.std() + 1e-6)
            out[..., c] = fit_channel(channel, weights, mean[c], crop_mean[c], crop_std[c])
        aim *= np.asarray(targets) / np.maximum(band_stds(out.astype(np.float32).mean(2), weights), 1e-6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "src/shiftbench/data/frost")
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for index, ((height, width, mean, std, targets, correlations), (crop_mean, crop_std)) in enumerate(
            zip(TARGETS, CROP_STATS), start=1):
        rng = np.random.Generator(np.random.PCG64([args.seed, index]))
        image = overlay(height, width, mean, crop_mean, crop_std, targets, correlations, rng)
        path = args.out / f"frost{index}.png"
        cv2.imwrite(str(path), image[..., ::-1], [cv2.IMWRITE_PNG_COMPRESSION, 9])
        grey = image.astype(np.float32).mean(2)
        weights = crop_weights(height, width)[..., None]
        crop_m = (image * weights).sum((0, 1))
        crop_s = np.sqrt(((image - crop_m) ** 2 * weights).sum((0, 1)))
        print(f"{path.name}: {width}x{height}, mean {image.reshape(-1, 3).mean(0).round(1)} target {mean}, "
              f"std {image.reshape(-1, 3).std(0).round(1)} reference {std}")
        print(f"  crop mean {crop_m.round(1)} target {crop_mean}, crop std {crop_s.round(1)} target {crop_std}")
        print(f"  crop bands {np.round(band_stds(grey, weights[..., 0]), 2)}\n  target     {np.array(targets)}")
        print(f"  channel correlations {np.round(np.corrcoef(image.reshape(-1, 3).T)[[0, 0, 1], [1, 2, 2]], 4)}"
              f" target {correlations}")
        print(f"  texture (grad mean, median, p90, local contrast) {np.round(texture(grey), 2)}"
              f" reference {REFERENCE_TEXTURE[index - 1]}")


if __name__ == "__main__":
    main()
