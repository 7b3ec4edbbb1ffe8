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


STEPS_DELAY_S = 2.0  # a reader command (report, export, leaderboard) shows its bar once it has run this long
STEPS_LINES_S = 30.0  # in a log or a pipe: a plain line every this many seconds, the first after as long


class Steps:
    """The progress of a reader command (report, export, leaderboard) on stderr, shown only when it runs for more
    than a few seconds: a rich bar in a terminal once ``STEPS_DELAY_S`` have passed, plain lines every
    ``STEPS_LINES_S`` in a log or a pipe (``report: 120/380 table rows (31.6%), ...; fog``), then one at the end. A
    command that finishes sooner prints nothing. Call it with (done, total, label); use it as a context manager.

    >>> import io
    >>> clock = iter([0.0, 1.0, 40.0, 41.0, 42.0, 60.0]).__next__  # the seconds each look at the clock sees
    >>> out = io.StringIO()
    >>> with Steps("report", "table rows", stream=out, clock=clock, terminal=False) as steps:
    ...     steps(1, 4, "clean")  # after 1 s: nothing yet
    ...     steps(2, 4, "fog")  # after 40 s: a line
    >>> print(out.getvalue().strip())
    report: 2/4 table rows (50.0%), 0.0 table rows/s, about 42 s left; fog
    report: 2/4 table rows (50.0%), 0.0 table rows/s, about 60 s left; fog
    """

    def __init__(self, title: str, what: str = "steps", stream: TextIO | None = None, clock: Any = time.monotonic,
                 terminal: bool | None = None):
        self.title, self.what = title, what
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.terminal = is_terminal(self.stream) if terminal is None else terminal
        self.start = clock()
        self.bar: Any = None
        self.lines: LineProgress | None = None
        self.done = 0.0

    def __enter__(self) -> "Steps":
        return self

    def __call__(self, done: float, total: float, label: str = "") -> None:
        now = self.clock()
        elapsed = now - self.start
        if self.terminal:
            if self.bar is None and elapsed >= STEPS_DELAY_S:
                from rich.console import Console
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

                self.bar = Progress(TextColumn(f"{self.title} " + "{task.description:<24}"), BarColumn(),
                                    MofNCompleteColumn(), TimeRemainingColumn(),
                                    console=Console(file=self.stream), transient=True)
                self.bar.__enter__()
                self.task = self.bar.add_task(label, total=total)
            if self.bar is not None:
                self.bar.update(self.task, completed=done, total=total, description=label)
            return
        if self.lines is None:
            if elapsed < STEPS_LINES_S:
                return
            self.lines = LineProgress(total, self.what, self.title, STEPS_LINES_S, self.stream, self.clock)
            self.lines.start = self.start
            self.lines.last = self.start
        self.lines.total = total
        self.lines.advance(label, done - self.lines.done)

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
        elif self.lines is not None and exc[0] is None:
            self.lines.close()
