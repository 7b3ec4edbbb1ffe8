"""Label-space planning for a run: check every (model, dataset) pair before any work, map where exact, refuse otherwise.

:func:`plan_labels` is called once per model before the first image is read. It returns a
:class:`LabelPlan`: the model to run (a configured *copy* for zero-shot classifiers, so the caller's
object is never changed), and how labels cross between the dataset's space and the model's:

- classification: each sample's class (a dataset slot) becomes the model's output index; a spec's class
  subset (``class_subset``, shiftbench.decisions.ClassSubset) keeps the logits at the subset's columns only, the
  subset becoming the model's space, and a dataset's decision map (``decision_map``, e.g. the 16 entry-level
  categories of the shape-bias protocol) turns the 1,000 outputs into its categories' aggregated probabilities:
  both act in :meth:`LabelPlan.outputs`, before every metric and record;
- segmentation: each mask value becomes the model's class (255, the void label, stays 255);
  class-agnostic segmenters accept any dataset with masks;
- detection: each predicted label (a model slot) becomes the dataset's label (a COCO category id for
  a COCO file); predictions of classes the dataset does not have are left out, as COCOeval leaves
  out categories absent from the ground truth.

A dataset that declares no label space (a user's ``Dataset`` subclass with plain integer labels and no
``class_names``) cannot be checked; its labels are taken as the model's indices and a log line says so.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..decisions import ClassSubset, DecisionMap
from ..errors import ShiftbenchError, SpecError
from ..labelspace import LabelSpace, map_spaces, recognize, suggest_class
from ..models.base import Detections
from ..sample import Sample

__all__ = ["LabelPlan", "plan_labels", "dataset_label_space"]

log = logging.getLogger("shiftbench")
VOID = 255


def dataset_label_space(dataset: Any, task: str = "classification") -> LabelSpace | None:
    """The space a dataset's labels live in for ``task``: ``label_space`` (class labels, box labels), or
    ``mask_space`` for segmentation; a dataset with only ``class_names`` gets the built-in space whose names
    these are slot by slot (``labelspace.recognize``: ImageNet-1k's 1,000 names, VOC's 21, ...), else a
    custom space of them."""
    if task == "segmentation":
        return getattr(dataset, "mask_space", None)
    space = getattr(dataset, "label_space", None)
    if space is not None:
        return space
    names = getattr(dataset, "class_names", None)
    return recognize(list(names), f"{getattr(dataset, 'name', 'dataset')}-classes") if names else None


@dataclass
class LabelPlan:
    """How one model's labels meet the dataset's. ``to_model[d]`` is the model slot of dataset slot ``d``
    (-1: unused slot); ``None`` means the labels are the same numbers on both sides."""

    model: Any
    task: str
    to_model: list[int] | None = None
    num_classes: int | None = None  # the model's space size (sizes miou's confusion matrix)
    output_space: LabelSpace | None = None  # the space of the labels that ``outputs`` returns
    uses_map: bool = False  # whether the spec's label_map decided this plan (else it was only checked)
    columns: tuple[int, ...] | None = None  # a class subset: the model's output columns kept, in this order
    decision: DecisionMap | None = None  # a dataset's decision map: the categories the outputs are aggregated into
    decision_columns: tuple[tuple[int, ...], ...] | None = None  # each category's columns in the model's outputs

    def __post_init__(self) -> None:
        if self.output_space is None:
            self.output_space = getattr(self.model, "label_space", None)

    def targets(self, samples: Sequence[Sample]) -> list[Sample]:
        """The samples with their labels (classification) or masks (segmentation) in the model's space."""
        if self.to_model is None or self.task not in ("classification", "segmentation"):
            return list(samples)
        out = []
        for s in samples:
            if self.task == "classification":
                if s.label is None:
                    out.append(s)
                    continue
                meta = s.meta
                if isinstance(meta.get("texture_label"), int):  # a cue-conflict image's second class follows
                    meta = dict(meta, texture_label=self._slot(int(meta["texture_label"]), s.id))
                out.append(s.replace(label=self._slot(int(s.label), s.id), meta=meta))
            else:
                mask = s.meta.get("segmentation", s.mask)
                if mask is None:
                    out.append(s)
                    continue
                mapped = self._mask(np.asarray(mask), s.id)
                meta = dict(s.meta, segmentation=mapped) if "segmentation" in s.meta else s.meta
                out.append(s.replace(mask=mapped if "segmentation" not in s.meta else s.mask, meta=meta))
        return out

    def outputs(self, outputs: Any) -> Any:
        """Logits read as the plan says (a class subset's columns; a decision map's categories), detections with
        labels in the dataset's space (predictions of classes it lacks left out); other outputs as they are."""
        if self.task == "classification" and self.columns is not None:
            return np.ascontiguousarray(np.asarray(outputs)[:, list(self.columns)])
        if self.task == "classification" and self.decision is not None:
            return self.decision.scores(outputs, self.decision_columns)
        if self.to_model is None or self.task != "detection":
            return outputs
        to_dataset = np.full(max(self.num_classes or 0, max(self.to_model, default=-1) + 1), -1, np.int64)
        for d, m in enumerate(self.to_model):
            if m >= 0:
                to_dataset[m] = d
        mapped = []
        for det in outputs:
            labels = np.asarray(det.labels, np.int64)
            inside = (labels >= 0) & (labels < len(to_dataset))
            new = np.full(len(labels), -1, np.int64)
            new[inside] = to_dataset[labels[inside]]
            keep = new >= 0
            mapped.append(Detections(det.boxes[keep], det.scores[keep], new[keep],
                                     None if det.masks is None else det.masks[keep]))
        return mapped

    def _slot(self, label: int, sample_id: str) -> int:
        assert self.to_model is not None
        if not 0 <= label < len(self.to_model) or self.to_model[label] < 0:
            raise ShiftbenchError(f"sample {sample_id!r}: label {label} is not a class of the dataset's label space")
        return self.to_model[label]

    def _mask(self, mask: np.ndarray, sample_id: str) -> np.ndarray:
        assert self.to_model is not None
        values = mask.astype(np.int64)
        table = np.full(max(len(self.to_model), VOID + 1), -1, np.int64)
        table[:len(self.to_model)] = self.to_model
        table[VOID] = VOID
        bad = (values < 0) | (values >= len(table))
        bad |= ~bad & (table[np.clip(values, 0, len(table) - 1)] < 0)
        if bad.any():
            value = int(values[bad][0])
            raise ShiftbenchError(f"sample {sample_id!r}: mask value {value} is not a class of the dataset's label "
                                  f"space (nor the void label {VOID})")
        return table[values]


def _hint(model_space: LabelSpace, task: str | None = None) -> str:
    # wnid folder names are a fix only where the data is a folder per class (classification)
    extra = (" or name the class folders by ImageNet wnids (n01440764, ...)"
             if model_space.id_kind == "wnid" and task == "classification" else "")
    return (f"map them with label_map: in the spec (dataset class: model class, or a file of "
            f"'dataset_class<TAB>model_class' lines){extra}")


def plan_labels(model: Any, dataset: Any, label_map: Mapping[str, Any] | None = None,
                dataset_name: str = "dataset", class_subset: ClassSubset | None = None) -> LabelPlan:
    """Check ``model`` against ``dataset`` and plan the label mapping; ShiftbenchError (one line) if they do
    not fit. Zero-shot classifiers get a copy pointed at the dataset's classes (at the subset's classes with a
    ``class_subset``). A ``class_subset`` must hold every class the dataset has (SpecError naming the spec key
    otherwise); a dataset's ``decision_map`` decides an ImageNet-1k classifier's outputs in its categories."""
    name = getattr(model, "name", type(model).__name__)
    task = getattr(model, "task", None)
    model_space = getattr(model, "label_space", None)
    annotations = tuple(getattr(dataset, "annotations", ()) or ())
    if class_subset is not None and task != "classification":
        raise SpecError(f"{class_subset.where}: model {name!r} is a {task} model; a class subset restricts the outputs "
                        "of classifiers only")
    if task == "captioning" or (task == "segmentation" and getattr(model, "class_agnostic", False)):
        if label_map:  # no classes to map: the map is another model's, its dataset classes are checked here
            _check_map_keys(label_map, dataset, name, dataset_name)
        if task == "segmentation" and annotations and "mask" not in annotations:
            raise ShiftbenchError(f"model {name!r} segments objects but {dataset_name} has no masks "
                                  f"(annotations: {', '.join(annotations)})")
        return LabelPlan(model, task)
    space = dataset_label_space(dataset, task or "")
    if space is None and (label_map or class_subset is not None):
        key, what = ((class_subset.where, "its classes cannot be checked against the subset") if class_subset is not None
                     else (f"model {name!r}: label_map", "the map cannot be checked"))
        raise SpecError(f"{key}: {dataset_name} declares no label space (no label_space, no class_names), so {what}; "
                        "give the dataset its class names or remove it")
    if space is None:
        if task == "segmentation" and "mask" in annotations:
            raise ShiftbenchError(f"model {name!r} predicts classes {model_space.describe() if model_space else ''} "
                                  f"but the masks of {dataset_name} are not class maps (no mask label space); "
                                  "use a class-agnostic segmenter or metric")
        if annotations and task == "segmentation":
            raise ShiftbenchError(f"model {name!r} is a segmenter but {dataset_name} has no masks")
        log.info("%s declares no label space: its labels are taken as model %s's class indices", dataset_name, name)
        return LabelPlan(model, task, None, model_space.num_classes if model_space else None)
    if task == "classification" and getattr(model, "kind", "") == "zero_shot_classifier" and class_subset is not None:
        return _zero_shot_subset(model, space, dataset, dataset_name, label_map, class_subset)
    if task == "classification" and getattr(model, "kind", "") == "zero_shot_classifier":
        if model_space is None or not model_space.same_as(space):
            if len(space.used) != space.num_classes:
                raise ShiftbenchError(f"{dataset_name}: label space {space.describe()} has unused slots; "
                                      f"zero-shot model {name!r} needs a contiguous class list")
            model = copy.copy(model)  # the caller's object keeps its classes; text features are built lazily
            model.set_classes(space)
        if label_map:  # the model takes the dataset's classes: the map is another model's, its keys checked here
            _check_map_keys(label_map, dataset, name, dataset_name)
        return LabelPlan(model, task, None, space.num_classes)
    if model_space is None:
        raise ShiftbenchError(f"model {name!r} declares no label space; it cannot be checked against {dataset_name}")
    decided = _decision_plan(model, space, dataset, dataset_name, label_map, class_subset)
    if decided is not None:
        return decided
    mapping = _mapped(space, model_space, label_map, name)
    if mapping is None:
        raise ShiftbenchError(f"model {name!r} predicts label space {model_space.describe()} but {dataset_name} has "
                              f"{space.describe()} and no exact mapping exists; {_hint(model_space, task)}")
    if class_subset is not None:  # the logits at the subset's columns: the subset is the model's space now
        return _subset_plan(model, mapping, space, dataset, label_map, class_subset)
    # the same slots on both sides (a label_map may remap even between equal spaces); a detector's extra
    # classes must still be filtered out, so detection keeps the explicit map unless the spaces are the same
    identity = _straight(mapping, space) and (task != "detection" or space.same_as(model_space))
    return LabelPlan(model, task, None if identity else mapping, model_space.num_classes,
                     space if task == "detection" and not identity else model_space, uses_map=bool(label_map))


def _zero_shot_subset(model: Any, space: LabelSpace, dataset: Any, dataset_name: str,
                      label_map: Mapping[str, Any] | None, class_subset: ClassSubset) -> LabelPlan:
    """A zero-shot classifier with a class subset: a copy set to the subset's classes (its prompts), the dataset's
    classes found among ImageNet-1k's (exactly, or by ``label_map``), then in the subset."""
    name = getattr(model, "name", type(model).__name__)
    imagenet = LabelSpace.imagenet1k()
    full = _mapped(space, imagenet, label_map, name)
    if full is None:
        raise SpecError(f"{class_subset.where}: {dataset_name} has {space.describe()}, which are not ImageNet-1k "
                        f"classes, so they cannot be found in {class_subset.label}; {_hint(imagenet, model.task)}")
    subset = class_subset.space()
    columns = class_subset.columns(imagenet)
    assert columns is not None  # a subset is made of ImageNet-1k classes
    model = copy.copy(model)  # the caller's object keeps its classes
    model.set_classes(subset)
    return LabelPlan(model, model.task, _into_subset(full, columns, space, dataset, class_subset), subset.num_classes,
                     uses_map=bool(label_map))


def _decision_plan(model: Any, space: LabelSpace, dataset: Any, dataset_name: str,
                   label_map: Mapping[str, Any] | None, class_subset: ClassSubset | None) -> LabelPlan | None:
    """The plan of a classifier on a dataset whose categories its outputs decide (the dataset's ``decision_map``,
    e.g. the shape-bias protocol's 16 categories from ImageNet-1k outputs), or None when that does not apply: no
    map, a model without the map's classes, a ``label_map`` (the user's mapping wins) or the dataset's own space."""
    decision: DecisionMap | None = getattr(dataset, "decision_map", None)
    model_space = model.label_space
    groups = decision.columns(model_space) if decision is not None and model.task == "classification" else None
    if decision is None or groups is None or label_map or space.same_as(model_space):
        return None
    if class_subset is not None:
        raise SpecError(f"{class_subset.where}: {dataset_name} decides its {space.num_classes} categories from the "
                        f"1,000 ImageNet outputs ({decision.name}, {decision.aggregation} of the probabilities); "
                        "a class subset would remove outputs the categories aggregate; remove class_subset")
    return LabelPlan(model, model.task, None, space.num_classes, space, decision=decision, decision_columns=groups)


def _subset_plan(model: Any, mapping: list[int], space: LabelSpace, dataset: Any, label_map: Mapping[str, Any] | None,
                 class_subset: ClassSubset) -> LabelPlan:
    """A classifier with a class subset: its logits kept at the subset's columns (the subset becomes its space),
    the dataset's classes (``mapping``: their model slots) mapped into the subset."""
    name = getattr(model, "name", type(model).__name__)
    columns = class_subset.columns(model.label_space)
    if columns is None:
        missing = [w for w in class_subset.wnids if model.label_space.resolve(w) is None]
        raise SpecError(f"{class_subset.where}: model {name!r} predicts {model.label_space.describe()}, which lacks "
                        f"{len(missing)} of the classes of {class_subset.label} (first: {', '.join(missing[:3])})")
    subset = class_subset.space()
    return LabelPlan(model, model.task, _into_subset(mapping, columns, space, dataset, class_subset), subset.num_classes,
                     subset, uses_map=bool(label_map), columns=tuple(columns))


def _into_subset(mapping: list[int], columns: list[int], space: LabelSpace, dataset: Any,
                 subset: ClassSubset) -> list[int]:
    """The subset slot of every dataset slot, given its slot in the full space (``mapping``) and the subset's
    columns there; SpecError naming the spec key when a class the dataset has is not in the subset. The classes
    a dataset has are those its reader names (``labels_used()``: an image folder's class folders), else every
    class of its label space."""
    position = {c: k for k, c in enumerate(columns)}
    used = getattr(dataset, "labels_used", None)
    present = used() if callable(used) else None
    present = sorted(present) if present is not None else list(space.used)
    missing = [d for d in present if mapping[d] >= 0 and mapping[d] not in position]
    if missing:
        def shown(d: int) -> str:
            name, ident = space.class_names[d], space.ids[d]
            return repr(name) + (f" ({ident})" if ident and ident != name else "")

        listed = ", ".join(shown(d) for d in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise SpecError(f"{subset.where}: {len(missing)} of the dataset's {len(present)} classes "
                        f"{'is' if len(missing) == 1 else 'are'} not in {subset.label}: {listed}")
    keep = set(present)
    return [position[m] if d in keep and m >= 0 else -1 for d, m in enumerate(mapping)]


def _mapped(space: LabelSpace, model_space: LabelSpace, label_map: Mapping[str, Any] | None,
            name: str) -> list[int] | None:
    """``map_spaces`` with a bad ``label_map`` entry said as a spec error naming the model."""
    try:
        return map_spaces(space, model_space, label_map)
    except ShiftbenchError as exc:
        raise SpecError(f"model {name!r}: {exc}") from None


def _straight(mapping: list[int], space: LabelSpace) -> bool:
    """Whether ``mapping`` sends every used slot of ``space`` to the same slot number."""
    used = set(space.used)
    return mapping == [i if i in used else -1 for i in range(space.num_classes)]


def _check_map_keys(label_map: Mapping[str, Any], dataset: Any, name: str, dataset_name: str) -> None:
    """For a model the map does not apply to: its keys must still be classes of the dataset (of its label
    space or its mask space, whichever it has)."""
    spaces = [s for s in (dataset_label_space(dataset), dataset_label_space(dataset, "segmentation")) if s is not None]
    for key in label_map:
        if spaces and all(s.resolve(key) is None for s in spaces):
            raise SpecError(f"model {name!r}: label_map: {key!r} is not a class of the dataset's label space "
                            f"{spaces[0].describe()}{suggest_class(key, spaces[0])}")
