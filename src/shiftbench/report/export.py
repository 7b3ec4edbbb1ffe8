"""Exports of a results store for other tools: RobustBench's corruption layout, per-sample values as JSON lines or
Parquet tables (streamed from the store: memory flat in the number of samples), and one results JSON per run
(every row with its 95% CI, the failure points, the provenance), each checked against a JSON Schema shipped with
shiftbench (``shiftbench/data/schemas``; :func:`schema`).

Read from the store alone, like the report (never a model). The files are written into a hidden temporary
folder inside ``out`` and moved into place only when every one of them is whole; a file of ``out`` is replaced
only when an earlier export wrote it (``.shiftbench-export.json`` lists those), any other file in the way
refuses the export before anything is moved. What a store lacks (a store written by an older shiftbench: no
per-sample values, no run identity, no versions; metrics that keep no per-sample values; fewer than ImageNet-C's 15
corruptions) and what its numbers are not (a run not finished, a folder written by generate read as "clean", a value
that is not a finite number) is one note each, returned with the files and printed by ``shiftbench export``.
File and folder names made from names (run ids, datasets, model labels) are :func:`..files.file_stems`: bounded,
portable, distinct on a case-insensitive file system; ``.shiftbench-export.json`` maps each file to the full
names behind it. docs/exports.md describes every field.

>>> FORMATS
('robustbench', 'jsonl', 'results', 'parquet')
>>> schema("jsonl")["title"]
'shiftbench export: one line of samples.jsonl'
>>> schema("jsonl", "conditions")["title"]
'shiftbench export: one line of conditions.jsonl'
"""

from __future__ import annotations

import contextlib
import csv
import difflib
import importlib.metadata
import importlib.resources
import io
import json
import math
import os
import shutil
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..condition import Condition
from ..console import plural
from ..errors import ShiftbenchError
from ..files import (file_stems, in_the_way, make_folder, out_folder, read_files_record, remove_stale_temps,
                     temp_path, write_atomic)
from ..install import install_command
from ..results.records import ALL, Prediction, Row, Run, Samples, load
from ..results.store import Store
from ..severity import canonical
from ..severity import label as severity_label
from .build import generated_baseline
from .caveats import check_samples, condition_text, generated_origin_text, samples_caveat, some, unfinished
from .failure import failure_entries
from .stats import NOISE_RULE, Uncertainty
from .tables import CLEAN, condition_label

__all__ = ["FORMATS", "SCHEMA_FILES", "ROBUSTBENCH_CORRUPTIONS", "EXPORT_RECORD", "Export", "Progress",
           "export_store", "schema"]

FORMATS = ("robustbench", "jsonl", "results", "parquet")
# each format's schema files, by part: the first is what schema(fmt) gives (parquet: one row as pyarrow's
# Table.to_pylist() reads it)
SCHEMA_FILES = {"robustbench": {"model": "robustbench-model.schema.json"},
                "jsonl": {"samples": "samples-line.schema.json", "conditions": "conditions-line.schema.json",
                          "predictions": "predictions-line.schema.json"},
                "results": {"results": "results.schema.json"},
                "parquet": {"samples": "samples-row.schema.json", "predictions": "predictions-row.schema.json"}}
EXPORT_RECORD = ".shiftbench-export.json"  # the files exports wrote here: the only ones a later export replaces
SAMPLES_FILE = "samples.jsonl"
# RobustBench's own order of ImageNet-C's 15 corruptions (robustbench/data.py, CORRUPTIONS): the column order of
# its unaggregated_results.csv
ROBUSTBENCH_CORRUPTIONS = ("shot_noise", "motion_blur", "snow", "pixelate", "gaussian_noise", "defocus_blur",
                           "brightness", "fog", "zoom_blur", "frost", "glass_blur", "impulse_noise", "contrast",
                           "jpeg_compression", "elastic_transform")
ROBUSTBENCH_SEVERITIES = (1, 2, 3, 4, 5)
ROBUSTBENCH_METRIC = "top1"
_GRID = [(c, s) for c in ROBUSTBENCH_CORRUPTIONS for s in ROBUSTBENCH_SEVERITIES]  # its 75 cells, in its order


@dataclass
class Export:
    """What an export wrote: ``files`` relative to ``out``, and one ``note`` per thing the store lacked."""

    out: Path
    format: str
    runs: list[str]
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def schema(fmt: str, part: str | None = None) -> dict[str, Any]:
    """The JSON Schema of a format's files (robustbench: each model's JSON; results: the file; jsonl: one line of
    ``part`` samples, conditions or predictions; parquet: one row of ``part`` samples or predictions, as
    ``Table.to_pylist()`` reads it). ``part`` None: the format's first (samples for jsonl and parquet)."""
    parts = SCHEMA_FILES[_check_format(fmt)]
    if part is not None and part not in parts:
        raise ShiftbenchError(f"schema: {fmt} has no part {part!r} (parts: {', '.join(parts)})")
    name = parts[part] if part is not None else next(iter(parts.values()))
    return json.loads(importlib.resources.files("shiftbench").joinpath("data", "schemas", name).read_text("utf-8"))


def export_store(store: str | os.PathLike, out: str | os.PathLike, fmt: str,
                 run_id: str | Sequence[str] | None = None, all_runs: bool = False,
                 progress: Progress | None = None) -> Export:
    """Export runs of ``store`` into the folder ``out`` in format ``fmt`` (robustbench, jsonl, results or
    parquet): ``run_id`` one run or a list of runs (default: the latest), ``all_runs`` every run of the store.

    ``progress(done, total, what)``, when given, is called after each step written, ``what`` naming it: for jsonl
    and parquet a step is one condition (``run R: model 'm', dataset 'd', fog s3``), for results and
    robustbench one run; the last call has ``done == total``."""
    fmt = _check_format(fmt)
    if all_runs and run_id:
        raise ShiftbenchError("export: give --run-id or --all, not both")
    if fmt == "parquet":
        _pyarrow()  # before --out is made: without pyarrow, one line naming the install command
    out = out_folder(out, "export")  # "" would be the current folder
    if not Path(store).exists():  # before --out is made: a mistyped store leaves no folder behind
        raise ShiftbenchError(f"{store}: store not found")
    made = make_folder(out, "export")
    stage = temp_path(out / "export")
    try:
        loaded, notes = _load(store, run_id, all_runs, check=fmt == "results",
                              parts=EXPORT_PARTS if fmt == "results" else _ROW_PARTS)
        remove_stale_temps(out, recursive=False)  # a killed export's temporary folder (shiftbench's own name pattern)
        stage.mkdir()
        if fmt in STREAMED:  # per-sample values read (and checked) one condition at a time
            written, names = STREAMED[fmt](stage, loaded, store, progress)
        else:
            written, names = WRITERS[fmt](stage, loaded)
            for i, run in enumerate(loaded, 1):
                _tell(progress, i, len(loaded), run.run_id, None)
        notes += written
        files = _publish(stage, out, names)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        if made:
            with contextlib.suppress(OSError):
                out.rmdir()  # only when empty: the folder this call made, nothing in it
        raise
    shutil.rmtree(stage, ignore_errors=True)
    return Export(out, fmt, [run.run_id for run in loaded], files, notes)


def _check_format(fmt: str) -> str:
    if fmt in FORMATS:
        return fmt
    close = difflib.get_close_matches(str(fmt), FORMATS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ShiftbenchError(f"export: unknown format {fmt!r}{hint} (formats: {', '.join(FORMATS)})")


# -- reading ---------------------------------------------------------------------------------------------

EXPORT_PARTS = ("counts", "results", "samples", "predictions", "skipped", "curation")
_ROW_PARTS = ("counts", "results")  # robustbench reads rows alone; jsonl and parquet stream the per-sample values


def _caveats(run: Run) -> list[str]:
    """What the run's numbers are not, one note each (every format says them): a run not finished, a folder
    written by generate read as "clean"."""
    out = []
    partial, origin = unfinished(run.status, run.counts), generated_origin_text(run)
    if partial:
        out.append(f"run {run.run_id}: {partial}: its numbers are those of the conditions it finished")
    if origin:
        out.append(f"run {run.run_id}: its data is {origin}: what it read unshifted "
                   f"({generated_baseline(run)}) is stored under shift 'clean', and every other shift was "
                   "applied on top of it")
    return out


def _load(store: str | os.PathLike, run_id: str | Sequence[str] | None, all_runs: bool,
          check: bool = True, parts: Sequence[str] = EXPORT_PARTS) -> tuple[list[Run], list[str]]:
    """The runs to export with ``parts``; runs without results are noted and left out (an error when that leaves
    none). A damaged store is one StoreError, and so are per-sample values that are not finite (``check``: the
    formats that use them loaded; the streamed formats check each condition as they read it)."""
    runs = ALL if all_runs else list(dict.fromkeys(run_id)) if isinstance(run_id, (list, tuple)) else run_id
    loaded, notes = [], []
    for run in load(store, runs, parts):
        if not run.rows:
            partial = unfinished(run.status, run.counts)
            notes.append(f"run {run.run_id}: no results yet{f' ({partial})' if partial else ''}: left out")
            continue
        if check:
            check_samples(run.samples, store, run.run_id)
        loaded.append(run)
    if not loaded:
        raise ShiftbenchError(f"{store}: {'; '.join(notes)}; nothing to export")
    return loaded, notes


# -- shared helpers --------------------------------------------------------------------------------------

def _finite(value: Any) -> Any:
    """A number (or a nested list or mapping of them) for JSON: NaN and infinities as null (JSON has neither)."""
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    f = float(value)
    return f if math.isfinite(f) else None


def _not_finite(rows: list[Row]) -> list[str]:
    """The rows whose value is NaN or infinite, in words (``m, dataset 'd', fog s3: top1 = inf``)."""
    return [f"{condition_text(r)}: {r.metric} = {r.value!r}" for r in rows
            if r.value is not None and not math.isfinite(float(r.value))]


_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}  # JSON keeps them raw


def _dumps(value: Any, indent: int | None = None, compact: bool = False) -> str:
    """JSON (never NaN or Infinity) whose text holds no character a reader splits lines at (``str.splitlines``:
    a name's U+0085 or U+2028 would cut a JSON line in two): those are written as \\u escapes. ``compact``: no
    spaces after ``,`` and ``:`` (the per-sample formats' lines)."""
    text = json.dumps(value, indent=indent, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":") if compact else None)
    for char, escaped in _LINE_BREAKS.items():
        text = text.replace(char, escaped)
    return text


def _exported_by() -> str:
    try:
        return importlib.metadata.version("shiftbench")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# -- per-sample formats (jsonl, parquet): streamed -------------------------------------------------------
# Both read the store one (condition, metric) of per-sample values and one prediction at a time
# (Store.iter_samples / iter_predictions) and write as they read: memory stays flat in the number of samples
# (at most one condition's values, or one row group, at a time) and time linear. Every condition is written
# once, in its own table (conditions.jsonl; in Parquet its columns, dictionary-encoded), under a number
# (``condition``) that the lines of samples and predictions name.

SAMPLES_FORMAT = "shiftbench-samples"
SAMPLES_FORMAT_VERSION = 2  # 1: one self-contained line per sample; 2: conditions once, lines name them by number
CONDITIONS_FILE, PREDICTIONS_FILE = "conditions.jsonl", "predictions.jsonl"
SAMPLES_PARQUET, PREDICTIONS_PARQUET = "samples.parquet", "predictions.parquet"
ROW_GROUP_ROWS = 65536  # rows gathered before a Parquet row group is written (a whole condition is never split)
Progress = Callable[[int, int, str], None]  # progress(done, total, what): `what` names the step just finished


class _Conditions:
    """The conditions of an export, numbered 0, 1, ... in order of first appearance (each run's result rows in
    store order, then conditions met only in predictions): a condition is (run, model, shift, params, severity),
    the key predictions and per-sample values share (a prediction stores no dataset)."""

    def __init__(self) -> None:
        self.numbers: dict[tuple, int] = {}
        self.records: list[dict[str, Any]] = []

    def number(self, run_id: str, cond: Condition) -> int:
        key = (run_id, cond.model, cond.shift, cond.params_key, canonical(cond.severity))
        found = self.numbers.get(key)
        if found is None:
            found = self.numbers[key] = len(self.records)
            self.records.append({"condition": found, "run": run_id, "model": cond.model, "dataset": cond.dataset,
                                 "shift": cond.shift, "params": cond.params, "severity": canonical(cond.severity)})
        return found


def _streamed(sink_type: type) -> Callable[..., tuple[list[str], dict[str, dict[str, Any]]]]:
    """A writer of a per-sample format: reads each run's per-sample values and predictions from the store as a
    stream into ``sink_type``'s files, and says per run what it lacked."""

    def write(stage: Path, loaded: list[Run], store: str | os.PathLike,
              progress: Progress | None = None) -> tuple[list[str], dict[str, dict[str, Any]]]:
        conditions = _Conditions()
        total = sum(len({r.key for r in run.rows}) for run in loaded)
        done, notes = 0, []
        with sink_type(stage, conditions) as sink, Store(store, create=False) as db:
            keeps = db.keeps_samples()
            for run in loaded:
                rid = run.run_id
                for row in run.rows:
                    conditions.number(rid, row)
                end = done + len({r.key for r in run.rows})
                by_metric: dict[str, Samples] = {}  # one value-less record per metric: what samples_caveat reads
                current = None
                for record in db.iter_samples(rid):
                    s = Samples(**record)
                    check_samples([s], store, rid)
                    number = conditions.number(rid, s)
                    if current is not None and number != current[0] and done < end:
                        done += 1
                        _tell(progress, done, total, rid, current[1])
                    current = number, s
                    sink.samples(number, s)
                    by_metric.setdefault(s.metric, replace(s, ids=[], values=None))
                predictions = 0
                for record in db.iter_predictions(rid):
                    p = Prediction(dataset="", **record)
                    sink.prediction(conditions.number(rid, p), p.sample_id, p.prediction)
                    predictions += 1
                if total and done < end:
                    done = end
                    _tell(progress, done, total, rid, current[1] if current else None)
                notes += _caveats(run) + _samples_notes(replace(run, samples=list(by_metric.values()),
                                                                keeps_samples=keeps), predictions, sink)
            names = sink.finish(conditions.records)
        runs = [run.run_id for run in loaded]
        return notes, {name: {"runs": runs, "format": SAMPLES_FORMAT, "format_version": SAMPLES_FORMAT_VERSION}
                       for name in names}

    return write


def _tell(progress: Progress | None, done: int, total: int, run_id: str, cond: Condition | None) -> None:
    if progress is not None:
        progress(done, total, f"run {run_id}" + (f": {condition_text(cond)}" if cond is not None else ""))


def _samples_notes(run: Run, predictions: int, sink: Any) -> list[str]:
    """What a run lacked for a per-sample format: per-sample values (and why), predictions."""
    rid, notes = run.run_id, []
    lacking = samples_caveat(run)
    if lacking and not run.samples:
        notes.append(f"run {rid}: {lacking}: "
                     + (f"its predictions only ({sink.predictions_file}), nothing in {sink.samples_file}"
                        if predictions else "no lines"))
    elif lacking:
        notes.append(f"run {rid}: {lacking}: no lines for them")
    if not predictions:
        notes.append(f"run {rid}: no predictions (run without --log-samples): nothing in {sink.predictions_file} "
                     "for it")
    return notes


def _value_texts(values: Any) -> list[str]:
    """Each sample's value as JSON text, fast for the usual shapes: (n,) numbers, (n, k) rows; NaN and
    infinities as null (a store shiftbench wrote holds none: :func:`check_samples` refuses them first)."""
    array = np.asarray(values, dtype=np.float64)
    if not np.isfinite(array).all() or array.ndim > 2:
        return [_dumps(_finite(v), compact=True) for v in array.tolist()]
    if array.ndim == 1:
        return [repr(v) for v in array.tolist()]  # float repr is JSON's text of a finite float (json.dumps uses it)
    return ["[" + ",".join([repr(v) for v in row]) + "]" for row in array.tolist()]


class _JsonlSink:
    """samples.jsonl and predictions.jsonl written as they come; conditions.jsonl at the end."""

    samples_file, predictions_file = SAMPLES_FILE, PREDICTIONS_FILE

    def __init__(self, stage: Path, conditions: _Conditions) -> None:
        self.stage = stage
        self._ids: tuple[list[str] | None, list[str]] = (None, [])  # the last ids and their JSON: conditions share them

    def __enter__(self) -> _JsonlSink:
        with contextlib.ExitStack() as stack:
            self.samples_fh = stack.enter_context(self._open(SAMPLES_FILE))
            self.predictions_fh = stack.enter_context(self._open(PREDICTIONS_FILE))
            self._files = stack.pop_all()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._files.close()

    def _open(self, name: str) -> Any:
        return open(self.stage / name, "w", encoding="utf-8", newline="\n")

    def samples(self, number: int, s: Samples) -> None:
        ids = [str(i) for i in s.ids]
        if ids != self._ids[0]:
            self._ids = ids, [_dumps(i) for i in ids]
        head = f'{{"condition":{number},"metric":{_dumps(s.metric)},"kind":{_dumps(s.kind)},"sample_id":'
        self.samples_fh.write("".join([f'{head}{i},"value":{v}}}\n'
                                       for i, v in zip(self._ids[1], _value_texts(s.values))]))

    def prediction(self, number: int, sample_id: str, prediction: Any) -> None:
        correct = prediction.get("correct") if isinstance(prediction, dict) else None
        line = {"condition": number, "sample_id": sample_id, "prediction": _finite(prediction),
                **({"correct": correct} if isinstance(correct, bool) else {})}
        self.predictions_fh.write(_dumps(line, compact=True) + "\n")

    def finish(self, conditions: list[dict[str, Any]]) -> list[str]:
        with self._open(CONDITIONS_FILE) as fh:
            for record in conditions:
                fh.write(_dumps(record, compact=True) + "\n")
        return [CONDITIONS_FILE, SAMPLES_FILE, PREDICTIONS_FILE]


def _pyarrow() -> tuple[Any, Any]:
    """pyarrow and pyarrow.parquet (the ``stream`` extra), imported only by the Parquet export."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ShiftbenchError(f"export --format parquet needs pyarrow: {install_command('stream')}") from None
    return pa, pq


class _ParquetSink:
    """samples.parquet and predictions.parquet, a row group written whenever ``ROW_GROUP_ROWS`` rows are
    gathered (whole conditions: a row group never splits one), with fixed writer settings: the same store gives
    the same bytes (pyarrow writes no timestamp; ``created_by`` names its version)."""

    samples_file, predictions_file = SAMPLES_PARQUET, PREDICTIONS_PARQUET
    _DICTIONARY = ("run", "model", "dataset", "shift", "params", "metric", "kind")

    def __init__(self, stage: Path, conditions: _Conditions) -> None:
        self.pa, self.pq = _pyarrow()
        pa = self.pa
        self.stage, self._records = stage, conditions.records  # grows as conditions are met
        text = pa.dictionary(pa.int32(), pa.string())
        condition = [("condition", pa.int32()), ("run", text), ("model", text), ("dataset", text), ("shift", text),
                     ("params", text), ("severity", pa.float64())]
        self.samples_schema = self._schema(condition + [("metric", text), ("kind", text), ("sample_id", pa.string()),
                                                        ("value", pa.float64()), ("values", pa.list_(pa.float64()))],
                                           "samples")
        self.predictions_schema = self._schema(condition + [("sample_id", pa.string()), ("prediction", pa.string()),
                                                            ("correct", pa.bool_())], "predictions")
        self._samples: list[tuple[int, Samples]] = []
        self._predictions: list[tuple[int, str, str, bool | None]] = []
        self._rows = 0

    def _schema(self, columns: list[tuple[str, Any]], table: str) -> Any:
        meta = {"format": SAMPLES_FORMAT, "format_version": SAMPLES_FORMAT_VERSION, "table": table}
        return self.pa.schema(columns, metadata={b"shiftbench": json.dumps(meta, sort_keys=True).encode()})

    def _writer(self, name: str, schema: Any) -> Any:
        dictionary = [c for c in schema.names if c in self._DICTIONARY or c == "severity"]
        return self.pq.ParquetWriter(self.stage / name, schema, compression="zstd", compression_level=3,
                                     use_dictionary=dictionary, write_statistics=False, version="2.6")

    def __enter__(self) -> _ParquetSink:
        with contextlib.ExitStack() as stack:
            self.samples_writer = stack.enter_context(self._writer(SAMPLES_PARQUET, self.samples_schema))
            self.predictions_writer = stack.enter_context(self._writer(PREDICTIONS_PARQUET, self.predictions_schema))
            self._files = stack.pop_all()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._files.close()

    def samples(self, number: int, s: Samples) -> None:
        self._samples.append((number, s))
        self._rows += len(s.ids)
        if self._rows >= ROW_GROUP_ROWS:
            self._flush_samples()

    def prediction(self, number: int, sample_id: str, prediction: Any) -> None:
        correct = prediction.get("correct") if isinstance(prediction, dict) else None
        self._predictions.append((number, sample_id, _dumps(_finite(prediction), compact=True),
                                  correct if isinstance(correct, bool) else None))
        if len(self._predictions) >= ROW_GROUP_ROWS:
            self._flush_predictions()

    def _condition_columns(self, numbers: list[int], lengths: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
        """The condition columns of pieces of ``lengths`` rows each: dictionary-encoded, values in first-seen order."""
        pa = self.pa
        out = {"condition": pa.array(np.repeat(np.asarray(numbers, dtype=np.int32), lengths), pa.int32())}
        for name in ("run", "model", "dataset", "shift", "params"):
            texts = [_dumps(r[name], compact=True) if name == "params" else r[name] for r in records]
            out[name] = _dictionary_column(pa, texts, lengths)
        out["severity"] = pa.array(np.repeat(np.asarray([float(r["severity"]) for r in records]), lengths))
        return out

    def _flush_samples(self) -> None:
        if not self._samples:
            return
        pa = self.pa
        pieces, self._samples, self._rows = self._samples, [], 0
        lengths = np.asarray([len(s.ids) for _, s in pieces], dtype=np.int64)
        columns = self._condition_columns([n for n, _ in pieces], lengths, [self._records[n] for n, _ in pieces])
        columns["metric"] = _dictionary_column(pa, [s.metric for _, s in pieces], lengths)
        columns["kind"] = _dictionary_column(pa, [s.kind for _, s in pieces], lengths)
        columns["sample_id"] = pa.array([str(i) for _, s in pieces for i in s.ids], pa.string())
        columns["value"], columns["values"] = _value_columns(pa, [s.values for _, s in pieces])
        if lengths.sum():  # records of no sample (every sample skipped) are no rows: no empty row group
            self.samples_writer.write_table(pa.table(columns, schema=self.samples_schema),
                                            row_group_size=int(lengths.sum()))

    def _flush_predictions(self) -> None:
        if not self._predictions:
            return
        pa = self.pa
        rows, self._predictions = self._predictions, []
        ones = np.ones(len(rows), dtype=np.int64)
        columns = self._condition_columns([r[0] for r in rows], ones, [self._records[r[0]] for r in rows])
        columns["sample_id"] = pa.array([r[1] for r in rows], pa.string())
        columns["prediction"] = pa.array([r[2] for r in rows], pa.string())
        columns["correct"] = pa.array([r[3] for r in rows], pa.bool_())
        self.predictions_writer.write_table(pa.table(columns, schema=self.predictions_schema),
                                            row_group_size=len(rows))

    def finish(self, conditions: list[dict[str, Any]]) -> list[str]:
        self._flush_samples()
        self._flush_predictions()
        return [SAMPLES_PARQUET, PREDICTIONS_PARQUET]


def _dictionary_column(pa: Any, texts: list[str], lengths: Any) -> Any:
    """``texts[i]`` repeated ``lengths[i]`` times, as an Arrow dictionary array (dictionary in first-seen order)."""
    index: dict[str, int] = {}
    codes = [index.setdefault(t, len(index)) for t in texts]
    return pa.DictionaryArray.from_arrays(pa.array(np.repeat(np.asarray(codes, dtype=np.int32), lengths), pa.int32()),
                                          pa.array(list(index), pa.string()))


def _value_columns(pa: Any, pieces: list[Any]) -> tuple[Any, Any]:
    """``value`` (float64: kinds with one number per sample) and ``values`` (list<float64>: kinds with several,
    each sample's numbers in row-major order), the other one null; NaN and infinities as null."""
    flat, offsets, scalar = [], [np.zeros(1, dtype=np.int64)], []
    end = 0
    for values in pieces:
        array = np.asarray(values, dtype=np.float64)
        n = len(array)
        if array.ndim == 1:
            flat.append(np.full(0, np.nan))
            offsets.append(np.full(n, end, dtype=np.int64))
            scalar.append((array, np.ones(n, dtype=bool)))
        else:
            rows = array.reshape(n, int(np.prod(array.shape[1:])))  # (0, 2) too: no -1 for an empty one
            flat.append(rows.ravel())
            offsets.append(end + rows.shape[1] * np.arange(1, n + 1, dtype=np.int64))
            end += rows.size
            scalar.append((np.full(n, np.nan), np.zeros(n, dtype=bool)))
    value = np.concatenate([v for v, _ in scalar]) if scalar else np.zeros(0)
    one = np.concatenate([m for _, m in scalar]) if scalar else np.zeros(0, dtype=bool)
    child = np.concatenate(flat) if flat else np.zeros(0)
    list_offsets = np.concatenate(offsets).astype(np.int32)
    value_column = pa.array(value, pa.float64(), mask=~(one & np.isfinite(value)))
    child_column = pa.array(child, pa.float64(), mask=~np.isfinite(child))
    values_column = pa.ListArray.from_arrays(pa.array(list_offsets, pa.int32()), child_column,
                                             type=pa.list_(pa.float64()), mask=pa.array(one, pa.bool_()))
    return value_column, values_column


_write_jsonl = _streamed(_JsonlSink)
_write_parquet = _streamed(_ParquetSink)


# -- results ---------------------------------------------------------------------------------------------

def _write_results(stage: Path, loaded: list[Run]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """``<run id>.json`` per run: the run, its provenance, every result row with its 95% CI (and its change
    against clean with that change's test), the failure points and the notes."""
    notes: list[str] = []
    names: dict[str, dict[str, Any]] = {}
    stems = file_stems(run.run_id for run in loaded)
    for run in loaded:
        own = _caveats(run) + _results_notes(run)
        notes += own
        name = f"{stems[run.run_id]}.json"
        write_atomic(stage / name, _dumps(results_document(run, own), indent=1) + "\n")
        names[name] = {"run": run.run_id}
    return notes, names


def _results_notes(run: Run) -> list[str]:
    rid = run.run_id
    notes = []
    lacking = samples_caveat(run)
    if lacking:
        notes.append(f"run {rid}: {lacking}: "
                     + ("no confidence intervals and no failure points" if not run.samples
                        else "their rows have no confidence interval"))
    bad = _not_finite(run.rows)
    if bad:
        notes.append(f"run {rid}: {plural(len(bad), 'value')} "
                     f"{'is not a finite number' if len(bad) == 1 else 'are not finite numbers'}, written as null "
                     f"(JSON has neither NaN nor infinity): {some(bad, 3)}")
    if not run.identity:
        notes.append(f"run {rid}: no run identity (a store written before shiftbench recorded it): "
                     "no weights hashes and no dataset fingerprint")
    if not run.versions:
        notes.append(f"run {rid}: no package versions recorded")
    return notes


def results_document(run: Run, notes: Sequence[str] = ()) -> dict[str, Any]:
    """The results export of one run as a dict (results.schema.json); CIs from :class:`.stats.Uncertainty`,
    seeded with the run's seed as in the report, failure points from :func:`.failure.failure_entries`."""
    unc = Uncertainty(run.samples, seed=run.seed) if run.samples else None
    return {
        "format": "shiftbench-results",
        "format_version": 1,
        "exported_by": _exported_by(),
        "run": {k: getattr(run, k) for k in ("run_id", "name", "status", "seed", "started", "finished")},
        "baseline": generated_baseline(run) or CLEAN,
        "provenance": _provenance(run),
        "ci_method": ("95% percentile bootstrap over sample ids (1000 resamples, seeded by the run's seed), as the "
                      "report; the change against clean: " + NOISE_RULE),
        "rows": [_result_row(r, unc) for r in run.rows],
        "failure_points": _failure_points(run.rows, run.samples, run.seed),
        "notes": list(notes),
    }


def _interval(low: Any, high: Any) -> dict[str, Any] | None:
    if low is None and high is None:
        return None
    return {"low": _finite(low), "high": _finite(high)}


def _result_row(r: Row, unc: Uncertainty | None) -> dict[str, Any]:
    extra = {k: v for k, v in (r.extra or {}).items() if k not in ("metric", "higher_is_better")}  # said by the row
    res = None if unc is None or r.value is None or not unc.has(r.model, r.metric) else \
        unc.aggregate(r.model, r.metric, [(r.shift, r.params, r.severity)], against_clean=True)
    ci95, change = (None, None) if res is None else (_interval(res["low"], res["high"]), _change(res))
    return {"model": r.model, "dataset": r.dataset, "shift": r.shift, "params": r.params,
            "severity": canonical(r.severity), "metric": r.metric, "value": _finite(r.value), "n": r.n,
            "higher_is_better": r.higher_is_better, "ci95": ci95, "change": change,
            **({"extra": _finite(extra)} if extra else {})}


def _change(res: dict[str, Any]) -> dict[str, Any] | None:
    """A row's change against clean with its test (results.schema.json ``change``), from Uncertainty.aggregate."""
    if res.get("delta") is None:
        return None
    return {"value": _finite(res["delta"]), "ci95": _interval(res["delta_low"], res["delta_high"]),
            "p_value": _finite(res["p_value"]), "within_noise": res["noise"], "test": res["test"]}


def _provenance(run: Run) -> dict[str, Any]:
    """What decided the numbers, as the store recorded it (the report's "Provenance and spec")."""
    identity, weights = run.identity or {}, run.weights
    if weights is not None:
        weights = {name: {"sha256": w.sha256, "from": w.origin, **({"files": list(w.files)} if w.files else {})}
                   for name, w in sorted(weights.items())}
    return {"spec": run.spec, "spec_hash": run.spec_hash, "seed": run.seed, "versions": run.versions or {},
            "shiftbench": run.version, "git_hash": run.git_hash, "host": run.host, "weights": weights,
            "dataset": identity.get("dataset"), "ids": run.ids, "skipped": run.skipped or [], "curation": run.curation}


def _failure_points(rows: list[Row], samples: list[Samples], seed: int) -> list[dict[str, Any]]:
    """The failure points (report/failure.py) of every higher-is-better metric with per-image values in [0, 1]."""
    if not samples:
        return []
    higher = {r.metric: r.higher_is_better for r in rows}
    metrics = sorted({s.metric for s in samples if s.kind == "mean" and higher.get(s.metric, False)})
    out = []
    for metric in metrics:
        for e in failure_entries(samples, metric, seed=seed):
            point = {k: _finite(v) for k, v in asdict(e.point).items()}
            out.append({"model": e.model, "metric": metric, "shift": e.shift, "params": e.params, "group": e.group,
                        "scale": e.scale,  # severities and point: on this scale
                        "severities": [canonical(s) for s in e.severities], **point})
    return out


# -- robustbench -----------------------------------------------------------------------------------------

def _write_robustbench(stage: Path, loaded: list[Run]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """RobustBench's corruption layout per run: ``model_info/<dataset>/corruptions/<model>.json`` and
    ``unaggregated_results.csv`` beside them; with several runs each in a folder named by its run id."""
    notes: list[str] = []
    names: dict[str, dict[str, Any]] = {}
    stems = file_stems(run.run_id for run in loaded)
    for run in loaded:
        rid = run.run_id
        prefix = "" if len(loaded) == 1 else f"{stems[rid]}/"
        partial, origin = unfinished(run.status, run.counts), generated_origin_text(run)
        footnote = "; ".join(x for x in (f"partial run: {partial}" if partial else "",
                                         f"measured on {origin}, not on clean images" if origin else "") if x)
        files, own, behind = robustbench_files(run, footnote or None)
        notes += _caveats(run) + own
        for rel, text in files.items():
            path = stage / (prefix + rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, text)
            names[prefix + rel] = {"run": rid, **behind[rel]}
    if not names:
        raise ShiftbenchError("export --format robustbench: " + "; ".join(notes)
                              + "; nothing to write (RobustBench's corruptions table is top-1 accuracy)")
    return notes, names


def _percent(value: float) -> str:
    """RobustBench's written form of an accuracy: a percentage with two decimals, as a string ("76.52")."""
    return f"{100.0 * value:.2f}"


def _accuracy(value: Any) -> bool:
    """Whether a stored top-1 is an accuracy RobustBench can hold: a finite number in [0, 1]."""
    return value is not None and math.isfinite(float(value)) and 0.0 <= float(value) <= 1.0


def _architecture(spec: dict[str, Any], label: str) -> str:
    """The registered name behind a model label of the spec (``name`` or ``name(k=v)``), else the label."""
    for m in spec.get("models") or []:
        name = m.get("name") if isinstance(m, dict) else m
        if isinstance(name, str) and (label == name or label.startswith(name + "(")):
            return name
    return label


def _generated_cell(run: Run) -> tuple[str, int] | None:
    """The (corruption, severity) of RobustBench's table that a generated folder's unshifted images are: one of
    ImageNet-C's 15 with its own parameters at a whole severity; None otherwise."""
    origin = run.generated
    if origin and origin.shift in ROBUSTBENCH_CORRUPTIONS and not origin.params \
            and canonical(origin.severity) in ROBUSTBENCH_SEVERITIES:
        return origin.shift, canonical(origin.severity)
    return None


def robustbench_files(run: Run, footnote: str | None = None
                      ) -> tuple[dict[str, str], list[str], dict[str, dict[str, Any]]]:
    """The files of one run in RobustBench's layout, {relative path: text}, the notes on what was left out, and per
    file the names behind its path ({"dataset", "model"}). Only top-1 counts, at ImageNet-C's 15 corruptions with
    their own parameters and whole severities 1-5; ``corruptions_acc`` (the mean over all 75) only for a model that
    has every one of them. ``footnote``: what the entry's numbers are not, written as RobustBench's optional
    ``footnote`` (its leaderboard shows it under the model's name)."""
    rid = run.run_id
    notes: list[str] = []
    top1 = [r for r in run.rows if r.metric == ROBUSTBENCH_METRIC]
    if not top1:
        return {}, [f"run {rid}: no top1 results: nothing in RobustBench's layout"], {}
    generated = generated_baseline(run)
    cell_of_base = _generated_cell(run) if generated else None
    left = _LeftOut()
    bad: dict[str, list[str]] = {}  # model -> conditions whose top1 is no accuracy (NaN, infinite, outside [0, 1])
    bad_clean: set[tuple[str, str]] = set()  # (dataset, model) whose clean top1 is no accuracy (said in that note)
    kept: dict[tuple[str, str], dict[Any, float | None]] = {}  # (dataset, model) -> {CLEAN or (corr, sev): value}
    for r in top1:
        key = (r.dataset, r.model)
        cells = kept.setdefault(key, {})
        sev = canonical(r.severity)
        if r.value is not None and not _accuracy(r.value):
            if r.shift == CLEAN:
                bad_clean.add(key)
            bad.setdefault(r.model, []).append(
                (condition_label(r.shift, r.params) + ("" if r.shift == CLEAN else f" s{severity_label(sev)}"))
                + f" ({r.value!r})")
            continue
        if r.shift == CLEAN and not r.params:
            if not generated:
                cells[CLEAN] = r.value
            elif cell_of_base is not None and r.value is not None:
                cells[cell_of_base] = r.value  # the generated images are that corruption at that severity
        elif generated:
            left.on_top.add(r.shift)  # two shifts at once: not a cell of RobustBench's table
        elif r.shift not in ROBUSTBENCH_CORRUPTIONS:
            left.other.add(r.shift)
        elif r.params:
            left.params.add(r.shift)
        elif sev not in ROBUSTBENCH_SEVERITIES:
            left.fractional.add(sev)
        elif r.value is not None:
            cells[(r.shift, sev)] = r.value
    notes += _left_out_notes(rid, generated, cell_of_base, left, bad)
    files: dict[str, str] = {}
    behind: dict[str, dict[str, Any]] = {}
    datasets = sorted({d for d, _ in kept})
    folders = file_stems(datasets)
    for dataset in datasets:
        models = [m for d, m in kept if d == dataset]
        stems = file_stems(models)
        folder = f"model_info/{folders[dataset]}/corruptions"
        columns = [cell for cell in _GRID if any(cell in kept[(dataset, m)] for m in models)]
        table = []
        for model in models:
            cells = kept[(dataset, model)]
            info: dict[str, Any] = {"link": "", "name": model, "authors": "", "additional_data": None,
                                    "number_forward_passes": 1, "dataset": folders[dataset], "venue": "",
                                    "architecture": _architecture(run.spec or {}, model), "eps": None}
            where = f"run {rid}: {model}" + (f" on {dataset}" if len(datasets) > 1 else "")
            clean, complete = cells.get(CLEAN), all(cell in cells for cell in _GRID)
            if clean is None and not generated and (dataset, model) not in bad_clean:  # else said above
                notes.append(f"{where}: clean_acc omitted: no clean top1")
            if not complete:
                notes.append(f"{where}: corruptions_acc omitted: {_coverage(cells)}")
            info.update({**({} if clean is None else {"clean_acc": _percent(clean)}), "reported": "",
                         **({"corruptions_acc": _percent(float(np.mean([cells[c] for c in _GRID])))} if complete else {}),
                         **({"footnote": footnote} if footnote else {})})
            files[f"{folder}/{stems[model]}.json"] = _dumps(info, indent=2) + "\n"
            behind[f"{folder}/{stems[model]}.json"] = {"dataset": dataset, "model": model}
            if any(cell in cells for cell in columns):
                table.append((stems[model], [cells.get(cell) for cell in columns]))
        if table:
            files[f"{folder}/unaggregated_results.csv"] = _csv(columns, table)
            rows_of = {stem for stem, _ in table}
            behind[f"{folder}/unaggregated_results.csv"] = {
                "dataset": dataset, "models": {stem: m for m, stem in stems.items() if stem in rows_of}}
    return files, notes, behind


@dataclass
class _LeftOut:
    """The top1 rows RobustBench's layout leaves out, by why: what each holds (shifts, or severities)."""

    fractional: set = field(default_factory=set)
    params: set = field(default_factory=set)
    other: set = field(default_factory=set)
    on_top: set = field(default_factory=set)


def _left_out_notes(rid: str, generated: str | None, cell_of_base: Any, left: _LeftOut,
                    bad: dict[str, list[str]]) -> list[str]:
    """One note per kind of top1 the RobustBench layout leaves out (or moves, for a run on generated images)."""
    notes: list[str] = []
    if generated:
        where = (f"written as its {cell_of_base[0]} s{cell_of_base[1]} cell" if cell_of_base else
                 "left out (not one of ImageNet-C's 15 corruptions as published at a whole severity 1-5)")
        notes.append(f"run {rid}: clean_acc omitted: what the run read unshifted are images generate made under "
                     f"{generated.removesuffix(' (generated)')}, not clean ones; their top1 is {where}")
    if left.on_top:
        notes.append(f"run {rid}: {', '.join(sorted(left.on_top))} applied on top of those generated images left "
                     "out: two shifts at once are no cell of RobustBench's table")
    if left.fractional:
        shown = ", ".join(severity_label(s) for s in sorted(left.fractional))
        notes.append(f"run {rid}: top1 at severities {shown} left out: RobustBench's table takes whole severities 1-5")
    if left.params:
        notes.append(f"run {rid}: {', '.join(sorted(left.params))} with parameters of their own left out: "
                     "RobustBench's table is ImageNet-C's corruptions as published")
    if left.other:
        notes.append(f"run {rid}: shifts outside ImageNet-C's 15 corruptions left out: {', '.join(sorted(left.other))}")
    for model, conditions in bad.items():
        notes.append(f"run {rid}: {model}: top1 not an accuracy in [0, 1], left out (an empty cell): "
                     f"{some(conditions, 3)}")
    return notes


def _coverage(cells: dict[Any, Any]) -> str:
    """What a model lacks of ImageNet-C's 15 x 5, in one phrase ("0 of 15 corruptions have all of severities
    1-5 (missing severities: 1, 2, 4)")."""
    measured = [k for k in cells if k != CLEAN]
    if not measured:
        return "no ImageNet-C corruption"
    complete = [c for c in ROBUSTBENCH_CORRUPTIONS if all((c, s) in cells for s in ROBUSTBENCH_SEVERITIES)]
    absent = [c for c in ROBUSTBENCH_CORRUPTIONS if not any((c, s) in cells for s in ROBUSTBENCH_SEVERITIES)]
    seen = {s for _, s in measured}
    missing = [f"missing corruptions: {', '.join(absent)}"] if absent else []
    if len(seen) < len(ROBUSTBENCH_SEVERITIES):
        missing.append(f"missing severities: {', '.join(str(s) for s in ROBUSTBENCH_SEVERITIES if s not in seen)}")
    return (f"{len(complete)} of {len(ROBUSTBENCH_CORRUPTIONS)} corruptions have all of severities 1-5"
            + (f" ({'; '.join(missing)})" if missing else ""))


def _csv(columns: list[tuple[str, int]], table: list[tuple[str, list[float | None]]]) -> str:
    """pandas' ``to_csv`` of a frame with (corruption, severity) columns and model rows, as RobustBench writes
    unaggregated_results.csv: two header rows, accuracies as fractions (repr: they read back exactly)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([""] + [c for c, _ in columns])
    writer.writerow([""] + [str(s) for _, s in columns])
    for name, values in table:
        # an accuracy is a finite number (the writer leaves others out, with a note): never 'nan' or 'inf' here
        writer.writerow([name] + ["" if v is None or not math.isfinite(v) else repr(float(v)) for v in values])
    return buffer.getvalue()


WRITERS = {"robustbench": _write_robustbench, "results": _write_results}
STREAMED = {"jsonl": _write_jsonl, "parquet": _write_parquet}  # (stage, runs, store, progress): read as written


# -- publishing ------------------------------------------------------------------------------------------

def _earlier_names(out: Path) -> dict[str, Any]:
    try:
        found = json.loads((out / EXPORT_RECORD).read_text(encoding="utf-8")).get("names")
    except (OSError, ValueError, AttributeError):
        return {}
    return found if isinstance(found, dict) else {}


def _publish(stage: Path, out: Path, names: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """Move the finished export from ``stage`` into ``out``; refuses, before moving anything, a file in the way
    that no earlier export wrote. Returns the files, relative to ``out``. The record lists every file exports
    wrote there and, per file, the full names (run, dataset, model) its path was made from (``names``)."""
    files = [path.relative_to(stage).as_posix() for path in sorted(stage.rglob("*")) if path.is_file()]
    earlier = read_files_record(out / EXPORT_RECORD, "export") or set()
    existing = [f for f in files if in_the_way(out, f)]
    foreign = [f for f in existing if not ((out / f).is_file() and not (out / f).is_symlink() and f in earlier)]
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ShiftbenchError(f"export: {out} already holds {shown}, which no earlier shiftbench export wrote; "
                              "files are never replaced: use a new or empty --out")
    for name in files:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage / name, out / name)
    kept = {f for f in earlier if (out / f).is_file()}
    behind = {f: v for f, v in _earlier_names(out).items() if f in kept and f not in files}
    behind.update({f: v for f, v in (names or {}).items() if f in files})
    record = {"files": sorted(kept | set(files)), "names": dict(sorted(behind.items()))}
    write_atomic(out / EXPORT_RECORD, _dumps(record, indent=1) + "\n")
    return files
