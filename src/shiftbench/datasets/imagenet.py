"""ImageNet-1k class list (index, WordNet id, name), shipped as a data file so no download is needed.

>>> from shiftbench.datasets.imagenet import imagenet_classes, wnid_to_index
>>> len(imagenet_classes()), imagenet_classes()[340].name, wnid_to_index()["n02391049"]
(1000, 'zebra', 340)
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import NamedTuple

from ..errors import ShiftbenchError

NUM_CLASSES = 1000


class ImageNetClass(NamedTuple):
    index: int
    wnid: str
    name: str  # first WordNet lemma, e.g. "zebra"; "crane" and "maillot" occur twice (see lemmas)
    lemmas: str  # all lemmas, e.g. "tench, Tinca tinca"


@lru_cache(maxsize=1)
def imagenet_classes() -> tuple[ImageNetClass, ...]:
    """The 1000 classes in index order (source: timm's ImageNet info files; see data/imagenet/README.md)."""
    text = resources.files("shiftbench").joinpath("data/imagenet/imagenet1k_classes.tsv").read_text("utf-8")
    rows = [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]
    classes = tuple(ImageNetClass(int(r[0]), r[1], r[2], r[3]) for r in rows[1:])
    assert [c.index for c in classes] == list(range(NUM_CLASSES)), "corrupt ImageNet class file"
    return classes


def class_names() -> list[str]:
    """The 1000 short names in index order."""
    return [c.name for c in imagenet_classes()]


@lru_cache(maxsize=1)
def wnid_to_index() -> dict[str, int]:
    return {c.wnid: c.index for c in imagenet_classes()}


def imagenet_class(index: int) -> ImageNetClass:
    """The class at ``index``; a clear error when it is not an ImageNet-1k index."""
    if not isinstance(index, int) or not 0 <= index < NUM_CLASSES:
        raise ShiftbenchError(f"{index!r} is not an ImageNet-1k class index (0..999)")
    return imagenet_classes()[index]
