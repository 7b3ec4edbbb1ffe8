"""The console without a terminal: wide lines, plain progress lines every few seconds, plurals, no hub bars."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from shiftbench.console import LOG_WIDTH, LineProgress, make_console, plural

HERE = Path(__file__).parent
SRC = HERE.parent / "src"


def test_a_console_without_a_terminal_does_not_fold_at_80_columns(capsys):
    console = make_console()
    assert console.width == LOG_WIDTH
    path = "/data/" + "/".join(f"folder{i:02d}" for i in range(12)) + "/results.db"  # 110 characters
    console.print(f"report: {path}", soft_wrap=True, markup=False)
    assert capsys.readouterr().out.strip() == f"report: {path}"


def test_plurals():
    assert plural(1, "model") == "1 model" and plural(3, "model") == "3 models"
    assert plural(1, "shift entry", "shift entries") == "1 shift entry" and plural(2, "x", "ys") == "2 ys"
    assert plural(12345, "image") == "12,345 images"


def test_line_progress_writes_every_few_seconds_and_at_the_end():
    now = [0.0]
    out = io.StringIO()
    bar = LineProgress(1000, every=5.0, stream=out, clock=lambda: now[0])
    for _ in range(9):  # 100 images a second for 9 seconds: one line at 5 s
        now[0] += 1.0
        bar.advance("lite0 gaussian_noise s3", 100)
    assert out.getvalue().splitlines() == [
        "evaluate: 500/1,000 images (50.0%), 100.0 img/s, about 5 s left; lite0 gaussian_noise s3"]
    now[0] += 1.0
    bar.advance("lite0 fog s5", 100)
    bar.close()
    assert out.getvalue().splitlines()[-1] == "evaluate: 1,000/1,000 images (100.0%), 100.0 img/s; lite0 fog s5"


def test_cli_output_to_a_file_has_progress_lines_and_no_hub_bars(tmp_path):
    # a spec with a hub-style text model would print transformers' 0-100% bar; the CLI turns those off
    spec = tmp_path / "spec.yaml"
    spec.write_text("dataset: _test_tiny\nmodels: [{name: dummy_classifier, params: {label_space: 2}}]\n"
                    "shifts: [clean, {name: _test_noise, severities: [1, 2]}]\nmetrics: [top1]\nbatch_size: 4\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(SRC), os.environ.get("PYTHONPATH", "")]))
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    code = ("import sys, os, tiny_registry; from shiftbench.cli import main; rc = main(sys.argv[1:]); "
            "print('HF', os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS'), file=sys.stderr); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, "evaluate", "--config", str(spec), "--store", "r.db"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == "HF 1"
    assert lines[-2].startswith("evaluate: 60/60 images (100.0%), ")
    assert "3 result rows of run " in done.stdout and "engine: local (this process)" in done.stdout  # the run's summary


def test_a_table_too_wide_for_the_terminal_prints_as_records():
    import io

    from rich.console import Console
    from rich.table import Table

    from shiftbench.console import print_table

    table = Table(title="top-1 (%)")
    for col in ("model", "clean", "natural backgrounds (mean)", "worst corruption"):
        table.add_column(col)
    table.add_row("efficientnet_lite0", "45.3", "54.9", "elastic_transform s5 (0.0)")
    narrow, wide = io.StringIO(), io.StringIO()
    print_table(Console(file=narrow, width=40, color_system=None), table)
    print_table(Console(file=wide, width=200, color_system=None), table)
    lines = narrow.getvalue().splitlines()
    assert lines == ["top-1 (%)", "efficientnet_lite0: clean 45.3 · natural backgrounds (mean) 54.9 · "
                     "worst corruption elastic_transform s5 (0.0)"]
    assert "┃ model" in wide.getvalue() and "elastic_transform s5 (0.0)" in wide.getvalue()
