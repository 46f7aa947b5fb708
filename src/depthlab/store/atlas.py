"""What ``depthlab atlas`` keeps in a store besides its runs: its last result per scale, and the theory it computed::

    <root>/atlas/<scale>.json     the result object (what ``depthlab atlas --json`` printed), for the report
    <root>/atlas/theory.json      construction and certificate results by (name, parameters), computed once

The runs of an atlas are ordinary runs in the database; these files only spare the report a re-climb and the
atlas a re-check of constructions (some take tens of seconds). Both are written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from depthlab.bounded import MAX_JSON_BYTES, BoundError, parse_json, read_file
from depthlab.store.errors import StoreError
from depthlab.store.files import atomic_write_json
from depthlab.store.layout import ATLAS_DIR, check_run_id

THEORY = "theory.json"


def _read(path: Path) -> Any:
    try:  # a regular file of at most 16 MiB, nesting at most 64 levels: read as untrusted input
        return parse_json(read_file(path, MAX_JSON_BYTES, str(path)), str(path))
    except BoundError as e:
        raise StoreError(f"{path}: not readable as an atlas file ({e.detail})") from None


def record_atlas(root: str | Path, result: dict[str, Any]) -> Path:
    """Write ``result`` (it names its ``scale``) as the store's atlas of that scale."""
    path = Path(root) / ATLAS_DIR / f"{check_run_id(result['scale'])}.json"
    atomic_write_json(path, result)
    return path


def atlases(root: str | Path) -> list[dict[str, Any]]:
    """Every atlas result of the store rooted at ``root``, by scale name."""
    out = []
    for path in sorted((Path(root) / ATLAS_DIR).glob("*.json")):
        if path.name == THEORY:
            continue
        entry = _read(path)
        if not isinstance(entry, dict) or not {"scale", "cells"} <= set(entry):
            raise StoreError(f"{path}: not an atlas result (no scale and cells)")
        out.append(entry)
    return out


def read_theory(root: str | Path) -> dict[str, Any]:
    """The theory cache (an empty one when there is none yet)."""
    path = Path(root) / ATLAS_DIR / THEORY
    cache = _read(path) if path.is_file() else {}
    if not isinstance(cache, dict):
        raise StoreError(f"{path}: not an atlas theory cache (not a mapping)")
    return cache


def write_theory(root: str | Path, cache: dict[str, Any]) -> None:
    atomic_write_json(Path(root) / ATLAS_DIR / THEORY, cache)
