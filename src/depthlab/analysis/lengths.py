"""The length table of seed 003 (Figure 2, Figure 4): accuracy of each model at each input length N.

Reads only the store. A cell is one (task variant, model config, N): the mean final accuracy over seeds, and
where the study tried several learning rates, the best of those means (the paper reports "the
best-performing model" of its grid). Each row also carries the model's state size: the numbers a recurrent
model carries from one position to the next (``state_size`` of its spec), or for a transformer its key-value
cache at length N (2 · layers · width · N), which grows with N — the quantity seed 003's bounds are about.

Outputs: JSON rows ``{"task", "model", "label", "layers", "width", "length", "accuracy", "state_size", …}``, a
rich table (model × length), a heat map (``figure``) and the validation curves of every model at one length
(``curves_figure``, Figure 2 middle and right).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from ..models import MODELS
from ..models.recurrent import kv_cache_size
from ..report.figures import save_figure
from ..store import Store

SHORT = {"transformer": "TF", "attention_only": "AttnOnly", "lstm": "LSTM", "linear_transformer": "LinTF",
         "retnet": "RetNet", "dss": "DSS", "mamba": "Mamba"}
LENGTH_FIELDS = ("N", "pairs")  # the task field that is the input length
IGNORED_TASK_FIELDS = ("eval_size",)


def task_length(task: dict[str, Any]) -> int | None:
    for name in LENGTH_FIELDS:
        if name in task:
            return int(task[name])
    return None


def model_label(model: dict[str, Any]) -> str:
    """The paper's notation: TF-(layers, width)."""
    short = SHORT.get(model["name"], model["name"])
    return f"{short}-({model.get('layers', '?')}, {model.get('width', '?')})"


def state_size(model: dict[str, Any], length: int | None) -> int | None:
    """Recurrent state size of a model config, or a transformer's key-value cache at ``length``."""
    spec_cls = MODELS.get(model["name"])
    if spec_cls is None:
        return None
    spec = spec_cls(**model)
    if hasattr(spec, "state_size"):
        return int(spec.state_size)
    layers, width = model.get("layers"), model.get("width")
    if layers and width and length:
        return kv_cache_size(int(layers), int(width), int(length))
    return None


def _task_variant(task: dict[str, Any]) -> str:
    rest = {k: v for k, v in task.items() if k not in (*LENGTH_FIELDS, *IGNORED_TASK_FIELDS)}
    return json.dumps(rest, sort_keys=True)


def length_rows(store: Store, run_ids: list[str]) -> list[dict[str, Any]]:
    """One row per (task variant, model config, length): best learning rate's mean accuracy over seeds."""
    cells: dict[tuple[str, str, int | None], dict[float, list[dict[str, Any]]]] = {}
    order: list[tuple[str, str, int | None]] = []
    for run_id in run_ids:
        run = store.get_run(run_id)
        if run is None:
            continue
        config = run["config"]
        key = (_task_variant(config["task"]), json.dumps(config["model"], sort_keys=True), task_length(config["task"]))
        if key not in cells:
            order.append(key)
        cells.setdefault(key, {}).setdefault(float(config["train"]["lr"]), []).append(run)
    rows = []
    for key in order:
        variant, model_json, length = key
        by_lr = cells[key]
        best: tuple[float, float | None, list[dict[str, Any]]] | None = None
        for lr, runs in by_lr.items():
            accs = [r["final"]["accuracy"] for r in runs
                    if r["status"] == "done" and r["final"] and r["final"].get("accuracy") is not None]
            mean = float(np.mean(accs)) if accs else None
            if best is None or (mean is not None and (best[1] is None or mean > best[1])):
                best = (lr, mean, runs)
        assert best is not None
        lr, accuracy, runs = best
        done = [r for r in runs if r["status"] == "done" and r["final"]]
        model = json.loads(model_json)
        task = json.loads(variant)
        final = done[0]["final"] if done else {}
        accs = [r["final"]["accuracy"] for r in done if r["final"].get("accuracy") is not None]
        rows.append({
            "task": task["name"],
            "task_config": task,
            "model": model["name"],
            "label": model_label(model),
            "layers": model.get("layers"),
            "width": model.get("width"),
            "length": length,
            "accuracy": accuracy,
            "accuracy_sd": float(np.std(accs, ddof=1)) if len(accs) > 1 else (0.0 if accs else None),
            "seeds": len(accs),
            "lr": lr,
            "lrs_tried": sorted(by_lr),
            "state_size": state_size(model, length),
            "chance": final.get("chance"),
            "steps": int(np.mean([r["final"]["steps"] for r in done])) if done else None,
            "seconds": round(float(np.sum([r["final"].get("seconds", 0.0) for r in done])), 1) if done else None,
            "eval_examples": final.get("eval_examples"),
            "eval_protocol": final.get("eval_protocol"),
            "runs": [r["id"] for r in runs],
            "failed": [r["id"] for r in runs if r["status"] in ("failed", "diverged", "interrupted")],
        })
    return rows


def _fmt_state(row: dict[str, Any]) -> str:
    size = row["state_size"]
    if size is None:
        return "—"
    text = f"{size:,}"
    return f"{text} (KV at N={row['length']})" if row["model"] in ("transformer", "attention_only") else text


def length_table(rows: list[dict[str, Any]], title: str) -> Table:
    """Rows: task and model; columns: lengths; cells: accuracy (the best learning rate's mean over seeds)."""
    lengths = sorted({r["length"] for r in rows if r["length"] is not None})
    table = Table(title=f"length table — {title}", title_justify="left")
    table.add_column("task")
    table.add_column("model")
    for n in lengths:
        table.add_column(f"N={n}", justify="right")
    table.add_column("state size (longest N)", justify="right")
    table.add_column("chance", justify="right")
    for task in dict.fromkeys(r["task"] for r in rows):
        for label in dict.fromkeys(r["label"] for r in rows if r["task"] == task):
            mine = {r["length"]: r for r in rows if r["task"] == task and r["label"] == label}
            cells = []
            for n in lengths:
                row = mine.get(n)
                cells.append("" if row is None else "—" if row["accuracy"] is None else f"{row['accuracy']:.3f}")
            last = mine[max(mine)] if mine else None
            state = "" if last is None else _fmt_state(last)
            chances = [r["chance"] for r in mine.values() if r["chance"] is not None]
            chance = f"{chances[0]:.3f}" if chances else ""
            table.add_row(task, label, *cells, state, chance)
    return table


def curves(store: Store, rows: list[dict[str, Any]], lengths: dict[str, int]) -> dict[tuple[str, str], list[dict]]:
    """Eval curves (step, accuracy) of the chosen runs at each task's length, keyed by (task, model label)."""
    out: dict[tuple[str, str], list[dict[str, list]]] = {}
    for row in rows:
        if row["length"] != lengths.get(row["task"]):
            continue
        for run_id in row["runs"]:
            metrics = store.metrics(run_id).get("eval")
            if metrics:
                out.setdefault((row["task"], row["label"]), []).append(metrics)
    return out


def choose_curve_lengths(rows: list[dict[str, Any]], prefer: int | None = None) -> dict[str, int]:
    """Per task: ``prefer`` if every model of the task ran at it, else the longest length they all ran at."""
    out = {}
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [r for r in rows if r["task"] == task and r["length"] is not None]
        labels = {r["label"] for r in mine}
        common = sorted(n for n in {r["length"] for r in mine}
                        if all(any(r["length"] == n and r["label"] == lab for r in mine) for lab in labels))
        if common:
            out[task] = prefer if prefer in common else common[-1]
    return out


def heatmap_figure(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """A heat map per task: models (rows) × lengths (columns), accuracy as colour and number."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..report.figures import STYLE

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, max(len(tasks), 1), figsize=(3.6 * max(len(tasks), 1), 2.6), squeeze=False)
        for ax, task in zip(axes[0], tasks, strict=False):
            mine = [r for r in rows if r["task"] == task]
            labels = list(dict.fromkeys(r["label"] for r in mine))
            lengths = sorted({r["length"] for r in mine})
            grid = np.full((len(labels), len(lengths)), np.nan)
            for r in mine:
                if r["accuracy"] is not None:
                    grid[labels.index(r["label"]), lengths.index(r["length"])] = r["accuracy"]
            ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            for i in range(len(labels)):
                for j in range(len(lengths)):
                    if not math.isnan(grid[i, j]):
                        ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7,
                                color="black" if grid[i, j] > 0.6 else "white")
            ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
            ax.set_yticks(range(len(labels)), labels)
            ax.set_xlabel("length N")
            ax.set_title(task)
        fig.suptitle(title, fontsize=9)
        save_figure(fig, path)
    return path


def curves_figure(curve_sets: dict[tuple[str, str], list[dict[str, list]]], chance: dict[str, float],
                  lengths: dict[str, int], path: Path) -> Path:
    """Validation accuracy against steps at one length, a line per model, a panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..report.figures import STYLE

    tasks = list(dict.fromkeys(task for task, _ in curve_sets))
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, max(len(tasks), 1), figsize=(3.6 * max(len(tasks), 1), 2.8), squeeze=False)
        for ax, task in zip(axes[0], tasks, strict=False):
            for (t, label), runs in curve_sets.items():
                if t != task:
                    continue
                for i, metrics in enumerate(runs):
                    ax.plot(metrics["step"], metrics["accuracy"], label=label if i == 0 else None, lw=1.2)
            if task in chance:
                ax.axhline(chance[task], color="grey", ls="--", lw=0.8)
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel("step")
            ax.set_title(f"{task}, N = {lengths[task]}")
            ax.legend(frameon=False, fontsize=7)
        axes[0, 0].set_ylabel("accuracy (validation)")
        save_figure(fig, path)
    return path


def lengths_summary(store: Store, run_ids: list[str], figure: Path, title: str,
                    curve_length: int | None = None) -> tuple[dict[str, Any], Table]:
    """The preset summary: JSON rows, the model × length table, the heat map, and each task's validation curves
    at one length (``curve_length`` where every model of the task ran at it, else the longest such length)."""
    rows = length_rows(store, run_ids)
    figure = Path(figure)
    heat = heatmap_figure(rows, figure, title)
    chance = {r["task"]: r["chance"] for r in rows if r["chance"] is not None}
    lengths = choose_curve_lengths(rows, curve_length)
    curve_path = figure.with_name(f"{figure.stem}-curves{figure.suffix}")
    curves_figure(curves(store, rows, lengths), chance, lengths, curve_path)
    keys = ("task", "model", "label", "layers", "width", "length", "accuracy", "accuracy_sd", "seeds", "lr",
            "state_size", "chance", "steps", "seconds", "eval_examples", "eval_protocol", "runs", "failed")
    out = {"rows": [{k: r[k] for k in keys} for r in rows], "figure": str(heat), "curves_figure": str(curve_path),
           "curve_lengths": lengths}
    return out, length_table(rows, title)


def index_lookup_summary(store: Store, run_ids: list[str], figure: Path, title: str) -> tuple[dict[str, Any], Table]:
    """Figure 2 left and middle: the length table, with the validation curves at N = 200 where it was run."""
    return lengths_summary(store, run_ids, figure, title, curve_length=200)
