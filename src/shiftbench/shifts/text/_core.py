"""The machinery shared by the seven text corruptions: words, the severity rule, edits, Levenshtein.

A corruption finds the *units* it may change in a text (words, or spaces between words), draws two
uniform numbers per unit from the per-sample generator (a priority and a choice), edits the
``ceil(fraction[severity] * units)`` units of lowest priority, and records each change as an edit
``[op, position, old, new]`` on the original text. ``apply_text`` only splices those edits in, so
replay from params is exact, and because the draws of a unit do not depend on the severity, the
edits of severity s are a subset of those of severity s + 1.

The draws are ``rng.random(2 * n)`` and nothing else: the first values of a generator's stream do
not depend on how many are asked for, so a batch of texts that share a generator (strings without
sample ids) reads one shared stream, drawn once, instead of building a generator per text; an
ASCII batch is then planned and edited all at once (``TextCorruption._batch_ascii_words``).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate
from typing import Any, ClassVar, NamedTuple, Sequence

import numpy as np

from ...errors import ShiftbenchError
from ...sample import content_id
from ...severity import interpolate
from ..base import TextShift, check_params, text_of

__all__ = [
    "FRACTIONS", "MIN_LETTERS", "fraction", "TextEdit", "TextChanges", "TextCorruption", "WordCorruption",
    "edits_to_apply", "levenshtein", "units_to_change", "word_spans", "letter_words", "match_case",
]

#: Fraction of the eligible units changed at severity 1..5 (monotone; at least one unit when any). The rate is
#: a dial: between whole severities it is linear (``fraction(2.5)`` = 0.25), so any real severity in 1..5 works.
FRACTIONS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5)


def fraction(severity: float) -> float:
    """The rate of ``severity``: FRACTIONS' entry at a whole severity, linear between them.

    >>> fraction(3), fraction(2.5)
    (0.3, 0.25)
    """
    return float(interpolate(FRACTIONS, severity, integer="float"))

#: Character-level corruptions leave words shorter than this alone ("a", "on", "to" stay readable).
MIN_LETTERS = 3


def units_to_change(n_units: int, severity: int) -> int:
    """How many of ``n_units`` eligible units severity ``severity`` changes: ceil(fraction * n).

    >>> [units_to_change(12, s) for s in range(1, 6)]
    [2, 3, 4, 5, 6]
    >>> units_to_change(1, 1), units_to_change(0, 5), units_to_change(12, 2.5)
    (1, 0, 3)
    """
    # the small epsilon keeps float noise (0.3 * 10 = 3.0000000000000004) from adding a unit
    return math.ceil(fraction(severity) * n_units - 1e-9) if n_units > 0 else 0


@lru_cache(maxsize=1)
def _token_regex() -> re.Pattern[str]:
    """Word tokens: runs of word characters and combining marks, with inner apostrophes.

    Combining marks are folded into the token (so "cafe\u0301" is one token) and then make it
    ineligible (it is not ``isalpha``): editing a letter under a mark would move the accent.
    """
    marks = []
    # every combining mark lives in planes 0-1 or among the variation selectors of plane 14
    for lo, hi in ((0, 0x20000), (0xE0000, 0xE1000)):
        start = None
        for cp in range(lo, hi):
            is_mark = unicodedata.category(chr(cp))[0] == "M"
            if is_mark and start is None:
                start = cp
            elif not is_mark and start is not None:
                marks.append((start, cp - 1))
                start = None
    ranges = "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in marks)
    body = f"[\\w{ranges}]+"
    return re.compile(f"{body}(?:['\u2019]{body})*")


def word_spans(text: str) -> list[tuple[int, str]]:
    """``(start, token)`` of every word token; tokens with digits, marks or apostrophes included.

    >>> word_spans("Two dogs, 3 cats")
    [(0, 'Two'), (4, 'dogs'), (10, '3'), (12, 'cats')]
    """
    return [(m.start(), m.group()) for m in _token_regex().finditer(text)]


# For ASCII text (no marks, no curly apostrophes) one small regex finds exactly the tokens of
# word_spans that are made of letters: a letter run not touching a word character, nor an
# apostrophe that joins it to one. The general token regex is several times slower.
_ASCII_LETTER_WORDS = {
    min_len: re.compile(rf"(?<!\w)(?<!\w')[A-Za-z]{{{min_len},}}(?!\w)(?!'\w)") for min_len in (1, MIN_LETTERS)
}


# the same, as a splitting pattern: split() returns [gap, word, gap, word, ..., gap] at C speed
_ASCII_LETTER_SPLIT = {k: re.compile(f"({p.pattern})") for k, p in _ASCII_LETTER_WORDS.items()}


def letter_words(text: str, min_len: int = 1) -> list[tuple[int, str]]:
    """``(start, word)`` of the tokens made only of letters (any script), at least ``min_len`` long.

    >>> letter_words("Two dogs' 3rd don't cafe\u0301 go", min_len=3)
    [(0, 'Two'), (4, 'dogs')]
    """
    if text.isascii() and min_len in _ASCII_LETTER_WORDS:
        return [(m.start(), m.group()) for m in _ASCII_LETTER_WORDS[min_len].finditer(text)]
    return [(p, w) for p, w in word_spans(text) if len(w) >= min_len and w.isalpha()]


def match_case(source: str, replacement: str) -> str | None:
    """``replacement`` in the case pattern of ``source`` (lower, Title or UPPER); None for mixed case.

    >>> match_case("Their", "there"), match_case("THEIR", "there"), match_case("iPhone", "x")
    ('There', 'THERE', None)
    """
    if source.islower():
        return replacement
    if source.isupper():
        return replacement.upper() if len(source) > 1 else replacement[:1].upper() + replacement[1:]
    if source[:1].isupper() and source[1:].islower():
        return replacement[:1].upper() + replacement[1:]
    return None


class TextEdit(NamedTuple):
    """One change: ``old`` at ``position`` of the original text became ``new``."""

    op: str  # "swap", "substitute", "delete", "insert" or "replace"
    position: int
    old: str
    new: str


@dataclass(frozen=True)
class TextChanges:
    """What a corruption changed: its edits on the original text and the Levenshtein distance."""

    original: str
    corrupted: str
    edits: tuple[TextEdit, ...]
    distance: int

    @property
    def changed(self) -> bool:
        return self.original != self.corrupted


def levenshtein(a: str, b: str) -> int:
    """Levenshtein distance (insert, delete, substitute; cost 1 each), bit-parallel (Hyyro 2001).

    Each column of the dynamic-programming table is kept as bit vectors in Python integers, so the
    cost is one handful of integer operations per character of ``a``.

    >>> levenshtein("kitten", "sitting"), levenshtein("", "abc"), levenshtein("ab", "ba")
    (3, 3, 2)
    """
    if a == b:
        return 0
    m = len(b)
    if m == 0:
        return len(a)
    if not a:
        return m
    peq: dict[str, int] = {}
    for i, ch in enumerate(b):
        peq[ch] = peq.get(ch, 0) | (1 << i)
    full = (1 << m) - 1
    top = 1 << (m - 1)
    pv, mv, score = full, 0, m
    for ch in a:
        eq = peq.get(ch, 0)
        xv = eq | mv
        xh = ((((eq & pv) + pv) & full) ^ pv) | eq
        ph = (mv | ~(xh | pv)) & full
        mh = pv & xh
        if ph & top:
            score += 1
        elif mh & top:
            score -= 1
        ph = ((ph << 1) | 1) & full
        mh = (mh << 1) & full
        pv = (mh | ~(xv | ph)) & full
        mv = ph & xv
    return score


def edits_to_apply(text: str, edits: Any, shift_name: str) -> str:
    """Splice ``[op, position, old, new]`` edits (sorted, non-overlapping) into ``text``.

    Each edit's ``old`` must be found at its position: params recorded for another text are
    refused instead of producing a silently wrong string.
    """
    if not edits:
        return text
    pieces = []
    cursor = 0
    for edit in edits:
        try:
            _, position, old, new = edit
            end = position + len(old)
        except (TypeError, ValueError):
            raise ShiftbenchError(f"text shift {shift_name!r}: malformed edit {edit!r}; "
                                  "expected [op, position, old, new]") from None
        if position < cursor or text[position:end] != old:
            raise ShiftbenchError(f"text shift {shift_name!r}: edit {edit!r} does not fit this text "
                                  "(params recorded for another text?)")
        pieces.append(text[cursor:position])
        pieces.append(new)
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)


class _SharedStream:
    """The stream of one generator, drawn once and read as a prefix by every text that shares it."""

    def __init__(self, rng: np.random.Generator):
        self._rng = rng
        self._values: list[float] = []

    def prefix(self, n: int) -> list[float]:
        have = len(self._values)
        if n > have:
            # continuing the stream gives the same values as one larger first draw would; the
            # first draw takes just what is asked (a stream per text is read once), later ones more
            self._values.extend(self._rng.random(max(n - have, 256) if have else n).tolist())
        return self._values[:n]


class TextCorruption(TextShift):
    """A text corruption whose params are edits on the original text.

    Subclasses implement ``units(text)`` (the eligible units, as ``(position, token)``) and
    ``edit(position, token, choice)`` (the edit for a unit given a uniform number in [0, 1)).
    """

    level: ClassVar[str] = "char"  # "char" or "word": documentation and the benchmark's grouping
    continuous: ClassVar[bool] = True  # the severity sets a rate (``fraction``): any real severity in 1..5

    # -- to implement -------------------------------------------------------------------------
    def units(self, text: str) -> list[tuple[int, str]]:
        raise NotImplementedError

    def edit(self, position: int, token: str, choice: float) -> list[Any]:
        raise NotImplementedError

    # -- params: draw, then plan ----------------------------------------------------------------
    def plan(self, units: list[tuple[int, str]], severity: int, draws: Sequence[float]) -> list[list[Any]]:
        """The edits for ``units`` given ``2 * len(units)`` uniform draws (priority, choice per unit)."""
        n = len(units)
        k = units_to_change(n, severity)
        if k == 0:
            return []
        if k < n:
            chosen = sorted(sorted(range(n), key=draws[0::2].__getitem__)[:k])
        else:
            chosen = range(n)
        edit = self.edit
        return [edit(units[j][0], units[j][1], draws[2 * j + 1]) for j in chosen]

    def text_params(self, text: str, severity: int, rng: np.random.Generator) -> dict[str, Any]:
        units = self.units(text)
        draws = rng.random(2 * len(units)).tolist() if units else []
        return {"eligible": len(units), "edits": self.plan(units, severity, draws)}

    def apply_text(self, text: str, params: dict[str, Any]) -> str:
        if not isinstance(params, dict) or "edits" not in params:
            raise ShiftbenchError(f"text shift {self.name!r}: params need an 'edits' list, got {params!r}")
        return edits_to_apply(text, params["edits"], self.name)

    # -- what changed -----------------------------------------------------------------------------
    def changes(self, text: str, params: dict[str, Any]) -> TextChanges:
        """The edits and the Levenshtein distance of the corruption ``params`` describe."""
        corrupted = self.apply_text(text, params)
        edits = tuple(TextEdit(*e) for e in params["edits"])
        return TextChanges(text, corrupted, edits, levenshtein(text, corrupted))

    def __call__(self, x: Any, severity: int | None = None, seed: int = 0, sample_id: Any = None,
                 return_params: bool = False, return_changes: bool = False) -> Any:
        """Corrupt ``x`` (str, list of str, Sample caption or Query text).

        ``return_params`` adds the params, ``return_changes`` a :class:`TextChanges` (a list of them
        for a list): ``out``, ``(out, params)``, ``(out, changes)`` or ``(out, params, changes)``.
        """
        if not return_changes:
            return super().__call__(x, severity, seed, sample_id, return_params)
        out, params = super().__call__(x, severity, seed, sample_id, True)
        if isinstance(x, (list, tuple)):
            texts = [self._text(item) for item in x]
            changes: Any = [self.changes(t, p) for t, p in zip(texts, params)]
        else:
            changes = self.changes(self._text(x), params)
        return (out, params, changes) if return_params else (out, changes)

    def _text(self, x: Any) -> str:
        return x if isinstance(x, str) else text_of(x, self.name)

    # -- the fast batch of strings ----------------------------------------------------------------
    def _call_batch(self, items, severity, seed, sample_ids, return_params):
        if not all(isinstance(t, str) for t in items):
            return super()._call_batch(items, severity, seed, sample_ids, return_params)
        if sample_ids is None:  # each text its own stream, picked by its content (as one by one)
            sample_ids = [content_id(t) for t in items]
        elif isinstance(sample_ids, str):
            sample_ids = [sample_ids] * len(items)
        elif len(sample_ids) != len(items):
            raise ShiftbenchError(f"shift {self.name!r}: {len(items)} items but {len(sample_ids)} sample ids")
        if (self.word_min_len is not None and len(items) > 1 and all(sid == sample_ids[0] for sid in sample_ids)
                and all(t.isascii() for t in items) and not any("\x00" in t for t in items)):
            stream = _SharedStream(self.rng(seed, sample_ids[0]))
            return self._batch_ascii_words(items, severity, stream, return_params)
        streams: dict[Any, _SharedStream] = {}
        outs: list[str] = []
        all_params: list[dict[str, Any]] = []
        units_of, plan = self.units, self.plan
        for text, sid in zip(items, sample_ids):
            units = units_of(text)
            if units:
                stream = streams.get(sid)
                if stream is None:
                    stream = streams[sid] = _SharedStream(self.rng(seed, sid))
                edits = plan(units, severity, stream.prefix(2 * len(units)))
                # the edits were just made from this text: splice without re-checking them
                pieces, cursor = [], 0
                for _, position, old, new in edits:
                    pieces.append(text[cursor:position])
                    pieces.append(new)
                    cursor = position + len(old)
                pieces.append(text[cursor:])
                outs.append("".join(pieces))
            else:
                edits = []
                outs.append(text)
            if return_params:
                all_params.append(check_params({"eligible": len(units), "edits": edits}, self.name))
        return (outs, all_params) if return_params else outs

    # The units of many corruptions are the letter words of the text (at least ``word_min_len``
    # letters) that ``keep_words`` accepts. For those, a batch of ASCII texts that share one
    # generator stream is planned all at once: one regex split of the joined texts finds every
    # word, NumPy ranks the priorities within each text, and the edits are written in one pass
    # (as bytes with NumPy for the character-level ones, see ``vector_edits``). The result is the
    # same as text by text (tested); only the bookkeeping is batched.
    word_min_len: ClassVar[int | None] = None

    def keep_words(self, joined: str, words: list[str]) -> list[int] | None:
        """Indices of the eligible words of a batch; None when all are."""
        return None

    def vector_edits(self, chars: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                     choices: np.ndarray) -> tuple[str, np.ndarray, np.ndarray | None] | None:
        """One single-character edit per chosen word, for all at once: ``(op, positions, new)``.

        ``chars`` are the bytes of the joined ASCII batch, ``starts``/``lengths`` the chosen words,
        ``choices`` their uniform draws; op is "swap" (positions p, p + 1), "substitute" (new
        bytes) or "delete". None: use ``edit`` word by word.
        """
        return None

    # a vectorised kernel: kept whole (issue 26 allows kernels over 80 lines)
    def _batch_ascii_words(self, texts: list[str], severity: int, stream: _SharedStream,
                           return_params: bool) -> Any:
        joined = "\x00".join(texts)  # NUL is not a word character: it bounds words like a text end
        parts = _ASCII_LETTER_SPLIT[self.word_min_len].split(joined)
        words = parts[1::2]
        starts = list(accumulate(map(len, parts), initial=0))[1:-1:2]
        text_starts = np.fromiter(accumulate((len(t) + 1 for t in texts), initial=0), np.int64, len(texts) + 1)
        kept = self.keep_words(joined, words) if words else None
        if kept is not None:
            words = [words[i] for i in kept]
            starts = [starts[i] for i in kept]
        n_texts = len(texts)
        if not words:
            empty = [check_params({"eligible": 0, "edits": []}, self.name) for _ in texts] if return_params else None
            return (list(texts), empty) if return_params else list(texts)
        starts_arr = np.asarray(starts, np.int64)
        text_of = np.searchsorted(text_starts, starts_arr, side="right") - 1
        counts = np.bincount(text_of, minlength=n_texts)
        first = np.concatenate(([0], np.cumsum(counts)[:-1]))
        local = np.arange(len(words)) - first[text_of]
        draws = np.asarray(stream.prefix(2 * int(counts.max())))
        priority = draws[2 * local]
        # the same count as units_to_change, in the same float64 arithmetic
        k = np.where(counts > 0, np.ceil(fraction(severity) * counts - 1e-9), 0).astype(np.int64)
        order = np.lexsort((priority, text_of))  # stable, as sorted() text by text
        rank = np.empty(len(words), np.int64)
        rank[order] = np.arange(len(words)) - first[text_of[order]]
        chosen_arr = np.flatnonzero(rank < k[text_of])
        choices_arr = draws[2 * local[chosen_arr] + 1]
        per_text: list[list[list[Any]]] | None = [[] for _ in texts] if return_params else None

        chars = np.frombuffer(joined.encode("ascii"), np.uint8)
        lengths = np.fromiter(map(len, words), np.int64, len(words))[chosen_arr]
        vector = self.vector_edits(chars, starts_arr[chosen_arr], lengths, choices_arr)
        if vector is not None:
            op, positions, new = vector
            if op == "delete":
                keep_mask = np.ones(len(chars), bool)
                keep_mask[positions] = False
                out_chars = chars[keep_mask]
            else:
                out_chars = chars.copy()
                if op == "swap":
                    out_chars[positions] = chars[positions + 1]
                    out_chars[positions + 1] = chars[positions]
                else:
                    out_chars[positions] = new
            outs = out_chars.tobytes().decode("ascii").split("\x00")
            if per_text is not None:
                owners = text_of[chosen_arr].tolist()
                width = 2 if op == "swap" else 1
                for owner, p, in zip(owners, positions.tolist()):
                    old = joined[p : p + width]
                    replacement = old[::-1] if op == "swap" else "" if op == "delete" else None
                    per_text[owner].append([op, p - int(text_starts[owner]), old, replacement])
                if op == "substitute":
                    subs = iter(new.tobytes().decode("ascii"))
                    for edits in per_text:
                        for e in edits:
                            e[3] = next(subs)
        else:
            chosen = chosen_arr.tolist()
            choices = choices_arr.tolist()
            owners = text_of[chosen_arr].tolist()
            offsets = text_starts.tolist()
            edit = self.edit
            pieces, cursor = [], 0
            for j, choice, owner in zip(chosen, choices, owners):
                offset = offsets[owner]
                e = edit(starts[j] - offset, words[j], choice)
                position = e[1] + offset
                pieces.append(joined[cursor:position])
                pieces.append(e[3])
                cursor = position + len(e[2])
                if per_text is not None:
                    per_text[owner].append(e)
            pieces.append(joined[cursor:])
            outs = "".join(pieces).split("\x00")
        if per_text is None:
            return outs
        params = [check_params({"eligible": n, "edits": e}, self.name) for n, e in zip(counts.tolist(), per_text)]
        return outs, params

    def apply_texts(self, texts: Sequence[str], params: Sequence[dict[str, Any]]) -> list[str]:
        """Replay many texts from their params (a plain splice per text: no regex, no draws)."""
        return [self.apply_text(t, p) for t, p in zip(texts, params)]


class WordCorruption(TextCorruption):
    """A corruption that replaces whole words with alternatives from a word list, keeping case."""

    level: ClassVar[str] = "word"

    def lexicon(self) -> dict[str, tuple[str, ...]]:
        raise NotImplementedError

    word_min_len = 1

    def keep_words(self, joined: str, words: list[str]) -> list[int] | None:
        lexicon = self.lexicon()
        return [i for i, w in enumerate(words) if w.lower() in lexicon and match_case(w, "x") is not None]

    def units(self, text: str) -> list[tuple[int, str]]:
        lexicon = self.lexicon()
        return [(p, w) for p, w in letter_words(text) if w.lower() in lexicon and match_case(w, "x") is not None]

    def edit(self, position: int, token: str, choice: float) -> list[Any]:
        options = self.lexicon()[token.lower()]
        replacement = options[min(int(choice * len(options)), len(options) - 1)]
        return ["replace", position, token, match_case(token, replacement)]
