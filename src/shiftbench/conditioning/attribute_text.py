"""Pascal-EA attribute set, edit prompts, and caption decomposition / rule-based attribute insertion.

The attribute set is data (``ATTRIBUTES``); a caption is split into domain / subject (+ adjectives) /
action / background, and an attribute word is inserted in front of the subject, deterministically:

>>> insert_attribute("a horse on the grass", "violet")
'a violet horse on the grass'
>>> decompose_caption("a photo of a brown horse running on the grass").subject
'horse'
>>> edit_prompt("a photo of a dog", "material", "wood")
'a photo of a wooden dog'
>>> edit_prompt("a dog in a park", "style", "sketch")
'a pencil sketch of a dog in a park'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import ShiftbenchError
from ..seeds import check_seed

__all__ = [
    "ATTRIBUTES", "FAMILIES", "LOCAL_FAMILIES", "ATTRIBUTE_WORDS", "STYLE_TEMPLATES", "Caption",
    "check_attribute", "decompose_caption", "insert_attribute", "edit_prompt", "object_words", "rewrite_caption",
]

# The Pascal-EA attribute set (REFERENCE.md section 2); style is global (mask = whole image).
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "color": ("violet", "pink", "multi-color"),
    "material": ("wood", "stone", "metal", "paper"),
    "pattern": ("dotted", "striped"),
    "style": ("snowy", "painting", "sketch"),
}
FAMILIES: tuple[str, ...] = tuple(ATTRIBUTES)
LOCAL_FAMILIES: frozenset[str] = frozenset({"color", "material", "pattern"})

# The adjective inserted in front of the subject for local edits.
ATTRIBUTE_WORDS: dict[str, str] = {
    "violet": "violet", "pink": "pink", "multi-color": "multi-colored",
    "wood": "wooden", "stone": "stone", "metal": "metal", "paper": "paper",
    "dotted": "dotted", "striped": "striped",
}
# Style edits rewrite the whole caption: ``{caption}`` is the caption without its domain phrase.
STYLE_TEMPLATES: dict[str, str] = {
    "snowy": "{caption} in the snow, snowy winter scene",
    "painting": "an oil painting of {caption}",
    "sketch": "a pencil sketch of {caption}",
}

# Domain phrases a captioner puts in front ("a photo of", "an image showing" ...).
_DOMAIN = re.compile(
    r"^\s*(?:(?:a|an|the)\s+)?(?:(?:close[- ]up|black and white|blurry|color|colour)\s+)?"
    r"(?:photo(?:graph)?|picture|image|painting|drawing|sketch|rendering|shot|view)\s+(?:of|showing|with)\s+",
    re.IGNORECASE,
)
_ARTICLES = {"a", "an", "the", "some", "two", "three", "several", "many", "this", "that", "one"}
# Words that end the subject phrase: an action verb (-ing / is / are) or a background preposition.
_PREPOSITIONS = {"on", "in", "at", "near", "under", "over", "above", "below", "beside", "behind", "by",
                 "next", "with", "against", "across", "along", "inside", "outside", "through", "into",
                 "onto", "from", "front", "among", "between", "of"}
_AUX = {"is", "are", "was", "were", "being", "that", "which", "who"}
_COLOUR_WORDS = {"red", "green", "blue", "yellow", "black", "white", "brown", "grey", "gray", "orange",
                 "purple", "violet", "pink", "golden", "silver", "dark", "light", "colorful", "colourful"}


@dataclass(frozen=True)
class Caption:
    """A caption split into parts; ``join()`` gives the text back."""

    domain: str          # "a photo of" (may be empty)
    article: str         # "a", "the", "two" (may be empty)
    adjectives: list[str] = field(default_factory=list)
    subject: str = ""    # the head noun phrase, e.g. "horse" or "teddy bear"
    action: str = ""     # "running", "is standing"
    background: str = ""  # "on the grass"

    def join(self) -> str:
        parts = [self.domain, self.article, *self.adjectives, self.subject, self.action, self.background]
        return " ".join(p for p in parts if p)


def check_attribute(family: str, value: str) -> str:
    """Validate (family, value) against the attribute set; returns the value."""
    if family not in ATTRIBUTES:
        raise ShiftbenchError(f"unknown attribute family {family!r}; choose one of {', '.join(FAMILIES)}")
    if value not in ATTRIBUTES[family]:
        raise ShiftbenchError(
            f"{family} value {value!r} is not in the attribute set; choose one of {', '.join(ATTRIBUTES[family])}"
        )
    return value


def decompose_caption(caption: str, subject: str | None = None) -> Caption:
    """Split ``caption`` into domain / article / adjectives / subject / action / background.

    Rule-based and deterministic: the subject phrase runs from the first word after the domain and
    article to the word before the first verb (``-ing``, ``is``/``are``) or background preposition; its
    last word is the head noun, the words before it adjectives. Give ``subject`` (e.g. the class name)
    to pin the head noun when it is known.
    """
    if not isinstance(caption, str) or not caption.strip():
        raise ShiftbenchError("caption must be a non-empty string")
    text = " ".join(caption.strip().rstrip(".").split())
    m = _DOMAIN.match(text)
    domain = text[: m.end()].strip() if m else ""
    words = text[m.end():].split() if m else text.split()
    article = ""
    if words and words[0].lower() in _ARTICLES:
        article, words = words[0], words[1:]
    if subject:
        sub = subject.lower().split()
        for i in range(len(words) - len(sub) + 1):
            if [w.lower().strip(",") for w in words[i:i + len(sub)]] == sub:
                rest = words[i + len(sub):]
                action, background = _split_rest(rest)
                return Caption(domain, article, words[:i], " ".join(words[i:i + len(sub)]), action, background)
    end = len(words)
    for i, w in enumerate(words):
        lw = w.lower().strip(",")
        if i > 0 and (lw in _PREPOSITIONS or lw in _AUX or (lw.endswith("ing") and len(lw) > 4)):
            end = i
            break
    phrase = words[:end]
    if not phrase:
        return Caption(domain, article, [], "", *_split_rest(words[end:]))
    action, background = _split_rest(words[end:])
    return Caption(domain, article, phrase[:-1], phrase[-1].rstrip(","), action, background)


def _split_rest(words: list[str]) -> tuple[str, str]:
    """Action words come first (verbs, auxiliaries), then the background from the first preposition."""
    for i, w in enumerate(words):
        if w.lower() in _PREPOSITIONS:
            return " ".join(words[:i]), " ".join(words[i:])
    return " ".join(words), ""


def insert_attribute(caption: str, value: str, subject: str | None = None) -> str:
    """Insert a local attribute's adjective in front of the subject phrase (colour and material edits
    drop the old colour adjectives); ``"a horse on the grass" -> "a violet horse on the grass"``.

    The word goes first in the phrase so that an unknown compound subject ("teddy bear") stays whole.
    """
    if value not in ATTRIBUTE_WORDS:
        known = ", ".join(ATTRIBUTE_WORDS)
        raise ShiftbenchError(f"attribute {value!r} has no adjective to insert (local attributes: {known})")
    parts = decompose_caption(caption, subject)
    word = ATTRIBUTE_WORDS[value]
    adjectives = list(parts.adjectives)
    if value in ATTRIBUTES["color"] or value in ATTRIBUTES["material"]:
        adjectives = [a for a in adjectives if a.lower() not in _COLOUR_WORDS]
    if word in (a.lower() for a in adjectives):
        return parts.join()
    article = parts.article
    if article.lower() in ("a", "an"):  # the article must agree with the new first word
        article = ("an" if word[0] in "aeiou" else "a") if article.islower() else ("An" if word[0] in "aeiou" else "A")
    return Caption(parts.domain, article, [word] + adjectives, parts.subject, parts.action, parts.background).join()


def edit_prompt(caption: str, family: str, value: str, subject: str | None = None) -> str:
    """The target prompt of an edit: a local attribute inserted, or the caption in a style template."""
    check_attribute(family, value)
    if family in LOCAL_FAMILIES:
        return insert_attribute(caption, value, subject)
    parts = decompose_caption(caption, subject)
    body = Caption("", parts.article, parts.adjectives, parts.subject, parts.action, parts.background).join()
    return STYLE_TEMPLATES[value].format(caption=body)


def object_words(caption: str, family: str, value: str, subject: str | None = None) -> list[str]:
    """The words whose tokens get the cross-attention boost: the inserted adjective and the subject."""
    check_attribute(family, value)
    parts = decompose_caption(caption, subject)
    words = parts.subject.split()
    if family in LOCAL_FAMILIES:
        words = [ATTRIBUTE_WORDS[value]] + words
    return words


def rewrite_caption(caption: str, family: str, value: str, rewriter: Callable[[str, int], str] | None = None,
                    seed: int = 0, subject: str | None = None) -> str:
    """The edit prompt, optionally rewritten by a language model hook ``rewriter(prompt, seed) -> str``.

    The hook gets a seed derived from ``seed`` so that a sampling model is reproducible; its output
    must still contain the attribute word (else the rule-based prompt is an error, not a silent fallback).
    """
    prompt = edit_prompt(caption, family, value, subject)
    if rewriter is None:
        return prompt
    derived = int(np.random.SeedSequence([check_seed(seed), sum(map(ord, prompt))]).generate_state(1)[0])
    out = rewriter(prompt, derived)
    if not isinstance(out, str) or not out.strip():
        raise ShiftbenchError("caption rewriter returned an empty or non-string caption")
    word = ATTRIBUTE_WORDS.get(value, value).split("-")[0].lower()
    if family in LOCAL_FAMILIES and word not in out.lower():
        raise ShiftbenchError(f"caption rewriter dropped the attribute {value!r}: {out!r}")
    return out.strip()
