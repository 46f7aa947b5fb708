"""The embedded experiment store (SQLite + artifact folder): import everything from here.

Modules, one job each: :mod:`.sqlite` the :class:`Store` (runs, metrics, artifacts, records);
:mod:`.metrics` the runs' metrics rows;
:mod:`.connection` opening the database for concurrent writers (WAL, busy timeout) or read-only; :mod:`.schema`
the tables and their version; :mod:`.layout` where files live under a store root; :mod:`.rows` rows read back
and checked; :mod:`.jsonable` the strict JSON rules (NaN/inf → null); :mod:`.files` atomic file writes;
:mod:`.reproduced` the manifests of ``depthlab reproduce``; :mod:`.atlas` what ``depthlab atlas`` keeps;
:mod:`.errors` :class:`StoreError`.
The store imports only the standard library, numpy, :mod:`depthlab.errors` and :mod:`depthlab.bounded` (how it
reads its own rows and manifests: as untrusted input).
"""

from depthlab.store.atlas import atlases, read_theory, record_atlas, write_theory
from depthlab.store.errors import StoreError
from depthlab.store.files import atomic_write_bytes, atomic_write_json, atomic_writer, ensure_folder
from depthlab.store.jsonable import to_json, to_jsonable
from depthlab.store.layout import artifacts_folder, database_path, default_store_path
from depthlab.store.reproduced import record_reproduction, reproductions
from depthlab.store.schema import SCHEMA_VERSION
from depthlab.store.sqlite import STATUSES, Store

__all__ = [
    "SCHEMA_VERSION",
    "STATUSES",
    "Store",
    "StoreError",
    "artifacts_folder",
    "atlases",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_writer",
    "database_path",
    "default_store_path",
    "ensure_folder",
    "read_theory",
    "record_atlas",
    "record_reproduction",
    "reproductions",
    "to_json",
    "to_jsonable",
    "write_theory",
]
