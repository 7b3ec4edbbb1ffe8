"""Reports built from the results store alone (tables, plots, HTML); they never re-run models."""

from __future__ import annotations

import os
from pathlib import Path


def build_report(store: str | os.PathLike, out: str | os.PathLike, run_id: str | list[str] | None = None) -> Path:
    """Write the report of one run (default: the latest) or a list of runs of ``store`` into ``out``;
    returns the path of report.html."""
    from .build import build_report as _build

    return _build(store, out, run_id=run_id)


def run_headline(store: str | os.PathLike, run_id: str | None = None) -> dict | None:
    """The headline of one run of ``store`` (default: the latest) as its report shows it, from the store alone:
    ``{"metric", "groups", "columns", "rows", "note", ...}`` (report/headline.py); None for a run without results."""
    from .build import run_headline as _headline

    return _headline(store, run_id)
