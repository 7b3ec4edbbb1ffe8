"""ImageNet-1k class table and the zero-shot prompt templates, read from the data files shipped with shiftbench.

Files (sources in src/shiftbench/data/imagenet/SOURCES.md):
``classes.tsv`` (index, wnid, CLIP-style name, WordNet lemmas) and ``templates_openai80.txt``.

>>> table = imagenet_classes()
>>> len(table), table[281].wnid, table[281].name
(1000, 'n02123045', 'tabby cat')
>>> len(imagenet_templates())
80
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

__all__ = ["ImageNetClass", "imagenet_classes", "imagenet_templates", "data_path"]


@dataclass(frozen=True)
class ImageNetClass:
    index: int
    wnid: str
    name: str  # CLIP-style readable name ("tabby cat")
    lemmas: tuple[str, ...]  # WordNet lemmas of the synset ("tabby", "tabby cat")


def data_path(*parts: str):
    """A path inside the package's data folder (works from a wheel or a source checkout)."""
    return resources.files("shiftbench").joinpath("data", *parts)


@lru_cache(maxsize=1)
def imagenet_classes() -> tuple[ImageNetClass, ...]:
    """The 1,000 ImageNet-1k classes in model output order (sorted wnids)."""
    rows = data_path("imagenet", "classes.tsv").read_text(encoding="utf-8").splitlines()
    header, body = rows[0].split("\t"), rows[1:]
    if header != ["index", "wnid", "name", "lemmas"]:
        raise RuntimeError(f"imagenet classes.tsv has an unexpected header {header}")
    table = []
    for i, row in enumerate(body):
        index, wnid, name, lemmas = row.split("\t")
        if int(index) != i:
            raise RuntimeError(f"imagenet classes.tsv row {i} has index {index}")
        table.append(ImageNetClass(i, wnid, name, tuple(x.strip() for x in lemmas.split(","))))
    return tuple(table)


@lru_cache(maxsize=None)
def imagenet_templates(kind: str = "openai80") -> tuple[str, ...]:
    """Zero-shot prompt templates with a ``{}`` placeholder; ``"openai80"`` are CLIP's 80 ImageNet ones."""
    text = data_path("imagenet", f"templates_{kind}.txt").read_text(encoding="utf-8")
    return tuple(line for line in text.splitlines() if line.strip())
