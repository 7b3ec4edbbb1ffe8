"""Tasks: one object per task (classification, segmentation, detection, captioning, retrieval) holding its
prediction, its per-sample record, its label mapping and its default metrics (``tasks/base.py``).

Adding a task is one file here (a :class:`~shiftbench.tasks.base.Task` subclass) and one line below; models
of it are registered with ``task=NAME`` and metrics with ``task = NAME``.

>>> task_of(type("M", (), {"task": "classification", "name": "m"})()).default_metrics
('top1', 'ece')
"""

from __future__ import annotations

from typing import Any

from ..errors import ShiftbenchError
from ..registry import TASKS
from .base import Task

__all__ = ["TASKS", "Task", "task_of", "predict_batch"]

TASKS.add_lazy("classification", "shiftbench.tasks.classification:Classification",
               description="classifiers and zero-shot classifiers: logits, top-k, calibration")
TASKS.add_lazy("segmentation", "shiftbench.tasks.segmentation:Segmentation",
               description="semantic and class-agnostic segmenters: label maps or foreground probabilities")
TASKS.add_lazy("detection", "shiftbench.tasks.detection:Detection",
               description="detectors: boxes, scores, labels (and masks), scored as COCOeval")
TASKS.add_lazy("captioning", "shiftbench.tasks.captioning:Captioning",
               description="captioners: one caption per image, compared with the sample's caption")
TASKS.add_lazy("question_answering", "shiftbench.tasks.question_answering:QuestionAnswering",
               description="image-text-to-text models asked about each image's class, answers matched without a judge")
TASKS.add_lazy("retrieval", "shiftbench.tasks.retrieval:Retrieval",
               description="composed image retrieval: reference image + text ranked against a gallery")


def task_of(model: Any, name: str | None = None, runner: str | None = None) -> Task:
    """The task object of ``model`` (its ``task`` attribute); ShiftbenchError naming the model (``name``, else
    its own name) when no task of that name is registered, or when ``runner`` is given and the task is
    evaluated by another runner."""
    task = getattr(model, "task", None)
    if isinstance(task, str) and task in TASKS:
        found = TASKS.create(task)
        if runner is None or found.runner == runner:
            return found
    name = name if name is not None else getattr(model, "name", type(model).__name__)
    raise ShiftbenchError(f"model {name!r}: the runner does not evaluate {task!r} models yet")


def predict_batch(model: Any, images: Any) -> Any:
    """Run any model on a batch of images as its task asks and return what the task's metrics take, checked
    for NaN/inf and length: classification, float32 logits (N, C); segmentation, float32 (H, W) foreground
    probabilities for class-agnostic models, int64 (H, W) label maps otherwise; detection, a list of
    ``Detections``; captioning, a list of str."""
    task = getattr(model, "task", None)
    if not (isinstance(task, str) and task in TASKS) or TASKS.create(task).runner != "evaluate":
        name = getattr(model, "name", type(model).__name__)
        known = [n for n in TASKS.names() if TASKS.create(n).runner == "evaluate"]
        raise ShiftbenchError(f"model {name!r} has no known task ({task!r}); expected one of {', '.join(known)}")
    return TASKS.create(task).predict_images(model, images)
