"""The built-in `objects-cir` composed-retrieval benchmark: queries rendered from `objects`, every target exact.

Each query is a reference image, a modification text written by hand (several phrasings per category)
and the one gallery image that shiftbench rendered by carrying out that modification, so the right
answer is known pixel for pixel. The categories mirror CIRR-D:

==============  ========================================================================================
category        reference -> target
==============  ========================================================================================
background      the object, same mask and placement, on another scene photo or a plain colour
attribute       the object recoloured inside its mask (luminance kept, hue replaced), scene unchanged
removal         the object plus a second object -> the same scene with the second object gone
numerical       one object -> two or three copies of it (the first copy where the reference had it)
object_swap     the object -> another object of the split in the same box, same scene
fine_grained    recolouring again, with a subset gallery of 6 near-identical candidates (the same
                object, scene and placement in six colours) for Recall_subset@K
==============  ========================================================================================

Splits are disjoint by object (a seeded permutation of the 94 objects: 54 train, 16 val, 24 test), and
a swap or removal partner comes from the same split. The gallery of a split holds every image its
queries use (references, targets and the fine-grained candidates); ids are recipes, so an image is
listed once even when several queries use it.

>>> ds = ObjectsCIR(split="test")
>>> q = ds.load(0)
>>> q.category, q.target_id in set(ds.gallery_ids()), q.reference.image.shape
('background', True, (128, 128, 3))
"""

from __future__ import annotations

import zlib
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import ShiftbenchError
from ..registry import DATASETS
from ..sample import Query, Sample
from ..seeds import check_seed
from . import objects
from .base import Dataset

__all__ = ["ObjectsCIR", "CATEGORIES", "SPLITS", "COLOURS", "PHRASINGS", "split_objects", "recolour", "plural"]

CATEGORIES = ("background", "attribute", "removal", "numerical", "object_swap", "fine_grained")
SPLITS = {"train": 54, "val": 16, "test": 24}  # objects per split, in this order of the permutation
DEFAULT_SIZE = 128
SCALE_RANGE = (0.36, 0.48)  # small enough for two objects side by side
SUBSET_SIZE = 6
# The scene pool of the retrieval benchmark is fixed (the 22 scenes it was built and measured with), so
# adding scenes to `objects` never changes its gallery, its queries or the numbers in docs/retrieval.md.
SCENES: tuple[str, ...] = (
    "burnt_bark", "cliff", "mossy_bark", "mossy_log", "mudstone", "ocean_splash", "ocean_waves", "redwoods",
    "pebble_beach", "cloudy_sky", "sunlit_leaves", "forest_canopy", "trees_at_dusk", "water_drop",
    "green_leaf", "dune_grass", "orange_flower", "flower_garden", "meadow", "wet_leaves", "stormy_sky",
    "wooden_board",
)

# Colours for recolouring and plain backgrounds (sRGB, chosen to be distinct by eye).
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35), "green": (40, 170, 60), "blue": (40, 80, 215), "yellow": (235, 210, 40),
    "violet": (140, 60, 200), "pink": (240, 120, 180), "orange": (240, 130, 30), "cyan": (40, 200, 210),
}
BACKGROUND_COLOURS = ("red", "green", "blue", "yellow", "violet", "pink", "orange", "cyan", "white", "black")
_PLAIN = {**COLOURS, "white": (245, 245, 245), "black": (15, 15, 15)}

# Hand-written phrasings; {obj} is the object's name, {other} / {other_a} the partner's (bare / with article).
PHRASINGS: dict[str, tuple[str, ...]] = {
    "background_scene": (
        "change the background so it is {scene}",
        "same {obj}, but the background should show it {scene}",
        "put the {obj} {scene}, new background",
        "replace the background: {scene}",
    ),
    "background_colour": (
        "put it on a {colour} background",
        "make the background plain {colour}",
        "show the {obj} in front of a {colour} background",
        "the background should be {colour}",
    ),
    "attribute": (
        "make it {colour}",
        "turn the {obj} {colour}",
        "the {obj} should be {colour}",
        "paint it {colour}",
        "{colour_a} {obj} instead",
    ),
    "removal": (
        "remove the {other}",
        "remove the {other} from the picture",
        "remove the {other} and keep the {obj}",
        "get rid of the {other}: remove it",
    ),
    "numerical": (
        "{count} {plural}",
        "show {count} {plural}",
        "make it {count} {plural}",
        "there should be {count} {plural} in the picture",
    ),
    "object_swap": (
        "{other_a} instead of the {obj}",
        "replace the {obj} with {other_a}",
        "swap the {obj} for {other_a}",
        "change the {obj} into {other_a}",
    ),
    "fine_grained": (
        "make the {obj} {colour}",
        "it should be coloured {colour}",
        "recolour it {colour}",
        "same picture with {colour_a} {obj}",
    ),
}
_COUNT_WORDS = {2: "two", 3: "three"}
_PLURALS = {
    "sheep": "sheep", "bison": "bison", "lionfish": "lionfish", "woodlouse": "woodlice", "goose": "geese",
    "pair of binoculars": "pairs of binoculars", "ear of corn": "ears of corn", "broccoli": "heads of broccoli",
    "zebu": "zebus", "hippopotamus": "hippopotamuses",
}


def plural(name: str) -> str:
    """English plural of an object name ("zebra" -> "zebras", "goose" -> "geese").

    >>> plural("zebra"), plural("red fox"), plural("hoverfly"), plural("pair of binoculars")
    ('zebras', 'red foxes', 'hoverflies', 'pairs of binoculars')
    """
    if name in _PLURALS:
        return _PLURALS[name]
    head, _, last = name.rpartition(" ")
    if last in _PLURALS:
        word = _PLURALS[last]
    elif last.endswith(("s", "x", "ch", "sh")):
        word = last + "es"
    elif last.endswith("y") and len(last) > 1 and last[-2] not in "aeiou":
        word = last[:-1] + "ies"
    else:
        word = last + "s"
    return f"{head} {word}" if head else word


def object_name(object_id: str) -> tuple[str, str]:
    """(bare name, name with article) of an object: ("zebra", "a zebra")."""
    phrase = objects.object_info(object_id).phrase
    for article in ("a ", "an "):
        if phrase.startswith(article):
            return phrase[len(article):], phrase
    return phrase, phrase


def split_objects(split: str, split_seed: int = 0) -> list[str]:
    """The objects of a split (a seeded permutation of all objects, cut 54 / 16 / 24)."""
    if split not in SPLITS:
        raise ShiftbenchError(f"objects-cir split must be one of {', '.join(SPLITS)}, got {split!r}")
    split_seed = check_seed(split_seed, "objects-cir: split_seed")
    ids = objects.object_ids()
    order = [ids[i] for i in np.random.default_rng([split_seed, 0xC12]).permutation(len(ids))]
    start = 0
    for name, count in SPLITS.items():
        if name == split:
            return order[start:start + count]
        start += count
    raise AssertionError("unreachable")


def recolour(rgb: np.ndarray, mask: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    """Recolour an object layer inside its mask: keep the luminance (shading, texture), replace the hue.

    out = colour * (0.25 + 1.0 * luminance), clipped to 0..255; pixels outside the mask are unchanged.
    """
    lum = rgb.astype(np.float32) @ np.array([0.299, 0.587, 0.114], np.float32) / 255.0
    tinted = np.asarray(colour, np.float32)[None, None, :] * (0.25 + lum[..., None])
    out = rgb.copy()
    out[mask] = np.clip(np.rint(tinted[mask]), 0, 255).astype(np.uint8)
    return out


def _placement(object_id: str, rng: np.random.Generator, canvas: tuple[int, int], half: str) -> objects.Placement:
    """A placement in the left or right half of the canvas (objects side by side overlap little)."""
    h, w = canvas
    info = objects.object_info(object_id)
    scale = SCALE_RANGE[0] + (SCALE_RANGE[1] - SCALE_RANGE[0]) * float(rng.random())
    longest = max(4, round(scale * min(h, w)))
    if info.width >= info.height:
        ow, oh = longest, max(4, round(longest * info.height / info.width))
    else:
        ow, oh = max(4, round(longest * info.width / info.height)), longest
    lo, hi = (0, w // 2 - ow) if half == "left" else (w // 2, w - ow)
    x = int(rng.integers(min(lo, hi), max(lo, hi) + 1))
    y = int(rng.integers(0, h - oh + 1))
    return objects.Placement(x, y, ow, oh, canvas, bool(rng.random() < 0.5))


def _fit(object_id: str, box: objects.Placement) -> objects.Placement:
    """Another object in the same box: same centre, same longer side, its own aspect ratio."""
    info = objects.object_info(object_id)
    longest = max(box.width, box.height)
    if info.width >= info.height:
        ow, oh = longest, max(4, round(longest * info.height / info.width))
    else:
        ow, oh = max(4, round(longest * info.width / info.height)), longest
    cx, cy = box.x + box.width / 2, box.y + box.height / 2
    return objects.Placement(round(cx - ow / 2), round(cy - oh / 2), ow, oh, box.canvas, box.flip)


@DATASETS.register("objects-cir", description="built-in composed-retrieval benchmark rendered from objects: "
                   "background / attribute / removal / numerical / object swap / fine-grained queries with exact "
                   "targets; splits disjoint by object", size=168, annotations=("query", "target", "subset", "category"))
class ObjectsCIR(Dataset):
    """Composed-retrieval queries over one split of `objects` (``train`` / ``val`` / ``test``).

    ``repeats`` draws of each object (default 2 for train, 1 otherwise) give 7 queries each, one per
    category (background twice: a scene and a plain colour). ``gallery_ids()`` / ``load_gallery(id)``
    give the candidate images; ``recipe(id)`` says how an image was made.
    """

    name = "objects-cir"
    annotations = ("query", "target", "subset", "category")

    def __init__(self, split: str = "test", seed: int = 0, size: int = DEFAULT_SIZE, repeats: int | None = None,
                 split_seed: int = 0):
        self.seed = check_seed(seed, "objects-cir: seed")
        self.split = split
        self.object_list = split_objects(split, split_seed)
        self.canvas = objects.canvas_size(size)
        repeats = (2 if split == "train" else 1) if repeats is None else repeats
        if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= 20:
            raise ShiftbenchError(f"objects-cir: repeats must be an int in 1..20, got {repeats!r}")
        self.repeats = repeats
        self._recipes: dict[str, dict[str, Any]] = {}
        self._queries: list[dict[str, Any]] = []
        for rep in range(repeats):
            for object_id in self.object_list:
                self._build(object_id, rep)
        self.description = (f"objects-cir {split}: {len(self._queries)} queries over {len(self.object_list)} objects, "
                            f"gallery {len(self._recipes)} images, {self.canvas[0]} px, seed {self.seed}")

    # -- building the recipes -----------------------------------------------------------------------
    def _add(self, image_id: str, recipe: dict[str, Any]) -> str:
        self._recipes[image_id] = recipe
        return image_id

    def _build(self, object_id: str, rep: int) -> None:
        rng = np.random.default_rng([self.seed, zlib.crc32(object_id.encode()), rep, 0xC1])
        others = [o for o in self.object_list if o != object_id]
        scenes = SCENES
        s_ref, s_new, s_pair = (scenes[i] for i in rng.choice(len(scenes), 3, replace=False))
        place = _placement(object_id, rng, self.canvas, "left")
        swap_to, pair_with = (others[i] for i in rng.choice(len(others), 2, replace=False))
        pair_place = _placement(pair_with, rng, self.canvas, "right")
        count = int(rng.choice([2, 3]))
        extra = [_placement(object_id, rng, self.canvas, "right") for _ in range(count - 1)]
        colours = list(COLOURS)
        subset_colours = [colours[i] for i in rng.choice(len(colours), SUBSET_SIZE, replace=False)]
        attr_colour, fine_colour = subset_colours[0], subset_colours[1]
        plain = BACKGROUND_COLOURS[int(rng.integers(len(BACKGROUND_COLOURS)))]
        picks = {k: int(rng.integers(len(v))) for k, v in PHRASINGS.items()}

        base = f"s{self.seed}/{object_id}/r{rep}"
        p = place.to_dict()
        ref = self._add(f"{base}/ref", {"items": [[object_id, p]], "background": s_ref})
        pair_ref = self._add(f"{base}/pair+{pair_with}", {"items": [[object_id, p], [pair_with, pair_place.to_dict()]],
                                                           "background": s_pair})
        name, _ = object_name(object_id)
        other, other_a = object_name(swap_to)
        pair_name, _ = object_name(pair_with)
        scene_phrase = objects.scene_info(s_new).phrase

        def query(category: str, key: str, reference: str, target: str, fill: dict[str, str],
                  subset: list[str] | None = None) -> None:
            if "colour" in fill:
                fill["colour_a"] = ("an " if fill["colour"][0] in "aeiou" else "a ") + fill["colour"]
            fill["obj"] = name
            text = PHRASINGS[key][picks[key]].format(**fill)
            self._queries.append({"id": f"{base}/{key}", "category": category, "reference": reference,
                                  "target": target, "text": text, "subset": subset, "object_id": object_id,
                                  "phrasing": key, "fill": fill})

        t = self._add(f"{base}/scene={s_new}", {"items": [[object_id, p]], "background": s_new})
        query("background", "background_scene", ref, t, {"scene": scene_phrase})
        t = self._add(f"{base}/plain={plain}", {"items": [[object_id, p]], "background": list(_PLAIN[plain])})
        query("background", "background_colour", ref, t, {"colour": plain})
        recoloured = {c: self._add(f"{base}/colour={c}", {"items": [[object_id, p]], "background": s_ref, "recolour": c})
                      for c in subset_colours}
        query("attribute", "attribute", ref, recoloured[attr_colour], {"colour": attr_colour})
        t = self._add(f"{base}/without+{pair_with}", {"items": [[object_id, p]], "background": s_pair})
        query("removal", "removal", pair_ref, t, {"other": pair_name})
        t = self._add(f"{base}/count={count}", {"items": [[object_id, p]] + [[object_id, e.to_dict()] for e in extra],
                                                 "background": s_ref})
        query("numerical", "numerical", ref, t, {"count": _COUNT_WORDS[count], "plural": plural(name)})
        t = self._add(f"{base}/swap={swap_to}", {"items": [[swap_to, _fit(swap_to, place).to_dict()]],
                                                 "background": s_ref})
        query("object_swap", "object_swap", ref, t, {"other": other, "other_a": other_a})
        query("fine_grained", "fine_grained", ref, recoloured[fine_colour], {"colour": fine_colour},
              subset=[recoloured[c] for c in subset_colours])

    # -- the Dataset protocol -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._queries)

    def sample_id(self, index: int) -> str:
        return self._queries[index]["id"]

    def gallery_ids(self) -> list[str]:
        """Every image of the split (references, targets, fine-grained candidates), sorted."""
        return sorted(self._recipes)

    def recipe(self, image_id: str) -> dict[str, Any]:
        """How an image is made: ``items`` [[object_id, placement dict]], ``background``, optional ``recolour``."""
        if image_id not in self._recipes:
            raise ShiftbenchError(f"objects-cir: image {image_id!r} is not in the {self.split} split")
        return self._recipes[image_id]

    def load_gallery(self, image_id: str) -> Sample:
        recipe = self.recipe(image_id)
        return _render(image_id, _freeze(recipe))

    def load(self, index: int) -> Query:
        q = self._queries[index]
        return Query(reference=self.load_gallery(q["reference"]), text=q["text"], target_id=q["target"],
                     subset_ids=tuple(q["subset"]) if q["subset"] else None, id=q["id"], category=q["category"],
                     meta={"dataset": "objects-cir", "split": self.split, "object_id": q["object_id"],
                           "reference_id": q["reference"]})

    def phrasings(self, index: int) -> list[str]:
        """Every hand-written phrasing of query ``index``'s modification (its text is one of them)."""
        q = self._queries[index]
        return [p.format(**q["fill"]) for p in PHRASINGS[q["phrasing"]]]

    def reference_id(self, index: int) -> str:
        """The gallery id of query ``index``'s reference image (excluded when it is ranked)."""
        return self._queries[index]["reference"]

    def info(self) -> dict[str, Any]:
        info = super().info()
        info.update(split=self.split, objects=len(self.object_list), gallery=len(self._recipes), seed=self.seed)
        return info


def _freeze(recipe: dict[str, Any]) -> str:
    import json

    return json.dumps(recipe, sort_keys=True)


@lru_cache(maxsize=4096)
def _render_cached(recipe_json: str) -> tuple[np.ndarray, np.ndarray]:
    import json

    recipe = json.loads(recipe_json)
    items = [(oid, objects.Placement.from_dict(p)) for oid, p in recipe["items"]]
    background = recipe["background"]
    background = tuple(background) if isinstance(background, list) else background
    canvas = items[0][1].canvas
    layers = [objects.layer(oid, p) for oid, p in items]
    if recipe.get("recolour"):
        rgb, mask = layers[0]
        layers[0] = (recolour(rgb, mask, COLOURS[recipe["recolour"]]), mask)
    image, instances = objects.composite(objects.background_image(background, canvas), layers)
    image.setflags(write=False)
    instances.setflags(write=False)
    return image, instances


def _render(image_id: str, recipe_json: str) -> Sample:
    import json

    image, instances = _render_cached(recipe_json)
    recipe = json.loads(recipe_json)
    first = objects.object_info(recipe["items"][0][0])
    return Sample(image=image.copy(), label=first.imagenet_index, class_name=first.imagenet_name,
                  mask=instances.copy(), id=image_id, meta={"recipe": recipe, "mask_type": "instance"})
