"""Reports built from the results store alone (tables, plots, HTML); they never re-run models."""

from __future__ import annotations

import os
from pathlib import Path


def build_report(store: str | os.PathLike, out: str | os.PathLike, run_id: str | list[str] | None = None) -> Path:
    """Write the report of one run (default: the latest) or a list of runs of ``store`` into ``out``;
    returns the path of report.html."""
    from .build import build_report as _build

    return _build(store, out, run_id=run_id)
