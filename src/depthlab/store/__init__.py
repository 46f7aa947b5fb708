"""The embedded experiment store (SQLite + artifact folder); see :mod:`depthlab.store.sqlite`."""

from depthlab.store.sqlite import (
    SCHEMA_VERSION,
    STATUSES,
    Store,
    StoreError,
    atomic_write_bytes,
    atomic_write_json,
    default_store_path,
    to_jsonable,
)

__all__ = [
    "SCHEMA_VERSION",
    "STATUSES",
    "Store",
    "StoreError",
    "atomic_write_bytes",
    "atomic_write_json",
    "default_store_path",
    "to_jsonable",
]
