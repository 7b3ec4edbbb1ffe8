"""Transcriptions of the ImageNet-P noise, blur and weather sequences (hendrycks/robustness,
ImageNet-P/create_p/make_imagenet_p.py), written from the published formulas for the tests of
shifts/perturbations/{noise,blur,weather}.py. Each takes the already cropped image (uint8 H x W x 3) and the
reference's random draws injected (``noise``), and calls the libraries the reference calls where they are
installed (scikit-image, scipy, OpenCV, torchvision with Pillow). ImageMagick (wand) is not available: its
motion blur is imagecorruptions' port of it (``_motion_blur``), rounded to 8 bits as ImageMagick's PNG output.
The ffmpeg video encoding of the published files is left out (it is lossy and not part of the perturbation).
"""

from __future__ import annotations

import numpy as np


def gaussian_noise(x: np.ndarray, sigma: float, noise: np.ndarray) -> np.ndarray:
    """Frames 1..T of ``ToPILImage(clamp(ToTensor(x) + sigma * randn, 0, 1))`` (float32, ``mul(255).byte()``)."""
    t = x.astype(np.float32) / np.float32(255.0)
    z = np.clip(t[None] + np.float32(sigma) * noise.astype(np.float32), 0, 1)
    return (z * np.float32(255)).astype(np.uint8)


def shot_noise(x: np.ndarray, photons: int, rng: np.random.Generator, frames: int = 30) -> np.ndarray:
    """Frames 1..T of ``uint8(255 * clip(poisson(x / 255 * c) / c, 0, 1))``."""
    z = np.array(x, copy=True) / 255.0
    return np.stack([np.uint8(255 * np.clip(rng.poisson(z * photons) / float(photons), 0, 1)) for _ in range(frames)])


def speckle_noise(x: np.ndarray, scale: float, noise: np.ndarray) -> np.ndarray:
    """Frames 1..T of ``uint8(255 * clip(x + x * normal(scale=s), 0, 1))`` (``noise``: standard normals)."""
    z = x / 255.0
    return np.uint8(255 * np.clip(z[None] + z[None] * (scale * noise), 0, 1))


def imagemagick_motion_blur(x: np.ndarray, radius: int, sigma: float, angle: float) -> np.ndarray:
    """ImageMagick's MotionBlurImage as the reference decodes it (8-bit PNG, rounded), via imagecorruptions' port."""
    from _reference import reference_module

    blurred = reference_module()._motion_blur(x, radius=radius, sigma=sigma, angle=angle)
    return np.clip(np.floor(np.asarray(blurred, dtype=np.float64) + 0.5), 0, 255).astype(np.uint8)


def motion_blur(x: np.ndarray) -> np.ndarray:
    """All 31 frames: radius 10, sigma 3, angle (i - 30) * 4."""
    return np.stack([imagemagick_motion_blur(x, 10, 3, (i - 30) * 4) for i in range(31)])


def zoom_blur(img: np.ndarray) -> np.ndarray:
    """All 31 frames: the running average of ToTensor(affine(img, scale=1 + 0.004 i, bilinear)), ToPILImage'd.

    On the whole image (the crop is the caller's); today's torchvision centres the zoom at (w / 2, h / 2)."""
    import torchvision.transforms.functional as F
    from PIL import Image
    from torchvision.transforms import InterpolationMode

    pil = Image.fromarray(img)
    avg = F.to_tensor(pil)
    out = [img]
    for i in range(1, 31):
        z = F.affine(pil, angle=0.0, translate=[0, 0], scale=1 + 0.004 * i, shear=[0.0],
                     interpolation=InterpolationMode.BILINEAR)
        avg = avg + F.to_tensor(z)
        out.append(np.asarray(F.to_pil_image(avg / (i + 1))))
    return np.stack(out)


def gaussian_blur(x: np.ndarray) -> np.ndarray:
    """All 31 frames: ``uint8(255 * gaussian(x / 255, sigma=0.25 + 0.035 i, channel_axis=-1, truncate=6))``."""
    from skimage.filters import gaussian

    return np.stack([np.uint8(255 * gaussian(np.array(x, copy=True) / 255.0, sigma=0.25 + 0.035 * i,
                                             channel_axis=-1, truncate=6.0)) for i in range(31)])


def clipped_zoom(img: np.ndarray, zoom_factor: float) -> np.ndarray:
    """The reference's clipped_zoom (square images): central ceil(h / z) crop, scipy zoom order 1, central h kept."""
    from scipy.ndimage import zoom as scizoom

    h = img.shape[0]
    ch = int(np.ceil(h / zoom_factor))
    top = (h - ch) // 2
    img = scizoom(img[top:top + ch, top:top + ch], (zoom_factor, zoom_factor, 1), order=1)
    trim_top = (img.shape[0] - h) // 2
    return img[trim_top:trim_top + h, trim_top:trim_top + h]


def snow(x: np.ndarray, normals: np.ndarray) -> np.ndarray:
    """All 31 frames of the snow sequence for a square image; ``normals`` (H, W) standard normals."""
    import cv2

    h = x.shape[0]
    x = np.array(x) / 255.0
    snow_layer = 0.05 + 0.3 * normals
    snow_layer = clipped_zoom(snow_layer[..., np.newaxis], 3)
    snow_layer[snow_layer < 0.5] = 0
    layer8 = (np.clip(snow_layer.squeeze(), 0, 1) * 255).astype(np.uint8)
    out = []
    for i in range(31):
        blurred = imagemagick_motion_blur(layer8, 14, 4, i * 4 - 150) / 255.0
        blurred = blurred[..., np.newaxis]
        z = 0.85 * x + (1 - 0.85) * np.maximum(
            x, cv2.cvtColor(np.float32(x), cv2.COLOR_RGB2GRAY).reshape(h, h, 1) * 1.5 + 0.5)
        out.append(np.uint8(np.clip(z + blurred + np.rot90(blurred, k=2), 0, 1) * 255))
    return np.stack(out)


def spatter(x: np.ndarray, normals: np.ndarray) -> np.ndarray:
    """All 31 frames of the spatter sequence; ``normals`` (H, W) standard normals."""
    import cv2
    from skimage.filters import gaussian

    x = cv2.cvtColor(np.array(x, dtype=np.float32) / 255.0, cv2.COLOR_BGR2BGRA)
    liquid_layer = 0.65 + 0.27 * normals
    liquid_layer = gaussian(liquid_layer, sigma=3.7)
    liquid_layer[liquid_layer < 0.69] = 0
    out = []
    for _ in range(31):
        liquid_layer_i = (liquid_layer * 255).astype(np.uint8)
        dist = 255 - cv2.Canny(liquid_layer_i, 50, 150)
        dist = cv2.distanceTransform(dist, cv2.DIST_L2, 5)
        _, dist = cv2.threshold(dist, 20, 20, cv2.THRESH_TRUNC)
        dist = cv2.blur(dist, (3, 3)).astype(np.uint8)
        dist = cv2.equalizeHist(dist)
        ker = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], dtype=np.float32)  # int64 in the reference
        dist = cv2.filter2D(dist, cv2.CV_8U, ker)
        dist = cv2.blur(dist, (3, 3)).astype(np.float32)
        m = cv2.cvtColor(liquid_layer_i * dist, cv2.COLOR_GRAY2BGRA)
        m /= np.max(m, axis=(0, 1))
        m *= 0.6
        color = np.concatenate((175 / 255.0 * np.ones_like(m[..., :1]), 238 / 255.0 * np.ones_like(m[..., :1]),
                                238 / 255.0 * np.ones_like(m[..., :1])), axis=2)
        color = cv2.cvtColor(color, cv2.COLOR_BGR2BGRA)
        out.append(np.uint8(cv2.cvtColor(np.clip(x + m * color, 0, 1), cv2.COLOR_BGRA2BGR) * 255))
        liquid_layer = np.apply_along_axis(lambda mat: np.convolve(mat, np.array([0.05, 0.1, 0.15, 0.7]), mode="same"),
                                           axis=0, arr=liquid_layer)
    return np.stack(out)
