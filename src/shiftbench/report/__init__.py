"""Reports built from the results store alone (tables, plots, HTML); they never re-run models.

``build_report(store, out, run_id=None)`` writes the report of one run (default: the latest) or a list of runs
and returns the path of report.html; ``run_headline(store, run_id=None)`` is one run's headline as its report
shows it (a ``report.headline.Headline``; None for a run without results)."""

from __future__ import annotations

from .build import build_report, run_headline

__all__ = ["build_report", "run_headline"]
