"""The built-in cue-conflict set ``objects-cue-conflict``: the shape of one object filled with the texture of another.

Geirhos et al. (ICLR 2019) measure a classifier's shape bias on images whose shape says one class and whose
texture another. Their images are style transfers; these are made from the ``objects`` cut-outs and their
exact masks (shiftbench.datasets.objects), on the fly, so nothing is stored:

- **cue conflict**: the silhouette (exact mask) of a *shape object*, its pixels copied from the texture of a
  *texture object* of another class, on a neutral grey ground (``GROUND``);
- **texture alone**: that texture filling the whole frame (the texture control);
- **silhouette alone**: the shape object's mask filled flat dark grey (``SILHOUETTE_FILL``) on the same
  ground, in the same placement (the shape control).

Texture rule. From the texture object's cut-out at its stored scale (longer side <= 256 px; the scale of an
object that fills a 224 px frame) a square patch is cropped wholly inside its mask (alpha >= 128): its side is
that of the largest such square, at most ``PATCH_MAX`` (64 px, so the patch shows surface, not the object's
outline); its position is drawn uniformly among all positions where a square of that side fits, from
``default_rng([seed, crc32(object_id), 0x7E47, crop])``. The patch is tiled with mirroring (the patch, its
left-right mirror, its up-down mirror and both; a seamless tile of twice its side) from the canvas' top-left
corner. An object whose largest square is under ``PATCH_MIN`` (24 px: a hammer, a syringe, a bassoon, a
mantis) gives no texture.

Shape rule. The shape object is centred, its longer side ``OBJECT_SCALE`` (0.8) of the canvas' shorter side,
mirrored left-right with p = 1/2 from ``default_rng([seed, crc32(object_id), 0x5A4E])``; the mask is the
``objects`` one (``objects.layer``: the resized cut-out's alpha >= 128), kept exactly: inside it every pixel
is the texture's, outside it every pixel is ``GROUND``.

Which textures. A class whose texture alone the bundled classifiers do not recognise above chance carries no
texture cue, and a conflict with it would test nothing; by default (``texture_classes="kept"``) only the
texture classes listed as kept in ``shiftbench/data/cue_conflict_textures.tsv`` give textures. That list is
computed by ``tools/cue_conflict_textures.py`` (the rule is stated there and in docs/shape_bias.md). Every
class of the set stays a shape class, so the set's classes, among which decisions are taken, are the 80
classes of the 94 objects whatever the textures kept.

Pairing. With the texture objects in a seeded order ``P`` (``default_rng([seed, 0xC0F1]).permutation``), shape
object ``j`` (curation order) takes the next ``textures_per_shape`` objects of ``P`` read cyclically from
position ``j x textures_per_shape``, skipping those of its own class: every texture is used about equally
often; the ``r``-th conflict a texture object fills uses its crop ``r mod texture_crops``. Sample order: for
each shape object its conflict images, then its silhouette, then the texture controls of the ``j``-th texture
object (its ``texture_crops`` crops, the very patches of the conflicts), so the first few samples already hold
all three cues (``--limit``). ``cue`` selects one kind.

>>> ds = CueConflictDataset(cue="conflict", textures_per_shape=1)
>>> s = ds.load(0)
>>> s.meta["cue"], s.meta["shape_object"] != s.meta["texture_object"], s.label == s.meta["shape_label"]
('conflict', True, True)
>>> bool((s.image[~s.mask] == GROUND).all())  # the ground is neutral grey, the object is the texture
True
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, NamedTuple

import numpy as np

from ..errors import ShiftbenchError
from ..labelspace import LabelSpace
from ..registry import DATASETS
from ..sample import Sample
from ..seeds import check_seed
from . import objects
from .base import Dataset
from .imagenet import NUM_CLASSES, class_names as imagenet_class_names

__all__ = ["CUES", "GROUND", "SILHOUETTE_FILL", "OBJECT_SCALE", "PATCH_MAX", "PATCH_MIN", "TEXTURES_FILE", "Patch",
           "CueConflictDataset", "set_classes", "largest_square", "texture_patch", "tile_mirrored", "texture_canvas",
           "shape_placement", "texture_class_table", "kept_texture_classes", "texture_objects"]

CUES = ("all", "conflict", "texture", "silhouette")
GROUND = (128, 128, 128)  # the neutral grey ground
SILHOUETTE_FILL = (40, 40, 40)  # the flat dark grey of a silhouette alone
OBJECT_SCALE = 0.8  # the shape object's longer side, a fraction of the canvas' shorter side
PATCH_MAX = 64  # px: the largest texture patch side (surface, not outline)
PATCH_MIN = 24  # px: an object whose largest inscribed square is smaller gives no texture
MAX_CROPS = 16
TEXTURES_FILE = "cue_conflict_textures.tsv"
DEFAULT_TEXTURES_PER_SHAPE = 8
DEFAULT_TEXTURE_CROPS = 4
_PATCH_TAG, _FLIP_TAG, _ORDER_TAG = 0x7E47, 0x5A4E, 0xC0F1


class Patch(NamedTuple):
    """A texture patch: ``rgb`` (side x side x 3 uint8) cropped at ``(x, y)`` of the object's stored cut-out."""

    object_id: str
    crop: int
    x: int
    y: int
    side: int
    rgb: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        return {"object_id": self.object_id, "crop": self.crop, "x": self.x, "y": self.y, "side": self.side}


# -- the classes --------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def set_classes() -> tuple[str, ...]:
    """The wnids of the set's classes: every class of the ``objects`` cut-outs, in ImageNet-1k index order
    (so a tie between two classes' scores goes to the lower index, as in ``topk_correct``)."""
    infos = {objects.object_info(o).wnid: objects.object_info(o).imagenet_index for o in objects.object_ids()}
    return tuple(sorted(infos, key=infos.__getitem__))


@lru_cache(maxsize=1)
def texture_class_table() -> tuple[dict[str, str], ...]:
    """The shipped per-class texture check (``data/cue_conflict_textures.tsv``, written by
    tools/cue_conflict_textures.py): one dict per class (wnid, class, hits, trials, p_value, kept, ...)."""
    path = resources.files("shiftbench").joinpath("data", TEXTURES_FILE)
    if not path.is_file():
        raise ShiftbenchError(f"shiftbench/data/{TEXTURES_FILE} is missing: run tools/cue_conflict_textures.py, or "
                              "pass texture_classes='all'")
    lines = [line for line in path.read_text("utf-8").splitlines() if line.strip() and not line.startswith("#")]
    header = lines[0].split("\t")
    return tuple(dict(zip(header, line.split("\t"))) for line in lines[1:])


def kept_texture_classes() -> tuple[str, ...]:
    """The wnids whose textures the shipped check keeps (their texture alone is recognised above chance)."""
    return tuple(row["wnid"] for row in texture_class_table() if row["kept"] == "yes")


# -- texture ------------------------------------------------------------------------------------------
def _object_mask(object_id: str) -> np.ndarray:
    return objects.cutout(object_id)[..., 3] >= objects.ALPHA_THRESHOLD


def _square_corners(mask: np.ndarray, side: int) -> np.ndarray:
    """Bool (H - side + 1, W - side + 1): whether the side x side square with that top-left corner lies in ``mask``."""
    h, w = mask.shape
    if side > min(h, w):
        return np.zeros((0, 0), dtype=bool)
    sat = np.zeros((h + 1, w + 1), dtype=np.int64)
    sat[1:, 1:] = mask.astype(np.int64).cumsum(0).cumsum(1)
    inside = sat[side:, side:] - sat[:-side, side:] - sat[side:, :-side] + sat[:-side, :-side]
    return inside == side * side


@lru_cache(maxsize=None)
def largest_square(object_id: str) -> int:
    """The side (px) of the largest axis-aligned square wholly inside the object's mask, at its stored scale."""
    mask = _object_mask(object_id)
    lo, hi = 0, min(mask.shape)  # a square of side lo fits; one of side hi + 1 does not
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _square_corners(mask, mid).any():
            lo = mid
        else:
            hi = mid - 1
    return lo


def texture_objects(classes: Any = None) -> list[str]:
    """Objects (curation order) that give a texture: largest square >= ``PATCH_MIN`` and, when ``classes``
    (wnids) is given, of one of those classes."""
    wanted = None if classes is None else set(classes)
    return [o for o in objects.object_ids() if largest_square(o) >= PATCH_MIN
            and (wanted is None or objects.object_info(o).wnid in wanted)]


def texture_patch(object_id: str, seed: int = 0, crop: int = 0) -> Patch:
    """Crop ``crop`` of the object's texture: a square of side min(largest square, ``PATCH_MAX``) inside its
    mask, at a position drawn from ``default_rng([seed, crc32(object_id), 0x7E47, crop])`` (``seed``: a dataset's,
    checked where it was built)."""
    side = min(largest_square(object_id), PATCH_MAX)
    if side < PATCH_MIN:
        raise ShiftbenchError(f"object {object_id!r} gives no texture: its largest square inside the mask is "
                              f"{side} px, under {PATCH_MIN}")
    valid = _square_corners(_object_mask(object_id), side)
    corners = np.flatnonzero(valid)
    rng = np.random.default_rng([seed, zlib.crc32(object_id.encode()), _PATCH_TAG, int(crop)])
    y, x = divmod(int(corners[int(rng.integers(len(corners)))]), valid.shape[1])
    rgb = np.ascontiguousarray(objects.cutout(object_id)[y:y + side, x:x + side, :3])
    return Patch(object_id, int(crop), x, y, side, rgb)


def tile_mirrored(patch: np.ndarray, canvas: Any) -> np.ndarray:
    """``patch`` tiled with mirroring over a canvas (int or (height, width)), from the top-left corner.

    >>> p = np.arange(4, dtype=np.uint8).reshape(2, 2, 1).repeat(3, axis=2)
    >>> tile_mirrored(p, (8, 8))[:4, :6, 0].tolist()
    [[0, 1, 1, 0, 0, 1], [2, 3, 3, 2, 2, 3], [2, 3, 3, 2, 2, 3], [0, 1, 1, 0, 0, 1]]
    """
    h, w = objects.canvas_size(canvas)
    block = np.concatenate([np.concatenate([patch, patch[:, ::-1]], axis=1),
                            np.concatenate([patch[::-1], patch[::-1, ::-1]], axis=1)], axis=0)
    reps = (-(-h // block.shape[0]), -(-w // block.shape[1]), 1)
    return np.ascontiguousarray(np.tile(block, reps)[:h, :w])


def texture_canvas(object_id: str, canvas: Any = objects.DEFAULT_SIZE, seed: int = 0,
                   crop: int = 0) -> tuple[np.ndarray, Patch]:
    """The object's texture patch tiled with mirroring over the canvas: (HxWx3 uint8, the patch)."""
    patch = texture_patch(object_id, seed, crop)
    return tile_mirrored(patch.rgb, canvas), patch


# -- shape --------------------------------------------------------------------------------------------
def shape_placement(object_id: str, canvas: Any = objects.DEFAULT_SIZE, seed: int = 0) -> objects.Placement:
    """The shape object centred, longer side ``OBJECT_SCALE`` of the canvas' shorter side, aspect kept,
    mirrored with p = 1/2 from ``default_rng([seed, crc32(object_id), 0x5A4E])``."""
    h, w = objects.canvas_size(canvas)
    info = objects.object_info(object_id)
    longest = max(1, round(OBJECT_SCALE * min(h, w)))
    if info.width >= info.height:
        ow, oh = longest, max(1, round(longest * info.height / info.width))
    else:
        ow, oh = max(1, round(longest * info.width / info.height)), longest
    flip = bool(np.random.default_rng([seed, zlib.crc32(object_id.encode()), _FLIP_TAG]).random() < 0.5)
    return objects.Placement((w - ow) // 2, (h - oh) // 2, ow, oh, (h, w), flip)


# -- the dataset --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Item:
    cue: str
    shape: str | None  # shape object id (conflict, silhouette)
    texture: str | None  # texture object id (conflict, texture)
    crop: int = 0


def _count(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ShiftbenchError(f"objects-cue-conflict: {name} must be an int in {low}..{high}, got {value!r}")
    return int(value)


@DATASETS.register("objects-cue-conflict", description="built-in: shape versus texture (Geirhos et al. 2019) from "
                   "the objects cut-outs: each object's exact silhouette filled with another class's texture on "
                   "grey, plus texture-alone and silhouette-alone controls; 80 classes, 974 samples by default",
                   size=974, annotations=("label", "mask"))
class CueConflictDataset(Dataset):
    """Cue-conflict images with their two single-cue controls, rendered on the fly from the objects cut-outs.

    ``cue``: ``"all"`` (default: conflicts, silhouettes and textures interleaved), ``"conflict"``,
    ``"texture"`` or ``"silhouette"``. ``textures_per_shape``: conflict images per shape object (default 8).
    ``texture_crops``: seeded patches per texture object (default 4): the conflicts use them in turn and the
    texture-alone controls show each once, so the controls show exactly the conflicts' textures.
    ``texture_classes``: ``"kept"`` (the shipped check's list), ``"all"``, or a list of wnids / ImageNet
    class names. Every sample's ``meta`` records ``cue``, the shape and texture objects, their classes
    (``shape_label`` / ``texture_label`` ImageNet-1k indices, ``shape_wnid`` / ``texture_wnid``; None where the
    cue is absent), ``decision_wnids`` (the set's classes), the placement and the patch. ``label`` is the
    class the image shows by its cue: the shape class (conflict, silhouette) or the texture class (texture).
    """

    annotations = ("label", "mask")
    num_classes = NUM_CLASSES

    def __init__(self, seed: int = 0, cue: str = "all", textures_per_shape: int = DEFAULT_TEXTURES_PER_SHAPE,
                 texture_crops: int = DEFAULT_TEXTURE_CROPS, texture_classes: Any = "kept", size: Any = objects.DEFAULT_SIZE):
        self.seed = check_seed(seed, "objects-cue-conflict: seed")
        if cue not in CUES:
            raise ShiftbenchError(f"objects-cue-conflict: cue must be one of {', '.join(CUES)}, got {cue!r}")
        self.cue = cue
        self.canvas = objects.canvas_size(size)
        self.texture_crops = _count(texture_crops, "texture_crops", 1, MAX_CROPS)
        self.decision_wnids = set_classes()
        self.texture_wnids = self._texture_classes(texture_classes)
        self.texture_list = texture_objects(self.texture_wnids)
        if not self.texture_list:
            raise ShiftbenchError("objects-cue-conflict: no object of the texture classes gives a texture "
                                  f"(largest square >= {PATCH_MIN} px)")
        shapes = objects.object_ids()
        most = min(len([t for t in self.texture_list if _wnid(t) != _wnid(s)]) for s in shapes)
        conflicts = cue in ("all", "conflict")  # the controls alone need no pairing (one texture class will do)
        if conflicts and most < 1:
            raise ShiftbenchError("objects-cue-conflict: texture_classes must give textures of at least two classes "
                                  "(every shape takes textures of classes other than its own)")
        self.textures_per_shape = _count(textures_per_shape, "textures_per_shape", 1, most if conflicts else 64)
        order = np.random.default_rng([self.seed, _ORDER_TAG]).permutation(len(self.texture_list))
        cycle = [self.texture_list[k] for k in order]
        items: list[_Item] = []
        uses: dict[str, int] = {}
        for j, shape in enumerate(shapes):
            pos, chosen = j * self.textures_per_shape, []
            while conflicts and len(chosen) < self.textures_per_shape:
                donor = cycle[pos % len(cycle)]
                pos += 1
                if _wnid(donor) != _wnid(shape) and donor not in chosen:
                    chosen.append(donor)
            for donor in chosen:  # the r-th use of a texture takes its crop r mod texture_crops
                items.append(_Item("conflict", shape, donor, uses.get(donor, 0) % self.texture_crops))
                uses[donor] = uses.get(donor, 0) + 1
            items.append(_Item("silhouette", shape, None))
            if j < len(self.texture_list):
                items += [_Item("texture", None, self.texture_list[j], k) for k in range(self.texture_crops)]
        self._items = [it for it in items if cue == "all" or it.cue == cue]
        self.class_names = imagenet_class_names()
        self.label_space = LabelSpace.imagenet1k()
        self.mask_space = LabelSpace.foreground()
        kept = len({_wnid(t) for t in self.texture_list})
        self.description = (f"objects-cue-conflict ({cue}): {len(shapes)} shape objects x {self.textures_per_shape} "
                            f"textures of {len(self.texture_list)} texture objects ({kept} of "
                            f"{len(self.decision_wnids)} classes), {self.canvas[0]}x{self.canvas[1]}, seed {self.seed}")

    def _texture_classes(self, wanted: Any) -> tuple[str, ...]:
        if isinstance(wanted, str) and wanted == "kept":
            return kept_texture_classes()
        if isinstance(wanted, str) and wanted == "all":
            return self.decision_wnids
        if isinstance(wanted, str) or not isinstance(wanted, (list, tuple)) or not wanted:
            raise ShiftbenchError("objects-cue-conflict: texture_classes must be 'kept', 'all' or a non-empty list of "
                                  f"wnids or class names, got {wanted!r}")
        space = LabelSpace.imagenet1k()
        out = []
        for key in wanted:
            slot = space.resolve(key) if isinstance(key, str) else None
            wnid = space.ids[slot] if slot is not None else None
            if wnid not in self.decision_wnids:
                raise ShiftbenchError(f"objects-cue-conflict: texture_classes: {key!r} is not a class of the set "
                                      f"(the wnids or ImageNet names of the objects' {len(self.decision_wnids)} classes)")
            if wnid not in out:
                out.append(wnid)
        return tuple(out)

    def __len__(self) -> int:
        return len(self._items)

    def _item(self, index: int) -> _Item:
        if not 0 <= index < len(self._items):
            raise IndexError(f"index {index} out of range for objects-cue-conflict of {len(self)} samples")
        return self._items[index]

    def sample_id(self, index: int) -> str:
        it = self._item(index)
        if it.cue == "conflict":
            return f"conflict/{it.shape}+{it.texture}#{it.crop}/s{self.seed}"
        if it.cue == "silhouette":
            return f"silhouette/{it.shape}/s{self.seed}"
        return f"texture/{it.texture}#{it.crop}/s{self.seed}"

    def load(self, index: int) -> Sample:
        it = self._item(index)
        h, w = self.canvas
        meta: dict[str, Any] = {"cue": it.cue, "shape_object": it.shape, "texture_object": it.texture,
                                "decision_wnids": list(self.decision_wnids), "seed": self.seed,
                                "ground": list(GROUND), "mask_type": "binary"}
        for side, oid in (("shape", it.shape), ("texture", it.texture)):
            info = objects.object_info(oid) if oid else None
            meta[f"{side}_label"] = info.imagenet_index if info else None
            meta[f"{side}_wnid"] = info.wnid if info else None
            meta[f"{side}_class"] = info.imagenet_name if info else None
        if it.cue == "texture":
            image, patch = texture_canvas(it.texture, self.canvas, self.seed, it.crop)
            mask = np.ones((h, w), dtype=bool)  # the cue fills the frame
            meta["patch"] = patch.to_dict()
        else:
            placement = shape_placement(it.shape, self.canvas, self.seed)
            _, mask = objects.layer(it.shape, placement)
            image = np.broadcast_to(np.array(GROUND, np.uint8), (h, w, 3)).copy()
            if it.cue == "conflict":
                texture, patch = texture_canvas(it.texture, self.canvas, self.seed, it.crop)
                image[mask] = texture[mask]
                meta["patch"] = patch.to_dict()
            else:
                image[mask] = SILHOUETTE_FILL
            meta["placement"] = placement.to_dict()
        label = meta["texture_label"] if it.cue == "texture" else meta["shape_label"]
        return Sample(image=image, label=label, class_name=self.class_names[label], mask=mask,
                      id=self.sample_id(index), meta=meta)

    def info(self) -> dict[str, Any]:
        info = super().info()
        info.update(cue=self.cue, seed=self.seed, textures_per_shape=self.textures_per_shape,
                    texture_objects=len(self.texture_list), texture_classes=len(set(map(_wnid, self.texture_list))),
                    classes=len(self.decision_wnids), canvas=list(self.canvas))
        return info


def _wnid(object_id: str) -> str:
    return objects.object_info(object_id).wnid
