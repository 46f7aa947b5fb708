"""Opening the store's SQLite database so that several processes can write to it at once.

A connection waits up to :data:`BUSY_TIMEOUT_S` for a lock held by another process, runs in WAL mode (readers
do not block the writer) with ``synchronous = NORMAL``, and begins every write as ``IMMEDIATE`` (it takes the
write lock at ``BEGIN``, so two writers queue instead of failing with a deadlock later).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from depthlab.store.errors import BUSY_TIMEOUT_S, MAX_STATEMENT_S
from depthlab.store.schema import check_existing, ensure_schema, read_version

MAX_VALUE_BYTES = 64 << 20  # one text or blob a read returns: a config or a record is a few KB
PROGRESS_OPS = 100_000  # SQLite virtual-machine steps between two looks at the clock (about a millisecond)


def open_database(db_path: Path, mode: str = "create") -> sqlite3.Connection:
    """A connection to the store database at ``db_path`` (its folder must exist); a
    :class:`~depthlab.store.errors.StoreError` for a schema version it does not know or a file that is not a store.

    ``mode``: ``create`` makes the database with its schema where there is none (and adds tables added since);
    ``existing`` opens a store that must already be one, changing nothing of its schema; ``read`` opens it
    read-only (SQLite's ``mode=ro``: the file is never written; SQLite may still create its ``-wal`` and
    ``-shm`` companions to read a store in WAL mode) and bounded (:func:`_bound`)."""
    if mode == "read":
        conn = sqlite3.connect(f"{db_path.absolute().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S,
                               check_same_thread=False)
        _bound(conn)
    else:
        conn = sqlite3.connect(db_path, timeout=BUSY_TIMEOUT_S, isolation_level="IMMEDIATE", check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        version = read_version(conn, db_path)  # refuse a newer store before switching its journal mode
        if mode != "create":
            check_existing(conn, db_path, version)
        if mode == "read":
            return conn
        _enable_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        if mode == "create":
            ensure_schema(conn, db_path, version)
    except BaseException:
        conn.close()
        raise
    return conn


def _bound(conn: sqlite3.Connection) -> None:
    """SQLite's own limits on what a read may cost: a text or blob of at most :data:`MAX_VALUE_BYTES`, a schema
    that is not trusted (its views and triggers may not call functions with side effects), and each
    statement stopped (``interrupted``: a StoreError) once it has run :data:`MAX_STATEMENT_S` seconds, by a
    progress handler timed from the statement's start (the trace callback marks it)."""
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.execute("PRAGMA trusted_schema = OFF")  # SQLite's advice for a file from elsewhere: no functions in views
    started = [time.monotonic()]
    conn.set_trace_callback(lambda _sql: started.__setitem__(0, time.monotonic()))
    conn.set_progress_handler(lambda: time.monotonic() - started[0] > MAX_STATEMENT_S, PROGRESS_OPS)


def _enable_wal(conn: sqlite3.Connection) -> None:
    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
        return
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:  # switching to WAL needs a lock other openers may hold for a moment
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
