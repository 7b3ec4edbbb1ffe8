"""Question answering: an image-text-to-text model (``Answerer``: ``answer(images, prompts)``) asked about each
image's class, its answers matched to the classes without a judge model (tasks/answers.py).

The prompt is the spec's ``prompt:`` section (tasks/prompting.py: an open question, multiple choice with
lettered options in a seeded order per sample, or yes/no about the true class and seeded distractors), the
classes the dataset's label space (WordNet lemmas as synonyms for ImageNet's). Per sample the task keeps every
question, answer and match; its score is the share of its questions answered right (open and multiple
choice: one question, 1 or 0; yes/no: the share of its questions answered right), and its *unmatched* share
the answers that name no class (no letter, no yes or no): an answer that names nothing is counted wrong for
accuracy and counted again in ``unmatched_rate``, so a model that refuses more under a shift shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import numpy as np

from ..errors import ShiftbenchError
from ..models.base import as_image_list
from ..sample import Sample
from .answers import Match, Vocabulary, match_answer, match_yes_no
from .base import Task
from .labels import LabelPlan, dataset_label_space
from .prompting import PromptSpec, Question, questions

__all__ = ["QuestionAnswering", "Answered"]


@dataclass(frozen=True)
class Answered:
    """One sample asked: its questions, the model's answers and how each matched (``matches``: a class or
    None for open / multiple-choice questions, True/False/None for yes/no ones)."""

    questions: tuple[Question, ...]
    answers: tuple[str, ...]
    matches: tuple[Any, ...]
    label: int | None
    kind: str
    names: tuple[str, ...] = field(default=(), repr=False)

    @property
    def right(self) -> tuple[bool, ...]:
        if self.kind == "yes_no":
            return tuple(m is not None and m == (q.asks == self.label) for q, m in zip(self.questions, self.matches))
        return tuple(isinstance(m, Match) and m.label is not None and m.label == self.label for m in self.matches)

    @property
    def unmatched(self) -> tuple[bool, ...]:
        if self.kind == "yes_no":
            return tuple(m is None for m in self.matches)
        return tuple(not isinstance(m, Match) or m.label is None for m in self.matches)

    @property
    def score(self) -> float:
        right = self.right
        return float(np.mean(right)) if right else 0.0

    @property
    def unmatched_share(self) -> float:
        un = self.unmatched
        return float(np.mean(un)) if un else 0.0

    @property
    def pred(self) -> int | None:
        """The class the answers name: the matched class (open, multiple choice), the one class answered yes."""
        if self.kind == "yes_no":
            yes = [q.asks for q, m in zip(self.questions, self.matches) if m is True]
            return yes[0] if len(yes) == 1 else None
        m = self.matches[0] if self.matches else None
        return m.label if isinstance(m, Match) else None


class QuestionAnswering(Task):
    """Image-text-to-text models asked about each image's class (``answer``), answers matched to the classes."""

    name: ClassVar[str] = "question_answering"
    default_metrics: ClassVar[tuple[str, ...]] = ("answer_accuracy", "unmatched_rate")
    record_keys: ClassVar[frozenset[str]] = frozenset({"label", "prompts", "answers", "matched", "pred", "pred_name",
                                                       "correct", "score", "unmatched"})

    def __init__(self) -> None:
        self.prompt = PromptSpec()
        self.seed = 0
        self.names: tuple[str, ...] = ()
        self.vocabulary: Vocabulary | None = None
        self.dataset: str | None = None

    def configure(self, prompt: PromptSpec | None, seed: int, space: Any, dataset: str | None = None) -> None:
        """The run's prompt, seed, classes (the label plan's space) and dataset name (its own templates in
        data/prompts/vqa.json, where it has some), before the first batch."""
        self.prompt = prompt or PromptSpec()
        self.dataset = dataset
        self.seed = int(seed)
        self.names = tuple(space.class_names)
        self.vocabulary = Vocabulary.for_space(space)

    def plan_labels(self, model: Any, dataset: Any, label_map: Any = None, dataset_name: str = "dataset",
                    class_subset: Any = None) -> LabelPlan:
        """The dataset's classes are the model's: it is asked about them by name."""
        name = getattr(model, "name", type(model).__name__)
        if class_subset is not None:
            raise ShiftbenchError(f"model {name!r} answers questions; a class subset restricts classifiers' outputs only")
        space = dataset_label_space(dataset, "classification")
        if space is None:
            raise ShiftbenchError(f"model {name!r} is asked about {dataset_name}'s classes, but {dataset_name} declares "
                                  "no class names (label_space or class_names)")
        return LabelPlan(model, self.name, None, space.num_classes, output_space=space)

    def check_samples(self, samples: Sequence[Sample]) -> None:
        """What the prompt needs of each sample, asked before any model work (the dry run too): its questions
        can be made (a class label in the space for multiple choice and yes/no)."""
        for s in samples:
            questions(self.prompt, str(s.id), s.label, self.names, self.seed, dataset=self.dataset)

    def predict(self, model: Any, samples: Sequence[Sample]) -> list[Answered]:
        if self.vocabulary is None:
            raise ShiftbenchError("question_answering: the task is not configured (configure(prompt, seed, space))")
        asked = [tuple(questions(self.prompt, str(s.id), s.label, self.names, self.seed, dataset=self.dataset))
                 for s in samples]
        images = [s.image for s, qs in zip(samples, asked) for _ in qs]
        prompts = [q.prompt for qs in asked for q in qs]
        answers = self.ask(model, images, prompts)
        out, k = [], 0
        for s, qs in zip(samples, asked):
            mine = tuple(answers[k:k + len(qs)])
            k += len(qs)
            out.append(Answered(qs, mine, tuple(self._match(q, a) for q, a in zip(qs, mine)), s.label,
                                self.prompt.kind, self.names))
        return out

    def ask(self, model: Any, images: Sequence[Any], prompts: Sequence[str]) -> list[str]:
        """``model.answer`` checked: one str per (image, prompt)."""
        images = as_image_list(images)
        out = list(model.answer(images, list(prompts)))
        name = getattr(model, "name", type(model).__name__)
        if len(out) != len(prompts) or not all(isinstance(a, str) for a in out):
            raise ShiftbenchError(f"model {name!r} gave {len(out)} answers for {len(prompts)} questions "
                                  "(expected one str each)")
        return out

    def predict_images(self, model: Any, images: Sequence[Any]) -> list[str]:
        """Answers to the prompt's question about each image (open questions only: the others need a label)."""
        if self.prompt.kind != "open":
            raise ShiftbenchError(f"question_answering: a {self.prompt.kind} prompt needs each sample's label; "
                                  "predict on samples")
        [q] = questions(self.prompt, "image", None, self.names, self.seed, dataset=self.dataset)
        return self.ask(model, images, [q.prompt] * len(images))

    def _match(self, q: Question, answer: str) -> Any:
        if q.asks is not None:
            return match_yes_no(answer)
        assert self.vocabulary is not None
        return match_answer(answer, self.vocabulary, q.options)

    def record(self, outputs: list[Answered], i: int, s: Sample, model, space=None) -> dict[str, Any]:
        a = outputs[i]
        names = tuple((space.class_names if space is not None else self.names) or ())
        pred = a.pred
        matched = [(names[m.label] if m.label is not None and m.label < len(names) else None) if isinstance(m, Match)
                   else m for m in a.matches]
        return {"label": s.label, "prompts": [q.prompt for q in a.questions], "answers": list(a.answers),
                "matched": matched, "pred": pred, "pred_name": names[pred] if pred is not None else "(unmatched)",
                "correct": bool(a.score == 1.0), "score": a.score, "unmatched": a.unmatched_share}
