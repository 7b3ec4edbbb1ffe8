"""Label-space planning for a run: check every (model, dataset) pair before any work, map where exact, refuse otherwise.

:func:`plan_labels` is called once per model before the first image is read. It returns a
:class:`LabelPlan`: the model to run (a configured *copy* for zero-shot classifiers, so the caller's
object is never changed), and how labels cross between the dataset's space and the model's:

- classification: each sample's class (a dataset slot) becomes the model's output index;
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

from ..errors import ShiftbenchError, SpecError
from ..labelspace import LabelSpace, map_spaces, recognize, suggest_class
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
                out.append(s if s.label is None else s.replace(label=self._slot(int(s.label), s.id)))
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
        """Detections with labels in the dataset's space (predictions of classes it lacks left out)."""
        if self.to_model is None or self.task != "detection":
            return outputs
        from ..models.base import Detections

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
                dataset_name: str = "dataset") -> LabelPlan:
    """Check ``model`` against ``dataset`` and plan the label mapping; ShiftbenchError (one line) if they do
    not fit. Zero-shot classifiers get a copy pointed at the dataset's classes."""
    name = getattr(model, "name", type(model).__name__)
    task = getattr(model, "task", None)
    model_space = getattr(model, "label_space", None)
    annotations = tuple(getattr(dataset, "annotations", ()) or ())
    if task == "captioning" or (task == "segmentation" and getattr(model, "class_agnostic", False)):
        if label_map:  # no classes to map: the map is another model's, its dataset classes are checked here
            _check_map_keys(label_map, dataset, name, dataset_name)
        if task == "segmentation" and annotations and "mask" not in annotations:
            raise ShiftbenchError(f"model {name!r} segments objects but {dataset_name} has no masks "
                                  f"(annotations: {', '.join(annotations)})")
        return LabelPlan(model, task)
    space = dataset_label_space(dataset, task or "")
    if space is None and label_map:
        raise SpecError(f"model {name!r}: label_map: {dataset_name} declares no label space (no label_space, no "
                        "class_names), so the map cannot be checked; give the dataset its class names or remove it")
    if space is None:
        if task == "segmentation" and "mask" in annotations:
            raise ShiftbenchError(f"model {name!r} predicts classes {model_space.describe() if model_space else ''} "
                                  f"but the masks of {dataset_name} are not class maps (no mask label space); "
                                  "use a class-agnostic segmenter or metric")
        if annotations and task == "segmentation":
            raise ShiftbenchError(f"model {name!r} is a segmenter but {dataset_name} has no masks")
        log.info("%s declares no label space: its labels are taken as model %s's class indices", dataset_name, name)
        return LabelPlan(model, task, None, model_space.num_classes if model_space else None)
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
    mapping = _mapped(space, model_space, label_map, name)
    if mapping is None:
        raise ShiftbenchError(f"model {name!r} predicts label space {model_space.describe()} but {dataset_name} has "
                              f"{space.describe()} and no exact mapping exists; {_hint(model_space, task)}")
    # the same slots on both sides (a label_map may remap even between equal spaces); a detector's extra
    # classes must still be filtered out, so detection keeps the explicit map unless the spaces are the same
    identity = _straight(mapping, space) and (task != "detection" or space.same_as(model_space))
    return LabelPlan(model, task, None if identity else mapping, model_space.num_classes,
                     space if task == "detection" and not identity else model_space, uses_map=bool(label_map))


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
