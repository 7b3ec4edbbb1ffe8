"""The spec's ``prompt:`` section, typed at the door: what question-answering (image-text-to-text) models are
asked (tasks/prompting.py turns it into each sample's questions; the templates are data,
``shiftbench/data/prompts/vqa.json``). Core-level so that the plan (engine/spec.py) parses it without the tasks.

>>> PromptSpec.parse({"kind": "multiple_choice", "options": 5}).as_dict()["options"]
5
"""

from __future__ import annotations

import copy
import difflib
import json
import string
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from .errors import SpecError

__all__ = ["PROMPT_KINDS", "PromptSpec", "templates", "template", "LETTERS", "PLACEHOLDERS", "UNUSED_NAMES"]

PROMPT_KINDS = ("open", "multiple_choice", "yes_no")
LETTERS = string.ascii_uppercase
PLACEHOLDERS = {"open": frozenset({"classes"}),
                "multiple_choice": frozenset({"options", "classes"}),
                "yes_no": frozenset({"class_name", "article", "classes"})}
REQUIRED = {"open": None, "multiple_choice": "options", "yes_no": "class_name"}
_KEYS = ("kind", "text", "options")
UNUSED_NAMES = ("", "N/A")  # names of unused label slots (labelspace.UNUSED)


@lru_cache(maxsize=1)
def _templates() -> dict[str, Any]:
    text = resources.files("shiftbench").joinpath("data/prompts/vqa.json").read_text("utf-8")
    return json.loads(text)


def templates() -> dict[str, Any]:
    """The built-in templates: dataset name (or ``"default"``) -> kind -> template text (a copy)."""
    return copy.deepcopy({k: v for k, v in _templates().items() if not k.startswith("_")})


def template(kind: str, dataset: str | None = None) -> str:
    """The built-in template of ``kind`` for ``dataset`` (its own when vqa.json has one, else the default)."""
    table = _templates()
    own = table.get(dataset or "default") or {}
    return own.get(kind) or table["default"][kind]


def _fields(text: str, where: str) -> set[str]:
    try:
        return {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except ValueError as e:
        raise SpecError(f"{where}.text: {text!r} is not a valid template ({e}; write a literal brace as {{{{ or }}}})")


def _check_text(text: Any, kind: str, where: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"{where}.text: expected a non-empty string, got {text!r}")
    found = _fields(text, where)
    allowed = PLACEHOLDERS[kind]
    bad = sorted(f for f in found if f not in allowed)
    if bad:
        raise SpecError(f"{where}.text: placeholder {{{bad[0]}}} is not known to a prompt of kind {kind!r} "
                        f"(it may use {', '.join('{' + a + '}' for a in sorted(allowed))})")
    need = REQUIRED[kind]
    if need and need not in found:
        raise SpecError(f"{where}.text: a prompt of kind {kind!r} must contain {{{need}}}, got {text!r}")


def _check_kind(kind: Any, where: str) -> str:
    if isinstance(kind, str) and kind in PROMPT_KINDS:
        return kind
    close = difflib.get_close_matches(str(kind), PROMPT_KINDS, n=1, cutoff=0.5) if isinstance(kind, str) else []
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise SpecError(f"{where}: unknown prompt kind {kind!r} ({hint}kinds: {', '.join(PROMPT_KINDS)})")


@dataclass(frozen=True)
class PromptSpec:
    """Which questions to ask: ``kind`` (one of :data:`PROMPT_KINDS`), a custom template ``text`` (None: the
    built-in one for the dataset), ``options`` (multiple choice: options per question; yes/no: questions per
    sample; 2..26)."""

    kind: str = "open"
    text: str | None = None
    options: int = 4

    def __post_init__(self) -> None:
        self.check("prompt")

    def check(self, where: str) -> None:
        """SpecError naming ``where`` and the bad key when a field is wrong."""
        _check_kind(self.kind, f"{where}.kind")
        if type(self.options) is not int or not 2 <= self.options <= len(LETTERS):
            raise SpecError(f"{where}.options: expected an integer in 2..{len(LETTERS)}, got {self.options!r}")
        if self.text is not None:
            _check_text(self.text, self.kind, where)

    @classmethod
    def parse(cls, value: Any, where: str = "prompt") -> "PromptSpec":
        """A spec's ``prompt:`` value: None (the defaults), a kind name, a mapping {kind, text, options}."""
        if value is None:
            return cls()
        if isinstance(value, PromptSpec):
            return value
        if isinstance(value, str):
            return cls(_check_kind(value, where))
        if not isinstance(value, dict):
            raise SpecError(f"{where}: expected a prompt kind ({', '.join(PROMPT_KINDS)}) or a mapping with keys "
                            f"{', '.join(_KEYS)}, got {type(value).__name__} {value!r}")
        unknown = [k for k in value if k not in _KEYS]
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), _KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SpecError(f"{where}: unknown key {unknown[0]!r} ({hint}keys: {', '.join(_KEYS)})")
        kind = _check_kind(value.get("kind", "open"), f"{where}.kind")
        options, text = value.get("options", 4), value.get("text")
        if type(options) is not int or not 2 <= options <= len(LETTERS):
            raise SpecError(f"{where}.options: expected an integer in 2..{len(LETTERS)}, got {options!r}")
        if text is not None:
            _check_text(text, kind, where)
        return cls(kind, text, options)

    def resolved_text(self, dataset: str | None = None) -> str:
        """The template these questions are rendered from: the custom text or the built-in one."""
        return self.text if self.text is not None else template(self.kind, dataset)

    def as_dict(self, dataset: str | None = None) -> dict[str, Any]:
        """For the run record: kind, the template text in use (built-in ones spelled out) and options.
        ``PromptSpec.parse(spec.as_dict())`` asks the same questions."""
        return {"kind": self.kind, "text": self.resolved_text(dataset), "options": self.options}
