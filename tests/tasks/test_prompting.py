"""Prompts as data (tasks/prompting.py): the spec's prompt section, templates, and seeded questions."""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shiftbench.errors import ShiftbenchError, SpecError
from shiftbench.labelspace import LabelSpace
from shiftbench.tasks.answers import Vocabulary, match_answer
from shiftbench.tasks.prompting import PROMPT_KINDS, PromptSpec, Question, questions, template, templates

NAMES = tuple(LabelSpace.imagenet1k().class_names)
ids = st.text(alphabet=string.ascii_letters + string.digits + "/_.-", min_size=1, max_size=20)
seeds = st.integers(0, 2**63 - 1)


def option_lines(prompt: str) -> list[tuple[str, str]]:
    return re.findall(r"^([A-Z])\. (.*)$", prompt, flags=re.M)


# -- the spec's prompt section --------------------------------------------------------------------------

def test_parse_accepts_none_a_kind_and_a_mapping():
    assert PromptSpec.parse(None) == PromptSpec() == PromptSpec("open", None, 4)
    assert PromptSpec.parse("yes_no") == PromptSpec("yes_no")
    text = "Which one?\n{options}\nLetter only."
    assert PromptSpec.parse({"kind": "multiple_choice", "text": text, "options": 5}) == \
        PromptSpec("multiple_choice", text, 5)
    spec = PromptSpec("yes_no", options=3)
    assert PromptSpec.parse(spec) is spec


@pytest.mark.parametrize("value, words", [
    ("multiple choice", ["prompt", "'multiple choice'", "did you mean 'multiple_choice'"]),
    ({"kind": "yesno"}, ["prompt.kind", "'yesno'", "did you mean 'yes_no'"]),
    ({"kind": "open", "optons": 3}, ["prompt", "'optons'", "did you mean 'options'"]),
    ({"kind": "multiple_choice", "options": 1}, ["prompt.options", "2..26", "1"]),
    ({"kind": "multiple_choice", "options": 27}, ["prompt.options", "27"]),
    ({"kind": "multiple_choice", "options": "4"}, ["prompt.options", "'4'"]),
    ({"kind": "multiple_choice", "options": True}, ["prompt.options", "True"]),
    ({"kind": "multiple_choice", "text": "Which one is it?"}, ["prompt.text", "{options}"]),
    ({"kind": "yes_no", "text": "Is it there? {options}"}, ["prompt.text", "{options}", "yes_no"]),
    ({"kind": "yes_no", "text": "Is it there?"}, ["prompt.text", "{class_name}"]),
    ({"kind": "open", "text": "What is it {"}, ["prompt.text", "not a valid template"]),
    ({"kind": "open", "text": ""}, ["prompt.text", "non-empty"]),
    (7, ["prompt", "int"]),
])
def test_bad_prompt_sections_are_one_line_spec_errors(value, words):
    with pytest.raises(SpecError) as e:
        PromptSpec.parse(value)
    message = str(e.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_errors_name_where_the_value_came_from():
    with pytest.raises(SpecError, match=r"^spec.yaml: tasks\[0\].prompt\.kind: "):
        PromptSpec.parse({"kind": "quiz"}, where="spec.yaml: tasks[0].prompt")


@given(st.sampled_from(PROMPT_KINDS), st.integers(2, 26), st.sampled_from([None, "objects", "unknown"]))
def test_as_dict_records_the_text_and_parses_back_to_the_same_questions(kind, options, dataset):
    spec = PromptSpec(kind, options=options)
    record = spec.as_dict(dataset)
    assert record["kind"] == kind and record["options"] == options and record["text"] == template(kind, dataset)
    again = PromptSpec.parse(record)
    assert questions(again, "s1", 3, NAMES, 0) == questions(spec, "s1", 3, NAMES, 0, dataset=dataset)


def test_builtin_templates_are_valid_for_their_kind():
    table = templates()
    assert "default" in table and set(table["default"]) == set(PROMPT_KINDS)
    for dataset, kinds in table.items():
        for kind, text in kinds.items():
            assert PromptSpec.parse({"kind": kind, "text": text}).text == text, (dataset, kind)
    table["default"]["open"] = "changed"  # a copy: the loaded templates stay as they are
    assert templates()["default"]["open"] != "changed"
    assert template("open", "objects") != template("open") == template("open", "no-such-dataset")


# -- questions ------------------------------------------------------------------------------------------

@given(ids, seeds, st.integers(0, 999), st.sampled_from(PROMPT_KINDS), st.integers(2, 26))
def test_questions_are_reproducible(sample_id, seed, label, kind, options):
    spec = PromptSpec(kind, options=options)
    assert questions(spec, sample_id, label, NAMES, seed) == questions(spec, sample_id, label, list(NAMES), seed)


def test_questions_differ_between_samples_and_seeds():
    spec = PromptSpec("multiple_choice", options=4)
    orders = {questions(spec, f"img-{i}", 5, NAMES, 0)[0].options for i in range(50)}
    assert len(orders) > 40
    assert questions(spec, "img-1", 5, NAMES, 0) != questions(spec, "img-1", 5, NAMES, 1)


def test_question_order_is_pinned():
    """Same (seed, id) -> same questions on any machine: PCG64 seeded from sha256, pinned here."""
    [q] = questions(PromptSpec("multiple_choice"), "x1", 5, NAMES, 0, dataset="objects")
    assert q.options == (585, 799, 487, 5)


@settings(max_examples=200)
@given(ids, seeds, st.integers(0, 999), st.integers(2, 26))
def test_multiple_choice_options(sample_id, seed, label, options):
    [q] = questions(PromptSpec("multiple_choice", options=options), sample_id, label, NAMES, seed)
    assert isinstance(q, Question) and q.asks is None
    assert len(q.options) == options and q.options.count(label) == 1
    assert len(set(q.options)) == options  # distractors distinct and not the label
    names = [NAMES[c] for c in q.options]
    assert len(set(names)) == options  # no option spelled like another (ImageNet repeats "missile")
    lines = option_lines(q.prompt)
    assert [letter for letter, _ in lines] == list(string.ascii_uppercase[:options])
    assert [name for _, name in lines] == names


@given(ids, seeds, st.integers(0, 5), st.integers(2, 26))
def test_multiple_choice_with_fewer_classes_uses_them_all(sample_id, seed, label, options):
    names = ["tench", "goldfish", "shark", "ray", "hen", "ostrich"]
    [q] = questions(PromptSpec("multiple_choice", options=options), sample_id, label, names, seed)
    assert set(q.options) <= set(range(6)) and len(set(q.options)) == len(q.options) == min(options, 6)
    assert q.options.count(label) == 1


@given(ids, seeds, st.integers(0, 999))
def test_letter_order_is_a_seeded_permutation(sample_id, seed, label):
    """Every position is reachable: over many ids, the true class takes each letter."""
    spec = PromptSpec("multiple_choice", options=4)
    positions = {questions(spec, f"{sample_id}-{i}", label, NAMES, seed)[0].options.index(label) for i in range(40)}
    assert positions == {0, 1, 2, 3}


@settings(max_examples=200)
@given(ids, seeds, st.integers(0, 999), st.integers(2, 26))
def test_yes_no_asks_the_label_exactly_once(sample_id, seed, label, options):
    qs = questions(PromptSpec("yes_no", options=options), sample_id, label, NAMES, seed)
    asked = [q.asks for q in qs]
    assert len(qs) == options and asked.count(label) == 1 and len(set(asked)) == options
    for q in qs:
        assert q.options == () and NAMES[q.asks] in q.prompt
        assert f" {'an' if NAMES[q.asks][0].lower() in 'aeiou' else 'a'} {NAMES[q.asks]} " in q.prompt


def test_open_question_is_the_template_and_needs_no_label():
    [q] = questions(PromptSpec(), "s", None, NAMES, 0)
    assert q == Question(template("open"))
    [q] = questions(PromptSpec("open", "Which of {classes} is it?"), "s", None, ["cat", "dog"], 0)
    assert q.prompt == "Which of cat, dog is it?"


def test_questions_skip_unused_slots_of_a_label_space():
    coco = LabelSpace.coco91()
    for i in range(30):
        [q] = questions(PromptSpec("multiple_choice", options=26), f"s{i}", 17, coco.class_names, 0)
        assert all(coco.class_names[c] != "N/A" for c in q.options)


@pytest.mark.parametrize("kind", ["multiple_choice", "yes_no"])
@pytest.mark.parametrize("label, word", [(None, "has none"), (1000, "outside"), ("cat", "not a class index")])
def test_questions_need_a_label_one_line_error_naming_the_sample(kind, label, word):
    with pytest.raises(ShiftbenchError) as e:
        questions(PromptSpec(kind), "img/42.jpg", label, NAMES, 0)
    assert "\n" not in str(e.value) and "'img/42.jpg'" in str(e.value) and word in str(e.value)


@settings(max_examples=100)
@given(ids, seeds, st.integers(0, 999), st.integers(2, 26))
def test_every_option_line_matches_its_class(sample_id, seed, label, options):
    """Read back by the matcher: the letter and the option's name both name the option."""
    [q] = questions(PromptSpec("multiple_choice", options=options), sample_id, label, NAMES, seed)
    vocab = Vocabulary.for_space(LabelSpace.imagenet1k())
    for (letter, name), cls in zip(option_lines(q.prompt), q.options):
        assert match_answer(f"{letter}) {name}", vocab, q.options).label == cls
        m = match_answer(name, vocab, q.options)
        assert m.label == cls or (m.how == "ambiguous" and cls in m.candidates)
