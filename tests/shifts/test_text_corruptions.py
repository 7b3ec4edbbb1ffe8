"""The seven text corruptions: contract, defining properties, severity rule, edge cases, changes."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

import shiftbench as sb
from shiftbench.errors import SeverityError, ShiftbenchError
from shiftbench.registry import SHIFTS
from shiftbench.sample import Query, Sample
from shiftbench.shifts.text import (
    FRACTIONS, TextChanges, TextEdit, homophones, levenshtein, misspellings, units_to_change,
)
from shiftbench.shifts.text._core import letter_words, match_case, word_spans
from shiftbench.shifts.text.character import QWERTY_NEIGHBOURS

NAMES = ["text_swap", "text_qwerty", "text_remove_char", "text_remove_space", "text_misspelling",
         "text_repetition", "text_homophone"]
CHAR_LEVEL = ["text_swap", "text_qwerty", "text_remove_char", "text_remove_space"]


def corpus(n: int = 60, seed: int = 0) -> list[str]:
    """Caption-like sentences mixing common words, list words, capitals, numbers and punctuation."""
    rng = random.Random(seed)
    function = "a the of on in with to and is his her an".split()
    content = sorted(misspellings())[::7] + sorted(homophones())
    extras = ["2", "15", "3rd", "don't", "dog's", "Red", "BLUE", "There", "THEIR", "well-known", "e-mail"]
    out = []
    for _ in range(n):
        words = []
        for _ in range(rng.randint(6, 16)):
            r = rng.random()
            words.append(rng.choice(function) if r < 0.35 else rng.choice(extras) if r < 0.45
                         else rng.choice(content))
        text = " ".join(words)
        if rng.random() < 0.5:
            text = text[0].upper() + text[1:] + rng.choice([".", "!", "?", ","])
        out.append(text.replace(" and ", ", and ", 1))
    return out


TEXTS = corpus()


def shift(name):
    return sb.create_shift(name)


# -- registry -----------------------------------------------------------------------------------
def test_all_seven_registered_in_group_text():
    assert sb.list_shifts("text_*") == sorted(NAMES)
    for name in NAMES:
        entry = SHIFTS.entry(name)
        assert entry.meta["group"] == "text"
        assert entry.meta["level"] == ("char" if name in CHAR_LEVEL else "word")
        assert entry.description
        assert shift(name).kind == "text"


# -- contract -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_output_and_seed_matters(name):
    s = shift(name)
    for severity in (1, 3, 5):
        a = [s(t, severity=severity, seed=11) for t in TEXTS]
        assert a == [s(t, severity=severity, seed=11) for t in TEXTS]
        assert all(type(x) is str for x in a)
    differ = [s(t, severity=5, seed=1) != s(t, severity=5, seed=2) for t in TEXTS]
    assert sum(differ) > len(TEXTS) // 4  # the seed picks the positions


@pytest.mark.parametrize("name", NAMES)
def test_replay_from_params_is_exact_and_params_are_json(name):
    s = shift(name)
    for i, text in enumerate(TEXTS):
        out, params = s(text, severity=1 + i % 5, seed=i, return_params=True)
        assert json.loads(json.dumps(params)) == params
        assert s.replay(text, json.loads(json.dumps(params))) == out
        assert s.apply_text(text, params) == out
    outs, params = s(TEXTS, severity=4, seed=3, return_params=True)
    assert s.apply_texts(TEXTS, params) == outs


@pytest.mark.parametrize("name", NAMES)
def test_list_in_gives_list_out_equal_to_one_by_one(name):
    s = shift(name)
    texts = TEXTS + ["", "a b", "   ", "12 34"]
    for severity in (1, 5):
        assert s(texts, severity=severity, seed=5) == [s(t, severity=severity, seed=5) for t in texts]
        ids = [f"q{i}" for i in range(len(texts))]
        batch, params = s(texts, severity=severity, seed=5, sample_id=ids, return_params=True)
        one = [s(t, severity=severity, seed=5, sample_id=i, return_params=True) for t, i in zip(texts, ids)]
        assert batch == [o for o, _ in one] and params == [p for _, p in one]
    assert s(tuple(texts[:3]), severity=2, seed=1) == [s(t, severity=2, seed=1) for t in texts[:3]]
    assert s([], severity=2, seed=1) == [] and s([], severity=2, return_params=True) == ([], [])


@pytest.mark.parametrize("name", NAMES)
def test_batched_ascii_path_equals_one_by_one_on_awkward_texts(name):
    # the batch of ASCII strings is planned and edited all at once (regex over the joined batch,
    # NumPy ranking and byte edits); it must give exactly what the text-by-text path gives
    rng = random.Random(name)
    pieces = ["aaa", "Zzz", "bookkeeper", "SHOUT", "Title", "their", "There", "to", "two", "because",
              "dont", "don't", "dogs'", "'quoted'", "x", "ab", "3rd", "42", "e-mail", "a_b", ",", ".",
              "  ", "\t", "mIxEd", "believe", "BELIEVE", "Receive", "\x00", "-", "(", ")", "q"]
    texts = ["".join(rng.choice(pieces) + rng.choice([" ", "", " ", ", "]) for _ in range(rng.randint(0, 14)))
             for _ in range(400)]
    s = shift(name)
    for severity in (1, 2, 5):
        for seed in (0, 1):
            batch, params = s(texts, severity=severity, seed=seed, return_params=True)
            one = [s(t, severity=severity, seed=seed, return_params=True) for t in texts]
            assert batch == [o for o, _ in one]
            assert params == [p for _, p in one]
            clean = [t for t in texts if "\x00" not in t]  # NUL sends a batch the text-by-text way
            assert s(clean, severity=severity, seed=seed) == [o for (o, _), t in zip(one, texts) if "\x00" not in t]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", [0, 6, -1, 0.5, 5.5, float("nan"), True, "3"])
def test_severity_outside_1_to_5_refused(name, bad):
    s = shift(name)
    with pytest.raises(SeverityError, match="severity"):
        s("a small brown dog", severity=bad, seed=0)
    with pytest.raises(SeverityError):
        s(["a small brown dog"], severity=bad, seed=0)


@pytest.mark.parametrize("name", NAMES)
def test_samples_captions_and_queries_texts(name):
    s = shift(name)
    text = "There are two dogs and their owner walking beside the river because it is sunny"
    sample = Sample(image=np.zeros((4, 4, 3), np.uint8), caption=text, id="img7", label=3)
    out = s(sample, severity=5, seed=2)
    assert isinstance(out, Sample) and out.label == 3 and out.id == "img7"
    assert out.caption == s(text, severity=5, seed=2, sample_id="img7")
    assert np.array_equal(out.image, sample.image) and sample.caption == text
    query = Query(reference=sample, text=text, id="q1")
    q_out = s(query, severity=5, seed=2)
    assert isinstance(q_out, Query) and q_out.text == s(text, severity=5, seed=2, sample_id="q1")
    params = s.draw(query, 5, 2)  # what the generate engine records
    assert s.apply(query, params).text == q_out.text
    assert s([query, query], severity=5, seed=2)[1].text == q_out.text
    with pytest.raises(ShiftbenchError, match="no caption"):
        s(Sample(image=np.zeros((4, 4, 3), np.uint8), id="x"), severity=1)
    with pytest.raises(ShiftbenchError, match="corrupts text"):
        s(np.zeros((4, 4, 3), np.uint8), severity=1)


# -- defining properties ------------------------------------------------------------------------
def edits_of(name, text, severity, seed):
    out, params = shift(name)(text, severity=severity, seed=seed, return_params=True)
    return out, params["edits"]


def undo(out: str, edits: list) -> str:
    """Put each edit's ``old`` back where its ``new`` landed in the output."""
    pieces, cursor, drift = [], 0, 0
    for _, pos, old, new in edits:
        start = pos + drift
        assert out[start : start + len(new)] == new
        pieces += [out[cursor:start], old]
        cursor = start + len(new)
        drift += len(new) - len(old)
    return "".join(pieces) + out[cursor:]


def runs(seeds=range(4), severities=(1, 3, 5)):
    for seed in seeds:
        for severity in severities:
            for text in TEXTS:
                yield text, severity, seed


def test_swap_keeps_the_multiset_of_characters_of_each_word():
    changed = 0
    for text, severity, seed in runs():
        out, edits = edits_of("text_swap", text, severity, seed)
        assert len(out) == len(text)
        for (_, pos, old, new) in edits:
            assert len(old) == 2 and new == old[::-1] and old[0] != old[1] and old.isalpha()
        for w_in, w_out in zip(text.split(" "), out.split(" "), strict=True):
            assert sorted(w_in) == sorted(w_out)
        changed += out != text
    assert changed > 0


def test_qwerty_substitutes_only_keyboard_neighbours_keeping_case():
    # an independent, hand-written picture of the keyboard
    assert set(QWERTY_NEIGHBOURS["q"]) == set("wa")
    assert set(QWERTY_NEIGHBOURS["g"]) == set("fhtyvb")
    assert set(QWERTY_NEIGHBOURS["s"]) == set("adwezx")
    assert set(QWERTY_NEIGHBOURS["m"]) == set("njk")
    assert set(QWERTY_NEIGHBOURS["p"]) == set("ol")
    assert all(a in QWERTY_NEIGHBOURS[b] for a in QWERTY_NEIGHBOURS for b in QWERTY_NEIGHBOURS[a])
    for text, severity, seed in runs():
        out, edits = edits_of("text_qwerty", text, severity, seed)
        assert len(out) == len(text)
        positions = {pos for _, pos, _, _ in edits}
        for i, (a, b) in enumerate(zip(text, out)):
            if a != b:
                assert i in positions
                assert b.lower() in QWERTY_NEIGHBOURS[a.lower()] and a.isupper() == b.isupper()
        assert all(len(old) == 1 == len(new) for _, _, old, new in edits)


def test_remove_char_deletes_one_letter_per_chosen_word():
    for text, severity, seed in runs():
        out, edits = edits_of("text_remove_char", text, severity, seed)
        assert len(out) == len(text) - len(edits)
        assert all(op == "delete" and len(old) == 1 and old.isalpha() and new == "" for op, _, old, new in edits)
        words = [w for _, w in word_spans(text)]
        assert len(out.split(" ")) == len(text.split(" "))  # spaces untouched
        assert len(words) >= len(edits)


def test_remove_space_reduces_the_space_count_by_the_number_of_edits():
    for text, severity, seed in runs():
        out, edits = edits_of("text_remove_space", text, severity, seed)
        assert text.count(" ") - out.count(" ") == len(edits) > 0
        assert out.replace(" ", "") == text.replace(" ", "")


def test_repetition_only_duplicates_existing_words():
    for text, severity, seed in runs():
        out, edits = edits_of("text_repetition", text, severity, seed)
        assert len(out.split()) == len(text.split()) + len(edits)
        for op, pos, old, new in edits:
            word = text[:pos].split(" ")[-1]
            assert op == "insert" and old == "" and new == " " + word and word.isalpha()
            assert text[pos - len(word) : pos] == word
        assert undo(out, edits) == text  # removing the copies gives the original back
        assert set(re.findall(r"[^\W\d_]+", out)) == set(re.findall(r"[^\W\d_]+", text))


@pytest.mark.parametrize("name, table", [("text_misspelling", misspellings), ("text_homophone", homophones)])
def test_word_replacements_come_from_their_list_and_preserve_case(name, table):
    lexicon = table()
    seen_case, edited = set(), 0
    for text, severity, seed in runs():
        out, edits = edits_of(name, text, severity, seed)
        edited += bool(edits)
        for op, pos, old, new in edits:
            assert op == "replace" and text[pos : pos + len(old)] == old
            assert new.lower() in lexicon[old.lower()]
            assert match_case(old, new.lower()) == new  # lower, Title or UPPER kept
            seen_case.add("upper" if old.isupper() else "title" if old[0].isupper() else "lower")
        assert undo(out, edits) == text  # nothing outside the edits changed
        assert re.sub(r"[A-Za-z]+", "W", out) == re.sub(r"[A-Za-z]+", "W", text)
    assert seen_case == {"upper", "title", "lower"}
    assert edited > 0.8 * len(TEXTS) * 12


# -- severity -----------------------------------------------------------------------------------
def test_severity_fraction_rule():
    assert list(FRACTIONS) == sorted(FRACTIONS) and FRACTIONS[0] > 0
    for n in range(0, 60):
        counts = [units_to_change(n, s) for s in range(1, 6)]
        assert counts == sorted(counts)
        assert counts[0] == (1 if n else 0) or counts[0] >= 1
        assert all(c <= n for c in counts)
        assert counts == [int(np.ceil(round(f * n, 9))) for f in FRACTIONS]
    assert [units_to_change(10, s) for s in range(1, 6)] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("name", NAMES)
def test_nothing_changes_outside_the_edits(name):
    for text, severity, seed in runs(seeds=range(2)):
        out, edits = edits_of(name, text, severity, seed)
        assert undo(out, edits) == text
        positions = [pos for _, pos, _, _ in edits]
        assert positions == sorted(positions)


@pytest.mark.parametrize("name", NAMES)
def test_edit_count_follows_the_rule_and_edits_are_nested_in_severity(name):
    s = shift(name)
    for text in TEXTS:
        previous: list = []
        for severity in range(1, 6):
            _, params = s(text, severity=severity, seed=9, return_params=True)
            assert len(params["edits"]) == units_to_change(params["eligible"], severity)
            assert all(e in params["edits"] for e in previous)
            previous = params["edits"]


@pytest.mark.parametrize("name", NAMES)
def test_edit_distance_is_monotone_in_severity(name):
    s = shift(name)
    grew = 0
    for seed in range(3):
        for text in TEXTS:
            distances = [levenshtein(text, s(text, severity=v, seed=seed)) for v in range(1, 6)]
            assert distances == sorted(distances), (text, distances)
            if s.draw_text(text, 1, seed)["eligible"]:
                assert distances[0] >= 1  # something eligible: at least one change at severity 1
            else:
                assert distances[-1] == 0
            grew += distances[-1] > distances[0]
    assert grew > len(TEXTS)


# -- rules and edge cases -----------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("text", ["", " ", "   \t\n", "!!! ?? ...", "12 345 6789", "3rd 4th 2nd", "_ __ _x_"])
def test_nothing_eligible_returns_unchanged(name, text):
    s = shift(name)
    for severity in (1, 5):
        out, params = s(text, severity=severity, seed=0, return_params=True)
        assert out == text and params["edits"] == []
        if name != "text_remove_space" or " " not in text.strip():
            assert params["eligible"] == 0
    assert s([text, text], severity=3, seed=1) == [text, text]


def test_short_words_rules():
    short = "a an to of on in up by it is at no so we he"
    for name in ["text_swap", "text_qwerty", "text_remove_char"]:
        assert shift(name)(short, severity=5, seed=0) == short  # fewer than 3 letters: left alone
    assert shift("text_repetition")(short, severity=5, seed=0) != short  # "the the" slips: any length
    assert shift("text_remove_space")("a b", severity=1, seed=0) == "ab"


@pytest.mark.parametrize("name", NAMES)
def test_numbers_and_punctuation_are_kept(name):
    s = shift(name)
    text = "Put 2 red cups, 15 plates and the 3rd bowl (blue) on their table; don't stop!"
    for seed in range(20):
        out = s(text, severity=5, seed=seed)
        assert re.findall(r"\d+", out) == re.findall(r"\d+", text)
        assert re.findall(r"\d+\S*", out) == re.findall(r"\d+\S*", text)  # nothing glued to a number
        assert re.sub(r"[\w\s]", "", out) == re.sub(r"[\w\s]", "", text)
        assert "don't" in out  # words joined by an apostrophe are left alone


@pytest.mark.parametrize("name", NAMES)
def test_unicode_text_never_crashes_and_keeps_marks_on_their_letters(name):
    s = shift(name)
    texts = [
        "Ein grünes Auto fährt schnell über die Straße",
        "cafe\u0301 au lait with cre\u0300me brûlée",  # decomposed accents
        "Пример текста на русском языке",
        "猫が座る 犬が走る",
        "مرحبا بالعالم",
        "the dog 🐶 and the cat 🐱 play",
        "naïve résumé façade",
        "\ud800 lone surrogate here",
        "x\u200dy zero width joiner and tabs\tand\nnewlines",
    ]
    for text in texts:
        for severity in (1, 5):
            out, params = s(text, severity=severity, seed=3, return_params=True)
            assert isinstance(out, str) and s.replay(text, params) == out
            for mark_word in ("cafe\u0301", "cre\u0300me"):
                if mark_word in text and name not in ("text_remove_space", "text_repetition"):
                    assert mark_word in out  # a word with a combining mark is not edited
    out = s("Ein grünes Auto fährt schnell über die Straße", severity=5, seed=1)
    if name in ("text_swap", "text_remove_char", "text_repetition", "text_remove_space"):
        assert out != "Ein grünes Auto fährt schnell über die Straße"  # letters of any script count


def test_non_ascii_and_ascii_word_finders_agree():
    rng = random.Random(0)
    alphabet = "abcXYZ' _-9.,\u2019"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
        ascii_text = text.replace("\u2019", "'")
        for min_len in (1, 3):
            slow = [(p, w) for p, w in word_spans(ascii_text) if len(w) >= min_len and w.isalpha()]
            assert letter_words(ascii_text, min_len) == slow, ascii_text


# -- what changed -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_return_changes_gives_edits_and_levenshtein_distance(name):
    s = shift(name)
    text = TEXTS[3]
    out, changes = s(text, severity=4, seed=1, return_changes=True)
    assert isinstance(changes, TextChanges) and changes.corrupted == out and changes.original == text
    assert changes.distance == levenshtein(text, out) == dp_levenshtein(text, out)
    assert changes.changed and all(isinstance(e, TextEdit) for e in changes.edits)
    out2, params, changes2 = s(text, severity=4, seed=1, return_params=True, return_changes=True)
    assert out2 == out and changes2 == changes and [list(e) for e in changes.edits] == params["edits"]
    outs, many = s(TEXTS[:5], severity=2, seed=0, return_changes=True)
    assert [c.corrupted for c in many] == outs
    _, none = s("", severity=1, return_changes=True)
    assert none.distance == 0 and none.edits == () and not none.changed


def dp_levenshtein(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def test_levenshtein_matches_the_dynamic_programme():
    rng = random.Random(1)
    for _ in range(2000):
        a = "".join(rng.choice("abcé ") for _ in range(rng.randint(0, 12)))
        b = "".join(rng.choice("abcé ") for _ in range(rng.randint(0, 12)))
        assert levenshtein(a, b) == dp_levenshtein(a, b) == levenshtein(b, a)
    long_a = "".join(rng.choice("acgt") for _ in range(300))
    long_b = "".join(rng.choice("acgt") for _ in range(280))
    assert levenshtein(long_a, long_b) == dp_levenshtein(long_a, long_b)


def test_params_for_another_text_are_refused():
    s = shift("text_swap")
    _, params = s("the small brown horse", severity=5, seed=0, return_params=True)
    with pytest.raises(ShiftbenchError, match="does not fit"):
        s.apply_text("a different sentence", params)
    with pytest.raises(ShiftbenchError, match="edits"):
        s.apply_text("the small brown horse", {})
    with pytest.raises(ShiftbenchError, match="malformed"):
        s.apply_text("the small brown horse", {"edits": [[1, 2]]})


def test_text_shifts_listed_without_importing_torch():
    import subprocess
    import sys

    code = ("import sys, shiftbench as sb; sb.list_shifts('text_*'); "
            "sb.create_shift('text_swap')('hello world', severity=1); "
            "assert 'torch' not in sys.modules and 'nlpaug' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", NAMES)
def test_severity_is_a_rate_dial(name):
    """Any real severity in 1..5 changes ceil(fraction * eligible) units, fraction linear between the levels
    (0.25 at 2.5); the edits grow as nested sets along a fine grid; whole severities given as floats are the
    whole ones."""
    from shiftbench.shifts.text import units_to_change

    s = shift(name)
    text = "The quick brown foxes were jumping over seven lazy sleeping dogs near the riverbank today"
    previous: list = []
    for k in range(33):
        severity = 1 + k / 8
        out, params = s(text, severity=severity, seed=4, sample_id="t", return_params=True)
        edits = [tuple(map(str, e)) for e in params["edits"]]
        assert len(edits) == units_to_change(params["eligible"], severity) or name in ("text_remove_space",)
        assert set(previous) <= set(edits), (name, severity)
        previous = edits
        assert s.replay(text, params) == out if hasattr(s, "replay") else True
    assert s(text, severity=3.0, seed=4, sample_id="t") == s(text, severity=3, seed=4, sample_id="t")
    assert units_to_change(20, 2.5) == 5
