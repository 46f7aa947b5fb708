"""The length table of seed 003 (Figure 2, Figure 4): accuracy of each model at each input length N.

Reads only the store. A cell is one (task variant, model config, N): the mean final accuracy over seeds, and
where the study tried several learning rates, the best of those means (the paper reports "the
best-performing model" of its grid). Each row also carries the model's state size: the numbers a recurrent
model carries from one position to the next (``state_size`` of its spec), or for a transformer its key-value
cache at length N (2 · layers · width · N), which grows with N — the quantity seed 003's bounds are about.

Outputs: JSON rows ``{"task", "model", "label", "layers", "width", "length", "accuracy", "state_size", …}``, a
table (model × length), and the data of seed 003's figures (``depthlab.draw.lengths``): the heat map, and the
validation curves of every model at one length (Figure 2 middle and right).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..models import MODELS
from ..models.recurrent import kv_cache_size
from ..store import Store
from .tables import Column, Table

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
            "heads": model.get("heads"),
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


def best_per_family(rows: list[dict[str, Any]], by: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """Seed 003 App. H's report of a hyperparameter search: "we tune the models across several hyperparameters and
    report the results based on the best-performing model". Per (task variant, model family, length) the row of
    :func:`length_rows` with the best accuracy over every depth, width and head count tried (each row already
    the best of its learning rates); its label is the family's (``Mamba (tuned)``), and it carries the winning
    ``config`` (layers, width, heads, lr) and how many configurations were ``tried``.

    ``by`` keeps some sizes apart, per family (``"*"``: any other family): ``{"transformer": ["layers", "width"],
    "*": ["width"]}`` gives a row per transformer shape and per recurrent width, each the best of the rest (seed 003
    §6's Dyck models: a 1-layer transformer of width 256 and a 2-layer one of width 64, recurrent models of width
    64 tuned in depth)."""
    by = by or {}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        fields = by.get(row["model"], by.get("*", []))
        key = (json.dumps(row["task_config"], sort_keys=True), row["model"], row["length"],
               tuple((f, row.get(f)) for f in fields))
        groups.setdefault(key, []).append(row)
    out = []
    for key, mine in groups.items():
        best = max(mine, key=lambda r: -1.0 if r["accuracy"] is None else r["accuracy"])
        config = {"layers": best["layers"], "width": best["width"], "heads": best.get("heads"), "lr": best["lr"]}
        tried = sum(len(r["lrs_tried"]) for r in mine)
        kept = ", ".join(f"{f} {v}" for f, v in key[3])
        label = f"{SHORT.get(best['model'], best['model'])} ({kept + ', ' if kept else ''}tuned)"
        out.append({**best, "label": label, "config": config, "tried": tried})
    return out


def _fmt_state(row: dict[str, Any]) -> str:
    size = row["state_size"]
    if size is None:
        return "—"
    text = f"{size:,}"
    return f"{text} (KV at N={row['length']})" if row["model"] in ("transformer", "attention_only") else text


def _fmt_cell(row: dict[str, Any]) -> str:
    """Accuracy; a tuned row adds its winning configuration: ``0.987 (2×256, lr 1e-3)``."""
    text = f"{row['accuracy']:.3f}"
    if "config" not in row:
        return text
    config = row["config"]
    return f"{text} ({config['layers']}×{config['width']}, lr {config['lr']:.0e})"


def length_table(rows: list[dict[str, Any]], title: str) -> Table:
    """Rows: task and model; columns: lengths; cells: accuracy (the best learning rate's mean over seeds)."""
    lengths = sorted({r["length"] for r in rows if r["length"] is not None})
    table = Table([Column("task"), Column("model"), *[Column(f"N={n}", "right") for n in lengths],
                   Column("state size (longest N)", "right"), Column("chance", "right")],
                  title=f"length table — {title}")
    for task in dict.fromkeys(r["task"] for r in rows):
        for label in dict.fromkeys(r["label"] for r in rows if r["task"] == task):
            mine = {r["length"]: r for r in rows if r["task"] == task and r["label"] == label}
            cells = []
            for n in lengths:
                row = mine.get(n)
                cells.append("" if row is None else "—" if row["accuracy"] is None else _fmt_cell(row))
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
            metrics = store.metric_columns(run_id).get("eval")
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


def lengths_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The preset's JSON rows: :func:`length_rows` without the task config and the learning rates tried."""
    keys = ("task", "model", "label", "layers", "width", "length", "accuracy", "accuracy_sd", "seeds", "lr",
            "state_size", "chance", "steps", "seconds", "eval_examples", "eval_protocol", "runs", "failed")
    optional = ("config", "tried")  # tuned rows (best_per_family)
    return [{**{k: r[k] for k in keys}, **{k: r[k] for k in optional if k in r}} for r in rows]
