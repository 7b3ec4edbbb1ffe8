"""Composed-retrieval shifts: corrupted versions of any retrieval dataset and the CIRR-D keyword categoriser.

:class:`CorruptedRetrieval` wraps a retrieval dataset (``objects-cir``, or CIRR / FashionIQ read from
their json) with one registered shift at one severity: an image corruption changes the reference images
(and, with ``gallery=True``, the gallery images too); a text corruption changes the modification texts.
Every draw comes from the shift's per-sample generator (seeded by seed, image or query id and shift name)
and is recorded in ``query.meta["shift"]``, so any corrupted query can be replayed exactly. A reference
image used by several queries is corrupted identically for all of them (it is seeded by its image id).

:func:`categorise` assigns CIRR-D diagnostic categories to a modification text by keywords;
:class:`WithCategories` fills in ``Query.category`` for datasets that have none (CIRR).

>>> categorise("Remove the two dogs and make the background blue")
['numerical', 'attribute', 'removal', 'background']
>>> categorise("show it from the side")
[]
"""

from __future__ import annotations

import re
from typing import Any

from ...datasets.base import Dataset
from ...errors import ShiftbenchError
from ...registry import SHIFTS
from ...sample import Query, Sample
from ...seeds import check_seed

__all__ = ["NUMBER_WORDS", "COLOUR_WORDS", "SHAPE_WORDS", "SIZE_WORDS", "REMOVAL_WORDS", "categorise",
           "primary_category", "CorruptedRetrieval", "WithCategories", "corrupt_query"]

NUMBER_WORDS = frozenset("zero one two three four five six seven eight nine ten number".split()) | frozenset(
    str(i) for i in range(11))
COLOUR_WORDS = frozenset(
    "red green blue yellow orange purple violet pink brown black white grey gray cyan magenta beige gold golden "
    "silver maroon navy teal turquoise colour color colored coloured colorful colourful".split())
SHAPE_WORDS = frozenset("round square circular rectangular triangular oval curved straight shape shaped".split())
SIZE_WORDS = frozenset("big bigger biggest small smaller smallest large larger tiny huge size sized tall taller "
                       "short shorter long longer wide wider narrow narrower".split())
REMOVAL_WORDS = frozenset("remove removed removes removing removal".split())
ORDER = ("numerical", "attribute", "removal", "background")
_WORD = re.compile(r"[a-z]+|\d+")


def categorise(text: str) -> list[str]:
    """CIRR-D categories of a modification text, in the order numerical, attribute, removal, background.

    numerical: "zero".."ten", digits 0..10 or "number"; attribute: a colour, shape or size word; removal:
    "remove" (any form); background: "background". Whole words only, case-insensitive; a text can have
    several categories or none. (Fine-grained is a property of the gallery, not of the text.)
    """
    if not isinstance(text, str):
        raise ShiftbenchError(f"categorise takes a string, got {type(text).__name__}")
    words = set(_WORD.findall(text.lower()))
    found = {
        "numerical": bool(words & NUMBER_WORDS),
        "attribute": bool(words & (COLOUR_WORDS | SHAPE_WORDS | SIZE_WORDS)),
        "removal": bool(words & REMOVAL_WORDS),
        "background": "background" in words or "backgrounds" in words,
    }
    return [c for c in ORDER if found[c]]


def primary_category(text: str) -> str | None:
    """One category for a text: the most specific keyword family found (removal, numerical, background,
    attribute), or None."""
    found = categorise(text)
    for c in ("removal", "numerical", "background", "attribute"):
        if c in found:
            return c
    return None


def _check_retrieval(dataset: Any) -> None:
    for attr in ("gallery_ids", "load_gallery", "load"):
        if not hasattr(dataset, attr):
            raise ShiftbenchError(f"dataset {getattr(dataset, 'name', dataset)!r} is not a composed-retrieval "
                                  f"dataset (no {attr})")


def corrupt_query(query: Query, shift: Any, severity: int, seed: int = 0) -> Query:
    """One query under ``shift``: the reference image for image shifts, the text for text shifts.

    The draw is recorded in ``meta["shift"]`` (name, severity, seed, params).
    """
    if getattr(shift, "kind", "image") == "text":
        params = shift.draw_parsed(query, severity, seed)
        out = shift.apply(query, params)
    else:
        params = shift.draw_parsed(query.reference, severity, seed)
        out = query.replace(reference=shift.apply(query.reference, params))
    out.meta = {**query.meta, "shift": {"name": shift.name, "severity": int(severity), "seed": int(seed),
                                        "params": params, "config": dict(getattr(shift, "config", {}))}}
    return out


class CorruptedRetrieval(Dataset):
    """A retrieval dataset under one shift at one severity (see the module docstring).

    ``gallery=True`` also corrupts gallery images with image shifts (each seeded by its image id).
    """

    def __init__(self, dataset: Any, shift: Any, severity: int, seed: int = 0, gallery: bool = False):
        _check_retrieval(dataset)
        self.base = dataset
        self.shift = SHIFTS.create(shift) if isinstance(shift, str) else shift
        if self.shift.name == "clean":
            raise ShiftbenchError("CorruptedRetrieval needs a shift other than clean")
        self.severity = self.shift.check_severity(severity)
        self.seed = check_seed(seed)
        self.gallery = bool(gallery)
        if self.gallery and getattr(self.shift, "kind", "image") == "text":
            raise ShiftbenchError(f"gallery=True needs an image shift; {self.shift.name!r} corrupts text")
        self.name = getattr(dataset, "name", "dataset")
        self.annotations = getattr(dataset, "annotations", ())
        self.description = f"{getattr(dataset, 'description', '')} under {self.shift.name} s{self.severity}"

    def __len__(self) -> int:
        return len(self.base)

    def sample_id(self, index: int) -> str:
        return self.base.sample_id(index)

    def load(self, index: int) -> Query:
        return corrupt_query(self.base.load(index), self.shift, self.severity, self.seed)

    def gallery_ids(self) -> list[str]:
        return self.base.gallery_ids()

    def load_gallery(self, image_id: str) -> Sample:
        sample = self.base.load_gallery(image_id)
        if not self.gallery:
            return sample
        params = self.shift.draw_parsed(sample, self.severity, self.seed)
        out = self.shift.apply(sample, params)
        out.meta = {**sample.meta, "shift": {"name": self.shift.name, "severity": self.severity, "seed": self.seed,
                                             "params": params}}
        return out

    def __getattr__(self, name: str) -> Any:  # reference_id, recipe, ... of the wrapped dataset
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)


class WithCategories(Dataset):
    """A retrieval dataset whose queries get ``category`` from :func:`primary_category` when they have none;
    ``meta["categories"]`` lists every keyword category."""

    def __init__(self, dataset: Any):
        _check_retrieval(dataset)
        self.base = dataset
        self.name = getattr(dataset, "name", "dataset")
        self.description = getattr(dataset, "description", "")
        self.annotations = tuple(getattr(dataset, "annotations", ())) + ("category",)

    def __len__(self) -> int:
        return len(self.base)

    def sample_id(self, index: int) -> str:
        return self.base.sample_id(index)

    def load(self, index: int) -> Query:
        q = self.base.load(index)
        meta = {**q.meta, "categories": categorise(q.text)}
        return q.replace(category=q.category or primary_category(q.text), meta=meta)

    def gallery_ids(self) -> list[str]:
        return self.base.gallery_ids()

    def load_gallery(self, image_id: str) -> Sample:
        return self.base.load_gallery(image_id)
