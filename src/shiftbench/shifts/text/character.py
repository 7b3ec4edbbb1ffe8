"""Character-level text corruptions: swap, qwerty, remove_char and remove_space.

Eligible words are tokens of letters only (``str.isalpha``: any script) with at least
``MIN_LETTERS`` letters; words that touch a digit, an underscore, an apostrophe or a combining mark
("3rd", "don't", "cafe" + U+0301) are left alone. One edit per chosen word.
"""

from __future__ import annotations

from typing import Any

from ...registry import SHIFTS
import re

from ._core import MIN_LETTERS, TextCorruption, letter_words

__all__ = ["Swap", "Qwerty", "RemoveChar", "RemoveSpace", "QWERTY_NEIGHBOURS"]


def _qwerty_neighbours() -> dict[str, str]:
    """Letter keys touching each letter key on a US QWERTY keyboard (rows offset to the right).

    A key at column c of a row touches c - 1 and c + 1 on its row, c and c + 1 on the row above
    and c - 1 and c on the row below. Only letters: a typo keeps a word made of letters.
    """
    rows = ["qwertyuiop", "asdfghjkl", "zxcvbnm"]
    neighbours: dict[str, str] = {}
    for r, row in enumerate(rows):
        for c, key in enumerate(row):
            near = []
            for rr, cols in ((r, (c - 1, c + 1)), (r - 1, (c, c + 1)), (r + 1, (c - 1, c))):
                if 0 <= rr < len(rows):
                    near += [rows[rr][cc] for cc in cols if 0 <= cc < len(rows[rr])]
            neighbours[key] = "".join(sorted(near))
    return neighbours


_DIGIT = re.compile(r"\d")
_TRIPLE = re.compile(r"(\w)\1\1")

#: Lower-case letter -> its neighbouring letter keys (sorted).
QWERTY_NEIGHBOURS: dict[str, str] = _qwerty_neighbours()


def _letter_words(text: str) -> list[tuple[int, str]]:
    return letter_words(text, MIN_LETTERS)


# Words recur in any corpus, so the options of a word are computed once. A plain dict emptied when
# full is a bounded cache several times cheaper per hit than functools.lru_cache.
_CACHE_SIZE = 1 << 16
_swap_cache: dict[str, tuple[int, ...]] = {}
_qwerty_cache: dict[str, tuple[tuple[int, str], ...]] = {}


def _swap_options(word: str) -> tuple[int, ...]:
    options = _swap_cache.get(word)
    if options is None:
        if len(_swap_cache) >= _CACHE_SIZE:
            _swap_cache.clear()
        options = _swap_cache[word] = tuple(i for i in range(len(word) - 1) if word[i] != word[i + 1])
    return options


def _qwerty_options(word: str) -> tuple[tuple[int, str], ...]:
    options = _qwerty_cache.get(word)
    if options is None:
        if len(_qwerty_cache) >= _CACHE_SIZE:
            _qwerty_cache.clear()
        # every (letter position, neighbour) pair is one option, so one uniform number picks both
        options = _qwerty_cache[word] = tuple(
            (i, near) for i, ch in enumerate(word) for near in QWERTY_NEIGHBOURS.get(ch.lower(), ""))
    return options


@SHIFTS.register("text_swap", group="text", level="char")
class Swap(TextCorruption):
    """Swap two adjacent, different letters inside a word ("house" -> "hosue")."""

    def units(self, text: str) -> list[tuple[int, str]]:
        # a word of one repeated letter ("aaa") has nothing to swap; such a word holds a run of
        # three equal letters, so texts without one (nearly all) skip the check
        words = _letter_words(text)
        if _TRIPLE.search(text) is None:
            return words
        return [(p, w) for p, w in words if w.count(w[0]) != len(w)]

    def edit(self, position: int, token: str, choice: float) -> list[Any]:
        options = _swap_options(token)
        i = options[min(int(choice * len(options)), len(options) - 1)]
        return ["swap", position + i, token[i : i + 2], token[i + 1] + token[i]]


@SHIFTS.register("text_qwerty", group="text", level="char")
class Qwerty(TextCorruption):
    """Replace one letter of a word with a neighbouring key on a QWERTY keyboard, keeping case."""

    def units(self, text: str) -> list[tuple[int, str]]:
        # only ASCII letters have keys; a word needs at least one of them
        if text.isascii():  # every ASCII letter has a key
            return _letter_words(text)
        return [(p, w) for p, w in _letter_words(text) if _qwerty_options(w)]

    def edit(self, position: int, token: str, choice: float) -> list[Any]:
        options = _qwerty_options(token)
        i, near = options[min(int(choice * len(options)), len(options) - 1)]
        old = token[i]
        return ["substitute", position + i, old, near.upper() if old.isupper() else near]


@SHIFTS.register("text_remove_char", group="text", level="char")
class RemoveChar(TextCorruption):
    """Delete one letter of a word ("table" -> "tabe")."""

    def units(self, text: str) -> list[tuple[int, str]]:
        return _letter_words(text)

    def edit(self, position: int, token: str, choice: float) -> list[Any]:
        i = min(int(choice * len(token)), len(token) - 1)
        return ["delete", position + i, token[i], ""]


@SHIFTS.register("text_remove_space", group="text", level="char")
class RemoveSpace(TextCorruption):
    """Delete the space before a word, merging it with the word before ("red car" -> "redcar")."""

    def units(self, text: str) -> list[tuple[int, str]]:
        # a single ASCII space between a token without digits and a word (a letter follows):
        # deleting it glues the word onto the token before ("red car" -> "redcar", "cups, plates"
        # -> "cups,plates"). Runs of spaces and other whitespace are layout and stay; numbers are
        # never merged ("2 dogs" would read "2dogs", "3rd bowl" "3rdbowl", "12 34" "1234").
        units = []
        find, rfind = text.find, text.rfind
        has_digit = _DIGIT.search
        i = find(" ", 1)
        last = len(text) - 1
        while 0 < i < last:
            if (text[i + 1].isalpha() and not text[i - 1].isspace()
                    and not has_digit(text, rfind(" ", 0, i) + 1, i)):
                units.append((i, " "))
            i = find(" ", i + 1)
        return units

    def edit(self, position: int, token: str, choice: float) -> list[Any]:
        return ["delete", position, " ", ""]
