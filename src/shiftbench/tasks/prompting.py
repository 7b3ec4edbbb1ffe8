"""Prompts as data: the questions an image-text-to-text model is asked about an image's class.

A :class:`PromptSpec` (the spec's ``prompt:`` section) picks a kind and, optionally, a custom template:

==================  ==================================================================  ===================
kind                questions per sample                                                 placeholders
==================  ==================================================================  ===================
``open``            one: the template as it is                                           ``{classes}``
``multiple_choice`` one: the true class and ``options - 1`` distractors, lettered A, B,  ``{options}``
                    ... in a seeded order, one option per line (``A. goldfish``)         (required)
``yes_no``          ``options``: one per class asked (the true class once, distractors  ``{class_name}``
                    the rest), in a seeded order                                         (required), ``{article}``
==================  ==================================================================  ===================

``{classes}`` (every class name, comma separated) may appear in any template; ``{article}`` is ``a`` or
``an`` for the class asked. The built-in templates live in ``shiftbench/data/prompts/vqa.json``, per
dataset (``default`` for every dataset without its own). Distractors are drawn without replacement from
the other classes, skipping unused slots and classes whose name is the true class's (ImageNet's CLIP names
repeat ``missile``); the only randomness is a generator seeded per sample from (seed, sample id,
``"prompt"``), so the same seed and id give the same questions on every machine.

>>> names = ["tench", "goldfish", "great white shark", "tiger shark", "hammerhead"]
>>> [q] = questions(PromptSpec("multiple_choice", options=3), "img-7", 1, names, seed=0)
>>> sorted(q.options) == sorted(set(q.options)) and 1 in q.options and len(q.options) == 3
True
>>> print(q.prompt.splitlines()[1][:3])
A. 
>>> [q.asks for q in questions(PromptSpec("yes_no", options=2), "img-7", 1, names, 0)].count(1)
1
>>> PromptSpec.parse({"kind": "multiple_choice", "options": 5}).as_dict()["options"]
5
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

from ..errors import ShiftbenchError
from ..prompting import LETTERS, PROMPT_KINDS, PromptSpec, UNUSED_NAMES, templates, template
from ..shifts.base import make_rng

__all__ = ["PROMPT_KINDS", "PromptSpec", "Question", "questions", "templates", "template", "LETTERS"]

@dataclass(frozen=True)
class Question:
    """One question: the ``prompt`` text, the classes of its lettered ``options`` (A, B, ... in order) for
    multiple choice, and for yes/no the class it ``asks`` about."""

    prompt: str
    options: tuple[int, ...] = ()
    asks: int | None = None


def _key(name: str) -> str:
    return " ".join(str(name).casefold().split())


@lru_cache(maxsize=16)
def _pool(names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Per class its name key, and the classes a distractor may be: used slots, the first of each name."""
    keys = tuple(_key(n) for n in names)
    seen: set[str] = set()
    first = []
    for i, k in enumerate(keys):
        if names[i] not in UNUSED_NAMES and k not in seen:
            seen.add(k)
            first.append(i)
    return keys, tuple(first)


def _asked(label: Any, sample_id: str, names: tuple[str, ...], k: int, seed: int) -> list[int]:
    """The true class and up to ``k - 1`` distractors with other names, in a seeded random order."""
    keys, pool = _pool(names)
    others = [c for c in pool if keys[c] != keys[label]]
    rng = make_rng(seed, sample_id, "prompt")
    drawn = rng.choice(len(others), size=min(k - 1, len(others)), replace=False) if others else []
    chosen = [label] + [others[int(j)] for j in drawn]
    return [chosen[int(j)] for j in rng.permutation(len(chosen))]


def _article(name: str) -> str:
    return "an" if name[:1].lower() in "aeiou" else "a"


def _check_label(label: Any, sample_id: str, kind: str, n: int) -> int:
    if label is None:
        raise ShiftbenchError(f"sample {sample_id!r}: a prompt of kind {kind!r} needs the sample's label, "
                              "and it has none")
    if isinstance(label, bool) or not isinstance(label, int) and not hasattr(label, "__index__"):
        raise ShiftbenchError(f"sample {sample_id!r}: label {label!r} is not a class index")
    if not 0 <= int(label) < n:
        raise ShiftbenchError(f"sample {sample_id!r}: label {int(label)} is outside the {n} classes asked about")
    return int(label)


def questions(spec: PromptSpec, sample_id: str, label: int | None, class_names: Sequence[str], seed: int,
              dataset: str | None = None) -> list[Question]:
    """The questions for one sample (see the module docstring); ``dataset`` picks its built-in template."""
    names = tuple(str(n) for n in class_names)
    text = spec.resolved_text(dataset)
    listed = ", ".join(n for n in names if n not in UNUSED_NAMES)
    if spec.kind == "open":
        return [Question(text.format(classes=listed))]
    label = _check_label(label, str(sample_id), spec.kind, len(names))
    if names[label] in UNUSED_NAMES:
        raise ShiftbenchError(f"sample {sample_id!r}: label {label} is an unused slot of the label space")
    order = _asked(label, str(sample_id), names, spec.options, seed)
    if spec.kind == "multiple_choice":
        lines = "\n".join(f"{LETTERS[i]}. {names[c]}" for i, c in enumerate(order))
        return [Question(text.format(options=lines, classes=listed), tuple(order))]
    return [Question(text.format(class_name=names[c], article=_article(names[c]), classes=listed), asks=c)
            for c in order]
