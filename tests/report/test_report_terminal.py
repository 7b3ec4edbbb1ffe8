"""The run's headline in the terminal (report/terminal.py): the report's own headline, from the store, drawn as a
table, or as one line per model on a console too narrow for it."""

from __future__ import annotations

import io

import pytest

import tiny_registry  # noqa: F401  (_test_tiny, _test_noise)
import shiftbench as sb
from shiftbench.report import run_headline
from shiftbench.report.terminal import print_headline

SPEC = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}},
                                            {"name": "dummy_classifier", "params": {"label_space": 2, "seed": 1}}],
        "shifts": ["clean", {"name": "_test_noise", "severities": [1, 4]}], "metrics": ["top1", "ece"], "batch_size": 5}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("headline") / "r.db"
    sb.evaluate(SPEC, store=path)
    return path


def test_run_headline_is_the_reports_headline(store):
    """Only the headline's metric is annotated for the terminal; every interval is seeded on its own, so the
    cells equal those of the report, which annotates every table."""
    from shiftbench.report.build import _load, _main_tables, _run_headline

    run, = _load(store, None)
    preferred, _, tables, unc = _main_tables(run)
    assert run_headline(store) == _run_headline(run, tables, preferred, unc)


def _console(width: int):
    from rich.console import Console

    out = io.StringIO()
    return Console(file=out, width=width, highlight=False, soft_wrap=False), out


def test_printed_as_a_table_with_ci_lines_or_as_one_line_per_model(store):
    head = run_headline(store)
    wide, out = _console(200)
    print_headline(wide, head, "headline of run r: top1")
    text = out.getvalue()
    assert text.startswith("headline of run r: top1")
    for row in head.rows:
        assert row.model in text
        for cell in row.cells:
            assert cell.text in text and (not cell.ci or cell.ci in text)
    narrow, out = _console(40)
    print_headline(narrow, head, "headline of run r: top1")
    lines = out.getvalue().splitlines()
    first = head.rows[0]
    cell = first.cells[0]
    expected = f"{first.model}: {head.columns[0].head} {cell.text}" + (f" {cell.ci}" if cell.ci else "")
    assert lines[0] == "headline of run r: top1" and lines[1].startswith(expected)
    assert sum(line.startswith("dummy_classifier") for line in lines) == len(head.rows)
