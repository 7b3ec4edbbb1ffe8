"""Composed-retrieval summary of a run, read from store rows only (never re-runs a model).

Built as report blocks (:mod:`shiftbench.report.blocks`); the Markdown export is made from the same blocks.

- :func:`recall_block`: clean R@1/5/10/50, R_subset@1/2/3 and mean rank per retriever (the paper's Table 1,
  clean column), metrics in that natural order.
- :func:`gamma_block`: gamma@K per (shift, severity), one column per retriever, R@K under the shift in
  brackets (Tables 1 and 5: relative robustness per corruption), a mean row last.
- :func:`category_block`: clean R@K per category and its change against all queries (Table 2).
- :func:`retrieval_blocks`: all of them; image shifts at severity 5, text shifts at severity 3, then the
  other severities once (no (shift, severity) row appears in two tables), and the note on gamma above 1
  wherever a gamma above 1 occurs in the run.

gamma@K = R@K shifted / R@K clean (= 1 - (R_clean - R) / R_clean): 1 means no loss. Every numeric cell
carries its sample size as hover text (``n = 280 queries``), read from the rows' ``n``.

Command line: ``python -m shiftbench.report.retrieval STORE [--run RUN_ID] [--k 10]`` prints the Markdown.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Sequence

from ..registry import SHIFTS
from ..results.records import load
from ..severity import Severity, canonical
from ..severity import label as severity_label
from .blocks import blocks_to_markdown, cell

__all__ = ["recall_block", "gamma_block", "category_block", "retrieval_blocks", "recall_table", "gamma_table",
           "category_table", "retrieval_tables", "gamma_above_one", "GAMMA_NOTE", "SUBSET_NOTE"]

GAMMA_NOTE = ("gamma = R_shifted / R_clean; above 1 means the shifted queries were retrieved better than clean "
              "ones, which happens on small subsets or when a text corruption removes a misleading word; it is "
              "not an error.")
SUBSET_NOTE = ("R_subset@K counts a hit when the target is among the top K of the query's own small subset of "
               "look-alike images, over the queries that carry a subset only (see n), so it is higher than R@K "
               "and moves in large steps: one query is 100/n points.")
_EPS = 1e-12  # gamma of an unaffected retriever is exactly 1.0; only a real gain counts as above 1


def _index(rows: Sequence[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    return {(r["model"], r["shift"], canonical(r["severity"]), r["metric"]): r for r in rows}


def _value(idx: dict[tuple, dict[str, Any]], *key: Any) -> float | None:
    row = idx.get(key)
    return None if row is None else row.get("value")


def _models(rows: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["model"] for r in rows))


def _fmt(value: float | None, percent: bool = True) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.1f}" if percent else f"{value:.3f}"


def _n_title(row: dict[str, Any] | None, what: str = "queries") -> str:
    n = None if row is None else row.get("n")
    return f"n = {n} {what}" if n else "n not recorded"


def _recall_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """R@K by K, then R_subset@K by K, then mean_rank: the natural order, whatever order the rows came in."""
    present = {r["metric"] for r in rows if r["shift"] == "clean"}

    def ks(prefix: str) -> list[str]:
        found = [m for m in present if re.fullmatch(re.escape(prefix) + r"@\d+", m)]
        return sorted(found, key=lambda m: int(m.split("@")[1]))

    return ks("R") + ks("R_subset") + (["mean_rank"] if "mean_rank" in present else [])


def recall_block(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Clean R@K (percent), R_subset@K (percent) and mean rank per retriever, as a table block."""
    idx = _index(rows)
    cols = _recall_columns(rows)
    body = []
    for m in _models(rows):
        cells: list[Any] = [m]
        for c in cols:
            row = idx.get((m, "clean", 0, c))
            v = None if row is None else row.get("value")
            text = "-" if v is None else (f"{v:.1f}" if c == "mean_rank" else _fmt(v))
            cells.append(cell(text, _n_title(row)) if v is not None else text)
        body.append(cells)
    head = ["retriever"] + ["mean rank" if c == "mean_rank" else c for c in cols]
    return {"kind": "table", "head": head, "rows": body}


def _conditions(rows: Sequence[dict[str, Any]], shifts: Sequence[str] | None = None,
                severity: Severity | None = None) -> list[tuple[str, Severity]]:
    found: list[tuple[str, Severity]] = []
    for r in rows:
        key = (r["shift"], canonical(r["severity"]))
        if r["shift"] != "clean" and key not in found and (shifts is None or r["shift"] in shifts) \
                and (severity is None or key[1] == severity):
            found.append(key)
    return found


def gamma_block(rows: Sequence[dict[str, Any]], k: int = 10, conditions: Sequence[tuple[str, int]] | None = None,
                mean_row: bool = True) -> dict[str, Any]:
    """gamma@k per (shift, severity) in ``conditions`` (default: every shifted condition) and retriever,
    R@k under the shift in brackets; with ``mean_row`` a last row (cells of class "mean") averages the
    gammas shown."""
    idx = _index(rows)
    models = _models(rows)
    conditions = list(conditions) if conditions is not None else _conditions(rows)
    body: list[list[Any]] = []
    for shift, severity in conditions:
        cells: list[Any] = [shift, severity_label(severity)]
        for m in models:
            g = _value(idx, m, shift, severity, f"gamma@{k}")
            shifted = idx.get((m, shift, severity, f"R@{k}"))
            if g is None:
                cells.append("-")
                continue
            r = None if shifted is None else shifted.get("value")
            clean = _value(idx, m, "clean", 0, f"R@{k}")
            title = (f"gamma@{k} = R@{k} shifted / clean = {_fmt(r)} / {_fmt(clean)}; "
                     + _n_title(shifted or idx.get((m, shift, severity, f"gamma@{k}"))))
            if g > 1 + _EPS:
                title += "; above 1: see the note on gamma"
            cells.append(cell(f"{g:.3f} ({_fmt(r)})", title))
        body.append(cells)
    if mean_row and conditions:
        means: list[Any] = [cell("mean", None, "mean"), cell("", None, "mean")]
        for m in models:
            values = [_value(idx, m, s, v, f"gamma@{k}") for s, v in conditions]
            values = [x for x in values if x is not None]
            means.append(cell(f"{sum(values) / len(values):.3f}" if values else "-",
                              f"mean of gamma@{k} over the {len(values)} row{'s' if len(values) != 1 else ''} above",
                              "mean"))
        body.append(means)
    return {"kind": "table", "head": ["shift", "severity"] + [f"{m} gamma@{k} (R@{k})" for m in models],
            "rows": body}


def category_block(rows: Sequence[dict[str, Any]], k: int = 10) -> dict[str, Any]:
    """Clean R@k per category and retriever, with the change against all queries (category - all) in brackets."""
    idx = _index(rows)
    models = _models(rows)
    counts: dict[str, int] = {}
    for r in rows:
        metric = r["metric"]
        if r["shift"] == "clean" and metric.startswith(f"R@{k}[") and metric.endswith("]"):
            counts[metric[len(f"R@{k}["):-1]] = r["n"]
    total = max((r["n"] for r in rows if r["shift"] == "clean" and r["metric"] == f"R@{k}"), default=0)
    body: list[list[Any]] = [["all", str(total)] + [
        cell(_fmt(_value(idx, m, "clean", 0, f"R@{k}")), _n_title(idx.get((m, "clean", 0, f"R@{k}"))))
        for m in models]]
    for category in sorted(counts):
        cells: list[Any] = [category, str(counts[category])]
        for m in models:
            row = idx.get((m, "clean", 0, f"R@{k}[{category}]"))
            v, a = (None if row is None else row.get("value")), _value(idx, m, "clean", 0, f"R@{k}")
            cells.append("-" if v is None or a is None else
                         cell(f"{_fmt(v)} ({100 * (v - a):+.1f})", "category - all queries; " + _n_title(row)))
        body.append(cells)
    return {"kind": "table", "head": ["category", "queries"] + [f"{m} R@{k} (change against all)" for m in models],
            "rows": body}


def gamma_above_one(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether any gamma row of the run (gamma@K or gamma_subset@K) is above 1."""
    return any(r["metric"].startswith("gamma") and r.get("value") is not None and r["value"] > 1 + _EPS
               for r in rows)


def _table_above_one(block: dict[str, Any]) -> bool:
    return any(isinstance(c, dict) and "above 1" in c.get("title", "") for row in block["rows"] for c in row)


def retrieval_blocks(rows: Sequence[dict[str, Any]], k: int = 10) -> list[dict[str, Any]]:
    """The composed-retrieval summary as blocks: clean recall (with the R_subset note), gamma@k of image
    shifts at severity 5 and of text shifts at severity 3, the remaining (shift, severity) conditions once,
    and recall per category. The note on gamma above 1 stands beside R_subset and after every gamma table
    with a value above 1, and only when the run has one."""

    above = gamma_above_one(rows)
    names = list(dict.fromkeys(r["shift"] for r in rows if r["shift"] != "clean"))  # spec order
    text = [n for n in names if n in SHIFTS and getattr(SHIFTS.get(n), "kind", "image") == "text"]
    image = [n for n in names if n not in text]
    blocks: list[dict[str, Any]] = [{"kind": "heading", "text": "Clean recall"}, recall_block(rows)]
    if any(r["metric"].startswith("R_subset@") for r in rows):
        blocks.append({"kind": "text", "text": SUBSET_NOTE + (" " + GAMMA_NOTE if above else "")})
    elif above:
        blocks.append({"kind": "text", "text": GAMMA_NOTE})
    shown: list[tuple[str, int]] = []
    groups = [(f"gamma@{k}, image shifts at severity 5", _conditions(rows, image, 5), True),
              (f"gamma@{k}, text shifts at severity 3", _conditions(rows, text, 3), True)]
    for title, conditions, _ in groups:
        shown += conditions
    others = [c for c in _conditions(rows) if c not in shown]
    others.sort(key=lambda c: (names.index(c[0]), c[1]))
    # the other severities: no mean row, a mean over mixed severities would be no one's headline
    groups.append((f"gamma@{k} at the other severities", others, False))
    for title, conditions, mean_row in groups:
        if not conditions:
            continue
        table = gamma_block(rows, k, conditions, mean_row)
        blocks += [{"kind": "heading", "text": title}, table]
        if _table_above_one(table):
            blocks.append({"kind": "text", "text": GAMMA_NOTE})
    blocks += [{"kind": "heading", "text": f"Recall per category (clean, R@{k})"}, category_block(rows, k)]
    return blocks


def recall_table(rows: Sequence[dict[str, Any]]) -> str:
    """Markdown of :func:`recall_block`."""
    return blocks_to_markdown([recall_block(rows)]).rstrip("\n")


def gamma_table(rows: Sequence[dict[str, Any]], k: int = 10, shifts: Sequence[str] | None = None,
                severity: Severity | None = None) -> str:
    """Markdown of :func:`gamma_block` for the conditions of ``shifts`` at ``severity`` (None: all)."""
    return blocks_to_markdown([gamma_block(rows, k, _conditions(rows, shifts, severity))]).rstrip("\n")


def category_table(rows: Sequence[dict[str, Any]], k: int = 10) -> str:
    """Markdown of :func:`category_block`."""
    return blocks_to_markdown([category_block(rows, k)]).rstrip("\n")


def retrieval_tables(rows: Sequence[dict[str, Any]], k: int = 10) -> str:
    """The Markdown export of :func:`retrieval_blocks` (what ``retrieval.md`` holds)."""
    return blocks_to_markdown(retrieval_blocks(rows, k))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m shiftbench.report.retrieval")
    parser.add_argument("store")
    parser.add_argument("--run", default=None)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args(argv)
    print(retrieval_tables(load(args.store, args.run, check=False)[0].rows, args.k))


if __name__ == "__main__":  # pragma: no cover
    main()
