"""Build the report of one run from the store alone: report.html (self-contained), tables.{md,csv,tex}, PNG plots.

Every string that comes from data (class names, captions, shift parameters, file names) reaches the
HTML through Jinja2's autoescaping, so markup in a caption shows as text.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import io
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..console import plural
from ..errors import ShiftbenchError
from ..metrics.uncertainty import CORRECTIONS
from ..files import (in_the_way, make_folder, out_folder, read_files_record, remove_stale_temps, temp_path,
                     write_atomic)
from ..results.artifacts import thumb_condition
from ..registry import shift_info
from ..results.records import Curation, Fields, Generated, Prediction, Row, Run, Samples, load
from ..severity import canonical
from ..severity import label as severity_label
from ..shifts.corruptions import GROUP_ORDER as CORRUPTION_GROUP_ORDER
from .headline import Headline, headline, headline_table, order_tables
from .tables import (CLEAN, Table, build_tables, condition_label, in_main_grid, severity_row, to_csv_rows, to_latex,
                     to_markdown)

from .analysis import analysis_blocks, analysis_figures
from .blocks import blocks_to_markdown
from .consistency import consistency_section
from .failure import FailureEntry, failure_blocks, failure_entries, failure_figures
from .objectcompose import blocks_from_summary, summarise
from .objectcompose import to_markdown as objectcompose_markdown
from .pascal_ea import pascal_blocks, write_pascal_ea
from .retrieval import retrieval_blocks
from .stability import stability, stability_blocks
from .stats import BOOTSTRAP_INTERVAL, NOISE_RULE, Uncertainty

REPORT_RECORD = ".shiftbench-report.json"  # the files report runs wrote here: the only ones a later run replaces
log = logging.getLogger("shiftbench.report")
GROUP_ORDER = (*CORRUPTION_GROUP_ORDER, "text", "background", "attribute")  # corruption groups first, in ImageNet-C's order


@dataclass(frozen=True)
class Summary(Fields):
    """A summary section of the report: its title, anchor and blocks (report.blocks; its ``.md`` the same)."""

    title: str
    id: str
    blocks: list[dict[str, Any]]


def build_report(store: str | os.PathLike, out: str | os.PathLike,
                 run_id: str | list[str] | None = None, progress: Progress | None = None,
                 correction: str = "holm") -> Path:
    """Write the report of one run (default: the latest) or several runs (a list) into ``out``.

    Returns the path of report.html. With several runs each gets its own section, and the table and
    plot files are prefixed with the run's position (``run2_tables.md``).

    The report is built in a hidden temporary folder inside ``out`` and moved into place only when whole.
    A file of ``out`` is replaced only when an earlier report wrote it (``.shiftbench-report.json`` lists
    those): the files replaced are named in one warning; any other file in the way refuses the report
    before anything is moved, so a user's file is never replaced or removed. ``progress(done, total, label)``
    is told of each table row given its intervals (the CLI's bar: console.Steps). ``correction``: the multiplicity
    correction of each headline's family of paired tests, ``holm`` (default), ``bh`` (Benjamini-Hochberg) or
    ``none`` (report/headline.py: correct_headline), named in the report.
    """
    if correction not in CORRECTIONS:
        raise ShiftbenchError(f"unknown multiplicity correction {correction!r}; expected one of {', '.join(CORRECTIONS)}")
    out = out_folder(out, "report")  # "" would be the current folder
    made = make_folder(out, "report")  # an --out that cannot be made is refused before the store is read
    stage = temp_path(out / "report")
    try:
        loaded = _load(store, run_id)
        remove_stale_temps(out, recursive=False)  # a killed report's temporary folder (shiftbench's own name pattern)
        stage.mkdir()
        _write_report(stage, loaded, progress, correction)
        _publish(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        if made:
            with contextlib.suppress(OSError):
                out.rmdir()  # only when empty: the folder this call made, nothing in it
        raise
    shutil.rmtree(stage, ignore_errors=True)
    return out / "report.html"


# the predictions of the samples the grids show, not every one (a run with --log-samples keeps them all)
REPORT_PARTS = ("results", "samples", "shown_predictions", "skipped", "curation", "analysis", "thumbs", "quality")


def _load(store: str | os.PathLike, run_id: str | list[str] | None) -> list[Run]:
    """Everything the report reads, per run, from the store alone; a damaged store is one StoreError."""
    loaded = load(store, run_id, REPORT_PARTS)
    for run in loaded:
        if not run.rows:
            raise ShiftbenchError(f"{store}: run {run.run_id!r} has no results yet")
    if not loaded:
        raise ShiftbenchError(f"{store}: no run to report")
    return loaded


def _write_report(out: Path, loaded: list[Run], progress: Progress | None = None, correction: str = "holm") -> None:
    """The report's files, written into ``out`` (the temporary folder :func:`build_report` then publishes)."""
    sections = []
    step = _rows_step(loaded, progress)
    for i, run in enumerate(loaded):
        prefix = "" if len(loaded) == 1 else f"run{i + 1}_"
        baseline = generated_baseline(run) or CLEAN
        preferred, main_rows, tables, unc = _main_tables(run, step=step)
        detail = order_tables(build_tables(main_rows, preferred, per_severity=True), preferred)
        for t in detail:
            t.baseline = baseline
        if unc is not None:
            for t in detail:
                unc.annotate(t, step)
        main = headline_table(tables, preferred)
        _write_tables(out, tables, detail, prefix)
        summaries = _summaries(out, run.rows, prefix, run.quality, unc, curated=bool(run.curation))
        # where each model breaks (report/failure.py): computed once, for its summary, figures and the headline
        failures = _failures(run.samples, main, run.seed)
        summaries += _failure_summary(out, failures, main.metric, prefix) if main is not None else []
        figures = _figures(main_rows, [main] if main is not None else [], out, prefix)
        if failures:
            figures += failure_figures(failures, main.metric, out, prefix, _save)
        summaries += _stability_summary(out, run.rows, unc, prefix)  # ImageNet-P sequences (report/stability.py)
        consistency = consistency_section(run.samples, out, prefix, _save, seed=run.seed)  # report/consistency.py
        if consistency is not None:
            summaries.append(Summary(consistency.title, consistency.id, consistency.blocks))
            figures += consistency.figures
        if run.analysis:
            blocks = analysis_blocks(run.analysis, seed=run.seed)
            if blocks:
                (out / f"{prefix}analysis.md").write_text(blocks_to_markdown(blocks), encoding="utf-8")
                summaries.append(Summary("Analysis: background reliance", "analysis", blocks))
            figures += analysis_figures(run.analysis, out, prefix, _save)
        grids = _grids(run.thumbs, run.predictions, main.rows if main is not None else [], baseline)
        sections.append({"run": run, "rows": run.rows, "n": i + 1,
                         "headline": _run_headline(run, tables, preferred, unc, failures=failures,
                                                   correction=correction),
                         "tables": _table_views(tables, detail, main, f"run{i + 1}", main_rows),
                         "figures": figures, "grids": grids,
                         "summaries": _summary_views(summaries, f"run{i + 1}"), "spec_yaml": _yaml(run.spec),
                         "datasets": sorted({r.dataset for r in run.rows}), "inputs": _inputs(run), **_times(run)})
    (out / "report.html").write_text(_render(sections), encoding="utf-8")


Progress = Callable[[float, float, str], None]  # progress(done, total, label)


def _rows_step(loaded: list[Run], progress: Progress | None) -> Callable[[str], None] | None:
    """A tick per table row given its intervals, told to ``progress`` with the rows of every run's tables."""
    if progress is None:
        return None
    total = 0
    for run in loaded:
        if run.samples:
            rows = [r for r in run.rows if in_main_grid(r.metric)]
            total += sum(len(t.rows) for per in (False, True) for t in build_tables(rows, run.metrics, per_severity=per))
    done = [0]

    def step(label: str) -> None:
        done[0] += 1
        progress(done[0], max(total, done[0]), label)

    return step


def _failures(samples: list[Samples] | None, main: Table | None, seed: int) -> list[FailureEntry]:
    """The run's failure points of the headline metric (report/failure.py), [] without per-sample values."""
    if not samples or main is None:
        return []
    return failure_entries(samples, main.metric, seed=seed)


def _failure_summary(out: Path, entries: list[FailureEntry], metric: str, prefix: str) -> list[Summary]:
    """The failure-points summary (report/failure.py) and its Markdown export, when the run has curves."""
    blocks = failure_blocks(entries, metric)
    if not blocks:
        return []
    (out / f"{prefix}failure_points.md").write_text(
        blocks_to_markdown([{"kind": "heading", "level": 2, "text": "Failure points"}] + blocks), encoding="utf-8")
    tag = prefix.rstrip("_")
    return [Summary("Failure points", f"{tag}-failure-points".lstrip("-"), blocks)]


def _stability_summary(out: Path, rows: list[Row], unc: Uncertainty | None, prefix: str) -> list[Summary]:
    """The Stability summary (ImageNet-P flip rates, report/stability.py) and its Markdown export, when the run
    has perturbation sequences."""
    blocks = stability_blocks(stability(rows, unc))
    if not blocks:
        return []
    (out / f"{prefix}stability.md").write_text(
        blocks_to_markdown([{"kind": "heading", "level": 2, "text": "Stability (ImageNet-P)"}] + blocks), encoding="utf-8")
    tag = prefix.rstrip("_")
    return [Summary("Stability (ImageNet-P)", f"{tag}-stability".lstrip("-"), blocks)]


def _main_tables(run: Run, headline_only: bool = False, step: Callable[[str], None] | None = None
                 ) -> tuple[list[str], list[Row], list[Table], Uncertainty | None]:
    """A run's main tables as the report shows them: the spec's metric order, the main grid's rows, one table
    per metric (with its CIs when the store has per-sample values; ``headline_only``: only the headline's
    metric, all the headline reads, each interval being seeded on its own) and the Uncertainty behind them."""
    preferred = run.metrics
    main_rows = [r for r in run.rows if in_main_grid(r.metric)]
    tables = order_tables(build_tables(main_rows, preferred), preferred)
    for t in tables:
        t.baseline = generated_baseline(run) or CLEAN
    unc = Uncertainty(run.samples, seed=run.seed) if run.samples else None
    if unc is not None:
        main = headline_table(tables, preferred)
        for t in tables:
            if not headline_only or t is main:
                unc.annotate(t, step)
    return preferred, main_rows, tables, unc


def _run_headline(run: Run, tables: list[Table], preferred: list[str], unc: Uncertainty | None,
                  failures: list[FailureEntry] | None = None, correction: str = "holm") -> Headline | None:
    """The headline of a run (report/headline.py) with what the report says above it (the curation; what a
    folder written by generate holds). ``failures``: the run's failure points when already computed (else
    computed here from the per-sample values behind ``unc``, for the "breaks at" column)."""
    baseline = generated_baseline(run)
    main = headline_table(tables, preferred)
    if failures is None and unc is not None and main is not None and main.higher_is_better:
        failures = _failures(unc.samples, main, run.seed)
    head = headline(run.rows, tables, preferred, unc, baseline=baseline or CLEAN, failures=failures,
                    correction=correction)
    for text in (generated_text(run) if baseline else "", curation_text(run.curated) if run.curated else ""):
        if head is not None and text:  # the curation first, then what a generated folder holds
            head.note = text + " " + head.note
    return head


def run_headline(store: str | os.PathLike, run_id: str | None = None, correction: str = "holm") -> Headline | None:
    """The headline of one run of ``store`` (default: the latest), the very one its report shows, from the
    store alone (``shiftbench evaluate`` prints it when the run ends; report/terminal.py draws it); None for
    a run without results."""
    run, = load(store, run_id, ("results", "curation", "samples"), check=False)
    if not run.rows:
        return None
    preferred, _, tables, unc = _main_tables(run, headline_only=True)
    return _run_headline(run, tables, preferred, unc, correction=correction)


def _earlier_report(out: Path) -> set[str]:
    """The files an earlier report wrote into ``out``: those its record lists, or, for a report made before
    the record existed, the report's own file names when its report.html is a shiftbench report."""
    recorded = read_files_record(out / REPORT_RECORD, "report")
    if recorded is not None:
        return recorded
    try:
        legacy = "<h1>shiftbench report</h1>" in (out / "report.html").read_text(encoding="utf-8", errors="replace")
    except OSError:
        legacy = False
    return {"*"} if legacy else set()


def _publish(stage: Path, out: Path) -> None:
    """Move the finished report from ``stage`` into ``out`` (report.html last). Refuses, before moving anything,
    a file in the way that no earlier report wrote; logs one line naming the earlier report's files replaced."""
    files = sorted((p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file()),
                   key=lambda f: (f == "report.html", f))
    earlier = _earlier_report(out)
    existing = [f for f in files if in_the_way(out, f)]
    foreign = [f for f in existing if not ((out / f).is_file() and ("*" in earlier or f in earlier))]
    if foreign:
        raise ShiftbenchError(f"report: {out} already holds {', '.join(foreign)}, which no earlier shiftbench "
                              f"report wrote; files are never replaced: use a new or empty --out")
    if existing:
        log.warning(f"report: replacing {len(existing)} file(s) of an earlier report in {out}: {', '.join(existing)}")
    for name in files:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage / name, out / name)
    kept = {f for f in earlier if f != "*" and (out / f).is_file()}
    write_atomic(out / REPORT_RECORD, json.dumps({"files": sorted(kept | set(files))}, indent=1) + "\n")


def _yaml(spec: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(spec, sort_keys=False)


def curation_text(curation: Curation) -> str:
    """One sentence saying which samples a curated run scores (the spec's ``curate:`` section)."""
    models = ", ".join(curation.models or [])
    every = "every one of " if len(curation.models or []) > 1 else ""
    mask = (curation.dropped or {}).get("mask")
    extra = f" and whose object mask is large enough ({mask} dropped for a small mask)" if mask else ""
    return (f"Curated as in ObjectCompose: n = {curation.kept} of {curation.total} samples, those "
            f"{every}{models} classifies correctly on clean{extra}; every condition is scored on these samples only.")


def preprocess_text(section: dict[str, Any] | None) -> str | None:
    """The spec's ``preprocess:`` section in words (None without one): ``resize shorter side to 256
    (bilinear, Pillow), then centre crop 224x224``."""
    if not section:
        return None
    parts = []
    if section.get("resize") is not None:
        parts.append(f"resize shorter side to {section['resize']} ({section.get('interpolation') or 'bilinear'}, Pillow)")
    if section.get("crop") is not None:
        crop = section["crop"]
        parts.append(f"centre crop {crop[0]}x{crop[1]}" if isinstance(crop, (list, tuple)) else f"centre crop {crop}")
    return ", then ".join(parts) + " (before any shift; masks and boxes follow)"


def generated_baseline(run: Run) -> str | None:
    """For a run whose data is a folder written by ``shiftbench generate`` (its dataset identity has
    ``generated``, datasets/generated.py): the label of its unshifted condition, the shift and severity its
    images were made under ('fog s3 (generated)'); None for any other run."""
    origin = run.generated
    if not origin:
        return None
    return f"{severity_row(condition_label(origin.shift, origin.params or {}), origin.severity)} (generated)"


def made_text(origin: Generated) -> str:
    """How a generated folder was made, in words: ``seed 0, from objects, protocol p`` (what it records)."""
    return ", ".join(x for x in (f"seed {origin.seed}" if origin.seed is not None else "",
                                 f"from {origin.source}" if origin.source else "",
                                 f"protocol {origin.protocol}" if origin.protocol else "") if x)


def generated_text(run: Run) -> str:
    """One sentence saying what a generated folder's "clean" condition is (see :func:`generated_baseline`)."""
    origin, made = run.generated, made_text(run.generated)
    return (f"The data of this run is a folder written by shiftbench generate under {origin.shift} at severity "
            f"{severity_label(origin.severity)}{f' ({made})' if made else ''}: what the run read unshifted is "
            f"labelled {generated_baseline(run)}, not clean, and every change in brackets is against it.")


def _inputs(run: Run) -> list[tuple[str, str]]:
    """Provenance lines for what decided the numbers besides the spec: the preprocessing, each model's
    weights, the dataset's fingerprint, the ids file, and the files a reader skipped (on_error: skip)."""
    lines = []
    preprocessing = preprocess_text((run.spec or {}).get("preprocess"))
    if preprocessing:
        lines.append(("preprocessing", preprocessing))
    for name, w in sorted((run.weights or {}).items()):
        if w.sha256:
            text = f"sha256 {w.sha256[:16]}… (" + ("of its files" if w.origin == "files" else "of its parameters") + ")"
        else:
            text = "none (a model without weights)" if w.origin == "none" else "not recorded"
        lines.append((f"weights of {name}", text))
    data, ids = run.data, run.ids
    if data:
        text = f"{data.samples} samples" + (f"; files {data.files}, fingerprint {data.sha256[:16]}…"
                                            if data.sha256 is not None else "")
        lines.append((f"dataset {data.name}".strip(), text))
    if ids:
        lines.append(("ids file", f"sha256 {ids['sha256'][:16]}…" if isinstance(ids, dict) and "sha256" in ids else str(ids)))
    if generated_baseline(run):
        lines.append(("made by shiftbench generate", generated_text(run) + (
            "" if run.generated.complete else " Its manifest is not final: generate did not finish.")))
    skipped = run.skipped or []
    if skipped:
        shown = "; ".join(f"{s['file']} ({s['reason']})" for s in skipped[:10])
        lines.append(("skipped files", f"{len(skipped)}: {shown}" + (" …" if len(skipped) > 10 else "")))
    curation = run.curated
    if curation:
        wrong = ", ".join(f"{m} {k}" for m, k in (curation.wrong_per_model or {}).items())
        lines.append(("curation", f"{curation.kept} of {curation.total} samples kept"
                                  + (f"; wrong on clean: {wrong}" if wrong else "")))
    return lines


def _times(run: Run) -> dict[str, str]:
    started = datetime.fromtimestamp(run.started, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    finished = (datetime.fromtimestamp(run.finished, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
                if run.finished else "not finished")
    return {"started": started, "finished": finished}


def _summaries(out: Path, rows: list[Row], prefix: str,
               quality: list[dict[str, Any]] | None = None, unc: Uncertainty | None = None,
               curated: bool = False) -> list[Summary]:
    """Task-specific summaries (Pascal-EA, ObjectCompose families, composed retrieval) as structured blocks
    (report.blocks, in a :class:`Summary`); their ``.md`` files are the Markdown export of the same
    blocks, so the HTML never receives Markdown."""
    tag = prefix.rstrip("_")
    found = []
    # the HTML gets the structured blocks; the Markdown/CSV exports are written from the same data
    if write_pascal_ea(out / tag if prefix else out, rows, quality or []) is not None:
        found.append(Summary("Pascal-EA: attribute edits", f"{tag}-pascal-ea".lstrip("-"),
                             pascal_blocks(rows, quality or [])))
    oc = _write_objectcompose(out, rows, prefix, unc, curated)
    if oc:
        found.append(Summary("ObjectCompose summary", f"{tag}-objectcompose".lstrip("-"), oc))
    if any(r.metric.startswith("R@") for r in rows):
        blocks = retrieval_blocks(rows)
        (out / f"{prefix}retrieval.md").write_text(
            blocks_to_markdown([{"kind": "heading", "level": 2, "text": "Composed retrieval"}] + blocks),
            encoding="utf-8")
        found.append(Summary("Composed retrieval", f"{tag}-retrieval".lstrip("-"), blocks))
    return found


# -- views: what the template renders, computed here so the template only lays it out ----------------
def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def _sample_counts(rows: list[Row], per_severity: bool = False) -> dict[tuple[str, str, str], list[int]]:
    """n of each stored condition, keyed like the table cells (metric, row label, model); the "mean"
    column gets every model's. Counted from the rows so a cell averaged over severities shows the n of
    one condition, not a sum."""
    counts: dict[tuple[str, str, str], list[int]] = {}
    for r in rows:
        label = condition_label(r.shift, r.params)
        if per_severity and r.shift != CLEAN:
            label = severity_row(label, r.severity)  # the per-severity table's own row label
        for model in (r.model, "mean"):
            counts.setdefault((r.metric, label, model), []).append(int(r.n))
    return counts


def _n_text(ns: list[int] | None, mean: bool = False) -> str:
    if not ns:
        return "n not recorded"
    lo, hi = min(ns), max(ns)
    what = " per model and condition" if mean else (" per condition" if len(ns) > 1 else "")
    return (f"n = {lo} samples" if lo == hi else f"n = {lo}–{hi} samples") + what


def _cell_title(t: Table, row: str, model: str, counts: dict | None = None) -> str:
    """The tooltip of a results cell: its n always, its intervals and test when part STATS filled them."""
    cell = t.cells.get((row, model))
    if cell is None:
        return ""
    ns = (counts or {}).get((t.metric, row, model)) or [cell.n]
    parts = [_n_text(ns, model == "mean")]
    low, high = getattr(cell, "low", None), getattr(cell, "high", None)
    if low is not None and high is not None:
        kind = getattr(cell, "interval", None)
        parts.append(f"95% CI [{t.fmt(low)}, {t.fmt(high)}]" + (f" ({kind})" if kind and kind != BOOTSTRAP_INTERVAL else ""))
    dlow, dhigh = getattr(cell, "delta_low", None), getattr(cell, "delta_high", None)
    test = getattr(cell, "test", None) or "paired test"
    if row != CLEAN and dlow is not None and dhigh is not None:
        parts.append(f"change 95% CI [{t.fmt(dlow, signed=True)}, {t.fmt(dhigh, signed=True)}] ({test})")
    p = getattr(cell, "p_value", None)
    if row != CLEAN and p is not None:
        parts.append(f"p = {p:.3g} against clean ({test}; uncorrected for multiplicity)")
    if row != CLEAN and getattr(cell, "noise", None):
        parts.append("≈ within noise (p >= 0.05)")
    return "; ".join(parts)


def _cell_view(t: Table, row: str, model: str, counts: dict | None = None) -> dict[str, Any]:
    cell = t.cells.get((row, model))
    text = t.text(row, model)
    cls = "mean" if model == "mean" else ""
    if cell is not None and row != CLEAN and cell.delta is not None:
        if getattr(cell, "noise", None):
            text += " ≈"
            cls += " noise"
        elif cell.delta != 0:
            cls += " down" if (cell.delta < 0) == t.higher_is_better else " up"
    return {"text": text, "title": _cell_title(t, row, model, counts), "cls": cls.strip(),
            "numeric": cell is not None and cell.value is not None}


def _table_view(t: Table, tid: str, title_suffix: str = "", counts: dict | None = None) -> dict[str, Any]:
    unit = " (%)" if t.percent else ""
    arrow = "↑" if t.higher_is_better else "↓"
    # the clean condition's n per model heads its column (every cell's own n is in its tooltip)
    ns = {m: t.cells[(CLEAN, m)].n for m in t.models if (CLEAN, m) in t.cells}
    head = [{"text": m, "title": f"n = {ns[m]} samples per condition" if m in ns else ""} for m in t.models]
    head.append({"text": "mean", "title": "mean over models"})
    if ns and len(set(ns.values())) == 1:
        n_line = f"n = {next(iter(ns.values()))} samples per condition and model (clean)"
    else:
        n_line = "n per condition (clean): " + ", ".join(f"{m} {v}" for m, v in ns.items()) if ns else ""
    rows = [{"label": t.label(row), "cls": "clean" if row == CLEAN else "",
             "cells": [_cell_view(t, row, m, counts) for m in t.columns()]} for row in t.rows]
    shifted = [t.cells[(r, "mean")].delta for r in t.rows if r != CLEAN and (r, "mean") in t.cells
               and t.cells[(r, "mean")].delta is not None]
    gist = f"{plural(len(t.rows), 'condition')} × {plural(len(t.models), 'model')}"
    if shifted:
        gist += f"; mean change against clean {t.fmt(sum(shifted) / len(shifted), signed=True)}"
        worst = (min if t.higher_is_better else max)(shifted)
        gist += f", worst {t.fmt(worst, signed=True)}"
    return {"id": tid, "metric": t.metric, "title": f"{t.metric}{unit} {arrow}{title_suffix}", "gist": gist,
            "head": head, "rows": rows, "n_line": n_line,
            "first_head": "condition, severity" if title_suffix else "condition"}


def _table_views(tables: list[Table], detail: list[Table], main: Table | None, prefix: str,
                 rows: list[Row] | None = None) -> list[dict[str, Any]]:
    """One view per metric (the headline metric's open, the others folded), each with its per-severity
    detail (folded) when a shift ran at several severities."""
    by_metric = {t.metric: t for t in detail}
    views = []
    for t in tables:  # natural order; the headline metric's table is open, the others fold
        d = by_metric.get(t.metric)
        views.append({**_table_view(t, f"{prefix}-t-{_slug(t.metric)}", counts=_sample_counts(rows or [])),
                      "open": t is main, **({} if d is None or len(d.rows) <= len(t.rows) else {"detail": _table_view(
                          d, f"{prefix}-t-{_slug(t.metric)}-sev", ", per severity",
                          counts=_sample_counts(rows or [], per_severity=True))})})
    return views


def _summary_views(summaries: list[Summary], prefix: str) -> list[dict[str, Any]]:
    """Summaries as the contract's blocks; a cell is a str or {"text", "title", "cls"}, shown as given."""
    views = []
    for s in summaries:
        blocks = []
        for b in s.blocks:
            if b.get("kind") == "table":
                bold = set(b.get("first_bold_rows") or [])
                rows = [{"bold": i in bold, "cells": [_block_cell(c) for c in r]} for i, r in enumerate(b.get("rows", []))]
                blocks.append({**b, "head": [_block_cell(c) for c in b.get("head", [])], "rows": rows})
            else:
                blocks.append(b)
        views.append({"title": s.title, "id": f"{prefix}-{s.id or _slug(s.title)}", "blocks": blocks})
    return views


def _block_cell(cell: Any) -> dict[str, str]:
    if isinstance(cell, dict):
        return {"text": str(cell.get("text", "")), "title": str(cell.get("title") or ""), "cls": str(cell.get("cls") or "")}
    return {"text": str(cell), "title": "", "cls": ""}


# -- tables ---------------------------------------------------------------------------------------
def _write_objectcompose(out: Path, rows: list[Row], prefix: str = "",
                         unc: Uncertainty | None = None, curated: bool = False) -> list[dict[str, Any]] | None:
    """objectcompose.{md,json} (background runs only): each prompt family's mean and worst condition with
    its change against clean (shifted - clean) and the paper's ordering, the paper's values beside ours when
    the run follows its protocol (``curated`` is part of it); returns the summary's blocks."""
    summary = summarise(rows, unc=unc, curated=curated)
    if not summary["families"]:
        return None
    (out / f"{prefix}objectcompose.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    (out / f"{prefix}objectcompose.md").write_text(objectcompose_markdown(summary), encoding="utf-8")
    return blocks_from_summary(summary)


def _write_tables(out: Path, tables: list[Table], detail: list[Table], prefix: str = "") -> None:
    ns = sorted({c.n for t in tables for c in t.cells.values()})
    n = "not recorded" if not ns else str(ns[0]) if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
    md = ["# Results", "", "Each cell: the metric under the condition and, in brackets, its change against clean "
          f"(shifted minus clean). n = {n} samples per condition and model; ≈ marks a change within noise: "
          f"p >= 0.05 in its paired test ({NOISE_RULE}); the 95% CIs, p-values and each cell's test are in "
          f"{prefix}tables.csv.", ""]
    md += [to_markdown(t) for t in tables]
    md += ["", "## Per severity", ""] + [to_markdown(t) for t in detail]
    (out / f"{prefix}tables.md").write_text("\n".join(md), encoding="utf-8")
    with open(out / f"{prefix}tables.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["metric", "condition", "model", "value", "change_vs_clean", "n", "ci_low", "ci_high",
                         "change_ci_low", "change_ci_high", "p_value", "within_noise", "test"])
        for t in detail:
            writer.writerows(to_csv_rows(t))
    (out / f"{prefix}tables.tex").write_text("\n".join(to_latex(t) for t in tables), encoding="utf-8")


# -- figures --------------------------------------------------------------------------------------
def _figures(rows: list[Row], tables: list[Table], out: Path, prefix: str = "") -> list[dict[str, str]]:
    """The run's figures, each one the run has data for: severity curves, drop heat map, reliability diagrams."""
    import matplotlib

    matplotlib.use("Agg")
    if not tables:
        return []
    main = tables[0]
    made = (_severity_curves(rows, main, out, prefix), _drop_heatmap(main, out, prefix),
            _reliability_diagrams(rows, out, prefix))
    return [figure for figure in made if figure is not None]


def _severity_curves(rows: list[Row], main: Table, out: Path, prefix: str) -> dict[str, str] | None:
    """Metric against severity per shift, one panel per shift family, mean over models (severity 0 is clean)."""
    import matplotlib.pyplot as plt

    metric = main.metric
    scale = 100.0 if main.percent else 1.0
    mrows = [r for r in rows if r.metric == metric and r.value is not None]
    graded = {}
    for r in mrows:
        if r.shift == CLEAN or r.severity < 1:
            continue
        # each severity at its own x: 2.5 between 2 and 3, never merged into either
        graded.setdefault((r.shift, r.params_key), {}).setdefault(canonical(r.severity), []).append(r.value)
    graded = {k: v for k, v in graded.items() if len(v) > 1}
    clean = [r.value for r in mrows if r.shift == CLEAN]
    clean_mean = np.mean(clean) if clean else None
    if not graded:
        return None
    fams = sorted({shift_info(s).family or "other" for s, _ in graded}, key=lambda g: (GROUP_ORDER + (g,)).index(g))
    fig, axes = plt.subplots(1, len(fams), figsize=(3.6 * len(fams), 3.2), squeeze=False, sharey=True)
    for ax, fam in zip(axes[0], fams):
        for (shift, pk), by_sev in sorted(graded.items()):
            if (shift_info(shift).family or "other") != fam:
                continue
            sev = sorted(by_sev)
            xs = ([0] if clean_mean is not None else []) + sev
            ys = ([clean_mean] if clean_mean is not None else []) + [float(np.mean(by_sev[s])) for s in sev]
            label = condition_label(shift, json.loads(pk))
            if label.startswith("_"):  # matplotlib hides legend labels that start with "_"
                label = "\u200b" + label
            ax.plot(xs, np.asarray(ys) * scale, marker="o", ms=3, lw=1.4, label=label)
        ax.set_title(fam)
        ax.set_xlabel("severity (0 = clean)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, loc="lower left")
    axes[0][0].set_ylabel(f"{metric}{' (%)' if main.percent else ''}, mean over models")
    fig.tight_layout()
    figure = _save(fig, out, f"{prefix}severity_curves.png", "Severity curves",
                   f"{metric} against severity for each shift (mean over models; severity 0 is clean).")
    plt.close(fig)
    return figure


def _drop_heatmap(main: Table, out: Path, prefix: str) -> dict[str, str] | None:
    """Change against clean per model (rows) and shifted condition (columns), mean over severities."""
    import matplotlib.pyplot as plt

    metric, models = main.metric, main.models
    scale = 100.0 if main.percent else 1.0
    shifted = [r for r in main.rows if r != CLEAN]
    if not (shifted and models):
        return None
    data = np.full((len(models), len(shifted)), np.nan)
    for i, m in enumerate(models):
        for j, row in enumerate(shifted):
            cell = main.cells.get((row, m))
            if cell is not None and cell.delta is not None:
                data[i, j] = cell.delta * scale
    fig, ax = plt.subplots(figsize=(max(4.0, 0.42 * len(shifted) + 2.5), 0.45 * len(models) + 2.6))
    lim = np.nanmax(np.abs(data)) if np.isfinite(data).any() else 1.0
    cmap = "RdYlGn" if main.higher_is_better else "RdYlGn_r"
    im = ax.imshow(data, cmap=cmap, vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xticks(range(len(shifted)), shifted, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(models)), models, fontsize=8)
    for i in range(len(models)):
        for j in range(len(shifted)):
            if np.isfinite(data[i, j]):
                ax.text(j, i, f"{data[i, j]:.0f}" if main.percent else f"{data[i, j]:.2f}", ha="center",
                        va="center", fontsize=6)
    fig.colorbar(im, ax=ax, label=f"change in {metric}{' (points)' if main.percent else ''}")
    figure = _save(fig, out, f"{prefix}drop_heatmap.png", "Change against clean",
                   f"Change of {metric} against clean, per model and shift (mean over severities).")
    plt.close(fig)
    return figure


def _reliability_diagrams(rows: list[Row], out: Path, prefix: str) -> dict[str, str] | None:
    """Accuracy per confidence bin from the ECE rows: up to three clean ones and the worst-calibrated shift."""
    import matplotlib.pyplot as plt

    ece_rows = [r for r in rows if r.metric == "ece" and r.value is not None and r.bins[0]]
    if not ece_rows:
        return None
    clean_rows = [r for r in ece_rows if r.shift == CLEAN]
    worst = max((r for r in ece_rows if r.shift != CLEAN), key=lambda r: r.value, default=None)
    picks = [(r, "clean") for r in clean_rows[:3]]
    if worst is not None:
        where = severity_row(condition_label(worst.shift, worst.params), worst.severity)
        picks.append((worst, f"worst: {where}"))
    fig, axes = plt.subplots(1, len(picks), figsize=(3.0 * len(picks), 3.0), squeeze=False)
    for ax, (r, title) in zip(axes[0], picks):
        accuracy, counts = r.bins
        acc = np.asarray([np.nan if a is None else a for a in accuracy], float)
        counts = np.asarray([1] * len(acc) if counts is None else counts, float)
        conf = acc
        edges = np.linspace(0, 1, len(conf) + 1)
        centers = (edges[:-1] + edges[1:]) / 2
        ok = (counts > 0) & np.isfinite(acc)
        ax.bar(centers[ok], acc[ok], width=1 / len(conf), edgecolor="k", lw=0.4, alpha=0.8, label="accuracy")
        ax.plot([0, 1], [0, 1], "k--", lw=0.8)
        ax.set_title(f"{r.model}\n{title}\nECE {100 * r.value:.1f}", fontsize=7)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("confidence", fontsize=7)
    axes[0][0].set_ylabel("accuracy")
    fig.tight_layout()
    figure = _save(fig, out, f"{prefix}reliability.png", "Reliability diagrams",
                   "Accuracy per confidence bin on clean data and under the worst-calibrated shift.")
    plt.close(fig)
    return figure


def _save(fig, out: Path, name: str, title: str, caption: str) -> dict[str, str]:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    data = buf.getvalue()
    (out / name).write_bytes(data)
    return {"title": title, "caption": caption, "file": name,
            "src": "data:image/png;base64," + base64.b64encode(data).decode("ascii")}


# -- sample grids ---------------------------------------------------------------------------------
def _grids(thumbs: list[dict[str, Any]], predictions: list[Prediction], order: list[str] | None = None,
           baseline: str = CLEAN) -> list[dict[str, Any]]:
    """Columns = conditions (clean first, then the highest severity of each shift, in the order of the
    results table's rows ``order``, i.e. the spec's; others after, by shift group), rows = samples; the
    unshifted column is labelled ``baseline`` (a generated folder's: the shift it was made under)."""
    if not thumbs:
        return []
    by_condition: dict[tuple[str, str, int | float], dict[str, dict]] = {}
    for t in thumbs:
        shift, pk, severity, sid = thumb_condition(t)
        by_condition.setdefault((shift, pk, canonical(severity)), {})[sid] = t
    preds: dict[tuple[str, str, int | float, str], list[Prediction]] = {}
    for p in predictions:
        preds.setdefault((*p.key[1:], str(p.sample_id)), []).append(p)
    best: dict[tuple[str, str], int | float] = {}
    for shift, pk, sev in by_condition:
        best[(shift, pk)] = max(sev, best.get((shift, pk), -1))
    order = list(order or [])
    group_rank = {g: i for i, g in enumerate(GROUP_ORDER)}

    def position(c: tuple[str, str, int]) -> tuple:
        label = condition_label(c[0], json.loads(c[1]))
        return (c[0] != CLEAN, order.index(label) if label in order else len(order),
                group_rank.get(shift_info(c[0]).family or "other", len(GROUP_ORDER)), c[0], c[1])

    columns = sorted(((s, pk, sev) for (s, pk), sev in best.items()), key=position)
    sample_ids = sorted({sid for cond in by_condition.values() for sid in cond})[:4]
    grids = []
    per_grid = 6  # six columns of 160 px fit the page without breaking a word of a label
    for start in range(0, len(columns), per_grid):
        cols = columns[start:start + per_grid]
        grid_rows = []
        for sid in sample_ids:
            cells = []
            for col in cols:
                t = by_condition.get(col, {}).get(sid)
                if t is None:
                    cells.append(None)
                    continue
                meta = t.get("meta") or {}
                items = []
                for p in sorted(preds.get((*col, sid), []), key=lambda p: p.model):
                    pred, said = p.prediction, p.said
                    if "answers" in pred:  # a question-answering model: what it said, and the class that matched
                        said_text = _shorten(" / ".join(str(a) for a in pred.get("answers") or []), 60)
                        items.append({"model": p.model, "text": f"“{said_text}” → {pred.get('pred_name')}",
                                      "wrong": not pred.get("correct", False)})
                    elif "pred_name" in pred:
                        items.append({"model": p.model, "text": f"{said.pred_name} {100 * said.confidence:.0f}%",
                                      "wrong": not said.correct if "correct" in pred else False})
                    elif "iou" in pred:
                        items.append({"model": p.model, "text": f"IoU {said.iou:.2f}", "wrong": said.iou < 0.5})
                    elif "caption" in pred:  # captioners: the caption itself (the grid wraps and escapes it)
                        items.append({"model": p.model, "text": _shorten(str(said.caption), 80), "wrong": None})
                    elif "detections" in pred:  # detectors: the count and the two best boxes' classes
                        best = ", ".join(f"{d.get('name', d['label'])} {d['score']:.2f}" for d in said.top[:2])
                        items.append({"model": p.model, "text": f"{said.detections} boxes" + (f": {best}" if best else ""),
                                      "wrong": None})
                cells.append({"src": "data:image/png;base64," + base64.b64encode(t["data"]).decode("ascii"),
                              "truth": meta.get("class_name") or "", "preds": items})
            grid_rows.append({"sample": sid, "cells": cells})
        labels = [condition_label(s, json.loads(pk)) if s == CLEAN else severity_row(condition_label(s, json.loads(pk)), sev)
                  for s, pk, sev in cols]
        grids.append({"columns": [baseline if c == CLEAN else c for c in labels], "rows": grid_rows})
    return grids


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


# -- HTML -----------------------------------------------------------------------------------------
def _render(sections: list[dict[str, Any]]) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("shiftbench.report", "templates"),
                             autoescape=jinja2.select_autoescape(default=True, default_for_string=True))
    return env.get_template("report.html.j2").render(sections=sections)
