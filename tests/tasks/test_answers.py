"""Answer matching without a judge (tasks/answers.py): normalisation, class names and synonyms, letters,
yes/no, over generated answers."""

from __future__ import annotations

import string

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import shiftbench as sb
from shiftbench.errors import ShiftbenchError
from shiftbench.labelspace import LabelSpace
from shiftbench.tasks.answers import (ARTICLES, MATCH_KINDS, Match, Vocabulary, letter_choice, match_answer,
                                      match_yes_no, normalise)

IMAGENET = Vocabulary.imagenet()
SYNONYMS = sorted({(c, s) for c, syns in enumerate(IMAGENET.names) for s in syns})
PUNCT = "!?.,;:'\"()[]-_/*…¡¿«»"

punct = st.text(alphabet=PUNCT + " \t\n", max_size=4)
article = st.sampled_from(["", "a ", "an ", "the ", "A ", "The ", "AN ", "tHe "])


def recase(text: str, flips: list[bool]) -> str:
    return "".join(ch.upper() if f else ch.lower() for ch, f in zip(text, flips + [False] * len(text)))


# -- normalise ------------------------------------------------------------------------------------------

@given(st.text(max_size=40))
def test_normalise_is_idempotent(text):
    once = normalise(text)
    assert normalise(once) == once
    assert once == once.strip() and "  " not in once
    assert not ARTICLES & set(once.split())


@given(st.lists(st.text(alphabet=string.ascii_letters + string.digits + "éßøü", min_size=1, max_size=8),
                max_size=6), st.lists(st.booleans(), max_size=60), st.lists(punct, min_size=7, max_size=7), st.lists(article, max_size=7))
def test_normalise_ignores_case_punctuation_articles_and_spacing(words, flips, seps, articles):
    plain = " ".join(words)
    messy = "".join(seps[i % 7] + " " + (articles[i] if i < len(articles) else "") + recase(w, flips)
                    for i, w in enumerate(words)) + seps[-1]
    assert normalise(messy) == normalise(plain)


def test_normalise_examples():
    assert normalise("  The GREAT-white   shark!! ") == "great white shark"
    assert normalise("St. Bernard") == "st bernard"
    assert normalise("Straße") == normalise("STRASSE") == "strasse"
    assert normalise("ﬁsh") == "fish"  # NFKC: the ligature is two letters
    assert normalise("Café au lait") == "café au lait"
    assert normalise("an apple, a pear and the plum") == "apple pear and plum"
    assert normalise("...") == ""
    assert normalise("It's a potter’s wheel") == "its potters wheel"  # apostrophes join, they do not split


# -- class names and synonyms ---------------------------------------------------------------------------

@settings(max_examples=300)
@given(st.sampled_from(SYNONYMS), st.lists(st.booleans(), max_size=60), punct, punct, article,
       st.sampled_from(["{}", "{}.", "I think it is {}.", "This image shows {}", "{} (I am fairly sure)"]))
def test_every_imagenet_synonym_matches_its_class(item, flips, before, after, art, frame):
    cls, synonym = item
    answer = frame.format(before + art + recase(synonym, flips) + after)
    m = match_answer(answer, IMAGENET)
    owners = IMAGENET.classes_of(synonym)
    assert cls in owners
    if len(owners) == 1:
        assert m.label == cls and m.how in ("exact", "phrase") and m.candidates == (cls,)
    else:  # crane, maillot, ...: one word, several classes
        assert m.label is None and m.how == "ambiguous" and set(owners) <= set(m.candidates)


def test_every_imagenet_synonym_exactly():
    """All of them, not a sample: exact answers name their class, or every class that shares the synonym."""
    for cls, synonym in SYNONYMS:
        m = match_answer(synonym, IMAGENET)
        owners = IMAGENET.classes_of(synonym)
        assert m.how == ("exact" if len(owners) == 1 else "ambiguous"), synonym
        assert m.candidates == owners and (m.label == cls if len(owners) == 1 else m.label is None)


def test_imagenet_shared_lemmas_are_ambiguous():
    assert len(IMAGENET) == 1000
    crane = IMAGENET.classes_of("crane")
    assert len(crane) == 2 and match_answer("A crane.", IMAGENET) == Match(None, "ambiguous", crane)
    assert len(IMAGENET.classes_of("maillot")) == 2
    # a longer, unique lemma settles it
    [construction] = [c for c in crane if "construction" in " ".join(IMAGENET.names[c]).lower()] or [None]
    if construction is not None:
        assert match_answer("it is a crane", IMAGENET, options=(construction, 0, 1)).label == construction


def test_longest_phrase_wins():
    vocab = Vocabulary.from_names(["shark", "great white shark, white shark", "white wine", "wine"])
    assert match_answer("a great white shark", vocab) == Match(1, "exact", (1,))
    assert match_answer("surely a great white shark here", vocab) == Match(1, "phrase", (1,))
    assert match_answer("a shark", vocab).label == 0
    # overlapping, neither inside the other: both count
    assert match_answer("white shark white wine", vocab).how == "ambiguous"
    assert match_answer("the white wine", vocab).label == 2


pairs = st.tuples(st.sampled_from(SYNONYMS), st.sampled_from(SYNONYMS))


def _inside(a: str, b: str) -> bool:
    return f" {normalise(a)} " in f" {normalise(b)} "


@settings(max_examples=200)
@given(pairs, st.sampled_from(["{} or {}", "either {} or {}", "{}, maybe {}", "a {} next to a {}"]))
def test_two_classes_are_ambiguous(pair, frame):
    (i, a), (j, b) = pair
    owners_a, owners_b = IMAGENET.classes_of(a), IMAGENET.classes_of(b)
    assume(set(owners_a) != set(owners_b) and not _inside(a, b) and not _inside(b, a))
    m = match_answer(frame.format(a, b), IMAGENET)
    assert m.how == "ambiguous" and m.label is None
    assert set(owners_a) | set(owners_b) <= set(m.candidates)


WORDS = st.text(alphabet=string.ascii_lowercase + "0123456789", min_size=1, max_size=9)


@settings(max_examples=200)
@given(st.lists(WORDS, max_size=8), st.lists(punct, min_size=9, max_size=9))
def test_words_outside_the_vocabulary_match_nothing(words, seps):
    known = IMAGENET.words
    assume(not any(normalise(w) in known for w in words))
    answer = "".join(s + w for s, w in zip(seps, words))
    assert match_answer(answer, IMAGENET) == Match(None, "none")


@given(st.lists(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=6), min_size=1, max_size=6,
                unique=True), st.data())
def test_generated_vocabularies_match_their_names(names, data):
    names = [n for n in names if n not in ARTICLES | {"its"}]
    assume(names)
    vocab = Vocabulary.from_names(names)
    k = data.draw(st.integers(0, len(names) - 1))
    assert match_answer(f"It's {names[k].upper()}!", vocab).label == k


def test_empty_and_blank_answers_match_nothing():
    for answer in ("", "   ", "...", "the", "a an the"):
        assert match_answer(answer, IMAGENET) == Match(None, "none")
        assert match_answer(answer, IMAGENET, options=(1, 2)) == Match(None, "none")


# -- multiple choice ------------------------------------------------------------------------------------

LETTER_SPELLINGS = ["{}", "{l}", "({})", "({l})", "[{}]", "{}.", "{})", "{}:", "{}) goldfish", "{}. goldfish",
                    "Answer: {}", "answer: ({l})", "The answer is {}", "The answer is {}.", "the correct answer is {}",
                    "Option {}", "**{}**", "  {}  ", "Answer - {}", '"{}"']


@pytest.mark.parametrize("spelling", LETTER_SPELLINGS)
@pytest.mark.parametrize("k", range(4))
def test_letters_in_every_spelling(spelling, k):
    options = (7, 3, 1, 9)
    letter = "ABCD"[k]
    answer = spelling.replace("{l}", letter.lower()).replace("{}", letter)
    assert letter_choice(answer) == k
    assert match_answer(answer, IMAGENET, options) == Match(options[k], "letter", (options[k],))


@given(st.integers(0, 25), st.integers(1, 26), st.sampled_from(LETTER_SPELLINGS))
def test_letter_beyond_the_options_matches_nothing(k, n, spelling):
    options = tuple(range(100, 100 + n))
    answer = spelling.replace("{l}", chr(97 + k)).replace("{}", chr(65 + k))
    m = match_answer(answer, IMAGENET, options)
    assert m == (Match(options[k], "letter", (options[k],)) if k < n else Match(None, "none"))


def test_an_article_is_not_a_letter():
    options = (0, 1, 2)  # tench, goldfish, great white shark
    assert letter_choice("A goldfish") is None
    assert match_answer("A goldfish", IMAGENET, options) == Match(1, "exact", (1,))
    assert match_answer("I'm not sure", IMAGENET, options) == Match(None, "none")
    assert match_answer("The answer is a tench.", IMAGENET, options).label == 0


def test_multiple_choice_text_matches_the_options_only():
    options = (1, 3)  # goldfish, tiger shark
    assert match_answer("a great white shark", IMAGENET, options) == Match(None, "none")
    assert match_answer("a tench or a goldfish", IMAGENET, options).label == 1
    assert match_answer("Tiger shark!", IMAGENET, options) == Match(3, "exact", (3,))
    assert match_answer("goldfish or tiger shark", IMAGENET, options).how == "ambiguous"


# -- yes / no -------------------------------------------------------------------------------------------

@given(st.sampled_from(["yes", "Yes", "YES", "yeah", "Yep", "yup"]), punct,
       st.sampled_from(["", ", there is.", " it is", "! definitely"]))
def test_yes_variants(word, sep, rest):
    assert match_yes_no(word + sep + rest) is True
    assert match_yes_no("Answer: " + word + rest) is True


@given(st.sampled_from(["no", "No", "NO", "nope", "Nah"]), punct,
       st.sampled_from(["", ", it is not.", " there isn't", "."]))
def test_no_variants(word, sep, rest):
    assert match_yes_no(word + sep + rest) is False
    assert match_yes_no("The answer is " + word + rest) is False


@pytest.mark.parametrize("answer", ["I cannot tell", "", "...", "There is a goldfish", "Maybe", "yesterday",
                                    "not sure", "nobody knows", "It is unclear; yes or no cannot be said"])
def test_neither_yes_nor_no(answer):
    assert match_yes_no(answer) is None


# -- vocabularies from label spaces ---------------------------------------------------------------------

def test_vocabulary_of_the_objects_dataset_matches_every_class_name():
    space = sb.load_dataset("objects").label_space
    vocab = Vocabulary.for_space(space)
    assert len(vocab) == space.num_classes
    for i, name in enumerate(space.class_names):
        m = match_answer(name, vocab)
        assert i in m.candidates, name
        assert m.label == i or (m.how == "ambiguous" and len(m.candidates) > 1), name
        assert m.how != "ambiguous" or any(c != i and set(map(normalise, vocab.names[c])) & set(map(normalise,
                                           vocab.names[i])) for c in m.candidates)


def test_vocabulary_for_imagenet_adds_lemmas_and_name_variants():
    vocab = Vocabulary.for_space(LabelSpace.imagenet1k())
    assert vocab.names[2][0] == "great white shark" and "man-eater" in vocab.names[2]
    kite = LabelSpace.imagenet1k().index("kite (bird of prey)")
    assert match_answer("a kite", vocab).label == kite
    box = LabelSpace.imagenet1k().index("cardboard box / carton")
    assert match_answer("carton", vocab).label == box


def test_vocabulary_of_other_spaces_uses_their_names_and_skips_unused_slots():
    coco = LabelSpace.coco91()
    vocab = Vocabulary.for_space(coco)
    assert vocab.names[12] == () and vocab.names[17][0] == "cat"
    assert match_answer("N/A", vocab).how == "none"
    assert match_answer("A cat.", vocab) == Match(17, "exact", (17,))
    custom = Vocabulary.from_names(["tench, Tinca tinca", "goldfish"])
    assert custom.names == (("tench", "Tinca tinca"), ("goldfish",))
    assert match_answer("tinca TINCA", custom).label == 0


def test_match_kinds_are_the_documented_ones():
    vocab = Vocabulary.from_names(["cat", "dog"])
    hows = {match_answer(a, vocab, o).how for a, o in [("cat", ()), ("a cat here", ()), ("cat dog", ()),
                                                       ("fish", ()), ("B", (0, 1))]}
    assert hows <= set(MATCH_KINDS) and hows == {"exact", "phrase", "ambiguous", "none", "letter"}


def test_bad_vocabulary_is_one_line_error():
    with pytest.raises(ShiftbenchError) as e:
        Vocabulary(("cat", "dog"))  # type: ignore[arg-type]
    assert "\n" not in str(e.value)
