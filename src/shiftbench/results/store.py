"""The results store: an embedded SQLite database of runs, conditions, results and predictions.

Every write is one transaction (``BEGIN IMMEDIATE`` in WAL mode), so a run killed at any point
leaves either a whole batch / condition or nothing of it; a restarted run skips what is complete
and redoes the rest, and unique keys make a duplicated row impossible. Several processes may write
one store at once: SQLite serialises the writers, ``busy_timeout`` makes them wait their turn.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import StoreError
from ..seeds import check_seed
from .identity import describe_changes, identity_key

SCHEMA_VERSION = "1"
_MAGIC_KEY = "shiftbench_schema"
_SQLITE_HEADER = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    name TEXT,
    spec_json TEXT NOT NULL,
    spec_hash TEXT NOT NULL,
    versions_json TEXT NOT NULL,
    git_hash TEXT,
    seed INTEGER NOT NULL,
    host TEXT,
    started REAL NOT NULL,
    finished REAL,
    status TEXT NOT NULL,
    identity_json TEXT
);
CREATE TABLE IF NOT EXISTS conditions (
    condition_id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    model TEXT NOT NULL,
    dataset TEXT NOT NULL,
    shift TEXT NOT NULL,
    params TEXT NOT NULL,
    severity INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    n INTEGER,
    started REAL,
    finished REAL,
    UNIQUE (run_id, model, dataset, shift, params, severity)
);
CREATE TABLE IF NOT EXISTS results (
    condition_id INTEGER NOT NULL REFERENCES conditions(condition_id),
    metric TEXT NOT NULL,
    value REAL,
    n INTEGER NOT NULL,
    extra TEXT,
    PRIMARY KEY (condition_id, metric)
);
CREATE TABLE IF NOT EXISTS batches (
    condition_id INTEGER NOT NULL REFERENCES conditions(condition_id),
    batch INTEGER NOT NULL,
    state TEXT NOT NULL,
    PRIMARY KEY (condition_id, batch)
);
CREATE TABLE IF NOT EXISTS artifacts (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    key TEXT NOT NULL,
    data BLOB NOT NULL,
    meta TEXT,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE IF NOT EXISTS samples (
    condition_id INTEGER NOT NULL REFERENCES conditions(condition_id),
    metric TEXT NOT NULL,
    kind TEXT NOT NULL,
    ids TEXT NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (condition_id, metric)
);
CREATE TABLE IF NOT EXISTS predictions (
    condition_id INTEGER NOT NULL REFERENCES conditions(condition_id),
    sample_id TEXT NOT NULL,
    prediction TEXT NOT NULL,
    PRIMARY KEY (condition_id, sample_id)
);
"""


# added after schema 1 was released: stores made before it get the table when next opened for writing
# (and simply hold no per-sample values); a read-only older store reads as having none
_SAMPLES_TABLE = _SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS samples"):].split(";")[0]


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


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces: equal values give equal strings (used as keys)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def params_key(params: dict[str, Any] | None) -> str:
    """The one key of a shift's params (canonical JSON, ``{}`` for none): the stored conditions, the
    thumbnails and predictions, the retrieval units and the report's tables all group by it, so a resumed
    run finds the conditions an earlier one stored.

    >>> params_key({"b": 1, "a": [0.5]}), params_key(None)
    ('{"a":[0.5],"b":1}', '{}')
    """
    return canonical_json(params or {})


def spec_hash(spec: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def _reason(exc: sqlite3.Error) -> str:
    """SQLite's message, led by what the user can do about it."""
    text = str(exc)
    low = text.lower()
    if "disk is full" in low or "database or disk is full" in low:
        return f"the disk is full ({text}); free space and run again to resume"
    if "readonly" in low or "read-only" in low:
        return f"the store is read-only ({text}); make it writable or give another --store"
    if "unable to open" in low:
        return f"cannot open the file ({text}); check the folder's permissions"
    if any(w in low for w in ("malformed", "not a database", "no such column", "no such table", "corrupt",
                              "could not decode", "disk i/o")):
        return f"the store is damaged or not a shiftbench store ({text}); restore it from a copy or give another store"
    return " ".join(text.split())


@dataclass(frozen=True)
class ConditionKey:
    model: str
    dataset: str
    shift: str
    params: dict[str, Any]
    severity: int

    @property
    def params_json(self) -> str:
        return params_key(self.params)


class Store:
    """A shiftbench results database at ``path`` (created if missing).

    >>> import tempfile, os
    >>> store = Store(os.path.join(tempfile.mkdtemp(), "r.db"))
    >>> run = store.start_run({"dataset": "d"}, seed=0)
    >>> cid = store.condition(run, ConditionKey("m", "d", "clean", {}, 0))
    >>> store.finish_condition(cid, {"top1": (0.5, 10)})
    True
    >>> [(r["metric"], r["value"], r["n"]) for r in store.rows(run)]
    [('top1', 0.5, 10)]
    """

    def __init__(self, path: str | os.PathLike, timeout: float = 60.0, create: bool = True):
        self.path = Path(path)
        if not create and not self.path.exists():
            raise StoreError(f"{self.path}: store not found")
        if self.path.is_dir():
            raise StoreError(f"{self.path}: is a directory; give a database file path")
        if self.path.is_file():
            # a file another process is creating is empty or starts with SQLite's header, so only a
            # file that is neither is refused here; an empty one is "being created", not "not a store"
            try:
                with open(self.path, "rb") as fh:
                    head = fh.read(16)
            except OSError as exc:
                raise StoreError(f"{self.path}: cannot read the store ({exc.strerror or type(exc).__name__})") from None
            if head and not _SQLITE_HEADER.startswith(head):
                raise StoreError(f"{self.path}: not a shiftbench store (not an SQLite database)")
            if not create and len(head) < len(_SQLITE_HEADER):  # a reader never makes a store of a (partial) file
                raise StoreError(f"{self.path}: not a shiftbench store ({'an empty file' if not head else 'cut short'})")
        elif not self.path.exists() and not self.path.parent.exists():
            raise StoreError(f"{self.path}: folder {self.path.parent} does not exist")
        self._timeout = timeout
        self._create = create
        try:
            self._conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open store ({_reason(exc)})") from None
        self._conn.row_factory = sqlite3.Row
        try:
            self._open()
        except (sqlite3.Error, UnicodeDecodeError) as exc:  # a damaged page or schema met while opening
            self._conn.close()
            raise self._unusable(exc) from None
        except BaseException:
            self._conn.close()
            raise

    # -- plumbing -----------------------------------------------------------------------------
    def _open(self) -> None:
        """Check the schema marker, creating the schema when the database is empty.

        Safe when many processes open one fresh path at once: the schema is created in one
        ``BEGIN IMMEDIATE`` transaction, and the check that decides whether to create it runs inside
        that transaction, so a process that arrives while another creates the schema waits for it
        instead of seeing a half-made database. Locks that SQLite reports without waiting (changing
        the journal mode of a fresh file) are retried until ``timeout``.
        """
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
        marker = self._marker(conn)
        current = marker == SCHEMA_VERSION
        if marker is None:
            self._refuse_foreign(conn)  # before the pragmas below write to the file
        if current and self._has_identity(conn) and self._has_samples(conn):
            self._pragmas(conn)  # the common case: an existing store, nothing to write
            return
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                self._pragmas(conn)
                conn.execute("BEGIN IMMEDIATE")
                try:
                    self._create_or_check(conn)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                return
            except sqlite3.OperationalError as exc:
                if current and "readonly" in str(exc):
                    return  # an older read-only store: readable as it is, the new column stays absent
                if not _is_busy(exc) or time.monotonic() > deadline:
                    raise StoreError(f"{self.path}: cannot open store ({_reason(exc)})") from None
                time.sleep(0.01)
            except sqlite3.DatabaseError as exc:
                raise self._unusable(exc) from None

    def _refuse_foreign(self, conn: sqlite3.Connection) -> None:
        """A database with tables but none of shiftbench's is someone else's: refused without a write (not
        even the switch to WAL). A reader also refuses one without tables (it never makes a store)."""
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                return  # being created by another process: decided under the write lock
            raise
        if tables and "meta" not in tables:
            raise StoreError(f"{self.path}: not a shiftbench store (no shiftbench tables)")
        if not tables and not self._create:
            raise StoreError(f"{self.path}: not a shiftbench store (an SQLite database without tables)")

    @staticmethod
    def _pragmas(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")

    def _marker(self, conn: sqlite3.Connection) -> str | None:
        """The schema version recorded in the store (None when there is no marker or no table yet)."""
        try:
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone():
                return None
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (_MAGIC_KEY,)).fetchone()
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                return None  # being created by another process: decided under the write lock
            raise StoreError(f"{self.path}: cannot read store ({_reason(exc)})") from None
        except sqlite3.DatabaseError as exc:
            raise self._unusable(exc) from None
        return None if row is None else str(row[0])

    @staticmethod
    def _has_samples(conn: sqlite3.Connection) -> bool:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'samples'").fetchone() is not None

    @staticmethod
    def _has_identity(conn: sqlite3.Connection) -> bool:
        return any(r[1] == "identity_json" for r in conn.execute("PRAGMA table_info(runs)"))

    def _create_or_check(self, conn: sqlite3.Connection) -> None:
        """Inside the write lock: create the schema in an empty database, else check the marker."""
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            for statement in _SCHEMA.strip().split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (_MAGIC_KEY, SCHEMA_VERSION))
            return
        if "meta" not in tables:
            raise StoreError(f"{self.path}: not a shiftbench store (no shiftbench tables)")
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (_MAGIC_KEY,)).fetchone()
        if row is None:
            raise StoreError(f"{self.path}: not a shiftbench store (no schema marker)")
        if row[0] != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: store schema {row[0]} is not supported (this version reads {SCHEMA_VERSION})")
        if not self._has_identity(conn):  # a store written before run identities: add the column
            conn.execute("ALTER TABLE runs ADD COLUMN identity_json TEXT")
        conn.execute(_SAMPLES_TABLE)  # a store written before per-sample values: add the (empty) table

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; taken IMMEDIATE so concurrent writers queue instead of deadlocking.

        SQLite's own failures (a full disk, a read-only file, an I/O error) become one StoreError that
        names the store and the reason; the transaction is rolled back, so nothing half-written stays.
        """
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot write to the store: {_reason(exc)}") from None
        try:
            yield conn
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"{self.path}: cannot write to the store: {_reason(exc)}") from None
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise StoreError(f"{self.path}: cannot write to the store: {_reason(exc)}") from None

    @contextlib.contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """Reads of stored data: SQLite's failures (a damaged page, a missing column) and stored values that do
        not decode (damaged bytes) become one StoreError naming the store and ``what`` was being read."""
        try:
            yield
        except StoreError:
            raise
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read {what}: {_reason(exc)}") from None
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            reason = " ".join(str(exc).split())[:200]
            raise StoreError(f"{self.path}: the store is damaged: cannot decode {what} "
                             f"({type(exc).__name__}: {reason}); restore it from a copy") from None

    def _unusable(self, exc: BaseException) -> StoreError:
        """A file SQLite cannot read as a database: damaged pages, or no database at all."""
        text = " ".join(str(exc).split())[:200]
        if isinstance(exc, UnicodeDecodeError) or any(w in text.lower() for w in ("malformed", "corrupt", "i/o")):
            return self._damaged(f"cannot open it ({type(exc).__name__}: {text})" if isinstance(exc, UnicodeDecodeError)
                                 else f"cannot open it ({text})")
        return StoreError(f"{self.path}: not a shiftbench store ({text})")

    def _damaged(self, what: str) -> StoreError:
        return StoreError(f"{self.path}: the store is damaged: {what}; restore it from a copy")

    def check(self) -> None:
        """Refuse a damaged store in one line (SQLite's ``quick_check`` of every page: a reader that reads it
        all, like the report, then never works from half a table)."""
        with self.reading("the store"):
            problems = [r[0] for r in self._conn.execute("PRAGMA quick_check(3)").fetchall()]
        if problems != ["ok"]:
            raise self._damaged(f"integrity check: {' '.join(str(problems[0]).split())[:200]}")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

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
        old one (and the same inputs resume that new run later, with or without ``new_run``).
        A ``run_id`` already used by another spec is refused.
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
            run_id = keyed if new_run and keyed else f"run-{digest[:12]}"
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
            raise StoreError(
                f"run {run_id}: {'; '.join(changes) or 'inputs changed'}; "
                + ("choose another --run-id" if new_run else "pass --new-run (new_run=True) to start a new run")
            )
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
    def condition(self, run_id: str, key: ConditionKey) -> int:
        """The id of a condition of ``run_id`` (created pending if new)."""
        args = (run_id, key.model, key.dataset, key.shift, key.params_json, int(key.severity))
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
                    "severity": int(r["severity"]), "metric": r["metric"], "kind": r["kind"],
                    "ids": json.loads(r["ids"]), "values": _npy_array(bytes(r["data"]))} for r in rows]
        for d in out:
            self._typed(d, "per-sample record", {**_CONDITION_TYPES, "metric": (str,), "kind": (str,), "ids": (list,)})
            if len(d["ids"]) != len(d["values"]):
                raise self._damaged(f"{len(d['ids'])} sample ids for {len(d['values'])} values ({d['metric']})")
        return out

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

    def holds_work(self, own_run: str | None = None) -> bool:
        """Whether the store holds anything worth keeping: a result (a finished condition) or a run
        other than ``own_run`` (another process's). A store that holds neither may be removed by its
        creator; the saved batches of an unfinished first condition are redone by a rerun anyway."""
        with self.reading("its runs"):
            return self._conn.execute(
                "SELECT EXISTS (SELECT 1 FROM results) OR EXISTS (SELECT 1 FROM runs WHERE run_id IS NOT ?)",
                (own_run,)).fetchone()[0] == 1

    def integrity_check(self) -> str:
        return self._conn.execute("PRAGMA integrity_check").fetchone()[0]
