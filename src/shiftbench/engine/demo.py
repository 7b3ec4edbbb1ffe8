"""``shiftbench demo``: the bundled benchmark on built-in data with the bundled models."""

from __future__ import annotations

from ..errors import ShiftbenchError


def run_demo(out: str, quick: bool = False) -> None:
    try:
        from .demo_run import run_demo as _run
    except ImportError:
        raise ShiftbenchError("the demo is not part of this version yet (see the open issues)") from None
    _run(out, quick=quick)
