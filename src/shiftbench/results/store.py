"""The results store: an embedded SQLite database of runs, conditions, results and predictions.

Every write is one transaction (``BEGIN IMMEDIATE`` in WAL mode), so a run killed at any point
leaves either a whole batch / condition or nothing of it; a restarted run skips what is complete
and redoes the rest, and unique keys make a duplicated row impossible. Several processes may write
one store at once: SQLite serialises the writers, ``busy_timeout`` makes them wait their turn.

The SQLite plumbing (opening, the schema, the write transactions) is :class:`.database.Database`.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sqlite3
import time
from typing import Any

from ..condition import Condition, canonical_json, params_key  # noqa: F401  (params_key: importable from here)
from ..errors import Option, StoreError
from ..seeds import check_seed
from ..severity import canonical
from .database import SCHEMA_VERSION, Database  # noqa: F401  (SCHEMA_VERSION: still importable from here)
from .identity import describe_changes, identity_key


def _npy_bytes(values: Any) -> bytes:
    """``values`` as float64 ``.npy`` bytes (np.save, no pickles)."""
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(values, dtype=np.float64), allow_pickle=False)
    return buffer.getvalue()


def _npy_array(data: bytes) -> Any:
    import io

    import numpy as np

    return np.load(io.BytesIO(data), allow_pickle=False)


_NUMBER = (int, float)
_RUN_TYPES = {"run_id": (str,), "spec": (dict,), "versions": (dict,), "seed": (int,), "started": _NUMBER,
              "finished": _NUMBER + (type(None),), "status": (str,), "identity": (dict, type(None)),
              "name": (str, type(None))}
_CONDITION_TYPES = {"model": (str,), "dataset": (str,), "shift": (str,), "params": (dict,), "severity": _NUMBER}
_ROW_TYPES = {**_CONDITION_TYPES, "run_id": (str,), "metric": (str,), "value": _NUMBER + (type(None),), "n": (int,)}


def spec_hash(spec: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()


class Store(Database):
    """A shiftbench results database at ``path`` (created if missing).

    >>> import tempfile, os
    >>> store = Store(os.path.join(tempfile.mkdtemp(), "r.db"))
    >>> run = store.start_run({"dataset": "d"}, seed=0)
    >>> cid = store.condition(run, Condition("m", "d", "clean", {}, 0))
    >>> store.finish_condition(cid, {"top1": (0.5, 10)})
    True
    >>> [(r["metric"], r["value"], r["n"]) for r in store.rows(run)]
    [('top1', 0.5, 10)]
    """

    # -- runs ---------------------------------------------------------------------------------
    def start_run(
        self,
        spec: dict[str, Any],
        seed: int,
        run_id: str | None = None,
        versions: dict[str, Any] | None = None,
        git_hash: str | None = None,
        name: str | None = None,
        identity: dict[str, Any] | None = None,
        new_run: bool = False,
    ) -> str:
        """Open a run for ``spec``: the same spec with the same ``identity`` resumes its run.

        ``identity`` holds what besides the spec decides the numbers (engine/identity.py). A run of
        the same spec whose identity differs is not resumed: a StoreError names what changed. With
        ``new_run`` the run id is keyed by the spec and the identity, so a new run starts beside the
        old one (and the same inputs resume that new run later, with or without ``new_run``). Inputs that
        already have a run (under either id) resume it, ``new_run`` or not: an identical run is never
        computed twice (the runner says so in one line). A ``run_id`` already used by another spec is refused.
        """
        seed = check_seed(seed)  # before the store is touched; an SQLite INTEGER holds every seed of the domain
        identity_json = None if identity is None else canonical_json(identity)
        with self._write() as conn:
            with self.reading("its runs"):
                run_id, row = self._resolve_run(conn, spec, identity, run_id, new_run)
            if row is not None:
                conn.execute(
                    "UPDATE runs SET status = 'running', finished = NULL,"
                    " identity_json = COALESCE(identity_json, ?) WHERE run_id = ?",
                    (identity_json, run_id),
                )
            else:
                conn.execute(
                    "INSERT INTO runs (run_id, name, spec_json, spec_hash, versions_json, git_hash, seed, host,"
                    " started, status, identity_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?)",
                    (run_id, name, canonical_json(spec), spec_hash(spec), canonical_json(versions or {}), git_hash,
                     seed, socket.gethostname(), time.time(), identity_json),
                )
        return run_id

    def resolve_run(self, spec: dict[str, Any], identity: dict[str, Any] | None = None, run_id: str | None = None,
                    new_run: bool = False) -> tuple[str, bool]:
        """Which run ``start_run`` would open, and whether it exists, without writing anything;
        raises the StoreError ``start_run`` would raise (a dry run's check)."""
        with self.reading("its runs"):
            run_id, row = self._resolve_run(self._conn, spec, identity, run_id, new_run)
        return run_id, row is not None

    def _resolve_run(self, conn: sqlite3.Connection, spec: dict[str, Any], identity: dict[str, Any] | None,
                     run_id: str | None, new_run: bool) -> tuple[str, Any]:
        digest = spec_hash(spec)
        identity_json = None if identity is None else canonical_json(identity)
        keyed = None if identity is None else f"run-{identity_key({'spec': digest, 'identity': identity})[:12]}"
        if run_id is None:
            plain = f"run-{digest[:12]}"
            run_id = keyed if new_run and keyed else plain
            if keyed is not None:  # the same inputs have a run under the other id: resume it, never recompute it
                other_id = plain if run_id == keyed else keyed
                other = conn.execute("SELECT spec_hash, identity_json FROM runs WHERE run_id = ?", (other_id,)).fetchone()
                own = conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone()
                if own is None and other is not None and other["spec_hash"] == digest \
                        and other["identity_json"] == identity_json:
                    return other_id, other
        row = conn.execute("SELECT spec_hash, identity_json FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is not None and row["spec_hash"] != digest:
            raise StoreError(f"{self.path}: run {run_id!r} was started from another spec; use another run id or store")
        if row is not None and identity is not None and row["identity_json"] is not None \
                and row["identity_json"] != identity_json:
            other = None if keyed is None or keyed == run_id else conn.execute(
                "SELECT spec_hash, identity_json FROM runs WHERE run_id = ? AND spec_hash = ?", (keyed, digest)).fetchone()
            if other is not None and other["identity_json"] == identity_json:
                return keyed, other  # these inputs already have their own run (started with new_run): resume it
            changes = describe_changes(json.loads(row["identity_json"]), identity)
            raise StoreError(  # the setting named as the caller gives it: --new-run or new_run=True (errors.Option)
                f"run {run_id}: {'; '.join(changes) or 'inputs changed'}; ",
                hint=("choose another ", Option("run_id", "NAME"))
                if new_run else ("pass ", Option("new_run"), " to start a new run"))
        return run_id, row

    def finish_run(self, run_id: str) -> None:
        with self._write() as conn:
            conn.execute("UPDATE runs SET status = 'done', finished = ? WHERE run_id = ?", (time.time(), run_id))

    def runs(self) -> list[dict[str, Any]]:
        out = []
        with self.reading("its runs"):
            for r in self._conn.execute("SELECT * FROM runs ORDER BY started").fetchall():
                d = dict(r)
                d["spec"] = json.loads(d.pop("spec_json"))
                d["versions"] = json.loads(d.pop("versions_json"))
                identity = d.pop("identity_json", None)
                d["identity"] = json.loads(identity) if identity else None
                self._typed(d, "run", _RUN_TYPES)
                out.append(d)
        return out

    def _typed(self, record: dict[str, Any], what: str, types: dict[str, tuple[type, ...]]) -> None:
        """Every field of a record read back has the type it was written with (damaged bytes can change it)."""
        for key, allowed in types.items():
            value = record.get(key)
            if isinstance(value, bool) or not isinstance(value, allowed):
                raise self._damaged(f"a {what}'s {key} is {type(value).__name__} {str(value)[:40]!r}")

    def run(self, run_id: str | None = None) -> dict[str, Any]:
        """One run's record (the latest when ``run_id`` is None)."""
        runs = self.runs()
        if not runs:
            raise StoreError(f"{self.path}: the store holds no runs")
        if run_id is None:
            return runs[-1]
        for r in runs:
            if r["run_id"] == run_id:
                return r
        raise StoreError(f"{self.path}: no run {run_id!r} (runs: {', '.join(r['run_id'] for r in runs)})")

    # -- conditions ---------------------------------------------------------------------------
    def condition(self, run_id: str, key: Condition) -> int:
        """The id of a condition of ``run_id`` (created pending if new)."""
        # canonical, never truncated: 2.5 is its own condition; a whole 3.0 is the 3 of every earlier run
        args = (run_id, key.model, key.dataset, key.shift, key.params_key, canonical(key.severity))
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO conditions (run_id, model, dataset, shift, params, severity)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                args,
            )
            row = conn.execute(
                "SELECT condition_id FROM conditions WHERE run_id = ? AND model = ? AND dataset = ?"
                " AND shift = ? AND params = ? AND severity = ?",
                args,
            ).fetchone()
        return int(row[0])

    def condition_counts(self, run_id: str) -> tuple[int, int]:
        """(conditions of ``run_id`` in the store, those of them done): what a resumed run starts from."""
        with self.reading("its conditions"):
            row = self._conn.execute("SELECT COUNT(*), COALESCE(SUM(status = 'done'), 0) FROM conditions WHERE run_id = ?",
                                     (run_id,)).fetchone()
        return int(row[0]), int(row[1])

    def is_done(self, condition_id: int) -> bool:
        with self.reading("its conditions"):
            row = self._conn.execute("SELECT status FROM conditions WHERE condition_id = ?", (condition_id,)).fetchone()
        return row is not None and row[0] == "done"

    def save_batch(
        self,
        condition_id: int,
        batch: int,
        state: Any,
        predictions: list[tuple[str, Any]] | None = None,
    ) -> bool:
        """Record one finished batch (its metric state and per-sample predictions) atomically.

        Returns False when the batch was already recorded (then nothing is written).
        """
        with self._write() as conn:
            exists = conn.execute(
                "SELECT 1 FROM batches WHERE condition_id = ? AND batch = ?", (condition_id, batch)
            ).fetchone()
            if exists:
                return False
            conn.execute(
                "INSERT INTO batches (condition_id, batch, state) VALUES (?, ?, ?)",
                (condition_id, int(batch), canonical_json(state)),
            )
            if predictions:
                conn.executemany(
                    "INSERT OR REPLACE INTO predictions (condition_id, sample_id, prediction) VALUES (?, ?, ?)",
                    [(condition_id, str(sid), canonical_json(pred)) for sid, pred in predictions],
                )
        return True

    def batches(self, condition_id: int) -> dict[int, Any]:
        with self.reading(f"the saved batches of condition {condition_id}"):
            rows = self._conn.execute(
                "SELECT batch, state FROM batches WHERE condition_id = ? ORDER BY batch", (condition_id,)
            ).fetchall()
            return {int(r[0]): json.loads(r[1]) for r in rows}

    def clear_batches(self, condition_id: int) -> int:
        """Forget an unfinished condition's saved batches and their predictions, in one transaction, so
        it is computed again from its first batch; returns how many batches were dropped."""
        with self._write() as conn:
            done = conn.execute("SELECT status FROM conditions WHERE condition_id = ?", (condition_id,)).fetchone()
            if done is not None and done[0] == "done":
                raise StoreError(f"{self.path}: condition {condition_id} is finished: its batches are not cleared")
            dropped = conn.execute("DELETE FROM batches WHERE condition_id = ?", (condition_id,)).rowcount
            conn.execute("DELETE FROM predictions WHERE condition_id = ?", (condition_id,))
        return int(dropped)

    def finish_condition(self, condition_id: int, results: dict[str, Any], n: int | None = None,
                         samples: dict[str, tuple[str, list[str], Any]] | None = None) -> bool:
        """Write a condition's metric values and mark it done, in one transaction.

        ``results`` maps metric -> (value, n) or (value, n, extra). ``samples`` maps a row metric to
        (kind, sample ids, values): the per-sample values behind it, ids in data order, ``values`` an
        array whose first axis runs over the ids (stored as float64 ``.npy`` bytes). Returns False when
        another writer had already finished it (nothing written).
        """
        for metric, (kind, ids, values) in (samples or {}).items():
            if len(ids) != len(values):
                raise StoreError(f"{self.path}: condition {condition_id}, {metric}: {len(ids)} sample ids "
                                 f"for {len(values)} values")
        with self._write() as conn:
            row = conn.execute("SELECT status FROM conditions WHERE condition_id = ?", (condition_id,)).fetchone()
            if row is None:
                raise StoreError(f"{self.path}: no condition {condition_id}")
            if row[0] == "done":
                return False
            counts = []
            for metric, value in results.items():
                value, count, extra = (tuple(value) + (None,))[:3]
                counts.append(int(count))
                conn.execute(
                    "INSERT INTO results (condition_id, metric, value, n, extra) VALUES (?, ?, ?, ?, ?)",
                    (condition_id, metric, None if value is None else float(value), int(count),
                     None if extra is None else canonical_json(extra)),
                )
            conn.executemany(
                "INSERT INTO samples (condition_id, metric, kind, ids, data) VALUES (?, ?, ?, ?, ?)",
                [(condition_id, metric, kind, json.dumps([str(i) for i in ids], separators=(",", ":")),
                  sqlite3.Binary(_npy_bytes(values))) for metric, (kind, ids, values) in (samples or {}).items()],
            )
            conn.execute(
                "UPDATE conditions SET status = 'done', n = ?, finished = ? WHERE condition_id = ?",
                (n if n is not None else (max(counts) if counts else 0), time.time(), condition_id),
            )
        return True

    # -- reading ------------------------------------------------------------------------------
    def rows(self, run_id: str | None = None) -> list[dict[str, Any]]:
        """Result rows ``(run_id, model, dataset, shift, params, severity, metric, value, n)``."""
        query = (
            "SELECT c.run_id, c.model, c.dataset, c.shift, c.params, c.severity, r.metric, r.value, r.n, r.extra"
            " FROM results r JOIN conditions c ON r.condition_id = c.condition_id"
        )
        args: tuple = ()
        if run_id is not None:
            query += " WHERE c.run_id = ?"
            args = (run_id,)
        query += " ORDER BY c.condition_id, r.metric"
        out = []
        with self.reading("its results"):
            for r in self._conn.execute(query, args).fetchall():
                d = dict(r)
                d["params"] = json.loads(d["params"])
                extra = d.pop("extra")
                if extra is not None:
                    d["extra"] = json.loads(extra)
                self._typed(d, "result", _ROW_TYPES)
                out.append(d)
        return out

    def predictions(self, run_id: str) -> list[dict[str, Any]]:
        with self.reading("its predictions"):
            rows = self._conn.execute(
                "SELECT c.model, c.shift, c.params, c.severity, p.sample_id, p.prediction FROM predictions p"
                " JOIN conditions c ON p.condition_id = c.condition_id WHERE c.run_id = ?"
                " ORDER BY c.condition_id, p.sample_id",
                (run_id,),
            ).fetchall()
            out = [{**dict(r), "params": json.loads(r["params"]), "prediction": json.loads(r["prediction"])}
                   for r in rows]
        types = {**{k: v for k, v in _CONDITION_TYPES.items() if k != "dataset"}, "sample_id": (str,)}
        for d in out:
            self._typed(d, "prediction", types)
        return out

    def samples(self, run_id: str) -> list[dict[str, Any]]:
        """The per-sample values of a run, one dict per (condition, metric) that has them:
        ``model, dataset, shift, params, severity, metric, kind, ids, values`` (docs/metrics.md,
        "Per-sample values"). A store written before they were kept has none: ``[]``."""
        with self.reading("its per-sample values"):
            if not self._has_samples(self._conn):
                return []
            rows = self._conn.execute(
                "SELECT c.model, c.dataset, c.shift, c.params, c.severity, s.metric, s.kind, s.ids, s.data"
                " FROM samples s JOIN conditions c ON s.condition_id = c.condition_id WHERE c.run_id = ?"
                " ORDER BY c.condition_id, s.metric",
                (run_id,),
            ).fetchall()
            out = [{"model": r["model"], "dataset": r["dataset"], "shift": r["shift"], "params": json.loads(r["params"]),
                    "severity": r["severity"], "metric": r["metric"], "kind": r["kind"],
                    "ids": json.loads(r["ids"]), "values": _npy_array(bytes(r["data"]))} for r in rows]
        for d in out:
            self._typed(d, "per-sample record", {**_CONDITION_TYPES, "metric": (str,), "kind": (str,), "ids": (list,)})
            if len(d["ids"]) != len(d["values"]):
                raise self._damaged(f"{len(d['ids'])} sample ids for {len(d['values'])} values ({d['metric']})")
        return out

    def keeps_samples(self) -> bool:
        """Whether the store has the table of per-sample values: False for a store written by a shiftbench that
        did not keep them yet (then :meth:`samples` is ``[]`` for every run, whatever its metrics)."""
        with self.reading("its tables"):
            return self._has_samples(self._conn)

    def put_artifact(self, run_id: str, key: str, data: bytes, meta: Any = None) -> None:
        """Store a small binary artifact of a run (e.g. a sample thumbnail for the report's grids)."""
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO artifacts (run_id, key, data, meta) VALUES (?, ?, ?, ?)",
                (run_id, key, sqlite3.Binary(data), None if meta is None else canonical_json(meta)),
            )

    def artifacts(self, run_id: str, prefix: str = "") -> list[dict[str, Any]]:
        with self.reading("its artifacts"):
            rows = self._conn.execute(
                "SELECT key, data, meta FROM artifacts WHERE run_id = ? AND key >= ? AND key < ? ORDER BY key",
                (run_id, prefix, prefix + "\uffff"),
            ).fetchall()
            out = [{"key": r["key"], "data": bytes(r["data"]), "meta": json.loads(r["meta"]) if r["meta"] else None}
                   for r in rows]
        for d in out:
            self._typed(d, "artifact", {"key": (str,)})
        return out
