"""The `shiftbench` command: list, env, dry-run, one-line errors without tracebacks, light imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SRC = HERE.parent / "src"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(SRC), env.get("PYTHONPATH", "")])
    env["COLUMNS"] = "200"
    code = "import sys, tiny_registry; from shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120)


def test_list_and_patterns():
    out = run("list", "shifts")
    assert out.returncode == 0 and "clean" in out.stdout and "_test_noise" in out.stdout
    names = run("list", "shifts", "*noise*", "--names").stdout.split()
    assert "_test_noise" in names and "clean" not in names
    assert run("list", "datasets", "--names").stdout.split().count("_test_tiny") == 1


def test_list_pattern_matching_nothing_is_one_error_line():
    out = run("list", "shifts", "nonexistent")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == ["error: no shifts match 'nonexistent'"]
    close = run("list", "shifts", "gausian_noise", "--names")
    assert close.returncode == 2 and "did you mean 'gaussian_noise'" in close.stderr and "Traceback" not in close.stderr
    everywhere = run("list", "all", "zzqqxx")
    assert everywhere.returncode == 2 and everywhere.stderr.count("\n") == 1
    # `list all PATTERN` shows only the kinds the pattern matches
    blur = run("list", "all", "*blur*")
    assert blur.returncode == 0 and "shifts (" in blur.stdout and "metrics (" not in blur.stdout


def test_list_metrics_descriptions_are_clean_first_sentences():
    from shiftbench.registry import METRICS, summary_line

    out = run("list", "metrics")
    assert out.returncode == 0
    for entry in METRICS.entries():
        line = entry.description
        assert line and "``" not in line and ":class:" not in line and "\n" not in line, (entry.name, line)
        assert line == summary_line(line)  # already one sentence: nothing cut mid-sentence
    fg = METRICS.entry("foreground_iou").description
    assert fg.endswith("(all pixels together).") and "``" not in out.stdout and ":class:`" not in out.stdout
    assert summary_line("Mean over ``x`` via :func:`~a.b.c`, see *this*\n    and more. Second.") == "Mean over x via c, see this and more."


def test_env_json():
    out = run("env", "--json")
    assert out.returncode == 0
    info = json.loads(out.stdout)
    assert info["python"].startswith("3.") and "numpy" in info["packages"] and "cpu" in info["devices"]


def test_dry_run_prints_plan(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("dataset: _test_tiny\nmodels: [{name: dummy_classifier, params: {label_space: 2}}]\n"
                    "shifts: [{name: _test_noise, severities: 1-5}]\nmetrics: [top1]\n")
    code = "import sys, tiny_registry\nfrom shiftbench.cli import main; sys.exit(main(sys.argv[1:]))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(SRC)]), COLUMNS="200")
    out = subprocess.run([sys.executable, "-c", code, "evaluate", "--config", str(spec), "--dry-run"],
                         capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "planned conditions (6)" in out.stdout and "_test_noise" in out.stdout
    assert "20 samples" in out.stdout and "dummy_classifier" in out.stdout
    assert not (tmp_path / "s.db").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    "args, message",
    [
        (["evaluate", "--config", "/no/such.yaml", "--dry-run"], "spec file not found"),
        (["generate", "--dataset", "_test_tiny", "--shift", "_test_nois", "--out", "x"], "did you mean '_test_noise'"),
        (["generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--severity", "9", "--out", "x"],
         "severity 9 is outside 1..5"),
        (["report", "--store", "{bad}", "--out", "o"], "not an SQLite database"),
    ],
)
def test_user_mistakes_are_one_line(tmp_path, args, message):
    args = [a.replace("{bad}", str(tmp_path / "bad.db")) for a in args]
    (tmp_path / "bad.db").write_text("not a database")
    out = run(*args, cwd=tmp_path)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], out.stderr


def test_malformed_yaml_is_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dataset: [unclosed\n")
    out = run("evaluate", "--config", str(bad), "--dry-run")
    assert out.returncode == 2 and "malformed YAML" in out.stderr and "Traceback" not in out.stderr


def test_generate_from_cli(tmp_path):
    out = run("generate", "--dataset", "_test_tiny", "--shift", "_test_noise", "--severity", "1-2",
              "--out", str(tmp_path / "g"), "--limit", "3", "--workers", "2")
    assert out.returncode == 0, out.stderr
    assert len((tmp_path / "g" / "manifest.jsonl").read_text().splitlines()) == 6


def test_import_and_list_do_not_import_torch():
    code = ("import sys; from shiftbench.cli import main\n"
            "rc = main(['list', 'shifts', '--names'])\n"
            "print('HEAVY', [m for m in ('torch', 'diffusers', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(SRC)), timeout=120)
    assert "HEAVY []" in out.stdout
    imported = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "diffusers" not in imported
