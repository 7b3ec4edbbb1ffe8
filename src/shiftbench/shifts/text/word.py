"""Word-level text corruptions: misspelling, repetition and homophone.

Misspellings and homophones come from the word lists in ``shiftbench/data/text`` (sources and
licences beside them); a word is replaced only when its lower-case form is in the list and its case
is lower, Title or UPPER, and the replacement takes that case.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from ...registry import SHIFTS
from ._core import TextCorruption, WordCorruption, letter_words

__all__ = ["Misspelling", "Repetition", "Homophone", "misspellings", "homophones"]


def _data_lines(name: str) -> list[str]:
    text = resources.files("shiftbench").joinpath("data", "text", name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line and not line.startswith("#")]


@lru_cache(maxsize=1)
def misspellings() -> dict[str, tuple[str, ...]]:
    """Correct word -> its common misspellings (``data/text/misspellings_en.tsv``, CC BY-SA 3.0)."""
    table = {}
    for line in _data_lines("misspellings_en.tsv"):
        word, _, wrongs = line.partition("\t")
        table[word] = tuple(wrongs.split())
    return table


@lru_cache(maxsize=1)
def homophones() -> dict[str, tuple[str, ...]]:
    """Word -> the other words of its homophone group (``data/text/homophones_en.tsv``, CMU dict)."""
    table: dict[str, tuple[str, ...]] = {}
    for line in _data_lines("homophones_en.tsv"):
        group = line.split()
        for word in group:
            table[word] = tuple(w for w in group if w != word)
    return table


@SHIFTS.register("text_misspelling", group="text", level="word")
class Misspelling(WordCorruption):
    """Replace words with a common misspelling of them ("because" -> "becuase"), keeping case."""

    def lexicon(self) -> dict[str, tuple[str, ...]]:
        return misspellings()


@SHIFTS.register("text_homophone", group="text", level="word")
class Homophone(WordCorruption):
    """Replace words with a homophone ("their" -> "there", "two" -> "too"), keeping case."""

    def lexicon(self) -> dict[str, tuple[str, ...]]:
        return homophones()


_HYPHENS = frozenset("-\u2010\u2011")


@SHIFTS.register("text_repetition", group="text", level="word")
class Repetition(TextCorruption):
    """Repeat words ("the dog" -> "the the dog"): the copy follows the word after a space."""

    level = "word"

    def units(self, text: str) -> list[tuple[int, str]]:
        # any word of letters, short ones included ("the the" is the commonest repetition slip);
        # numbers are not repeated ("2 2 dogs" would read as a different count), nor halves of
        # hyphenated compounds ("e-mail mail")
        return [(p, w) for p, w in letter_words(text)
                if text[p - 1 : p] not in _HYPHENS and text[p + len(w) : p + len(w) + 1] not in _HYPHENS]

    def edit(self, position: int, token: str, choice: float) -> list[Any]:
        return ["insert", position + len(token), "", " " + token]
