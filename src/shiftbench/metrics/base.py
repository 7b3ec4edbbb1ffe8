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
  records (``label``; ``mask``; ``boxes`` / ``box_labels``; ``caption``); what the runner calls. What a
  metric reads of a sample is ``needs`` (in words) and ``sample_targets(samples)`` (the reading, one line
  naming the first sample that lacks it); ``check_samples(samples)`` and ``check_model(model)`` ask it
  without outputs: the runner asks them of the first batch before any model work, in a dry run too.
- ``compute() -> dict[str, float]``: the values to store, keyed by the row's metric name (``{"top1":
  0.91}``; detection gives ``box_ap``, ``box_ap50``, ... together). NaN when nothing was seen; None
  where a value is undefined (COCO's -1): the store keeps NULL and, when the metric has
  ``undefined_reason(key)``, the reason in the row's ``extra["undefined"]``.
- ``n``: samples seen; ``reset()``: forget everything. ``state()`` exposes extra data for reports
  (the reliability diagram of ``ece``, per-class IoU of ``miou``).
- ``merge(other)``: fold another metric's accumulated data into this one (torchmetrics' idea). Merging
  is associative and a fresh metric is its identity, so the states of the parts of any split of the data
  (batches, shards, workers), merged in data order, ``compute`` exactly what one pass computes. The
  runner saves each batch's ``state_dict()`` alone and merges them; ``merge_state(state)`` merges a
  saved ``state_dict``. Sums of floats are kept exact (:func:`exact_add`), so the grouping of the
  parts cannot change a rounding.
- ``per_sample() -> dict[str, (kind, values)]``: the per-sample records behind each row value, in data
  order, for the report's confidence intervals (contract: ``kind`` says how the row value is computed
  from ``values``: ``"mean"``, ``"ratio"``, ``"iou"``, ``"ece:B"``; see docs/metrics.md). The records
  live in the metric's state (so saved batches, shards and workers keep them) and merge in order. A
  metric without per-sample data gives ``{}``; so does one whose records do not cover every sample
  seen (states saved by an older shiftbench). Rows of NaN are samples the row does not score (a query
  without a subset for ``R_subset@K``): the runner leaves them out together with their ids.

``check_task(metric, model)`` raises :class:`ShiftbenchError` when a metric does not fit a model's task.
Robustness summaries (drops, gamma, CE, mCE) are pure functions in :mod:`shiftbench.metrics.robustness`:
they combine stored values, they do not accumulate predictions.

>>> class Count(Metric):
...     name, task, higher_is_better = "count", "any", True
...     def reset(self): self.n = 0
...     def update(self, predictions, targets): self.n += len(targets)
...     def compute(self): return {"count": float(self.n)}
...     def merge(self, other): self.check_mergeable(other); self.n += other.n; return self
>>> m = Count(); m.update([1, 2], [1, 2]); m.compute()
{'count': 2.0}
>>> part = Count(); part.update([3], [3]); m.merge(part).compute()
{'count': 3.0}
"""

from __future__ import annotations

import copy
import math
from typing import Any, ClassVar, Iterable, Sequence

from ..errors import ShiftbenchError
from ..registry import metric_info

__all__ = ["Metric", "PerSampleMean", "OrderedMerge", "check_task", "exact_add", "exact_value"]


def exact_add(partials: Sequence[float], values: Iterable[float]) -> list[float]:
    """The exact sum of ``partials`` (a previous result, or ``[]``) and ``values``, as non-overlapping floats.

    Shewchuk's error-free transformation (the representation ``math.fsum`` works on): the returned list
    sums exactly, without rounding, to the real sum of everything added so far, so ``exact_value`` of
    it is the correctly rounded total whatever the grouping and order of the additions. Merging two
    exact sums is ``exact_add(a, b)``. Inputs must be finite.

    >>> exact_value(exact_add(exact_add([], [0.1, 0.2]), [0.3])) == exact_value(exact_add([], [0.1, 0.2, 0.3]))
    True
    """
    out = [float(p) for p in partials]
    for x in values:
        x = float(x)
        kept = 0
        for y in out:
            if abs(x) < abs(y):
                x, y = y, x
            high = x + y
            low = y - (high - x)  # the rounding error of high, exactly representable
            if low:
                out[kept] = low
                kept += 1
            x = high
        out[kept:] = [x]
    return out


def exact_value(partials: Sequence[float]) -> float:
    """The correctly rounded value of an :func:`exact_add` sum (0.0 for an empty one)."""
    return math.fsum(partials)


class Metric:
    """Accumulates predictions batch by batch; ``compute`` turns the state into named values."""

    name: ClassVar[str] = ""
    task: ClassVar[str] = "any"
    higher_is_better: ClassVar[bool] = True
    # attributes that hold resources (encoders, models), not accumulated data: never saved, rebuilt by
    # the constructor
    resources: ClassVar[tuple[str, ...]] = ()
    # constructor settings that must agree for two states to merge (k of top-k, ece's bins, ...)
    config: ClassVar[tuple[str, ...]] = ()
    # what the metric reads of every sample besides the model's outputs, in words ("" for nothing): the
    # registry shows it (``shiftbench list metrics``) and ``check_samples`` asks it of a run's first batch
    needs: ClassVar[str] = ""

    def __init__(self) -> None:
        self.n = 0
        self.reset()

    def reset(self) -> None:  # pragma: no cover - every metric overrides it
        raise NotImplementedError

    def update(self, predictions: Any, targets: Any) -> None:  # pragma: no cover - protocol
        raise NotImplementedError

    def compute(self) -> dict[str, float]:  # pragma: no cover - protocol
        raise NotImplementedError

    def update_from_samples(self, outputs: Any, samples: Sequence[Any]) -> None:
        """``update(outputs, sample_targets(samples))``: what the runner calls."""
        self.update(outputs, self.sample_targets(samples))

    def sample_targets(self, samples: Sequence[Any]) -> Any:
        """What ``update`` takes as targets, read from the samples: a one-line ShiftbenchError naming the first
        sample without what the metric ``needs``. The base: the samples themselves (a metric reading nothing)."""
        return list(samples)

    def check_samples(self, samples: Sequence[Any]) -> None:
        """Raise the error ``update_from_samples`` would raise for what ``samples`` lack, without any output:
        what a run asks of its first batch before any model work (``engine.evaluate``), so a dry run that
        passes is a run whose first batch the metric can score."""
        self.sample_targets(samples)

    def check_model(self, model: Any) -> None:
        """Raise a one-line ShiftbenchError when the metric cannot score ``model``'s outputs though it has the
        metric's task (a class-agnostic segmenter for ``miou``); asked before any model work."""

    def state(self) -> dict[str, Any]:
        """Extra JSON-serialisable data beyond ``compute`` (empty unless a metric has some)."""
        return {}

    def per_sample(self) -> dict[str, tuple[str, "Any"]]:
        """Row metric name -> (kind, float64 values in data order); ``{}`` without per-sample data."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """The accumulated data (every attribute but ``resources``), so a run can stop and resume."""
        return {k: v for k, v in vars(self).items() if k not in self.resources}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a ``state_dict``."""
        vars(self).update({k: v for k, v in state.items() if k not in self.resources})

    def merge(self, other: "Metric") -> "Metric":  # pragma: no cover - every metric overrides it
        """Fold ``other``'s accumulated data into this metric (associative; a fresh metric is the
        identity) and return ``self``; ``other`` is left as it was."""
        raise NotImplementedError

    def fresh(self) -> "Metric":
        """An empty metric with this one's settings, sharing its resources (a loaded encoder): what a
        batch or a shard accumulates into before its state is saved or merged."""
        part = copy.copy(self)
        part.reset()  # reset binds new containers: nothing accumulated is shared with self
        return part

    def merge_state(self, state: dict[str, Any]) -> "Metric":
        """Merge a saved ``state_dict`` (of a batch or a shard) into this metric; returns ``self``."""
        part = self.fresh()
        part.load_state_dict(state)
        return self.merge(part)

    def check_mergeable(self, other: "Metric") -> None:
        """Raise ShiftbenchError unless ``other`` is the same metric with the same settings."""
        if type(other) is not type(self):
            raise ShiftbenchError(f"cannot merge a {type(other).__name__} state into {self.name!r}")
        for key in self.config:
            if getattr(self, key) != getattr(other, key):
                raise ShiftbenchError(f"cannot merge {self.name!r} states with different {key}: "
                                      f"{getattr(self, key)!r} and {getattr(other, key)!r}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, n={self.n})"


class PerSampleMean(Metric):
    """A metric whose value is the mean of one number per sample, kept in data order: its per-sample values are
    the report's (kind ``mean``), two parts merge by joining their lists, and ``compute`` sums exactly (fsum), so
    a split run equals one pass. Subclasses add the samples' values in ``update`` through :meth:`add`."""

    def reset(self) -> None:
        self.n = 0
        self._values: list[float] = []

    def add(self, values: Iterable[float]) -> None:
        values = [float(v) for v in values]
        self._values.extend(values)
        self.n += len(values)

    def merge(self, other: "PerSampleMean") -> "PerSampleMean":
        self.check_mergeable(other)
        self._values = self._values + list(other._values)
        self.n += other.n
        return self

    def per_sample(self) -> dict[str, tuple[str, "Any"]]:
        import numpy as np

        if not self.n or len(self._values) != self.n:
            return {}
        return {self.name: ("mean", np.asarray(self._values, np.float64))}

    def compute(self) -> dict[str, float]:
        return {self.name: math.fsum(self._values) / self.n if self.n else float("nan")}


class OrderedMerge:
    """Merges numbered parts (batches, shards) in number order whatever order they arrive in: the parts
    0..k-1 are merged as soon as they are all there, a later one waits for the gap to fill. Parts
    ``0..count-1`` merged this way equal one pass over the data in order (order matters to
    detection's tie-breaking and to metrics that keep per-sample lists).

    >>> from shiftbench.metrics import Top1
    >>> parts = {b: Top1() for b in range(3)}
    >>> for b, (p, y) in enumerate([([[0, 1]], [1]), ([[1, 0]], [1]), ([[0, 1]], [1])]): parts[b].update(p, y)
    >>> merger = OrderedMerge(Top1())
    >>> for b in (2, 0, 1): merger.add(b, parts[b])
    >>> merger.result(3).compute()
    {'top1': 0.6666666666666666}
    """

    def __init__(self, template: Metric):
        self.total = template.fresh()
        self.next = 0  # the first part not merged yet
        self.waiting: dict[int, Metric] = {}

    def add(self, index: int, part: Metric) -> None:
        if index < self.next or index in self.waiting:
            raise ShiftbenchError(f"{self.total.name}: part {index} was merged already")
        self.waiting[index] = part
        while self.next in self.waiting:
            self.total.merge(self.waiting.pop(self.next))
            self.next += 1

    def result(self, count: int) -> Metric:
        """The merge of parts ``0..count-1``; an error naming the missing parts if any is absent."""
        if self.next != count or self.waiting:
            missing = sorted(set(range(count)) - set(range(self.next)) - set(self.waiting))
            extra = sorted(b for b in self.waiting if b >= count)
            raise ShiftbenchError(f"{self.total.name}: cannot merge {count} parts: missing {missing[:10]}"
                                  + (f", unexpected {extra[:10]}" if extra else ""))
        return self.total


def check_task(metric: Any, model: Any) -> None:
    """Raise ShiftbenchError unless the metric can score the model's outputs."""
    task = metric_info(metric).task
    model_task = getattr(model, "task", None)
    if task == "any" or model_task == task:
        return
    raise ShiftbenchError(
        f"metric {getattr(metric, 'name', metric)!r} scores {task} models, but "
        f"{getattr(model, 'name', model)!r} is a {model_task} model"
    )
