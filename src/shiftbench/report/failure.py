"""Failure points in the report: where each model breaks under each corruption, ranked.

For every (model, shift, params) the run measured at two or more severities, with per-sample values of the
headline metric (a per-image mean, such as top-1) on clean and at each severity for the same images: the
severity at which the metric falls to half of clean (``metrics.failure.failure_point``: linear between
measured severities, with a paired bootstrap CI over images), or "not within" the measured range. Ranked
earliest first; the Markdown export is ``failure_points.md``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..results.store import params_key
from .tables import CLEAN

__all__ = ["failure_entries", "failure_blocks", "FRACTION"]

FRACTION = 0.5  # "breaks at": half of clean


def failure_entries(samples: Sequence[dict[str, Any]], metric: str, fraction: float = FRACTION,
                    seed: int = 0) -> list[dict[str, Any]]:
    """One entry per (model, shift, params) with a curve: ``{"model", "shift", "params", "point"}``, ranked
    (crossed first, earliest severity first; then the ones that never cross, most likely to cross first)."""
    from ..metrics.failure import failure_point

    per = {(s["model"], s["shift"], params_key(s["params"]), int(s["severity"])): s for s in samples
           if s["metric"] == metric and s.get("kind") == "mean"}
    curves: dict[tuple[str, str, str], list[int]] = {}
    for model, shift, pk, severity in per:
        if shift != CLEAN:
            curves.setdefault((model, shift, pk), []).append(severity)
    entries = []
    for (model, shift, pk), severities in sorted(curves.items()):
        clean = per.get((model, CLEAN, params_key({}), 0))
        severities = sorted(severities)
        if clean is None or len(severities) < 2:
            continue
        ids = list(clean["ids"])
        rows = []
        for sev in severities:
            s = per[(model, shift, pk, sev)]
            by_id = dict(zip(s["ids"], np.asarray(s["values"], dtype=float)))
            if set(by_id) != set(ids):  # another image set (a skipped sample): no paired curve
                break
            rows.append([by_id[i] for i in ids])
        if len(rows) != len(severities) or len(ids) < 2:
            continue
        point = failure_point(severities, np.asarray(clean["values"], dtype=float), np.asarray(rows), fraction,
                              seed=seed)
        entries.append({"model": model, "shift": shift, "params": per[(model, shift, pk, severities[0])]["params"],
                        "severities": severities, "point": point})
    return sorted(entries, key=lambda e: (not e["point"].crossed,
                                          e["point"].severity if e["point"].crossed else -e["point"].p_crossed,
                                          e["model"], e["shift"]))


def _severity_text(point: Any, severities: Sequence[float]) -> str:
    if not point.crossed:
        return f"not within {min(severities):g}-{max(severities):g}"
    high = "beyond the range" if math.isinf(point.high) else f"{point.high:.2f}"
    return f"{point.severity:.2f} [{point.low:.2f}, {high}]"


def failure_blocks(entries: Sequence[dict[str, Any]], metric: str, fraction: float = FRACTION) -> list[dict[str, Any]]:
    """The report's blocks (report.blocks) for the failure points: a paragraph and one ranked table."""
    if not entries:
        return []
    pct = metric.startswith(("top", "acc")) or metric in ("miou", "R@10")
    scale = 100.0 if pct else 1.0
    head = ["rank", "model", "shift", f"breaks at (severity where {metric} <= {fraction:g} x clean) [95% CI]",
              f"clean {metric}", f"{metric} at each severity", "share of resamples that cross"]
    body = []
    for rank, e in enumerate(entries, 1):
        p = e["point"]
        params = f" {e['params']}" if e["params"] else ""
        body.append([str(rank), e["model"], f"{e['shift']}{params}", _severity_text(p, e["severities"]),
                     f"{scale * p.clean:.1f}", " ".join(f"{scale * v:.1f}" for v in p.curve), f"{p.p_crossed:.2f}"])
    text = (f"Where each model breaks: the severity at which {metric} falls to {fraction:g} x its clean value, "
            "linear between the measured severities (from clean at severity 0 when the first one is already "
            "below), with a paired bootstrap 95% CI over images (2,000 resamples; an upper end \"beyond the "
            "range\" means some resamples never cross). Ranked earliest first; \"not within\" marks a curve "
            "that never falls that far in the measured range.")
    return [{"kind": "text", "text": text}, {"kind": "table", "head": head, "rows": body}]
