"""What the export and the leaderboard say about a run besides its numbers: a run not finished, a folder written by
``shiftbench generate`` read as "clean", per-sample values missing (and truly why) or not finite.

Each is a phrase the writers put into one note (or the leaderboard's "Left out" line); per-sample values that
are not finite refuse the whole export or leaderboard with one StoreError naming the store, the run and the
condition, since every number drawn from them (a CI, a paired test, a JSON line) would be wrong.

>>> unfinished({"status": "running"}, (5, 3))
'not finished (status running: killed, or still running): 2 of 5 conditions unfinished'
>>> unfinished({"status": "done"}, (5, 5)) is None
True
>>> rows = [{"metric": "box_ap"}, {"metric": "box_ap50"}]
>>> samples_caveat(True, {"identity": {"models": {}}}, rows, [])
'no per-sample values: its metrics (box_ap, box_ap50) keep none'
>>> samples_caveat(False, {"identity": {}}, rows, [])
'no per-sample values: the store was written by a shiftbench that did not keep them yet'
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..console import plural
from ..errors import StoreError
from ..severity import label as severity_label
from .build import generated_baseline
from .tables import CLEAN, condition_label

__all__ = ["unfinished", "samples_caveat", "check_samples", "generated_origin_text", "condition_text", "some"]


def some(names: Sequence[str], shown: int = 5) -> str:
    """``a, b, c`` or ``a, b, c, d, e and 3 more``."""
    names = list(names)
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def condition_text(record: dict[str, Any]) -> str:
    """A stored condition in words: ``model 'm', dataset 'objects', gaussian_noise s3`` (names quoted as Python
    writes them, so a name with a line break or a quote stays one line)."""
    shift = record["shift"]
    where = condition_label(shift, record.get("params") or {})
    if shift != CLEAN:
        where += f" s{severity_label(record['severity'])}"
    return f"model {record['model']!r}, dataset {record.get('dataset', '')!r}, {where}"


def unfinished(run: dict[str, Any], counts: tuple[int, int]) -> str | None:
    """Why a run's numbers are partial, from its status and ``counts`` = (conditions, conditions done)
    (``Store.condition_counts``); None for a finished run with every condition done."""
    total, done = counts
    status = run.get("status")
    if status == "done" and done >= total:
        return None
    how = ": killed, or still running" if status == "running" else ""
    left = f"{total - done} of {plural(total, 'condition')} unfinished" if total else "no condition started"
    return f"not finished (status {status}{how}): {left}"


def samples_caveat(keeps: bool, run: dict[str, Any], rows: Sequence[dict[str, Any]],
                   samples: Sequence[dict[str, Any]]) -> str | None:
    """Why metrics of a run have no per-sample values (None when every metric of ``rows`` has them): the store
    has no table for them (``keeps`` False: written by a shiftbench that did not keep them yet), the run was
    written by an older shiftbench (no run identity either), or the metrics keep none by design (detection's AP,
    retrieval's γ): a run of this shiftbench that stores some and not others."""
    metrics = sorted({r["metric"] for r in rows})
    have = {s["metric"] for s in samples}
    lacking = [m for m in metrics if m not in have]
    if not lacking:
        return None
    if not keeps:
        return "no per-sample values: the store was written by a shiftbench that did not keep them yet"
    if not samples and not run.get("identity"):
        return ("no per-sample values: the run was written by an older shiftbench (it has no run identity either), "
                "before they were kept")
    one = len(lacking) == 1
    if not samples:
        return (f"no per-sample values: its {'metric' if one else 'metrics'} ({some(lacking)}) "
                f"{'keeps' if one else 'keep'} none")
    return f"no per-sample values for {some(lacking)}: {'this metric keeps' if one else 'these metrics keep'} none"


def check_samples(samples: Sequence[dict[str, Any]], store: Any, run_id: str) -> None:
    """Refuse per-sample values that are not finite (a store shiftbench wrote holds only finite ones; NaN rows
    are left out with their ids when they are stored): one StoreError naming the store, the run, the condition,
    the metric and the first sample."""
    for s in samples:
        values = np.asarray(s["values"], dtype=np.float64)
        flat = values.reshape(len(values), -1) if len(values) else values.reshape(0, 1)
        bad = ~np.isfinite(flat)
        if not bad.any():
            continue
        rows = np.nonzero(bad.any(axis=1))[0]
        first = flat[rows[0]][bad[rows[0]]][0]
        what = "NaN" if np.isnan(first) else "infinite"
        more = f"; {len(rows)} of {len(values)} samples" if len(rows) > 1 else ""
        raise StoreError(f"{store}: run {run_id!r}: {condition_text(s)}: per-sample values of {s['metric']!r} are not "
                         f"finite ({what} at sample {str(s['ids'][rows[0]])!r}{more}); shiftbench stores finite ones "
                         "only: this store was changed or damaged; evaluate the run again into a new store")


def generated_origin_text(run: dict[str, Any]) -> str | None:
    """``a folder written by shiftbench generate under gaussian_noise at severity 3 (seed 0, from objects)`` for a
    run on generate's output (its dataset identity has ``generated``); None for any other run."""
    if not generated_baseline(run):
        return None
    origin = run["identity"]["dataset"]["generated"]
    made = ", ".join(x for x in (f"seed {origin['seed']}" if origin.get("seed") is not None else "",
                                 f"from {origin['source']}" if origin.get("source") else "",
                                 f"protocol {origin['protocol']}" if origin.get("protocol") else "") if x)
    params = origin.get("params") or {}
    shift = condition_label(origin["shift"], params)
    return (f"a folder written by shiftbench generate under {shift} at severity {severity_label(origin['severity'])}"
            + (f" ({made})" if made else ""))
