"""Headline tables from result rows: conditions x models, each cell the value and its change against clean.

Pure functions over the rows of a store (no I/O), shared by the HTML, Markdown, CSV and LaTeX outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from ..errors import SeverityError
from ..results.records import Row
from ..severity import canonical
from ..severity import label as severity_label
from .blocks import markdown_text

CLEAN = "clean"


def in_main_grid(metric: str) -> bool:
    """Whether a metric's rows belong to the report's main grid: per-category recalls and gamma rows have their
    own summary tables (the report, the leaderboard)."""
    return "[" not in metric and not metric.startswith(("gamma@", "gamma_subset@"))


def _written(severity: Any) -> Any:
    """A severity as written (``3``, ``2.5``); anything that is not one, as given."""
    try:
        return severity_label(severity)
    except SeverityError:  # not a number: shown as stored
        return severity


def severity_row(base: str, severity: Any) -> str:
    """The label of one severity's row in a per-severity table: ``'fog s3'``, ``'fog s2.5'`` (never ``s3.0``)."""
    return f"{base} s{severity_label(severity)}"


def condition_label(shift: str, params: dict[str, Any]) -> str:
    """'background_color (color=red)' — the shift and its variant parameters."""
    if not params:
        return shift
    steps = params.get("shifts") if shift == "chain" else None
    if isinstance(steps, list) and all(isinstance(s, dict) and "name" in s for s in steps):
        # a composed shift: its steps in order, each with its variant parameters and fixed severity
        parts = []
        for step in steps:
            extra = dict(step.get("params") or {})
            if step.get("severity") is not None:
                extra["severity"] = _written(step["severity"])
            parts.append(condition_label(str(step["name"]), extra))
        return "chain: " + " then ".join(parts)
    inner = ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
    return f"{shift} ({inner})"


def fmt(v: float | None, percent: bool, signed: bool = False) -> str:
    """A value as shown: x100 with one digit for a fraction (``percent``), else three digits; ``–`` for none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    v = 100.0 * v if percent else v
    digits = 1 if percent else 3
    return f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"


@dataclass
class Cell:
    value: float | None
    delta: float | None = None  # value - clean, same units as value
    n: int = 0  # samples one condition of the cell rests on (not summed over severities or models)
    # filled by report.stats.Uncertainty.annotate from the per-sample values (None where the store has none)
    low: float | None = None  # 95% bootstrap interval of value (same units as value)
    high: float | None = None
    delta_low: float | None = None  # 95% interval of delta (value - clean, same model), the test's own
    delta_high: float | None = None
    p_value: float | None = None  # paired test of value against clean (McNemar for top1/top5 on one condition, else bootstrap)
    noise: bool | None = None  # True when p >= 0.05 (the delta interval then holds 0): the change is within noise
    test: str | None = None  # the test that gave p_value, noise and the delta interval (report.stats)
    interval: str | None = None  # which 95% interval low/high is (report.stats: bootstrap or exact Clopper-Pearson)


@dataclass
class Table:
    """One metric: rows are conditions (clean first), columns are models, plus the mean over models."""

    metric: str
    higher_is_better: bool
    percent: bool  # values are fractions, shown x100
    models: list[str]
    rows: list[str] = field(default_factory=list)
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)
    row_meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    # what the clean row shows: "clean", or for a run on a folder written by generate the shift and severity
    # its images were made under (report/build.py sets it from the run's dataset identity)
    baseline: str = CLEAN

    def label(self, row: str) -> str:
        """A row's label as shown: the row itself, the clean row as ``baseline``."""
        return self.baseline if row == CLEAN else row

    def scale(self, v: float | None) -> float | None:
        return None if v is None else (100.0 * v if self.percent else v)

    def fmt(self, v: float | None, signed: bool = False) -> str:
        return fmt(v, self.percent, signed)

    def text(self, row: str, model: str) -> str:
        cell = self.cells.get((row, model))
        if cell is None:
            return "–"
        if cell.delta is None or row == CLEAN:
            return self.fmt(cell.value)
        return f"{self.fmt(cell.value)} ({self.fmt(cell.delta, signed=True)})"

    def columns(self) -> list[str]:
        return self.models + ["mean"]

    def ci_text(self, row: str, model: str) -> str:
        """The value and its 95% interval, '48.4 [40.1, 56.7]'; the value alone without an interval."""
        cell = self.cells.get((row, model))
        if cell is None:
            return "–"
        if cell.low is None or cell.high is None:
            return self.fmt(cell.value)
        return f"{self.fmt(cell.value)} [{self.fmt(cell.low)}, {self.fmt(cell.high)}]"

    def delta_text(self, row: str, model: str, marker: str = "≈") -> str:
        """The change against clean and its paired 95% interval, '-3.1 [-7.8, +1.6] ≈', ``marker``
        appended when the change is within noise (its test's p >= 0.05; the interval then holds 0); '–' on
        clean or without a change."""
        cell = self.cells.get((row, model))
        if cell is None or cell.delta is None or row == CLEAN:
            return "–"
        text = self.fmt(cell.delta, signed=True)
        if cell.delta_low is not None and cell.delta_high is not None:
            text += f" [{self.fmt(cell.delta_low, signed=True)}, {self.fmt(cell.delta_high, signed=True)}]"
        if cell.noise and marker:
            text += f" {marker}"
        return text


def metric_order(rows: Iterable[Row], preferred: list[str]) -> list[str]:
    seen = list(dict.fromkeys(r.metric for r in rows))
    order = [m for m in preferred if m in seen]
    return order + [m for m in seen if m not in order]


def build_tables(rows: list[Row], preferred: list[str] | None = None, per_severity: bool = False) -> list[Table]:
    """One Table per metric of ``rows`` (results.records.Row). Rows average each (shift, params) over its
    severities unless ``per_severity``."""
    tables = []
    models = list(dict.fromkeys(r.model for r in rows))
    for metric in metric_order(rows, preferred or []):
        mrows = [r for r in rows if r.metric == metric]
        values = [r.value for r in mrows if r.value is not None]
        first_extra = next((r for r in mrows if r.extra), None)  # the metric's direction, as its first row says
        table = Table(metric=metric, higher_is_better=first_extra is None or first_extra.higher_is_better,
                      percent=bool(values) and all(0.0 <= v <= 1.0 for v in values), models=list(models))
        groups: dict[tuple[str, str], list[Row]] = {}
        first: dict[str, int] = {}  # a (shift, params)'s first row: its severities' rows stay together, in order
        for r in mrows:
            base = label = condition_label(r.shift, r.params)
            severity = canonical(r.severity)
            if per_severity and r.shift != CLEAN:
                label = severity_row(base, severity)
            groups.setdefault((label, r.model), []).append(r)
            if label not in table.rows:
                first.setdefault(base, len(first))
                table.rows.append(label)
                table.row_meta[label] = {"shift": r.shift, "params": r.params, "base": base,
                                         "severities": sorted({canonical(x.severity) for x in mrows
                                                               if x.shift == r.shift and x.params == r.params})}
                if per_severity and r.shift != CLEAN:
                    table.row_meta[label]["severity"] = severity
        # clean first; the rows of one shift together, its severities in numerical order (2.5 between 2 and 3)
        table.rows.sort(key=lambda lab: (lab != CLEAN, first[table.row_meta[lab]["base"]],
                                         table.row_meta[lab].get("severity", 0)))
        for (label, model), group in groups.items():
            vals = [g.value for g in group if g.value is not None]
            value = sum(vals) / len(vals) if vals else None
            table.cells[(label, model)] = Cell(value, None, max(g.n for g in group))  # samples per condition
        for label in table.rows:
            for model in models:
                cell = table.cells.get((label, model))
                clean = table.cells.get((CLEAN, model))
                if cell and clean and cell.value is not None and clean.value is not None:
                    cell.delta = cell.value - clean.value
            present = [table.cells[(label, m)] for m in models if (label, m) in table.cells
                       and table.cells[(label, m)].value is not None]
            if present:
                mean = sum(c.value for c in present) / len(present)
                deltas = [c.delta for c in present if c.delta is not None]
                table.cells[(label, "mean")] = Cell(mean, sum(deltas) / len(deltas) if deltas else None,
                                                    max(c.n for c in present))
        tables.append(table)
    return tables


def to_markdown(table: Table) -> str:
    arrow = "↑" if table.higher_is_better else "↓"
    unit = " (%)" if table.percent else ""
    # model names and condition labels are data: shown as text, never rendered (blocks.markdown_text)
    head = f"| condition | " + " | ".join(markdown_text(m, table=True) for m in table.columns()) + " |"
    lines = [f"### {markdown_text(table.metric, heading=True)}{unit} {arrow}", "", head,
             "|" + "---|" * (len(table.columns()) + 1)]
    for row in table.rows:
        cells = [table.text(row, m) + (" ≈" if _noise(table, row, m) else "") for m in table.columns()]
        lines.append(f"| {markdown_text(table.label(row), table=True)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _noise(table: Table, row: str, model: str) -> bool:
    """Whether a shifted cell's change against clean is within noise (its test's p >= 0.05)."""
    cell = table.cells.get((row, model))
    return row != CLEAN and cell is not None and bool(cell.noise)


def to_csv_rows(table: Table) -> list[list[str]]:
    out = []
    for row in table.rows:
        for model in table.columns():
            cell = table.cells.get((row, model))
            if cell is None:
                continue
            out.append([table.metric, table.label(row), model, _num(cell.value), _num(cell.delta), str(cell.n),
                        _num(cell.low), _num(cell.high), _num(cell.delta_low), _num(cell.delta_high),
                        _num(cell.p_value), "" if cell.noise is None or row == CLEAN else str(bool(cell.noise)).lower(),
                        "" if row == CLEAN else (cell.test or "")])
    return out


def _num(v: float | None) -> str:
    return "" if v is None else repr(float(v))


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex_escape(text: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in str(text))


def to_latex(table: Table) -> str:
    arrow = r"$\uparrow$" if table.higher_is_better else r"$\downarrow$"
    cols = table.columns()
    lines = [
        r"\begin{table}[t]", r"\centering", r"\small",
        r"\begin{tabular}{l" + "r" * len(cols) + "}", r"\toprule",
        "Condition & " + " & ".join(tex_escape(c) for c in cols) + r" \\", r"\midrule",
    ]
    for row in table.rows:
        lines.append(tex_escape(table.label(row)) + " & " + " & ".join(tex_escape(table.text(row, m))
                                                          + (r" $\approx$" if _noise(table, row, m) else "")
                                                          for m in cols) + r" \\")
        if row == CLEAN:
            lines.append(r"\midrule")
    unit = " (\\%)" if table.percent else ""
    lines += [r"\bottomrule", r"\end{tabular}",
              rf"\caption{{{tex_escape(table.metric)}{unit} {arrow}; in brackets the change against clean "
              r"(shifted minus clean); $\approx$: within noise, $p \geq 0.05$ (exact McNemar for top-1/top-5 on one "
              r"condition, else paired bootstrap; uncorrected for multiplicity, unlike the headline).}}",
              r"\end{table}"]
    return "\n".join(lines) + "\n"
