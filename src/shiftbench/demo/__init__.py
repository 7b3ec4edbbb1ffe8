"""``shiftbench demo``: the bundled benchmark on built-in data with the bundled models, then its report.

The face layer beside the CLI: it runs specs through the engine and builds the report from the store, so
it sits above both (demo/run.py holds the work; this module stays light, the CLI imports it to start fast).
"""

from __future__ import annotations

from pathlib import Path


def run_demo(out: str, quick: bool = False) -> Path:
    from .run import run_demo as _run

    return _run(out, quick=quick)
