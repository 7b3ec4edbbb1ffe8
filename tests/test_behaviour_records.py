"""Issue 26: the restructured run kernel behaves as the code before it, value for value.

tests/records/behaviour.json was written by tools/record_behaviour.py from the code before the
restructuring: cuts of the quick demo's three specs and one small spec per task on the end-to-end tests'
tiny models. Each test here runs one of those parts again, through the same functions of the tool, against
the current code, and compares everything recorded: result values (exact), n, extras, predictions,
per-sample values, thumbnails and other artifacts, run specs and identities. On a difference it lists
what changed, condition by condition. After an intended change of behaviour, write the record again
(``python tools/record_behaviour.py``) and say why in the commit.
"""

from __future__ import annotations

import pytest
from repo_tools import skip_without_backends
from repo_tools import tool as _tool

tool = _tool("record_behaviour")


@pytest.fixture(scope="module")
def recorded():
    return tool.load()


@pytest.mark.slow
@pytest.mark.parametrize("part", tool.PARTS)
def test_part_behaves_as_recorded(part, recorded):
    skip_without_backends(part)
    assert part in recorded["parts"], f"{part}: not in {tool.RECORD} (record it: python tools/record_behaviour.py)"
    now, _ = tool.record_part(part)
    lines = tool.differences(recorded["parts"][part], now)
    if lines:
        env_then, env_now = recorded.get("environment", {}), tool.environment()
        changed = {k: (env_then.get(k), env_now.get(k)) for k in set(env_then) | set(env_now)
                   if env_then.get(k) != env_now.get(k)}
        note = f"\nversions differ from the recording's: {changed}" if changed else ""
        pytest.fail(f"{part}: {len(lines)} differences from {tool.RECORD.name}{note}\n" + "\n".join(lines),
                    pytrace=False)


def test_differences_are_readable():
    """The comparison names what changed: a value, a missing condition, an extra prediction."""
    a = {"conditions": {"run | m | d | clean {} s0": {"results": {"top1": [(0.5).hex(), 4]},
                                                       "predictions": [["s0", "{}"]]}}}
    b = {"conditions": {"run | m | d | clean {} s0": {"results": {"top1": [(0.25).hex(), 4]},
                                                       "predictions": [["s0", "{}"], ["s1", "{}"]]},
                        "run | m | d | fog {} s3": {}}}
    assert tool.differences(a, a) == []
    text = "\n".join(tool.differences(a, b))
    assert "changed  /conditions/run | m | d | clean {} s0/results/top1" in text
    assert "0.5 (0x1.0000000000000p-1)" in text and "0.25 (0x1.0000000000000p-2)" in text
    assert "extra    /conditions/run | m | d | fog {} s3" in text
    assert "/predictions" in text
    assert tool.rows({"conditions": a["conditions"]}) == [("run", "m", "d", "clean {} s0", "top1", (0.5).hex(), 4)]
