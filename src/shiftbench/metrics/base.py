"""The Metric base class: stateful ``update`` / ``compute`` around pure functions (torchmetrics-style).

How the runner uses a metric (the whole contract)
-------------------------------------------------

``metric = METRICS.create(name, **kw)`` (or ``sb.create_metric``) gives an object with

- ``name`` (registered name), ``task`` (``"classification"``, ``"segmentation"``, ``"detection"``,
  ``"captioning"``, or ``"any"``), ``higher_is_better`` (bool: arrows and drops in reports).
- ``update(predictions, targets)``: accumulate one batch. Per task:

  ==============  ==================================================  ===============================
  task            predictions                                         targets
  ==============  ==================================================  ===============================
  classification  logits or probabilities float (N, C)                int labels (N,)
  segmentation    list of int (H, W) label maps (``Segmenter.          list of int (H, W) label maps
                  predict_masks``), or float (H, W) foreground        (``ignore_index`` skipped), or
                  probabilities for ``foreground_iou``                bool masks for ``foreground_iou``
  detection       list of ``Detections`` (boxes xyxy, scores,         list of dicts ``boxes`` xyxy,
                  labels, masks)                                      ``labels``, optional ``masks``,
                                                                      ``iscrowd``, ``area``
  captioning      list of str (captions of shifted images)            list of str (reference captions)
  ==============  ==================================================  ===============================

- ``update_from_samples(outputs, samples)``: the same, reading targets from :class:`shiftbench.Sample`
  records (``label``; ``mask``; ``boxes`` / ``box_labels``; ``caption``); what the runner calls.
- ``compute() -> dict[str, float]``: the values to store, keyed by the row's metric name (``{"top1":
  0.91}``; detection gives ``box_ap``, ``box_ap50``, ... together). NaN when nothing was seen; None
  where a value is undefined (COCO's -1): the store keeps NULL and, when the metric has
  ``undefined_reason(key)``, the reason in the row's ``extra["undefined"]``.
- ``n``: samples seen; ``reset()``: forget everything. ``state()`` exposes extra data for reports
  (the reliability diagram of ``ece``, per-class IoU of ``miou``).

``check_task(metric, model)`` raises :class:`ShiftbenchError` when a metric does not fit a model's task.
Robustness summaries (drops, gamma, CE, mCE) are pure functions in :mod:`shiftbench.metrics.robustness`:
they combine stored values, they do not accumulate predictions.

>>> class Count(Metric):
...     name, task, higher_is_better = "count", "any", True
...     def reset(self): self.n = 0
...     def update(self, predictions, targets): self.n += len(targets)
...     def compute(self): return {"count": float(self.n)}
>>> m = Count(); m.update([1, 2], [1, 2]); m.compute()
{'count': 2.0}
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from ..errors import ShiftbenchError

__all__ = ["Metric", "check_task"]


class Metric:
    """Accumulates predictions batch by batch; ``compute`` turns the state into named values."""

    name: ClassVar[str] = ""
    task: ClassVar[str] = "any"
    higher_is_better: ClassVar[bool] = True
    # attributes that hold resources (encoders, models), not accumulated data: never saved, rebuilt by
    # the constructor
    resources: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self.n = 0
        self.reset()

    def reset(self) -> None:  # pragma: no cover - every metric overrides it
        raise NotImplementedError

    def update(self, predictions: Any, targets: Any) -> None:  # pragma: no cover - protocol
        raise NotImplementedError

    def compute(self) -> dict[str, float]:  # pragma: no cover - protocol
        raise NotImplementedError

    def update_from_samples(self, outputs: Any, samples: Sequence[Any]) -> None:  # pragma: no cover - per task
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """Extra JSON-serialisable data beyond ``compute`` (empty unless a metric has some)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The accumulated data (every attribute but ``resources``), so a run can stop and resume."""
        return {k: v for k, v in vars(self).items() if k not in self.resources}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a ``state_dict`` (the runner saves it after every batch)."""
        vars(self).update({k: v for k, v in state.items() if k not in self.resources})

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, n={self.n})"


def check_task(metric: Any, model: Any) -> None:
    """Raise ShiftbenchError unless the metric can score the model's outputs."""
    task = getattr(metric, "task", "any")
    model_task = getattr(model, "task", None)
    if task == "any" or model_task == task:
        return
    raise ShiftbenchError(
        f"metric {getattr(metric, 'name', metric)!r} scores {task} models, but "
        f"{getattr(model, 'name', model)!r} is a {model_task} model"
    )
