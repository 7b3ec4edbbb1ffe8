"""A transcription (for tests only) of hendrycks/robustness ImageNet-P/create_p/make_imagenet_p.py for the
six sequences of shifts/perturbations/geometric.py and digital.py: brightness (scikit-image HSV), translate,
rotate, scale, shear (torchvision.transforms.functional.affine on a PIL image) and tilt (cv2.warpPerspective).
The formulas and calls are the reference's; only the saving of PNG frames and the ffmpeg encoding are left out.
``crop`` applies torchvision's CenterCrop as the reference does with 224 (after the warp for the geometric ones,
before the perturbation for brightness)."""

from __future__ import annotations

import numpy as np


def _pil(image):
    from PIL import Image

    return Image.fromarray(image)


def _center_crop(pil_image, crop):
    import torchvision.transforms as trn

    return pil_image if crop is None else trn.CenterCrop(crop)(pil_image)


def _affine(image, crop, **kw):
    import torchvision.transforms.functional as trn_F
    from torchvision.transforms import InterpolationMode

    args = {"angle": 0.0, "translate": [0, 0], "scale": 1.0, "shear": 0.0, **kw}
    bilinear = args.pop("bilinear", True)
    mode = InterpolationMode.BILINEAR if bilinear else InterpolationMode.NEAREST  # resample=PILImage.BILINEAR / default
    return np.array(_center_crop(trn_F.affine(_pil(image), interpolation=mode, **args), crop))


def brightness(image, crop=None):
    import skimage.color as skcolor

    x = np.array(_center_crop(_pil(image), crop))
    frames = []
    for i in range(0, 31):
        c = (i - 15) * 2 / 100.
        z = np.array(x, copy=True) / 255.
        z = skcolor.rgb2hsv(z)
        z[:, :, 2] = np.clip(z[:, :, 2] + c, 0, 1)
        z = skcolor.hsv2rgb(z)
        frames.append(np.uint8(z * 255))
    return np.stack(frames)


def translate(image, crop=None):
    # the reference's (i - 20)-pixel shifts, written for its images with a shorter side of 256
    return np.stack([_affine(image, crop, translate=[i - 20, 0], bilinear=False) for i in range(0, 41)])


def rotate(image, crop=None):
    return np.stack([_affine(image, crop, angle=float(i - 15)) for i in range(0, 31)])


def scale(image, crop=None):
    return np.stack([_affine(image, crop, scale=(i * 2.5 + 40) / 100.) for i in range(0, 31)])


def shear(image, crop=None):
    return np.stack([_affine(image, crop, shear=float(i - 15)) for i in range(0, 31)])


def tilt(image, crop=None):
    import cv2

    x = np.array(image)
    h, w = x.shape[0:2]
    frames = []
    for i in range(0, 31):
        phi, theta = np.deg2rad(i - 15), np.deg2rad(i - 15)
        f = np.sqrt(w ** 2 + h ** 2)
        P1 = np.array([[1, 0, -w / 2], [0, 1, -h / 2], [0, 0, 1], [0, 0, 1]])
        RX = np.array([[1, 0, 0, 0], [0, np.cos(theta), -np.sin(theta), 0],
                       [0, np.sin(theta), np.cos(theta), 0], [0, 0, 0, 1]])
        RY = np.array([[np.cos(phi), 0, -np.sin(phi), 0], [0, 1, 0, 0],
                       [np.sin(phi), 0, np.cos(phi), 0], [0, 0, 0, 1]])
        T = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, f], [0, 0, 0, 1]])
        P2 = np.array([[f, 0, w / 2, 0], [0, f, h / 2, 0], [0, 0, 1, 0]])
        mat = P2 @ T @ RX @ RY @ P1
        frames.append(np.array(_center_crop(_pil(cv2.warpPerspective(x, mat, (w, h))), crop)))
    return np.stack(frames)


REFERENCE = {"p_brightness": brightness, "p_translate": translate, "p_rotate": rotate, "p_scale": scale,
             "p_shear": shear, "p_tilt": tilt}
