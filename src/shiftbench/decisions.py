"""Published ways to read an ImageNet-1k classifier's outputs: a class subset, and a many-to-one decision map.

Published numbers often do not come from the 1,000 outputs as they are. Two protocols, one object each; the
label plan (tasks/labels.py) applies them to the logits before every metric:

- :class:`ClassSubset`: the outputs *restricted* to some ImageNet classes (the 200 of ImageNet-R or of
  ImageNet-A, timm's ``--valid-labels``): the logits are kept at those columns only, in ImageNet order, so the
  run's label space becomes the subset and the dataset's classes are mapped into it. The spec's
  ``class_subset:`` is read by :func:`class_subset`: a shipped list's name or a list of wnids / indices.
- :class:`DecisionMap`: the outputs *aggregated* into coarser categories, each the mean (default), max or sum
  of the softmax probabilities of its ImageNet classes: the 16 entry-level categories of the shape-bias
  protocol (Geirhos et al., ICLR 2019), :func:`geirhos16`. A dataset that declares one (``decision_map``, the
  cue-conflict folder reader) is scored in those categories.

Both are frozen values that the run's identity records (``as_dict``). The lists are data files in
``shiftbench/data/imagenet`` (sources and licences in SOURCES.md there).

>>> subset = class_subset("imagenet-r")
>>> len(subset.wnids), subset.wnids[:2]
(200, ('n01443537', 'n01484850'))
>>> class_subset([340, "n01440764"]).wnids  # indices and wnids, in ImageNet order
('n01440764', 'n02391049')
>>> m = geirhos16()
>>> m.space.class_names[:3], len(m.groups[m.space.index("dog")]), m.aggregation
(('airplane', 'bear', 'bicycle'), 109, 'mean')
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from typing import Any, Sequence

from .errors import ShiftbenchError
from .labelspace import LabelSpace

__all__ = ["SUBSET_LISTS", "AGGREGATIONS", "ClassSubset", "class_subset", "DecisionMap", "geirhos16",
           "aggregate_log_probabilities"]

SUBSET_LISTS = {"imagenet-r": "imagenet_r.tsv", "imagenet-a": "imagenet_a.tsv"}  # shipped lists, by name
AGGREGATIONS = ("mean", "max", "sum")  # of a category's softmax probabilities; mean is the published one
GEIRHOS16_FILE = "geirhos16.tsv"
_WNID = re.compile(r"^n\d{8}$")


def _rows(file: str) -> list[list[str]]:
    text = resources.files("shiftbench").joinpath("data", "imagenet", file).read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return [line.split("\t") for line in lines[1:]]  # first line: the header


# -- class subsets --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClassSubset:
    """Some ImageNet-1k classes, by wnid in ImageNet order; ``name`` is the shipped list's (None for a list the
    spec gives). ``where`` (the spec key, for messages) is no part of its value."""

    name: str | None
    wnids: tuple[str, ...]
    where: str = field(default="class_subset", compare=False, repr=False)

    @property
    def label(self) -> str:
        """How messages name it: ``imagenet-r``, or ``the 3 listed classes``."""
        return self.name or f"the {len(self.wnids)} listed classes"

    def as_dict(self) -> dict[str, Any]:
        """What the run's identity holds: the list's name and its wnids (so a changed list is another run)."""
        return {"name": self.name, "wnids": list(self.wnids)}

    def space(self) -> LabelSpace:
        """The subset as a label space: its classes in ImageNet order, ImageNet-1k names, wnid ids."""
        imagenet = LabelSpace.imagenet1k()
        names = tuple(imagenet.class_names[imagenet.ids.index(w)] for w in self.wnids)
        return LabelSpace(self.name or f"imagenet1k-subset-{len(self.wnids)}", names, self.wnids, id_kind="wnid")

    def columns(self, model_space: LabelSpace) -> list[int] | None:
        """The model's output slot of each class of the subset (by wnid), or None when it lacks one."""
        if model_space.id_kind != "wnid":
            return None
        index = {x: i for i, x in enumerate(model_space.ids) if x}
        slots = [index.get(w) for w in self.wnids]
        return None if None in slots else [int(s) for s in slots]  # type: ignore[misc]


@lru_cache(maxsize=None)
def _shipped(name: str) -> tuple[str, ...]:
    return tuple(row[1] for row in _rows(SUBSET_LISTS[name]))


def class_subset(value: Any, where: str = "class_subset") -> ClassSubset:
    """A class subset from the spec's value: a shipped list's name (``imagenet-r``, ``imagenet-a``), or a list of
    at least two ImageNet-1k classes, each a wnid or an output index 0..999. ShiftbenchError in one line
    naming ``where`` (and the entry) otherwise; an unknown name answers with the closest list."""
    imagenet = LabelSpace.imagenet1k()
    if isinstance(value, str):
        if value in SUBSET_LISTS:
            return ClassSubset(value, _shipped(value), where)
        close = difflib.get_close_matches(value, list(SUBSET_LISTS), n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ShiftbenchError(f"{where}: unknown class list {value!r}{hint}; give {' or '.join(SUBSET_LISTS)}, or a "
                              "list of ImageNet-1k wnids or indices")
    if not isinstance(value, (list, tuple)) or len(value) < 2:
        raise ShiftbenchError(f"{where}: expected {' or '.join(SUBSET_LISTS)}, or a list of at least two ImageNet-1k "
                              f"wnids or indices (0..{imagenet.num_classes - 1}), got {value!r}")
    slots: dict[int, int] = {}
    for i, item in enumerate(value):
        slot = None
        if isinstance(item, int) and not isinstance(item, bool):
            slot = item if 0 <= item < imagenet.num_classes else None
        elif isinstance(item, str) and _WNID.match(item):
            slot = imagenet.ids.index(item) if item in imagenet.ids else None
        if slot is None:
            raise ShiftbenchError(f"{where}[{i}]: {item!r} is neither an ImageNet-1k wnid (n01440764, ...) nor an "
                                  f"output index 0..{imagenet.num_classes - 1}")
        if slot in slots:
            raise ShiftbenchError(f"{where}[{i}]: {item!r} is class {imagenet.ids[slot]} "
                                  f"({imagenet.class_names[slot]}), listed already at [{slots[slot]}]")
        slots[slot] = i
    wnids = tuple(imagenet.ids[s] for s in sorted(slots))
    # a list equal to a shipped one is that list: the same run, however it is written
    name = next((n for n in SUBSET_LISTS if _shipped(n) == wnids), None)
    return ClassSubset(name, wnids, where)


# -- decision maps ----------------------------------------------------------------------------------------
def aggregate_log_probabilities(logits: Any, groups: Sequence[Sequence[int]], aggregation: str = "mean") -> Any:
    """(N, len(groups)) float64: the log of each group's aggregate of the softmax probabilities of ``logits``
    (N, C) at its columns: ``mean`` (of the group's probabilities), ``max`` or ``sum``. Computed in log space
    (log-softmax, then log-sum-exp), so no probability underflows to a zero that would tie categories.

    >>> import numpy as np
    >>> z = np.log(np.array([[0.5, 0.2, 0.2, 0.1]]))
    >>> np.exp(aggregate_log_probabilities(z, [[0], [1, 2, 3]])).round(6).tolist()
    [[0.5, 0.166667]]
    """
    import numpy as np

    if aggregation not in AGGREGATIONS:
        raise ShiftbenchError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 2:
        raise ShiftbenchError(f"logits must be (N, C), got shape {z.shape}")
    if not np.isfinite(z).all():
        raise ShiftbenchError("logits contain NaN/inf")
    top = z.max(axis=1, keepdims=True)
    logp = z - top - np.log(np.exp(z - top).sum(axis=1, keepdims=True))
    out = np.empty((z.shape[0], len(groups)), dtype=np.float64)
    for k, group in enumerate(groups):
        cols = np.asarray(list(group), dtype=np.int64)
        if not cols.size or cols.min() < 0 or cols.max() >= z.shape[1]:
            raise ShiftbenchError(f"group {k} must be a non-empty list of columns 0..{z.shape[1] - 1}")
        part = logp[:, cols]
        if aggregation == "max":
            out[:, k] = part.max(axis=1)
            continue
        peak = part.max(axis=1)
        total = peak + np.log(np.exp(part - peak[:, None]).sum(axis=1))
        out[:, k] = total - np.log(cols.size) if aggregation == "mean" else total
    return out


@dataclass(frozen=True)
class DecisionMap:
    """Categories decided from ImageNet-1k outputs: category ``k`` of ``space`` is the aggregate of the softmax
    probabilities at ``groups[k]`` (ImageNet-1k indices). The decision is the category with the highest
    aggregate; a tie goes to the lower category (the first in ``space``), as a strict ``>`` scan over them."""

    name: str
    space: LabelSpace
    groups: tuple[tuple[int, ...], ...]
    aggregation: str = "mean"

    def __post_init__(self) -> None:
        if self.aggregation not in AGGREGATIONS:
            close = difflib.get_close_matches(str(self.aggregation), AGGREGATIONS, n=1)
            raise ShiftbenchError(f"aggregation: unknown {self.aggregation!r}"
                                  + (f" (did you mean {close[0]!r}?)" if close else "")
                                  + f"; choose from {', '.join(AGGREGATIONS)} (mean: the published protocol)")
        if len(self.groups) != self.space.num_classes:
            raise ValueError(f"decision map {self.name!r}: {len(self.groups)} groups for {self.space.num_classes} categories")

    def with_aggregation(self, aggregation: str) -> "DecisionMap":
        return replace(self, aggregation=aggregation)

    def wnid_groups(self) -> tuple[tuple[str, ...], ...]:
        imagenet = LabelSpace.imagenet1k()
        return tuple(tuple(imagenet.ids[i] for i in group) for group in self.groups)

    def columns(self, model_space: LabelSpace | None) -> tuple[tuple[int, ...], ...] | None:
        """Each category's columns in a model's outputs (by wnid), or None when the model lacks one of them."""
        if model_space is None or model_space.id_kind != "wnid":
            return None
        index = {x: i for i, x in enumerate(model_space.ids) if x}
        out = []
        for group in self.wnid_groups():
            slots = [index.get(w) for w in group]
            if None in slots:
                return None
            out.append(tuple(int(s) for s in slots))  # type: ignore[arg-type]
        return tuple(out)

    def scores(self, logits: Any, columns: Sequence[Sequence[int]] | None = None) -> Any:
        """(N, categories): the log of each category's aggregate (:func:`aggregate_log_probabilities`), read at
        ``columns`` (a model's, from :meth:`columns`; default the ImageNet-1k indices). Their softmax is the
        aggregates normalised to sum to one, and their argmax the decision."""
        return aggregate_log_probabilities(logits, columns if columns is not None else self.groups, self.aggregation)

    def as_dict(self) -> dict[str, Any]:
        """What the run's identity holds: the map's name, its aggregation and every category's indices."""
        return {"name": self.name, "aggregation": self.aggregation,
                "categories": {c: list(g) for c, g in zip(self.space.class_names, self.groups)}}


@lru_cache(maxsize=1)
def _geirhos16_table() -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((row[0], tuple(int(x) for x in row[1].split(","))) for row in _rows(GEIRHOS16_FILE))


def geirhos16(aggregation: str = "mean") -> DecisionMap:
    """The 16 entry-level categories of the shape-bias protocol (airplane ... truck, alphabetical) with their
    ImageNet-1k indices (207 in all; data/imagenet/geirhos16.tsv, from model-vs-human), aggregated by
    ``aggregation`` (mean: the published protocol)."""
    table = _geirhos16_table()
    space = LabelSpace("geirhos16", tuple(c for c, _ in table))
    return DecisionMap("geirhos16", space, tuple(g for _, g in table), aggregation)
