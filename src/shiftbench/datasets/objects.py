"""The built-in `objects` dataset: real photo cut-outs with exact alpha masks, composited onto real scene photos.

The assets (94 cut-outs mapped to ImageNet-1k classes, 28 scene photos, licences, attribution) ship inside
the package under ``shiftbench/data/objects``; tools/build_objects.py rebuilds them from Debian packages.

A sample is one object placed on one scene at a seeded scale, position and mirror flip. Objects and scenes are
tagged with natural contexts (sky, water, grass, forest, foliage, rock, indoor, street; the reviewed tables are
tools/objects_contexts.tsv and tools/objects_scenes.tsv): by default a sample's scene is congruent with its
object (they share a context), as in a natural photo. The compositing is
public so that other shifts can reuse it: the same object with the identical mask and placement can be
rendered on any scene, plain colour, texture or array.

>>> from shiftbench.datasets import objects
>>> placement = objects.Placement(x=40, y=50, width=120, height=90, canvas=(224, 224))
>>> on_scene = objects.render("zebra", background="pebble_beach", placement=placement)
>>> on_red = objects.render("zebra", background="red", placement=placement)
>>> bool((on_scene.mask == on_red.mask).all()), on_red.caption, on_scene.label
(True, 'a zebra on a red background', 340)
>>> bool((on_scene.image[on_scene.mask] == on_red.image[on_red.mask]).all())  # object pixels identical
True

Mask: the cut-out (RGBA) is resized to the placed width x height with Pillow's bilinear filter (premultiplied
alpha), mirrored if ``flip``, and its alpha is thresholded: ``mask = alpha >= ALPHA_THRESHOLD`` (128). Inside
the mask the image is the resized object's colour, outside it is the background, pixel for pixel (no blending),
so the mask is exact and object pixels do not depend on the background.
"""

from __future__ import annotations

import fnmatch
import zlib
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, NamedTuple, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..labelspace import LabelSpace
from ..registry import DATASETS
from ..sample import Sample, to_rgb_uint8
from ..seeds import check_seed
from .base import Dataset
from .imagenet import NUM_CLASSES, class_names as imagenet_class_names

__all__ = [
    "ALPHA_THRESHOLD", "CONTEXTS", "Placement", "ObjectInfo", "SceneInfo", "ObjectsDataset", "object_ids", "scene_ids",
    "congruent_scenes", "incongruent_scenes", "is_congruent",
    "object_info", "scene_info", "cutout", "scene", "scene_on_canvas", "canvas_size", "random_placement", "layer",
    "background_image", "composite", "render", "render_many",
]

ALPHA_THRESHOLD = 128
DEFAULT_SIZE = 224
DEFAULT_SCALE_RANGE = (0.45, 0.8)
DEFAULT_SCENES_PER_OBJECT = 4
CONTEXTS = ("sky", "water", "grass", "forest", "foliage", "rock", "indoor", "street")
GROUND_LINE = 0.55  # natural placements of a ground object: its bottom edge lies in the lower 45 % of the canvas


class ObjectInfo(NamedTuple):
    object_id: str
    file: str
    imagenet_index: int
    wnid: str
    imagenet_name: str
    phrase: str  # the object in a caption, with its article: "a zebra", "a pair of binoculars"
    width: int
    height: int
    contexts: tuple[str, ...] = ()  # where it is photographed: ("water", "rock")


class SceneInfo(NamedTuple):
    scene_id: str
    file: str
    phrase: str  # where the object is: "on a pebble beach"
    width: int
    height: int
    contexts: tuple[str, ...] = ()  # what the scene shows: ("rock", "sky")


@dataclass(frozen=True)
class Placement:
    """Where an object goes: its resized extent on a canvas of ``canvas = (height, width)`` pixels.

    ``x, y`` is the top-left corner of the ``width x height`` rectangle the cut-out is resized to; it may
    reach past the canvas edges (the object is clipped). ``flip`` mirrors the object left-right.
    """

    x: int
    y: int
    width: int
    height: int
    canvas: tuple[int, int] = (DEFAULT_SIZE, DEFAULT_SIZE)
    flip: bool = False

    def __post_init__(self) -> None:
        for name in ("x", "y", "width", "height"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ShiftbenchError(f"placement {name} must be an int, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.width < 1 or self.height < 1:
            raise ShiftbenchError(f"placement size must be >= 1 px, got {self.width}x{self.height}")
        object.__setattr__(self, "canvas", canvas_size(self.canvas))
        object.__setattr__(self, "flip", bool(self.flip))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (lists, plain ints and bools), for manifests."""
        d = asdict(self)
        d["canvas"] = list(self.canvas)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Placement":
        try:
            return cls(x=d["x"], y=d["y"], width=d["width"], height=d["height"],
                       canvas=tuple(d.get("canvas", (DEFAULT_SIZE, DEFAULT_SIZE))), flip=d.get("flip", False))
        except (KeyError, TypeError) as exc:
            raise ShiftbenchError(f"not a placement dict ({exc}): {d!r}") from None

    def moved(self, x: int | None = None, y: int | None = None) -> "Placement":
        """The same placement at another position (e.g. a second copy of the object)."""
        return Placement(self.x if x is None else x, self.y if y is None else y, self.width, self.height,
                         self.canvas, self.flip)


def canvas_size(size: Any) -> tuple[int, int]:
    """The (height, width) of a canvas given as an int (a square) or a pair, each side checked to 8..8192 px.

    >>> canvas_size(224), canvas_size((120, 160))
    ((224, 224), (120, 160))
    """
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        size = (int(size), int(size))
    try:
        h, w = (int(v) for v in size)
    except (TypeError, ValueError):
        raise ShiftbenchError(f"size must be an int or (height, width), got {size!r}") from None
    if h < 8 or w < 8 or h > 8192 or w > 8192:
        raise ShiftbenchError(f"size must be between 8 and 8192 px, got {h}x{w}")
    return h, w


# -- assets ------------------------------------------------------------------------------------------
def _asset_dir() -> Any:
    return resources.files("shiftbench").joinpath("data/objects")


def _read_table(name: str) -> list[list[str]]:
    text = _asset_dir().joinpath(name).read_text("utf-8")
    rows = [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]
    return rows[1:]


@lru_cache(maxsize=1)
def _objects() -> dict[str, ObjectInfo]:
    return {r[0]: ObjectInfo(r[0], r[1], int(r[2]), r[3], r[4], r[5], int(r[6]), int(r[7]), tuple(r[8].split(",")))
            for r in _read_table("objects.tsv")}


@lru_cache(maxsize=1)
def _scenes() -> dict[str, SceneInfo]:
    return {r[0]: SceneInfo(r[0], r[1], r[2], int(r[3]), int(r[4]), tuple(r[5].split(",")))
            for r in _read_table("scenes.tsv")}


def object_ids(pattern: str | None = None) -> list[str]:
    """Object ids in their fixed order (the curation order), optionally filtered by a glob pattern."""
    ids = list(_objects())
    return [i for i in ids if fnmatch.fnmatchcase(i, pattern)] if pattern else ids


def scene_ids(pattern: str | None = None) -> list[str]:
    ids = list(_scenes())
    return [i for i in ids if fnmatch.fnmatchcase(i, pattern)] if pattern else ids


def _unknown(kind: str, name: Any, known: Iterable[str]) -> ShiftbenchError:
    import difflib

    close = difflib.get_close_matches(str(name), list(known), n=3)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    return ShiftbenchError(f"unknown {kind} {name!r}{hint} (see shiftbench.datasets.objects.{kind}_ids())")


def object_info(object_id: str) -> ObjectInfo:
    """The object's ImageNet class (index, wnid, name), caption phrase and cut-out size."""
    try:
        return _objects()[object_id]
    except (KeyError, TypeError):
        raise _unknown("object", object_id, _objects()) from None


def scene_info(scene_id: str) -> SceneInfo:
    try:
        return _scenes()[scene_id]
    except (KeyError, TypeError):
        raise _unknown("scene", scene_id, _scenes()) from None


def is_congruent(object_id: str, scene_id: str) -> bool:
    """Whether the scene shows a context the object is photographed in (they share a context tag)."""
    return bool(set(object_info(object_id).contexts) & set(scene_info(scene_id).contexts))


def congruent_scenes(object_id: str, scenes: Iterable[str] | None = None) -> list[str]:
    """Scenes (of ``scenes``, default all, in their order) sharing a context with the object: the natural
    backgrounds of ImageNet-9's Mixed-Same."""
    return [s for s in (scene_ids() if scenes is None else scenes) if is_congruent(object_id, s)]


def incongruent_scenes(object_id: str, scenes: Iterable[str] | None = None) -> list[str]:
    """Scenes sharing no context with the object: the backgrounds of ImageNet-9's Mixed-Rand."""
    return [s for s in (scene_ids() if scenes is None else scenes) if not is_congruent(object_id, s)]


def _on_ground(object_id: str, scene_id: str) -> bool:
    """A natural placement stands the object on the ground unless the scene is, for it, only sky."""
    shared = set(object_info(object_id).contexts) & set(scene_info(scene_id).contexts)
    return shared != {"sky"}


@lru_cache(maxsize=None)
def _read_png(name: str, mode: str) -> np.ndarray:
    """An asset decoded once per process, read-only (callers copy before handing it out)."""
    from PIL import Image

    with _asset_dir().joinpath(name).open("rb") as f, Image.open(f) as img:
        arr = np.asarray(img.convert(mode), dtype=np.uint8)
    arr.setflags(write=False)
    return arr


def _cutout(object_id: str) -> np.ndarray:
    return _read_png(object_info(object_id).file, "RGBA")


def cutout(object_id: str) -> np.ndarray:
    """The object's RGBA cut-out (HxWx4 uint8, longer side <= 256 px), a fresh copy."""
    return _cutout(object_id).copy()


def scene(scene_id: str, copy: bool = True) -> np.ndarray:
    """The scene photo as stored (HxWx3 uint8, short side at most 320 px): a fresh copy, or with
    ``copy=False`` the process's one decoded array, read-only (no copy made: for readers that crop or
    resize it into a new array)."""
    photo = _read_png(scene_info(scene_id).file, "RGB")
    return photo.copy() if copy else photo


# -- geometry and compositing ---------------------------------------------------------------------------
def random_placement(object_id: str, canvas: Any = DEFAULT_SIZE, rng: np.random.Generator | int = 0,
                     scale_range: Sequence[float] = DEFAULT_SCALE_RANGE, flip: bool = True,
                     min_bottom: float | None = None) -> Placement:
    """A placement drawn from ``rng``: the object's longer side spans ``U(scale_range)`` of the canvas'
    shorter side, the aspect ratio is kept, the object lies wholly inside the canvas, mirrored with p = 0.5
    (if ``flip``). ``min_bottom`` (a fraction of the height) keeps the object's bottom edge at or below that
    line, so it stands on the ground of the scene. Draws, in order: scale, x, y, flip."""
    h, w = canvas_size(canvas)
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    lo, hi = (float(v) for v in scale_range)
    if not 0 < lo <= hi <= 1:
        raise ShiftbenchError(f"scale_range must satisfy 0 < low <= high <= 1, got {tuple(scale_range)}")
    info = object_info(object_id)
    scale = lo + (hi - lo) * float(rng.random())
    longest = max(1, round(scale * min(h, w)))
    if info.width >= info.height:
        ow, oh = longest, max(1, round(longest * info.height / info.width))
    else:
        ow, oh = max(1, round(longest * info.width / info.height)), longest
    x = int(rng.integers(0, w - ow + 1))
    y_low = 0 if min_bottom is None else min(max(0, int(np.ceil(float(min_bottom) * h)) - oh), h - oh)
    y = int(rng.integers(y_low, h - oh + 1))
    mirrored = bool(rng.random() < 0.5) if flip else False
    return Placement(x, y, ow, oh, (h, w), mirrored)


@lru_cache(maxsize=256)
def _resized_cutout(object_id: str, width: int, height: int, flip: bool) -> tuple[np.ndarray, np.ndarray]:
    from PIL import Image

    rgba = Image.fromarray(_cutout(object_id), "RGBA")
    if rgba.size != (width, height):
        rgba = rgba.resize((width, height), Image.Resampling.BILINEAR)  # premultiplied alpha inside Pillow
    arr = np.asarray(rgba, dtype=np.uint8)
    if flip:
        arr = arr[:, ::-1]
    rgb = np.ascontiguousarray(arr[..., :3])
    mask = arr[..., 3] >= ALPHA_THRESHOLD
    rgb.setflags(write=False)
    mask.setflags(write=False)
    return rgb, mask


def layer(object_id: str, placement: Placement) -> tuple[np.ndarray, np.ndarray]:
    """The object alone on an empty canvas: ``(rgb, mask)``, HxWx3 uint8 (zeros outside) and HxW bool.

    Recolour or edit ``rgb`` inside ``mask`` and pass the pair to :func:`composite`.
    """
    h, w = placement.canvas
    obj_rgb, obj_mask = _resized_cutout(object_id, placement.width, placement.height, placement.flip)
    rgb = np.zeros((h, w, 3), dtype=np.uint8)
    mask = np.zeros((h, w), dtype=bool)
    # intersect the placed rectangle with the canvas (it may reach past the edges)
    x0, y0 = max(placement.x, 0), max(placement.y, 0)
    x1, y1 = min(placement.x + placement.width, w), min(placement.y + placement.height, h)
    if x1 > x0 and y1 > y0:
        src = (slice(y0 - placement.y, y1 - placement.y), slice(x0 - placement.x, x1 - placement.x))
        mask[y0:y1, x0:x1] = obj_mask[src]
        rgb[y0:y1, x0:x1] = np.where(obj_mask[src][..., None], obj_rgb[src], 0)
    return rgb, mask


def _cover(image: np.ndarray, canvas: tuple[int, int]) -> np.ndarray:
    """Resize to cover the canvas (aspect kept, bilinear) and crop the centre."""
    from PIL import Image

    h, w = canvas
    ih, iw = image.shape[:2]
    if (ih, iw) == (h, w):
        return image
    factor = max(h / ih, w / iw)
    rw, rh = max(w, round(iw * factor)), max(h, round(ih * factor))
    resized = np.asarray(Image.fromarray(image).resize((rw, rh), Image.Resampling.BILINEAR), dtype=np.uint8)
    top, left = (rh - h) // 2, (rw - w) // 2
    return resized[top:top + h, left:left + w]


@lru_cache(maxsize=64)
def scene_on_canvas(scene_id: str, canvas: tuple[int, int]) -> np.ndarray:
    """The scene resized to cover ``canvas`` (height, width; aspect kept, bilinear) and centre-cropped:
    HxWx3 uint8, read-only and cached per (scene, canvas), so every sample of one size shares it; copy it
    before writing (:func:`background_image` does)."""
    arr = np.ascontiguousarray(_cover(scene(scene_id, copy=False), canvas))
    arr.setflags(write=False)
    return arr


def _describe_background(background: Any) -> tuple[str, str | None]:
    """(meta description, caption phrase or None) of a background spec."""
    if isinstance(background, str) and background in _scenes():
        return f"scene:{background}", _scenes()[background].phrase
    if isinstance(background, str):  # a colour; only a named one reads well in a caption
        named = background.replace(" ", "").isalpha()
        return f"color:{background}", f"on a {background} background" if named else None
    if isinstance(background, (tuple, list)):
        return f"color:{[int(v) for v in background]}", None
    return "array", None


def background_image(background: Any, canvas: Any = DEFAULT_SIZE) -> np.ndarray:
    """A background of the canvas size (HxWx3 uint8) from any spec.

    ``background``: a scene id (resized to cover, centre crop); a colour name or ``#rrggbb`` (Pillow colour
    names); an (r, g, b) triple of 0..255 ints; or an image array / PIL image (a texture, another photo),
    used as is when it has the canvas size, else resized to cover and centre-cropped.
    """
    h, w = canvas_size(canvas)
    if isinstance(background, str):
        if background in _scenes():
            return scene_on_canvas(background, (h, w)).copy()
        from PIL import ImageColor

        try:
            rgb = ImageColor.getrgb(background)[:3]
        except ValueError:
            raise ShiftbenchError(f"background {background!r} is neither a scene id nor a colour "
                                  f"(scenes: {', '.join(scene_ids()[:6])}, ...)") from None
        return np.broadcast_to(np.array(rgb, dtype=np.uint8), (h, w, 3)).copy()
    if isinstance(background, (tuple, list)) and len(background) == 3 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 0 <= v <= 255 for v in background):
        return np.broadcast_to(np.array(background, dtype=np.uint8), (h, w, 3)).copy()
    if isinstance(background, (tuple, list)):
        raise ShiftbenchError(f"a colour background must be 3 ints in 0..255, got {background!r}")
    return np.ascontiguousarray(_cover(to_rgb_uint8(background), (h, w)))


def composite(background: np.ndarray, layers: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Paste layers (``(rgb, mask)`` pairs of the background's size) in order; later layers cover earlier ones.

    Returns ``(image, instance_map)``: instance_map is int32, 0 for background and k where layer k (1-based)
    is visible.
    """
    image = np.array(background, dtype=np.uint8, copy=True)
    instances = np.zeros(image.shape[:2], dtype=np.int32)
    for k, (rgb, mask) in enumerate(layers, start=1):
        if rgb.shape != image.shape or mask.shape != image.shape[:2]:
            raise ShiftbenchError(f"layer {k} has shape {rgb.shape}/{mask.shape}, the background {image.shape}")
        image[mask] = rgb[mask]
        instances[mask] = k
    return image, instances


def _box(mask: np.ndarray) -> np.ndarray:
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if rows.size == 0:
        return np.zeros((0, 4), dtype=np.float32)
    return np.array([[cols[0], rows[0], cols[-1] + 1, rows[-1] + 1]], dtype=np.float32)


def render(object_id: str, background: Any = "pebble_beach", placement: Placement | dict | None = None,
           size: Any = DEFAULT_SIZE, seed: int = 0, sample_id: str | None = None) -> Sample:
    """One object composited on ``background`` (any spec of :func:`background_image`).

    ``placement`` (a Placement or its dict) fixes where the object goes; by default one is drawn from
    ``seed``. The Sample carries the ImageNet label and name, the exact mask (alpha >= 128), the box of the
    visible mask, a caption when the background has a name, and meta (object id, background, placement).
    """
    info = object_info(object_id)
    if isinstance(placement, dict):
        placement = Placement.from_dict(placement)
    if placement is None:
        seed = check_seed(seed)
        placement = random_placement(object_id, size, np.random.default_rng([seed, zlib.crc32(object_id.encode())]))
    elif not isinstance(placement, Placement):
        raise ShiftbenchError(f"placement must be a Placement or its dict, got {type(placement).__name__}")
    rgb, mask = layer(object_id, placement)
    image, _ = composite(background_image(background, placement.canvas), [(rgb, mask)])
    where, phrase = _describe_background(background)
    return Sample(
        image=image, label=info.imagenet_index, class_name=info.imagenet_name, mask=mask, boxes=_box(mask),
        box_labels=np.array([info.imagenet_index]) if mask.any() else np.zeros((0,), dtype=np.int64),
        caption=f"{info.phrase} {phrase}" if phrase else info.phrase,
        id=sample_id or f"{object_id}@{where}",
        meta={"object_id": object_id, "background": where, "scene_id": where[6:] if where.startswith("scene:") else None,
              "placement": placement.to_dict(), "wnid": info.wnid, "mask_type": "binary",
              "alpha_threshold": ALPHA_THRESHOLD},
    )


def render_many(items: Sequence[tuple[str, Placement]], background: Any = "pebble_beach") -> Sample:
    """Several objects (or copies of one) on one background; ``mask`` is the instance map (k = item k).

    All placements must share one canvas. ``boxes`` / ``box_labels`` list the visible instances in order.
    """
    if not items:
        raise ShiftbenchError("render_many needs at least one (object_id, placement) item")
    canvas = items[0][1].canvas
    if any(p.canvas != canvas for _, p in items):
        raise ShiftbenchError("render_many: all placements must have the same canvas")
    layers = [layer(oid, p) for oid, p in items]
    image, instances = composite(background_image(background, canvas), layers)
    boxes, labels = [], []
    for k, (oid, _) in enumerate(items, start=1):
        box = _box(instances == k)
        if len(box):
            boxes.append(box[0])
            labels.append(object_info(oid).imagenet_index)
    first = object_info(items[0][0])
    one_class = len({object_info(o).imagenet_index for o, _ in items}) == 1  # else no single image label
    where, _ = _describe_background(background)
    return Sample(image=image, label=first.imagenet_index if one_class else None,
                  class_name=first.imagenet_name if one_class else None, mask=instances, boxes=np.array(boxes, dtype=np.float32).reshape(-1, 4),
                  box_labels=np.array(labels, dtype=np.int64), id="+".join(o for o, _ in items) + f"@{where}",
                  meta={"object_ids": [o for o, _ in items], "placements": [p.to_dict() for _, p in items],
                        "background": where, "mask_type": "instance", "alpha_threshold": ALPHA_THRESHOLD})


# -- the dataset ---------------------------------------------------------------------------------------
@DATASETS.register("objects", description="built-in: 94 real photo cut-outs (ImageNet-1k classes) with exact "
                   "alpha masks on 28 real scene photos, each object on scenes of its natural context; "
                   "376 samples by default", size=376,
                   annotations=("label", "mask", "boxes", "caption"))
class ObjectsDataset(Dataset):
    """Objects x scenes with a seeded pairing and seeded placements.

    ``context="natural"`` (default): sample ``i`` is object ``i // scenes_per_object`` (in curation order) on
    the ``j = i mod scenes_per_object``-th scene of ``C``, a seeded permutation of the object's congruent
    scenes (:func:`congruent_scenes`); when ``scenes_per_object`` exceeds ``len(C)`` the scenes repeat with
    new placements (``r = j // len(C)`` is the repeat, shown as ``#r`` in the sample id). The object stands
    on the ground (bottom edge below ``GROUND_LINE``) unless the scene is, for it, only sky.
    ``scenes_per_object="all"`` gives every congruent pair.

    ``context="random"``: sample ``i`` is object ``i // scenes_per_object`` on scene ``P[i mod len(P)]``,
    where ``P`` is a seeded permutation of all scenes, congruent or not (the object on an unrelated scene);
    ``"all"`` gives every pair (2,632). Placements anywhere on the canvas.

    Placement per pair comes from ``default_rng([seed, crc32(object_id), crc32(scene_id)])`` (plus ``r`` for
    a repeat): the same seed gives the same bytes on any machine, and a pair keeps its placement when the
    selection changes. ``objects`` / ``scenes``: a glob pattern or a list of ids to restrict the set.
    """

    annotations = ("label", "mask", "boxes", "caption")
    num_classes = NUM_CLASSES

    def __init__(self, seed: int = 0, size: Any = DEFAULT_SIZE, scenes_per_object: int | str = DEFAULT_SCENES_PER_OBJECT,
                 objects: Any = None, scenes: Any = None, scale_range: Sequence[float] = DEFAULT_SCALE_RANGE,
                 flip: bool = True, context: str = "natural"):
        self.seed = check_seed(seed, "objects: seed")
        self.canvas = canvas_size(size)
        self.object_list = self._select("object", objects, object_ids())
        self.scene_list = self._select("scene", scenes, scene_ids())
        n_scenes = len(self.scene_list)
        if context not in ("natural", "random"):
            raise ShiftbenchError(f"context must be 'natural' or 'random', got {context!r}")
        self.context = context
        self._congruent: dict[str, list[str]] = {}
        if context == "natural":
            for oid in self.object_list:
                found = congruent_scenes(oid, self.scene_list)
                if not found:
                    raise ShiftbenchError(f"object {oid!r} ({', '.join(object_info(oid).contexts)}) has no congruent "
                                          f"scene among the selected scenes; select more scenes or use context='random'")
                order = np.random.default_rng([self.seed, zlib.crc32(oid.encode()), 0xC0]).permutation(len(found))
                self._congruent[oid] = [found[k] for k in order]
        if scenes_per_object == "all":
            scenes_per_object = n_scenes if context == "random" else None
        limit = n_scenes if context == "random" else 64
        if scenes_per_object is not None and (isinstance(scenes_per_object, bool)
                                              or not isinstance(scenes_per_object, (int, np.integer))
                                              or not 1 <= scenes_per_object <= limit):
            raise ShiftbenchError(f"scenes_per_object must be 1..{limit} or 'all', got {scenes_per_object!r}")
        self.scenes_per_object = None if scenes_per_object is None else int(scenes_per_object)
        # sample index -> (object, scene, repeat)
        self._pairs: list[tuple[str, str, int]] = []
        if context == "natural":
            for oid in self.object_list:
                chosen = self._congruent[oid]
                k = len(chosen) if self.scenes_per_object is None else self.scenes_per_object
                self._pairs += [(oid, chosen[j % len(chosen)], j // len(chosen)) for j in range(k)]
        lo, hi = (float(v) for v in scale_range)
        if not 0 < lo <= hi <= 1:
            raise ShiftbenchError(f"scale_range must satisfy 0 < low <= high <= 1, got {tuple(scale_range)}")
        self.scale_range = (lo, hi)
        self.flip = bool(flip)
        self._scene_order = [self.scene_list[i] for i in np.random.default_rng([self.seed, 0x5CE4E]).permutation(n_scenes)]
        self.class_names = imagenet_class_names()
        self.label_space = LabelSpace.imagenet1k()
        self.mask_space = LabelSpace.foreground()  # the masks are the object's silhouette, 0/1
        if context == "random":
            for k, oid in enumerate(self.object_list):
                for j in range(self.scenes_per_object):
                    self._pairs.append((oid, self._scene_order[(k * self.scenes_per_object + j) % n_scenes], 0))
        per = "all congruent" if self.scenes_per_object is None else str(self.scenes_per_object)
        self.description = (f"objects: {len(self.object_list)} objects x {per} of {n_scenes} scenes "
                            f"({context} context), {self.canvas[0]}x{self.canvas[1]}, seed {self.seed}")

    @staticmethod
    def _select(kind: str, wanted: Any, known: list[str]) -> list[str]:
        if wanted is None:
            return list(known)
        if isinstance(wanted, str):
            chosen = [k for k in known if fnmatch.fnmatchcase(k, wanted)]
            if not chosen:
                raise ShiftbenchError(f"no {kind} matches {wanted!r}")
            return chosen
        chosen = list(wanted)
        for name in chosen:
            if name not in known:
                raise _unknown(kind, name, known)
        if not chosen or len(set(chosen)) != len(chosen):
            raise ShiftbenchError(f"{kind}s must be a non-empty list of distinct ids")
        return chosen

    def __len__(self) -> int:
        return len(self._pairs)

    def _entry(self, index: int) -> tuple[str, str, int]:
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for objects of {len(self)} samples")
        return self._pairs[index]

    def pair(self, index: int) -> tuple[str, str]:
        """(object id, scene id) of sample ``index``."""
        object_id, scene_id, _ = self._entry(index)
        return object_id, scene_id

    def sample_id(self, index: int) -> str:
        object_id, scene_id, repeat = self._entry(index)
        return f"{object_id}@{scene_id}/s{self.seed}" + (f"#{repeat}" if repeat else "")

    def placement(self, index: int) -> Placement:
        """The placement of sample ``index`` (reuse it to render the object elsewhere)."""
        object_id, scene_id, repeat = self._entry(index)
        key = [self.seed, zlib.crc32(object_id.encode()), zlib.crc32(scene_id.encode())] + ([repeat] if repeat else [])
        ground = GROUND_LINE if self.context == "natural" and _on_ground(object_id, scene_id) else None
        return random_placement(object_id, self.canvas, np.random.default_rng(key), self.scale_range, self.flip,
                                min_bottom=ground)

    def load(self, index: int) -> Sample:
        object_id, scene_id = self.pair(index)
        sample = render(object_id, scene_id, self.placement(index), sample_id=self.sample_id(index))
        sample.meta["seed"] = self.seed
        return sample

    def render(self, index: int, background: Any) -> Sample:
        """Sample ``index``'s object, with its exact mask and placement, on another background."""
        object_id, _ = self.pair(index)
        sample = render(object_id, background, self.placement(index))
        sample.id = f"{self.sample_id(index)}~{sample.meta['background']}"
        return sample

    def info(self) -> dict[str, Any]:
        info = super().info()
        info.update(objects=len(self.object_list), scenes=len(self.scene_list), seed=self.seed,
                    size=len(self), canvas=list(self.canvas), context=self.context)
        return info
