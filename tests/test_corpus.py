"""The adversarial corpus, run: every committed case gives its expected exit status and message.

The corpus (``tests/corpus/cases/``) is built by ``tests/corpus/build.py`` from the builders in
``tests/corpus/cases_*.py``: hostile archive members, odd COCO files, unusual names, out-of-range seeds,
damaged stores, out folders that overlap the data. Each case runs through the CLI entry point in a copy
of its folder. A case that must be refused (exit 2) prints exactly one line, ``error: ...``, with no
traceback, and leaves its inputs as they were (nothing half-written, nothing removed).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from corpus.build import CASES_DIR, all_cases, build, differences
from shiftbench.cli import main

CASES = {case.name: case for case in all_cases()}


def test_the_committed_corpus_is_what_the_script_builds(tmp_path):
    build(tmp_path / "cases")
    assert differences(CASES_DIR, tmp_path / "cases") == [], "run: python tests/corpus/build.py"


def test_every_issue_class_has_cases():
    kinds = {case.kind for case in CASES.values()}
    assert {"files-lost", "numbers", "traceback", "dry-run"} <= kinds, kinds


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name, tmp_path, capsys, monkeypatch):
    expect = json.loads((CASES_DIR / name / "expect.json").read_text())
    case = CASES[name]
    assert expect == case.expect()
    work, out = tmp_path / "case", tmp_path / "out"
    shutil.copytree(CASES_DIR / name, work, symlinks=True)
    out.mkdir()
    for rel, text in case.extra.get("out_files", {}).items():  # a user's files already in the out folder
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    before, out_before = _snapshot(work), _snapshot(out)
    monkeypatch.chdir(work)
    argv = [arg.replace("{out}", str(out)) for arg in expect["argv"]]
    code = main(argv)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code == expect["exit"], f"{name}: exit {code}, expected {expect['exit']}; output:\n{text[-3000:]}"
    assert expect["message"] in text, f"{name}: {expect['message']!r} not in output:\n{text[-3000:]}"
    assert "Traceback" not in text
    if expect["exit"] == 2:
        lines = [line for line in captured.err.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "\n" not in lines[0].strip(), captured.err
        assert _snapshot(work) == before, f"{name}: a refused command changed its inputs"
    for rel in case.extra.get("unchanged", []):  # the user's files in the out folder, left byte for byte
        assert (out / rel).is_file(), f"{name}: {rel} was removed from the out folder"
        assert (out / rel).read_bytes() == out_before[rel], f"{name}: {rel} was changed"
    if case.extra.get("out_empty"):
        assert _snapshot(out) == out_before, f"{name}: a refused command left files in its out folder"
    os.chdir(tmp_path)
