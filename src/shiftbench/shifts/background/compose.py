"""The weight-free ``compose`` backend: new colour, texture, scene or black backgrounds behind the intact object (CPU).

Shifts (variants are parameters; severity 1..5 sets the weight of the new background, 0.2 .. 1.0, over the
original one, default 5 = a full replacement as in ObjectCompose):

- ``background_color``   color = red | green | blue | colorful (the four colour prompts). A vivid field with
  smooth, seeded lighting (a low-resolution brightness grid upsampled bicubically; for ``colorful`` also a
  hue grid), never a flat fill.
- ``background_texture`` texture = 1..4, mirroring the four texture prompts: 1 "textures in the background":
  a seeded crop of a real texture photo (bark, rock, pebbles, wood, leaves, grass); 2 "intricately textured":
  fine interference patterns of oriented gratings, tinted; 3 "colorful textured": a colourful mosaic of
  warped hue cells modulated by gratings; 4 "distorted textures": a texture photo warped by a strong smooth
  random displacement field.
- ``background_scene``   scene = a scene id of the ``objects`` dataset, ``random`` (a seeded scene other
  than the sample's own), ``mixed_same`` (another scene congruent with the object: ImageNet-9's Mixed-Same)
  or ``mixed_rand`` (a scene sharing no context with the object: Mixed-Rand); their difference in accuracy
  is the BG-Gap of Xiao et al., "Noise or Signal" (ICLR 2021), which the report computes per model.
- ``object_only``        the background masked out (black): accuracy with the background removed.
  Dilation defaults to 0 so that nothing of the old background remains.
- ``background_only``    the object masked out: the object's dilated region is filled from its surroundings
  by OpenCV inpainting (Telea); accuracy with the object removed. One severity.

Procedural texture tiles and scene crops are built once per process and reused.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, ClassVar, Sequence

import numpy as np

from ...conditioning.masks import dilate
from ...datasets import objects
from ...errors import ShiftbenchError
from ...registry import SHIFTS
from ...sample import Sample
from .base import BackgroundShift
from .diffusion import ObjectRemoval

__all__ = ["BackgroundColor", "BackgroundTexture", "BackgroundScene", "ObjectOnly", "BackgroundOnly",
           "COLORS", "TEXTURE_PHOTOS"]

# vivid base colours (sRGB) of the colour prompts
COLORS = {"red": (222, 28, 36), "green": (30, 178, 52), "blue": (28, 70, 220)}
# scene photos of the objects dataset that are textures rather than views
TEXTURE_PHOTOS = ("burnt_bark", "mossy_bark", "mudstone", "pebble_beach", "wooden_board", "wet_leaves",
                  "dune_grass", "mossy_log")
TILE = 256
TILES_PER_FAMILY = 8


def _resize(arr: np.ndarray, h: int, w: int, cubic: bool = True) -> np.ndarray:
    import cv2

    return cv2.resize(arr, (w, h), interpolation=cv2.INTER_CUBIC if cubic else cv2.INTER_LINEAR)


def _grid(rng: np.random.Generator, lo: float, hi: float, n: int = 4) -> list[list[float]]:
    return np.round(rng.uniform(lo, hi, size=(n, n)), 4).tolist()


# -- colour -------------------------------------------------------------------------------------------
@SHIFTS.register("background_color", group="background", compose="color",
                 description="background replaced by a vivid colour field (red/green/blue/colorful); object kept exactly")
class BackgroundColor(BackgroundShift):
    """Vivid colour background with seeded smooth lighting; ``color`` = red | green | blue | colorful."""

    def __init__(self, color: str = "red", mask: str = "auto", dilation: int | None = None,
                 mask_options: dict | None = None):
        if color not in (*COLORS, "colorful"):
            raise ShiftbenchError(f"background_color: color must be red, green, blue or colorful, got {color!r}")
        self.color = color
        super().__init__(mask=mask, dilation=dilation, mask_options=mask_options, color=color)

    def background_params(self, sample: Sample, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        params: dict[str, Any] = {"light": _grid(rng, 0.72, 1.12)}
        if self.color == "colorful":
            params["hue"] = _grid(rng, 0.0, 360.0)
        else:
            params["tint"] = np.round(rng.uniform(-12, 12, size=3), 2).tolist()
        return params

    def background(self, sample: Sample, params: dict[str, Any]) -> np.ndarray:
        import cv2

        h, w = sample.size
        light = _resize(np.asarray(params["light"], np.float32), h, w)
        if self.color == "colorful":
            hue = np.mod(_resize(np.asarray(params["hue"], np.float32), h, w), 360.0)
            hsv = cv2.merge([hue, np.full_like(hue, 0.9), np.minimum(light, np.float32(1.0))])
            return cv2.convertScaleAbs(cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB), alpha=255.0)  # rounds, saturates
        base = np.asarray(COLORS[self.color], np.float64) + np.asarray(params["tint"], np.float64)
        # light >= 0, so convertScaleAbs is a rounded, saturated scale to uint8 per channel
        return cv2.merge([cv2.convertScaleAbs(light, alpha=float(b)) for b in base])


# -- texture ------------------------------------------------------------------------------------------
def _gratings(rng: np.random.Generator, n: int, fmin: float, fmax: float) -> np.ndarray:
    y, x = np.mgrid[0:TILE, 0:TILE].astype(np.float32) / TILE
    acc = np.zeros((TILE, TILE), np.float32)
    for _ in range(n):
        theta = rng.uniform(0, np.pi)
        freq = rng.uniform(fmin, fmax)
        phase = rng.uniform(0, 2 * np.pi)
        acc += np.sin(2 * np.pi * freq * (x * np.cos(theta) + y * np.sin(theta)) + phase).astype(np.float32)
    return acc / n


@lru_cache(maxsize=None)
def _tiles(family: int) -> tuple[np.ndarray, ...]:
    """The procedural tiles of texture family 2 or 3 (TILE x TILE float32 RGB 0..255), built once."""
    import cv2

    rng = np.random.default_rng([0x7E57, family])
    tiles = []
    for _ in range(TILES_PER_FAMILY):
        if family == 2:  # intricate: interference of many fine gratings, folded for sharp detail
            g = _gratings(rng, 7, 6, 28)
            v = np.abs(np.sin(4.0 * g)).astype(np.float32)
            tint = rng.uniform(0.35, 1.0, size=3).astype(np.float32)
            tile = (0.15 + 0.85 * v[..., None]) * tint * 255.0
        else:  # colourful: warped mosaic of hue cells, brightness from gratings
            cells = rng.uniform(0, 360, size=(12, 12)).astype(np.float32)
            hue = cv2.resize(cells, (TILE, TILE), interpolation=cv2.INTER_NEAREST)
            warp = _gratings(rng, 3, 1, 4) * 18.0
            yy, xx = np.mgrid[0:TILE, 0:TILE].astype(np.float32)
            hue = cv2.remap(hue, (xx + warp) % TILE, (yy - warp) % TILE, cv2.INTER_NEAREST)
            val = 0.55 + 0.45 * np.abs(_gratings(rng, 4, 8, 24))
            hsv = np.stack([hue, np.full_like(hue, 0.85), val.astype(np.float32)], axis=-1)
            tile = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB) * 255.0
        tile = np.ascontiguousarray(tile, dtype=np.float32)
        tile.setflags(write=False)
        tiles.append(tile)
    return tuple(tiles)


def _photo(scene_id: str) -> np.ndarray:
    return objects.scene(scene_id, copy=False)  # read-only, decoded once per process


def _crop(src: np.ndarray, params: dict[str, Any], h: int, w: int) -> np.ndarray:
    """A seeded crop of ``src`` (fractions in params), rotated/flipped, resized to h x w."""
    sh, sw = src.shape[:2]
    side = max(8, int(round(params["zoom"] * min(sh, sw))))
    ch, cw = (side, max(8, int(round(side * w / h)))) if h <= w else (max(8, int(round(side * h / w))), side)
    ch, cw = min(ch, sh), min(cw, sw)
    top = int(round(params["top"] * (sh - ch)))
    left = int(round(params["left"] * (sw - cw)))
    crop = src[top:top + ch, left:left + cw]
    if params["flip"]:
        crop = crop[:, ::-1]
    crop = np.rot90(crop, k=int(params["rot"]) * 2)  # 0 or 180 degrees keeps the aspect ratio
    return _resize(np.ascontiguousarray(crop), h, w, cubic=False)


@SHIFTS.register("background_texture", group="background", compose="texture",
                 description="background replaced by a texture (families 1-4 mirroring the texture prompts); object kept exactly")
class BackgroundTexture(BackgroundShift):
    """Texture background; ``texture`` = 1 (photo), 2 (intricate), 3 (colourful), 4 (distorted photo)."""

    def __init__(self, texture: int = 1, mask: str = "auto", dilation: int | None = None,
                 mask_options: dict | None = None):
        if isinstance(texture, bool) or texture not in (1, 2, 3, 4):
            raise ShiftbenchError(f"background_texture: texture must be 1, 2, 3 or 4, got {texture!r}")
        self.texture = int(texture)
        super().__init__(mask=mask, dilation=dilation, mask_options=mask_options, texture=self.texture)

    def background_params(self, sample: Sample, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if self.texture in (1, 4):
            params["photo"] = TEXTURE_PHOTOS[int(rng.integers(len(TEXTURE_PHOTOS)))]
            zoom_range = (0.35, 0.8) if self.texture == 1 else (0.6, 1.0)
        else:
            params["tile"] = int(rng.integers(TILES_PER_FAMILY))
            zoom_range = (0.4, 1.0)
        params.update(zoom=round(float(rng.uniform(*zoom_range)), 4), top=round(float(rng.random()), 4),
                      left=round(float(rng.random()), 4), flip=bool(rng.random() < 0.5), rot=int(rng.integers(2)))
        if self.texture == 4:
            params["warp"] = np.round(rng.normal(0.0, 1.0, size=(2, 5, 5)), 4).tolist()
        return params

    def background(self, sample: Sample, params: dict[str, Any]) -> np.ndarray:
        import cv2

        h, w = sample.size
        src = _photo(params["photo"]) if self.texture in (1, 4) else _tiles(self.texture)[params["tile"]]
        out = _crop(src, params, h, w)
        if self.texture == 4:
            # strong smooth displacement: about 12 % of the shorter side per unit of the drawn grid
            amp = 0.12 * min(h, w)
            dx = _resize(np.asarray(params["warp"][0], np.float32), h, w) * amp
            dy = _resize(np.asarray(params["warp"][1], np.float32), h, w) * amp
            yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
            out = cv2.remap(out, xx + dx, yy + dy, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
        return out


# -- scene --------------------------------------------------------------------------------------------
@SHIFTS.register("background_scene", group="background", compose="scene",
                 description="background replaced by another real scene photo (a named one, a random one, another "
                             "congruent one: Mixed-Same, or an incongruent one: Mixed-Rand); object kept exactly")
class BackgroundScene(BackgroundShift):
    """Another real scene behind the object. ``scene`` is a scene id of the objects dataset, ``random`` (any
    scene but the sample's own), ``mixed_same`` (another scene sharing a context with the object: ImageNet-9's
    Mixed-Same) or ``mixed_rand`` (a scene sharing no context with it: Mixed-Rand). The two mixed pools need
    the object's contexts: ``meta["contexts"]`` (a list of ``objects.CONTEXTS``) or ``meta["object_id"]`` of
    the objects dataset. The drawn scene is recorded in the params."""

    POOLS: ClassVar[tuple[str, ...]] = ("random", "mixed_same", "mixed_rand")

    def __init__(self, scene: str = "random", mask: str = "auto", dilation: int | None = None,
                 mask_options: dict | None = None):
        if scene not in self.POOLS:
            objects.scene_info(scene)  # unknown ids fail here with "did you mean"
        self.scene = scene
        super().__init__(mask=mask, dilation=dilation, mask_options=mask_options, scene=scene)

    def _contexts(self, sample: Sample) -> set[str]:
        meta = sample.meta or {}
        where = f"background_scene scene={self.scene!r}, sample {sample.id!r}"
        if meta.get("contexts") is not None:
            given = meta["contexts"]
            given = [given] if isinstance(given, str) else given
            if not isinstance(given, (list, tuple)) or not given or not all(isinstance(c, str) for c in given):
                raise ShiftbenchError(f"{where}: meta 'contexts' must be a non-empty list of {', '.join(objects.CONTEXTS)}; "
                                      f"got {meta['contexts']!r}")
            unknown = sorted(set(given) - set(objects.CONTEXTS))
            if unknown:
                raise ShiftbenchError(f"{where}: unknown context(s) {', '.join(map(repr, unknown))} in meta 'contexts' "
                                      f"(known: {', '.join(objects.CONTEXTS)})")
            return set(given)
        if meta.get("object_id") is not None:
            return set(objects.object_info(meta["object_id"]).contexts)
        raise ShiftbenchError(f"{where}: needs the object's contexts, from meta 'object_id' (the objects dataset) "
                              f"or meta 'contexts' (a list of {', '.join(objects.CONTEXTS)}); give an image folder "
                              "its contexts with dataset_params: {contexts: FILE} (TSV lines CLASS<TAB>grass,forest; "
                              "or contexts: bundled for ImageNet wnid folders; docs/datasets.md), or use "
                              "scene: random or a scene id")

    def check_sample(self, sample: Sample) -> None:
        """The mask a sample needs and, for Mixed-Same / Mixed-Rand, the object's contexts (checked before
        any mask is computed: a dry run says it on the first sample)."""
        if self.scene in ("mixed_same", "mixed_rand"):
            self._contexts(sample)
        super().check_sample(sample)

    def background_params(self, sample: Sample, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        if self.scene not in self.POOLS:
            return {"scene": self.scene}
        own = (sample.meta or {}).get("scene_id")
        if self.scene == "random":
            choices = [s for s in objects.scene_ids() if s != own]
        else:
            contexts = self._contexts(sample)
            same = self.scene == "mixed_same"
            choices = [s for s in objects.scene_ids()
                       if s != own and bool(contexts & set(objects.scene_info(s).contexts)) == same]
            if not choices:
                kind = "other congruent" if same else "incongruent"
                raise ShiftbenchError(f"background_scene scene={self.scene!r}, sample {sample.id!r}: no {kind} scene "
                                      f"for contexts {', '.join(sorted(contexts))}")
        return {"scene": choices[int(rng.integers(len(choices)))]}

    def background(self, sample: Sample, params: dict[str, Any]) -> np.ndarray:
        return objects.scene_on_canvas(params["scene"], sample.size)


# -- masking ------------------------------------------------------------------------------------------
@SHIFTS.register("object_only", group="background", compose="object_only",
                 description="background masked out (black), object kept exactly: accuracy without the background")
class ObjectOnly(BackgroundShift):
    """The object on black: the background masked out (severity sets how dark, 5 = black)."""

    default_dilation: ClassVar[int] = 0

    def __init__(self, mask: str = "auto", dilation: int | None = None, mask_options: dict | None = None):
        super().__init__(mask=mask, dilation=dilation, mask_options=mask_options)

    def background(self, sample: Sample, params: dict[str, Any]) -> np.ndarray:
        return np.zeros_like(sample.image)


@SHIFTS.register("background_only", group="background", compose="background_only",
                 description="object masked out (inpainted from its surroundings): accuracy without the object")
class BackgroundOnly(BackgroundShift):
    """The object removed: its mask, dilated, is filled by OpenCV inpainting (``fill="telea"`` or ``"ns"``),
    a flat ``"mean"`` of the remaining background, or a diffusion inpainting model (``fill="diffusion"``
    with ``diffusion={"model": hub id or folder, ...}``: the keyword arguments of background_inpaint).
    The label stays the target; the mask no longer shows a visible object."""

    keeps: ClassVar[frozenset[str]] = frozenset({"label"})
    severities: ClassVar[tuple[int, int]] = (1, 1)
    default_severity: ClassVar[int | None] = 1

    def __init__(self, fill: str = "telea", radius: int = 5, diffusion: dict | None = None, mask: str = "auto",
                 dilation: int | None = None, mask_options: dict | None = None):
        if fill not in ("telea", "ns", "mean", "diffusion"):
            raise ShiftbenchError(f"background_only: fill must be 'telea', 'ns', 'mean' or 'diffusion', got {fill!r}")
        if isinstance(radius, bool) or not isinstance(radius, int) or not 1 <= radius <= 50:
            raise ShiftbenchError(f"background_only: radius must be an int in 1..50, got {radius!r}")
        if fill == "diffusion" and not diffusion:
            raise ShiftbenchError("background_only: fill='diffusion' needs diffusion={'model': hub id or folder, ...}")
        self.fill, self.radius = fill, radius
        extra = {"diffusion": {k: v for k, v in diffusion.items() if isinstance(v, (str, int, float, bool))}} \
            if diffusion else {}
        super().__init__(mask=mask, dilation=dilation, mask_options=mask_options, fill=fill, radius=radius, **extra)
        self._remover = None
        if fill == "diffusion":
            self._remover = ObjectRemoval(mask=mask, dilation=self.dilation, mask_options=mask_options,
                                          **dict(diffusion or {}))

    def sample_params(self, sample: Sample, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        if self._remover is not None:
            return self._remover.sample_params(sample, 1, rng)
        self._hole(sample)  # refused when drawn (a dry run draws the first batch), not when painted
        return super().sample_params(sample, severity, rng)

    def _hole(self, sample: Sample) -> np.ndarray:
        """The region to fill: the object's mask dilated; refused when it leaves nothing to fill from."""
        hole = dilate(self.object_mask(sample), self.dilation)
        if hole.all():
            raise ShiftbenchError(f"shift 'background_only', sample {sample.id}: the dilated mask covers the "
                                  "whole image, nothing is left to fill from")
        return hole

    def apply_batch(self, samples: Sequence[Sample], params: Sequence[dict[str, Any]]) -> list[Sample]:
        if self._remover is not None:
            out = self._remover.apply_batch(samples, params)
            return [o.replace(meta={**o.meta, "background_shift": self.name}) for o in out]
        return [self.apply(s, p) for s, p in zip(samples, params)]

    def apply(self, sample: Sample, params: dict[str, Any]) -> Sample:
        import cv2

        if self._remover is not None:
            return self.apply_batch([sample], [params])[0]
        hole = self._hole(sample)
        if self.fill == "mean":
            image = sample.image.copy()
            image[hole] = np.rint(sample.image[~hole].mean(axis=0)).astype(np.uint8)
        else:
            method = cv2.INPAINT_TELEA if self.fill == "telea" else cv2.INPAINT_NS
            image = cv2.inpaint(np.ascontiguousarray(sample.image), hole.astype(np.uint8), self.radius, method)
        return sample.replace(image=np.ascontiguousarray(image), meta={**sample.meta, "background_shift": self.name})
