"""Weather corruptions: snow, frost, fog, brightness (ImageNet-C) and spatter (extra).

Severity is a dial over 1..5: whole severities are the published levels (same bytes as ever), in
between each class docstring states how its parameters move from one level to the next
(``shiftbench.severity.interpolate``). No draw depends on the severity.

frost blends in one of five overlays shipped in ``shiftbench/data/frost`` (generated
procedurally by ``tools/make_frost_overlays.py``; the reference's photographs are not shipped).
The tensor paths (``corrupt_tensor``) draw what the numpy paths draw, on the CPU from the recorded
seed, and blend on the tensor's device.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from ...errors import ShiftbenchError
from ...registry import SHIFTS
from ...severity import between, interpolate, is_whole
from ._common import (
    Corruption,
    draw_seed,
    gaussian_blur_like_skimage,
    grey3,
    motion_blur,
    noise_rng,
    to_uint8,
    zoom_crop_matrix,
)
from ._torch import motion_blur_tensor, on_device, stack_to_device, trunc, warp_grid
from .digital import ordered_fade, ordered_fade_tensor, ordered_switch, ordered_switch_tensor

__all__ = ["Snow", "Frost", "Fog", "Brightness", "Spatter", "plasma_fractal", "FROST_DIR"]

# (mean, std, zoom, threshold, blur radius, blur sigma, image weight)
SNOW = (
    (0.1, 0.3, 3, 0.5, 10, 4, 0.8),
    (0.2, 0.3, 2, 0.5, 12, 4, 0.7),
    (0.55, 0.3, 4, 0.9, 12, 8, 0.7),
    (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
    (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55),
)
FROST = ((1, 0.4), (0.8, 0.6), (0.7, 0.7), (0.65, 0.7), (0.6, 0.75))  # (image weight, frost weight)
FROST_DIR = Path(__file__).resolve().parents[2] / "data" / "frost"
FROST_FILES = tuple(f"frost{i}.png" for i in range(1, 6))
FOG = ((1.5, 2), (2.0, 2), (2.5, 1.7), (2.5, 1.5), (3.0, 1.4))  # (strength, roughness decay)
BRIGHTNESS = (0.1, 0.2, 0.3, 0.4, 0.5)
# (mean, std, sigma, threshold, intensity or mud blur sigma, mud?)
SPATTER = (
    (0.65, 0.3, 4, 0.69, 0.6, 0),
    (0.65, 0.3, 3, 0.68, 0.6, 0),
    (0.65, 0.3, 2, 0.68, 0.5, 0),
    (0.65, 0.3, 1, 0.65, 1.5, 1),
    (0.67, 0.4, 1, 0.65, 1.5, 1),
)
# interpolation rules per position (``shiftbench.severity.interpolate``): only snow's blur radius counts taps
SNOW_RULES = ("float", "float", "float", "float", "lerp-round", "float", "float")
# snow levels between which the output cross-fades instead (see ``Snow``)
SNOW_CROSSFADE = (2,)
SPATTER_RULES = ("float", "float", "float", "float", "float", "round")
WATER_RGB = np.array([175, 238, 238], dtype=np.float32) / 255.0  # pale turquoise
MUD_RGB = np.array([63, 42, 20], dtype=np.float32) / 255.0


def _kept_on_device(device, key: tuple[Any, ...], severity, make):
    """``on_device`` for tables of whole severities (a handful, kept); tables of in-between severities are
    moved over each call, so that a stream of dial values does not grow the device cache without bound."""
    if is_whole(severity):
        return on_device(device, key, make)
    import torch

    return torch.from_numpy(np.ascontiguousarray(make())).to(device)


def _grey_tensor(x):
    """OpenCV's RGB -> grey weights on a float (N, 3, H, W) tensor, as (N, 1, H, W)."""
    return 0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]


# -- snow -----------------------------------------------------------------------------------------


@SHIFTS.register("snow", description="Falling snow over a greyed image (ImageNet-C)", group="weather")
class Snow(Corruption):
    """Snow (ImageNet-C): thresholded zoomed noise, motion-blurred into streaks, added twice (rotated).

    In between levels every parameter (mean, std, zoom, threshold, blur sigma, image weight) moves linearly;
    the streak radius is a tap count, linear then rounded half up. From 2 to 3 that path makes more snow
    than either level (the levels change photos about equally, flakes of one size traded for fewer larger
    ones), so there the output cross-fades from level 2's image to level 3's instead (``ordered_fade``: snow
    only brightens, so the change moves linearly). The recorded draws are the same at any severity.
    """

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        return {"noise_seed": draw_seed(rng), "angle": float(rng.uniform(-135.0, -45.0))}

    @staticmethod
    def _crossfade(severity) -> tuple[int, int, float] | None:
        i, j, t = between(severity, len(SNOW))
        return (i + 1, j + 1, t) if i != j and i + 1 in SNOW_CROSSFADE else None

    def corrupt(self, image, severity, params):
        fade = self._crossfade(severity)
        if fade is not None:
            low, high, t = fade
            return ordered_fade(self.corrupt(image, low, params), self.corrupt(image, high, params), t)
        mean, std, zoom, threshold, radius, sigma, weight = interpolate(SNOW, severity, SNOW_RULES)
        h, w = image.shape[:2]
        # the reference draws H x W normals and zooms its central crop by ``zoom``: only that
        # crop (1/zoom**2 of them) reaches the output, so only the crop is drawn
        matrix = zoom_crop_matrix((h, w), zoom)
        crop_h, crop_w = int(np.ceil(h / float(zoom))), int(np.ceil(w / float(zoom)))
        matrix[:, 2] = 0.0  # coordinates relative to the crop
        layer = noise_rng(params).standard_normal((crop_h, crop_w), dtype=np.float32)
        layer *= std
        layer += mean
        layer = cv2.warpAffine(layer, matrix, (w, h), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
        layer[layer < threshold] = 0
        np.clip(layer, 0, 1, out=layer)
        layer = motion_blur(layer, radius, sigma, params["angle"])
        # the reference rounds the snow layer to 8 bits before adding it
        layer = np.round(layer * 255.0)
        flakes = layer + layer[::-1, ::-1]
        x = image.astype(np.float32)
        grey = cv2.cvtColor(x, cv2.COLOR_RGB2GRAY)
        lifted = cv2.max(x, grey3(grey * 1.5 + 127.5))
        out = cv2.addWeighted(x, weight, lifted, 1.0 - weight, 0.0)
        out += grey3(flakes)
        return to_uint8(out)

    def corrupt_tensor(self, x, severity, params):
        import torch
        import torch.nn.functional as F

        fade = self._crossfade(severity)
        if fade is not None:
            low, high, t = fade
            return ordered_fade_tensor(self.corrupt_tensor(x, low, params), self.corrupt_tensor(x, high, params), t)
        mean, std, zoom, threshold, radius, sigma, weight = interpolate(SNOW, severity, SNOW_RULES)
        n, _, h, w = x.shape
        crop_h, crop_w = int(np.ceil(h / float(zoom))), int(np.ceil(w / float(zoom)))
        layers = []
        for p in params:  # the numpy path's draws: the central crop of standard normals, float32
            layer = noise_rng(p).standard_normal((crop_h, crop_w), dtype=np.float32)
            layer *= std
            layer += mean
            layers.append(layer)
        layer = stack_to_device(layers, x)[:, None]
        matrix = zoom_crop_matrix((h, w), zoom)
        matrix[:, 2] = 0.0
        grid = _kept_on_device(x.device, ("snow", h, w, float(zoom)), severity, lambda: warp_grid((h, w), (crop_h, crop_w), matrix))
        layer = F.grid_sample(layer, grid.expand(n, h, w, 2), mode="bilinear", padding_mode="zeros", align_corners=True)
        layer = torch.where(layer < threshold, torch.zeros_like(layer), layer).clamp_(0, 1)
        layer = motion_blur_tensor(layer, radius, sigma, [p["angle"] for p in params])
        layer = torch.round(layer * 255.0)
        flakes = layer + layer.flip(-1, -2)
        xf = x.float()
        lifted = torch.maximum(xf, _grey_tensor(xf) * 1.5 + 127.5)
        out = xf * weight + lifted * (1.0 - weight)
        out += flakes
        return trunc(out)


# -- frost ----------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def frost_overlay(index: int) -> np.ndarray:
    """Frost overlay ``index`` (0..4) as an RGB uint8 array."""
    path = FROST_DIR / FROST_FILES[index]
    overlay = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if overlay is None:
        raise ShiftbenchError(f"frost overlay {path} is missing or unreadable (reinstall shiftbench)")
    return np.ascontiguousarray(overlay[..., ::-1])


@lru_cache(maxsize=64)
def rescaled_overlay(index: int, height: int, width: int) -> np.ndarray:
    # as the reference: scale up only when the image is larger than the overlay, then by 1.1 more
    overlay = frost_overlay(index)
    oh, ow = overlay.shape[:2]
    scale = max(1.0, height / oh, width / ow) * 1.1
    size = (int(np.ceil(ow * scale)), int(np.ceil(oh * scale)))
    return cv2.resize(overlay, size, interpolation=cv2.INTER_CUBIC)


@SHIFTS.register("frost", description="Frost crystals over the lens (ImageNet-C)", group="weather")
class Frost(Corruption):
    """Frost (ImageNet-C): a random crop of a frost overlay blended over the image.

    In between levels the image and frost weights move linearly; the overlay and its crop are drawn
    independently of the severity, so a dial value only changes the blend.
    """

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        h, w = shape[:2]
        index = int(rng.integers(len(FROST_FILES)))
        oh, ow = rescaled_overlay(index, h, w).shape[:2]
        return {"overlay": index, "top": int(rng.integers(0, oh - h)), "left": int(rng.integers(0, ow - w))}

    def corrupt(self, image, severity, params):
        image_weight, frost_weight = interpolate(FROST, severity, "float")
        h, w = image.shape[:2]
        overlay = rescaled_overlay(int(params["overlay"]), h, w)
        top, left = int(params["top"]), int(params["left"])
        crop = overlay[top : top + h, left : left + w]
        if crop.shape != image.shape:
            raise ShiftbenchError(f"frost params {params} do not fit a {w}x{h} image")
        return to_uint8(cv2.addWeighted(image, image_weight, crop, frost_weight, 0.0, dtype=cv2.CV_32F))

    def corrupt_tensor(self, x, severity, params):
        import torch

        image_weight, frost_weight = interpolate(FROST, severity, "float")
        n, _, h, w = x.shape
        crops = []
        for p in params:
            index = int(p["overlay"])
            overlay = on_device(x.device, ("frost", index, h, w), lambda i=index: rescaled_overlay(i, h, w).transpose(2, 0, 1))
            top, left = int(p["top"]), int(p["left"])
            crop = overlay[:, top : top + h, left : left + w]
            if tuple(crop.shape[1:]) != (h, w):
                raise ShiftbenchError(f"frost params {p} do not fit a {w}x{h} image")
            crops.append(crop)
        out = x.float() * image_weight + torch.stack(crops).float() * frost_weight
        return trunc(out)


# -- fog ------------------------------------------------------------------------------------------


def plasma_fractal(size: int, decay: float, rng: np.random.Generator) -> np.ndarray:
    """Diamond-square height map in [0, 1] of side ``size`` (a power of two), as the reference.

    The perturbation at each level is ``wibble * U(-wibble, wibble)``, wibble = 100 / decay**level.
    The point updates are compiled (numba): 0.2 ms instead of 0.75 ms for numpy's strided,
    wrap-around slices at 256 x 256.
    """

    if size < 2 or size & (size - 1):
        raise ValueError(f"plasma fractal size must be a power of two >= 2, got {size}")
    uniforms = rng.random(size * size - 1, dtype=np.float32)  # one per point but the corner
    from ._kernels import diamond_square  # deferred: start-up cost (pulls numba)
    grid = diamond_square(size, float(decay), uniforms)
    grid -= grid.min()
    grid /= grid.max()
    return grid


@SHIFTS.register("fog", description="Fog from a plasma fractal (ImageNet-C)", group="weather")
class Fog(Corruption):
    """Fog (ImageNet-C): a diamond-square fractal added, then the range compressed.

    In between levels the strength and the fractal's roughness decay move linearly (the same uniforms
    shape the fractal at every severity).
    """

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        return {"noise_seed": draw_seed(rng)}

    def corrupt(self, image, severity, params):
        strength, decay = interpolate(FOG, severity, "float")
        h, w = image.shape[:2]
        size = 1 << (max(h, w) - 1).bit_length()  # next power of two, as the reference
        fractal = plasma_fractal(size, decay, noise_rng(params))[:h, :w]
        peak = float(image.max()) / 255.0
        scale = peak / (peak + strength)
        # (x + 255 * strength * fractal) * scale, the fog plane computed once for the 3 channels
        fog = grey3(fractal * np.float32(255.0 * strength * scale))
        out = cv2.scaleAdd(image.astype(np.float32), scale, fog)
        return to_uint8(out)

    def corrupt_tensor(self, x, severity, params):
        strength, decay = interpolate(FOG, severity, "float")
        n, _, h, w = x.shape
        size = 1 << (max(h, w) - 1).bit_length()
        fractal = stack_to_device([plasma_fractal(size, decay, noise_rng(p))[:h, :w] for p in params], x)[:, None]
        peak = x.reshape(n, -1).amax(dim=1).float() / 255.0
        scale = (peak / (peak + strength)).view(n, 1, 1, 1)
        out = x.float() * scale + fractal * (255.0 * strength * scale)
        return trunc(out)


# -- brightness -----------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def brightness_lut(severity: float) -> np.ndarray:
    """out[value, channel] for value = max channel: HSV V raised by c with hue and saturation kept."""
    c = interpolate(BRIGHTNESS, severity)
    v = np.arange(256, dtype=np.float64)[:, None] / 255.0
    ch = np.arange(256, dtype=np.float64)[None, :] / 255.0
    raised = np.minimum(v + c, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(v > 0, ch * (raised / v), raised)
    return (np.clip(out, 0, 1) * 255).astype(np.uint8).reshape(-1)


@SHIFTS.register("brightness", description="Brightness raised in HSV (ImageNet-C)", group="weather")
class Brightness(Corruption):
    """Brightness (ImageNet-C): HSV value + 0.1..0.5, hue and saturation kept.

    In between levels the increment c moves linearly (severity 2.5 adds 0.25).

    With hue and saturation fixed every channel scales by V'/V, so the whole corruption is a
    256x256 table indexed by (max channel, channel).
    """

    def corrupt(self, image, severity, params):

        out = np.empty_like(image)
        from ._kernels import brightness_pass  # deferred: start-up cost (pulls numba)
        brightness_pass(image, brightness_lut(severity), out)  # one pass: max channel, three table reads
        return out

    def corrupt_tensor(self, x, severity, params):
        import torch

        lut = _kept_on_device(x.device, ("brightness", severity), severity, lambda: brightness_lut(severity))
        v = x.amax(dim=1, keepdim=True).to(torch.int64) << 8
        return lut[v | x.to(torch.int64)]


# -- spatter --------------------------------------------------------------------------------------


@SHIFTS.register("spatter", description="Water or mud spatter (ImageNet-C extra)", group="extra")
class Spatter(Corruption):
    """Spatter (ImageNet-C extra): water drops (severity 1-3) or mud (4-5) from thresholded noise.

    In between levels of the same liquid (1..3 water, 4..5 mud) every parameter moves linearly. From 3 to 4
    water turns to mud, which no parameter spans, and a cross-fade would cancel the water's lightening
    against the mud's darkening (both sit on the same blobs of the recorded noise): there a fraction t of
    the pixels (an ordered 16 x 16 Bayer dither, ``ordered_switch``) take level 4's output, the rest level 3's.
    """

    def draws(self, shape, severity, rng) -> dict[str, Any]:
        return {"noise_seed": draw_seed(rng)}

    @staticmethod
    def _switch(severity) -> tuple[int, int, float] | None:
        """(level, level, t) where ``severity`` lies strictly between a water and a mud level, else None."""
        i, j, t = between(severity, len(SPATTER))
        return (i + 1, j + 1, t) if SPATTER[i][5] != SPATTER[j][5] else None

    @staticmethod
    def layer(shape: tuple[int, ...], severity: float, params: dict[str, Any]) -> np.ndarray:
        """The (H, W) float32 layer drawn from the recorded seed alone: the water drops' intensity
        (severity 1-3) or the mud mask (4-5). Both the numpy and the torch path blend it in. Between 3
        and 4, where ``corrupt`` mixes the outputs of levels 3 and 4, it is the nearer level's layer."""
        mixed = Spatter._switch(severity)
        if mixed is not None:
            low, high, t = mixed
            severity = high if t >= 0.5 else low
        mean, std, sigma, threshold, amount, mud = interpolate(SPATTER, severity, SPATTER_RULES)
        h, w = shape[:2]
        liquid = noise_rng(params).standard_normal((h, w), dtype=np.float32)
        liquid *= std
        liquid += mean
        liquid = gaussian_blur_like_skimage(liquid, sigma)
        liquid[liquid < threshold] = 0
        if not mud:
            liquid8 = (np.clip(liquid, 0, 1) * 255).astype(np.uint8)
            dist = 255 - cv2.Canny(liquid8, 50, 150)
            dist = cv2.distanceTransform(dist, cv2.DIST_L2, 5)
            _, dist = cv2.threshold(dist, 20, 20, cv2.THRESH_TRUNC)
            dist = cv2.blur(dist, (3, 3)).astype(np.uint8)
            dist = cv2.equalizeHist(dist)
            emboss = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], dtype=np.float32)
            dist = cv2.filter2D(dist, cv2.CV_8U, emboss)
            dist = cv2.blur(dist, (3, 3)).astype(np.float32)
            drops = liquid8 * dist
            peak = float(drops.max())
            if peak > 0:
                drops *= amount / peak
            return drops
        mask = (liquid > threshold).astype(np.float32)
        mask = gaussian_blur_like_skimage(mask, amount)
        mask[mask < 0.8] = 0
        return mask

    def corrupt(self, image, severity, params):
        mixed = self._switch(severity)
        if mixed is not None:
            low, high, t = mixed
            return ordered_switch(self.corrupt(image, low, params), self.corrupt(image, high, params), t)
        mud = interpolate(SPATTER, severity, SPATTER_RULES)[5]
        layer = self.layer(image.shape, severity, params)
        x = image.astype(np.float32) / 255.0
        if not mud:
            out = x + grey3(layer) * WATER_RGB
        else:
            mask3 = grey3(layer)
            out = x * (1.0 - mask3) + mask3 * MUD_RGB
        out *= 255.0
        return to_uint8(out)

    def corrupt_tensor(self, x, severity, params):
        import torch

        mixed = self._switch(severity)
        if mixed is not None:
            low, high, t = mixed
            return ordered_switch_tensor(self.corrupt_tensor(x, low, params), self.corrupt_tensor(x, high, params), t)
        mud = interpolate(SPATTER, severity, SPATTER_RULES)[5]
        n, _, h, w = x.shape
        # the layer (drops or mud mask) is a function of the recorded seed alone: drawn and shaped on the
        # CPU (OpenCV's Canny, distance transform, equalisation), blended on the device
        layer = stack_to_device([self.layer((h, w), severity, p) for p in params], x)[:, None]
        xf = x.float() / 255.0
        if not mud:
            out = xf + layer * torch.from_numpy(WATER_RGB).to(x.device).view(1, 3, 1, 1)
        else:
            out = xf * (1.0 - layer) + layer * torch.from_numpy(MUD_RGB).to(x.device).view(1, 3, 1, 1)
        out *= 255.0
        return trunc(out)
