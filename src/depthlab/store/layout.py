"""Where things live under a store root, and which run ids may name a folder there::

    <root>/depthlab.sqlite      runs, metrics, records and the artifact index
    <root>/artifacts/<run_id>/  files written by a run (checkpoints, probes, plots)
    <root>/reproduced/          one manifest per preset and scale ``depthlab reproduce`` ran (``.reproduced``)
    <root>/atlas/               what ``depthlab atlas`` keeps besides its runs (``.atlas``)
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
DB_COMPANIONS = ("-wal", "-shm", "-journal")  # the files SQLite keeps beside a database while it is in use
ARTIFACTS_DIR = "artifacts"
REPRODUCED_DIR = "reproduced"
ATLAS_DIR = "atlas"
ENV_VAR = "DEPTHLAB_STORE"
DEFAULT_DIR = "depthlab-runs"

_SAFE_ID = re.compile(r"^[A-Za-z0-9_.\-]+$")


def default_store_path() -> Path:
    """The store root when the caller names none: ``$DEPTHLAB_STORE`` if set, else ``./depthlab-runs``."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return expand_user(env, f"${ENV_VAR}").absolute()
    return Path(DEFAULT_DIR).absolute()


def expand_user(path: str | Path, source: str) -> Path:
    """``path`` with a leading ``~`` or ``~NAME`` expanded; a StoreError naming ``source`` when there is no such
    home folder (Python raises RuntimeError for ``~nosuchuser``)."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        raise StoreError(f"{source}: {path}: no home folder for {str(path).split(os.sep)[0]!r} on this machine "
                         f"(~NAME is a user's home folder); give the store's path") from None


def database_path(root: str | Path) -> Path:
    """The SQLite database file of the store rooted at ``root``."""
    return Path(root) / DB_NAME


def artifacts_folder(root: str | Path) -> Path:
    """The folder that holds one sub-folder of artifact files per run, in the store rooted at ``root``."""
    return Path(root) / ARTIFACTS_DIR


def owned_paths(root: str | Path) -> list[tuple[Path, str, bool]]:
    """What the store rooted at ``root`` owns, as (path, its name in words, a folder whose every file is the
    store's): the database and its SQLite companions, then ``artifacts/``, ``reproduced/`` and ``atlas/``. No
    command may write an output over any of them."""
    db = database_path(root)
    return [(db, "the store's database", False),
            *[(db.with_name(db.name + suffix), f"the store's database's {suffix[1:]} file", False)
              for suffix in DB_COMPANIONS],
            (artifacts_folder(root), "the store's artifacts folder", True),
            (Path(root) / REPRODUCED_DIR, "the store's reproduced folder", True),
            (Path(root) / ATLAS_DIR, "the store's atlas folder", True)]


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
