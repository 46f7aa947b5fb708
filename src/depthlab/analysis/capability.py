"""The capability table: final accuracy per (task, depth), mean ± sd over seeds, next to the chance level.

Reads only the store. A row groups finished runs whose configs differ only in the seed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from ..report.figures import depth_figure
from ..store import Store


def _label(config: dict[str, Any]) -> str:
    return config["task"]["name"]


def capability_rows(store: Store, run_ids: list[str]) -> list[dict[str, Any]]:
    """One row per (task config, model config without seed), in the order the runs are given."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for run_id in run_ids:
        run = store.get_run(run_id)
        if run is None:
            continue
        config = dict(run["config"])
        config.pop("seed", None)
        key = json.dumps({"task": config["task"], "model": config["model"]}, sort_keys=True)
        groups.setdefault(key, []).append(run)
    rows = []
    for runs in groups.values():
        config = runs[0]["config"]
        done = [r for r in runs if r["status"] == "done" and r["final"] and r["final"].get("accuracy") is not None]
        accs = np.array([r["final"]["accuracy"] for r in done], dtype=float)
        final = done[0]["final"] if done else {}
        rows.append({
            "task": _label(config),
            "layers": config["model"].get("layers"),
            "heads": config["model"].get("heads"),
            "model": config["model"]["name"],
            "accuracy": float(accs.mean()) if len(accs) else None,
            "accuracy_sd": float(accs.std(ddof=1)) if len(accs) > 1 else (0.0 if len(accs) else None),
            "seeds": len(accs),
            "runs": [r["id"] for r in runs],
            "failed": [r["id"] for r in runs if r["status"] in ("failed", "diverged", "interrupted")],
            "chance": final.get("chance"),
            "steps": int(np.mean([r["final"]["steps"] for r in done])) if done else None,
            "eval_protocol": final.get("eval_protocol"),
            "eval_examples": final.get("eval_examples"),
            "exhaustive": final.get("exhaustive"),
        })
    return rows


def curves(store: Store, run_ids: list[str]) -> dict[tuple[str, int], list[dict[str, list[float]]]]:
    """Eval curves (step, accuracy, loss) of each run, grouped by (task, layers)."""
    out: dict[tuple[str, int], list[dict[str, list[float]]]] = {}
    for run_id in run_ids:
        run = store.get_run(run_id)
        if run is None:
            continue
        metrics = store.metrics(run_id).get("eval")
        if not metrics:
            continue
        key = (_label(run["config"]), run["config"]["model"].get("layers"))
        out.setdefault(key, []).append(metrics)
    return out


def format_cell(row: dict[str, Any]) -> str:
    if row["accuracy"] is None:
        return "—"
    sd = row["accuracy_sd"] or 0.0
    return f"{row['accuracy']:.3f} ± {sd:.3f}" if not math.isnan(sd) else f"{row['accuracy']:.3f}"


def variant_labels(configs: list[dict[str, Any]], ignore: tuple[str, ...] = ()) -> list[str]:
    """Short distinct labels for configs (task or model sections): the name, plus the fields that differ
    among configs of the same name (``icqa k=2`` and ``icqa k=3``); ``ignore`` lists fields never shown."""
    labels = []
    for config in configs:
        name = config.get("name", "?")
        same = [c for c in configs if c.get("name") == name]
        keys = sorted({k for c in same for k in c} - {"name", *ignore})
        differ = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in same}) > 1]
        extra = ", ".join(f"{k}={json.dumps(config.get(k)) if isinstance(config.get(k), dict) else config.get(k)}"
                          for k in differ)
        labels.append(f"{name} {extra}" if extra else str(name))
    return labels


def capability_grids(store: Store, run_ids: list[str]) -> list[dict[str, Any]]:
    """The capability table arranged as heat maps: one grid per model variant (the model config without
    ``layers``), a row per task variant (task config), a column per depth (``model.layers``).

    Each grid: ``model`` (config without layers), ``model_label``, ``tasks`` (list of ``{"config", "label",
    "name", "chance", "eval_protocol", "eval_examples"}``), ``depths`` (sorted) and ``cells``: a list of
    capability rows (:func:`capability_rows`) each with ``task_index`` and ``depth`` added.
    """
    rows = capability_rows(store, run_ids)
    configs: dict[str, dict[str, Any]] = {}
    for run_id in run_ids:
        run = store.get_run(run_id)
        if run is not None:
            configs[run_id] = run["config"]
    grids: dict[str, dict[str, Any]] = {}
    for row in rows:
        config = configs[row["runs"][0]]
        model = {k: v for k, v in config["model"].items() if k != "layers"}
        grid = grids.setdefault(json.dumps(model, sort_keys=True),
                                {"model": model, "tasks": [], "task_keys": [], "depths": set(), "cells": []})
        task_key = json.dumps(config["task"], sort_keys=True)
        if task_key not in grid["task_keys"]:
            grid["task_keys"].append(task_key)
            grid["tasks"].append({"config": config["task"], "name": config["task"]["name"], "chance": row["chance"],
                                  "eval_protocol": row["eval_protocol"], "eval_examples": row["eval_examples"]})
        task = grid["tasks"][grid["task_keys"].index(task_key)]
        for key in ("chance", "eval_protocol", "eval_examples"):
            if task[key] is None:
                task[key] = row[key]
        grid["depths"].add(row["layers"])
        grid["cells"].append({**row, "task_index": grid["task_keys"].index(task_key), "depth": row["layers"]})
    out = list(grids.values())
    model_labels = variant_labels([g["model"] for g in out])
    for grid, label in zip(out, model_labels, strict=True):
        grid["model_label"] = label
        grid["depths"] = sorted(grid["depths"], key=lambda d: (d is None, d))
        for task, task_label in zip(grid["tasks"], variant_labels([t["config"] for t in grid["tasks"]]), strict=True):
            task["label"] = task_label
        del grid["task_keys"]
    return out


def depth_summary(store: Store, run_ids: list[str], figure: Path, title: str) -> tuple[dict[str, Any], Table]:
    """The seed 001 depth study's output: rows of the capability table (JSON), the table, and Figure 2."""
    rows = capability_rows(store, run_ids)
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    chance = {r["task"]: r["chance"] for r in rows if r["chance"] is not None}
    path = depth_figure(curves(store, run_ids), tasks, chance, figure)
    keys = ("task", "layers", "accuracy", "accuracy_sd", "seeds", "chance", "steps", "eval_protocol", "runs")
    return {"rows": [{k: r[k] for k in keys} for r in rows], "figure": str(path)}, capability_table(rows, title)


def capability_table(rows: list[dict[str, Any]], title: str) -> Table:
    """Rows: tasks; columns: depth; cells: mean ± sd over seeds; then chance and what was evaluated."""
    depths = sorted({r["layers"] for r in rows})
    table = Table(title=f"capability table — {title}", title_justify="left")
    table.add_column("task")
    for depth in depths:
        table.add_column(f"{depth} layer{'s' if depth > 1 else ''}", justify="right")
    table.add_column("chance", justify="right")
    table.add_column("evaluated on")
    for task in dict.fromkeys(r["task"] for r in rows):
        cells = {r["layers"]: r for r in rows if r["task"] == task}
        first = next(iter(cells.values()))
        table.add_row(task, *[format_cell(cells[d]) if d in cells else "" for d in depths],
                      f"{first['chance']:.3f}" if first["chance"] is not None else "—",
                      f"{first['eval_protocol']} ({first['eval_examples']} examples)")
    return table
