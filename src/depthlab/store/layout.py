"""Where things live under a store root, and which run ids may name a folder there::

    <root>/depthlab.sqlite      runs, metrics, records and the artifact index
    <root>/artifacts/<run_id>/  files written by a run (checkpoints, probes, plots)
    <root>/reproduced/          one manifest per preset and scale ``depthlab reproduce`` ran (``.reproduced``)
    <root>/figures/             the figures ``depthlab reproduce`` and ``capability`` draw (by default)
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from depthlab.bounded import kind_of
from depthlab.store.errors import StoreError

DB_NAME = "depthlab.sqlite"
ARTIFACTS_DIR = "artifacts"
ENV_VAR = "DEPTHLAB_STORE"
DEFAULT_DIR = "depthlab-runs"

_SAFE_ID = re.compile(r"^[A-Za-z0-9_.\-]+$")


def default_store_path() -> Path:
    """The store root when the caller names none: ``$DEPTHLAB_STORE`` if set, else ``./depthlab-runs``."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser().absolute()
    return Path(DEFAULT_DIR).absolute()


def database_path(root: str | Path) -> Path:
    """The SQLite database file of the store rooted at ``root``."""
    return Path(root) / DB_NAME


def artifacts_folder(root: str | Path) -> Path:
    """The folder that holds one sub-folder of artifact files per run, in the store rooted at ``root``."""
    return Path(root) / ARTIFACTS_DIR


def is_valid_run_id(run_id: Any) -> bool:
    """Whether ``run_id`` can name a folder: letters, digits, '_', '-' and '.', and not '.' or '..'."""
    return isinstance(run_id, str) and bool(_SAFE_ID.match(run_id)) and run_id not in (".", "..")


def check_run_id(run_id: Any) -> str:
    """``run_id`` unchanged if :func:`is_valid_run_id`, else a :class:`StoreError`."""
    if not is_valid_run_id(run_id):
        raise StoreError(f"invalid run id {run_id!r}: use letters, digits, '_', '-' and '.' only")
    return run_id


def check_store_path(root: Path, source: str = "--store") -> None:
    """A StoreError naming what stands where the store's folder or database should be: a file, a device, a
    dangling symlink (``source`` says where the path came from: ``--store``, ``$DEPTHLAB_STORE``)."""
    chain = [*reversed(root.parents), root]
    blocker = next((p for p in chain if (p.exists() or p.is_symlink()) and not p.is_dir()), None)
    if blocker is not None:
        if blocker.is_symlink() and not blocker.exists():
            what = f"a symlink to {os.readlink(blocker)}, which does not exist"
        else:
            what = kind_of(blocker.stat().st_mode) or "a file"
        where = f"is {what}" if blocker == root else f"is under {blocker}, which is {what}"
        raise StoreError(f"{source}: {root} {where}; a store is a folder (depthlab creates it)")
    db = database_path(root)
    if db.is_symlink() or db.exists():
        kind = kind_of(db.stat().st_mode) if db.exists() else "a dangling symlink"
        if kind is not None:
            raise StoreError(f"{source}: {db} is {kind}, not a database file; pass another store path")
