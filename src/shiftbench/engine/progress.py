"""The run's progress on stderr: a rich bar in a terminal, a plain line every few seconds in a log or pipe."""

from __future__ import annotations

import time
from typing import Any

from ..console import LineProgress, is_terminal

__all__ = ["RunProgress"]


class RunProgress:
    def __init__(self, enabled: bool, total: float):
        self.enabled = enabled and total > 0
        self.total = total
        self.start = time.perf_counter()
        self.images = 0.0

    def __enter__(self) -> "RunProgress":
        import sys

        self.lines = None
        if self.enabled and not is_terminal(sys.stderr):
            # a log file or a pipe: rich cannot animate a bar there, so a plain line every few seconds
            self.lines = LineProgress(self.total)
            return self
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description:<28}"), BarColumn(), TextColumn("{task.fields[rate]}"),
                                TimeRemainingColumn())
            self.bar.__enter__()
            self.task = self.bar.add_task("evaluate", total=self.total, rate="")
        return self

    def advance(self, label: str, images: float) -> None:
        if not self.enabled:
            return
        if self.lines is not None:
            self.lines.advance(label, images)
            return
        self.images += images
        rate = self.images / max(time.perf_counter() - self.start, 1e-9)
        self.bar.update(self.task, advance=images, description=label, rate=f"{rate:.1f} img/s")

    def __exit__(self, *exc: Any) -> None:
        if self.lines is not None:
            if exc[0] is None:
                self.lines.close()
        elif self.enabled:
            self.bar.__exit__(*exc)
