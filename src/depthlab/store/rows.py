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


FINAL_NUMBERS = ("accuracy", "loss", "chance")  # final metrics every table, heat map and summary computes with
FINAL_COUNTS = ("steps", "eval_examples")


def _text(value: Any, column: str, empty: bool = False) -> Any:
    if value is None and empty:
        return None
    if not isinstance(value, str) or not value:
        raise DamagedRow(column, f"is {str(value)[:40]!r}, not text")
    return value


def config_value(text: Any) -> dict[str, Any]:
    """A run's config: a JSON object whose ``task`` and ``model`` (where it has them: an ``llm-bench`` run has
    neither) are objects, their names text, ``model.layers`` a whole number of layers, ``seed`` a whole number."""
    config = _json(text, "config", (dict,))
    if config is None:
        raise DamagedRow("config", "is empty")
    for part in ("task", "model"):
        if part in config:
            if not isinstance(config[part], dict):
                raise DamagedRow("config", f"{part} is {str(config[part])[:40]!r}, not an object")
            if "name" in config[part]:
                _text(config[part]["name"], f"config {part}.name")
    layers = (config.get("model") or {}).get("layers")
    if layers is not None and (_number(layers, "config model.layers", (int,)) < 0):
        raise DamagedRow("config model.layers", f"is {layers}, below 0")
    _number(config.get("seed"), "config seed", (int,))
    return config


def final_value(text: Any) -> dict[str, Any] | None:
    """A run's final metrics: a JSON object whose accuracy, loss and chance are numbers (or null) and whose step
    and example counts are whole numbers."""
    final = _json(text, "final", (dict,))
    for name in (*FINAL_NUMBERS, *FINAL_COUNTS) if final else ():
        _number(final.get(name), f"final {name}", (int, float) if name in FINAL_NUMBERS else (int,))
    return final


def run_row(row: tuple) -> dict[str, Any]:
    """A ``runs`` row as the store returns it (config, final and tags parsed), every column checked."""
    rid, task, model, config, status, step, created, updated, final, error, group_id, tags = row
    _text(rid, "id")
    if status not in STATUSES:
        raise DamagedRow("status", f"is {str(status)[:40]!r}, not one of {', '.join(STATUSES)}")
    return {
        "id": rid,
        "task": _text(task, "task"),
        "model": _text(model, "model"),
        "config": config_value(config),
        "status": status,
        "step": _number(step, "step", (int,)),
        "created": _number(created, "created") or 0.0,
        "updated": _number(updated, "updated"),
        "final": final_value(final),
        "error": _text(error, "error", empty=True) if error != "" else error,
        "group_id": _text(group_id, "group_id", empty=True),
        "tags": _tags(_json(tags, "tags", (list,)) or []),
    }


def _tags(tags: list[Any]) -> list[str]:
    if not all(isinstance(tag, str) for tag in tags):
        raise DamagedRow("tags", "hold something that is not text")
    return tags


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
