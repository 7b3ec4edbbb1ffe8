"""A run's headline in the terminal: the report's headline (report/headline.py, from the store through
:func:`shiftbench.report.run_headline`) drawn as a rich table, for the last lines of ``shiftbench evaluate``.

Nothing is computed here: the columns, cells, confidence intervals and note are the report's own. Each cell
shows its text (value, change against clean, the noise mark) with its CI on a second line; a table too wide
for the console is printed as one line per model instead (``model: column value [CI] · ...``), so nothing
folds inside a number.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["print_headline"]


def _head(column: dict[str, str], sep: str) -> str:
    group, head = column.get("group") or "", column.get("head") or ""
    return head if group in ("", "clean", head) else f"{group}{sep}{head}"


def _cell(cell: dict[str, Any], sep: str) -> str:
    return cell.get("text", "") + (f"{sep}{cell['ci']}" if cell.get("ci") else "")


def print_headline(console: Any, head: dict[str, Any], title: str) -> None:
    """Print ``head`` (a headline dict) under ``title`` on a rich console, then its note."""
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    columns = head.get("columns") or []
    table = Table(title=Text(title), title_justify="left")
    table.add_column("model", no_wrap=True)
    for c in columns:
        table.add_column(Text(_head(c, "\n")), justify="right", no_wrap=True)
    for row in head.get("rows") or []:
        table.add_row(Text(str(row["model"])), *(Text(_cell(cell, "\n")) for cell in row["cells"]))
    needed = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if needed <= console.width:
        console.print(table)
    else:
        console.print(title, markup=False, soft_wrap=True)
        for row in head.get("rows") or []:
            cells = " · ".join(f"{_head(c, ': ')} {_cell(cell, ' ')}" for c, cell in zip(columns, row["cells"]))
            console.print(f"{row['model']}: {cells}", markup=False, soft_wrap=True)
    note = re.sub(r"\s*\((?:hover|point at)[^)]*\)", "", head.get("note") or "")  # the HTML's tooltips are not here
    if note:
        console.print(note, markup=False, soft_wrap=True)
