"""The task contract: what the runner asks of a task (issue 26, step 3).

A task object holds, in one place, what differs between tasks once a model is built:

- ``predict_images(model, images)``: the model run as the task asks (``predict_logits``, ``predict_masks``,
  ``predict``), returning what the task's metrics take in ``update_from_samples`` (logits, masks,
  detections, captions), checked for NaN/inf and length; ``predict(model, samples)`` on samples;
- ``record(outputs, i, sample, model, space)``: the JSON record the store keeps for sample ``i`` of a batch
  (the report's sample grid, ``log_samples``); ``record_keys`` are the keys every record has;
- ``plan_labels(model, dataset, label_map, dataset_name, class_subset)``: the label plan (:mod:`shiftbench.tasks.labels`):
  the model to run and how labels cross between the dataset's space and the model's;
- ``default_metrics``: registered metric names that score the task (``metrics_for(model)`` when they depend on
  the model, as for a class-agnostic segmenter).

Tasks are registered in :data:`shiftbench.registry.TASKS` (``tasks/__init__.py``, one lazy line each);
:func:`shiftbench.tasks.task_of` finds a model's. Nothing here imports the engine, the report or the spec.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from ..models.base import as_image_list, check_outputs
from .labels import plan_labels

__all__ = ["Task"]


class Task:
    """One task's prediction, per-sample record, label mapping and default metrics."""

    name: ClassVar[str] = ""
    default_metrics: ClassVar[tuple[str, ...]] = ()
    record_keys: ClassVar[frozenset[str]] = frozenset()  # keys every per-sample record has
    runner: ClassVar[str] = "evaluate"  # the runner that evaluates the task's models: "evaluate" or "retrieval"

    def predict(self, model: Any, samples: Sequence[Any]) -> Any:
        """What the task's metrics take for these samples, checked (one batch)."""
        return self.predict_images(model, [s.image for s in samples])

    def predict_images(self, model: Any, images: Sequence[Any]) -> Any:
        """The model run on a batch of images as this task asks, its outputs checked (NaN/inf, length)."""
        images = as_image_list(images)
        out = list(model.predict(images))
        check_outputs(out, _name(model), batch_size=len(images))
        return out

    def record(self, outputs: Any, i: int, sample: Any, model: Any, space: Any = None) -> dict[str, Any]:
        """The stored record of sample ``i`` of a batch whose predictions are ``outputs``; ``space`` is the
        label space the outputs' labels are in after the label plan (None: the model's)."""
        raise NotImplementedError

    def plan_labels(self, model: Any, dataset: Any, label_map: Any = None, dataset_name: str = "dataset",
                    class_subset: Any = None) -> Any:
        """Check ``model`` against ``dataset`` and plan the label mapping (:func:`~shiftbench.tasks.labels.plan_labels`),
        with the spec's class subset (``shiftbench.decisions.ClassSubset``) when it has one."""
        return plan_labels(model, dataset, label_map, dataset_name=dataset_name, class_subset=class_subset)

    def metrics_for(self, model: Any) -> tuple[str, ...]:
        """The default metrics for this model of the task."""
        return self.default_metrics

    def __repr__(self) -> str:
        return f"<task {self.name!r}>"


def _name(model: Any) -> str:
    return getattr(model, "name", type(model).__name__)
