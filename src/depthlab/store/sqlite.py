"""The embedded experiment store: one SQLite database plus an artifact folder under a root directory.

Layout of a store root (see :mod:`depthlab.store.layout`)::

    <root>/depthlab.sqlite      runs, metrics, records and the artifact index (WAL mode)
    <root>/artifacts/<run_id>/  files written by a run (checkpoints, probes, plots)

Several processes may write to one store at once (WAL journal, 30 s busy timeout, every write in an
``IMMEDIATE`` transaction; see :mod:`depthlab.store.connection`). A :class:`Store` opens its connection
lazily per process, so a store object that crosses a ``fork`` (or is pickled to a spawned worker) opens a
fresh connection there.

Everything written as JSON goes through :func:`~depthlab.store.jsonable.to_json` (NaN and ±inf become
``null``, so a diverged run never produces invalid JSON). Metric values are stored as REAL; a NaN is
stored as NULL and read back as NaN.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from depthlab.store.connection import open_database
from depthlab.store.errors import StoreError, database_failure
from depthlab.store.files import ensure_folder
from depthlab.store.jsonable import to_json
from depthlab.store.layout import (
    artifacts_folder,
    check_run_id,
    check_store_path,
    database_path,
    expand_user,
    is_valid_run_id,
)
from depthlab.store.metrics import IN_CHUNK, StoreMetrics
from depthlab.store.rows import STATUSES, DamagedRow, artifact_path, config_value, json_value, run_row

_RUN_COLUMNS = "id, task, model, config, status, step, created, updated, final, error, group_id, tags"
_N_RUN_COLUMNS = _RUN_COLUMNS.count(",") + 1

_PAGE = 2000  # rows fetched at a time by the streaming reads


def _check_status(status: str) -> None:
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}; expected one of {', '.join(STATUSES)}")


def _row_name(row: tuple) -> str:
    """How a message names a ``runs`` row: by its id, or where that is not an id, by its task and creation time."""
    rid = row[0]
    if isinstance(rid, str) and rid:
        return f"run {rid[:40]}"
    return f"a run whose id is {str(rid)[:20]!r} (task {str(row[1])[:40]!r}, created {str(row[6])[:20]})"


class Store(StoreMetrics):
    """An experiment store rooted at ``root``: runs, metrics and artifacts.

    ``create``: make the store when ``root`` holds none, and add tables added since (what training does); with
    False a missing store is a :class:`StoreError` (a mistyped path must not answer "no runs") and nothing of the
    schema is changed. ``readonly``: open it read-only (SQLite ``mode=ro``): what the commands that only read do,
    so they never create, migrate or rewrite anything. A path that cannot hold a store (a file, a dangling
    symlink, a folder under a file, one that cannot be written, a database of another program or of a schema
    version this depthlab does not know) is a :class:`StoreError` naming it; ``source`` says where the path came
    from (``--store``, ``$DEPTHLAB_STORE``). Rows that cannot be read are left out of lists and named in
    :attr:`damage` (:mod:`depthlab.store.rows`); the database failing (disk full, locked, damaged) is a
    :class:`StoreError` naming it.
    """

    def __init__(self, root: str | Path, create: bool = True, readonly: bool = False,
                 source: str = "--store") -> None:
        self._attach(expand_user(root, source).absolute(), "read" if readonly else "create" if create else "existing",
                     source)
        check_store_path(self.root, self.source)
        if self.mode != "create" and not self.db_path.is_file():
            raise StoreError(f"{self.source}: no depthlab store at {self.root} (train runs into one with "
                             f"`depthlab sweep FILE --store {self.root}`)")
        self._conn()  # open now: create the store, or refuse a newer schema, at construction

    # ---------------------------------------------------------------- connection handling

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "mode": self.mode, "source": self.source}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._attach(state["root"], state.get("mode", "create"), state.get("source", "--store"))

    def _attach(self, root: Path, mode: str, source: str) -> None:
        """Point this object at the store under ``root`` with no connection yet (opened on first use)."""
        self.root, self.mode, self.source = root, mode, source
        self.damage: dict[tuple[str, str], str] = {}  # what reads left out, by (row, column): one line each
        self.db_path = database_path(root)
        self.artifacts_root = artifacts_folder(root)
        self._conn_: sqlite3.Connection | None = None
        self._pid: int | None = None
        self._lock = threading.RLock()
        self._stale: list[sqlite3.Connection] = []

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
        """Create the folder if needed and open the database; every way a path can fail is one line."""
        try:
            if self.mode == "create":
                ensure_folder(self.root)
            return open_database(self.db_path, self.mode)
        except PermissionError as e:
            raise StoreError(f"{self.source}: cannot write to {e.filename or self.root}: permission denied") from None
        except sqlite3.OperationalError as e:  # the database cannot be created or opened (read-only, locked, full)
            if "unable to open" not in str(e):
                raise database_failure(self.db_path, e) from None
            raise StoreError(f"{self.source}: cannot open {self.db_path}: {e}") from None
        except sqlite3.DatabaseError as e:
            raise database_failure(self.db_path, e) from None

    def _damaged(self, row: str, column: str, problem: str, left_out: str = "left out") -> None:
        self.damage[(row, column)] = f"store {self.root}: {row}: {problem}; {left_out} (the rest of the store is " \
                                     f"readable)"

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on error)."""
        with self._lock:
            conn = self._conn()
            try:
                with conn:
                    yield conn
            except sqlite3.DatabaseError as e:
                raise database_failure(self.db_path, e) from None

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._conn().execute(sql, params).fetchall()
            except sqlite3.OperationalError as e:
                missing = str(e).removeprefix("no such table: ")
                if missing != str(e) and self.mode != "create":  # a table a hand edit dropped: read as empty
                    self._damaged(f"table {missing}", "", "missing", "read as empty")
                    return []
                raise database_failure(self.db_path, e) from None
            except sqlite3.DatabaseError as e:
                raise database_failure(self.db_path, e) from None

    # ------------------------------------------------------------------------------ runs

    @staticmethod
    def run_id(config: dict) -> str:
        """Stable run id: first 16 hex chars of sha256 of the canonical JSON of ``config`` (seed included)."""
        return Store.config_hash(config)[:16]

    @staticmethod
    def config_hash(config: dict) -> str:
        """SHA-256 (hex) of the canonical JSON of ``config``: what a checkpoint records of the run it belongs to."""
        canonical = to_json(config, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def create_run(
        self,
        config: dict,
        task: str,
        model: str,
        group_id: str | None = None,
        tags: list[str] | None = None,
    ) -> str:
        """Insert the run as "pending" unless it exists (an existing run is never reset); return its id. A run that is
        not there once written (a trigger that deletes it) is a StoreError naming the store and the run."""
        rid = self.run_id(config)
        now = time.time()
        with self._write() as conn:
            conn.execute(
                f"INSERT OR IGNORE INTO runs ({_RUN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    rid,
                    task,
                    model,
                    to_json(config),
                    "pending",
                    0,
                    now,
                    now,
                    None,
                    None,
                    group_id,
                    to_json(list(tags or [])),
                ),
            )
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (rid,)).fetchone() is None:
                raise StoreError(f"store {self.root}: run {rid} is not in table runs after it was written (a "
                                 "trigger or another program deletes runs); nothing was trained; use another --store")
        return rid

    def _run_dict(self, row: tuple) -> dict[str, Any] | None:
        """The run of a ``runs`` row, or None (noted in :attr:`damage`) when the row cannot be read."""
        try:
            return run_row(row)
        except DamagedRow as e:
            self._damaged(_row_name(row), e.column, f"{e}")
            return None

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The run as a dict (config/final/tags parsed), or None if there is no such run; a StoreError naming the
        store, the run and the column when its row cannot be read."""
        rows = self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,))
        if not rows:
            return None
        run = self._run_dict(rows[0])
        if run is None:  # said once, as the error (not also as a warning about what a list left out)
            problem = self.damage.pop(next(k for k in reversed(self.damage) if k[0] == _row_name(rows[0])))
            raise StoreError(problem.replace("; left out (", " ("))
        return run

    def resolve(self, run: str) -> str:
        """The id of the run ``run`` names: its id, or a prefix of exactly one run's id (else a StoreError)."""
        if not run.strip():  # the empty prefix would name any run
            raise StoreError("run: give a run id or a unique prefix of one (see `depthlab runs`)")
        if self.get_run(run) is not None:
            return run
        matches = [row[0] for row in self._read("SELECT id FROM runs WHERE typeof(id) = 'text' AND substr(id, 1, ?) = ?"
                                                " LIMIT 2", (len(run), run))]
        if len(matches) != 1:
            found = "no such run" if not matches else "several runs match (give more of the id)"
            raise StoreError(f"run {run!r}: {found} in store {self.root} (see `depthlab runs`)")
        return matches[0]

    def _run_filters(self, status: str | list[str] | None, task: str | None) -> tuple[list[str], list[Any]] | None:
        """The WHERE clauses and parameters of a status / task filter (None when no run can match)."""
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            if not statuses:
                return None
            where.append(f"status IN ({', '.join('?' * len(statuses))})")
            params.extend(statuses)
        if task is not None:
            where.append("task = ?")
            params.append(task)
        return where, params

    def find_runs(
        self,
        status: str | list[str] | None = None,
        task: str | None = None,
        ids: list[str] | None = None,
        tag: str | None = None,
    ) -> list[dict[str, Any]]:
        """Runs matching every given filter, ordered by creation time then id."""
        if ids is None:
            return list(self.iter_runs(status, task, tag))
        filters = self._run_filters(status, task)
        unique = list(dict.fromkeys(ids))
        if filters is None or not unique:
            return []
        rows: list[tuple] = []
        for i in range(0, len(unique), IN_CHUNK):
            chunk = unique[i : i + IN_CHUNK]
            clauses = [*filters[0], f"id IN ({', '.join('?' * len(chunk))})"]
            rows.extend(self._read(f"SELECT {_RUN_COLUMNS} FROM runs WHERE {' AND '.join(clauses)}",
                                   [*filters[1], *chunk]))
        runs = [run for run in map(self._run_dict, rows) if run is not None]
        if tag is not None:
            runs = [r for r in runs if tag in r["tags"]]
        runs.sort(key=lambda r: (r["created"], r["id"]))
        return runs

    def iter_runs(self, status: str | list[str] | None = None, task: str | None = None, tag: str | None = None,
                  limit: int | None = None, offset: int = 0, cells: bool = False) -> Iterator[dict[str, Any]]:
        """The runs :meth:`find_runs` gives, read a page at a time (memory stays flat in the store's size):
        ordered by creation time then id, from the ``offset``-th (0: the first) for at most ``limit`` runs.

        ``cells``: each run also has ``cell_text``, its config less the seed as SQLite's ``json_remove`` writes it:
        runs with equal texts are of one cell, so work done once per cell can be kept by it (one parse of 100,000
        configs' texts in C, not 100,000 canonical JSON dumps in Python)."""
        filters = self._run_filters(status, task)
        if filters is None or limit == 0:
            return
        where = f" WHERE {' AND '.join(filters[0])}" if filters[0] else ""
        cell = ", CASE WHEN json_valid(config) THEN json_remove(config, '$.seed') END" if cells else ""
        sql = f"SELECT {_RUN_COLUMNS}{cell} FROM runs{where} ORDER BY coalesce(created, 0), id"
        skip, left = offset, limit
        for row in self._stream(sql, filters[1]):
            run = self._run_dict(row[:_N_RUN_COLUMNS])
            if run is None or (tag is not None and tag not in run["tags"]):
                continue
            if cells:
                run["cell_text"] = row[_N_RUN_COLUMNS]
            if skip:
                skip -= 1
                continue
            yield run
            if left is not None:
                left -= 1
                if not left:
                    return

    def count_runs(self, status: str | None = None, task: str | None = None) -> int:
        """How many runs match (damaged rows included: what a listing reads through)."""
        filters = self._run_filters(status, task)
        if filters is None:
            return 0
        where = f" WHERE {' AND '.join(filters[0])}" if filters[0] else ""
        rows = self._read(f"SELECT count(*) FROM runs{where}", filters[1])
        return int(rows[0][0]) if rows else 0

    def run_ids(self) -> list[str]:
        """Every run's id, sorted (rows whose id is not text left out)."""
        return [row[0] for row in self._read("SELECT id FROM runs WHERE typeof(id) = 'text' ORDER BY id")]

    def task_names(self) -> set[str]:
        """The task names the store's runs have."""
        return {row[0] for row in self._read("SELECT DISTINCT task FROM runs WHERE typeof(task) = 'text'")}

    def cell_configs(self, status: str | None = None, task: str | None = None) -> list[dict[str, Any]]:
        """One config (its seed left out) per cell of the matching runs: SQLite's JSON functions drop the seeds and
        the duplicates, so a store of 100,000 runs gives its few hundred cells without parsing every config."""
        filters = self._run_filters(status, task)
        if filters is None:
            return []
        where = " AND ".join(["json_valid(config)", *filters[0]])
        out = []
        for (text,) in self._read(f"SELECT DISTINCT json_remove(config, '$.seed') FROM runs WHERE {where}",
                                  filters[1]):
            with contextlib.suppress(DamagedRow):  # the run itself is named where it is read
                out.append(config_value(text))
        return out

    def _stream(self, sql: str, params: Sequence[Any] = (), page: int = _PAGE) -> Iterator[tuple]:
        """The rows of ``sql``, fetched ``page`` at a time (the same failures as :meth:`_read`)."""
        with self._lock:
            try:
                cursor = self._conn().execute(sql, params)
            except sqlite3.DatabaseError:
                yield from self._read(sql, params)  # names the failure (or reads a dropped table as empty)
                return
        while True:
            with self._lock:
                try:
                    rows = cursor.fetchmany(page)
                except sqlite3.DatabaseError as e:
                    raise database_failure(self.db_path, e) from None
            if not rows:
                return
            yield from rows

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
        sets: dict[str, Any] = {"final": to_json(final), "status": status, "error": error}
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
        if is_valid_run_id(run_id):
            shutil.rmtree(self.run_folder(run_id), ignore_errors=True)

    # ------------------------------------------------------------------------- artifacts

    def run_folder(self, run_id: str) -> Path:
        """The folder ``<root>/artifacts/<run_id>`` of a run's artifact files (the id checked; creates nothing)."""
        return self.artifacts_root / check_run_id(run_id)

    def artifact_path(self, run_id: str, kind: str, name: str) -> Path:
        """Absolute path ``<root>/artifacts/<run_id>/<name>`` for a run's artifact (parent folder created)."""
        run_dir = self.run_folder(run_id)
        rel = Path(name)
        if not name or rel.is_absolute() or ".." in rel.parts:
            raise StoreError(f"invalid artifact name {name!r}: use a relative path without '..'")
        path = run_dir / rel
        ensure_folder(path.parent)
        return path

    def add_artifact(self, run_id: str, kind: str, name: str, meta: dict | None = None) -> Path:
        """Record the artifact ``(run_id, kind, name)`` (path stored relative to root); return its path."""
        path = self.artifact_path(run_id, kind, name)
        rel = path.relative_to(self.root).as_posix()
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO artifacts (run_id, kind, name, path, meta, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, kind, name, rel, to_json(meta or {}), time.time()),
            )
        return path

    def artifacts(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        """The run's recorded artifacts (keys run_id, kind, name, path (absolute), meta, created)."""
        sql = "SELECT run_id, kind, name, path, meta, created FROM artifacts WHERE run_id = ?"
        params: list[Any] = [run_id]
        if kind is not None:
            sql += " AND kind = ?"
            params.append(kind)
        out = []
        for rid, kind_, name, path, meta, created in self._read(sql + " ORDER BY created, kind, name", params):
            try:
                out.append({"run_id": rid, "kind": kind_, "name": name, "path": self.root / artifact_path(path),
                            "meta": json_value(meta, "meta") or {}, "created": created})
            except DamagedRow as e:
                self._damaged(f"run {run_id}", f"artifact {kind_} {name}", f"artifact {name!r}: {e}")
        return out

    # --------------------------------------------------------------------------- records

    def put_record(self, run_id: str, key: str, obj: Any) -> None:
        """Store ``obj`` (strict JSON, NaN/inf → null) under ``(run_id, key)``, replacing an earlier one."""
        self.put_records(run_id, {key: obj})

    def put_records(self, run_id: str, items: dict[str, Any]) -> None:
        """Store every ``key: obj`` of ``items`` for ``run_id`` in one transaction (as :meth:`put_record`)."""
        now = time.time()
        rows = [(run_id, str(key), to_json(obj), now) for key, obj in items.items()]
        if not rows:
            return
        with self._write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO records (run_id, key, value, created) VALUES (?, ?, ?, ?)", rows
            )

    def records(self, run_id: str) -> dict[str, Any]:
        """Every record of ``run_id`` as ``{key: obj}``, ordered by key (empty if there is none)."""
        out = {}
        for key, value in self._read("SELECT key, value FROM records WHERE run_id = ? ORDER BY key", (run_id,)):
            try:
                out[key] = json_value(value, "value")
            except DamagedRow as e:
                self._damaged(f"run {run_id}", f"record {key}", f"record {str(key)[:40]!r}: {e}")
        return out
