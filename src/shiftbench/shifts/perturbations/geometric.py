"""ImageNet-P sequences (geometric): ``p_translate``, ``p_rotate``, ``p_scale``, ``p_tilt`` and the validation
extra ``p_shear``; each frame a warp of the whole image (the crop, ``crop=``, comes after, as the reference
warps its 256-px image and then center-crops 224).

The reference (hendrycks/robustness, ImageNet-P/create_p/make_imagenet_p.py) warps with
``torchvision.transforms.functional.affine`` on a PIL image (translate, rotate, scale, shear) and with
``cv2.warpPerspective`` (tilt). Here:

* affine frames reproduce torchvision's PIL path: the inverse map ``C R^-1 C^-1 T^-1`` about the image
  centre ``(w/2, h/2)`` in PIL's coordinates (pixel edges at integers, an output pixel sampled at its centre
  ``x + 0.5``), Pillow's bilinear filter (neighbours clamped at the border, a sample outside the image
  rectangle black, the value truncated to uint8), all in float64 numpy: the frames equal torchvision's byte
  for byte (tests/shifts/test_perturbations_geometric.py). Rotation ``angle = i - 15`` degrees, scale
  ``(2.5 i + 40) / 100``, shear ``i - 15`` degrees along x, as torchvision >= 0.8 reads them.
* ``p_tilt`` is the reference's homography ``P2 T RX RY P1`` (phi = theta = i - 15 degrees, focal length
  ``sqrt(w^2 + h^2)``, centre ``(w/2, h/2)`` in OpenCV's pixel-index coordinates, as written) through
  ``cv2.warpPerspective`` (bilinear, black border): the reference's own call.
* the tensor path samples the same maps with ``torch.nn.functional.grid_sample`` (float64, align_corners=False,
  which is PIL's and OpenCV's pixel-centre convention); it differs from OpenCV's 1/32-pixel fixed-point
  bilinear (tilt) by a grey level or two at sharp edges.

Sizes. The only pixel constant is translate's offset, ``i - 20`` pixels at the reference's images (shorter
side 256): here ``(i - 20) * min(h, w) / 256``, rounded half away from zero to whole pixels (the reference
shifts whole pixels with nearest sampling, so frames stay sharp); exact at 256, and at small sizes
neighbouring frames repeat (at 8 px the offsets are -1, 0, 1). Angles, scales, the centre and tilt's focal
length are relative to the image, so any size (non-square, 8 x 8, large) warps the same geometry.

Ambiguities and choices. torchvision changed ``affine`` after the reference was written: up to 0.4 the
centre was ``(w/2 + 0.5, h/2 + 0.5)`` and a shear of s also scaled y by ``cos s``; we follow the current
PIL path (centre ``(w/2, h/2)``, pure x-shear ``tan s``). Rotation is clockwise on screen for positive
angles in both. Tilt's centre ``(w/2, h/2)`` is half a pixel off the image centre in OpenCV's convention;
kept as the reference wrote it. Translate used torchvision's default nearest sampling; with whole-pixel
offsets that is an exact shift with black fill, which is what we do.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ...registry import SHIFTS
from ._base import PerturbationSequence

__all__ = ["PTranslate", "PRotate", "PScale", "PShear", "PTilt", "inverse_affine", "tilt_homography",
           "translate_offsets", "warp_bilinear_pil"]


def inverse_affine(width: int, height: int, angle: float = 0.0, scale: float = 1.0, shear: float = 0.0) -> np.ndarray:
    """The 2x3 map from an output pixel to where it samples the input, in PIL's coordinates (edges at integers),
    of a rotation by ``angle`` degrees, a zoom by ``scale`` and an x-shear by ``shear`` degrees about the centre.

    >>> (inverse_affine(4, 4, scale=2.0) + 0.0).tolist()  # a zoom by 2 samples the middle half
    [[0.5, 0.0, 1.0], [0.0, 0.5, 1.0]]
    """
    rot, sh = math.radians(angle), math.radians(shear)
    # the forward linear part is scale * R(rot) @ [[1, -tan sh], [0, 1]] (determinant scale^2); its inverse:
    fwd_b = -math.cos(rot) * math.tan(sh) - math.sin(rot)
    fwd_d = -math.sin(rot) * math.tan(sh) + math.cos(rot)
    m = [x / scale for x in (fwd_d, -fwd_b, -math.sin(rot), math.cos(rot))]
    cx, cy = width * 0.5, height * 0.5  # the inverse about the centre: C A^-1 C^-1
    return np.array([[m[0], m[1], m[0] * -cx + m[1] * -cy + cx], [m[2], m[3], m[2] * -cx + m[3] * -cy + cy]])


def warp_bilinear_pil(image: np.ndarray, inverse: np.ndarray) -> np.ndarray:
    """``image`` (H, W, C uint8) warped by the 2x3 ``inverse`` map as Pillow's bilinear affine transform does:
    output pixel (x, y) samples ``inverse @ (x + 0.5, y + 0.5, 1)``; black outside the image; truncated."""
    h, w = image.shape[:2]
    xs, ys = np.arange(w) + 0.5, (np.arange(h) + 0.5)[:, None]
    xin = inverse[0, 0] * xs + inverse[0, 1] * ys + inverse[0, 2]
    yin = inverse[1, 0] * xs + inverse[1, 1] * ys + inverse[1, 2]
    inside = (xin >= 0.0) & (xin < w) & (yin >= 0.0) & (yin < h)
    xin, yin = xin - 0.5, yin - 0.5
    x0, y0 = np.floor(xin), np.floor(yin)
    dx, dy = (xin - x0)[..., None], (yin - y0)[..., None]
    cols = [np.clip(x0, 0, w - 1).astype(np.intp), np.clip(x0 + 1, 0, w - 1).astype(np.intp)]
    rows = [np.clip(y0, 0, h - 1).astype(np.intp), np.clip(y0 + 1, 0, h - 1).astype(np.intp)]
    src = image.astype(np.float64)
    top = src[rows[0], cols[0]] + (src[rows[0], cols[1]] - src[rows[0], cols[0]]) * dx
    bottom = src[rows[1], cols[0]] + (src[rows[1], cols[1]] - src[rows[1], cols[0]]) * dx
    out = (top + (bottom - top) * dy).astype(np.uint8)
    out[~inside] = 0
    return out


def translate_offsets(width: int, height: int, frames: int = 41) -> list[int]:
    """Horizontal offsets in whole pixels: (i - 20) at a shorter side of 256, scaled, rounded half away from 0.

    >>> translate_offsets(256, 300)[:3], translate_offsets(8, 8)[::10]
    ([-20, -19, -18], [-1, 0, 0, 0, 1])
    """
    half = (frames - 1) // 2
    raw = [(i - half) * min(width, height) / 256.0 for i in range(frames)]
    return [int(math.copysign(math.floor(abs(r) + 0.5), r)) for r in raw]


def tilt_homography(width: int, height: int, degrees: float) -> np.ndarray:
    """The reference's tilt: P2 @ T @ RX(theta) @ RY(phi) @ P1 with phi = theta = ``degrees``, f = sqrt(w^2 + h^2)."""
    a = math.radians(degrees)
    f = math.hypot(width, height)
    to_centre = np.array([[1, 0, -width / 2], [0, 1, -height / 2], [0, 0, 1], [0, 0, 1]])
    c, s = math.cos(a), math.sin(a)
    about_x = np.array([[1, 0, 0, 0], [0, c, -s, 0], [0, s, c, 0], [0, 0, 0, 1]])
    about_y = np.array([[c, 0, -s, 0], [0, 1, 0, 0], [s, 0, c, 0], [0, 0, 0, 1]])
    push = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, f], [0, 0, 0, 1]])
    project = np.array([[f, 0, width / 2, 0], [0, f, height / 2, 0], [0, 0, 1, 0]])
    return project @ push @ about_x @ about_y @ to_centre


def _sample_grid(x: Any, grid: Any, padding: str) -> Any:
    """Bilinear samples of float64 ``x`` (N, C, H, W) at pixel-index coordinates ``grid`` (H, W, 2: x, y)."""
    import torch.nn.functional as F

    h, w = x.shape[-2:]
    norm = grid.clone()
    norm[..., 0] = (2 * grid[..., 0] + 1) / w - 1  # align_corners=False: pixel i's centre at (2i + 1) / size - 1
    norm[..., 1] = (2 * grid[..., 1] + 1) / h - 1
    return F.grid_sample(x, norm[None].expand(x.shape[0], -1, -1, -1), mode="bilinear", padding_mode=padding,
                         align_corners=False)


class _AffineSequence(PerturbationSequence):
    """A sequence of affine warps about the centre through Pillow's bilinear sampling; subclasses give the
    ``inverse_affine`` keywords of each frame."""

    geometric = True

    def warps(self) -> list[dict[str, float]]:
        raise NotImplementedError

    def sequence(self, image: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        h, w = image.shape[:2]
        return np.stack([warp_bilinear_pil(image, inverse_affine(w, h, **k)) for k in self.warps()])

    def sequence_tensor(self, x: Any, params: Sequence[dict[str, Any]]) -> Any:
        import torch

        n, _, h, w = x.shape
        src = x.to(torch.float64)
        ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64, device=x.device) + 0.5,
                                torch.arange(w, dtype=torch.float64, device=x.device) + 0.5, indexing="ij")
        out = torch.empty((n, len(self.warps()), *x.shape[1:]), dtype=torch.uint8, device=x.device)
        for i, k in enumerate(self.warps()):
            m = inverse_affine(w, h, **k).tolist()
            xin = m[0][0] * xs + m[0][1] * ys + m[0][2]
            yin = m[1][0] * xs + m[1][1] * ys + m[1][2]
            inside = (xin >= 0) & (xin < w) & (yin >= 0) & (yin < h)
            frame = _sample_grid(src, torch.stack([xin - 0.5, yin - 0.5], -1), "border")
            # truncated as Pillow; the guard keeps a value that is an integer exactly from dropping by one
            frame = torch.floor(frame + 1e-6).clamp_(0, 255) * inside
            out[:, i] = frame.to(torch.uint8)
        return out


@SHIFTS.register("p_rotate", description="Rotation from -15 to 15 degrees through 31 frames (ImageNet-P)",
                 group="imagenet_p")
class PRotate(_AffineSequence):
    """ImageNet-P rotate: 31 frames rotated by i - 15 degrees about the centre (bilinear, black corners)."""

    def warps(self) -> list[dict[str, float]]:
        return [{"angle": float(i - 15)} for i in range(self.frames)]


@SHIFTS.register("p_scale", description="Zoom from 0.4 to 1.15 through 31 frames (ImageNet-P)", group="imagenet_p")
class PScale(_AffineSequence):
    """ImageNet-P scale: 31 frames zoomed by (2.5 i + 40) / 100 about the centre (bilinear, black border)."""

    def warps(self) -> list[dict[str, float]]:
        return [{"scale": (i * 2.5 + 40) / 100.0} for i in range(self.frames)]


@SHIFTS.register("p_shear", description="Shear from -15 to 15 degrees through 31 frames (ImageNet-P validation)",
                 group="imagenet_p_extra")
class PShear(_AffineSequence):
    """ImageNet-P shear (a validation perturbation): 31 frames sheared along x by i - 15 degrees about the centre."""

    def warps(self) -> list[dict[str, float]]:
        return [{"shear": float(i - 15)} for i in range(self.frames)]


@SHIFTS.register("p_translate", description="Horizontal shift of -20 to 20 pixels (at 256 px) through 41 frames "
                 "(ImageNet-P)", group="imagenet_p")
class PTranslate(PerturbationSequence):
    """ImageNet-P translate: 41 frames shifted right by (i - 20) pixels at a shorter side of 256 (scaled to the
    image, whole pixels), black where the image moved away."""

    frames = 41
    geometric = True

    def sequence(self, image: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        h, w = image.shape[:2]
        out = np.zeros((self.frames, *image.shape), np.uint8)
        for i, d in enumerate(translate_offsets(w, h, self.frames)):
            if abs(d) < w:
                out[i, :, max(d, 0):w + min(d, 0)] = image[:, max(-d, 0):w - max(d, 0)]
        return out

    def sequence_tensor(self, x: Any, params: Sequence[dict[str, Any]]) -> Any:
        import torch

        h, w = x.shape[-2:]
        out = torch.zeros((x.shape[0], self.frames, *x.shape[1:]), dtype=torch.uint8, device=x.device)
        for i, d in enumerate(translate_offsets(w, h, self.frames)):
            if abs(d) < w:
                out[:, i, ..., max(d, 0):w + min(d, 0)] = x[..., max(-d, 0):w - max(d, 0)]
        return out


@SHIFTS.register("p_tilt", description="Perspective tilt from -15 to 15 degrees through 31 frames (ImageNet-P)",
                 group="imagenet_p")
class PTilt(PerturbationSequence):
    """ImageNet-P tilt: 31 frames seen through the reference's homography, phi = theta = i - 15 degrees."""

    geometric = True

    def sequence(self, image: np.ndarray, params: dict[str, Any]) -> np.ndarray:
        import cv2

        h, w = image.shape[:2]
        return np.stack([cv2.warpPerspective(image, tilt_homography(w, h, i - 15), (w, h))
                         for i in range(self.frames)])

    def sequence_tensor(self, x: Any, params: Sequence[dict[str, Any]]) -> Any:
        import torch

        n, _, h, w = x.shape
        src = x.to(torch.float64)
        ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64, device=x.device),
                                torch.arange(w, dtype=torch.float64, device=x.device), indexing="ij")
        points = torch.stack([xs, ys, torch.ones_like(xs)], -1)
        out = torch.empty((n, self.frames, *x.shape[1:]), dtype=torch.uint8, device=x.device)
        for i in range(self.frames):
            inverse = torch.as_tensor(np.linalg.inv(tilt_homography(w, h, i - 15)), device=x.device)
            mapped = points @ inverse.T
            grid = mapped[..., :2] / mapped[..., 2:]
            frame = _sample_grid(src, grid, "zeros")
            out[:, i] = torch.round(frame).clamp_(0, 255).to(torch.uint8)  # OpenCV rounds
        return out
