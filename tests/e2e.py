"""End-to-end harness: run a spec through ``sb.evaluate`` in a child process, SIGKILL it mid-run, resume it
in this process and compare with an uninterrupted run; build the HTML report from the store and parse it.

Used by the end-to-end tests of every task (tests/test_e2e_*.py)::

    ref, resumed, partial = kill_and_resume(spec, tmp_path, setup="...")
    assert row_key(resumed) == row_key(ref)
    tables = report_tables(tmp_path / "resumed.db", tmp_path / "report")
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


class KillFirstLogged:
    """A thread that SIGKILLs the first process to append its pid to ``log_file`` after this is made
    (a Ray actor loading its model), ``settle`` seconds after it appears; ``killed`` holds that pid."""

    def __init__(self, log_file: Path, settle: float = 0.3, timeout: float = 60.0):
        import threading

        self.log_file, self.settle, self.timeout = log_file, settle, timeout
        self.before = len(log_file.read_text().split())
        self.killed: list[int] = []
        self.thread = threading.Thread(target=self._run)

    def loads(self) -> list[str]:
        """The pids logged since this was made."""
        return self.log_file.read_text().split()[self.before:]

    def _run(self) -> None:
        import os

        deadline = time.time() + self.timeout
        while time.time() < deadline:
            pids = self.loads()
            if pids:
                time.sleep(self.settle)  # let it get into its first units
                os.kill(int(pids[0]), signal.SIGKILL)
                self.killed.append(int(pids[0]))
                return
            time.sleep(0.02)

    def __enter__(self) -> "KillFirstLogged":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.thread.join()


def count_in(db: Path, query: str) -> int | None:
    """The number a ``SELECT COUNT(*)`` query gives on a store another process is writing (None while it
    is locked or not created yet)."""
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            return int(conn.execute(query).fetchone()[0])
    except sqlite3.Error:
        return None


def row_key(rows: list[dict[str, Any]]) -> list[tuple]:
    """Rows as comparable tuples (run ids left out; values rounded to 12 significant digits)."""
    return sorted((r["model"], r["dataset"], r["shift"], json.dumps(r["params"], sort_keys=True), r["severity"],
                   r["metric"], None if r["value"] is None else float(f"{r['value']:.12g}"), r["n"]) for r in rows)


def samples_key(db: Path) -> list[tuple]:
    """A store's per-sample values (every run) as comparable tuples: condition, metric, kind, ids and
    the values' bytes (exact: a resumed or distributed run stores the same floats)."""
    from shiftbench.results.store import Store

    with Store(db) as store:
        return sorted((s["model"], s["dataset"], s["shift"], json.dumps(s["params"], sort_keys=True), s["severity"],
                       s["metric"], s["kind"], tuple(s["ids"]), s["values"].shape, s["values"].tobytes())
                      for run in store.runs() for s in store.samples(run["run_id"]))


def _child_code(spec: dict[str, Any], db: Path, setup: str, delay: float, hang_after: int | None = None) -> str:
    # ``setup`` runs first and may define ``models`` (a dict of model objects by label) and register
    # datasets or models; the child then evaluates slowly (``delay`` seconds per batch) until killed, and
    # with ``hang_after`` stops for good after that many saved batches, so a fast or bursty run (the Ray
    # driver saves a whole unit at once) cannot finish before the parent kills it.
    return (
        "import sys, time, json, itertools\n"
        f"sys.path[:0] = [{str(HERE)!r}, {str(SRC)!r}]\n"
        "import shiftbench as sb\n"
        "models = None\n"
        f"{setup}\n"
        f"spec = json.loads({json.dumps(spec)!r})\n"
        "saved = itertools.count(1)\n"
        f"def on_batch(m, b):\n    time.sleep({delay})\n"
        f"    if {hang_after!r} is not None and next(saved) > {hang_after!r}:\n        time.sleep(3600)\n"
        f"sb.evaluate(spec, store={str(db)!r}, models=models, on_batch=on_batch)\n"
    )


def kill_and_resume(spec: dict[str, Any], tmp_path: Path, setup: str = "", models: dict[str, Any] | None = None,
                    min_batches: int = 1, min_done: int = 0, delay: float = 0.3, timeout: float = 240.0,
                    hang_after: int | None = None):
    """(reference rows, resumed rows, rows present after the kill).

    The reference is an uninterrupted run into ``ref.db``; the killed run writes ``resumed.db``: the child
    is killed once ``min_batches`` batches and ``min_done`` conditions are saved and before its last condition is done, then the run
    is resumed here with ``models`` (the objects ``setup`` builds in the child, built again by the caller).
    """
    import shiftbench as sb
    from shiftbench.results.store import Store

    ref = sb.evaluate(spec, store=tmp_path / "ref.db", models=models)
    total = len({(r["model"], r["shift"], json.dumps(r["params"]), r["severity"]) for r in ref})
    db = tmp_path / "resumed.db"
    proc = subprocess.Popen([sys.executable, "-c", _child_code(spec, db, setup, delay, hang_after)])
    deadline = time.time() + timeout
    try:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"the child run ended (exit {proc.returncode}) before it could be killed")
            if time.time() > deadline:
                raise AssertionError("the child run saved no batch in time")
            time.sleep(0.05)
            try:
                with sqlite3.connect(db, timeout=1) as conn:
                    batches = conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
                    done = conn.execute("SELECT COUNT(*) FROM conditions WHERE status = 'done'").fetchone()[0]
            except sqlite3.Error:
                continue
            if batches >= min_batches and min_done <= done < total:
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    store = Store(db)
    partial = store.rows()
    assert store.integrity_check() == "ok"
    store.close()
    resumed = sb.evaluate(spec, store=db, models=models)
    return ref, resumed, partial


class _Tables(HTMLParser):
    """Every <table> of a page as a list of rows of cell texts; <img> sources kept too."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.images: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append([])
            self._depth += 1
        elif tag == "tr" and self._depth:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "img":
            self.images.append(dict(attrs).get("src") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[-1].append(self._row)
            self._row = None
        elif tag == "table":
            self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def report_tables(store: Path, out: Path, run_id: str | None = None) -> tuple[list[list[list[str]]], list[str], str]:
    """Build the report of ``store`` into ``out`` and parse report.html: (tables, image sources, html)."""
    from shiftbench.report import build_report

    html_path = build_report(store, out, run_id=run_id)
    html = Path(html_path).read_text(encoding="utf-8")
    parser = _Tables()
    parser.feed(html)
    assert parser.tables, "the report has no tables"
    return parser.tables, parser.images, html
