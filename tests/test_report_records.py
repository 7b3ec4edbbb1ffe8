"""Issue 37: the typed results and the one loader leave every reader's output as it was, byte for byte.

tests/records/reports.json was written by tools/record_reports.py from the code before the restructuring:
for each part of tools/record_behaviour.py (the quick demo's cut specs, one small spec per task), the files
and printed text of ``report --all-runs``, ``export --all`` in the three formats and ``leaderboard`` by
several columns. Each test here runs one part again against the current code and compares. After an
intended change of a reader's output, write the record again (``python tools/record_reports.py``) and say
why in the commit.
"""

from __future__ import annotations

import pytest
from repo_tools import skip_without_backends
from repo_tools import tool as _tool

tool = _tool("record_reports")


@pytest.fixture(scope="module")
def recorded():
    import json

    return json.loads(tool.RECORD.read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("part", tool.PARTS)
def test_readers_write_as_recorded(part, recorded):
    skip_without_backends(part)
    assert part in recorded["parts"], f"{part}: not in {tool.RECORD.name} (python tools/record_reports.py)"
    lines = tool.differences(recorded["parts"][part], tool.record_part(part), part)
    if lines:
        pytest.fail(f"{part}: {len(lines)} differences from {tool.RECORD.name}\n" + "\n".join(lines), pytrace=False)


def test_differences_name_the_line():
    """A changed line of a written file is shown as a diff line under its path; a missing file is named."""
    a = {"report": {"files": {"tables.md": {"text": ["| m | 0.50 |"], "sha256": "x"}}}}
    b = {"report": {"files": {"tables.md": {"text": ["| m | 0.51 |"], "sha256": "y"}, "extra.csv": {}}}}
    assert tool.differences(a, a) == []
    text = "\n".join(tool.differences(a, b, "demo"))
    assert "changed  demo/report/files/tables.md/text" in text
    assert "-| m | 0.50 |" in text and "+| m | 0.51 |" in text
    assert "extra    demo/report/files/extra.csv" in text


def test_floats_compare_within_the_tolerance_and_nothing_else_does():
    """The last digits of a model's output move with the CPU's kernels: a float within FLOAT_TOLERANCE is the
    same, a larger change or any other text change is a difference, for inline lines and for digests alike."""
    line = "ece,fog s3,m,0.3371053376377681,-0.0019212975122144815,6"
    noise = "ece,fog s3,m,0.33710534286107774,-0.0019212922889048634,6"
    real = "ece,fog s3,m,0.3381053376377681,-0.0019212975122144815,6"
    renamed = "ece,fog s4,m,0.3371053376377681,-0.0019212975122144815,6"
    text = lambda *lines: {"t.csv": {"text": list(lines), **tool._shape("\n".join(lines)), "sha256": "x"}}  # noqa: E731
    digest = lambda *lines: {"t.csv": {**tool._shape("\n".join(lines)), "sha256": "x"}}  # noqa: E731
    for pack in (text, digest):
        assert tool.differences(pack(line), pack(noise)) == []
        assert tool.differences(pack(line), pack(real)) != []
        assert tool.differences(pack(line), pack(renamed)) != []
    assert tool.differences(text(line, "1"), text(line, "2")) != []  # an integer is compared exactly
