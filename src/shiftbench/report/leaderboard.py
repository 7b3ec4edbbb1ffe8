"""The leaderboard: one row per (model, weights) across stores and runs, ranked by a column, ties within noise marked.

``shiftbench leaderboard a.db b.db --by corruptions --out board`` reads the stores only (it never runs a model):

- **Rows.** A row is a model's registered name and its weights, as the run identity recorded them
  (engine/identity.py: the SHA-256 of its weight files or parameters). The same name with other weights is
  two rows; the same weights measured by several comparable runs are one row (the latest finished run's
  numbers; the others are named under the table). A model without weights (``from: none``) is told apart by
  the params the spec gave it (``dummy_classifier`` seed 1 is not seed 0).
- **Tables.** Only comparable runs share a column: the same dataset (its fingerprint in the run identity,
  the spec's dataset and ``dataset_params``, the ids file, the curated samples), the same conditions of the
  headline metric, the same headline metric, preprocessing and seed (the shifted images are then the same,
  so two models are paired sample by sample). Runs that differ in any of these get a table of their own and
  one line naming what differs from the first table's run.
- **Columns and cells** are the report's headline (report/headline.py) computed over the merged rows of a
  table's runs: clean, the mean of the corruptions (mCE and relative mCE when a run has the whole ImageNet-C
  protocol), each background and attribute family, BG-Gap, γ@10, "breaks at"; each cell with its n and its 95%
  CI (report/stats.py).
- **Ranking.** By ``--by`` (default ``clean``: the headline metric on clean data), better first, on the cells'
  numbers (report.headline.HeadCell), never their rounded text. A rank marked ≈ is within noise of the row
  above: for clean and the mean columns, the report's paired test of the two models on the same samples (exact
  McNemar for top-1 on one condition, else the paired bootstrap; the headline's "models compared"); for BG-Gap
  and "breaks at", their 95% CIs overlap (the intervals' numbers); mCE and γ have no interval, so no ≈ there.

Outputs: :func:`to_markdown` (also what the command prints) and :func:`to_html`, a self-contained page whose
columns sort on a click (inline script allowed by its hash alone, no network request, every data string
escaped by Jinja2's autoescaping); :func:`write_leaderboard` writes both into a folder.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from ..console import plural
from ..errors import ShiftbenchError
from ..files import make_folder, out_folder, write_atomic
from ..results.identity import describe_changes
from ..results.records import ALL, Row, Run, Samples, load
from ..results.store import canonical_json
from ..severity import canonical
from ..severity import label as severity_label
from .blocks import blocks_to_markdown
from .build import generated_baseline
from .caveats import check_samples, generated_origin_text, samples_caveat, unfinished
from .failure import failure_entries
from .headline import (ATTACKS, CONTROLS, NATURAL_FAMILIES, SYNTHETIC_FAMILIES, Column, HeadCell, headline,
                       headline_table, order_tables)
from .objectcompose import CUSTOM_FAMILIES
from .stats import NOISE_RULE, Uncertainty
from .tables import CLEAN, build_tables, condition_label, in_main_grid

__all__ = ["leaderboard", "leaderboard_blocks", "to_markdown", "to_html", "write_leaderboard", "column_key",
           "COLUMN_KEYS"]

# what --by accepts besides the family names of the background and attribute columns
COLUMN_KEYS = ("clean", "corruptions", "cbar", "mce", "rel-mce", "bg-gap", "text", "other", "gamma-image",
               "gamma-text", "breaks-at")
# the columns that are a mean over conditions: the headline's "models compared" has a paired test for each
_MEAN_COLUMNS = frozenset(("clean", "corruptions", "cbar", "text", "other", *NATURAL_FAMILIES, *SYNTHETIC_FAMILIES,
                           *CUSTOM_FAMILIES, *CONTROLS, *ATTACKS))
MD_MARK = "<!-- written by shiftbench leaderboard -->"
HTML_MARK = '<meta name="generator" content="shiftbench leaderboard">'
_HOVER = re.compile(r"\s*\((?:hover|point at)[^)]*\)")  # the HTML's tooltips are not in the Markdown


@dataclass
class _Run:
    """One finished run as the leaderboard reads it."""

    store: str  # the store as the user named it
    record: Run
    rows: list[Row]
    samples: list[Samples]
    metric: str
    profile: dict[str, Any]
    no_samples: str | None = None  # why metrics of the run have no per-sample values (caveats.samples_caveat)

    @property
    def where(self) -> str:
        name = self.record.name
        return f"{self.store} {self.record.run_id}" + (f" ({name})" if name else "")


@dataclass
class _Group:
    """Comparable runs: one table."""

    profile: dict[str, Any]
    runs: list[_Run] = field(default_factory=list)


# -- reading ----------------------------------------------------------------------------------------------
def _tables(rows: list[Row], preferred: list[str], baseline: str) -> list:
    tables = order_tables(build_tables([r for r in rows if in_main_grid(r.metric)], preferred), preferred)
    for t in tables:
        t.baseline = baseline
    return tables


def _profile(run: Run, rows: list[Row], metric: str) -> dict[str, Any]:
    """What must be equal for two runs' numbers to share a column."""
    spec, identity = run.spec or {}, run.identity or {}
    inputs = {k: v for k, v in identity.items() if k not in ("models", "shiftbench")}  # dataset, ids, label map, ...
    conditions = sorted({(r.shift, r.params_key, canonical(r.severity)) for r in rows if r.metric == metric},
                        key=lambda c: (c[0] != CLEAN, c[0], c[1], c[2]))
    return {"inputs": inputs, "dataset_params": spec.get("dataset_params") or {}, "metric": metric,
            "conditions": [list(c) for c in conditions], "preprocess": spec.get("preprocess") or None,
            "curate": spec.get("curate") or None, "seed": run.seed}


def _read(stores: Sequence[str | os.PathLike],
          tell: Callable[[int, str], None] | None = None) -> tuple[list[_Run], list[str]]:
    """Every finished run with results in ``stores`` (in the order given, each store's runs by start), and one
    line for each run left out; ``tell(k, store)`` before the k-th store is read."""
    runs: list[_Run] = []
    left: list[str] = []
    seen: set[Path] = set()
    for k, store in enumerate(stores):
        if tell is not None:
            tell(k, str(store))
        real = Path(store).resolve()
        if real in seen:
            continue
        seen.add(real)
        for record in load(store, ALL, ("counts", "results", "samples")):
            where = f"{store} {record.run_id}"
            partial = unfinished(record.status, record.counts)
            if partial:  # a partial run's numbers would rank against whole ones
                left.append(f"{where}: {partial}: left out")
                continue
            rows = record.rows
            if not rows:
                left.append(f"{where}: no results: left out")
                continue
            check_samples(record.samples, store, record.run_id)
            preferred = record.metrics
            main = headline_table(_tables(rows, preferred, CLEAN), preferred)
            if main is None:
                left.append(f"{where}: no metric for a headline: left out")
                continue
            runs.append(_Run(str(store), record, rows, record.samples, main.metric, _profile(record, rows, main.metric),
                             samples_caveat(record, [r for r in rows if r.metric == main.metric])))
    return runs, left


# -- models: name and weights ------------------------------------------------------------------------------
def _spec_entry(spec: dict[str, Any], label: str) -> tuple[str, dict[str, Any]] | None:
    """The spec's model entry behind a row label: the entry of that name, or, when the spec lists a name twice,
    the one whose label is ``name(k=v, ...)`` (the engine's labels, engine/spec.py)."""
    entries = []
    for e in spec.get("models") or []:
        if isinstance(e, str):
            entries.append((e, {}))
        elif isinstance(e, dict) and isinstance(e.get("name"), str):
            entries.append((e["name"], dict(e.get("params") or {})))
    named = [e for e in entries if e[0] == label]
    if len(named) == 1:
        return named[0]
    if named:  # a name listed twice: its entry without params keeps the bare name
        return next((e for e in named if not e[1]), named[0])
    for name, params in entries:
        if label == name + "(" + ", ".join(f"{k}={v}" for k, v in sorted(params.items())) + ")":
            return name, params
    return None


def _model_key(run: _Run, label: str) -> tuple[tuple[str, str], str, str]:
    """((name, weights key), weights as shown, its hover text) of a model of a run."""
    info = ((run.record.identity or {}).get("models") or {}).get(label)
    entry = _spec_entry(run.record.spec or {}, label)
    name = entry[0] if entry else label
    if info and info.get("weights"):
        digest = str(info["weights"])
        how = "of its files" if info.get("from") == "files" else "of its parameters"
        return (name, digest), digest[:12], f"weights sha256 {digest} ({how})"
    if info and info.get("from") == "none":
        params = entry[1] if entry else {}
        shown = "none" + (" (" + ", ".join(f"{k}={v}" for k, v in sorted(params.items())) + ")" if params else "")
        return (name, "none:" + canonical_json(params)), shown, "a model without weights, told apart by its params"
    # no identity recorded (an older store): never merged with another run's model
    return (name, f"unrecorded:{run.store}:{run.record.run_id}"), "not recorded", \
        f"weights not recorded in {run.where}: this row is never merged with another run's"


# -- columns ----------------------------------------------------------------------------------------------
def column_key(column: Column, first: bool = False) -> str:
    """What ``--by`` calls a headline column: ``clean`` (the first column), ``corruptions``, ``cbar``, ``mce``,
    ``rel-mce``, ``bg-gap``, ``text``, ``other``, ``gamma-image``, ``gamma-text``, ``breaks-at``, a background
    family (``mixed_same``, ``color``, ...) or ``attribute-<family>``.

    >>> column_key(Column("ImageNet-C", "mean of 15 corruptions", ""))
    'corruptions'
    >>> [column_key(Column(g, "color", "")) for g in ("attribute edits", "synthetic backgrounds")]
    ['attribute-color', 'color']
    """
    head, group = column.head or "", column.group or ""
    if first:
        return "clean"
    fixed = {"BG-Gap": "bg-gap", "mCE": "mce", "rel. mCE": "rel-mce", "breaks at": "breaks-at"}
    if head in fixed:
        return fixed[head]
    if head.startswith("γ@10 "):
        return "gamma-image" if "image" in head else "gamma-text" if "text" in head else _slug(head)
    if group == "attribute edits":
        return f"attribute-{head}"
    for pattern, key in ((r"mean of \d+ corruptions?", "corruptions"), (r"mean of \d+ C-bar corruptions?", "cbar"),
                         (r"mean of \d+ text shifts?", "text"), (r"mean of \d+ other shifts?", "other")):
        if re.fullmatch(pattern, head):
            return key
    return head if re.fullmatch(r"[\w-]+", head) else _slug(head)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_@]+", "-", text.lower()).strip("-")


def _norm(key: str) -> str:
    return key.strip().lower().replace("_", "-")


def _kind(key: str) -> str | None:
    """How a tie is judged in a column: ``paired`` (the paired test of two models on the same samples: the
    clean column and the means over conditions), ``ci`` (their 95% CIs overlap: BG-Gap, breaks at) or None
    (mCE, γ and any other column: no interval to judge by)."""
    if key in ("bg-gap", "breaks-at"):
        return "ci"
    if key in _MEAN_COLUMNS or key.startswith("attribute-"):
        return "paired"
    return None


def _better(key: str, higher_is_better: bool) -> str:
    if key in ("mce", "rel-mce"):
        return "low"
    if key == "bg-gap":  # a gap is the reliance on a fitting background: smaller is better
        return "low" if higher_is_better else "high"
    if key.startswith("gamma-") or key == "breaks-at":
        return "high"
    return "high" if higher_is_better else "low"


# -- one table ---------------------------------------------------------------------------------------------
class _Table:
    """The merged rows of a group's runs, renamed one model per row, and the report's headline over them."""

    def __init__(self, group: _Group):
        self.group = group
        first = group.runs[0]
        self.preferred = first.record.metrics
        self.seed = int(first.record.seed or 0)
        self.baseline = generated_baseline(first.record) or CLEAN  # what the runs read unshifted
        self.rows: list[Row] = []
        self.samples: list[Samples] = []
        self.members: dict[str, dict[str, Any]] = {}  # row id -> model, weights, run, others
        self.also: list[str] = []
        keys: dict[tuple[str, str], str] = {}
        # the latest finished run of a model gives its numbers; the others are named under the table
        for run in sorted(group.runs, key=lambda r: -(r.record.finished or 0)):
            for label in dict.fromkeys(r.model for r in run.rows):
                key, shown, title = _model_key(run, label)
                if key in keys:
                    self.members[keys[key]]["others"].append((run, label))
                    continue
                rid = self._row_id(label, shown)
                keys[key] = rid
                self.members[rid] = {"model": label, "weights": shown, "weights_title": title, "run": run,
                                     "others": []}
                self.rows += [replace(r, model=rid) for r in run.rows if r.model == label]
                self.samples += [replace(s, model=rid) for s in run.samples if s.model == label]
        order = [rid for run in group.runs for rid, m in self.members.items() if m["run"] is run]
        self.rows.sort(key=lambda r: order.index(r.model))  # the models in the order of the runs given
        self.unc = Uncertainty(self.samples, seed=self.seed) if self.samples else None
        tables = _tables(self.rows, self.preferred, self.baseline)
        self.main = headline_table(tables, self.preferred)
        if self.unc is not None and self.main is not None:
            self.unc.annotate(self.main)
        self.failures = (failure_entries(self.samples, self.main.metric, seed=self.seed)
                         if self.samples and self.main is not None and self.main.higher_is_better else [])
        self.head = headline(self.rows, tables, self.preferred, self.unc, baseline=self.baseline,
                             failures=self.failures) if self.main is not None else None
        self._pairs: dict[tuple[str, str], dict[tuple[str, int], HeadCell]] = {}
        for rid, m in self.members.items():
            for run, label in m["others"]:
                self.also.append(f"{m['model']} (weights {m['weights']}): also measured by {run.where}"
                                 f"{self._agreement(rid, run, label)}; shown: {m['run'].where}, the latest")

    def _row_id(self, label: str, shown: str) -> str:
        rid = f"{label} [{shown}]"
        k = 2
        while rid in self.members:
            rid, k = f"{label} [{shown}] #{k}", k + 1
        return rid

    def _agreement(self, rid: str, run: _Run, label: str) -> str:
        """Whether another run of the same model gave the same clean number."""
        metric = self.main.metric if self.main is not None else None
        mine = [r.value for r in self.rows if r.model == rid and r.shift == CLEAN and r.metric == metric]
        theirs = [r.value for r in run.rows if r.model == label and r.shift == CLEAN and r.metric == metric]
        if not mine or not theirs:
            return ""
        base = "clean" if self.baseline == CLEAN else self.baseline  # a generated folder's own images
        if mine[0] == theirs[0]:
            return f" (the same {base} {metric})"
        scale = 100.0 if self.main.percent else 1.0
        return f" ({base} {metric} {scale * theirs[0]:.4g} there, {scale * mine[0]:.4g} here)"

    def pair(self, above: str, below: str) -> dict[tuple[str, int], HeadCell]:
        """The report's paired comparison of ``below`` against ``above`` on every mean column (the headline's
        "models compared": exact McNemar or the paired bootstrap, ≈ at p >= 0.05), keyed by (head, occurrence)."""
        if (above, below) in self._pairs:
            return self._pairs[(above, below)]
        rows = [r for r in self.rows if r.model == above] + [r for r in self.rows if r.model == below]
        tables = _tables(rows, self.preferred, self.baseline)
        head = headline(rows, tables, self.preferred, self.unc, baseline=self.baseline)
        found: dict[tuple[str, int], HeadCell] = {}
        pairs = head.pairs if head is not None else None
        if pairs and pairs.rows:
            seen: dict[str, int] = {}
            for h, c in zip(pairs.heads, pairs.rows[0].cells):
                seen[h] = seen.get(h, -1) + 1
                found[(h, seen[h])] = c
        self._pairs[(above, below)] = found
        return found


# -- ranking -----------------------------------------------------------------------------------------------
def _tie(table: _Table, key: str, pair_head: tuple[str, int] | None, col: int, above: dict[str, Any],
         below: dict[str, Any]) -> str | None:
    """Why ``below`` is within noise of ``above`` in column ``col`` (its hover text), or None."""
    a, b = above["cells"][col], below["cells"][col]
    if a.rank_value is None or b.rank_value is None:
        return None
    if _kind(key) == "paired" and pair_head is not None:
        c = table.pair(above["id"], below["id"]).get(pair_head)
        if c is not None and c.value is not None and c.noise:
            return f"within noise of the row above: {c.title or c.text}"
        return None
    overlap = (a.low is not None and a.high is not None and b.low is not None and b.high is not None
               and max(a.low, b.low) <= min(a.high, b.high))  # on the numbers, never on their rounded text
    if key == "bg-gap" and overlap:
        return f"within noise of the row above: the 95% CIs of their BG-Gaps overlap ({a.ci} and {b.ci})"
    if key == "breaks-at" and overlap:
        x, y = (f"[{c.low:.2f}, {'beyond' if math.isinf(c.high) else f'{c.high:.2f}'}]" for c in (a, b))
        return f"within noise of the row above: the 95% CIs of where they break overlap ({x} and {y})"
    return None


def _ranked(table: _Table, columns: list[dict[str, Any]], rows: list[dict[str, Any]],
            col: int) -> list[dict[str, Any]]:
    """``rows`` sorted better first by column ``col`` (rows without a value last, then by model), each with its
    rank and, when within noise of the row above, the reason."""
    column = columns[col]
    sign = -1.0 if column["better"] == "high" else 1.0
    ordered = sorted(rows, key=lambda r: ((v := r["cells"][col].rank_value) is None,
                                          sign * v if v is not None else 0.0, r["model"], r["weights"]))
    # the paired test's column: (head, occurrence) among the mean columns, as the headline lists its pairs
    pair_head = None
    if column["kind"] == "paired":
        if col == 0:
            pair_head = ("clean", 0)
        else:
            same = [c for c in columns[1:col] if c["kind"] == "paired" and c["head"] == column["head"]]
            pair_head = (column["head"], len(same))
    for i, row in enumerate(ordered):
        row["rank"] = i + 1
        row["tie"] = _tie(table, column["key"], pair_head, col, ordered[i - 1], row) if i else None
    return ordered


# -- the board ---------------------------------------------------------------------------------------------
def _group(runs: list[_Run]) -> list[_Group]:
    groups: dict[str, _Group] = {}
    for run in runs:
        groups.setdefault(canonical_json(run.profile), _Group(run.profile)).runs.append(run)
    return list(groups.values())


def _differences(ref: _Run, other: _Run) -> list[str]:
    """What makes ``other`` not comparable with ``ref``, one phrase each."""
    a, b = ref.profile, other.profile
    out = []
    if a["inputs"] != b["inputs"]:
        da, db = a["inputs"].get("dataset") or {}, b["inputs"].get("dataset") or {}
        if da.get("name") != db.get("name"):
            out.append(f"dataset {db.get('name')} ({db.get('samples', '?')} samples), not {da.get('name')} "
                       f"({da.get('samples', '?')} samples)")
        else:
            out += [c.replace(" changed (", " fingerprint differs (", 1)
                    for c in describe_changes(a["inputs"], b["inputs"])]  # the store's own words for a change
    if a["dataset_params"] != b["dataset_params"]:
        out.append(f"dataset_params {canonical_json(b['dataset_params'])}, not {canonical_json(a['dataset_params'])}")
    if a["metric"] != b["metric"]:
        out.append(f"headline metric {b['metric']}, not {a['metric']}")
    elif a["conditions"] != b["conditions"]:
        ca, cb = {tuple(c) for c in a["conditions"]}, {tuple(c) for c in b["conditions"]}
        out.append(f"conditions differ ({len(cb)}, not {len(ca)}{_some('only here', cb - ca)}"
                   f"{_some('only there', ca - cb)})")
    for key in ("preprocess", "curate", "seed"):
        if a[key] != b[key]:
            out.append(f"{key} {_show(b[key])}, not {_show(a[key])}")
    return out or ["other inputs"]


def _show(value: Any) -> str:
    return "none" if value is None else value if isinstance(value, str) else canonical_json(value)


def _some(what: str, conds: set[tuple]) -> str:
    if not conds:
        return ""
    names = [_condition(c) for c in sorted(conds, key=lambda c: (c[0], c[1], c[2]))]
    return f"; {what}: " + ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _condition(c: tuple) -> str:
    base = condition_label(c[0], json.loads(c[1]))
    return base if c[0] == CLEAN else f"{base} s{severity_label(c[2])}"


def _title(group: _Group, table: _Table) -> str:
    p = group.profile
    data = (p["inputs"].get("dataset") or {})
    name = data.get("name") or (group.runs[0].record.spec or {}).get("dataset") or "dataset"
    unit = " (%)" if table.main is not None and table.main.percent else ""
    parts = [f"{name}, {data['samples']} samples" if data.get("samples") is not None else str(name),
             f"{p['metric']}{unit}", plural(len(p["conditions"]), "condition"), f"seed {p['seed']}"]
    if p["curate"]:
        parts.insert(1, "curated")
    if p["preprocess"]:
        parts.append("preprocess " + canonical_json(p["preprocess"]))
    return ", ".join(parts)


def _cell_view(cell: HeadCell, n: int | None) -> dict[str, Any]:
    """A headline cell as the board writes it; its sort key is the number as shown (the HTML sorts what it shows)."""
    value = cell.shown
    extra = f" n={cell.n}" if cell.n not in (None, n) else ""
    return {"text": cell.text + extra, "ci": cell.ci, "title": cell.title, "cls": cell.cls,
            "sort": "" if value is None else "Infinity" if math.isinf(value) else repr(value)}


def leaderboard(stores: Sequence[str | os.PathLike], by: str | None = None,
                progress: Callable[[float, float, str], None] | None = None) -> dict[str, Any]:
    """The leaderboard of ``stores``: ``{"by", "tables": [table], "left_out": [line], "stores"}``, each table
    ``{"index", "title", "metric", "differs", "head": [column], "rows": [row], "note", "sources", "also",
    "by"}``, each row ``{"rank", "tie", "model", "weights", "n", "run", "cells": [cell]}`` with the
    headline's cells (``text``, ``ci``, ``title``, ``cls``, ``n``); ``by``: a column key (:func:`column_key`),
    default ``clean``. Raises ShiftbenchError for a store that is missing or damaged or holds no run, for no
    finished run at all, and for a ``by`` no table has (naming the columns there are). ``progress(done, total,
    label)`` is told of each store read and each table built (the CLI's bar: console.Steps)."""
    if not stores:
        raise ShiftbenchError("leaderboard: give at least one store")
    tell = progress or (lambda done, total, label: None)
    tell(0, len(stores) + 1, "reading")
    runs, left = _read(stores, lambda k, label: tell(k, len(stores) + 1, label))
    if not runs:
        raise ShiftbenchError("leaderboard: no finished run with results in " + ", ".join(map(str, stores))
                              + (" (" + "; ".join(left) + ")" if left else ""))
    built = []
    groups = _group(runs)
    for k, group in enumerate(groups):
        tell(len(stores) + k, len(stores) + len(groups), f"table {k + 1}")
        table = _Table(group)
        if table.head is None:
            left.append(f"{group.runs[0].where}: no headline: left out")
            continue
        built.append((group, table, _columns(table)))
    tell(len(stores) + len(groups), len(stores) + len(groups), "done")
    if not built:
        raise ShiftbenchError("leaderboard: no run with a headline metric (" + "; ".join(left) + ")")
    keys = {c["key"] for _, _, columns in built for c in columns}
    wanted = "clean" if by is None else _norm(by)
    # a column's key, or its head as shown (a key wins: "color" is the background family, not the attribute)
    match = {_norm(c["head"]): c["key"] for _, _, cs in built for c in cs} | {_norm(k): k for k in keys}
    if wanted not in match:
        close = dict.fromkeys(match[c] for c in difflib.get_close_matches(wanted, sorted(match), n=3, cutoff=0.5))
        raise ShiftbenchError(f"leaderboard: --by {by!r} is no column of these runs"
                              + ("; did you mean " + " or ".join(map(repr, close)) + "?" if close else "")
                              + " Columns: " + ", ".join(sorted(keys)))
    by_key = match[wanted]
    tables = []
    for i, (group, table, columns) in enumerate(built, 1):
        tables.append(_board_table(i, group, table, columns, by_key, built[0][0].runs[0] if i > 1 else None))
    return {"by": by_key, "tables": tables, "left_out": left, "stores": [str(s) for s in stores]}


def _columns(table: _Table) -> list[dict[str, Any]]:
    hib = table.main.higher_is_better
    out = []
    for i, c in enumerate(table.head.columns):
        key = column_key(c, first=i == 0)
        out.append({"key": key, "head": c.head, "group": c.group or "", "title": c.title or "",
                    "better": _better(key, hib), "kind": _kind(key)})
    return out


def _board_table(index: int, group: _Group, table: _Table, columns: list[dict[str, Any]], by: str,
                 ref: _Run | None) -> dict[str, Any]:
    rows = []
    for r in table.head.rows:
        m = table.members[r.model]
        rows.append({"id": r.model, "model": m["model"], "weights": m["weights"],
                     "weights_title": m["weights_title"], "n": r.n, "run": m["run"].where, "cells": r.cells})
    fallback = ""
    col = next((i for i, c in enumerate(columns) if c["key"] == by), None)
    if col is None:
        fallback = f"This table has no {by} column: ranked by clean. "
        col = 0
    ranked = _ranked(table, columns, rows, col)
    column = columns[col]
    rule = {"paired": f"the paired test of the two models on the same samples ({NOISE_RULE}) gives p >= 0.05",
            "ci": "the 95% CIs of the two overlap",
            None: "never marked in this column (it has no interval)"}[column["kind"]]
    if column["kind"] == "paired" and table.unc is None:
        why = next((run.no_samples for run in group.runs if run.no_samples), "no per-sample values")
        rule = f"never marked here: {why}, so no paired test"
    base = "clean" if table.baseline == CLEAN else table.baseline  # a generated folder's images are not clean
    head_text = column["head"] if col else f"{base} {table.main.metric}"
    origin = generated_origin_text(group.runs[0].record)
    if origin:  # the headline's columns say it; the sentence says what it means
        fallback += (f"The data of these runs is {origin}: what they read unshifted is {table.baseline}, not clean, "
                     "and every change in brackets is against it. ")
    note = (f"{fallback}Ranked by {head_text} ({'higher' if column['better'] == 'high' else 'lower'} is better; "
            f"rows without a value last). ≈ after a rank: within noise of the row above, where {rule}. One row per "
            f"model and weights (sha256, first 12 hex digits). " + _HOVER.sub("", table.head.note))
    head = [_own_column("rank", f"rank by {head_text}; ≈: within noise of the row above", "low", "num"),
            _own_column("model", "the model's name in its run", "low", "text"),
            _own_column("weights", "sha256 of the weights (first 12 hex digits)", "low", "text"),
            _own_column("n", "samples per condition (clean)", "high", "num")]
    head += [{**c, "kind": "num", "by": c["key"] == column["key"]} for c in columns]
    head.append(_own_column("run", "the store and run the row's numbers come from", "low", "text"))
    out_rows = []
    for r in ranked:
        lead = [{"text": f"{r['rank']}{' ≈' if r['tie'] else ''}", "ci": "", "title": r["tie"] or "",
                 "cls": "noise" if r["tie"] else "", "sort": str(r["rank"])},
                {"text": r["model"], "ci": "", "title": r["id"], "cls": "", "sort": r["model"].lower()},
                {"text": r["weights"], "ci": "", "title": r["weights_title"], "cls": "", "sort": r["weights"].lower()},
                {"text": "–" if r["n"] is None else str(r["n"]), "ci": "", "title": "samples per condition (clean)",
                 "cls": "", "sort": "" if r["n"] is None else str(r["n"])}]
        tail = [{"text": r["run"], "ci": "", "title": "", "cls": "", "sort": r["run"].lower()}]
        out_rows.append({"rank": r["rank"], "tie": r["tie"], "model": r["model"], "weights": r["weights"],
                         "n": r["n"], "run": r["run"],
                         "cells": lead + [_cell_view(c, r["n"]) for c in r["cells"]] + tail})
    differs = None
    if ref is not None:
        runs = ", ".join(run.where for run in group.runs)
        differs = f"{runs}: " + "; ".join(_differences(ref, group.runs[0])) + f", against {ref.where} (table 1)"
    return {"index": index, "title": _title(group, table), "metric": table.main.metric, "differs": differs,
            "head": head, "rows": out_rows, "note": note, "by": column["key"],
            "sources": [run.where for run in group.runs], "also": table.also}


def _own_column(key: str, title: str, better: str, kind: str) -> dict[str, Any]:
    """A column of the board's own beside the headline's (rank, model, weights, n, run): its head is its key."""
    return {"key": key, "head": key, "group": "", "title": title, "better": better, "kind": kind}


# -- outputs -----------------------------------------------------------------------------------------------
def _md_head(column: dict[str, Any]) -> str:
    group, head = column.get("group") or "", column["head"]
    return head if group in ("", "clean", head) else f"{group}: {head}"


def leaderboard_blocks(board: dict[str, Any]) -> list[dict[str, Any]]:
    """The leaderboard as report blocks (report/blocks.py): the Markdown export is written from them."""
    blocks: list[dict[str, Any]] = [{"kind": "heading", "level": 1, "text": "Leaderboard"}]
    blocks.append({"kind": "text", "text": f"Stores: {', '.join(board['stores'])}. One table per set of comparable "
                                           f"runs (same dataset, conditions, metric, preprocessing and seed)."})
    for t in board["tables"]:
        blocks.append({"kind": "heading", "level": 2, "text": f"{t['index']}. {t['title']}"})
        if t["differs"]:
            blocks.append({"kind": "text", "text": "Not comparable with table 1: " + t["differs"] + "."})
        blocks.append({"kind": "table", "head": [_md_head(c) for c in t["head"]],
                       "rows": [[{"text": " ".join(x for x in (c["text"], c["ci"]) if x), "title": c["title"]}
                                 for c in r["cells"]] for r in t["rows"]]})
        # the Markdown cell holds the value, its change and then its CI, on one line
        blocks.append({"kind": "text", "text": t["note"].replace("Second line: 95% bootstrap CI of the value",
                                                                 "In square brackets after it: its 95% bootstrap CI")})
        lines = ["runs: " + "; ".join(t["sources"])] + t["also"]
        blocks.append({"kind": "list", "items": lines})
    if board["left_out"]:
        blocks.append({"kind": "heading", "level": 2, "text": "Left out"})
        blocks.append({"kind": "list", "items": list(board["left_out"])})
    return blocks


def to_markdown(board: dict[str, Any]) -> str:
    """The leaderboard in Markdown: one pipe table per set of comparable runs, each value with its 95% CI; every
    model, run and store name shown as it is, never rendered (blocks.markdown_text escapes its markup)."""
    return blocks_to_markdown(leaderboard_blocks(board))


_SCRIPT = """
(function () {
  function key(td, kind) {
    var v = td.getAttribute('data-sort');
    if (v === null || v === '') return null;
    return kind === 'text' ? v : parseFloat(v);
  }
  document.querySelectorAll('table.leaderboard').forEach(function (table) {
    var heads = table.querySelectorAll('thead th');
    heads.forEach(function (th, col) {
      th.addEventListener('click', function () {
        var kind = th.getAttribute('data-kind');
        var state = th.getAttribute('aria-sort');
        var asc = state ? state !== 'ascending' : th.getAttribute('data-better') !== 'high';
        heads.forEach(function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = key(a.cells[col], kind), y = key(b.cells[col], kind);
          if (x === null || y === null) return (x === null) - (y === null);
          var d = x === y ? 0 : (x < y ? -1 : 1);
          return asc ? d : -d;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
""" + HTML_MARK + """
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; style-src 'unsafe-inline'; script-src '{{ script_hash }}'">
<title>shiftbench leaderboard</title>
<style>
  body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 1.5rem auto;
         max-width: 1400px; padding: 0 1rem; color: #1d2330; line-height: 1.4; }
  h1 { font-size: 1.5rem; margin: 0 0 .2rem; }
  h2 { margin: 1.6rem 0 .5rem; border-bottom: 1px solid #dde2ea; font-size: 1.2rem; }
  .sub { color: #5b6475; margin: .3rem 0; font-size: .9rem; } .differs { color: #8a4b00; font-size: .9rem; }
  table { border-collapse: collapse; margin: .4rem 0 .9rem; font-size: .86rem; }
  th, td { padding: .25rem .5rem; border-bottom: 1px solid #e6e9ef; text-align: right; white-space: nowrap;
           vertical-align: top; }
  th { background: #f3f5f9; cursor: pointer; user-select: none; white-space: normal; }
  th.by { background: #e3e9f5; }
  th[aria-sort=ascending]::after { content: " ▲"; } th[aria-sort=descending]::after { content: " ▼"; }
  td:nth-child(2), td:nth-child(3), td:last-child, th:nth-child(2), th:nth-child(3), th:last-child {
    text-align: left; }
  th small, td small { display: block; font-weight: normal; color: #5b6475; font-size: .74rem; }
  .down { color: #b3261e; } .up { color: #1e7b34; } .noise { color: #6b7280; }
  .wide { overflow-x: auto; max-width: 100%; }
</style>
</head>
<body>
<h1>shiftbench leaderboard</h1>
<p class="sub">Stores: {{ board.stores|join(", ") }}. One table per set of comparable runs (same dataset, conditions,
metric, preprocessing and seed); click a column's head to sort by it (again to reverse).</p>
{% for t in board.tables %}
<section class="board" id="table{{ t.index }}">
<h2>{{ t.index }}. {{ t.title }}</h2>
{% if t.differs %}<p class="differs">Not comparable with table 1: {{ t.differs }}.</p>{% endif %}
<div class="wide"><table class="leaderboard" data-table="{{ t.index }}">
<thead><tr>{% for c in t.head %}
  <th data-key="{{ c.key }}" data-kind="{{ c.kind }}" data-better="{{ c.better }}" title="{{ c.title }}"
      {%- if c.by %} class="by"{% endif %}>{{ c.head }}
      {%- if c.group and c.group not in (c.head, 'clean') %}<small>{{ c.group }}</small>{% endif %}</th>
{%- endfor %}</tr></thead>
<tbody>
{% for r in t.rows %}<tr>{% for c in r.cells %}
  <td class="{{ c.cls }}" title="{{ c.title }}" data-sort="{{ c.sort }}">{{ c.text }}
  {%- if c.ci %}<small>{{ c.ci }}</small>{% endif %}</td>
{%- endfor %}</tr>
{% endfor %}</tbody>
</table></div>
<p class="sub">{{ t.note }}</p>
<ul class="sub"><li>runs: {{ t.sources|join("; ") }}</li>{% for line in t.also %}<li>{{ line }}</li>{% endfor %}</ul>
</section>
{% endfor %}
{% if board.left_out %}<h2>Left out</h2>
<ul class="sub">{% for line in board.left_out %}<li>{{ line }}</li>{% endfor %}</ul>{% endif %}
<script>{{ script|safe }}</script>
</body>
</html>
"""


def to_html(board: dict[str, Any]) -> str:
    """The leaderboard as one self-contained HTML page: sortable columns (an inline script, the only one the
    page's CSP allows, by its hash), no request to anything, every data string escaped."""
    import jinja2

    env = jinja2.Environment(autoescape=jinja2.select_autoescape(default=True, default_for_string=True))
    digest = base64.b64encode(hashlib.sha256(_SCRIPT.encode("utf-8")).digest()).decode("ascii")
    return env.from_string(_TEMPLATE).render(board=board, script=_SCRIPT, script_hash=f"sha256-{digest}")


def write_leaderboard(board: dict[str, Any], out: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``leaderboard.md`` and ``leaderboard.html`` into ``out``; a file of that name that an earlier
    leaderboard did not write is never replaced (one line says so, before anything is written)."""
    out = out_folder(out, "leaderboard")  # "" would be the current folder
    targets = ((out / "leaderboard.md", MD_MARK), (out / "leaderboard.html", HTML_MARK))
    for path, mark in targets:
        if path.is_symlink() or (path.exists() and not path.is_file()):
            raise ShiftbenchError(f"leaderboard: {path} is in the way (not a file); use a new or empty --out")
        if path.exists():
            try:
                ours = mark in path.read_text(encoding="utf-8", errors="replace")[:4000]
            except OSError:
                ours = False
            if not ours:
                raise ShiftbenchError(f"leaderboard: {out} already holds {path.name}, which no earlier shiftbench "
                                      "leaderboard wrote; files are never replaced: use a new or empty --out")
    make_folder(out, "leaderboard")
    write_atomic(targets[0][0], MD_MARK + "\n" + to_markdown(board))
    write_atomic(targets[1][0], to_html(board))
    return targets[0][0], targets[1][0]
