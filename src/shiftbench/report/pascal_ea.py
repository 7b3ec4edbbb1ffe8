"""Pascal-EA tables from the store: segmentation change per attribute (like the paper's Table 1) and the
image-quality table, as report blocks (HTML) and as Markdown/CSV exports.

Table 1: rows = models, columns = the attribute values (violet ... sketch), each cell the change of the
segmentation metric (mIoU, or foreground IoU for class-agnostic models) against clean, in points
(shifted - clean: negative is worse), and the mean change over the attributes; the paper's Table 1 row
only under the paper's protocol (mIoU, all 12 edits: :func:`paper_protocol`), else one line why not. The quality table: rows =
attribute values grouped by family, columns = LPIPS, DINO distance, FID, CLIP direction. Everything here
is a pure function of stored rows: the quality rows are computed by ``shiftbench evaluate`` from the
spec's ``quality:`` section (engine/quality.py) and stored with the run; nothing here runs a model.

>>> rows = [{"model": "m", "shift": "clean", "params": {}, "severity": 0, "metric": "miou", "value": 0.8, "n": 4},
...         {"model": "m", "shift": "attribute_color", "params": {"color": "violet"}, "severity": 5,
...          "metric": "miou", "value": 0.7, "n": 4}]
>>> t = table1(rows)
>>> t["cells"]["m"]["violet"], t["overall"]["m"], t["n"]["m"]["violet"]
(-10.0, -10.0, 4)
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any, Sequence

from ..conditioning.attribute_text import ATTRIBUTES
from ..errors import ShiftbenchError
from ..results.artifacts import stored_quality_rows
from ..severity import Severity, canonical
from ..severity import label as severity_label
from .blocks import markdown_text

__all__ = ["ATTRIBUTE_COLUMNS", "attribute_value", "table1", "quality_table", "pascal_blocks", "blocks_markdown",
           "write_pascal_ea", "stored_quality_rows", "main", "PAPER_TABLE1", "hurt_most", "family_drops",
           "paper_protocol"]

ATTRIBUTE_COLUMNS: list[tuple[str, str]] = [(f, v) for f, vs in ATTRIBUTES.items() for v in vs]
SEGMENTATION_METRICS = ("miou", "foreground_iou")
QUALITY_COLUMNS = ("lpips", "dino_distance", "fid", "clip_direction", "clip_direction_accuracy")
QUALITY_TITLES = {"lpips": "LPIPS ↓", "dino_distance": "DINO dist. ↓", "fid": "FID ↓", "clip_direction": "CLIP dir. ↑",
                  "clip_direction_accuracy": "CLIP acc. ↑"}
QUALITY_DIGITS = {"fid": 2}
CHANGE = "change against clean (shifted − clean, points)"

# Source: Pascal-EA paper, Table 1: mIoU change per attribute in points, averaged over 11 segmentation models
# (negative = worse than clean).
PAPER_TABLE1: dict[str, float] = {"violet": -9.7, "pink": -8.3, "multi-color": -12.0, "wood": -19.7, "stone": -19.5,
                                  "metal": -18.7, "paper": -31.2, "dotted": -9.0, "striped": -8.0, "snowy": -8.1,
                                  "painting": -7.3, "sketch": -56.5}
PAPER_ROW = "paper (mean of 11 models)"
PAPER_METRIC = "miou"  # the paper's Table 1 is mIoU; a table of another metric gets no paper row
PAPER_NAME = "Pascal-EA Table 1 (mIoU change, mean of 11 segmentation models)"


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


def _n(row: dict[str, Any] | None) -> int | None:
    return None if row is None or row.get("n") is None else int(row["n"])


def table1(rows: Sequence[dict[str, Any]], metric: str | None = None, severity: Severity | None = None) -> dict[str, Any]:
    """Changes against clean (points, (shifted - clean) x 100) per model and attribute at one severity
    (default: the highest).

    Returns ``{metric, severity, models, columns, clean, clean_n, cells, n, overall}``; ``cells[model][value]``
    is None where the condition was not run (or its value is undefined), ``n[model][value]`` the samples the
    shifted value rests on; ``overall`` is the mean change over the columns that were run.
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
        severity = max(canonical(r["severity"]) for r in attr_rows)
    severity = canonical(severity)
    models = sorted({r["model"] for r in rows})
    clean_rows = {m: next((r for r in rows if r["model"] == m and r["shift"] == "clean"), None) for m in models}
    clean = {m: None if r is None or r["value"] is None else float(r["value"]) for m, r in clean_rows.items()}
    columns = [v for _, v in ATTRIBUTE_COLUMNS]
    cells: dict[str, dict[str, float | None]] = {m: {v: None for v in columns} for m in models}
    ns: dict[str, dict[str, int | None]] = {m: {v: None for v in columns} for m in models}
    for r in attr_rows:
        if canonical(r["severity"]) != severity:  # 2.5 is its own table, never part of 2's
            continue
        value = attribute_value(r["shift"], _params(r))
        if value not in cells[r["model"]]:
            continue
        ns[r["model"]][value] = _n(r)
        if clean.get(r["model"]) is None or r["value"] is None:
            continue  # an undefined value (stored as NULL) has no change
        cells[r["model"]][value] = round(100.0 * (float(r["value"]) - clean[r["model"]]), 6)
    overall = {}
    for m in models:
        vals = [v for v in cells[m].values() if v is not None and not math.isnan(v)]
        overall[m] = round(sum(vals) / len(vals), 6) if vals else None
    used = [c for c in columns if any(cells[m][c] is not None or ns[m][c] is not None for m in models)]
    return {"metric": metric, "severity": severity, "models": models, "columns": used,
            "clean": {m: None if v is None else 100.0 * v for m, v in clean.items()},
            "clean_n": {m: _n(r) for m, r in clean_rows.items()}, "cells": cells, "n": ns, "overall": overall}


def quality_table(quality_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``{columns, rows: [(family, value, {metric: v})], n: {value: n}, family_means: {family: {metric: v}}}``."""
    by_value: dict[str, dict[str, float]] = {}
    ns: dict[str, int] = {}
    for r in quality_rows:
        value = attribute_value(r["shift"], _params(r))
        if value is None:
            continue
        if r.get("n") is not None:
            ns[value] = int(r["n"])
        if r["value"] is None:  # undefined values are left out of the means
            continue
        by_value.setdefault(value, {})[r["metric"]] = float(r["value"])
    columns = [c for c in QUALITY_COLUMNS if any(c in d for d in by_value.values())]
    out_rows = [(f, v, by_value[v]) for f, v in ATTRIBUTE_COLUMNS if v in by_value]
    means: dict[str, dict[str, float]] = {}
    for f in ATTRIBUTES:
        vals = [d for ff, _, d in out_rows if ff == f]
        if vals:
            means[f] = {c: sum(d[c] for d in vals if c in d) / sum(c in d for d in vals)
                        for c in columns if any(c in d for d in vals)}
    return {"columns": columns, "rows": out_rows, "n": ns, "family_means": means}


def _f(v: float | None, signed: bool = True, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


def _family_of() -> dict[str, str]:
    return {v: f for f, v in ATTRIBUTE_COLUMNS}


def paper_protocol(t: dict[str, Any]) -> list[str]:
    """Why a :func:`table1` cannot sit beside the paper's Table 1; empty when it can: the paper's metric (mIoU)
    and its whole attribute set (all 12 edits, which its family means and "material and sketch hurt most"
    rest on).

    >>> paper_protocol({"metric": "foreground_iou", "columns": ["violet"]})[0]
    "the paper's Table 1 is mIoU, this table is foreground_iou (another metric, on other images)"
    """
    why = []
    if t["metric"] != PAPER_METRIC:
        why.append(f"the paper's Table 1 is mIoU, this table is {t['metric']} (another metric, on other images)")
    missing = [v for v in PAPER_TABLE1 if v not in t["columns"]]
    if missing:
        why.append(f"it has {len(PAPER_TABLE1) - len(missing)} of the paper's {len(PAPER_TABLE1)} attribute edits "
                   f"(missing {', '.join(missing)})")
    return why


def _table1_block(t: dict[str, Any]) -> dict[str, Any]:
    fam = _family_of()
    metric = t["metric"]
    head = ["model", f"clean {metric}"] + [f"{v} ({fam[v]})" for v in t["columns"]] + ["mean change"]
    body = []
    for m in t["models"]:
        clean_n = t["clean_n"][m]
        row: list[Any] = [m, {"text": _f(t["clean"][m], signed=False), "title": f"clean {metric}, n = {clean_n}"}]
        for c in t["columns"]:
            n, change = t["n"][m][c], t["cells"][m][c]
            shifted = None if change is None or t["clean"][m] is None else t["clean"][m] + change
            title = f"n = {n}" + ("" if shifted is None else
                                  f"; {metric} {shifted:.1f} under {c}, {t['clean'][m]:.1f} clean")
            row.append({"text": _f(change), "title": title})
        used = sum(t["cells"][m][c] is not None for c in t["columns"])
        row.append({"text": _f(t["overall"][m]), "cls": "mean",
                    "title": f"mean of {used} attribute change{'s' if used != 1 else ''}, n = {clean_n} per condition"})
        body.append(row)
    if paper_protocol(t):  # off the paper's protocol: no paper row (pascal_blocks says why in one line)
        return {"kind": "table", "head": head, "rows": body}
    paper_row: list[Any] = [PAPER_ROW, {"text": "–", "title": "the paper reports changes only"}]
    paper_used = [PAPER_TABLE1[c] for c in t["columns"] if c in PAPER_TABLE1]
    for c in t["columns"]:
        paper_row.append({"text": _f(PAPER_TABLE1.get(c)), "title": "Pascal-EA Table 1: mIoU change, mean of 11 models"})
    paper_row.append({"text": _f(sum(paper_used) / len(paper_used) if paper_used else None),
                      "title": f"mean of the paper's changes over the {len(paper_used)} attributes of this table"})
    body.append(paper_row)
    return {"kind": "table", "head": head, "rows": body}


def family_drops(changes: dict[str, float | None]) -> dict[str, float]:
    """The mean change per attribute family over the attributes that have a value (families without one are
    left out), in ``ATTRIBUTES`` order."""
    fam = _family_of()
    out: dict[str, float] = {}
    for f in ATTRIBUTES:
        vals = [v for a, v in changes.items() if fam.get(a) == f and v is not None and not math.isnan(v)]
        if vals:
            out[f] = sum(vals) / len(vals)
    return out


def hurt_most(changes: dict[str, float | None]) -> tuple[list[str], bool | None]:
    """The two attribute families with the largest mean drop, and whether "material and sketch hurt most"
    holds: those two families are material and style, and sketch is style's worst attribute. None (n/a) when
    fewer than two families, or no sketch value, were measured.

    >>> hurt_most(PAPER_TABLE1)
    (['style', 'material'], True)
    """
    means = family_drops(changes)
    top = sorted(means, key=lambda f: means[f])[:2]  # most negative first; ties keep ATTRIBUTES order
    style = {a: v for a, v in changes.items() if _family_of().get(a) == "style" and v is not None}
    if len(top) < 2 or style.get("sketch") is None:
        return top, None
    return top, set(top) == {"material", "style"} and min(style, key=lambda a: style[a]) == "sketch"


def _model_mean(t: dict[str, Any]) -> dict[str, float | None]:
    """Per attribute column: the mean change over the models that have one."""
    out: dict[str, float | None] = {}
    for c in t["columns"]:
        vals = [t["cells"][m][c] for m in t["models"] if t["cells"][m][c] is not None]
        out[c] = sum(vals) / len(vals) if vals else None
    return out


def _hurt_most_block(t: dict[str, Any]) -> dict[str, Any]:
    def say(changes: dict[str, float | None]) -> str:
        top, ok = hurt_most(changes)
        means = family_drops(changes)
        names = " and ".join(f"{f} ({means[f]:+.1f})" for f in top) or "none measured"
        return f"{names}; material and sketch hurt most: " + ("n/a" if ok is None else ("holds" if ok else "does not hold"))

    k = len(t["models"])
    items = [f"ours (mean of {k} model{'s' if k != 1 else ''}, {t['metric']}): {say(_model_mean(t))}"]
    if not paper_protocol(t):
        items.append(f"paper (mean of 11 models, mIoU, all 12 attributes): {say(PAPER_TABLE1)}")
    return {"kind": "list", "items": items}


def _quality_blocks(quality_rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    q = quality_table(quality_rows)
    feats = sorted({r.get("features") for r in quality_rows if r.get("features")})
    severities = sorted({canonical(r["severity"]) for r in quality_rows})
    ns = sorted(set(q["n"].values()))
    note = (f"Edited against clean images, severity {', '.join(map(severity_label, severities))}, "
            f"n = {', '.join(map(str, ns)) or '–'} images per edit, features: {', '.join(feats) or '–'}. "
            "Each value compares an edit's images with the same clean images (no clean column).")
    head = ["family", "attribute"] + [QUALITY_TITLES[c] for c in q["columns"]]
    body: list[list[Any]] = []
    for f, v, d in q["rows"]:
        title = f"n = {q['n'].get(v, '?')}"
        body.append([f, v] + [{"text": _f(d.get(c), False, QUALITY_DIGITS.get(c, 3)), "title": title}
                              for c in q["columns"]])
    for f, d in q["family_means"].items():
        members = [v for ff, v, _ in q["rows"] if ff == f]
        title = f"mean over {', '.join(members)}"
        body.append([{"text": f, "cls": "mean"}, {"text": "mean", "cls": "mean"}]
                    + [{"text": _f(d.get(c), False, QUALITY_DIGITS.get(c, 3)), "cls": "mean", "title": title}
                       for c in q["columns"]])
    return [{"kind": "heading", "text": "Image quality of the edits"}, {"kind": "text", "text": note},
            {"kind": "table", "head": head, "rows": body}]


def pascal_blocks(rows: Sequence[dict[str, Any]], quality_rows: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The Pascal-EA summary as report blocks (see report/build.py: heading, text, table; cells carry n in
    their title, family means are cells of class "mean"); [] when there is nothing to show."""
    blocks: list[dict[str, Any]] = []
    present = {r["metric"] for r in rows}
    severities = sorted({canonical(r["severity"]) for r in rows if attribute_value(r["shift"], _params(r))}, reverse=True)
    metrics = [m for m in SEGMENTATION_METRICS if m in present]
    if severities and metrics:
        blocks.append({"kind": "heading", "text": f"Segmentation under attribute edits: {CHANGE}"})
        blocks.append({"kind": "text", "text": "Each cell: the segmentation metric under the edit minus its clean "
                       "value, in points (negative is worse); the last column is the mean over the attributes. "
                       "Hover a cell for the number of images it rests on. A table that follows the paper's "
                       "protocol (mIoU, all 12 attribute edits) ends with the paper's Table 1 row (mIoU change "
                       "averaged over 11 segmentation models on Pascal-EA) for comparison; any other says in one "
                       "line why it has none."})
        for metric in metrics:
            for sev in severities:
                blocks.append({"kind": "heading", "text": f"{metric} {CHANGE}, severity {severity_label(sev)}"})
                t = table1(rows, metric, sev)
                blocks.append(_table1_block(t))
                why = paper_protocol(t)
                if why:
                    blocks.append({"kind": "text", "text": f"No comparison with {PAPER_NAME}: " + "; ".join(why)
                                   + "."})
                blocks.append({"kind": "text", "text": "Which attribute families hurt most (the two largest mean "
                               "drops per family)" + (", ours:" if why else ", ours and the paper's, by the same "
                                                      "rule:")})
                blocks.append(_hurt_most_block(t))
    if quality_rows:
        blocks += _quality_blocks(quality_rows)
    return blocks


def _md_cell(cell: Any, bold: bool = False) -> str:
    text = cell if isinstance(cell, str) else str(cell.get("text", ""))
    text = markdown_text(text, table=True)
    return f"**{text}**" if bold and text and text != "–" else text


def blocks_markdown(blocks: Sequence[dict[str, Any]]) -> str:
    """Markdown of report blocks (the export; mean rows in bold there, never in the HTML)."""
    lines: list[str] = []
    for b in blocks:
        if b["kind"] == "heading":
            lines += [f"## {markdown_text(b['text'], heading=True)}", ""]
        elif b["kind"] == "text":
            lines += [markdown_text(b["text"], block=True), ""]
        elif b["kind"] == "list":
            lines += [f"- {markdown_text(item, block=True)}" for item in b["items"]] + [""]
        else:
            lines.append("| " + " | ".join(_md_cell(c) for c in b["head"]) + " |")
            lines.append("|" + "---|" * len(b["head"]))
            for row in b["rows"]:
                bold = all(isinstance(c, dict) and c.get("cls") == "mean" for c in row)
                lines.append("| " + " | ".join(_md_cell(c, bold) for c in row) + " |")
            lines.append("")
    return "\n".join(lines)


def write_pascal_ea(out: str | os.PathLike, rows: Sequence[dict[str, Any]],
                    quality_rows: Sequence[dict[str, Any]] = ()) -> Path | None:
    """Write pascal_ea.md (+ pascal_ea_table1.csv, pascal_ea_quality.csv) from the same data as
    :func:`pascal_blocks`; None when there are no attribute rows and no quality rows."""
    blocks = pascal_blocks(rows, quality_rows)
    if not blocks:
        return None
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    present = {r["metric"] for r in rows}
    severities = sorted({canonical(r["severity"]) for r in rows if attribute_value(r["shift"], _params(r))}, reverse=True)
    metrics = [m for m in SEGMENTATION_METRICS if m in present]
    if severities and metrics:
        with open(out / "pascal_ea_table1.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            values = [v for _, v in ATTRIBUTE_COLUMNS]
            # every number in points; the attribute columns and the mean are changes against clean
            w.writerow(["metric", "severity", "model", "n_clean", "clean"] + [f"{v}_change" for v in values]
                       + [f"{v}_n" for v in values] + ["mean_change"])
            for metric in metrics:
                for sev in severities:
                    t = table1(rows, metric, sev)
                    for m in t["models"]:
                        w.writerow([metric, severity_label(sev), m, t["clean_n"][m], t["clean"][m]] + [t["cells"][m].get(v) for v in values]
                                   + [t["n"][m].get(v) for v in values] + [t["overall"][m]])
    if quality_rows:
        q = quality_table(quality_rows)
        with open(out / "pascal_ea_quality.csv", "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["family", "attribute", "n"] + q["columns"])
            for f, v, d in q["rows"]:
                w.writerow([f, v, q["n"].get(v)] + [d.get(c) for c in q["columns"]])
    path = out / "pascal_ea.md"
    path.write_text("# Pascal-EA: attribute edits\n\n" + blocks_markdown(blocks), encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """The former ``python -m shiftbench.report.pascal_ea`` (it ran an evaluation while building tables):
    says which two commands replace it."""
    print("error: python -m shiftbench.report.pascal_ea was replaced: run `shiftbench evaluate --config SPEC "
          "--store DB` (it computes the spec's quality: section too), then `shiftbench report --store DB --out DIR` "
          "(it writes pascal_ea.md and the CSVs from the store)")
    return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
