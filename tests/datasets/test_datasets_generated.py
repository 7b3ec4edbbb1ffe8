"""datasets.generated: a folder written by ``shiftbench generate`` is told from any other by generate's
settings above it, and says the shift and severity it was made under (issue 27); the report side is in
tests/report/test_report_headline.py."""

from __future__ import annotations

import doctest
import json

from shiftbench.datasets import generated


def test_module_doctest():
    assert doctest.testmod(generated).failed == 0


def test_generated_origin_reads_the_settings_and_nothing_else(tmp_path):
    generated_origin = generated.generated_origin

    (tmp_path / "fog" / "2" / "cls").mkdir(parents=True)
    assert generated_origin(tmp_path / "fog" / "2") is None  # no generate settings: an ordinary folder
    (tmp_path / "generate.json").write_text(json.dumps({"dataset": "src", "seed": 7, "shift_params": {"a": 1},
                                                        "protocol": "imagenet-c"}))
    assert generated_origin(tmp_path / "fog" / "2") is None  # neither a manifest nor a journal yet
    (tmp_path / "manifest.partial.jsonl").write_text("")
    got = generated_origin(tmp_path / "fog" / "2")
    assert got == {"shift": "fog", "severity": 2, "params": {"a": 1}, "seed": 7, "source": "src", "complete": False,
                   "protocol": "imagenet-c"}
    (tmp_path / "manifest.jsonl").write_text("")
    assert generated_origin(tmp_path / "fog" / "2")["complete"] is True
    assert generated_origin(tmp_path / "fog" / "2" / "cls") is None and generated_origin(tmp_path) is None
    (tmp_path / "generate.json").write_text("not json")
    assert generated_origin(tmp_path / "fog" / "2") is None
