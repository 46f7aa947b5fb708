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

from ..cells import field_values, group_cells, settings_text, variant_fields
from ..store import Store
from .ablation import score
from .emergence import ANALYSIS_SEED
from .runs import load_run, sample_examples
from .tables import Column, Table

PARTIAL_EXAMPLES = 4096  # fresh evaluation examples for partial losses measured on a checkpoint


def run_partial_losses(store: Store, run_id: str, final: dict[str, Any]) -> dict[str, float]:
    """A finished run's final partial losses: the engine's, or measured on its checkpoint."""
    if final.get("partial_losses"):
        return dict(final["partial_losses"])
    run = load_run(store, run_id)
    return score(run.model, run.task, sample_examples(run.task, PARTIAL_EXAMPLES, ANALYSIS_SEED))["partial_losses"]


def _order(group: tuple[list[dict[str, Any]], dict[str, Any], list[str]]) -> tuple:
    """Rows by formulation, D, distinguishing settings, then layers."""
    _, config, fields = group
    return (config["task"].get("target", "ic"), config["task"].get("D"), settings_text(config, fields),
            config["model"].get("layers"))


def layers_rows(store: Store, run_ids: list[str]) -> list[dict[str, Any]]:
    """One row per cell (the runs that differ only in the seed: ``depthlab.cells``), sorted by formulation, D
    and layers: final loss and partial losses, mean over seeds. ``settings`` holds any other field in which cells
    of one (formulation, D, layers) differ (a learning rate, a width), ``variant`` says them (``lr=0.01``)."""
    records = [r for r in (store.get_run(i) for i in run_ids) if r is not None]
    groups = group_cells(records)
    configs = [runs[0]["config"] for runs in groups]
    fields = variant_fields(configs, lambda c: json.dumps([c["task"].get("target", "ic"), c["task"].get("D")]),
                            ignore=("model.layers",), slot=lambda c: c["model"].get("layers"))
    rows = []
    for runs, config, distinguishing in sorted(zip(groups, configs, fields, strict=True), key=_order):
        formulation, depth, layers = config["task"].get("target", "ic"), config["task"].get("D"), config["model"].get(
            "layers")
        done = [r for r in runs if r["status"] == "done" and r["final"]]
        losses = np.array([r["final"]["loss"] for r in done], dtype=float)
        parts = [run_partial_losses(store, r["id"], r["final"]) for r in done]
        names = list(parts[0]) if parts else []
        partial = [float(np.mean([p[name] for p in parts])) for name in names]
        rows.append({
            "formulation": formulation, "D": depth, "layers": layers,
            "settings": field_values(config, distinguishing), "variant": settings_text(config, distinguishing),
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
    """A row per cell (formulation, D, layers, and any distinguishing settings): the mean final loss over seeds,
    each seed's, and the mean partial losses."""
    variants = any(r["variant"] for r in rows)
    right = ("D", "layers", "loss (mean)")
    headers = ("formulation", *(("settings",) if variants else ()), "D", "layers", "loss (mean)", "each seed",
               "partial losses (mean)")
    table = Table([Column(c, "right" if c in right else "left") for c in headers],
                  title=f"final validation loss by depth — {title}",
                  caption="loss: mean over seeds of the final validation MSE; each seed's beside it",
                  compact=True)  # unframed: at 80 columns a row of 3 seeds and x1-x3 takes two lines, not three
    for r in rows:
        loss = "—" if r["loss"] is None else f"{r['loss']:.4f}"
        seeds = " ".join(f"{v:.3f}" for v in r["seed_losses"])
        # "x2=0.749": a position and its loss one word, never split over two lines of a narrow table
        parts = " ".join(f"{n}={v:.3f}" for n, v in zip(r["partial_names"], r["partial_losses"], strict=True))
        table.add_row(r["formulation"], *((r["variant"],) if variants else ()), str(r["D"]), str(r["layers"]),
                      loss, seeds, parts)
    return table


def layers_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``seed002-layers`` preset's JSON rows: :func:`layers_rows` with NaN and ±inf as None."""
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()} for r in rows]
