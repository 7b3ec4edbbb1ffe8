"""Reports built from the results store alone (tables, plots, HTML); they never re-run models."""

from __future__ import annotations

import os

from ..errors import ShiftbenchError


def build_report(store: str | os.PathLike, out: str | os.PathLike, run_id: str | None = None):
    """Write report files for one run of ``store`` into ``out``; returns the main file's path."""
    from ..engine.store import Store

    Store(store, create=False).close()  # refuse a missing or foreign file before anything else
    try:
        from .build import build_report as _build
    except ImportError:
        raise ShiftbenchError("the report builder is not part of this version yet (see the open issues)") from None
    return _build(store, out, run_id=run_id)
