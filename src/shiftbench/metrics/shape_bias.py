"""Shape bias (Geirhos et al., ICLR 2019) and its single-cue controls, on a cue-conflict set.

A classifier's decision on an image of the set is the class, among the set's classes only, with the highest
score: an ImageNet-1k classifier's 1,000 scores are read at the columns of the set's wnids (ties go to the
lower ImageNet index). On a cue-conflict image the decision is a *shape decision* when it is the shape class,
a *texture decision* when it is the texture class, and neither otherwise.

- ``shape_bias`` = shape decisions / (shape + texture decisions) over the cue-conflict images (Geirhos' shape
  bias; per image the pair (shape, shape or texture), so its bootstrap resamples images: kind ``ratio``);
- ``cue_decided`` = (shape + texture decisions) / cue-conflict images: how often either cue decides at all;
- ``texture_alone_acc``: decisions equal to the texture class on texture-alone images;
- ``silhouette_alone_acc``: decisions equal to the shape class on silhouette-alone images;
- ``cue_chance`` = 1 / number of the set's classes: what a guess among them scores.

A value whose images the data lacks is left out (a set of conflicts alone has no control rows). Two datasets:

- ``objects-cue-conflict`` (shiftbench.datasets.cue_conflict): its samples carry ``meta`` ``cue``,
  ``shape_wnid``, ``texture_wnid`` and ``decision_wnids``, which is all this metric reads besides the scores;
- the standard stimuli of Geirhos et al. (a folder read by shiftbench.datasets.cue_conflict_folder): the label
  plan has already turned the 1,000 outputs into the 16 categories' scores (the dataset's decision map, mean of
  the softmax probabilities by default), so the decision is the top one of *all* the scores' columns; the shape
  class is the sample's ``label``, the texture class ``meta["texture_label"]``, and images whose two classes
  agree (``cue`` ``no_conflict``) count in no fraction.

>>> scores = np.zeros((3, 1000)); scores[0, 340] = 9; scores[1, 291] = 9; scores[2, 7] = 9
>>> classes = [340, 291, 7]          # zebra, lion, cock (ImageNet-1k indices)
>>> m = ShapeBias()
>>> m.update(scores, [CueTarget("conflict", 340, 291, classes), CueTarget("conflict", 340, 291, classes),
...                   CueTarget("texture", -1, 7, classes)])
>>> m.compute()
{'shape_bias': 0.5, 'cue_decided': 1.0, 'texture_alone_acc': 1.0, 'cue_chance': 0.3333333333333333}
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..labelspace import LabelSpace
from .base import Metric
from .uncertainty import SampleStatistic, check_bootstrap_args, percentile_interval, resample_counts

__all__ = ["CUES", "CueTarget", "ShapeBias", "set_decisions", "cue_target", "shape_bias_interval"]

CUES = ("conflict", "texture", "silhouette", "no_conflict")  # state codes 0, 1, 2, 3 (3: in no fraction)
KEYS = ("shape_bias", "cue_decided", "texture_alone_acc", "silhouette_alone_acc", "cue_chance")
IMAGENET_CLASSES = 1000


class CueTarget(NamedTuple):
    """What one image of a cue-conflict set asks: its ``cue`` (conflict, texture, silhouette or no_conflict), its
    shape and texture classes (-1 where absent) and the set's classes: ImageNet-1k indices, or None when the
    decision is among all the scores' columns (then the classes are column numbers too)."""

    cue: str
    shape: int
    texture: int
    classes: Sequence[int] | None


@lru_cache(maxsize=1)
def _wnid_index() -> dict[str, int]:
    return {wnid: i for i, wnid in enumerate(LabelSpace.imagenet1k().ids)}


def _index(wnid: Any, what: str, sample_id: Any) -> int:
    if wnid is None:
        return -1
    try:
        return _wnid_index()[str(wnid)]
    except KeyError:
        raise ShiftbenchError(f"shape_bias: sample {sample_id!r}: {what} {wnid!r} is not an ImageNet-1k wnid") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def cue_target(sample: Any) -> CueTarget:
    """The :class:`CueTarget` of a cue-conflict sample, from its ``meta``: an ``objects-cue-conflict`` one (ImageNet-1k
    classes by wnid), or one of the standard stimuli (its label and ``texture_label``, decided among all columns)."""
    meta = getattr(sample, "meta", None) or {}
    sid = getattr(sample, "id", None)
    if meta.get("cue") in CUES and not meta.get("decision_wnids") and _is_int(meta.get("texture_label")) \
            and _is_int(getattr(sample, "label", None)):
        return CueTarget(meta["cue"], int(sample.label), int(meta["texture_label"]), None)
    if meta.get("cue") not in CUES or not meta.get("decision_wnids"):
        raise ShiftbenchError(f"shape_bias: sample {sid!r} is not a cue-conflict image (its meta has no cue and "
                              "decision_wnids or texture_label); evaluate it on the dataset objects-cue-conflict or on "
                              "a folder of the standard cue-conflict stimuli")
    classes = [_index(w, "decision class", sid) for w in meta["decision_wnids"]]
    return CueTarget(meta["cue"], _index(meta.get("shape_wnid"), "shape class", sid),
                     _index(meta.get("texture_wnid"), "texture class", sid), classes)


def set_decisions(scores: Any, classes: Sequence[int] | None = None) -> np.ndarray:
    """The decision of each row of ``scores`` (N, C) among ``classes`` (column numbers: ImageNet-1k indices for
    ImageNet scores; None: every column): the class with the highest score; a tie goes to the lower index.

    >>> set_decisions([[0.0, 5.0, 5.0, 9.0]], [1, 2]), set_decisions([[0.0, 5.0, 5.0, 9.0]])
    (array([1]), array([3]))
    """
    s = np.asarray(scores)
    if s.ndim != 2:
        raise ShiftbenchError(f"shape_bias: scores must be (N, C), got shape {s.shape}")
    cols = np.asarray(sorted(int(c) for c in classes) if classes is not None else range(s.shape[1]), dtype=np.int64)
    if not cols.size or cols[0] < 0 or cols[-1] >= s.shape[1]:
        raise ShiftbenchError(f"shape_bias: the set's classes must be columns of the scores (0..{s.shape[1] - 1})")
    if s.dtype.kind == "f" and not np.isfinite(s).all():
        raise ShiftbenchError("shape_bias: scores contain NaN/inf")
    return cols[np.argmax(s[:, cols], axis=1)]


def shape_bias_interval(shape_hits: Any, texture_hits: Any, seed: int = 0, n_boot: int = 2000,
                        level: float = 0.95) -> tuple[float, float, float]:
    """(shape bias, low, high): the percentile bootstrap interval over images of shape / (shape + texture)
    decisions, from per-image 1/0 shape and texture decisions (the store's ``ratio`` rows, resampled as
    ``metrics.uncertainty`` resamples them). NaN where no image is decided by a cue.

    >>> shape_bias_interval([1, 1, 1, 0], [0, 0, 0, 0])
    (1.0, 1.0, 1.0)
    """
    check_bootstrap_args(level, n_boot)
    s = np.asarray(shape_hits, dtype=np.float64).reshape(-1)
    t = np.asarray(texture_hits, dtype=np.float64).reshape(-1)
    if s.shape != t.shape or not s.size:
        raise ShiftbenchError(f"shape_bias_interval: {s.size} shape and {t.size} texture decisions; one of each per image")
    if s.size and (np.any((s != 0) & (s != 1)) or np.any((t != 0) & (t != 1)) or np.any(s + t > 1)):
        raise ShiftbenchError("shape_bias_interval: decisions must be 1/0 and never both shape and texture")
    stat = SampleStatistic("ratio", np.stack([s, s + t], axis=1))
    decided = float(np.sum(s + t))
    value = float(np.sum(s) / decided) if decided else float("nan")
    rng = np.random.Generator(np.random.PCG64(int(seed)))
    boots = np.concatenate([stat(w) for w in resample_counts(s.size, int(n_boot), rng)])
    interval = percentile_interval(boots, level)
    return (value, *interval) if interval else (value, float("nan"), float("nan"))


class ShapeBias(Metric):
    """Shape bias on cue-conflict images (shape over shape plus texture decisions), with both single-cue controls."""

    name = "shape_bias"
    task = "classification"
    needs = ("a cue-conflict image: meta cue with decision_wnids (objects-cue-conflict) or with texture_label "
             "(the standard stimuli' folder)")
    higher_is_better = True  # a descriptive measure; higher is more shape-based, as humans are (about 0.96)

    def reset(self) -> None:
        self.n = 0
        # per image, in data order (the report's bootstrap resamples them): cue code, 1/0 shape and texture decision
        self._cue: list[int] = []
        self._shape: list[int] = []
        self._texture: list[int] = []
        self._classes: int | None = None  # number of the set's classes (chance = 1 / it)

    def update(self, predictions: Any, targets: Sequence[CueTarget]) -> None:
        """``predictions``: scores (N, C): ImageNet-1k's (N, 1000) for targets whose classes are ImageNet-1k
        indices, the set's own classes' (a decision map's 16 categories) for targets with ``classes`` None;
        ``targets``: one :class:`CueTarget` per row."""
        scores = np.asarray(predictions)
        targets = [CueTarget(*t) for t in targets]
        if scores.ndim != 2 or (scores.shape[1] != IMAGENET_CLASSES and any(t.classes is not None for t in targets)):
            raise ShiftbenchError(f"shape_bias reads ImageNet-1k scores (N, {IMAGENET_CLASSES}); got shape {scores.shape}")
        if len(targets) != scores.shape[0]:
            raise ShiftbenchError(f"shape_bias: {len(targets)} targets for {scores.shape[0]} score rows")
        for i, t in enumerate(targets):
            if t.cue not in CUES:
                raise ShiftbenchError(f"shape_bias: cue must be one of {', '.join(CUES)}, got {t.cue!r}")
            k = len(set(int(c) for c in t.classes)) if t.classes is not None else scores.shape[1]
            if self._classes is not None and k != self._classes:
                raise ShiftbenchError(f"shape_bias: the set's classes changed from {self._classes} to {k} within one set")
            self._classes = k
            decision = int(set_decisions(scores[i:i + 1], t.classes)[0])
            self._cue.append(CUES.index(t.cue))
            self._shape.append(int(t.cue not in ("texture", "no_conflict") and decision == int(t.shape)))
            self._texture.append(int(t.cue not in ("silhouette", "no_conflict") and decision == int(t.texture)))
        self.n += len(targets)

    def sample_targets(self, samples: Sequence[Any]) -> list[CueTarget]:
        return [cue_target(s) for s in samples]

    def merge(self, other: "ShapeBias") -> "ShapeBias":
        self.check_mergeable(other)
        if self._classes is not None and other._classes is not None and self._classes != other._classes:
            raise ShiftbenchError(f"shape_bias: cannot merge sets of {self._classes} and {other._classes} classes")
        self._cue = self._cue + list(other._cue)
        self._shape = self._shape + list(other._shape)
        self._texture = self._texture + list(other._texture)
        self._classes = self._classes if self._classes is not None else other._classes
        self.n += other.n
        return self

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.asarray(self._cue, dtype=np.int64), np.asarray(self._shape, dtype=np.float64),
                np.asarray(self._texture, dtype=np.float64))

    def compute(self) -> dict[str, float | None]:
        cue, shape, texture = self._arrays()
        conflict = cue == 0
        if not conflict.any():
            out: dict[str, float | None] = {"shape_bias": float("nan")}
        else:
            s, t = float(shape[conflict].sum()), float(texture[conflict].sum())
            out = {"shape_bias": s / (s + t) if s + t else None, "cue_decided": (s + t) / float(conflict.sum())}
        if (cue == 1).any():
            out["texture_alone_acc"] = float(texture[cue == 1].mean())
        if (cue == 2).any():
            out["silhouette_alone_acc"] = float(shape[cue == 2].mean())
        if self._classes:
            out["cue_chance"] = 1.0 / self._classes
        return out

    def undefined_reason(self, key: str) -> str:
        return "no cue-conflict image was decided by either cue (no shape and no texture decision)"

    def state(self) -> dict[str, Any]:
        """Decision counts: shape, texture and other decisions on the conflicts, images per cue, classes."""
        cue, shape, texture = self._arrays()
        conflict = cue == 0
        out = {"shape_decisions": int(shape[conflict].sum()), "texture_decisions": int(texture[conflict].sum()),
               "conflict_images": int(conflict.sum()), "texture_images": int((cue == 1).sum()),
               "silhouette_images": int((cue == 2).sum()), "classes": self._classes}
        if (cue == 3).any():  # the standard stimuli's images whose shape and texture classes agree
            out["no_conflict_images"] = int((cue == 3).sum())
        return out

    def per_sample(self) -> dict[str, tuple[str, np.ndarray]]:
        """Per image, NaN for images of another cue: ``shape_bias`` the ``ratio`` rows (shape, shape or
        texture), ``cue_decided`` and the two controls 1/0 (``mean``)."""
        if not self.n or len(self._cue) != self.n:
            return {}
        cue, shape, texture = self._arrays()
        nan = np.full(len(cue), np.nan)
        out: dict[str, tuple[str, np.ndarray]] = {}
        conflict = cue == 0
        if conflict.any():
            out["shape_bias"] = ("ratio", np.where(conflict[:, None], np.stack([shape, shape + texture], axis=1), np.nan))
            out["cue_decided"] = ("mean", np.where(conflict, shape + texture, nan))
        if (cue == 1).any():
            out["texture_alone_acc"] = ("mean", np.where(cue == 1, texture, nan))
        if (cue == 2).any():
            out["silhouette_alone_acc"] = ("mean", np.where(cue == 2, shape, nan))
        return out
