"""Failure points from a fine severity grid against the five published levels, from one store.

    shiftbench evaluate --config configs/failure_grid.yaml --store grid.db
    python benchmarks/failure_grid.py --store grid.db [--run RUN] [--json benchmarks/results/failure_grid.json]

For each model and corruption of the run: the severity where top-1 falls to half of clean
(``metrics.failure.failure_point``, linear between measured severities, 95% paired bootstrap CI over images,
2,000 resamples, seed 0), once from the whole severities 1..5 alone and once from every measured severity
(the grid 1-5:0.25 of configs/failure_grid.yaml), with the width of each CI. Between published levels the
five-level curve can only draw a straight line; the grid measures the curve there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def _fmt(point) -> str:
    if point.severity is None:
        return f"not within ({100 * point.p_crossed:.0f}% of resamples cross)"
    high = "beyond" if point.high is None or not np.isfinite(point.high) else f"{point.high:.2f}"
    return f"{point.severity:.2f} [{point.low:.2f}, {high}]"


def _width(point) -> float | None:
    if point.severity is None or point.high is None or not np.isfinite(point.high):
        return None
    return float(point.high - point.low)


def curve(samples: list[dict], model: str, shift: str, whole_only: bool):
    """(severities, clean values, values per severity) for one model and corruption, images in one order."""
    from shiftbench.severity import canonical

    clean = next(s for s in samples if s["model"] == model and s["shift"] == "clean" and s["metric"] == "top1")
    order = sorted(clean["ids"])
    def column(s):
        by_id = dict(zip(s["ids"], s["values"]))
        return [float(by_id[i]) for i in order]
    rows = sorted((canonical(s["severity"]), s) for s in samples
                  if s["model"] == model and s["shift"] == shift and s["metric"] == "top1"
                  and (not whole_only or isinstance(canonical(s["severity"]), int)))
    return [sev for sev, _ in rows], np.asarray(column(clean)), np.asarray([column(s) for _, s in rows])


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--run", default=None, help="run id (default: the latest)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    from shiftbench.metrics.failure import failure_point
    from shiftbench.results.store import Store

    with Store(args.store, create=False) as db:
        run = args.run or db.runs()[-1]["run_id"]
        samples = db.samples(run)
    if not samples:
        sys.exit(f"{args.store}: run {run} has no per-sample values")
    models = sorted({s["model"] for s in samples})
    shifts = sorted({s["shift"] for s in samples} - {"clean"})
    result: dict = {"run": run, "points": []}
    print("| corruption | model | clean top-1 | from 1..5 (5 severities) | from the grid | CI width 1..5 / grid |")
    print("|---|---|---|---|---|---|")
    for shift in shifts:
        for model in models:
            cells = {}
            for key, whole in (("levels", True), ("grid", False)):
                severities, clean, values = curve(samples, model, shift, whole)
                point = failure_point(severities, clean, values, fraction=0.5, seed=0)
                cells[key] = (point, len(severities))
            p5, pg = cells["levels"][0], cells["grid"][0]
            w5, wg = _width(p5), _width(pg)
            widths = f"{w5:.2f} / {wg:.2f}" if w5 is not None and wg is not None else "-"
            print(f"| {shift} | {model} | {100 * p5.clean:.1f} | {_fmt(p5)} | {_fmt(pg)} | {widths} |", flush=True)
            result["points"].append({
                "shift": shift, "model": model, "clean": p5.clean, "n_images": int(p5.n),
                **{k: {"severities": n, "severity": p.severity, "low": p.low,
                       "high": None if p.high is None or not np.isfinite(p.high) else p.high,
                       "p_crossed": p.p_crossed} for k, (p, n) in cells.items()}})
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
