"""What ``depthlab reproduce`` made: one JSON manifest per preset and scale, so the report knows which preset drew
which figure::

    <root>/reproduced/<preset>-<scale>.json   {"preset", "scale", "figures", "files", "run_ids", "finished", …}

One file per (preset, scale), written atomically: two reproductions into one store never overwrite each other's
entry, and a rerun replaces its own. The store does not interpret the entry beyond ``preset`` and ``scale``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from depthlab.bounded import MAX_JSON_BYTES, BoundError, parse_json, read_file
from depthlab.store.errors import StoreError
from depthlab.store.files import atomic_write_json
from depthlab.store.layout import REPRODUCED_DIR, check_run_id


def reproduced_folder(root: str | Path) -> Path:
    """The folder of the manifests of the store rooted at ``root``."""
    return Path(root) / REPRODUCED_DIR


def record_reproduction(root: str | Path, entry: dict[str, Any]) -> Path:
    """Write ``entry`` (it must name ``preset`` and ``scale``) as the manifest of that preset and scale."""
    name = f"{check_run_id(entry['preset'])}-{check_run_id(entry['scale'])}"
    path = reproduced_folder(root) / f"{name}.json"
    atomic_write_json(path, entry)
    return path


def reproductions(root: str | Path) -> list[dict[str, Any]]:
    """Every manifest of the store rooted at ``root``, sorted by preset and scale (an unreadable one is a
    :class:`StoreError` naming it)."""
    out = []
    for path in sorted(reproduced_folder(root).glob("*.json")):
        try:  # a regular file of at most 16 MiB, nesting at most 64 levels
            entry = parse_json(read_file(path, MAX_JSON_BYTES, str(path)), str(path))
        except BoundError as e:
            raise StoreError(f"{path}: not a readable reproduce manifest ({e.detail})") from None
        if not isinstance(entry, dict) or not {"preset", "scale"} <= set(entry):
            raise StoreError(f"{path}: not a reproduce manifest (no preset and scale)")
        out.append(entry)
    return sorted(out, key=lambda e: (str(e["preset"]), str(e["scale"])))
