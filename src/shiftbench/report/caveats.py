"""What the export and the leaderboard say about a run besides its numbers: a run not finished, a folder written by
``shiftbench generate`` read as "clean", per-sample values missing (and truly why) or not finite.

Each is a phrase the writers put into one note (or the leaderboard's "Left out" line); per-sample values that
are not finite refuse the whole export or leaderboard with one StoreError naming the store, the run and the
condition, since every number drawn from them (a CI, a paired test, a JSON line) would be wrong.

>>> unfinished("running", (5, 3))
'not finished (status running: killed, or still running): 2 of 5 conditions unfinished'
>>> unfinished("done", (5, 5)) is None
True
>>> run = Run("r", {}, {}, 0, 0.0, None, "done", identity={"models": {}},
...           rows=[Row("m", "d", "clean", {}, 0, metric="box_ap"), Row("m", "d", "clean", {}, 0, metric="box_ap50")])
>>> samples_caveat(run)
'no per-sample values: its metrics (box_ap, box_ap50) keep none'
>>> run.keeps_samples = False
>>> samples_caveat(run)
'no per-sample values: the store was written by a shiftbench that did not keep them yet'
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..condition import Condition
from ..console import plural
from ..errors import StoreError
from ..results.records import Row, Run, Samples
from ..severity import label as severity_label
from .build import generated_baseline, made_text
from .tables import CLEAN, condition_label

__all__ = ["unfinished", "samples_caveat", "check_samples", "generated_origin_text", "condition_text", "some"]


def some(names: Sequence[str], shown: int = 5) -> str:
    """``a, b, c`` or ``a, b, c, d, e and 3 more``."""
    names = list(names)
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def condition_text(record: Condition) -> str:
    """A stored condition in words: ``model 'm', dataset 'objects', gaussian_noise s3`` (names quoted as Python
    writes them, so a name with a line break or a quote stays one line)."""
    where = condition_label(record.shift, record.params or {})
    if record.shift != CLEAN:
        where += f" s{severity_label(record.severity)}"
    return f"model {record.model!r}, dataset {record.dataset!r}, {where}"


def unfinished(status: str, counts: tuple[int, int]) -> str | None:
    """Why a run's numbers are partial, from its status and ``counts`` = (conditions, conditions done)
    (``Store.condition_counts``, a loaded run's ``counts``); None for a finished run with every condition done."""
    total, done = counts
    if status == "done" and done >= total:
        return None
    how = ": killed, or still running" if status == "running" else ""
    left = f"{total - done} of {plural(total, 'condition')} unfinished" if total else "no condition started"
    return f"not finished (status {status}{how}): {left}"


def samples_caveat(run: Run, rows: Sequence[Row] | None = None) -> str | None:
    """Why metrics of a run have no per-sample values (None when every metric of ``rows``, default the run's,
    has them): the store has no table for them (``keeps_samples`` False: written by a shiftbench that did not
    keep them yet), the run was written by an older shiftbench (no run identity either), or the metrics keep
    none by design (detection's AP, retrieval's γ): a run of this shiftbench that stores some and not others."""
    samples = run.samples
    metrics = sorted({r.metric for r in (run.rows if rows is None else rows)})
    have = {s.metric for s in samples}
    lacking = [m for m in metrics if m not in have]
    if not lacking:
        return None
    if not run.keeps_samples:
        return "no per-sample values: the store was written by a shiftbench that did not keep them yet"
    if not samples and not run.identity:
        return ("no per-sample values: the run was written by an older shiftbench (it has no run identity either), "
                "before they were kept")
    one = len(lacking) == 1
    if not samples:
        return (f"no per-sample values: its {'metric' if one else 'metrics'} ({some(lacking)}) "
                f"{'keeps' if one else 'keep'} none")
    return f"no per-sample values for {some(lacking)}: {'this metric keeps' if one else 'these metrics keep'} none"


def check_samples(samples: Sequence[Samples], store: Any, run_id: str) -> None:
    """Refuse per-sample values that are not finite (a store shiftbench wrote holds only finite ones; NaN rows
    are left out with their ids when they are stored): one StoreError naming the store, the run, the condition,
    the metric and the first sample."""
    for s in samples:
        values = np.asarray(s.values, dtype=np.float64)
        flat = values.reshape(len(values), -1) if len(values) else values.reshape(0, 1)
        bad = ~np.isfinite(flat)
        if not bad.any():
            continue
        rows = np.nonzero(bad.any(axis=1))[0]
        first = flat[rows[0]][bad[rows[0]]][0]
        what = "NaN" if np.isnan(first) else "infinite"
        more = f"; {len(rows)} of {len(values)} samples" if len(rows) > 1 else ""
        raise StoreError(f"{store}: run {run_id!r}: {condition_text(s)}: per-sample values of {s.metric!r} are not "
                         f"finite ({what} at sample {str(s.ids[rows[0]])!r}{more}); shiftbench stores finite ones "
                         "only: this store was changed or damaged; evaluate the run again into a new store")


def generated_origin_text(run: Run) -> str | None:
    """``a folder written by shiftbench generate under gaussian_noise at severity 3 (seed 0, from objects)`` for a
    run on generate's output (its dataset identity has ``generated``); None for any other run."""
    if not generated_baseline(run):
        return None
    origin, made = run.generated, made_text(run.generated)
    return (f"a folder written by shiftbench generate under {condition_label(origin.shift, origin.params or {})} at "
            f"severity {severity_label(origin.severity)}" + (f" ({made})" if made else ""))
