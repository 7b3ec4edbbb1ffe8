"""The ObjectCompose prompt sets (class label, caption, colour 1-4, texture 1-4) as data, and filling them in.

The exact strings live in ``shiftbench/data/prompts/objectcompose.json`` (paper Table 6).

>>> prompt("color", 1)
'This is a picture of a vivid red background'
>>> prompt("class_label", class_name="tench")
'This is a picture of a tench'
>>> prompt_names()[:3]
['class_label', 'caption', 'color1']
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from ..errors import ShiftbenchError

__all__ = ["prompt_sets", "prompt", "prompt_names", "resolve_prompt", "FAMILIES"]

FAMILIES = ("class_label", "caption", "color", "texture")


@lru_cache(maxsize=1)
def prompt_sets() -> dict[str, list[str]]:
    """Family -> list of prompt templates (colour and texture have four each)."""
    text = resources.files("shiftbench").joinpath("data/prompts/objectcompose.json").read_text("utf-8")
    data = json.loads(text)
    return {k: list(v) for k, v in data.items() if not k.startswith("_")}


def prompt_names() -> list[str]:
    """Every single prompt by name: class_label, caption, color1..color4, texture1..texture4."""
    names = []
    for family, items in prompt_sets().items():
        names += [family] if len(items) == 1 else [f"{family}{i}" for i in range(1, len(items) + 1)]
    return names


def _check_class_name(class_name: Any) -> str:
    if not isinstance(class_name, str) or not class_name.strip():
        raise ShiftbenchError(f"the class-label prompt needs a non-empty class name, got {class_name!r}")
    if any(c in class_name for c in "{}\n"):
        raise ShiftbenchError(f"class name {class_name!r} cannot go into a prompt (braces or a line break)")
    return class_name.strip()


def prompt(family: str, index: int = 1, class_name: str | None = None, caption: str | None = None) -> str:
    """The ``index``-th (1-based) prompt of ``family``, filled with the class name or the caption."""
    sets = prompt_sets()
    if family not in sets:
        raise ShiftbenchError(f"unknown prompt family {family!r}; choose from {', '.join(sets)}")
    items = sets[family]
    if isinstance(index, bool) or not isinstance(index, int) or not 1 <= index <= len(items):
        raise ShiftbenchError(f"prompt family {family!r} has prompts 1..{len(items)}, got {index!r}")
    template = items[index - 1]
    if "{class_name}" in template:
        return template.replace("{class_name}", _check_class_name(class_name))
    if "{caption}" in template:
        if not isinstance(caption, str) or not caption.strip():
            # never prompt with a placeholder: the paper's released code does that silently
            raise ShiftbenchError("the caption prompt needs a caption: give the sample a caption or a captioner")
        return caption.strip()
    return template


def resolve_prompt(name: str, class_name: str | None = None, caption: str | None = None) -> str:
    """A prompt by its name (``color3``, ``texture1``, ``class_label``, ``caption``) or a literal prompt text.

    A literal may use ``{class_name}``; anything that is not a known name is taken as a literal when it
    contains a space.
    """
    if name in prompt_names():
        family = name.rstrip("0123456789")
        digits = name[len(family):]
        return prompt(family, int(digits) if digits else 1, class_name=class_name, caption=caption)
    if isinstance(name, str) and " " in name.strip():
        return name.replace("{class_name}", _check_class_name(class_name)) if "{class_name}" in name else name
    raise ShiftbenchError(f"unknown prompt {name!r}; use one of {', '.join(prompt_names())} or a sentence")
