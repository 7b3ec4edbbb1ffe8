"""The text corruptions through the generate engine: captions corrupted, params recorded, resume."""

from __future__ import annotations

import json

import shiftbench as sb
from shiftbench.engine.generate import generate, resolve_shifts

import tiny_registry  # noqa: F401  (registers the _test_tiny dataset, captioned)


def test_generate_corrupts_captions_and_records_replayable_params(tmp_path):
    names = resolve_shifts(["text"])
    assert names == sorted(sb.list_shifts("text_*"))
    summary = generate("_test_tiny", names, [1, 5], tmp_path / "out", seed=3, limit=4)
    assert summary == {"written": 56, "skipped": 0, "total": 56, "unreadable": 0}
    records = [json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    changed = 0
    for record in records:
        shift = sb.create_shift(record["shift"])
        caption = f"picture number {record['index']} of a cat"
        assert "output" not in record  # text shifts write no images
        assert record["text"] == shift(caption, severity=record["severity"], seed=3, sample_id=record["id"])
        assert shift.replay(caption, record["params"]) == record["text"]
        changed += record["text"] != caption
    assert changed >= 40  # the homophone list has no word of these captions; the rest all change
    again = generate("_test_tiny", names, [1, 5], tmp_path / "out", seed=3, limit=4)
    assert again == {"written": 0, "skipped": 56, "total": 56, "unreadable": 0}
