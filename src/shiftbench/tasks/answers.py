"""Matching a model's free-text answer to a class, without a judge model.

**Normalisation** (:func:`normalise`, applied to answers and class names alike): Unicode NFKC, case folded;
apostrophes are dropped (``potter's wheel`` is ``potters wheel``, ``it's`` is ``its``); every other character
that is not a letter, digit or combining mark becomes a space (so ``man-eater`` is ``man eater`` and
``St. Bernard`` is ``st bernard``); the articles *a*, *an*, *the* are dropped as whole
words; whitespace collapsed.

**Classes** (:class:`Vocabulary`): per class a tuple of synonyms, the first its display name. ImageNet's are
its WordNet lemmas (``great white shark, white shark, man-eater, ...``); another dataset's are its own names.
Some synonyms belong to several classes (ImageNet's ``crane``: the bird and the machine; ``maillot``).

**Rules** of :func:`match_answer`, in order:

1. *Multiple choice* (``options`` given: the classes lettered A, B, ...). An answer that is a lone letter
   picks that option: ``B``, ``b``, ``(B)``, ``[B]``, ``B.``, ``B)``, ``B:``, ``B) goldfish``, ``B. goldfish``,
   ``Answer: B``, ``The answer is B``, ``Option B``, ``**B**``. A letter followed by a space and a word
   (``A goldfish``) is not a letter: it reads as an article. A letter beyond the options matches nothing
   (``none``). An answer without a letter is matched by its text against the *options'* synonyms only
   (rule 2 restricted to them).
2. *Text*. The whole normalised answer equal to a synonym -> ``exact``. Otherwise every synonym that occurs
   in the answer as whole words is found; a match lying inside a longer match is dropped (``great white
   shark`` is not also ``shark``). The classes of the matches left: one -> ``phrase``; several ->
   ``ambiguous`` (no label, the classes in ``candidates``); none -> ``none``. A synonym shared by several
   classes is ambiguous between them, also as an exact answer.

There is no reading of negation: "not a goldfish but a tench" names two classes and is ambiguous.
Matching an answer costs a few dictionary look-ups per word (the synonyms are hashed by their normalised
words, the scan stops at the first n-gram that starts no synonym).

:func:`match_yes_no` reads the first word (after an optional ``answer`` / ``the answer is``): *yes*,
*yeah*, *yep*, *yup* -> True; *no*, *nope*, *nah* -> False; anything else -> None (``I cannot tell``,
``There is a goldfish``).

>>> vocab = Vocabulary.from_names(["tench", "goldfish", "great white shark, white shark", "shark"])
>>> match_answer("A Great-White Shark!", vocab)
Match(label=2, how='exact', candidates=(2,))
>>> match_answer("I think it is a great white shark.", vocab).label
2
>>> match_answer("a tench or a goldfish", vocab)
Match(label=None, how='ambiguous', candidates=(0, 1))
>>> match_answer("(b)", vocab, options=(3, 1, 0)), match_answer("E", vocab, options=(3, 1, 0)).how
(Match(label=1, how='letter', candidates=(1,)), 'none')
>>> match_yes_no("Yes, there is."), match_yes_no("NO!"), match_yes_no("I cannot tell")
(True, False, None)
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable, Sequence

from ..errors import ShiftbenchError

__all__ = ["normalise", "Vocabulary", "Match", "match_answer", "match_yes_no", "MATCH_KINDS", "letter_choice"]

MATCH_KINDS = ("exact", "phrase", "letter", "yes", "no", "none", "ambiguous")
ARTICLES = frozenset({"a", "an", "the"})
YES = frozenset({"yes", "yeah", "yep", "yup"})
NO = frozenset({"no", "nope", "nah"})
_ASCII_DROP = re.compile(r"[^0-9a-z]+")
_APOSTROPHES = re.compile("['\u2019\u02bc]")  # joined, not split: "potter's" is "potters", "it's" is "its"


@lru_cache(maxsize=4096)
def _kept(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LNM"


def normalise(text: str) -> str:
    """Case, punctuation, articles and spacing removed (see the module docstring).

    >>> normalise("  The GREAT-white   shark!! ")
    'great white shark'
    """
    text = _APOSTROPHES.sub("", unicodedata.normalize("NFKC", str(text)).casefold())
    if text.isascii():
        text = _ASCII_DROP.sub(" ", text)
    else:
        text = unicodedata.normalize("NFKC", text)
        text = "".join(ch if _kept(ch) else " " for ch in text)
    return " ".join(w for w in text.split() if w not in ARTICLES)


def _synonyms(name: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in str(name).split(", ") if s.strip())


@dataclass(frozen=True)
class Vocabulary:
    """Per class its synonyms, the first its display name; an empty tuple is a slot no answer can name."""

    names: tuple[tuple[str, ...], ...]
    _index: dict[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    _prefixes: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.names, (str, bytes)) or not all(
                isinstance(c, (tuple, list)) and all(isinstance(s, str) for s in c) for c in self.names):
            raise ShiftbenchError("Vocabulary: names must be, per class, a sequence of synonym strings")
        object.__setattr__(self, "names", tuple(tuple(c) for c in self.names))
        index: dict[str, list[int]] = {}
        prefixes: set[str] = set()
        for cls, synonyms in enumerate(self.names):
            for syn in synonyms:
                key = normalise(syn)
                if not key:
                    continue
                if cls not in index.setdefault(key, []):
                    index[key].append(cls)
                words = key.split()
                prefixes.update(" ".join(words[:n]) for n in range(1, len(words) + 1))
        object.__setattr__(self, "_index", {k: tuple(v) for k, v in index.items()})
        object.__setattr__(self, "_prefixes", frozenset(prefixes))

    def __len__(self) -> int:
        return len(self.names)

    def classes_of(self, synonym: str) -> tuple[int, ...]:
        """The classes a synonym names (after normalisation), in class order."""
        return self._index.get(normalise(synonym), ())

    @property
    def words(self) -> frozenset[str]:
        """Every normalised word of every synonym."""
        return frozenset(w for k in self._index for w in k.split())

    @classmethod
    def from_names(cls, names: Iterable[Any]) -> "Vocabulary":
        """Each class its own name; a name with ``", "`` lists synonyms (``"tench, Tinca tinca"``)."""
        return cls(tuple(_synonyms(n) for n in names))

    @classmethod
    def imagenet(cls) -> "Vocabulary":
        """The 1,000 ImageNet-1k classes (sorted-wnid order), their WordNet lemmas as synonyms."""
        return _imagenet()

    @classmethod
    def for_space(cls, label_space: Any) -> "Vocabulary":
        """A :class:`~shiftbench.labelspace.LabelSpace`'s classes: each slot's display name (and its plain
        variants: ``kite (bird of prey)`` also ``kite``, ``cardboard box / carton`` also each side), and for
        slots identified by wnid their WordNet lemmas. Unused slots get no synonyms."""
        lemmas = _lemmas_by_wnid() if getattr(label_space, "id_kind", "") == "wnid" else {}
        ids = tuple(label_space.ids or ())
        out = []
        for i, name in enumerate(label_space.class_names):
            if ids and ids[i] == "":
                out.append(())
                continue
            syn = _variants(name) + (lemmas.get(ids[i], ()) if lemmas else ())
            out.append(tuple(dict.fromkeys(syn)))
        return cls(tuple(out))


def _variants(name: str) -> tuple[str, ...]:
    """A display name and its plain forms: without a trailing ``(...)``, each side of ``" / "``."""
    out = list(_synonyms(name)) or [str(name)]
    base = re.sub(r"\s*\([^)]*\)\s*$", "", str(name)).strip()
    if base and base != name:
        out.append(base)
    if " / " in str(name):
        out += [p.strip() for p in str(name).split(" / ") if p.strip()]
    return tuple(out)


def _classes_tsv() -> list[list[str]]:
    text = resources.files("shiftbench").joinpath("data", "imagenet", "classes.tsv").read_text("utf-8")
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    header = lines[0].split("\t")
    rows = [ln.split("\t") for ln in lines[1:]]
    return [[r[header.index("wnid")], r[header.index("lemmas")]] for r in rows]


@lru_cache(maxsize=1)
def _lemmas_by_wnid() -> dict[str, tuple[str, ...]]:
    return {wnid: _synonyms(lemmas) for wnid, lemmas in _classes_tsv()}


@lru_cache(maxsize=1)
def _imagenet() -> Vocabulary:
    return Vocabulary(tuple(_synonyms(lemmas) for _, lemmas in _classes_tsv()))


@dataclass(frozen=True)
class Match:
    """How an answer matched: the class (None when none or several), ``how`` (one of :data:`MATCH_KINDS`)
    and the ``candidates`` found (the class itself, or the classes of an ambiguous answer)."""

    label: int | None
    how: str
    candidates: tuple[int, ...] = ()


NONE = Match(None, "none")

_LETTER = re.compile(
    r"""^[\s*"'`_]*
    (?:(?:the\s+)?(?:correct\s+|right\s+|best\s+|final\s+)?(?:answer|option|choice)(?:\s+is)?\s*[:\-]?\s*)?
    [*"'`_]*
    (?:[(\[]\s*([a-z])\s*[)\]]|([a-z])(?=[.):,*"`_]|\s*$))""",
    re.IGNORECASE | re.VERBOSE)


def letter_choice(answer: str) -> int | None:
    """The option an answer picks by letter (0 for A), or None when it gives no lone letter."""
    m = _LETTER.match(str(answer))
    if m is None:
        return None
    letter = m.group(1) or m.group(2)
    return ord(letter.upper()) - ord("A") if letter.isascii() else None


Span = tuple[int, int, tuple[int, ...]]  # (first word, end word, classes)


def _spans(words: list[str], vocab: Vocabulary, allowed: frozenset[int] | None) -> list[Span]:
    """Every (start, end, classes) of a synonym occurring as whole words; classes limited to ``allowed``."""
    out = []
    index, prefixes = vocab._index, vocab._prefixes
    for i in range(len(words)):
        phrase = words[i]
        j = i + 1
        while phrase in prefixes:
            classes = index.get(phrase)
            if classes and allowed is not None:
                classes = tuple(c for c in classes if c in allowed)
            if classes:
                out.append((i, j, classes))
            if j == len(words):
                break
            phrase += " " + words[j]
            j += 1
    return out


def _outcome(classes: Iterable[int], how: str) -> Match:
    found = tuple(sorted(set(classes)))
    if not found:
        return NONE
    if len(found) == 1:
        return Match(found[0], how, found)
    return Match(None, "ambiguous", found)


def _match_text(answer: str, vocab: Vocabulary, allowed: frozenset[int] | None) -> Match:
    text = normalise(answer)
    if not text:
        return NONE
    whole = vocab._index.get(text)
    if whole and allowed is not None:
        whole = tuple(c for c in whole if c in allowed)
    if whole:
        return _outcome(whole, "exact")
    spans = _spans(text.split(), vocab, allowed)
    kept = [s for s in spans if not any(o[0] <= s[0] and s[1] <= o[1] and o[1] - o[0] > s[1] - s[0] for o in spans)]
    return _outcome((c for s in kept for c in s[2]), "phrase")


def match_answer(answer: str, vocab: Vocabulary, options: Sequence[int] = ()) -> Match:
    """The class an answer names (rules in the module docstring); ``options``: the lettered classes of a
    multiple-choice question, in letter order."""
    options = tuple(int(o) for o in options)
    if options:
        pick = letter_choice(answer)
        if pick is not None:
            return Match(options[pick], "letter", (options[pick],)) if pick < len(options) else NONE
        return _match_text(answer, vocab, frozenset(options))
    return _match_text(answer, vocab, None)


def match_yes_no(answer: str) -> bool | None:
    """True for a yes, False for a no, None for anything else (the first word decides; see the module
    docstring)."""
    words = normalise(answer).split()
    if words[:1] == ["answer"]:
        words = words[2:] if words[1:2] == ["is"] else words[1:]
    first = words[0] if words else ""
    return True if first in YES else False if first in NO else None
