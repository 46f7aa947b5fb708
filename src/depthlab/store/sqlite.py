"""The embedded experiment store: one SQLite database plus an artifact folder under a root directory.

Layout of a store root::

    <root>/depthlab.sqlite      runs, metrics and the artifact index (WAL mode)
    <root>/artifacts/<run_id>/  files written by a run (checkpoints, probes, plots)

Several processes may write to one store at once (WAL journal, 30 s busy timeout, every write in an
``IMMEDIATE`` transaction). A :class:`Store` opens its connection lazily per process, so a store object
that crosses a ``fork`` (or is pickled to a spawned worker) opens a fresh connection there.

Everything written as JSON goes through :func:`to_jsonable` and ``allow_nan=False``: NaN and ±inf become
``null``, so a diverged run never produces invalid JSON. Metric values are stored as REAL; a NaN is
stored as NULL and read back as NaN.

This module imports only the standard library, numpy and ``depthlab.errors``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from depthlab.errors import UserError

SCHEMA_VERSION = 1
DB_NAME = "depthlab.sqlite"
ARTIFACTS_DIR = "artifacts"
ENV_VAR = "DEPTHLAB_STORE"
DEFAULT_DIR = "depthlab-runs"
BUSY_TIMEOUT_S = 30.0

STATUSES = ("pending", "running", "done", "failed", "diverged", "interrupted")

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
# Tables added after schema version 1 was first released, created on open where missing (additive: an
# older depthlab ignores them, so the schema version stays 1).
_ADDED_TABLES = {
    "records": "CREATE TABLE IF NOT EXISTS records "
    "(run_id TEXT, key TEXT, value TEXT, created REAL, PRIMARY KEY (run_id, key))",
}

_RUN_COLUMNS = "id, task, model, config, status, step, created, updated, final, error, group_id, tags"
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.\-]+$")
_IN_CHUNK = 500  # ids per IN (...) clause, well below SQLite's variable limit


class StoreError(UserError):
    """A problem with the experiment store the user can fix (newer schema, not a store, unknown run)."""


def default_store_path() -> Path:
    """The store root when the caller names none: ``$DEPTHLAB_STORE`` if set, else ``./depthlab-runs``."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser().absolute()
    return Path(DEFAULT_DIR).absolute()


# --------------------------------------------------------------------------------------------- JSON


def to_jsonable(obj: Any) -> Any:
    """``obj`` with NaN/±inf replaced by None, numpy scalars/arrays by Python values, tuples by lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, str | bool | int):
        return obj
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item())
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, dict):
        return {_json_key(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return obj  # let json.dumps raise on anything it cannot write


def _json_key(key: Any) -> Any:
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, float) and not math.isfinite(key):
        return str(key)
    return key


def dumps(obj: Any, **kwargs: Any) -> str:
    """Strict JSON (``allow_nan=False``) of ``to_jsonable(obj)``."""
    return json.dumps(to_jsonable(obj), allow_nan=False, **kwargs)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# ------------------------------------------------------------------------------------- atomic files


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, ``os.replace``, fsync dir.

    Readers see either the old file or the complete new one, never a partial file; on failure the temp
    file is removed and the old file is left as it was.
    """
    path = Path(path)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        mode = 0o666 & ~_UMASK
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = 2) -> None:
    """Write ``obj`` as strict JSON (NaN/inf → null) to ``path`` atomically (:func:`atomic_write_bytes`)."""
    text = dumps(obj, indent=indent)
    atomic_write_bytes(path, (text + "\n").encode("utf-8"))


# -------------------------------------------------------------------------------------------- store


def _check_status(status: str) -> None:
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}; expected one of {', '.join(STATUSES)}")


def _check_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not _SAFE_ID.match(run_id) or run_id in (".", ".."):
        raise StoreError(f"invalid run id {run_id!r}: use letters, digits, '_', '-' and '.' only")
    return run_id


def _value(v: Any) -> float | None:
    if v is None:
        return None
    x = float(v)
    return None if math.isnan(x) else x


class Store:
    """An experiment store rooted at ``root`` (created if missing): runs, metrics and artifacts."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().absolute()
        self.db_path = self.root / DB_NAME
        self.artifacts_root = self.root / ARTIFACTS_DIR
        self._conn_: sqlite3.Connection | None = None
        self._pid: int | None = None
        self._lock = threading.RLock()
        self._stale: list[sqlite3.Connection] = []
        self._conn()  # open now: create the store, or refuse a newer schema, at construction

    # ---------------------------------------------------------------- connection handling

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.root = state["root"]
        self.db_path = self.root / DB_NAME
        self.artifacts_root = self.root / ARTIFACTS_DIR
        self._conn_ = None
        self._pid = None
        self._lock = threading.RLock()
        self._stale = []

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close this process's connection (a later call reopens it)."""
        if self._conn_ is not None:
            if self._pid == os.getpid():
                with self._lock:
                    self._conn_.close()
            else:  # inherited across fork: the parent's handle, not ours to close
                self._stale.append(self._conn_)
        self._conn_ = None
        self._pid = None

    def _conn(self) -> sqlite3.Connection:
        pid = os.getpid()
        if self._conn_ is not None and self._pid == pid:
            return self._conn_
        if self._conn_ is not None:
            # Inherited across fork: never use or close the parent's handle here (closing could disturb
            # the parent's locks); keep a reference so it is not finalised, and open our own.
            self._stale.append(self._conn_)
            self._conn_ = None
            self._lock = threading.RLock()
        self._conn_ = self._open()
        self._pid = pid
        return self._conn_

    def _open(self) -> sqlite3.Connection:
        self.root.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.db_path, timeout=BUSY_TIMEOUT_S, isolation_level="IMMEDIATE", check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            try:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.OperationalError:
                raise
            except sqlite3.DatabaseError as e:
                raise StoreError(
                    f"{self.db_path} is not a depthlab store ({e}); pass another --store path"
                ) from None
            self._check_version(version)
            self._enable_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            if version < SCHEMA_VERSION:
                self._init_schema(conn)
            else:
                self._add_missing_tables(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"store {self.db_path} has schema version {version}, newer than the {SCHEMA_VERSION} this "
                f"depthlab knows: upgrade depthlab (pip install -U depthlab) or use another --store path"
            )

    @staticmethod
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

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            self._check_version(version)
            if version < SCHEMA_VERSION:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @staticmethod
    def _add_missing_tables(conn: sqlite3.Connection) -> None:
        present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [sql for name, sql in _ADDED_TABLES.items() if name not in present]
        if not missing:
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            for sql in missing:
                conn.execute(sql)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on error)."""
        with self._lock:
            conn = self._conn()
            with conn:
                yield conn

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._conn().execute(sql, params).fetchall()

    # ------------------------------------------------------------------------------ runs

    @staticmethod
    def run_id(config: dict) -> str:
        """Stable run id: first 16 hex chars of sha256 of the canonical JSON of ``config`` (seed included)."""
        canonical = json.dumps(to_jsonable(config), sort_keys=True, separators=(",", ":"), allow_nan=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]

    def create_run(
        self,
        config: dict,
        task: str,
        model: str,
        group_id: str | None = None,
        tags: list[str] | None = None,
    ) -> str:
        """Insert the run as "pending" unless it exists (an existing run is never reset); return its id."""
        rid = self.run_id(config)
        now = time.time()
        with self._write() as conn:
            conn.execute(
                f"INSERT OR IGNORE INTO runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    rid,
                    task,
                    model,
                    dumps(config),
                    "pending",
                    0,
                    now,
                    now,
                    None,
                    None,
                    group_id,
                    dumps(list(tags or [])),
                ),
            )
        return rid

    @staticmethod
    def _run_dict(row: tuple) -> dict[str, Any]:
        rid, task, model, config, status, step, created, updated, final, error, group_id, tags = row
        return {
            "id": rid,
            "task": task,
            "model": model,
            "config": _loads(config),
            "status": status,
            "step": step,
            "created": created,
            "updated": updated,
            "final": _loads(final),
            "error": error,
            "group_id": group_id,
            "tags": _loads(tags) or [],
        }

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The run as a dict (config/final/tags parsed), or None if there is no such run."""
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,))
        return self._run_dict(rows[0]) if rows else None

    def find_runs(
        self,
        status: str | list[str] | None = None,
        task: str | None = None,
        ids: list[str] | None = None,
        tag: str | None = None,
    ) -> list[dict[str, Any]]:
        """Runs matching every given filter, ordered by creation time then id."""
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            if not statuses:
                return []
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            params.extend(statuses)
        if task is not None:
            where.append("task = ?")
            params.append(task)
        chunks: Iterable[list[str] | None] = [None]
        if ids is not None:
            unique = list(dict.fromkeys(ids))
            if not unique:
                return []
            chunks = [unique[i : i + _IN_CHUNK] for i in range(0, len(unique), _IN_CHUNK)]
        rows: list[tuple] = []
        for chunk in chunks:
            clauses, args = list(where), list(params)
            if chunk is not None:
                clauses.append(f"id IN ({', '.join('?' * len(chunk))})")
                args.extend(chunk)
            sql = f"SELECT {_RUN_COLUMNS} FROM runs"
            if clauses:
                sql += " WHERE " + " AND ".join(clauses)
            rows.extend(self._read(sql, args))
        runs = [self._run_dict(r) for r in rows]
        if tag is not None:
            runs = [r for r in runs if tag in r["tags"]]
        runs.sort(key=lambda r: (r["created"], r["id"]))
        return runs

    def _update_run(self, conn: sqlite3.Connection, run_id: str, sets: dict[str, Any]) -> None:
        sets = {**sets, "updated": time.time()}
        assignments = ", ".join(f"{k} = ?" for k in sets)
        cur = conn.execute(f"UPDATE runs SET {assignments} WHERE id = ?", (*sets.values(), run_id))
        if cur.rowcount == 0:
            raise StoreError(f"no run {run_id!r} in store {self.root}")

    def set_status(self, run_id: str, status: str, step: int | None = None, error: str | None = None) -> None:
        """Set the run's status (and step if given); ``error`` replaces the stored error (None clears it)."""
        _check_status(status)
        sets: dict[str, Any] = {"status": status, "error": error}
        if step is not None:
            sets["step"] = int(step)
        with self._write() as conn:
            self._update_run(conn, run_id, sets)

    def finish_run(
        self,
        run_id: str,
        final: dict,
        status: str = "done",
        step: int | None = None,
        error: str | None = None,
    ) -> None:
        """Record the final metrics (NaN/inf → null) and the status in one transaction."""
        _check_status(status)
        sets: dict[str, Any] = {"final": dumps(final), "status": status, "error": error}
        if step is not None:
            sets["step"] = int(step)
        with self._write() as conn:
            self._update_run(conn, run_id, sets)

    def delete_run(self, run_id: str) -> None:
        """Delete the run, its metrics, its artifact rows and its artifact folder."""
        with self._write() as conn:
            conn.execute("DELETE FROM metrics WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM artifacts WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM records WHERE run_id = ?", (run_id,))
            conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        if _SAFE_ID.match(run_id) and run_id not in (".", ".."):
            shutil.rmtree(self.artifacts_root / run_id, ignore_errors=True)

    # --------------------------------------------------------------------------- metrics

    def log_metrics(self, run_id: str, step: int, split: str, values: dict[str, float]) -> None:
        """Record ``values`` of one run at ``step``; re-logging a step replaces its rows."""
        self.log_metrics_many([(run_id, step, split, values)])

    def log_metrics_many(self, rows: Sequence[tuple[str, int, str, dict[str, float]]]) -> None:
        """Record metrics of many runs (``(run_id, step, split, values)`` each) in one transaction."""
        flat = [
            (run_id, int(step), split, str(name), _value(v))
            for run_id, step, split, values in rows
            for name, v in values.items()
        ]
        if not flat:
            return
        with self._write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO metrics (run_id, step, split, name, value) VALUES (?, ?, ?, ?, ?)",
                flat,
            )

    def metrics(self, run_id: str, split: str | None = None) -> dict[str, dict[str, list]]:
        """``{split: {"step": [...], name: [...]}}`` ordered by step; a name missing at a step is NaN."""
        sql = "SELECT split, step, name, value FROM metrics WHERE run_id = ?"
        params: list[Any] = [run_id]
        if split is not None:
            sql += " AND split = ?"
            params.append(split)
        table: dict[str, dict[int, dict[str, float]]] = {}
        for sp, step, name, value in self._read(sql + " ORDER BY split, step, name", params):
            table.setdefault(sp, {}).setdefault(step, {})[name] = math.nan if value is None else value
        out: dict[str, dict[str, list]] = {}
        for sp, by_step in table.items():
            steps = sorted(by_step)
            names = sorted({n for vals in by_step.values() for n in vals})
            columns: dict[str, list] = {"step": steps}
            for name in names:
                columns[name] = [by_step[s].get(name, math.nan) for s in steps]
            out[sp] = columns
        return out

    # ------------------------------------------------------------------------- artifacts

    def artifact_path(self, run_id: str, kind: str, name: str) -> Path:
        """Absolute path ``<root>/artifacts/<run_id>/<name>`` for a run's artifact (parent folder created)."""
        run_dir = self.artifacts_root / _check_id(run_id)
        rel = Path(name)
        if not name or rel.is_absolute() or ".." in rel.parts:
            raise StoreError(f"invalid artifact name {name!r}: use a relative path without '..'")
        path = run_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def add_artifact(self, run_id: str, kind: str, name: str, meta: dict | None = None) -> Path:
        """Record the artifact ``(run_id, kind, name)`` (path stored relative to root); return its path."""
        path = self.artifact_path(run_id, kind, name)
        rel = path.relative_to(self.root).as_posix()
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO artifacts (run_id, kind, name, path, meta, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, kind, name, rel, dumps(meta or {}), time.time()),
            )
        return path

    def artifacts(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        """The run's recorded artifacts (keys run_id, kind, name, path (absolute), meta, created)."""
        sql = "SELECT run_id, kind, name, path, meta, created FROM artifacts WHERE run_id = ?"
        params: list[Any] = [run_id]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        rows = self._read(sql + " ORDER BY created, kind, name", params)
        return [
            {
                "run_id": r[0],
                "kind": r[1],
                "name": r[2],
                "path": self.root / r[3],
                "meta": _loads(r[4]) or {},
                "created": r[5],
            }
            for r in rows
        ]

    # --------------------------------------------------------------------------- records

    def put_record(self, run_id: str, key: str, obj: Any) -> None:
        """Store ``obj`` (strict JSON, NaN/inf → null) under ``(run_id, key)``, replacing an earlier one."""
        self.put_records(run_id, {key: obj})

    def put_records(self, run_id: str, items: dict[str, Any]) -> None:
        """Store every ``key: obj`` of ``items`` for ``run_id`` in one transaction (as :meth:`put_record`)."""
        now = time.time()
        rows = [(run_id, str(key), dumps(obj), now) for key, obj in items.items()]
        if not rows:
            return
        with self._write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO records (run_id, key, value, created) VALUES (?, ?, ?, ?)", rows
            )

    def records(self, run_id: str) -> dict[str, Any]:
        """Every record of ``run_id`` as ``{key: obj}``, ordered by key (empty if there is none)."""
        rows = self._read("SELECT key, value FROM records WHERE run_id = ? ORDER BY key", (run_id,))
        return {key: _loads(value) for key, value in rows}
