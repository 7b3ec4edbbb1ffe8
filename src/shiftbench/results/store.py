"""The results store: an embedded SQLite database of runs, conditions, results and predictions.

Every write is one transaction (``BEGIN IMMEDIATE`` in WAL mode), so a run killed at any point
leaves either a whole batch / condition or nothing of it; a restarted run skips what is complete
and redoes the rest, and unique keys make a duplicated row impossible. Several processes may write
one store at once: SQLite serialises the writers, ``busy_timeout`` makes them wait their turn.

The SQLite plumbing (opening, the schema and its versions, the write transactions) is
:class:`.database.Database`.

Per-sample values (``finish_condition(..., samples=...)``) are stored compactly and losslessly: each distinct
list of sample ids once (``sample_ids``, zlib-compressed JSON keyed by its SHA-256), the values in the
narrowest dtype that gives every float64 back bit for bit, zlib-compressed (codec.py). :meth:`Store.samples`
and :meth:`Store.iter_samples` give them back as float64 (what was written) or, with ``dtype=None``, in the
stored dtype (uint8, float32 or float64); records with equal id lists share one list object (read-only).
A condition's batch states (JSON, zlib-compressed while it is in flight) are dropped in the transaction that
finishes it: only an unfinished condition needs them, to resume.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sqlite3
import time
import zlib
from typing import Any, Iterator, Sequence

from ..condition import Condition, canonical_json, params_key  # noqa: F401  (params_key: importable from here)
from ..errors import Option, StoreError
from ..seeds import check_seed
from ..severity import canonical
from .codec import decode_ids, decode_values, encode_ids, encode_values, ids_digest, pack_ids
from .database import SCHEMA_VERSION, Database  # noqa: F401  (SCHEMA_VERSION: still importable from here)
from .identity import describe_changes, identity_key


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

        The state is kept as zlib-compressed JSON until the condition is finished (then it is dropped).
        Returns False when the batch was already recorded, or its condition is finished (then nothing is written).
        """
        with self._write() as conn:
            done = conn.execute("SELECT status FROM conditions WHERE condition_id = ?", (condition_id,)).fetchone()
            exists = conn.execute(
                "SELECT 1 FROM batches WHERE condition_id = ? AND batch = ?", (condition_id, batch)
            ).fetchone()
            if exists or (done is not None and done[0] == "done"):
                return False
            conn.execute(
                "INSERT INTO batches (condition_id, batch, state) VALUES (?, ?, ?)",
                (condition_id, int(batch), sqlite3.Binary(zlib.compress(canonical_json(state).encode(), 6))),
            )
            if predictions:
                conn.executemany(
                    "INSERT OR REPLACE INTO predictions (condition_id, sample_id, prediction) VALUES (?, ?, ?)",
                    [(condition_id, str(sid), canonical_json(pred)) for sid, pred in predictions],
                )
        return True

    def batches(self, condition_id: int) -> dict[int, Any]:
        """The saved batch states of an unfinished condition, by batch (``{}`` once it is finished: its batches
        are dropped when it finishes). A state saved as JSON text (schema 1) reads as it did."""
        with self.reading(f"the saved batches of condition {condition_id}"):
            rows = self._conn.execute(
                "SELECT batch, state FROM batches WHERE condition_id = ? ORDER BY batch", (condition_id,)
            ).fetchall()
            return {int(r[0]): json.loads(zlib.decompress(r[1]) if isinstance(r[1], bytes) else r[1]) for r in rows}

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
        array whose first axis runs over the ids, read back as float64 bit for bit (stored compactly: module
        doc). The condition's saved batches are dropped in the same transaction. Returns False when
        another writer had already finished it (nothing written).
        """
        for metric, (kind, ids, values) in (samples or {}).items():
            if len(ids) != len(values):
                raise StoreError(f"{self.path}: condition {condition_id}, {metric}: {len(ids)} sample ids "
                                 f"for {len(values)} values")
        encoded: dict[str, tuple[str, str, bytes]] = {}  # encoded before the write lock is taken
        lists: dict[str, tuple[int, bytes]] = {}
        for metric, (kind, ids, values) in (samples or {}).items():
            digest, text = encode_ids(ids)
            lists[digest] = (len(ids), text)
            encoded[metric] = (kind, digest, encode_values(values))
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
            for metric, (kind, digest, data) in encoded.items():
                conn.execute(
                    "INSERT INTO samples (condition_id, metric, kind, ids, data) VALUES (?, ?, ?, ?, ?)",
                    (condition_id, metric, kind, digest, sqlite3.Binary(data)))
            for digest, (count, text) in lists.items():
                if conn.execute("SELECT 1 FROM sample_ids WHERE digest = ?", (digest,)).fetchone() is None:
                    conn.execute("INSERT INTO sample_ids (digest, n, ids) VALUES (?, ?, ?)",
                                 (digest, count, sqlite3.Binary(pack_ids(text))))
            conn.execute(
                "UPDATE conditions SET status = 'done', n = ?, finished = ? WHERE condition_id = ?",
                (n if n is not None else (max(counts) if counts else 0), time.time(), condition_id),
            )
            conn.execute("DELETE FROM batches WHERE condition_id = ?", (condition_id,))
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

    _PREDICTIONS = ("SELECT c.model, c.shift, c.params, c.severity, p.sample_id, p.prediction FROM predictions p"
                    " JOIN conditions c ON p.condition_id = c.condition_id WHERE c.run_id = ?"
                    " ORDER BY c.condition_id, p.sample_id")
    _PREDICTION_TYPES = {**{k: v for k, v in _CONDITION_TYPES.items() if k != "dataset"}, "sample_id": (str,)}

    def _prediction(self, r: sqlite3.Row) -> dict[str, Any]:
        d = {**dict(r), "params": json.loads(r["params"]), "prediction": json.loads(r["prediction"])}
        self._typed(d, "prediction", self._PREDICTION_TYPES)
        return d

    def predictions(self, run_id: str, sample_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """A run's stored predictions (``model, shift, params, severity, sample_id, prediction``), by condition
        then sample id; :meth:`iter_predictions` yields the same dicts one at a time. ``sample_ids``: only those
        samples' (the report's grids show a few; a run with --log-samples holds one per sample and condition)."""
        query, args = self._PREDICTIONS, (run_id,)
        if sample_ids is not None:
            query = query.replace(" ORDER BY", " AND p.sample_id IN (SELECT value FROM json_each(?)) ORDER BY")
            args = (run_id, json.dumps([str(i) for i in sample_ids]))
        with self.reading("its predictions"):
            rows = self._conn.execute(query, args).fetchall()
            return [self._prediction(r) for r in rows]

    def iter_predictions(self, run_id: str) -> Iterator[dict[str, Any]]:
        """:meth:`predictions`, streamed from a cursor (same dicts, same order): an export of a large run
        never holds every prediction at once. Read the iterator to its end (or close it) before writing to
        this store through the same object."""
        with self.reading("its predictions"):
            for r in self._conn.execute(self._PREDICTIONS, (run_id,)):
                yield self._prediction(r)

    _SAMPLES = ("SELECT c.model, c.dataset, c.shift, c.params, c.severity, s.metric, s.kind, s.ids, s.data"
                " FROM samples s JOIN conditions c ON s.condition_id = c.condition_id WHERE c.run_id = ?"
                " ORDER BY c.condition_id, s.metric")
    _SAMPLE_TYPES = {**_CONDITION_TYPES, "metric": (str,), "kind": (str,), "ids": (list,)}

    def samples(self, run_id: str, dtype: Any = "float64",
                lists: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
        """The per-sample values of a run, one dict per (condition, metric) that has them:
        ``model, dataset, shift, params, severity, metric, kind, ids, values`` (docs/metrics.md,
        "Per-sample values"). A store written before they were kept has none: ``[]``.

        ``values`` is a numpy array: float64, exactly the values written (the default), or with
        ``dtype=None`` the stored dtype (uint8 for 0/1 values, float32 when every value is float32-exact,
        else float64; a schema 1 store's are float64). Records with equal id lists share one list object
        (do not change it); ``lists`` (digest -> list) shares them across calls too (:func:`.records.load`)."""
        return list(self.iter_samples(run_id, dtype, lists))

    def iter_samples(self, run_id: str, dtype: Any = "float64",
                     lists: dict[str, list[str]] | None = None) -> Iterator[dict[str, Any]]:
        """:meth:`samples`, streamed from a cursor one (condition, metric) at a time (same dicts, same order):
        an export of a large run never holds every record at once; an id list is decoded once. Read the
        iterator to its end (or close it) before writing to this store through the same object."""
        lists = {} if lists is None else lists
        with self.reading("its per-sample values"):
            if not self._has_samples(self._conn):
                return
            for r in self._conn.execute(self._SAMPLES, (run_id,)):
                d = {"model": r["model"], "dataset": r["dataset"], "shift": r["shift"],
                     "params": json.loads(r["params"]), "severity": r["severity"], "metric": r["metric"],
                     "kind": r["kind"], "ids": self._id_list(r["ids"], lists),
                     "values": decode_values(bytes(r["data"]), dtype)}
                self._typed(d, "per-sample record", self._SAMPLE_TYPES)
                if len(d["ids"]) != len(d["values"]):
                    raise self._damaged(f"{len(d['ids'])} sample ids for {len(d['values'])} values ({d['metric']})")
                yield d

    def _id_list(self, ref: Any, lists: dict[str, list[str]]) -> list[str]:
        """A samples row's id list, decoded once per digest: schema 2's digest of a ``sample_ids`` row, or
        schema 1's JSON list (keyed by the same digest, so equal lists of either schema are one object)."""
        if not isinstance(ref, str):
            raise ValueError(f"sample ids stored as {type(ref).__name__}")
        old = ref.startswith("[")
        digest = ids_digest(ref.encode("utf-8", "surrogatepass")) if old else ref
        found = lists.get(digest)
        if found is None:
            if old:
                found = decode_ids(ref)
            else:
                row = self._conn.execute("SELECT n, ids FROM sample_ids WHERE digest = ?", (digest,)).fetchone() \
                    if self._has_table(self._conn, "sample_ids") else None
                if row is None:
                    raise self._damaged(f"no sample id list {digest[:12]}")
                found = decode_ids(bytes(row["ids"]))
                if len(found) != row["n"]:
                    raise self._damaged(f"sample id list {digest[:12]} holds {len(found)} ids, not {row['n']}")
            lists[digest] = found
        return found

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
