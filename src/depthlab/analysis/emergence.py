"""Training dynamics of the retrieval problem: partial losses against depth (seed 002 Figure 4) and the emergence
of a circuit's attention paths during training (Figures 6-7).

Figure 4: "Final validation loss by number of layers, averaged across multiple runs. Left: IC vs. non-IC
formulations. Right: Partial validation loss for each position in the retrieval chains (IC only)."
:func:`layers_summary` is the ``seed002-layers`` preset's summary: rows ``{"formulation", "layers", "loss",
"partial_losses"}``. The final loss is the engine's (the whole evaluation sample); partial losses come from the
engine's final metrics when it records them (``final["partial_losses"]``), else are measured here on the run's
final checkpoint (``PARTIAL_EXAMPLES`` fresh evaluation examples).

Figure 7: "I save a checkpoint every 10 epochs (80 steps) that I later use to measure the average attention for
each attention path in the reverse-engineered circuit, at each epoch during training, using 32 input sequences.
[…] I approximate the attention between checkpoints using linear interpolation. […] the first epoch when the
average attention goes above 0.5 for each attention path." :func:`emergence` does exactly that over a run's
checkpoint history (weights-only safetensors ``history/step-NNNNNNN.safetensors`` in the run's artifact folder,
written by the engine when ``train.keep_checkpoints`` is set), and measures the partial losses at every kept
checkpoint too. :func:`emergence_summary` is the ``seed002-emergence`` preset's summary: it finds the circuit of
the trained run with the ablation tools (:func:`depthlab.analysis.circuit.discover`), validates it, and plots
its emergence.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from rich.console import Group as RichGroup
from rich.table import Table

from ..errors import UserError
from ..models import TaskShapes, build_model
from ..report.figures import STYLE, save_figure
from ..store import Store
from .ablation import capture, score
from .circuit import Circuit, discover, path_attention, validate
from .runs import LoadedRun, load_run, sample_examples

PARTIAL_EXAMPLES = 4096  # fresh evaluation examples for partial losses measured on a checkpoint
EMERGENCE_EXAMPLES = 32  # "using 32 input sequences" (seed 002 §9.1)
LOSS_EXAMPLES = 1024  # examples for the loss curves measured on each kept checkpoint
CIRCUIT_EXAMPLES = 1024  # examples for circuit discovery and validation
THRESHOLD = 0.5
ANALYSIS_SEED = 1  # the seed of the examples the analyses draw (split "eval")
HISTORY = "history"
_STEP = re.compile(r"step-(\d+)\.safetensors$")


# ------------------------------------------------------------------------------------- checkpoint history


def history(store: Store, run_id: str) -> list[tuple[int, Path]]:
    """The run's kept checkpoints (step, weights file), by step: recorded artifacts, else files in the folder."""
    found = {}
    for art in store.artifacts(run_id, kind=HISTORY):
        m = _STEP.search(str(art["path"]))
        if m and Path(art["path"]).exists():
            found[int(m.group(1))] = Path(art["path"])
    folder = store.run_folder(run_id) / HISTORY
    if folder.is_dir():
        for path in folder.glob("step-*.safetensors"):
            found.setdefault(int(_STEP.search(path.name).group(1)), path)
    return sorted(found.items())


def history_name(step: int) -> str:
    return f"{HISTORY}/step-{step:07d}.safetensors"


def save_history(store: Store, run_id: str, weights: dict[str, torch.Tensor], step: int) -> Path:
    """Keep ``weights`` (a run's state dict) as the checkpoint of ``step`` (what the engine does when asked)."""
    from safetensors.torch import save

    from ..store import atomic_write_bytes

    path = store.artifact_path(run_id, HISTORY, history_name(step))
    atomic_write_bytes(path, save({k: v.contiguous() for k, v in weights.items()}, metadata={"step": str(step)}))
    store.add_artifact(run_id, HISTORY, history_name(step), {"step": step})
    return path


def load_weights(model: Any, path: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(path)
    model.load_run_state_dict(0, {k: v for k, v in tensors.items() if not k.startswith("optimizer.")})


def first_crossing(steps: list[float], values: list[float], threshold: float = THRESHOLD,
                   above: bool = True) -> float | None:
    """The first step where ``values`` (linearly interpolated between steps) goes above (or below) ``threshold``."""
    for i, (s, v) in enumerate(zip(steps, values, strict=True)):
        if (v > threshold) if above else (v < threshold):
            if i == 0:
                return float(s)
            s0, v0 = steps[i - 1], values[i - 1]
            return float(s0 + (threshold - v0) / (v - v0) * (s - s0)) if v != v0 else float(s)
    return None


def settled_crossing(steps: list[float], values: list[float], threshold: float = THRESHOLD) -> float | None:
    """The step from which ``values`` stays above ``threshold`` to the end (interpolated), None if it ends below."""
    below = [i for i, v in enumerate(values) if not v > threshold]
    if not below:
        return float(steps[0])
    i = below[-1]
    if i == len(values) - 1:
        return None
    return first_crossing(steps[i : i + 2], values[i : i + 2], threshold)


# ------------------------------------------------------------------------------------- emergence


@torch.no_grad()
def emergence(store: Store, run: LoadedRun, circuit: Circuit, examples: int = EMERGENCE_EXAMPLES,
              loss_examples: int = LOSS_EXAMPLES, seed: int = ANALYSIS_SEED) -> dict[str, Any]:
    """Mean attention on every path of ``circuit`` and the partial losses at every kept checkpoint of ``run``."""
    points = history(store, run.id)
    if not points:
        raise UserError(f"run {run.id}: no checkpoint history; train it with train.keep_checkpoints=true and "
                        f"train.checkpoint_every=STEPS to measure emergence")
    task = run.task
    batch = sample_examples(task, examples, seed)
    loss_batch = sample_examples(task, loss_examples, seed + 1)
    model = build_model(run.config.model, TaskShapes.of(task), [run.config.seed])  # step 0: as the engine built it
    model.eval()
    steps, attention, losses, partial = [], [], [], {}

    def measure(step: int) -> None:
        steps.append(step)
        attention.append(path_attention(capture(model, batch), task, batch, circuit.paths))
        s = score(model, task, loss_batch)
        losses.append(s["loss"])
        for name, value in s["partial_losses"].items():
            partial.setdefault(name, []).append(value)

    measure(0)
    for step, path in points:
        if step == 0:
            continue
        load_weights(model, path)
        measure(step)
    if run.step > steps[-1]:  # the final weights, when the history stops before them
        model = run.model
        measure(run.step)
    att = np.array(attention)  # [checkpoints, paths]
    paths = []
    for i, p in enumerate(circuit.paths):
        values = att[:, i].tolist()
        paths.append({**p.to_dict(), "path": p.label, "first_step_above": first_crossing(steps, values),
                      "settled_step_above": settled_crossing(steps, values), "final_attention": values[-1],
                      "attention": values})
    partial_first = {name: first_crossing(steps, v, THRESHOLD, above=False) for name, v in partial.items()}
    return {"run": run.id, "steps": steps, "threshold": THRESHOLD, "examples": examples, "paths": paths,
            "loss": losses, "partial_losses": partial, "partial_first_step_below": partial_first,
            "loss_examples": loss_examples}


def emergence_figure(result: dict[str, Any], path: Path, title: str = "") -> Path:
    """Left: loss and partial losses against steps (Figure 6); right: attention on each path (Figure 7, App. D)."""
    steps = result["steps"]
    with plt.rc_context(STYLE):
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
        left.plot(steps, result["loss"], color="black", lw=1.5, label="loss")
        colors = plt.cm.viridis(np.linspace(0.1, 0.85, len(result["partial_losses"])))
        for (name, values), color in zip(result["partial_losses"].items(), colors, strict=True):
            left.plot(steps, values, color=color, label=f"partial loss {name}")
        left.set_yscale("log")
        left.set_xlabel("step")
        left.set_ylabel("validation loss")
        left.legend(frameon=False, fontsize=7)
        cmap = plt.cm.tab20(np.linspace(0, 1, len(result["paths"])))
        for p, color in zip(result["paths"], cmap, strict=True):
            right.plot(steps, p["attention"], color=color, label=p["path"])
            if p["first_step_above"] is not None:
                right.axvline(p["first_step_above"], color=color, lw=0.6, ls=":")
        right.axhline(result["threshold"], color="grey", ls="--", lw=0.8)
        right.set_ylim(-0.02, 1.02)
        right.set_xlabel("step")
        right.set_ylabel("mean attention on path")
        right.legend(frameon=False, fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
        if title:
            fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, bbox_inches="tight")
        plt.close(fig)
    return path


def emergence_table(result: dict[str, Any], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("path")
    table.add_column("first step above 0.5", justify="right")
    table.add_column("above 0.5 from then on", justify="right")
    table.add_column("final attention", justify="right")
    show = lambda step: "never" if step is None else f"{step:.0f}"  # noqa: E731
    for p in sorted(result["paths"], key=lambda p: (p["first_step_above"] is None, p["first_step_above"] or 0)):
        table.add_row(p["path"], show(p["first_step_above"]), show(p["settled_step_above"]),
                      f"{p['final_attention']:.2f}")
    for name, first in result["partial_first_step_below"].items():
        table.add_row(f"partial loss {name} < 0.5", show(first), "", "")
    return table


def emergence_summary(store: Store, run_ids: list[str], figure: Path, title: str) -> tuple[dict[str, Any], Any]:
    """The ``seed002-emergence`` preset: circuit of each run found by ablation, validated, and its emergence."""
    results, renderables = [], []
    for run_id in run_ids:
        run = load_run(store, run_id)
        batch = sample_examples(run.task, CIRCUIT_EXAMPLES, ANALYSIS_SEED)
        circuit, log = discover(run.model, run.task, batch)
        if not circuit.paths:
            results.append({"run": run_id, "circuit": None, "discovery": log})
            continue
        checked = validate(run.model, run.task, batch, circuit)
        circuit_file = circuit.dump(store.artifact_path(run_id, "circuit", "circuit.yaml"),
                                    f"circuit of run {run_id} found by `depthlab analyze circuit --discover`")
        store.add_artifact(run_id, "circuit", "circuit.yaml", {"paths": len(circuit.paths)})
        result = emergence(store, run, circuit)
        path = figure if len(run_ids) == 1 else figure.with_name(f"{figure.stem}-{run_id}{figure.suffix}")
        emergence_figure(result, path, f"{title}: run {run_id}")
        results.append({"run": run_id, "circuit_file": str(circuit_file), "discovery": log,
                        "validation": _compact_validation(checked), "emergence": _compact_emergence(result),
                        "figure": str(path)})
        losses = f"circuit loss {checked['circuit']['loss']:.4f}, intact {checked['intact']['loss']:.4f}"
        renderables.append(emergence_table(result, f"{title}: run {run_id} ({losses})"))
    figure_out = results[0].get("figure") if len(results) == 1 else None
    return {"runs": results, "figure": figure_out}, RichGroup(*renderables)


def _compact_validation(v: dict[str, Any]) -> dict[str, Any]:
    return {"intact_loss": v["intact"]["loss"], "circuit_loss": v["circuit"]["loss"],
            "paths": [{"path": p["path"], "attention": p["attention"], "loss_without": p["loss_without"],
                       "rise": p["rise"]} for p in v["paths"]],
            "circuit_heads": v["circuit_heads"], "off_circuit": v["off_circuit"], "rest": v["rest"]}


def _compact_emergence(e: dict[str, Any]) -> dict[str, Any]:
    return {"paths": [{"path": p["path"], "first_step_above": p["first_step_above"],
                       "settled_step_above": p["settled_step_above"], "final_attention": p["final_attention"]}
                      for p in e["paths"]],
            "partial_first_step_below": e["partial_first_step_below"], "steps": e["steps"],
            "loss": e["loss"], "partial_losses": e["partial_losses"]}


# ------------------------------------------------------------------------------------- Figure 4


def run_partial_losses(store: Store, run_id: str, final: dict[str, Any]) -> dict[str, float]:
    """A finished run's final partial losses: the engine's, or measured on its checkpoint."""
    if final.get("partial_losses"):
        return dict(final["partial_losses"])
    run = load_run(store, run_id)
    return score(run.model, run.task, sample_examples(run.task, PARTIAL_EXAMPLES, ANALYSIS_SEED))["partial_losses"]


def layers_rows(store: Store, run_ids: list[str]) -> list[dict[str, Any]]:
    """One row per (formulation, D, layers): final loss and partial losses, mean over seeds."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for run_id in run_ids:
        run = store.get_run(run_id)
        if run is None:
            continue
        task, model = run["config"]["task"], run["config"]["model"]
        key = (task.get("target", "ic"), task.get("D"), model.get("layers"),
               json.dumps({k: v for k, v in model.items() if k != "layers"}, sort_keys=True))
        groups.setdefault(key, []).append(run)
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


def layers_figure(rows: list[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Seed 002 Figure 4: left, final loss against layers, IC and non-IC; right, IC partial losses per x_k."""
    with plt.rc_context(STYLE):
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
        palette = {"ic": ["tab:blue", "tab:cyan", "tab:purple"], "non_ic": ["tab:red", "tab:orange", "tab:brown"]}
        for formulation in ("ic", "non_ic"):
            mine = [r for r in rows if r["formulation"] == formulation and r["loss"] is not None]
            for i, depth in enumerate(sorted({r["D"] for r in mine})):
                color = palette[formulation][i % 3]
                these = sorted((r for r in mine if r["D"] == depth), key=lambda r: r["layers"])
                x = [r["layers"] for r in these]
                label = f"{'IC' if formulation == 'ic' else 'non-IC'} (D={depth})"
                left.plot(x, [r["loss"] for r in these], "o-", color=color, label=label)
                left.fill_between(x, [r["loss_min"] for r in these], [r["loss_max"] for r in these],
                                  color=color, alpha=0.15, lw=0)
        left.set_xlabel("layers")
        left.set_ylabel("final validation loss (MSE)")
        left.set_yscale("log")
        left.legend(frameon=False)
        ic = [r for r in rows if r["formulation"] == "ic" and r["partial_losses"]]
        deepest = max((r["D"] for r in ic), default=None)  # the seed plots the partial losses at its largest D
        ic = sorted((r for r in ic if r["D"] == deepest), key=lambda r: r["layers"])
        if ic:
            names = ic[0]["partial_names"]
            colors = plt.cm.viridis(np.linspace(0.1, 0.85, len(names)))
            for i, (name, color) in enumerate(zip(names, colors, strict=True)):
                right.plot([r["layers"] for r in ic], [r["partial_losses"][i] for r in ic], "o-", color=color,
                           label=name)
            right.legend(frameon=False, title="chain position")
        right.set_xlabel("layers")
        right.set_ylabel(f"partial validation loss (IC, D={deepest})")
        right.set_yscale("log")
        for ax in (left, right):
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        if title:
            fig.suptitle(title, fontsize=9)
        save_figure(fig, path)
    return path


def layers_table(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=f"final validation loss by depth — {title}", title_justify="left")
    for column in ("formulation", "D", "layers", "loss (mean over seeds)", "each seed", "partial losses (mean)"):
        table.add_column(column, justify="right" if column in ("D", "layers", "loss (mean over seeds)") else "left")
    for r in rows:
        loss = "—" if r["loss"] is None else f"{r['loss']:.4f}"
        seeds = " ".join(f"{v:.3f}" for v in r["seed_losses"])
        parts = "  ".join(f"{n} {v:.3f}" for n, v in zip(r["partial_names"], r["partial_losses"], strict=True))
        table.add_row(r["formulation"], str(r["D"]), str(r["layers"]), loss, seeds, parts)
    return table


def layers_summary(store: Store, run_ids: list[str], figure: Path, title: str) -> tuple[dict[str, Any], Table]:
    """The ``seed002-layers`` preset: rows ``{"formulation", "layers", "loss", "partial_losses", …}`` and Figure 4."""
    rows = layers_rows(store, run_ids)
    path = layers_figure(rows, figure, title)
    clean = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()} for r in rows]
    return {"rows": clean, "figure": str(path)}, layers_table(rows, title)


__all__ = ["emergence", "emergence_summary", "first_crossing", "history", "layers_summary",
           "save_history"]
