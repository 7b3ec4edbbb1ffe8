"""The terminal side of the CLI: a console that does not fold lines in a log file, and progress that
still reports when output is not a terminal.

rich sizes its output to the terminal, and to 80 columns when there is none (a log file, a pipe, a CI
job), which breaks paths and table cells across lines. Without a terminal the console here is wide
(``LOG_WIDTH``), and progress bars, which rich cannot animate there, become a plain line every
``LOG_EVERY_S`` seconds.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

LOG_WIDTH = 200  # columns when the output is a file or a pipe: nothing folds at 80
LOG_EVERY_S = 5.0  # seconds between progress lines when the output is not a terminal


def is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or odd stream
        return False


def make_console(stderr: bool = False) -> Any:
    """A rich Console: the terminal's width in a terminal, ``LOG_WIDTH`` columns anywhere else."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, soft_wrap=False,
                   width=None if is_terminal(stream) else LOG_WIDTH)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 model``, ``3 models`` (``many`` for irregular plurals)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def print_table(console: Any, table: Any) -> None:
    """Print a rich Table whole when it fits the console, else as one plain record per row
    (``title`` then ``row: column value · column value ...``), so a narrow terminal never folds a cell
    or a header inside a word."""
    from rich.measure import Measurement

    needed = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if needed <= console.width:
        console.print(table)
        return
    heads = [str(c.header) for c in table.columns]
    cells = [list(c.cells) for c in table.columns]
    if table.title:
        console.print(str(table.title), markup=False, soft_wrap=True)
    for i in range(table.row_count):
        first = str(cells[0][i])
        rest = " · ".join(f"{h} {cells[j][i]}" for j, h in enumerate(heads) if j)
        console.print(f"{first}: {rest}", markup=False, soft_wrap=True)


class LineProgress:
    """Progress as plain lines on ``stream`` (stderr by default), at most one every ``every`` seconds and
    one at the end: ``evaluate: 1,234/5,678 images (21.7%), 35.2 img/s, about 2 min left; <label>``."""

    def __init__(self, total: float, what: str = "images", title: str = "evaluate", every: float = LOG_EVERY_S,
                 stream: TextIO | None = None, clock: Any = time.monotonic):
        self.total, self.what, self.title, self.every = total, what, title, every
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = self.last = clock()
        self.done = 0.0
        self.label = ""

    def advance(self, label: str, amount: float) -> None:
        self.done += amount
        self.label = label
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            self.write(now)

    def write(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        share = self.done / self.total if self.total else 1.0
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = "" if self.done >= self.total else f", about {_duration(left)} left"
        tail = f"; {self.label}" if self.label else ""
        print(f"{self.title}: {int(self.done):,}/{int(self.total):,} {self.what} ({100 * share:.1f}%), "
              f"{rate:.1f} {'img' if self.what == 'images' else self.what}/s{eta}{tail}", file=self.stream, flush=True)

    def close(self) -> None:
        self.write()


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "an unknown time"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
