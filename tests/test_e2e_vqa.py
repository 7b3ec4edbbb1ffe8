"""End to end, question answering (issue 40): an image-text-to-text model asked about the objects photos through
sb.evaluate -> store -> report, exports and leaderboard, killed once and resumed; every answer stored per sample;
the stored accuracy and unmatched rate recomputed from those answers with the matching rules; spec mistakes in one
line; the CLI with a tiny random LLaVA built from config."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import shiftbench as sb
from shiftbench.cli import cli
from shiftbench.errors import SpecError
from shiftbench.results.store import Store
from shiftbench.tasks.answers import Vocabulary, match_answer, match_yes_no
from shiftbench.tasks.prompting import PromptSpec, questions

from e2e import kill_and_resume, report_tables, row_key

VOCAB = ["hen", "lion", "teddy bear", "tree frog"]


def _spec(prompt, **extra):
    return {"dataset": "objects", "limit": 6, "seed": 1, "batch_size": 2, "prompt": prompt,
            "models": [{"name": "dummy_vlm", "params": {"vocabulary": VOCAB}}],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [2, 5]}, {"name": "brightness", "severities": [5]}],
            **extra}


def _predictions(db):
    with Store(db) as store:
        run = store.runs()[-1]["run_id"]
        return [p for p in store.predictions(run)]


@pytest.mark.parametrize("prompt", ["multiple_choice", {"kind": "yes_no", "options": 3}, "open"])
def test_answers_through_evaluate_store_report_and_a_resume(tmp_path, prompt):
    ref, resumed, partial = kill_and_resume(_spec(prompt), tmp_path, min_done=1)
    assert row_key(resumed) == row_key(ref) and 0 < len(partial) < len(ref)
    assert {r["metric"] for r in ref} == {"answer_accuracy", "unmatched_rate"}
    # every answer is stored per sample (without log_samples), and the rows are their matching rules' scores
    preds = _predictions(tmp_path / "ref.db")
    data = sb.load_dataset("objects", limit=6)
    names = list(data.label_space.class_names)
    vocab = Vocabulary.for_space(data.label_space)
    spec = PromptSpec.parse(prompt)
    for shift in ("clean", "gaussian_noise", "brightness"):
        mine = [p for p in preds if p["shift"] == shift]
        assert len({(p["sample_id"], p["severity"]) for p in mine}) == len(mine) == 6 * (2 if shift == "gaussian_noise" else 1)
        for p in mine:
            rec = p["prediction"]
            qs = questions(spec, p["sample_id"], rec["label"], names, 1, dataset="objects")
            assert rec["prompts"] == [q.prompt for q in qs]  # the prompt text is recorded with each answer
            right = [((match_yes_no(a) is not None and match_yes_no(a) == (q.asks == rec["label"])) if q.asks is not None
                      else match_answer(a, vocab, q.options).label == rec["label"]) for q, a in zip(qs, rec["answers"])]
            assert rec["score"] == pytest.approx(np.mean(right))
        for metric, key in (("answer_accuracy", "score"), ("unmatched_rate", "unmatched")):
            for sev in {p["severity"] for p in mine}:
                [row] = [r for r in ref if r["shift"] == shift and r["metric"] == metric and r["severity"] == sev]
                assert row["value"] == pytest.approx(np.mean([p["prediction"][key] for p in mine if p["severity"] == sev]))
    tables, _, html = report_tables(tmp_path / "resumed.db", tmp_path / "report")
    assert "answer_accuracy" in html and "unmatched_rate" in html and "dummy_vlm" in html


def test_exports_and_leaderboard_take_the_task(tmp_path):
    from shiftbench.report.export import export_store
    from shiftbench.report.leaderboard import leaderboard

    rows = sb.evaluate(_spec("multiple_choice"), store=tmp_path / "a.db")
    out = export_store(tmp_path / "a.db", tmp_path / "export", fmt="results")
    text = "".join((out.out / f).read_text() for f in out.files if f.endswith(".json"))
    acc = [r for r in rows if r["metric"] == "answer_accuracy" and r["shift"] == "clean"][0]["value"]
    assert '"answer_accuracy"' in text and '"unmatched_rate"' in text and repr(acc)[:6] in text
    board = leaderboard([tmp_path / "a.db"])
    [table] = board["tables"]
    assert table["metric"] == "answer_accuracy" and [r["model"] for r in table["rows"]] == ["dummy_vlm"]


@pytest.mark.parametrize("spec, says", [
    ({"prompt": "multiple_choise"}, "did you mean 'multiple_choice'"),
    ({"prompt": "open", "models": ["dummy_classifier"]}, "no model of this spec answers questions"),
    ({"metrics": ["top1"]}, "top1"),
])
def test_spec_mistakes_are_one_line(tmp_path, spec, says):
    with pytest.raises(SpecError, match=says):
        sb.evaluate({**_spec("open"), **spec}, store=tmp_path / "x.db")
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("family", ["llava", "idefics3", "paligemma"])
def test_tiny_random_vlms_through_the_cli_and_the_store(tmp_path, family):
    """A tiny random model of each family (built from config, tokenizer and image processor made in the test):
    shiftbench evaluate -> store -> report through the CLI; every answer stored; the rows their matching."""
    from tiny_vlm import TINY_VLMS

    folder = TINY_VLMS[family](tmp_path / family)
    config = tmp_path / "vlm.yaml"
    config.write_text(json.dumps({
        "dataset": "objects", "limit": 3, "seed": 0, "batch_size": 3, "prompt": {"kind": "multiple_choice", "options": 3},
        "models": [{"name": f"hf:{folder}", "params": {"max_new_tokens": 4}}],
        "shifts": ["clean", {"name": "gaussian_noise", "severities": [3]}]}))
    runner = CliRunner()
    res = runner.invoke(cli, ["evaluate", "--config", str(config), "--store", str(tmp_path / "v.db")])
    assert res.exit_code == 0, res.output
    preds = _predictions(tmp_path / "v.db")
    assert len(preds) == 6 and all(len(p["prediction"]["answers"]) == 1 for p in preds)
    with Store(tmp_path / "v.db") as store:
        rows = store.rows(store.runs()[-1]["run_id"])
    for r in rows:
        mine = [p["prediction"] for p in preds if p["shift"] == r["shift"]]
        key = "score" if r["metric"] == "answer_accuracy" else "unmatched"
        assert r["value"] == pytest.approx(np.mean([m[key] for m in mine]))
    model = sb.create_model(f"hf:{folder}", max_new_tokens=4)
    first = [p for p in preds if p["shift"] == "clean"][0]
    data = sb.load_dataset("objects", limit=3)
    [image] = [data.load(i).image for i in range(3) if data.sample_id(i) == first["sample_id"]]
    assert model.answer([image], first["prediction"]["prompts"]) == first["prediction"]["answers"]  # greedy, replayable
    res = runner.invoke(cli, ["report", "--store", str(tmp_path / "v.db"), "--out", str(tmp_path / "rep")])
    assert res.exit_code == 0, res.output
    assert "answer_accuracy" in (tmp_path / "rep" / "report.html").read_text()


def test_backgrounds_attribute_edits_dials_headline_and_failure_points(tmp_path):
    """The task under the shifts classifiers get: a corruption on a continuous dial, a background, an attribute edit;
    the headline has their columns and the report its failure points of answer accuracy."""
    from shiftbench.report.build import run_headline

    spec = _spec("multiple_choice", shifts=[
        "clean", {"name": "brightness", "severities": [1, 2.5, 5]}, {"name": "background_color", "params": {"color": "red"}},
        {"name": "attribute_color", "params": {"color": "pink"}}])
    rows = sb.evaluate(spec, store=tmp_path / "s.db")
    assert {(r["shift"], r["severity"]) for r in rows if r["metric"] == "answer_accuracy"} == {
        ("clean", 0), ("brightness", 1), ("brightness", 2.5), ("brightness", 5), ("background_color", 5),
        *(("attribute_color", k) for k in range(1, 6))}
    head = run_headline(tmp_path / "s.db")
    assert head.metric == "answer_accuracy" and len(head.columns) >= 3
    _, _, html = report_tables(tmp_path / "s.db", tmp_path / "rep")
    assert "Failure points" in html and "brightness" in html and "background_color" in html


def test_generation_settings_are_part_of_the_run_identity(tmp_path):
    from tiny_vlm import TINY_VLMS

    from shiftbench.engine.identity import model_fingerprint

    folder = TINY_VLMS["llava"](tmp_path / "llava")
    a, b = sb.create_model(f"hf:{folder}"), sb.create_model(f"hf:{folder}", max_new_tokens=3)
    fa, fb = model_fingerprint(a), model_fingerprint(b)
    assert fa["weights"] == fb["weights"] and fa["generation"]["max_new_tokens"] == 16
    assert fa["generation"]["do_sample"] is False and fa != fb
    spec = {"dataset": "objects", "limit": 2, "models": [f"hf:{folder}"], "shifts": ["clean"], "prompt": "open"}
    first = sb.evaluate(spec, store=tmp_path / "g.db")
    second = sb.evaluate({**spec, "models": [{"name": f"hf:{folder}", "params": {"max_new_tokens": 3}}]},
                         store=tmp_path / "g.db")
    assert first[0]["run_id"] != second[0]["run_id"]
    assert "generation" not in model_fingerprint(sb.create_model("dummy_classifier"))  # classifiers: as before


def test_a_tiny_llava_run_killed_and_resumed(tmp_path):
    from tiny_vlm import TINY_VLMS

    folder = TINY_VLMS["llava"](tmp_path / "llava")
    spec = {"dataset": "objects", "limit": 6, "seed": 2, "batch_size": 2, "prompt": "yes_no",
            "models": [{"name": f"hf:{folder}", "params": {"max_new_tokens": 3}}],
            "shifts": ["clean", {"name": "gaussian_noise", "severities": [2, 4]}]}
    ref, resumed, partial = kill_and_resume(spec, tmp_path, min_done=1)
    assert row_key(resumed) == row_key(ref) and 0 < len(partial) < len(ref)
    assert _predictions(tmp_path / "resumed.db") == _predictions(tmp_path / "ref.db")


def test_a_prompt_that_needs_labels_is_refused_before_any_work(tmp_path, monkeypatch):
    """Multiple choice and yes/no ask about the true class: unlabelled samples are refused by the dry run, in the
    run's own line, before a model is called; an open question needs no label."""
    from shiftbench.datasets.base import Dataset
    from shiftbench.engine.evaluate import prepare
    from shiftbench.labelspace import LabelSpace
    from shiftbench.registry import DATASETS, Entry
    from shiftbench.sample import Sample

    class Unlabelled(Dataset):
        name = "_unlabelled"
        label_space = LabelSpace("pets", ("cat", "dog", "bird"))

        def __len__(self):
            return 2

        def sample_id(self, i):
            return f"u{i}"

        def load(self, i):
            return Sample(image=np.full((16, 16, 3), 40 * i, np.uint8), id=self.sample_id(i))

    monkeypatch.setitem(DATASETS._entries, "_unlabelled", Entry("_unlabelled", Unlabelled, "unlabelled"))
    spec = {"dataset": "_unlabelled", "models": ["dummy_vlm"], "shifts": ["clean"], "prompt": "multiple_choice"}
    with pytest.raises(SpecError) as dry:
        prepare(spec)
    with pytest.raises(SpecError) as real:
        sb.evaluate(spec, store=tmp_path / "u.db")
    assert str(dry.value) == str(real.value) and "prompt:" in str(dry.value) and "'u0'" in str(dry.value)
    assert "\n" not in str(dry.value) and not (tmp_path / "u.db").exists()
    rows = sb.evaluate({**spec, "prompt": "open"}, store=tmp_path / "o.db")
    assert {r["metric"] for r in rows} == {"answer_accuracy", "unmatched_rate"}
