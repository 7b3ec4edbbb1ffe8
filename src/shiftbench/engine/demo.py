"""``shiftbench demo``: the bundled benchmark on built-in data with the bundled models (see demo_run)."""

from __future__ import annotations

from pathlib import Path


def run_demo(out: str, quick: bool = False) -> Path:
    from .demo_run import run_demo as _run

    return _run(out, quick=quick)
