"""The store's tables and their version: created on first open, checked on every open.

The version lives in SQLite's ``user_version``. A store of a version this depthlab does not know (newer than
:data:`SCHEMA_VERSION`, or negative: no depthlab writes one) is refused (an older depthlab must not write to it);
tables added since version 1 was released are created where missing, additively, so the version stays 1. A
store opened only to be read (:func:`check_existing`) is never created, migrated or rewritten: it must already be
a store of this version, with its ``runs`` table, and none of depthlab's table names taken by a view.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from depthlab.store.errors import StoreError

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    task TEXT,
    model TEXT,
    config TEXT,
    status TEXT,
    step INTEGER,
    created REAL,
    updated REAL,
    final TEXT,
    error TEXT,
    group_id TEXT,
    tags TEXT
);
CREATE TABLE IF NOT EXISTS metrics (
    run_id TEXT,
    step INTEGER,
    split TEXT,
    name TEXT,
    value REAL,
    PRIMARY KEY (run_id, step, split, name)
);
CREATE INDEX IF NOT EXISTS metrics_run_id ON metrics(run_id);
CREATE TABLE IF NOT EXISTS artifacts (
    run_id TEXT,
    kind TEXT,
    name TEXT,
    path TEXT,
    meta TEXT,
    created REAL,
    PRIMARY KEY (run_id, kind, name)
);
CREATE TABLE IF NOT EXISTS records (
    run_id TEXT,
    key TEXT,
    value TEXT,
    created REAL,
    PRIMARY KEY (run_id, key)
);
"""
TABLES = frozenset({"runs", "metrics", "artifacts", "records"})  # records: added after version 1 was released


def read_version(conn: sqlite3.Connection, db_path: Path) -> int:
    """The schema version of the database behind ``conn`` (0 if new); a :class:`StoreError` if it is newer
    than this depthlab's or the file is not an SQLite database."""
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.OperationalError:  # a lock or an I/O problem, not a foreign file: let it through
        raise
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{db_path} is not a depthlab store ({e}); pass another --store path") from None
    _check_version(version, db_path)
    return version


def ensure_schema(conn: sqlite3.Connection, db_path: Path, version: int) -> None:
    """Bring a database of schema ``version`` (from :func:`read_version`) to :data:`SCHEMA_VERSION`."""
    if version < SCHEMA_VERSION:
        _create_schema(conn, db_path)
    else:
        _add_missing_tables(conn)


def check_existing(conn: sqlite3.Connection, db_path: Path, version: int) -> set[str]:
    """The tables of an existing store opened without creating or migrating it (a StoreError unless it is a
    depthlab store of this version with its ``runs`` table)."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    impostors = sorted(conn.execute(f"SELECT type, name FROM sqlite_master WHERE type != 'table' AND name IN "
                                    f"({', '.join('?' * len(TABLES))})", sorted(TABLES)))
    if impostors:  # a view named `metrics` (an endless recursive one hung every read): not depthlab's data
        kind, name = impostors[0]
        raise StoreError(f"store {db_path}: {name} is a {kind}, not the table depthlab writes (the file was edited); "
                         f"depthlab reads only its own tables (pass another --store path)")
    if version != SCHEMA_VERSION or "runs" not in tables:
        size = db_path.stat().st_size if db_path.exists() else 0
        what = "is empty (0 bytes)" if not size else f"has schema version {version} and tables {sorted(tables)[:4]}"
        raise StoreError(f"store {db_path} {what}: not a depthlab store; reading commands never create or repair "
                         f"one (pass another --store path)")
    return tables


def _check_version(version: int, db_path: Path) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"store {db_path} has schema version {version}, newer than the {SCHEMA_VERSION} this "
            f"depthlab knows: upgrade depthlab (pip install -U depthlab) or use another --store path"
        )
    if version < 0:
        raise StoreError(f"store {db_path} has schema version {version}, which no depthlab writes (the file was "
                         f"edited or damaged); nothing was changed; use another --store path")


@contextlib.contextmanager
def _immediate_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):  # a COMMIT that failed (a full disk) may have ended it already
            conn.execute("ROLLBACK")
        raise


def _create_schema(conn: sqlite3.Connection, db_path: Path) -> None:
    with _immediate_transaction(conn):
        # Read the version again under the write lock: another process may have created the schema meanwhile.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        _check_version(version, db_path)
        if version < SCHEMA_VERSION:
            foreign = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if foreign and "runs" not in foreign:
                raise StoreError(f"{db_path} is a database of another program (tables {sorted(foreign)[:4]}), "
                                 f"not a depthlab store; pass another --store path")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _add_missing_tables(conn: sqlite3.Connection) -> None:
    """Tables added since version 1 (and any a hand edit dropped: created empty, as the first open would have)."""
    present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if present >= TABLES:
        return
    with _immediate_transaction(conn):
        for statement in _SCHEMA.split(";"):  # every statement is CREATE … IF NOT EXISTS
            if statement.strip():
                conn.execute(statement)
