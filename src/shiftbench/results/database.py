"""The SQLite database under the results store: opening a file (refusing one that is not a store), the
schema marker and the schema's creation or upgrade, the pragmas, and the write and read contexts that turn
SQLite's failures into one StoreError naming the store and the reason.

Every write is one transaction (``BEGIN IMMEDIATE`` in WAL mode), taken so concurrent writers queue instead
of deadlocking; ``busy_timeout`` makes them wait their turn. The records themselves (runs, conditions,
results, ...) are :class:`.store.Store`'s.

Schema versions (the ``shiftbench_schema`` row of ``meta``):

- ``1``: per-sample values as one ``samples`` row per (condition, metric) holding the sample ids as a JSON list
  and the values as float64 ``.npy`` bytes (an early schema 1 store has no ``samples`` table at all, and
  none of them ``runs.identity_json``); a finished condition's ``batches`` rows were kept.
- ``2``: each distinct id list is stored once, zlib-compressed, in ``sample_ids`` (keyed by the SHA-256 of
  its JSON), and ``samples.ids`` holds that digest; ``samples.data`` is the values in the narrowest dtype
  that gives every float64 back bit for bit (uint8, float32 or float64; codec.py ``narrowest``) as
  zlib-compressed ``.npy`` bytes. A finished condition keeps no ``batches`` rows. Each ``samples`` row says
  which encoding it has (a JSON list starts with ``[``; ``.npy`` bytes with ``\x93NUMPY``), so a schema 2
  store that also holds schema 1 rows reads them all exactly.

A store whose marker this version does not read (a later schema) is refused in one line, never read
half-understood; a shiftbench that reads only schema 1 refuses a schema 2 store the same way. Opened for
writing, a schema 1 store is upgraded in place in one transaction: the missing tables and column are added and
the marker becomes ``2``; the rows it holds keep their bytes. That is safe even while an older shiftbench
still writes it (it checked the marker when it opened and writes schema 1 rows, which read as they did). A
reader (report, export, leaderboard) never upgrades: it reads either schema as it is. A read-only schema 1
file opened for writing stays as it is (every write then fails in one line).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any, Iterator, Self

from ..errors import StoreError

SCHEMA_VERSION = "2"
# the schemas this version reads: a schema 1 store reads as it was written; opened for writing it is upgraded
# to 2 in place (module doc, "Schema versions")
READABLE = ("1", "2")
_MAGIC_KEY = "shiftbench_schema"
_SQLITE_HEADER = b"SQLite format 3\x00"

# conditions.severity has INTEGER affinity: a whole severity is stored (and read back) as an int, an in-between
# one (2.5, shiftbench.severity) as a REAL, read back as the float 2.5; no schema change was needed for them
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
CREATE TABLE IF NOT EXISTS sample_ids (
    digest TEXT PRIMARY KEY,
    n INTEGER NOT NULL,
    ids BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS predictions (
    condition_id INTEGER NOT NULL REFERENCES conditions(condition_id),
    sample_id TEXT NOT NULL,
    prediction TEXT NOT NULL,
    PRIMARY KEY (condition_id, sample_id)
);
"""


# added after schema 1 was released: stores made before it get the table when next opened for writing
# (and simply hold no per-sample values); a reader (report, export, leaderboard) never adds it: an older
# store read by one reads as having none, and its bytes stay as they were
_SAMPLES_TABLE = _SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS samples"):].split(";")[0]
# added by schema 2: the distinct id lists that samples rows refer to by digest
_SAMPLE_IDS_TABLE = _SCHEMA[_SCHEMA.index("CREATE TABLE IF NOT EXISTS sample_ids"):].split(";")[0]


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


class Database:
    """An open shiftbench database file at ``path`` (created with the schema if missing, unless
    ``create`` is False); :class:`.store.Store` adds the records API on top."""

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
            self._conn = self._connect()
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
    def _connect(self) -> sqlite3.Connection:
        """A writer's connection, or (``create=False``) a reader's that never changes the file's bytes.

        A reader never upgrades an older schema nor switches the journal mode; it reads with writes turned off
        (``query_only``). When a write-ahead log is present (a run in progress, or one killed before SQLite
        folded its log into the file), the reader opens the file read-only (``mode=ro``): closing it then never
        folds that log into the file, which a read-write connection closing last would do. Without a log, a
        read-write connection is kept so that the companion files SQLite makes while reading are removed on close.
        """
        if self._create:
            return sqlite3.connect(str(self.path), timeout=self._timeout, isolation_level=None)
        if Path(f"{self.path}-wal").exists():
            uri = "file:" + urllib.parse.quote(str(self.path.resolve())) + "?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=self._timeout, isolation_level=None)
        else:
            conn = sqlite3.connect(str(self.path), timeout=self._timeout, isolation_level=None)
        conn.execute("PRAGMA query_only = ON")
        return conn

    def _open_to_read(self, conn: sqlite3.Connection, marker: str | None) -> None:
        """A reader's checks: a shiftbench store of this schema, read as it is (no upgrade, no pragma written)."""
        if marker is None:
            self._refuse_foreign(conn)  # no tables at all, or someone else's
            try:
                has_meta = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
            except sqlite3.DatabaseError as exc:
                raise self._unusable(exc) from None
            if has_meta:
                raise StoreError(f"{self.path}: not a shiftbench store (no schema marker)")
            raise StoreError(f"{self.path}: cannot read the store: another process is creating it; try again when it has started")
        if marker not in READABLE:
            raise self._unsupported(marker)

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
        if not self._create:
            self._open_to_read(conn, marker)
            return
        current = marker == SCHEMA_VERSION
        if marker is None:
            self._refuse_foreign(conn)  # before the pragmas below write to the file
        if current and self._has_identity(conn) and self._has_samples(conn) and self._has_table(conn, "sample_ids"):
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
                if marker in READABLE and "readonly" in str(exc):
                    return  # an older read-only store: readable as it is, never upgraded (writes fail in one line)
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
    def _has_table(conn: sqlite3.Connection, name: str) -> bool:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None

    @classmethod
    def _has_samples(cls, conn: sqlite3.Connection) -> bool:
        return cls._has_table(conn, "samples")

    def _unsupported(self, marker: str) -> StoreError:
        return StoreError(f"{self.path}: store schema {marker} is not supported (this version reads schema "
                          f"{' and '.join(READABLE)}; a later shiftbench wrote it: read it with that version)")

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
        if row[0] not in READABLE:
            raise self._unsupported(str(row[0]))
        if not self._has_identity(conn):  # a store written before run identities: add the column
            conn.execute("ALTER TABLE runs ADD COLUMN identity_json TEXT")
        conn.execute(_SAMPLES_TABLE)  # a store written before per-sample values: add the (empty) table
        conn.execute(_SAMPLE_IDS_TABLE)  # schema 1 -> 2: the id lists' table; the rows already there keep their bytes
        if row[0] != SCHEMA_VERSION:
            conn.execute("UPDATE meta SET value = ? WHERE key = ?", (SCHEMA_VERSION, _MAGIC_KEY))

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

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
