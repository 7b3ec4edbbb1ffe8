"""benchmarks/imagenet_c_preset.py: its smoke mode prints a table and never writes the committed results, and
docs/preprocess.md quotes the committed results' table as the benchmark writes it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "imagenet_c_preset.py"
RESULTS = ROOT / "benchmarks" / "results" / "imagenet_c_preset.json"


def test_docs_quote_the_measured_table():
    bench = load_benchmark("imagenet_c_preset")
    result = json.loads(RESULTS.read_text())
    assert result["images"] == 20 and result["threads"] == 1 and len(result["rows"]) == 4
    assert bench.markdown_table(result) in (ROOT / "docs" / "preprocess.md").read_text()


def test_quick_mode_prints_and_never_writes_the_committed_results():
    pytest.importorskip("foolbox")
    before = RESULTS.read_bytes()
    refused = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(RESULTS)], capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2 and "--quick never writes the committed results file" in refused.stderr
    run = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--corruptions", "gaussian_noise"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "| gaussian_noise | " in run.stdout and "wrote" not in run.stdout
    assert RESULTS.read_bytes() == before
