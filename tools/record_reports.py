"""Record what the readers make of a store, so that a restructuring of the report side can be checked
byte for byte (issue 37).

For each part of tools/record_behaviour.py (the quick demo's cut specs and one small spec per task) it runs
the part into a fresh store, then the read-only commands a user runs on it, through the CLI:

- ``report --all-runs``, ``export --all`` in each format, and ``leaderboard`` (by each of a few columns),
- and records every file they write (its path under the output folder, the sha256 of its bytes, and the
  text itself for Markdown, CSV, JSON and JSON-lines files up to ``INLINE_LIMIT`` characters, so a
  difference reads as a line), with the text each command printed.

The store's temporary folder is written ``<TMP>`` wherever it appears and the report's time stamp and
package versions are masked (``MASKS``), so two recordings of the same code compare equal.

    python tools/record_reports.py              # writes tests/records/reports.json
    python tools/record_reports.py --check      # compares with it instead, prints the differences

tests/test_report_records.py runs ``record_part()`` against the current code and compares.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "tests" / "records" / "reports.json"
INLINE_LIMIT = int(os.environ.get("RECORD_INLINE_LIMIT", 20000))
TEXT = {".md", ".csv", ".json", ".jsonl", ".txt", ".tsv", ".tex", ".html"}
BY = ["clean", "corruptions", "mce", "bg-gap", "breaks-at", "mixed_same", "gamma-image", "text"]
# what legitimately differs between two recordings of the same code
MASKS = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?"), "<TIME>"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d(?::\d\d)?(?: UTC)?"), "<TIME>"),
    (re.compile(r"shiftbench-report-[A-Za-z0-9_]+"), "<TMP2>"),
    (re.compile(r'"(started|finished)": [0-9.e+]+'), r'"\1": <TIME>'),
    (re.compile(r"<GIT>\+dirty"), "<GIT>"),
    (re.compile(r'"host": "[^"]*"'), '"host": "<HOST>"'),
    (re.compile(r"<td>host</td><td>[^<]*</td>"), "<td>host</td><td><HOST></td>"),
    # a reader's progress lines (console.Steps), printed only when a command runs long on a busy machine
    (re.compile(r"^(?:report|export|leaderboard): [\d,]+/[\d,]+ .*\n", re.M), ""),
]



def _behaviour():
    name = "record_behaviour"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / "record_behaviour.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


PARTS = _behaviour().PARTS
RUNS: dict[str, int] = {}  # the store's run ids, in the order they started
# values of the machine and the moment, read from the store: the path fingerprints (a folder's hashes its
# files' mtimes) and the checkout's commit
VOLATILE: dict[str, str] = {}


def _masked(text: str, tmp: Path) -> str:
    for folder in {str(tmp), str(tmp.resolve())}:
        text = text.replace(folder, "<TMP>")
    for run_id, k in RUNS.items():  # run ids hash the specs' temporary paths: written as their order
        text = text.replace(run_id, f"run-<{k}>")
    for value, mask in VOLATILE.items():  # the value and the prefixes a table shows of it
        for length in (len(value), 16, 12, 10, 8, 7):
            text = text.replace(value[:length], mask)
    for pattern, mask in MASKS:
        text = pattern.sub(mask, text)
    return text


def _fingerprints(value: Any) -> set[str]:
    """The digests of every path fingerprint (``{"files", "bytes", "sha256"}``, engine/identity.py) in a run's
    identity: written as <FOLDER>, as a folder's depends on its files' mtimes."""
    if isinstance(value, dict):
        own = {value["sha256"]} if set(value) == {"files", "bytes", "sha256"} else set()
        return own.union(*(_fingerprints(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_fingerprints(v) for v in value))
    return set()


def _files(out: Path, tmp: Path) -> dict[str, Any]:
    files: dict[str, Any] = {}
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        data = path.read_bytes()
        entry: dict[str, Any] = {}
        if path.suffix == ".png":  # plots draw the temporary paths of model names: their size is compared
            from PIL import Image

            files[_masked(path.relative_to(out).as_posix(), tmp)] = {"png": list(Image.open(path).size)}
            continue
        if path.suffix in TEXT:
            text = _masked(data.decode("utf-8"), tmp)
            data = text.encode("utf-8")
            if len(text) <= INLINE_LIMIT and path.suffix != ".html":
                entry["text"] = text.splitlines()
            entry.update(_shape(text))
        entry["sha256"] = hashlib.sha256(data).hexdigest()
        files[_masked(path.relative_to(out).as_posix(), tmp)] = entry
    return files


def _command(args: list[str], tmp: Path) -> dict[str, Any]:
    from click.testing import CliRunner

    from shiftbench.cli import cli

    result = CliRunner().invoke(cli, args)
    out = {"exit": result.exit_code, "output": _masked(result.output, tmp).splitlines()}
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        out["exception"] = _masked(f"{type(result.exception).__name__}: {result.exception}", tmp)
    return out


def read_reports(store: Path, tmp: Path) -> dict[str, Any]:
    """Every read-only command's output on ``store`` (see the module's docstring)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(store)) as db:
        RUNS.clear()
        RUNS.update({run_id: k for k, (run_id,) in enumerate(db.execute("SELECT run_id FROM runs ORDER BY rowid"))})
        VOLATILE.clear()
        for identity, git_hash in db.execute("SELECT identity_json, git_hash FROM runs"):
            VOLATILE.update(dict.fromkeys(_fingerprints(json.loads(identity or "null")), "<FOLDER>"))
            if git_hash:
                VOLATILE[git_hash] = "<GIT>"
    out: dict[str, Any] = {}
    commands: list[tuple[str, list[str]]] = [("report", ["report", "--store", str(store), "--all-runs"])]
    commands += [(f"export-{fmt}", ["export", "--store", str(store), "--format", fmt, "--all"])
                 for fmt in ("results", "jsonl", "robustbench")]
    commands += [(f"leaderboard-{by}", ["leaderboard", str(store), "--by", by]) for by in BY]
    for name, args in commands:
        folder = tmp / f"out-{name}"
        entry = _command([*args, "--out", str(folder)], tmp)
        entry["files"] = _files(folder, tmp) if folder.exists() else {}
        out[name] = entry
    return out


def record_part(part: str) -> dict[str, Any]:
    """One part of tools/record_behaviour.py run into a fresh store, and the readers' outputs on it."""
    tool = _behaviour()
    tool._tests_on_path()
    # one fixed folder (the temporary paths reach export names, escaped table cells, spec hashes and the
    # plots' widths), held under a lock so that two recordings on one machine take turns
    base = Path(tempfile.gettempdir()) / "shiftbench-report-records"
    base.mkdir(exist_ok=True)
    with open(base.with_suffix(".lock"), "w") as lock, tool._one_thread():
        fcntl.flock(lock, fcntl.LOCK_EX)
        tmp = base / part
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        store = tmp / "results.db"
        if part == "demo":
            tool.run_demo_cut(store)
        else:
            tool.TASKS[part](tmp, store)
        try:
            return read_reports(store, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


# a float as the readers write it (repr or fixed): compared within FLOAT_TOLERANCE, since the last digits of a
# model's output move with the CPU's vector kernels (the same code on two machines), a reader's rules do not
_FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d+(?:[eE][-+]?\d+)?(?![\w.])")
FLOAT_TOLERANCE = 5e-5  # relative above 1, absolute below: two CPUs moved an ECE by up to 8e-6 (issue 38)


def _shape(text: str) -> dict[str, Any]:
    """What a text file is up to float noise: the sha256 of its text with every float written ``<F>`` and the
    count, sum and sum of magnitudes of those floats."""
    numbers = [float(m) for m in _FLOAT.findall(text)]
    return {"skeleton": hashlib.sha256(_FLOAT.sub("<F>", text).encode("utf-8")).hexdigest(),
            "floats": [len(numbers), math.fsum(numbers), math.fsum(abs(x) for x in numbers)]}


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= FLOAT_TOLERANCE * max(abs(a), abs(b), 1.0)


def _same_line(a: str, b: str) -> bool:
    """Two lines equal but for floats within FLOAT_TOLERANCE of each other."""
    if a == b:
        return True
    fa, fb = _FLOAT.findall(a), _FLOAT.findall(b)
    return (len(fa) == len(fb) and _FLOAT.sub("<F>", a) == _FLOAT.sub("<F>", b)
            and all(_close(float(x), float(y)) for x, y in zip(fa, fb)))


def differences(expected: Any, actual: Any, path: str = "", limit: int = 60) -> list[str]:
    """Readable differences: for text, the first differing lines; else the values. Floats are compared within
    FLOAT_TOLERANCE: in a file's lines, and for a file recorded by its digest alone, by the digest of its text
    with the floats left out and their count and sums (a file's raw sha256 is then not compared)."""
    out: list[str] = []
    if isinstance(expected, dict) and isinstance(actual, dict):
        if "skeleton" in expected and "skeleton" in actual:
            expected, actual = ({k: v for k, v in d.items() if k != "sha256"} for d in (expected, actual))
        for key in sorted(set(expected) | set(actual)):
            if key == "floats" and key in expected and key in actual and len(expected[key]) == len(actual[key]) \
                    and expected[key][0] == actual[key][0] \
                    and all(_close(a, b) for a, b in zip(expected[key][1:], actual[key][1:])):
                continue
            if key not in actual:
                out.append(f"missing  {path}/{key}")
            elif key not in expected:
                out.append(f"extra    {path}/{key}")
            else:
                out += differences(expected[key], actual[key], f"{path}/{key}", limit)
    elif (isinstance(expected, list) and isinstance(actual, list) and expected != actual
          and all(isinstance(line, str) for line in expected + actual)):
        if len(expected) == len(actual) and all(_same_line(a, b) for a, b in zip(expected, actual)):
            return out
        import difflib

        diff = list(difflib.unified_diff(expected, actual, lineterm="", n=0))[2:]
        out.append(f"changed  {path}:\n    " + "\n    ".join(line[:300] for line in diff[:20]))
    elif expected != actual:
        out.append(f"changed  {path}: {str(expected)[:200]} -> {str(actual)[:200]}")
    return out[:limit]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the record, write nothing")
    parser.add_argument("--out", type=Path, default=RECORD)
    parser.add_argument("--part", action="append", choices=PARTS)
    args = parser.parse_args(argv)
    now = {part: record_part(part) for part in args.part or PARTS}
    if args.check:
        recorded = json.loads(args.out.read_text(encoding="utf-8"))
        lines = [line for part in now for line in differences(recorded["parts"].get(part), now[part], part)]
        print("\n".join(lines) or "no differences")
        return 1 if lines else 0
    args.out.write_text(json.dumps({"format": 1, "parts": now}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
