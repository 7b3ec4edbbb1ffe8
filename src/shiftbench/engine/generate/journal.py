"""The out folder's bookkeeping: the settings file that claims it, the journal every finished record goes to
(synced) so that a killed run resumes where it stopped, the run of the jobs on an engine with the driver as the
only writer, and the manifest written whole in canonical order at the end."""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ...errors import ShiftbenchError
from ...files import atomic_path, make_folder, remove_stale_temps, write_atomic
from ...severity import Severity
from ..engines import make_engine
from ..kernel import drive
from .encode import Job, run_job

if TYPE_CHECKING:
    from .plan import GeneratePlan

MANIFEST = "manifest.jsonl"
JOURNAL = "manifest.partial.jsonl"
CONFIG = "generate.json"
log = logging.getLogger("shiftbench.generate")


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Records of a journal; a torn last line (killed mid-write) is dropped and truncated away."""
    if not path.exists():
        return []
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1
    if keep != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(keep)
    records = []
    for number, line in enumerate(data[:keep].decode("utf-8", errors="replace").splitlines(), 1):
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:
            record = ""
        if record is None:
            continue
        if not isinstance(record, dict):
            raise ShiftbenchError(f"{path}: line {number} is not a manifest record; the folder's outputs cannot be "
                                  f"resumed: use another --out")
        records.append(record)
    return records

@dataclass(frozen=True)
class Claim:
    """What a run made of its out folder before any output: undone by :func:`release` if it writes none."""
    out: Path
    made_out: bool  # the out folder did not exist
    fresh: bool  # the settings file is this run's: no earlier run wrote here
    folders: tuple[Path, ...]  # OUT/<shift> folders, none of which existed


def claim_out(out: Path, config: dict[str, Any], folders: Sequence[str]) -> Claim:
    """Make ``out`` this run's: the settings file of an earlier run must equal ``config`` (it resumes); a folder
    without one must not hold any name generate writes (the manifest, the journal, a shift's folder), so no
    file of the user's is ever replaced. Refusals come before anything is written."""
    made = make_folder(out, "generate")
    config_path = out / CONFIG
    if config_path.exists() or config_path.is_symlink():
        previous = _read_settings(config_path)
        if previous != config:
            raise ShiftbenchError(
                f"{out}: holds outputs generated with other settings ({_diff(previous, config)}); use another --out"
            )
        return Claim(out, made, False, ())
    taken = [name for name in dict.fromkeys([MANIFEST, JOURNAL, *folders])
             if (out / name).exists() or (out / name).is_symlink()]
    if taken:
        raise ShiftbenchError(f"generate: {out} already holds {', '.join(taken)} but no {CONFIG} of an earlier "
                              f"generate run; files are never replaced: use a new or empty --out")
    try:
        write_atomic(config_path, json.dumps(config, sort_keys=True, indent=1))
    except OSError as exc:
        if made:
            out.rmdir()
        raise ShiftbenchError(f"generate: cannot write {config_path} ({exc.strerror or type(exc).__name__})") from None
    return Claim(out, made, True, tuple(out / name for name in dict.fromkeys(folders)))


def _read_settings(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ShiftbenchError(f"{path}: not a generate settings file ({type(exc).__name__}); use another "
                              f"--out") from None
    if not isinstance(value, dict):
        raise ShiftbenchError(f"{path}: not a generate settings file (not a JSON object); use another --out")
    return value


def release(claim: Claim) -> None:
    """After a failed run that journaled no output: remove what it made (its settings file, empty journal,
    shift folders, the out folder it created), so that a retry with any settings starts afresh. A run that
    journaled outputs keeps everything for its resume. Never raises: the run's own error is the one to see."""
    out = claim.out
    if not claim.fresh:
        return
    try:
        journal = out / JOURNAL
        if (out / MANIFEST).exists() or (journal.exists() and journal.read_bytes().strip()):
            return
        for folder in claim.folders:  # none existed before this run: every file in them is its own
            if folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder)
        journal.unlink(missing_ok=True)
        (out / CONFIG).unlink(missing_ok=True)
        remove_stale_temps(out, recursive=False)
        if claim.made_out and not any(out.iterdir()):
            out.rmdir()
    except OSError:
        pass


def resume(out: Path, folders: Sequence[str]) -> dict[tuple[str, Severity, int], dict]:
    """Remove a killed run's temporary files where generate writes, and return the records an earlier run
    finished (manifest and journal) by (shift, severity, index)."""
    for folder in [out, *(out / name for name in folders)]:  # where generate writes, and nowhere else
        remove_stale_temps(folder, recursive=folder != out)  # a killed run's temporary files, by their name
    done: dict[tuple[str, Severity, int], dict] = {}
    for record in read_journal(out / MANIFEST) + read_journal(out / JOURNAL):
        if "shift" in record:  # not the screen's records of unreadable files: the screen redoes those
            done[(record["shift"], record["severity"], record["index"])] = record
    return done


def todo(plan: GeneratePlan, done: dict[tuple[str, Severity, int], dict]) -> tuple[list[tuple[str, Severity, list[int]]], int]:
    """The sample indices still to do for each (shift, severity) of the plan, and how many are done already
    (journaled, with their output file in place)."""
    def is_done(name: str, severity: Severity, i: int) -> bool:
        record = done.get((name, severity, i))
        return record is not None and ("output" not in record or (plan.out / record["output"]).exists())

    n, shard_samples = len(plan.dataset), plan.options.shard_samples
    todo: list[tuple[str, Severity, list[int]]] = []
    skipped = 0
    for name, severity in plan.pairs:
        indices: list[int] = []
        if (name, severity) in plan.sharded:  # a shard is redone whole unless every sample of it is done
            for start in range(0, n, shard_samples):
                block = range(start, min(n, start + shard_samples))
                if all(is_done(name, severity, i) for i in block):
                    skipped += len(block)
                else:
                    indices.extend(block)
        else:
            for i in range(n):
                if is_done(name, severity, i):
                    skipped += 1
                else:
                    indices.append(i)
        todo.append((name, severity, indices))
    return todo, skipped


def run_and_journal(jobs: Sequence[Job], plan: GeneratePlan, collect: Callable[[list[dict]], list[dict]],
                    done: dict[tuple[str, Severity, int], dict]) -> int:
    """Run the jobs, CPU shifts before model-loading ones, and journal every finished record (once ``collect``
    has written its shard, if any) into ``done``; returns how many outputs were written."""
    written = 0
    total = sum(len(j.indices) for j in jobs)
    options = plan.options
    with ProgressBar(options.progress, total, "generate") as advance, \
            open(plan.out / JOURNAL, "a", encoding="utf-8") as journal:
        def record_all(records: list[dict]) -> None:
            nonlocal written
            advance(len(records))  # the unit is done, although its shard may be written later
            written += append_records(journal, collect(records), done)

        if jobs:
            # the driver (this process) is the only writer of the journal and the manifest; the engine's
            # workers write only their own output files, each through a temporary file and a rename
            with make_engine(options.engine, workers=options.workers, address=options.address) as runner:
                drive(runner, [(stage, [j for j in jobs if plan.uses_model[j.shift] == (stage == "model")])
                               for stage in ("cpu", "model")], run_job, lambda _, records: record_all(records))
    return written


def append_records(journal: Any, records: list[dict], done: dict[tuple[str, Severity, int], dict]) -> int:
    """Append records to the open journal, synced to disk, and to ``done``; returns how many are outputs."""
    for record in records:
        if "skipped" in record:  # logged here, not by the worker: a Ray worker's log never reaches the user
            log.warning(f"skipped sample {record['id']} (shift {record['shift']!r}, severity "
                        f"{record['severity']}): {record['skipped']}")
        journal.write(json.dumps(record, sort_keys=True) + "\n")
        done[(record["shift"], record["severity"], record["index"])] = record
    journal.flush()
    os.fsync(journal.fileno())
    return sum("skipped" not in r for r in records)


def finalise_manifest(out: Path, done: dict[tuple[str, Severity, int], dict], unreadable: Sequence[dict] = ()) -> None:
    """The manifest in canonical order: files the screen left out first, then every (shift, severity, index)."""
    records = sorted(unreadable, key=lambda r: r["source"])
    records += [done[k] for k in sorted(done, key=lambda k: (k[0], k[1], k[2]))]
    with atomic_path(out / MANIFEST) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    journal = out / JOURNAL
    if journal.exists():
        journal.unlink()


def _diff(a: dict, b: dict) -> str:
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys)


class ProgressBar:
    """A rich progress bar when asked (and more than a handful of items), else a no-op."""

    def __init__(self, enabled: bool, total: int, label: str):
        self.enabled = enabled and total > 0
        self.total, self.label = total, label

    def __enter__(self):
        if not self.enabled:
            return lambda k: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), transient=False)
        self._bar.__enter__()
        task = self._bar.add_task(self.label, total=self.total, rate="")

        def advance(k: int) -> None:
            self._bar.update(task, advance=k)
            speed = self._bar.tasks[0].speed
            if speed:
                self._bar.update(task, rate=f"{speed:.1f}/s")

        return advance

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self._bar.__exit__(*exc)
