"""Final loss against depth for the retrieval problem, IC against non-IC, and the partial loss of every chain
position (seed 002 Figure 4).

"Final validation loss by number of layers, averaged across multiple runs. Left: IC vs. non-IC formulations.
Right: Partial validation loss for each position in the retrieval chains (IC only)." :func:`layers_rows` are the
``seed002-layers`` preset's rows ``{"formulation", "layers", "loss", "partial_losses", …}``. The final loss is the
engine's (the whole evaluation sample); partial losses come from the engine's final metrics when it records them
(``final["partial_losses"]``), else are measured here on the run's final checkpoint (``PARTIAL_EXAMPLES`` fresh
evaluation examples).
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from ..store import Store
from .ablation import score
from .emergence import ANALYSIS_SEED
from .runs import group_runs, load_run, sample_examples
from .tables import Column, Table

PARTIAL_EXAMPLES = 4096  # fresh evaluation examples for partial losses measured on a checkpoint


def run_partial_losses(store: Store, run_id: str, final: dict[str, Any]) -> dict[str, float]:
    """A finished run's final partial losses: the engine's, or measured on its checkpoint."""
    if final.get("partial_losses"):
        return dict(final["partial_losses"])
    run = load_run(store, run_id)
    return score(run.model, run.task, sample_examples(run.task, PARTIAL_EXAMPLES, ANALYSIS_SEED))["partial_losses"]


def layers_rows(store: Store, run_ids: list[str]) -> list[dict[str, Any]]:
    """One row per (formulation, D, layers): final loss and partial losses, mean over seeds."""
    def key(run: dict[str, Any]) -> tuple:
        task, model = run["config"]["task"], run["config"]["model"]
        return (task.get("target", "ic"), task.get("D"), model.get("layers"),
                json.dumps({k: v for k, v in model.items() if k != "layers"}, sort_keys=True))

    groups = group_runs(store, run_ids, key)
    rows = []
    for (formulation, depth, layers, _), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        done = [r for r in runs if r["status"] == "done" and r["final"]]
        losses = np.array([r["final"]["loss"] for r in done], dtype=float)
        parts = [run_partial_losses(store, r["id"], r["final"]) for r in done]
        names = list(parts[0]) if parts else []
        partial = [float(np.mean([p[name] for p in parts])) for name in names]
        rows.append({
            "formulation": formulation, "D": depth, "layers": layers,
            "loss": float(losses.mean()) if len(losses) else None,
            "loss_sd": float(losses.std(ddof=1)) if len(losses) > 1 else None,
            "loss_min": float(losses.min()) if len(losses) else None,
            "loss_max": float(losses.max()) if len(losses) else None,
            "partial_losses": partial, "partial_names": names, "seeds": len(done),
            "seed_losses": [float(x) for x in losses],
            "seed_partial_losses": [[float(p[name]) for name in names] for p in parts],
            "runs": [r["id"] for r in runs],
            "failed": [r["id"] for r in runs if r["status"] != "done"],
            "steps": int(np.mean([r["final"]["steps"] for r in done])) if done else None,
        })
    return rows


def layers_table(rows: list[dict[str, Any]], title: str) -> Table:
    """A row per (formulation, D, layers): the mean final loss, each seed's, and the mean partial losses."""
    right = ("D", "layers", "loss (mean over seeds)")
    table = Table([Column(c, "right" if c in right else "left") for c in (
        "formulation", "D", "layers", "loss (mean over seeds)", "each seed", "partial losses (mean)")],
        title=f"final validation loss by depth — {title}")
    for r in rows:
        loss = "—" if r["loss"] is None else f"{r['loss']:.4f}"
        seeds = " ".join(f"{v:.3f}" for v in r["seed_losses"])
        parts = "  ".join(f"{n} {v:.3f}" for n, v in zip(r["partial_names"], r["partial_losses"], strict=True))
        table.add_row(r["formulation"], str(r["D"]), str(r["layers"]), loss, seeds, parts)
    return table


def layers_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``seed002-layers`` preset's JSON rows: :func:`layers_rows` with NaN and ±inf as None."""
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()} for r in rows]
