"""Markdown tables of a composed-retrieval run, read from store rows only (never re-runs a model).

- :func:`recall_table`: clean R@K and R_subset@K per retriever (the paper's Table 1, clean column).
- :func:`gamma_table`: gamma@K per shift and severity, one column per retriever, with the clean R@K
  beside (Tables 1 and 5: relative robustness per corruption).
- :func:`category_table`: clean R@K per category and its change against all queries (Table 2).

Command line: ``python -m shiftbench.report.retrieval STORE [--run RUN_ID] [--k 10]`` prints all three.
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence

__all__ = ["recall_table", "gamma_table", "category_table", "retrieval_tables"]


def _index(rows: Sequence[dict[str, Any]]) -> dict[tuple, float | None]:
    return {(r["model"], r["shift"], r["severity"], r["metric"]): r["value"] for r in rows}


def _models(rows: Sequence[dict[str, Any]]) -> list[str]:
    seen: list[str] = []
    for r in rows:
        if r["model"] not in seen:
            seen.append(r["model"])
    return seen


def _fmt(value: float | None, percent: bool = True) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.1f}" if percent else f"{value:.3f}"


def recall_table(rows: Sequence[dict[str, Any]]) -> str:
    """Clean R@1/5/10/50, R_subset@1/2/3 and mean rank per retriever (percent)."""
    idx = _index(rows)
    cols = ["R@1", "R@5", "R@10", "R@50", "R_subset@1", "R_subset@2", "R_subset@3", "mean_rank"]
    lines = ["| retriever | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for m in _models(rows):
        cells = [_fmt(idx.get((m, "clean", 0, c)), percent=c != "mean_rank") if c != "mean_rank"
                 else (f"{idx[(m, 'clean', 0, c)]:.1f}" if idx.get((m, "clean", 0, c)) is not None else "-")
                 for c in cols]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gamma_table(rows: Sequence[dict[str, Any]], k: int = 10, shifts: Sequence[str] | None = None,
                severity: int | None = None) -> str:
    """gamma@k per (shift, severity) and retriever; R@k under the shift in brackets; clean R@k on top.

    ``shifts`` / ``severity`` keep only those shifts / that severity; the last line is the mean gamma
    over the rows shown.
    """
    idx = _index(rows)
    models = _models(rows)
    conditions = []
    for r in rows:
        key = (r["shift"], r["severity"])
        if r["shift"] != "clean" and key not in conditions and (shifts is None or r["shift"] in shifts) \
                and (severity is None or r["severity"] == severity):
            conditions.append(key)
    lines = ["| shift | severity | " + " | ".join(f"{m} gamma@{k} (R@{k})" for m in models) + " |",
             "|---|---|" + "---|" * len(models)]
    lines.append("| clean R@%d | 0 | " % k + " | ".join(_fmt(idx.get((m, "clean", 0, f"R@{k}"))) for m in models) + " |")
    for shift, severity in conditions:
        cells = []
        for m in models:
            g, r = idx.get((m, shift, severity, f"gamma@{k}")), idx.get((m, shift, severity, f"R@{k}"))
            cells.append("-" if g is None else f"{g:.3f} ({_fmt(r)})")
        lines.append(f"| {shift} | {severity} | " + " | ".join(cells) + " |")
    means = []
    for m in models:
        values = [idx.get((m, s, v, f"gamma@{k}")) for s, v in conditions]
        values = [x for x in values if x is not None]
        means.append(f"{sum(values) / len(values):.3f}" if values else "-")
    lines.append("| **mean** | | " + " | ".join(means) + " |")
    return "\n".join(lines)


def category_table(rows: Sequence[dict[str, Any]], k: int = 10) -> str:
    """Clean R@k per category and retriever, with the change against all queries in brackets."""
    idx = _index(rows)
    models = _models(rows)
    counts: dict[str, int] = {}
    for r in rows:
        metric = r["metric"]
        if r["shift"] == "clean" and metric.startswith(f"R@{k}[") and metric.endswith("]"):
            counts[metric[len(f"R@{k}["):-1]] = r["n"]
    lines = ["| category | queries | " + " | ".join(f"{m} R@{k} (vs all)" for m in models) + " |",
             "|---|---|" + "---|" * len(models)]
    lines.append(f"| all | {max((r['n'] for r in rows if r['shift'] == 'clean' and r['metric'] == f'R@{k}'), default=0)} | "
                 + " | ".join(_fmt(idx.get((m, "clean", 0, f"R@{k}"))) for m in models) + " |")
    for category in sorted(counts):
        cells = []
        for m in models:
            v, a = idx.get((m, "clean", 0, f"R@{k}[{category}]")), idx.get((m, "clean", 0, f"R@{k}"))
            cells.append("-" if v is None or a is None else f"{_fmt(v)} ({100 * (v - a):+.1f})")
        lines.append(f"| {category} | {counts[category]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def retrieval_tables(rows: Sequence[dict[str, Any]], k: int = 10) -> str:
    """The tables as one markdown text: clean recall, gamma of image shifts at severity 5, of text shifts
    at severity 3, every severity of shifts run at several, recall per category."""
    from ..registry import SHIFTS

    names = list(dict.fromkeys(r["shift"] for r in rows if r["shift"] != "clean"))  # spec order
    text = [n for n in names if n in SHIFTS and getattr(SHIFTS.get(n), "kind", "image") == "text"]
    image = [n for n in names if n not in text]
    curves = [n for n in names if len({r["severity"] for r in rows if r["shift"] == n}) > 1]
    parts = [f"### Clean recall\n\n{recall_table(rows)}"]
    if image:
        parts.append(f"### gamma@{k}, image shifts at severity 5\n\n{gamma_table(rows, k, image, 5)}")
    if text:
        parts.append(f"### gamma@{k}, text shifts at severity 3\n\n{gamma_table(rows, k, text, 3)}")
    if curves:
        parts.append(f"### gamma@{k} by severity\n\n{gamma_table(rows, k, curves)}")
    parts.append(f"### Recall per category (clean)\n\n{category_table(rows, k)}")
    return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None) -> None:
    from ..engine.store import Store

    parser = argparse.ArgumentParser(prog="python -m shiftbench.report.retrieval")
    parser.add_argument("store")
    parser.add_argument("--run", default=None)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args(argv)
    with Store(args.store, create=False) as store:
        run = store.run(args.run)
        print(retrieval_tables(store.rows(run["run_id"]), args.k))


if __name__ == "__main__":  # pragma: no cover
    main()
