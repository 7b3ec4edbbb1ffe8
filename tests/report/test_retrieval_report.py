"""The composed-retrieval summary as report blocks: plain strings (no Markdown inside), a Markdown export
that parses back to the same cells, metrics in natural order, no (shift, severity) row shown twice, n on
every numeric cell, and the note on gamma above 1 exactly when a gamma above 1 exists."""

from __future__ import annotations

import copy
import random

import pytest

import tiny_registry  # noqa: F401  (registers the _test_noise image shift)
from cir_fakes import SPEC, fake_retrievers

from markdown_parse import markdown_blocks
from shiftbench.engine.evaluate import evaluate
from shiftbench.report.blocks import blocks_to_markdown, cell_text, strings_of
from shiftbench.report.build import build_report
from shiftbench.report.retrieval import GAMMA_NOTE, gamma_above_one, retrieval_blocks, retrieval_tables
from shiftbench.results.records import Row

SHIFTS = ["clean", {"name": "_test_noise", "severities": [2, 3, 5]}, {"name": "text_swap", "severities": [1, 3]}]


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    path = tmp_path_factory.mktemp("cir") / "cir.db"
    rows = evaluate({**SPEC, "shifts": SHIFTS}, models=fake_retrievers(), store=path)
    return path, rows


def _tables(blocks):
    return [b for b in blocks if b["kind"] == "table"]


def _gamma_rows(blocks):
    """(heading, shift, severity) of every data row of the gamma tables (mean rows left out)."""
    found, heading = [], None
    for b in blocks:
        if b["kind"] == "heading":
            heading = b["text"]
        elif b["kind"] == "table" and b["head"][:2] == ["shift", "severity"]:
            found += [(heading, cell_text(r[0]), cell_text(r[1])) for r in b["rows"]
                      if not (isinstance(r[0], dict) and r[0].get("cls") == "mean")]
    return found


def test_blocks_hold_no_markdown_and_export_round_trips(stored):
    _, rows = stored
    blocks = retrieval_blocks(rows)
    assert {b["kind"] for b in blocks} <= {"heading", "text", "list", "table"}
    for s in strings_of(blocks):
        assert "**" not in s and "`" not in s, s
    parsed = markdown_blocks(blocks_to_markdown(blocks))
    assert [b["kind"] for b in parsed] == [b["kind"] for b in blocks]
    for mine, back in zip(blocks, parsed):
        if mine["kind"] != "table":
            assert back["text"] == mine["text"]
            continue
        assert back["head"] == mine["head"]
        # the export writes mean cells bold; apart from that the cells come back as they were
        assert [[c.removeprefix("**").removesuffix("**") for c in r] for r in back["rows"]] == \
            [[cell_text(c) for c in r] for r in mine["rows"]]
    means = [r for t in _tables(blocks) for r in t["rows"] if isinstance(r[0], dict) and r[0].get("cls") == "mean"]
    assert means and all(isinstance(c, dict) and c["cls"] == "mean" for r in means for c in r)


def test_no_condition_shown_twice_and_every_condition_shown(stored):
    _, rows = stored
    shown = [(s, v) for _, s, v in _gamma_rows(retrieval_blocks(rows))]
    assert len(shown) == len(set(shown))
    assert set(shown) == {(r["shift"], str(r["severity"])) for r in rows if r["shift"] != "clean"}
    by_table = {}
    for heading, s, v in _gamma_rows(retrieval_blocks(rows)):
        by_table.setdefault(heading, []).append((s, v))
    assert by_table["gamma@10, image shifts at severity 5"] == [("_test_noise", "5")]
    assert by_table["gamma@10, text shifts at severity 3"] == [("text_swap", "3")]
    assert by_table["gamma@10 at the other severities"] == [("_test_noise", "2"), ("_test_noise", "3"),
                                                            ("text_swap", "1")]


def test_metrics_in_natural_order_whatever_the_row_order(stored):
    _, rows = stored
    shuffled = list(rows)
    random.Random(0).shuffle(shuffled)
    natural = ["retriever", "R@1", "R@5", "R@10", "R@50", "R_subset@1", "R_subset@2", "R_subset@3", "mean rank"]
    assert _tables(retrieval_blocks(rows))[0]["head"] == natural
    assert _tables(retrieval_blocks(shuffled))[0]["head"] == natural


def test_every_numeric_cell_carries_its_n(stored):
    _, rows = stored
    n = {(r["model"], r["shift"], r["severity"], r["metric"]): r["n"] for r in rows}
    blocks = retrieval_blocks(rows)
    recall = _tables(blocks)[0]
    for r in recall["rows"]:
        for metric, c in zip(recall["head"][1:], r[1:]):
            key = (cell_text(r[0]), "clean", 0, "mean_rank" if metric == "mean rank" else metric)
            assert c["title"] == f"n = {n[key]} queries"
    subset_n = n[("combiner", "clean", 0, "R_subset@1")]
    assert 0 < subset_n < n[("combiner", "clean", 0, "R@1")]  # R_subset rests on the queries with a subset
    for t in _tables(blocks)[1:]:
        for r in t["rows"]:
            for c in r[2:]:
                if cell_text(c) != "-":
                    assert isinstance(c, dict) and ("n = " in c["title"] or c.get("cls") == "mean"), c


def _with_gammas(rows, cap):
    out = copy.deepcopy(rows)
    for r in out:
        if r["metric"].startswith("gamma") and r["value"] is not None:
            r["value"] = min(r["value"], cap)
    return out


def test_gamma_note_present_iff_a_gamma_above_one(stored):
    _, rows = stored
    at_most_one = _with_gammas(rows, 1.0)
    assert not gamma_above_one(at_most_one)
    assert GAMMA_NOTE not in " ".join(strings_of(retrieval_blocks(at_most_one)))
    assert GAMMA_NOTE not in retrieval_tables(at_most_one)
    raised = copy.deepcopy(at_most_one)
    target = next(r for r in raised if r["metric"] == "gamma@10" and (r["shift"], r["severity"]) == ("_test_noise", 5))
    target["value"] = 1.25
    blocks = retrieval_blocks(raised)
    texts = [b["text"] for b in blocks if b["kind"] == "text"]
    assert sum(GAMMA_NOTE in t for t in texts) == 2  # beside R_subset, and after the severity-5 table
    i = next(i for i, b in enumerate(blocks) if b.get("text") == "gamma@10, image shifts at severity 5")
    assert blocks[i + 2] == {"kind": "text", "text": GAMMA_NOTE}
    only_subset = copy.deepcopy(at_most_one)
    next(r for r in only_subset if r["metric"] == "gamma_subset@1")["value"] = 2.43
    texts = [b["text"] for b in retrieval_blocks(only_subset) if b["kind"] == "text"]
    assert sum(GAMMA_NOTE in t for t in texts) == 1 and "R_subset@K" in next(t for t in texts if GAMMA_NOTE in t)
    assert gamma_above_one(rows) == (GAMMA_NOTE in retrieval_tables(rows))


def test_report_passes_the_blocks_and_writes_their_markdown(stored, tmp_path):
    path, rows = stored
    build_report(path, tmp_path)
    from shiftbench.report.build import _summaries

    (tmp_path / "again").mkdir()
    found = _summaries(tmp_path / "again", [Row(**r) for r in rows], "", [])
    retrieval = next(s for s in found if s["title"] == "Composed retrieval")
    assert retrieval["id"] == "retrieval" and retrieval["blocks"] == retrieval_blocks(rows)
    md = (tmp_path / "retrieval.md").read_text()
    assert md == (tmp_path / "again" / "retrieval.md").read_text()
    assert md.startswith("## Composed retrieval\n\n### Clean recall\n") and "| **mean** |" in md
    html = (tmp_path / "report.html").read_text()
    assert "gamma@10 at the other severities" in html and "**" not in html
