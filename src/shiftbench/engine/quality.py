"""The quality step of a run: image-quality metrics of the shifted images (the spec's ``quality:`` section),
computed after the conditions and stored in the run as the artifact ``quality/rows.json``.

The report reads that artifact and never runs a feature network itself. The artifact is written in
one transaction once every quality row is computed, so a run killed during this step holds no quality
rows and computes them on resume; a run that has them does not compute them again.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .evaluate import Plan
    from .store import Store

QUALITY_ARTIFACT = "quality/rows.json"

log = logging.getLogger("shiftbench")


def stored_quality_rows(store: "Store", run_id: str) -> list[dict[str, Any]]:
    """The quality rows saved in a run (artifact ``quality/rows.json``), or [] when it has none."""
    found = store.artifacts(run_id, QUALITY_ARTIFACT)
    return json.loads(found[0]["data"].decode("utf-8")) if found else []


def run_quality(plan: "Plan", store: "Store", run_id: str | None, progress: bool = False) -> list[dict[str, Any]]:
    """Compute and store the quality rows of ``plan``'s spec section unless the run already holds them.

    Returns the run's quality rows ([] for a spec without a ``quality:`` section, or a retrieval spec).
    The images are those the runner scored: the run's dataset (its ``limit`` and ``ids`` applied), the
    first ``quality.limit`` of them, shifted with the run's seed at ``quality.severity``. With ``progress``
    (the CLI) a plain line on stderr after each shifted set: the pass can take minutes.
    """
    section = plan.spec.quality
    if not section or run_id is None:
        return []
    if plan.retrieval is not None:  # said, not silently dropped: composed-retrieval queries are no edit sets
        log.warning("quality: the spec's quality section is not computed for a composed-retrieval spec")
        return []
    if store.artifacts(run_id, QUALITY_ARTIFACT):  # a resumed run: computed before, nothing to redo
        return stored_quality_rows(store, run_id)
    from ..metrics.quality import evaluate_quality

    shifts = [{"name": s.name, "params": dict(s.params)} for s in plan.spec.shifts if s.name != "clean"]
    if not shifts:
        return []
    log.info("quality: %s of %d shifted sets, severity %d", ", ".join(section["metrics"]), len(shifts),
             section["severity"])
    started = time.monotonic()

    def report(done: int, total: int, label: str) -> None:
        # one short line per set, never wrapped or redrawn: readable in a terminal and in a log file
        print(f"quality: {done}/{total} shifted sets ({label}), {time.monotonic() - started:.0f} s",
              file=sys.stderr, flush=True)

    rows = evaluate_quality(plan.dataset, shifts, metrics=section["metrics"], severity=section["severity"],
                            limit=section.get("limit"), seed=plan.spec.seed, features=section["features"],
                            clip=section.get("clip"), on_shift=report if progress else None)
    store.put_artifact(run_id, QUALITY_ARTIFACT, json.dumps(rows, sort_keys=True).encode("utf-8"))
    log.info("quality: %d rows stored in %.1f s", len(rows), time.monotonic() - started)
    return rows
