"""Cells: the runs whose configs differ only in the seed, and the fields that tell cells apart.

A run's config (``RunConfig.to_dict``) is a task, a model, how it trains, and a seed. A **cell** is every run whose
config, seed left out, is the same: its runs are repeats of one experiment, so their mean ± sd is a spread over
seeds and nothing else. Every table, heat map, curve band and summary of depthlab pools the runs of one cell and
never two cells (a store holding the same model at two learning rates has two cells, never one cell of mixed
seeds). Where the cells shown at one place of a table (one task at one depth, say) differ, the fields they differ
in are *distinguishing*: tables show them as columns or in their labels (``icqa lr=0.01``), figures split by them.

Pure dict work on stored configs (no torch), shared by the analyses, the report, the CLI and the Python API.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .fields import flat_fields

SEED = "seed"  # the one config field that makes a run a repeat of its cell


def without_seed(config: dict[str, Any]) -> dict[str, Any]:
    """The config less its seed: what every run of a cell shares."""
    return {k: v for k, v in config.items() if k != SEED}


def cell_key(config: dict[str, Any]) -> str:
    """The cell of a run config as canonical JSON (equal for exactly the configs that differ only in the seed)."""
    return json.dumps(without_seed(config), sort_keys=True, default=str)


def cell_id(config: dict[str, Any]) -> str:
    """A short stable name of the cell (12 hex digits of its key's SHA-256), as run ids are of runs."""
    return hashlib.sha256(cell_key(config).encode()).hexdigest()[:12]


def group_cells(records: Iterable[dict[str, Any]],
                config: Callable[[dict[str, Any]], dict[str, Any]] = lambda r: r["config"]) -> list[list[dict]]:
    """``records`` (store records, or anything ``config`` reads a run config from) grouped into cells, in the
    order each cell is first seen."""
    cells: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        cells.setdefault(cell_key(config(record)), []).append(record)
    return list(cells.values())


_ABSENT = "<absent>"  # a field some configs lack: a value of its own


def _value_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str) if value is not _ABSENT else _ABSENT


def varying_fields(configs: list[dict[str, Any]], slot: Callable[[dict[str, Any]], Hashable] | None = None,
                   ignore: Iterable[str] = ()) -> list[str]:
    """The dotted fields (seed never) that take more than one value among ``configs``; with ``slot`` only
    differences between configs of one slot count (``slot(config)``: the place a table shows it, e.g. its task
    and depth). A field some configs lack differs from any value. Fields named in ``ignore``, or under one
    (``model.layers``, ``task``), are left out. In the order the fields first appear."""
    skip = (SEED, *ignore)
    distinct: dict[tuple[Hashable, str], tuple[Hashable, dict[str, Any]]] = {}
    for c in configs:  # the seeds of one cell in one slot count once: a store of 100,000 runs has far fewer cells
        place = slot(c) if slot else None
        distinct.setdefault((place, cell_key(c)), (place, c))
    flats = [(place, flat_fields(without_seed(c))) for place, c in distinct.values()]
    names = list(dict.fromkeys(n for _, f in flats for n in f
                               if not any(n == s or n.startswith(f"{s}.") for s in skip)))
    slots: dict[Hashable, list[dict[str, Any]]] = {}
    for place, f in flats:
        slots.setdefault(place, []).append(f)
    return [n for n in names if any(len({_value_key(f.get(n, _ABSENT)) for f in group}) > 1
                                    for group in slots.values())]


def short_names(fields: list[str]) -> dict[str, str]:
    """Each dotted field by its last part (``train.lr`` -> ``lr``) where that is unique among ``fields``."""
    last = [f.rsplit(".", 1)[-1] for f in fields]
    return {f: (s if last.count(s) == 1 else f) for f, s in zip(fields, last, strict=True)}


def value_text(value: Any) -> str:
    """A config value as a table shows it: ``0.003``, ``1e-05``, ``[1, 1, 6]``, ``relu``; ``—`` when absent."""
    if value is None or value is _ABSENT:
        return "—"
    if isinstance(value, float):
        return f"{value:g}" if math.isfinite(value) else str(value)
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


def field_values(config: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    """The values of dotted ``fields`` in ``config`` (None where it lacks one): :func:`flat_fields`'s values, read
    by walking the config (a listing of 100,000 runs asks this of each)."""
    return {f: _dotted(config, f) for f in fields}


def _dotted(config: dict[str, Any], name: str) -> Any:
    value: Any = config
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return flat_fields(config).get(name)  # a key that holds a dot itself
        value = value[part]
    return None if isinstance(value, dict) and value else value


def settings_text(config: dict[str, Any], fields: list[str]) -> str:
    """``lr=0.01, steps=4000``: the values of ``fields`` in ``config`` by their short names."""
    names = short_names(fields)
    return ", ".join(f"{names[f]}={value_text(v)}" for f, v in field_values(config, fields).items())


def labelled(name: str, config: dict[str, Any], fields: list[str]) -> str:
    """``name`` followed by the values of the distinguishing ``fields``: ``icqa lr=0.01`` (``name`` alone when
    there are none)."""
    text = settings_text(config, fields)
    return f"{name} {text}" if text else name


def variant_fields(configs: list[dict[str, Any]], name: Callable[[dict[str, Any]], str],
                   ignore: Iterable[str] = (), slot: Callable[[dict[str, Any]], Hashable] | None = None
                   ) -> list[list[str]]:
    """For each config, the fields (:func:`varying_fields`, less ``ignore``) that differ among the configs of its
    ``name`` (with ``slot``: among those of its name in one slot, e.g. one depth, so a field that only follows the
    depth is not one): what must be said beside the name to tell it from the others of that name."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in configs:
        groups.setdefault(name(c), []).append(c)
    fields = {n: varying_fields(group, slot, ignore) for n, group in groups.items()}
    return [fields[name(c)] for c in configs]


def variant_labels(configs: list[dict[str, Any]], name: Callable[[dict[str, Any]], str],
                   ignore: Iterable[str] = (), slot: Callable[[dict[str, Any]], Hashable] | None = None) -> list[str]:
    """Short distinct labels: each config's ``name`` and the values of its :func:`variant_fields`
    (``icqa k=2`` and ``icqa k=3``; ``icqa lr=0.01``)."""
    return [labelled(name(c), c, f) for c, f in zip(configs, variant_fields(configs, name, ignore, slot), strict=True)]


def list_fields(configs: list[dict[str, Any]]) -> list[str]:
    """The config fields a list of runs shows beside task, model, depth and seed (``depthlab runs``, the report's
    runs table): those in which runs of one task, model and depth differ, which would otherwise make two cells
    look like seeds of one."""

    def slot(config: dict[str, Any]) -> str:
        task, model = config.get("task") or {}, config.get("model") or {}
        return json.dumps([task.get("name"), model.get("name"), model.get("layers")], default=str)

    return varying_fields(configs, slot, ignore=("model.layers",))
