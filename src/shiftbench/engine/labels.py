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
from ..labelspace import LabelSpace, map_spaces, recognize
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
    if task == "captioning":
        return LabelPlan(model, task)
    if task == "segmentation" and getattr(model, "class_agnostic", False):
        if annotations and "mask" not in annotations:
            raise ShiftbenchError(f"model {name!r} segments objects but {dataset_name} has no masks "
                                  f"(annotations: {', '.join(annotations)})")
        return LabelPlan(model, task)
    space = dataset_label_space(dataset, task or "")
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
        return LabelPlan(model, task, None, space.num_classes)
    if model_space is None:
        raise ShiftbenchError(f"model {name!r} declares no label space; it cannot be checked against {dataset_name}")
    try:
        mapping = map_spaces(space, model_space, label_map)
    except ShiftbenchError as exc:
        raise SpecError(f"model {name!r}: {exc}") from None
    if mapping is None:
        raise ShiftbenchError(f"model {name!r} predicts label space {model_space.describe()} but {dataset_name} has "
                              f"{space.describe()} and no exact mapping exists; {_hint(model_space, task)}")
    used = set(space.used)
    identity = space.same_as(model_space) or (
        # a detector's extra classes must still be filtered out, so detection keeps the explicit map
        task != "detection" and mapping == [i if i in used else -1 for i in range(space.num_classes)])
    return LabelPlan(model, task, None if identity else mapping, model_space.num_classes,
                     space if task == "detection" and not identity else model_space)
