"""Reader of the standard cue-conflict stimuli: ``root/<shape class>/<shape image>-<texture image>.png``.

The shape-bias stimuli of Geirhos et al. (ICLR 2019; github.com/rgeirhos/texture-vs-shape, CC BY 4.0) are
1,280 style-transfer images in one folder per *shape* category of 16 entry-level categories (airplane ... truck);
each file is named after its two sources, ``cat/cat1-elephant2.png`` being the shape (content) of ``cat1`` with
the texture (style) of ``elephant2``. Both classes come from the path: the shape class is the folder (and the
first part of the name without its trailing digits), the texture class the second part without its trailing
digits. A folder of category folders whose images are named so is read by this reader (``detect``).

Labels are the 16 categories (label space ``geirhos16``, alphabetical); ``label`` is the shape class and
``meta["texture_label"]`` the texture class; ``meta["cue"]`` is ``conflict``, or ``no_conflict`` where both
classes agree (80 of the 1,280: kept out of the shape-bias fraction). The dataset declares its decision map
(``decision_map``, shiftbench.decisions.geirhos16): an ImageNet-1k classifier's 1,000 softmax probabilities are
aggregated into the 16 categories (``aggregation``: ``mean``, the published protocol, ``max`` or ``sum``) before
every metric, so ``metrics: [shape_bias]`` runs the published protocol.

>>> # root/cat/cat1-elephant2.png -> Sample(label=7 (cat), id="cat/cat1-elephant2.png",
>>> #     meta={"cue": "conflict", "shape_class": "cat", "texture_class": "elephant", "texture_label": 11, ...})
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..decisions import DecisionMap, geirhos16
from ..errors import ShiftbenchError
from ..registry import DATASETS
from ..sample import Sample, decode_image
from .common import (IMAGE_EXTENSIONS, ON_ERROR, VERIFY, ReaderDataset, check_choice, check_inside, check_root,
                     one_line, screen, shown)

__all__ = ["CueConflictFolder", "parse_stimulus_name", "CUES"]

CUES = ("conflict", "no_conflict")
NAME = re.compile(r"^(?P<shape>[A-Za-z_]+)(?P<shape_n>\d+)-(?P<texture>[A-Za-z_]+)(?P<texture_n>\d+)$")
EXAMPLE = "cat/cat1-elephant2.png: the shape of cat1, the texture of elephant2"


def parse_stimulus_name(rel: str, categories: tuple[str, ...]) -> tuple[str, str, str, str]:
    """(shape class, texture class, shape image, texture image) of a stimulus path ``<shape class>/<stem>.<ext>``;
    ShiftbenchError in one line naming the file when the name does not say them.

    >>> parse_stimulus_name("cat/cat1-elephant2.png", ("cat", "elephant"))
    ('cat', 'elephant', 'cat1', 'elephant2')
    """
    folder, _, file = rel.partition("/")
    stem = Path(file).stem
    match = NAME.match(stem)
    if match is None:
        raise ShiftbenchError(f"cue-conflict folder: {shown(rel)}: expected <shape image>-<texture image> with each "
                              f"image a class and a number ({EXAMPLE})")
    shape, texture = match["shape"], match["texture"]
    if shape != folder:
        raise ShiftbenchError(f"cue-conflict folder: {shown(rel)}: the shape image {shown(shape + match['shape_n'])} is "
                              f"not of its folder's class {shown(folder)} ({EXAMPLE})")
    if texture not in categories:
        import difflib

        close = difflib.get_close_matches(texture, categories, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ShiftbenchError(f"cue-conflict folder: {shown(rel)}: texture class {shown(texture)} is not one of the "
                              f"{len(categories)} categories{hint}: {', '.join(categories)}")
    return shape, texture, shape + match["shape_n"], texture + match["texture_n"]


def _category_folders(path: Path, categories: tuple[str, ...]) -> list[str] | None:
    """The visible sub-folders when every one is a category and there is at least one, else None."""
    try:
        folders = sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return None
    return folders if folders and all(f in categories for f in folders) else None


@DATASETS.register("cue-conflict-folder", description="cue-conflict stimuli reader (Geirhos et al. 2019): "
                   "root/<shape class>/<shape image>-<texture image>.png in 16 entry-level categories, decided from "
                   "ImageNet-1k outputs by the 16-class mapping", reader=True, annotations=("label",))
class CueConflictFolder(ReaderDataset):
    """The standard cue-conflict stimuli (or any folder laid out like them), sorted by relative path; ids are the
    relative paths. ``aggregation``: how a category's ImageNet probabilities are aggregated (``mean``, the
    published protocol; ``max``; ``sum``). Files with other extensions and hidden entries are ignored; a symlink
    that leads out of ``root`` is refused."""

    annotations = ("label",)

    def __init__(self, root: Any = None, aggregation: str = "mean", on_error: str = "fail", verify: str = "header"):
        self.root = check_root(root, "cue-conflict folder")
        self.on_error = check_choice("on_error", on_error, ON_ERROR)
        check_choice("verify", verify, VERIFY)
        try:
            self.decision_map: DecisionMap = geirhos16(aggregation)
        except ShiftbenchError as exc:
            raise ShiftbenchError(f"cue-conflict folder: {exc}") from None
        self.label_space = self.decision_map.space
        categories = self.label_space.class_names
        self.class_names = list(categories)
        self.num_classes = len(categories)
        try:
            folders = sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError as exc:
            raise ShiftbenchError(f"cue-conflict folder: cannot list {shown(self.root)} ({one_line(exc)})") from None
        if not folders:
            raise ShiftbenchError(f"cue-conflict folder: {shown(self.root)} has no category folders "
                                  f"({', '.join(categories)})")
        strangers = [f for f in folders if f not in categories]
        if strangers:
            raise ShiftbenchError(f"cue-conflict folder: {shown(self.root)}: folder {shown(strangers[0])} is not one of "
                                  f"the {len(categories)} categories: {', '.join(categories)}")
        files = []
        self._parsed: dict[str, tuple[str, str, str, str]] = {}
        for folder in folders:
            for path in sorted((self.root / folder).iterdir()):
                if path.name.startswith(".") or path.suffix.lower() not in IMAGE_EXTENSIONS or path.is_dir():
                    continue
                rel = f"{folder}/{path.name}"
                check_inside(self.root, rel, "image")  # refuses symlinks out of the root, and loops
                self._parsed[rel] = parse_stimulus_name(rel, categories)
                files.append(rel)
        if not files:
            raise ShiftbenchError(f"cue-conflict folder: no images ({', '.join(IMAGE_EXTENSIONS)}) under {shown(self.root)}")
        self._files, self.skipped = screen(files, lambda rel: [self.root / rel], self.root, on_error, verify)
        conflicts = sum(1 for rel in self._files if self._parsed[rel][0] != self._parsed[rel][1])
        self.description = (f"cue-conflict stimuli {self.root} ({len(folders)} categories, {conflicts} cue conflicts "
                            f"and {len(self._files) - conflicts} without; decided by {self.decision_map.name}, "
                            f"{self.decision_map.aggregation} of the probabilities)")

    @staticmethod
    def detect(path: Path) -> bool:
        """Category folders only (some of the 16), and an image in one of them named ``<shape>N-<texture>M``."""
        path = Path(path)
        if not path.is_dir():
            return False
        categories = geirhos16().space.class_names
        folders = _category_folders(path, categories)
        if folders is None:
            return False
        try:
            for folder in folders:
                for file in (path / folder).iterdir():
                    if file.suffix.lower() in IMAGE_EXTENSIONS and NAME.match(file.stem):
                        return True
        except OSError:
            return False
        return False

    def labels_used(self) -> set[int]:
        return {self.label_space.index(self._parsed[rel][0]) for rel in self._files}

    def __len__(self) -> int:
        return len(self._files)

    def sample_id(self, index: int) -> str:
        return self._files[index]

    def source_path(self, index: int) -> str:
        return self._files[index]

    def load(self, index: int) -> Sample:
        rel = self._files[index]
        shape, texture, shape_image, texture_image = self._parsed[rel]
        path = self.root / rel
        meta: dict[str, Any] = {"path": str(path), "cue": CUES[0] if shape != texture else CUES[1],
                                "shape_class": shape, "texture_class": texture, "shape_image": shape_image,
                                "texture_image": texture_image, "texture_label": self.label_space.index(texture)}
        return Sample(image=decode_image(path, shown(path)), label=self.label_space.index(shape), class_name=shape,
                      id=rel, meta=meta)

    def info(self) -> dict[str, Any]:
        info = super().info()
        info.update(aggregation=self.decision_map.aggregation, categories=self.num_classes)
        return info
