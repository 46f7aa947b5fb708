"""A config as dotted fields, without importing what the config's specs need (the tables of the store read runs with
it, and must not import torch: ``Store.runs()`` stays a pandas call)."""

from __future__ import annotations

from typing import Any


def flat_fields(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config (or any nested mapping) as dotted fields: ``{"model": {"layers": 2}}`` -> ``{"model.layers": 2}``.

    Values that are not mappings (numbers, text, lists such as ``model.heads: [1, 1, 6]``) are kept as they are;
    what tables and experiment trackers show of a run's config."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flat_fields(value, f"{name}."))
        else:
            out[name] = value
    return out
