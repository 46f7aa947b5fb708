"""The store's one error type (a :class:`depthlab.errors.UserError`, so the CLI shows it as one line), and the line
for the database failing under a query."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from depthlab.errors import UserError

BUSY_TIMEOUT_S = 30.0  # how long a connection waits for a lock another process holds
MAX_STATEMENT_S = 20.0  # how long one read may run (100,000 runs list in seconds; a recursive view never ends)


class StoreError(UserError):
    """A problem with the experiment store the user can fix (newer schema, not a store, unknown run)."""


def database_failure(db_path: Path, error: sqlite3.DatabaseError) -> StoreError:
    """The one line for SQLite failing under a query: the store, what happened, and what the user can do."""
    text = " ".join(str(error).split())
    if getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in text:
        return StoreError(f"store {db_path}: the disk is full ({text}); free space and run the command again (what "
                          f"finished is kept)")
    if text == "interrupted":  # the progress handler's deadline (connection._bound)
        return StoreError(f"store {db_path}: a read ran past {MAX_STATEMENT_S:.0f} s and was stopped (the file may "
                          f"have been edited: `sqlite3 {db_path} .schema` shows what it holds)")
    if "locked" in text or "busy" in text:
        return StoreError(f"store {db_path}: locked by another process for over {BUSY_TIMEOUT_S:.0f} s ({text}); "
                          f"try again when it has finished")
    if "readonly" in text:
        return StoreError(f"store {db_path}: cannot be written ({text})")
    return StoreError(f"store {db_path}: {text} (the file may be damaged: `sqlite3 {db_path} 'PRAGMA "
                      f"integrity_check'` says where)")
