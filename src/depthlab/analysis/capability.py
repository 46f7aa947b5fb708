"""The capability table: final accuracy per (task, depth), mean ± sd over seeds, next to the chance level.

Reads only the store. A row groups finished runs whose configs differ only in the seed.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

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
