"""``shiftbench demo``: the bundled benchmark on built-in data with the bundled models, then its report.

The face layer beside the CLI: it runs specs through the engine and builds the report from the store, so
it sits above both (demo/run.py holds the work).
"""

from __future__ import annotations

from .run import run_demo

__all__ = ["run_demo"]
