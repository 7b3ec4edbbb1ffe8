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

from .headline import Column, HeadCell, Headline

__all__ = ["print_headline"]


def _head(column: Column, sep: str) -> str:
    return column.head if column.group in ("", "clean", column.head) else f"{column.group}{sep}{column.head}"


def _cell(cell: HeadCell, sep: str) -> str:
    return cell.text + (f"{sep}{cell.ci}" if cell.ci else "")


def print_headline(console: Any, head: Headline, title: str) -> None:
    """Print ``head`` (report.headline.Headline) under ``title`` on a rich console, then its note."""
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    columns = head.columns
    table = Table(title=Text(title), title_justify="left")
    table.add_column("model", no_wrap=True)
    for c in columns:
        table.add_column(Text(_head(c, "\n")), justify="right", no_wrap=True)
    for row in head.rows:
        table.add_row(Text(str(row.model)), *(Text(_cell(cell, "\n")) for cell in row.cells))
    if head.detectable:
        table.add_section()
        table.add_row(Text("detectable\n(80% power)"), *(Text(d.text) for d in head.detectable))
    needed = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if needed <= console.width:
        console.print(table)
    else:
        console.print(title, markup=False, soft_wrap=True)
        for row in head.rows:
            cells = " · ".join(f"{_head(c, ': ')} {_cell(cell, ' ')}" for c, cell in zip(columns, row.cells))
            console.print(f"{row.model}: {cells}", markup=False, soft_wrap=True)
        if head.detectable:
            found = " · ".join(f"{_head(c, ': ')} {d.text}" for c, d in zip(columns, head.detectable) if d.title)
            console.print(f"detectable (80% power): {found}", markup=False, soft_wrap=True)
    note = re.sub(r"\s*\((?:hover|point at)[^)]*\)", "", head.note or "")  # the HTML's tooltips are not here
    if note:
        console.print(note, markup=False, soft_wrap=True)
