"""The embedded experiment store (SQLite + artifact folder): import everything from here.

Modules, one job each: :mod:`.sqlite` the :class:`Store` (runs, metrics, artifacts, records);
:mod:`.connection` opening the database for concurrent writers (WAL, busy timeout); :mod:`.schema` the
tables and their version; :mod:`.layout` where files live under a store root; :mod:`.jsonable` the strict
JSON rules (NaN/inf → null); :mod:`.files` atomic file writes; :mod:`.reproduced` the manifests of
``depthlab reproduce``; :mod:`.atlas` what ``depthlab atlas`` keeps; :mod:`.errors` :class:`StoreError`.
The store imports only the standard library, numpy and :mod:`depthlab.errors`.
"""

from depthlab.store.atlas import atlases, read_theory, record_atlas, write_theory
from depthlab.store.errors import StoreError
from depthlab.store.files import atomic_write_bytes, atomic_write_json
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
    "database_path",
    "default_store_path",
    "read_theory",
    "record_atlas",
    "record_reproduction",
    "reproductions",
    "to_json",
    "to_jsonable",
    "write_theory",
]
