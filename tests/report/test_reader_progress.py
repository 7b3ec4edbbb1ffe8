"""Issue 38: report and leaderboard tell a progress bar how far they are (console.Steps shows it only when a
command runs for more than a few seconds), through the CLI's path: evaluate -> store -> report / leaderboard."""

from __future__ import annotations

import io

import tiny_registry  # noqa: F401  (the _test_tiny dataset and the _test_noise shift)

import shiftbench as sb
from shiftbench.console import STEPS_DELAY_S, Steps
from shiftbench.report.build import build_report
from shiftbench.report.leaderboard import leaderboard
from shiftbench.report.tables import build_tables
from shiftbench.results.records import load

SPEC = {"dataset": "_test_tiny", "models": [{"name": "dummy_classifier", "params": {"label_space": 2}}],
        "shifts": ["clean", {"name": "_test_noise", "severities": [2, 4]}], "metrics": ["top1", "ece"],
        "batch_size": 10}


def test_report_ticks_once_per_table_row_up_to_the_total(tmp_path):
    sb.evaluate(SPEC, store=tmp_path / "r.db")
    calls = []
    build_report(tmp_path / "r.db", tmp_path / "out", progress=lambda done, total, label: calls.append((done, total)))
    run, = load(tmp_path / "r.db", None, ("results",))
    rows = sum(len(t.rows) for per in (False, True) for t in build_tables(run.rows, run.metrics, per_severity=per))
    assert calls and [d for d, _ in calls] == list(range(1, len(calls) + 1))  # one tick per row, in order
    assert {t for _, t in calls} == {rows} and calls[-1][0] == rows


def test_leaderboard_ends_at_its_total(tmp_path):
    sb.evaluate(SPEC, store=tmp_path / "r.db")
    calls = []
    leaderboard([tmp_path / "r.db"], progress=lambda done, total, label: calls.append((done, total, label)))
    assert calls[0][0] == 0 and calls[-1][0] == calls[-1][1] and calls[-1][2] == "done"
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))


def test_a_terminal_bar_appears_only_after_the_delay():
    now = [0.0]
    out = io.StringIO()
    with Steps("report", "table rows", stream=out, clock=lambda: now[0], terminal=True) as steps:
        steps(1, 10, "clean")
        assert out.getvalue() == ""  # a quick command prints nothing
        now[0] = STEPS_DELAY_S + 0.5
        steps(5, 10, "fog")
        assert steps.bar is not None
    assert out.getvalue() != ""


def test_plain_lines_in_a_pipe_only_for_a_long_command():
    now = [0.0]
    out = io.StringIO()
    with Steps("export", "conditions", stream=out, clock=lambda: now[0], terminal=False) as steps:
        for k in range(1, 6):
            now[0] = k
            steps(k, 5, f"c{k}")
    assert out.getvalue() == ""  # five seconds: no line at all, not even the closing one


def test_the_report_reads_only_the_predictions_its_grids_show(tmp_path):
    """A run with log_samples keeps a prediction per sample and condition; the report loads those of the samples
    with thumbnails (what its grids show), the same records as the full load filtered to them."""
    from shiftbench.results.artifacts import thumb_condition

    sb.evaluate({**SPEC, "log_samples": True}, store=tmp_path / "r.db")
    full, = load(tmp_path / "r.db", None, ("thumbs", "predictions"))
    shown, = load(tmp_path / "r.db", None, ("thumbs", "shown_predictions"))
    ids = {thumb_condition(t)[3] for t in full.thumbs}
    assert ids and len({p.sample_id for p in full.predictions}) > len(ids)  # more predictions than shown samples
    assert shown.predictions == [p for p in full.predictions if p.sample_id in ids]
    alone, = load(tmp_path / "r.db", None, ("shown_predictions",))  # without the thumbs part: the same ones
    assert alone.predictions == shown.predictions
