"""Rows read back from the database, checked before they are trusted.

A row that a hand edit or a damaged disk broke (a config that is not JSON, a status depthlab never writes, a
metric value that is text, an artifact path that leaves the store) is not passed on: each function here returns
the parsed row, or raises :class:`DamagedRow` saying which column and what is wrong. The store leaves such a row
out of what it lists, names it (``Store.damage``), and refuses it only where that one row is asked for, so the
commands that can still work do.
"""

from __future__ import annotations

import math
from pathlib import PurePosixPath
from typing import Any

from depthlab.bounded import BoundError, parse_json

STATUSES = ("pending", "running", "done", "failed", "diverged", "interrupted")


class DamagedRow(ValueError):
    """A row whose ``column`` cannot be read (``problem`` says why)."""

    def __init__(self, column: str, problem: str) -> None:
        super().__init__(f"{column} {problem}")
        self.column = column


def _json(text: Any, column: str, kinds: tuple[type, ...]) -> Any:
    if text is None:
        return None
    if not isinstance(text, str):
        raise DamagedRow(column, f"is a {type(text).__name__}, not JSON text")
    try:
        value = parse_json(text, column)
    except BoundError as e:
        raise DamagedRow(column, f"is {e.detail}") from None
    if value is not None and not isinstance(value, kinds):
        raise DamagedRow(column, f"is JSON but not a {' or '.join(k.__name__ for k in kinds)}")
    return value


def _number(value: Any, column: str, kinds: tuple[type, ...] = (int, float)) -> Any:
    if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
        raise DamagedRow(column, f"is {str(value)[:40]!r}, not a number")
    return value


def run_row(row: tuple) -> dict[str, Any]:
    """A ``runs`` row as the store returns it (config, final and tags parsed)."""
    rid, task, model, config, status, step, created, updated, final, error, group_id, tags = row
    if status not in STATUSES:
        raise DamagedRow("status", f"is {str(status)[:40]!r}, not one of {', '.join(STATUSES)}")
    parsed_config = _json(config, "config", (dict,))
    if parsed_config is None:
        raise DamagedRow("config", "is empty")
    return {
        "id": rid,
        "task": task,
        "model": model,
        "config": parsed_config,
        "status": status,
        "step": _number(step, "step", (int,)),
        "created": _number(created, "created") or 0.0,
        "updated": _number(updated, "updated"),
        "final": _json(final, "final", (dict,)),
        "error": error,
        "group_id": group_id,
        "tags": _json(tags, "tags", (list,)) or [],
    }


def metric_value(value: Any) -> float:
    """A metrics row's value (NULL, a NaN, reads as NaN)."""
    return math.nan if value is None else float(_number(value, "value"))


def artifact_path(path: Any) -> str:
    """An artifacts row's path: relative to the store root, never leaving it."""
    if not isinstance(path, str) or not path:
        raise DamagedRow("path", "is empty")
    parts = PurePosixPath(path)
    if parts.is_absolute() or ".." in parts.parts:
        raise DamagedRow("path", f"{path[:80]!r} leaves the store")
    return path


def json_value(text: Any, column: str) -> Any:
    """A JSON column of any kind (an artifact's meta, a record's value)."""
    return _json(text, column, (dict, list, str, int, float, bool))
