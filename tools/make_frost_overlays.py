"""Generate the frost overlays shipped in src/shiftbench/data/frost (procedural, no photographs).

    python tools/make_frost_overlays.py [--out src/shiftbench/data/frost] [--seed 2024]

Each overlay is grown from a fixed seed: dendritic ice crystals (branching needle polylines with
60-degree side branches, drawn anti-aliased), their halo (Gaussian glow) and a fine frosted haze
(multi-scale smoothed noise). Each overlay is then matched, channel by channel, to a target mean
and spread of brightness: the five targets are the per-channel mean and standard deviation of
the five frost photographs used by ImageNet-C (measured numbers only; none of their pixels), so
that frost changes an image by the same amount as the reference at every severity.
The output is deterministic for a given seed and OpenCV/numpy version.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import cv2
import numpy as np

# (height, width, RGB mean, RGB std): sizes comparable to the reference overlays, so random crops
# of a 224 px image move over a similar range; statistics measured on the reference overlays
TARGETS = [
    (600, 900, (77.7, 149.1, 165.7), (26.9, 16.5, 15.3)),
    (315, 560, (200.8, 205.4, 214.5), (21.4, 22.1, 22.6)),
    (315, 560, (200.8, 205.4, 214.5), (21.4, 22.1, 22.6)),
    (350, 527, (137.6, 152.8, 165.2), (28.5, 28.5, 29.9)),
    (495, 660, (112.4, 123.4, 134.8), (44.4, 43.3, 41.7)),
]


def grow_branch(canvas: np.ndarray, rng: np.random.Generator, x: float, y: float, angle: float, length: float,
                depth: int, intensity: float) -> None:
    """Draw one needle as a jittered polyline; spawn side needles at about +-60 degrees."""
    step = 2.0
    n_steps = max(2, int(length / step))
    points = [(x, y)]
    for i in range(n_steps):
        angle += rng.normal(0.0, 0.06)
        x += step * math.cos(angle)
        y += step * math.sin(angle)
        points.append((x, y))
        if depth > 0 and rng.random() < 0.35:
            side = angle + rng.choice([-1.0, 1.0]) * (math.pi / 3 + rng.normal(0.0, 0.1))
            grow_branch(canvas, rng, x, y, side, length * rng.uniform(0.15, 0.4), depth - 1, intensity * 0.8)
    pts = np.round(np.array(points) * 4).astype(np.int32)  # 2 bits of sub-pixel precision
    thickness = 2 if depth >= 2 else 1
    cv2.polylines(canvas, [pts], False, float(intensity), thickness, cv2.LINE_AA, shift=2)


def crystals(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    canvas = np.zeros((height, width), dtype=np.float32)
    n_seeds = int(height * width / 2200)
    for _ in range(n_seeds):
        x, y = rng.uniform(0, width), rng.uniform(0, height)
        arms = int(rng.integers(3, 7))
        base = rng.uniform(0, 2 * math.pi)
        for k in range(arms):
            angle = base + 2 * math.pi * k / arms + rng.normal(0.0, 0.15)
            grow_branch(canvas, rng, x, y, angle, rng.uniform(12, 55), 2, rng.uniform(0.3, 1.0))
    return canvas


def haze(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """Frosted-glass haze: noise smoothed at several scales."""
    out = np.zeros((height, width), dtype=np.float32)
    for sigma, weight in ((1.0, 0.35), (4.0, 0.5), (16.0, 0.8), (48.0, 1.0)):
        layer = cv2.GaussianBlur(rng.standard_normal((height, width)).astype(np.float32), (0, 0), sigma)
        out += weight * layer / (layer.std() + 1e-6)
    return out


def overlay(height: int, width: int, mean, std, rng: np.random.Generator) -> np.ndarray:
    needles = crystals(height, width, rng)
    glow = cv2.GaussianBlur(needles, (0, 0), 3.0)
    base = 1.0 * needles + 1.5 * glow + 0.35 * haze(height, width, rng) * (0.3 + glow.mean())
    # a slight colour difference between channels: blue keeps more of the fine needles
    out = np.empty((height, width, 3), dtype=np.uint8)
    for c in range(3):
        channel = base + (0.15 * c) * needles
        channel = (channel - channel.mean()) / (channel.std() + 1e-6)
        # clipping at 0 / 255 shrinks the spread: correct the affine map a few times
        scale, shift = float(std[c]), float(mean[c])
        for _ in range(8):
            result = np.clip(np.round(channel * scale + shift), 0, 255)
            scale *= std[c] / max(result.std(), 1e-6)
            shift += mean[c] - result.mean()
        out[..., c] = np.clip(np.round(channel * scale + shift), 0, 255).astype(np.uint8)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "src/shiftbench/data/frost")
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for index, (height, width, mean, std) in enumerate(TARGETS, start=1):
        rng = np.random.Generator(np.random.PCG64([args.seed, index]))
        image = overlay(height, width, mean, std, rng)
        path = args.out / f"frost{index}.png"
        cv2.imwrite(str(path), image[..., ::-1], [cv2.IMWRITE_PNG_COMPRESSION, 9])
        print(f"{path}: {width}x{height}, mean {image.reshape(-1, 3).mean(0).round(1)}, std {image.reshape(-1, 3).std(0).round(1)}")


if __name__ == "__main__":
    main()
