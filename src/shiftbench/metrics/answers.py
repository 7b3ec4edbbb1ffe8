"""Question-answering metrics (tasks/question_answering.py): the share of questions answered right, and the
share of answers that name no class (unmatched: a refusal, a description, an option that does not exist).

The predictions are the task's per-sample records of what was asked and answered (anything with ``score``, the
share of that sample's questions answered right, and ``unmatched_share``); both metrics keep one value per sample
(``mean``: the report's intervals and paired tests over samples) and merge like one pass (exact sums).

>>> class A:  # a sample asked once, answered right; another answered with no class
...     def __init__(self, s, u): self.score, self.unmatched_share = s, u
>>> m = AnswerAccuracy(); m.update([A(1.0, 0.0), A(0.0, 1.0)], None); m.compute()
{'answer_accuracy': 0.5}
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from ..errors import ShiftbenchError
from .base import PerSampleMean

__all__ = ["AnswerAccuracy", "UnmatchedRate"]


class _PerSample(PerSampleMean):
    task: ClassVar[str] = "question_answering"
    attribute: ClassVar[str] = ""
    needs: ClassVar[str] = ("what the question-answering task asked and matched (its prompts need a class label "
                            "for multiple choice and yes/no, and the dataset's class names)")

    def sample_targets(self, samples: Sequence[Any]) -> None:
        return None  # the task's records carry the labels they were matched against

    def update(self, predictions: Any, targets: Any) -> None:
        values = []
        for p in predictions:
            v = getattr(p, self.attribute, None)
            if v is None or not 0.0 <= float(v) <= 1.0:
                raise ShiftbenchError(f"metric {self.name!r} scores the question-answering task's records (with "
                                      f"{self.attribute} in [0, 1]); got {type(p).__name__}")
            values.append(float(v))
        self.add(values)


class AnswerAccuracy(_PerSample):
    """Share of questions answered right (an answer naming no class counts wrong), per sample, averaged."""

    name = "answer_accuracy"
    higher_is_better = True
    attribute = "score"


class UnmatchedRate(_PerSample):
    """Share of answers that name no class (no class name or synonym, no option letter, no yes or no)."""

    name = "unmatched_rate"
    higher_is_better = False
    attribute = "unmatched_share"
