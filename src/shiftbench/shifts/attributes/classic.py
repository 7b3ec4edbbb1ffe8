"""Classic (weight-free, CPU) attribute edits: recolour, material, pattern inside a mask; global styles.

Every function is deterministic given its params and vectorised over pixels (numpy / OpenCV). Local
edits work in OKLab, a perceptual colour space: the object's lightness carries its shading, so an edit
replaces hue / chroma / albedo and multiplies the new albedo by the object's own shading. Pixels
outside the mask are copied bit for bit. ``strength`` in [0, 1] is the blend weight of the edit (the
shift maps severity 1..5 to 0.2..1.0).
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from ...errors import ShiftbenchError
from ...sample import load_image

__all__ = [
    "srgb_to_oklab", "oklab_to_srgb", "recolor", "apply_material", "apply_pattern", "apply_style",
    "object_mask", "REFERENCE_COLOURS", "material_texture",
]

# sRGB reference colours of the named colours (CSS "blueviolet" and "hotpink").
REFERENCE_COLOURS: dict[str, tuple[int, int, int]] = {"violet": (138, 43, 226), "pink": (255, 105, 180)}

_M1 = np.array([[0.4122214708, 0.5363325363, 0.0514459929],
                [0.2119034982, 0.6806995451, 0.1073969566],
                [0.0883024619, 0.2817188376, 0.6299787005]], np.float32)
_M2 = np.array([[0.2104542553, 0.7936177850, -0.0040720468],
                [1.9779984951, -2.4285922050, 0.4505937099],
                [0.0259040371, 0.7827717662, -0.8086757660]], np.float32)
_M1_INV = np.linalg.inv(_M1.astype(np.float64)).astype(np.float32)
_M2_INV = np.linalg.inv(_M2.astype(np.float64)).astype(np.float32)


def srgb_to_oklab(image: np.ndarray) -> np.ndarray:
    """HxWx3 uint8 (or float in [0, 1]) sRGB -> float32 OKLab (L in [0, 1])."""
    x = image.astype(np.float32) / 255.0 if image.dtype == np.uint8 else image.astype(np.float32)
    lin = np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)
    lms = np.cbrt(lin @ _M1.T)
    return lms @ _M2.T


def oklab_to_srgb(lab: np.ndarray) -> np.ndarray:
    """float OKLab -> HxWx3 uint8 sRGB (out-of-gamut values clipped)."""
    lms = (lab.astype(np.float32) @ _M2_INV.T) ** 3
    lin = np.clip(lms @ _M1_INV.T, 0.0, 1.0)
    x = np.where(lin <= 0.0031308, lin * 12.92, 1.055 * np.power(lin, 1 / 2.4) - 0.055)
    return np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8)


def object_mask(mask: Any, shape: tuple[int, ...], what: str = "attribute edit") -> np.ndarray:
    """A boolean object mask of the image's size; empty or missing masks are refused."""
    if mask is None:
        raise ShiftbenchError(f"{what} needs an object mask")
    m = np.asarray(mask)
    if m.ndim != 2 or m.shape != tuple(shape[:2]):
        raise ShiftbenchError(f"{what}: mask shape {m.shape} does not match the image {tuple(shape[:2])}")
    m = m > 0.5 if m.dtype.kind == "f" else m > 0
    if not m.any():
        raise ShiftbenchError(f"{what}: the object mask is empty (no pixel to edit)")
    return m


def _bbox(mask: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(mask)
    return int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1


def _shading(lab: np.ndarray, mask: np.ndarray, sigma_frac: float = 0.04) -> np.ndarray:
    """The object's low-frequency lightness relative to its mean inside the mask (about 1.0)."""
    import cv2

    y0, y1, x0, x1 = _bbox(mask)
    sigma = max(1.0, sigma_frac * max(y1 - y0, x1 - x0))
    L = lab[..., 0]
    # normalised convolution: blur only object pixels so the background does not leak into the shading
    w = mask.astype(np.float32)
    num = cv2.GaussianBlur(L * w, (0, 0), sigma)
    den = cv2.GaussianBlur(w, (0, 0), sigma)
    low = np.where(den > 1e-6, num / np.maximum(den, 1e-6), L)
    mean = float(L[mask].mean())
    return low / max(mean, 0.05)


def _finish(image: np.ndarray, lab: np.ndarray, new_lab: np.ndarray, mask: np.ndarray, strength: float) -> np.ndarray:
    """Blend the edit by ``strength`` inside the mask; outside it the input pixels are copied unchanged."""
    mixed = lab[mask] * (1.0 - strength) + new_lab[mask] * strength
    out = image.copy()
    out[mask] = oklab_to_srgb(mixed[None])[0]
    return out


def _grid(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Pixel coordinates relative to the mask's box, in units of the box's longer side."""
    y0, y1, x0, x1 = _bbox(mask)
    side = float(max(y1 - y0, x1 - x0))
    yy, xx = np.mgrid[0:mask.shape[0], 0:mask.shape[1]].astype(np.float32)
    return (yy - y0) / side, (xx - x0) / side, side


# -- colour ---------------------------------------------------------------------------------------
def recolor(image: np.ndarray, mask: np.ndarray, value: str, strength: float, params: dict[str, Any]) -> np.ndarray:
    """Recolour inside the mask keeping shading: OKLab lightness kept (shifted a little towards the
    target's), hue and chroma replaced; ``multi-color`` is a smooth hue field across the object."""
    lab = srgb_to_oklab(image)
    new = lab.copy()
    L = lab[..., 0]
    mean_L = float(L[mask].mean())
    if value == "multi-color":
        yy, xx, _ = _grid(mask)
        angle = float(params["angle"])
        phase = float(params["phase"])
        t = np.cos(angle) * xx + np.sin(angle) * yy
        # a hue ramp with a gentle wave so the colours bend across the object instead of banding straight
        hue = phase + 2 * np.pi * float(params["cycles"]) * t + 0.6 * np.sin(2 * np.pi * (yy * np.cos(angle) - xx * np.sin(angle)))
        chroma = 0.16
        new[..., 1] = chroma * np.cos(hue)
        new[..., 2] = chroma * np.sin(hue)
        new[..., 0] = L + 0.5 * (0.7 - mean_L)
    else:
        target = srgb_to_oklab(np.array([[REFERENCE_COLOURS[value]]], np.uint8))[0, 0]
        new[..., 1] = target[1]
        new[..., 2] = target[2]
        new[..., 0] = L + 0.6 * (float(target[0]) - mean_L)
    return _finish(image, lab, new, mask, strength)


# -- material -------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _material_photo(value: str) -> np.ndarray | None:
    from PIL import Image

    name = {"wood": "wood.png", "stone": "stone.png"}.get(value)
    if name is None:
        return None
    with resources.files("shiftbench").joinpath("data/materials", name).open("rb") as fh:
        img = Image.open(fh)
        img.load()
    return np.asarray(img.convert("RGB"))


@lru_cache(maxsize=8)
def _user_photo(path: str) -> np.ndarray:
    return load_image(path)


def material_texture(value: str, texture: str | None = None) -> np.ndarray | None:
    """The material photo (HxWx3 uint8): the user's file, the bundled one, or None for synthesised ones."""
    return _user_photo(texture) if texture else _material_photo(value)


# albedo of each material as sRGB; the photo's lightness detail modulates it, raised to a contrast
# exponent (the wood photo is weathered pale grey: its grain needs more contrast than the gravel)
_DETAIL_GAMMA = {"wood": 2.5, "stone": 1.2}
_MATERIAL_TINT = {"wood": (158, 104, 60), "stone": (128, 124, 118), "metal": (160, 163, 170), "paper": (236, 232, 220)}


def _sample_texture(tex: np.ndarray, mask: np.ndarray, params: dict[str, Any]) -> np.ndarray:
    """The photo tiled over the image (wrap-around), scaled to the object and offset by ``params``."""
    import cv2

    yy, xx, side = _grid(mask)
    th, tw = tex.shape[:2]
    # the photo's width covers ``scale`` times the object's longer side
    k = tw / float(params["scale"])
    rot = float(params["rotation"])
    u = (np.cos(rot) * xx - np.sin(rot) * yy) * k + float(params["offset"][0]) * tw
    v = (np.sin(rot) * xx + np.cos(rot) * yy) * k + float(params["offset"][1]) * th
    return cv2.remap(tex.astype(np.float32), u.astype(np.float32), v.astype(np.float32),
                     interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_WRAP)


def _streaks(shape: tuple[int, int], seed: int, angle: float, length: int) -> np.ndarray:
    """Brushed-metal streaks: white noise smeared along one direction (zero mean, unit std)."""
    import cv2

    noise = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    kernel = np.zeros((length, length), np.float32)
    c = (length - 1) / 2
    dx, dy = np.cos(angle), np.sin(angle)
    t = np.linspace(-c, c, 4 * length)
    kernel[np.clip(np.rint(c + t * dy), 0, length - 1).astype(int), np.clip(np.rint(c + t * dx), 0, length - 1).astype(int)] = 1
    out = cv2.filter2D(noise, -1, kernel / kernel.sum(), borderType=cv2.BORDER_REFLECT)
    return (out - out.mean()) / (out.std() + 1e-6)


def apply_material(image: np.ndarray, mask: np.ndarray, value: str, strength: float, params: dict[str, Any],
                   texture: str | None = None) -> np.ndarray:
    """Luminance-preserving texture transfer inside the mask: the material's albedo and detail times the
    object's own shading (metal: stronger contrast and specular gain; paper: flat, matte, fibrous)."""
    lab = srgb_to_oklab(image)
    shade = _shading(lab, mask)
    photo = material_texture(value, texture)
    h, w = mask.shape
    if photo is not None:
        tex = _sample_texture(photo, mask, params)
        tex_lab = srgb_to_oklab(np.clip(tex / 255.0, 0, 1))
        detail = tex_lab[..., 0] / max(float(tex_lab[..., 0][mask].mean()), 1e-3)
        if value in _MATERIAL_TINT and texture is None:  # the photo's detail on the material's albedo
            albedo = srgb_to_oklab(np.array([[_MATERIAL_TINT[value]]], np.uint8))[0, 0]
            detail = np.clip(detail, 0.05, 4.0) ** _DETAIL_GAMMA.get(value, 1.0)
            new_L = float(albedo[0]) * detail
            # darker grain / crevices are a little more saturated, as in real wood and stone
            sat = np.clip(1.6 - 0.6 * detail, 0.6, 1.6)
            new_a = float(albedo[1]) * sat
            new_b = float(albedo[2]) * sat
        else:
            new_L, new_a, new_b = tex_lab[..., 0], tex_lab[..., 1], tex_lab[..., 2]
        new_L = new_L * shade
    elif value == "metal":
        albedo = srgb_to_oklab(np.array([[_MATERIAL_TINT["metal"]]], np.uint8))[0, 0]
        streak = _streaks((h, w), int(params["seed"]), float(params["rotation"]), 15)
        # metal exaggerates the object's shading (mirror-like contrast) and adds highlights
        contrast = np.clip(shade, 0.2, 3.0) ** 1.8
        spec = np.clip(shade - 1.15, 0, None) * 1.5
        new_L = float(albedo[0]) * contrast * (1 + 0.05 * streak) + spec
        new_a = np.full((h, w), float(albedo[1]), np.float32)
        new_b = np.full((h, w), float(albedo[2]) - 0.01, np.float32)
    elif value == "paper":
        import cv2

        albedo = srgb_to_oklab(np.array([[_MATERIAL_TINT["paper"]]], np.uint8))[0, 0]
        rng = np.random.default_rng(int(params["seed"]))
        fibre = cv2.GaussianBlur(rng.standard_normal((h, w)).astype(np.float32), (0, 0), 0.7)
        yy, xx, _ = _grid(mask)
        # two straight creases across the object: a light and a dark side each
        folds = np.zeros((h, w), np.float32)
        for ang, off in zip(params["fold_angles"], params["fold_offsets"]):
            d = np.cos(ang) * xx + np.sin(ang) * yy - off
            folds += np.tanh(d * 40.0) * np.exp(-np.abs(d) * 25.0)
        new_L = float(albedo[0]) * np.clip(shade, 0.3, 2.0) ** 0.5 * (1 + 0.025 * fibre / (fibre.std() + 1e-6) + 0.04 * folds)
        new_a = np.full((h, w), float(albedo[1]), np.float32)
        new_b = np.full((h, w), float(albedo[2]), np.float32)
    else:  # the shift validates values; this guards direct calls
        raise ShiftbenchError(f"no material {value!r}")
    new = np.stack([np.clip(new_L, 0, 1), new_a, new_b], axis=-1).astype(np.float32)
    return _finish(image, lab, new, mask, strength)


# -- pattern --------------------------------------------------------------------------------------
def _smoothstep(e0: float, e1: float, x: np.ndarray) -> np.ndarray:
    t = np.clip((x - e0) / (e1 - e0), 0, 1)
    return t * t * (3 - 2 * t)


def apply_pattern(image: np.ndarray, mask: np.ndarray, value: str, strength: float, params: dict[str, Any]) -> np.ndarray:
    """Dots or stripes painted on the object, their lightness following its shading."""
    lab = srgb_to_oklab(image)
    shade = _shading(lab, mask)
    yy, xx, side = _grid(mask)
    period = 1.0 / float(params["repeats"])
    aa = 1.0 / side / period  # anti-aliasing width: one pixel in pattern units
    ang = float(params["angle"])
    u = (np.cos(ang) * xx + np.sin(ang) * yy) / period
    v = (-np.sin(ang) * xx + np.cos(ang) * yy) / period
    if value == "dotted":
        # a staggered grid of discs
        row = np.floor(v)
        fu = u + 0.5 * (row % 2) - np.floor(u + 0.5 * (row % 2)) - 0.5
        fv = v - row - 0.5
        dist = np.sqrt(fu * fu + fv * fv)
        cover = 1.0 - _smoothstep(0.28 - aa, 0.28 + aa, dist)
    elif value == "striped":
        f = np.abs(u - np.floor(u) - 0.5)
        cover = 1.0 - _smoothstep(0.25 - aa, 0.25 + aa, f)
    else:
        raise ShiftbenchError(f"no pattern {value!r}")
    ink = srgb_to_oklab(np.array([[params["colour"]]], np.uint8))[0, 0]
    # the ink's lightness follows the object's shading; between the marks the object keeps its own look
    painted = np.empty_like(lab)
    painted[..., 0] = np.clip(float(ink[0]) * shade, 0, 1)
    painted[..., 1] = ink[1]
    painted[..., 2] = ink[2]
    cover = cover.astype(np.float32)[..., None]
    new = cover * painted + (1 - cover) * lab
    return _finish(image, lab, new.astype(np.float32), mask, strength)


# -- global styles --------------------------------------------------------------------------------
def apply_style(image: np.ndarray, value: str, strength: float, params: dict[str, Any]) -> np.ndarray:
    """Whole-image styles that keep the layout: sketch (colour-dodge pencil from edges and tone),
    painting (edge-preserving stylisation, flattened colours), snowy (snow on upward faces, flakes, cold tint)."""
    import cv2

    img = image.astype(np.float32) / 255.0
    h, w = img.shape[:2]
    scale = max(h, w) / 224.0
    if value == "sketch":
        grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32) / 255.0
        blur = cv2.GaussianBlur(1.0 - grey, (0, 0), 4.0 * scale)
        dodge = np.clip(grey / np.maximum(1.0 - blur, 1e-3), 0, 1)  # colour dodge: lines where tone changes
        tone = cv2.GaussianBlur(grey, (0, 0), 2.0 * scale)
        pencil = np.clip(dodge * (0.75 + 0.25 * tone), 0, 1) ** 1.6
        styled = np.repeat(pencil[..., None], 3, axis=2) * np.array([0.98, 0.97, 0.94], np.float32)
    elif value == "painting":
        flat = cv2.edgePreservingFilter(image, flags=cv2.RECURS_FILTER, sigma_s=40 * scale, sigma_r=0.45)
        flat = flat.astype(np.float32) / 255.0
        levels = 7.0  # posterise a little: paint has fewer tones than a photo
        flat = np.round(flat * levels) / levels
        flat = cv2.GaussianBlur(flat, (0, 0), 0.6 * scale)
        lab = srgb_to_oklab(np.clip(flat, 0, 1))
        lab[..., 1:] *= 1.35  # more saturated pigments
        rng = np.random.default_rng(int(params["seed"]))
        strokes = _streaks((h, w), int(rng.integers(2**31)), float(params["angle"]), max(5, int(9 * scale)))
        lab[..., 0] = np.clip(lab[..., 0] * (1 + 0.05 * strokes), 0, 1)
        styled = oklab_to_srgb(lab).astype(np.float32) / 255.0
    elif value == "snowy":
        lab = srgb_to_oklab(image)
        L = lab[..., 0]
        # snow settles on faces lit from above: where lightness drops going down (the top of a shape)
        low = cv2.GaussianBlur(L, (0, 0), 1.5 * scale)
        gy = cv2.Sobel(low, cv2.CV_32F, 0, 1, ksize=3)
        ledge = _smoothstep(0.03, 0.15, -gy) + _smoothstep(0.7, 0.95, low) * 0.4
        ledge = np.clip(cv2.GaussianBlur(ledge, (0, 0), 1.0 * scale), 0, 1)
        cold = lab.copy()
        cold[..., 0] = np.clip(0.12 + 0.9 * L, 0, 1)
        cold[..., 1] = lab[..., 1] * 0.45 - 0.008
        cold[..., 2] = lab[..., 2] * 0.45 - 0.03  # towards blue
        base = oklab_to_srgb(cold).astype(np.float32) / 255.0
        snow = np.array([0.96, 0.97, 1.0], np.float32)
        rng = np.random.default_rng(int(params["seed"]))
        n = int(params["flakes"] * h * w / 1000)
        flakes = np.zeros((h, w), np.float32)
        flakes[rng.integers(0, h, n), rng.integers(0, w, n)] = 1.0
        flakes = np.clip(cv2.GaussianBlur(flakes, (0, 0), 0.8 * scale) * 6.0, 0, 1)
        cover = np.clip(ledge * 0.6 + 0.8 * flakes, 0, 1)[..., None]
        styled = base * (1 - cover) + snow * cover
    else:
        raise ShiftbenchError(f"no style {value!r}")
    out = img * (1.0 - strength) + styled * strength
    return np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)
