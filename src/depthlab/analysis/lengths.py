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

from ..cells import (
    field_values,
    group_cells,
    labelled,
    short_names,
    value_text,
    variant_fields,
    varying_fields,
)
from ..models import MODELS
from ..models.recurrent import kv_cache_size
from ..store import Store
from ..tasks import task_title
from ..training.eval_label import protocol_of
from .capability import protocol_note
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


def _cell_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell's numbers: mean final accuracy over its seeds and what the runs recorded."""
    config = runs[0]["config"]
    done = [r for r in runs if r["status"] == "done" and r["final"]]
    accs = [r["final"]["accuracy"] for r in done if r["final"].get("accuracy") is not None]
    final = done[0]["final"] if done else {}
    return {
        "config": config,
        "accuracy": float(np.mean(accs)) if accs else None,
        "accuracy_sd": float(np.std(accs, ddof=1)) if len(accs) > 1 else (0.0 if accs else None),
        "seeds": len(accs),
        "lr": float(config["train"]["lr"]),
        "chance": final.get("chance"),
        "steps": int(np.mean([r["final"]["steps"] for r in done])) if done else None,
        "max_steps": config["train"].get("steps"),
        "target_accuracy": config["train"].get("target_accuracy"),
        "seconds": round(float(np.sum([r["final"].get("seconds", 0.0) for r in done])), 1) if done else None,
        "eval_examples": final.get("eval_examples"),
        "eval_protocol": protocol_of(final),
        "runs": [r["id"] for r in runs],
        "failed": [r["id"] for r in runs if r["status"] in ("failed", "diverged", "interrupted")],
    }


def length_rows(store: Store, run_ids: list[str]) -> list[dict[str, Any]]:
    """One row per (task variant, model config, length): the best cell's mean accuracy over its seeds.

    A cell is the runs that differ only in the seed (``depthlab.cells``). Where several cells share a (task
    variant, model, length), they are a search (App. H's learning rates, say): the row is the one with the best
    mean accuracy, ``settings`` holds its values of the fields the cells differ in (``{"train.lr": 0.001}``),
    ``tried`` how many cells were searched and ``lrs_tried`` their learning rates."""
    records = [r for r in (store.get_run(i) for i in run_ids) if r is not None]
    slots: dict[tuple[str, str, int | None], list[dict[str, Any]]] = {}
    for runs in group_cells(records):
        config = runs[0]["config"]
        key = (_task_variant(config["task"]), json.dumps(config["model"], sort_keys=True), task_length(config["task"]))
        slots.setdefault(key, []).append(_cell_row(runs))
    rows = []
    for (variant, model_json, length), cells in slots.items():
        best = max(cells, key=lambda c: -1.0 if c["accuracy"] is None else c["accuracy"])
        searched = varying_fields([c["config"] for c in cells])
        model, task = json.loads(model_json), json.loads(variant)
        rows.append({
            "task": task["name"], "task_config": task, "model": model["name"], "model_config": model,
            "label": model_label(model),
            "layers": model.get("layers"), "width": model.get("width"), "heads": model.get("heads"),
            "length": length, **{k: v for k, v in best.items() if k != "config"},
            "settings": field_values(best["config"], searched), "tried": len(cells),
            "lrs_tried": sorted({c["lr"] for c in cells}), "state_size": state_size(model, length),
        })
    _distinct_labels(rows)
    return rows


def _distinct_labels(rows: list[dict[str, Any]]) -> None:
    """Labels that tell rows apart at one length: a model's ``label`` (``TF-(1, 64)``) adds the model fields in which
    configs of that label differ (``TF-(1, 64) heads=1``), ``task_label`` the task's name with the fields in which
    its variants differ (``dyck k=3``; a field that follows the length, such as a minimum length, is not one), and
    ``task_title`` the same with the seed's name of the task (``bounded Dyck k=3``)."""
    configs = [{"task": r["task_config"], "model": r["model_config"], "length": r["length"]} for r in rows]
    at_length = lambda c: c["length"]  # noqa: E731
    models = variant_fields(configs, lambda c: model_label(c["model"]), ignore=("task", "length", "model.layers",
                            "model.width"), slot=lambda c: json.dumps([c["task"], c["length"]], sort_keys=True))
    tasks = variant_fields(configs, lambda c: c["task"]["name"], ignore=("model", "length"), slot=at_length)
    for r, config, model_fields, task_fields in zip(rows, configs, models, tasks, strict=True):
        r["label"] = labelled(model_label(r["model_config"]), config, model_fields)
        r["task_label"] = labelled(r["task"], config, task_fields)
        r["task_title"] = labelled(task_title(r["task"]), config, task_fields)


def best_per_family(rows: list[dict[str, Any]], by: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """Seed 003 App. H's report of a hyperparameter search: "we tune the models across several hyperparameters and
    report the results based on the best-performing model". Per (task variant, model family, length) the row of
    :func:`length_rows` with the best accuracy over every depth, width and head count tried (each row already
    the best of its own search); its label is the family's (``Mamba (tuned)``), and it carries the winning
    ``config`` (layers, width, heads, lr and the other settings searched) and how many configurations were ``tried``.

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
        config = {"layers": best["layers"], "width": best["width"], "heads": best.get("heads"), "lr": best["lr"],
                  **{k: v for k, v in best["settings"].items() if k != "train.lr"}}
        tried = sum(r["tried"] for r in mine)
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
    """Accuracy; a row chosen by a search adds its winning settings: a tuned row ``0.987 (2×256, lr 1e-3)``, a
    row of a learning-rate search ``0.987 (lr 1e-3)``."""
    text = f"{row['accuracy']:.3f}"
    if "config" in row:
        config = row["config"]
        return f"{text} ({config['layers']}×{config['width']}, lr {config['lr']:.0e})"
    if row["tried"] > 1:
        names = short_names(list(row["settings"]))
        said = ", ".join(f"lr {v:.0e}" if f == "train.lr" else f"{names[f]} {value_text(v)}"
                         for f, v in row["settings"].items())
        return f"{text} ({said})" if said else text
    return text


def length_table(rows: list[dict[str, Any]], title: str) -> Table:
    """Rows: task and model; columns: lengths; cells: accuracy (the mean over seeds of the best cell of any
    search, its settings beside it); the number of seeds and the evaluation said once, below."""
    lengths = sorted({r["length"] for r in rows if r["length"] is not None})
    seeds = sorted({r["seeds"] for r in rows if r["accuracy"] is not None})
    said = "one seed" if seeds == [1] else f"mean over {' or '.join(str(n) for n in seeds) or 'the'} seeds"
    caption = "; ".join(x for x in (f"accuracy: {said} (a search's best configuration, its settings in brackets)",
                                    "state size: at the longest N", protocol_note(rows, "task_label")) if x)
    tasks = list(dict.fromkeys(r["task_label"] for r in rows))
    one_task = len(tasks) == 1  # then the title and the caption name it: no column of one repeated name
    model = Column("model", no_wrap=True)
    names = [model] if one_task else [Column("task", no_wrap=True), model]
    table = Table([*names, *[Column(f"N={n}", "right") for n in lengths],
                   Column("state size", "right"), Column("chance", "right", no_wrap=True)],
                  title=f"length table — {title}", caption=caption)
    for task in tasks:
        for label in dict.fromkeys(r["label"] for r in rows if r["task_label"] == task):
            mine = {r["length"]: r for r in rows if r["task_label"] == task and r["label"] == label}
            cells = []
            for n in lengths:
                row = mine.get(n)
                cells.append("" if row is None else "—" if row["accuracy"] is None else _fmt_cell(row))
            last = mine[max(mine)] if mine else None
            state = "" if last is None else _fmt_state(last)
            chances = [r["chance"] for r in mine.values() if r["chance"] is not None]
            chance = f"{chances[0]:.3f}" if chances else ""
            table.add_row(*([] if one_task else [task]), label, *cells, state, chance)
    return table


def curves(store: Store, rows: list[dict[str, Any]], lengths: dict[str, int]) -> dict[tuple[str, str], list[dict]]:
    """Eval curves (step, accuracy) of the chosen runs at each task's length, keyed by (task, model label)."""
    out: dict[tuple[str, str], list[dict[str, list]]] = {}
    for row in rows:
        if row["length"] != lengths.get(row["task_label"]):
            continue
        for run_id in row["runs"]:
            metrics = store.metric_columns(run_id).get("eval")
            if metrics:
                out.setdefault((row["task_label"], row["label"]), []).append(metrics)
    return out


def choose_curve_lengths(rows: list[dict[str, Any]], prefer: int | None = None) -> dict[str, int]:
    """Per task: ``prefer`` if every model of the task ran at it, else the longest length they all ran at."""
    out = {}
    for task in dict.fromkeys(r["task_label"] for r in rows):
        mine = [r for r in rows if r["task_label"] == task and r["length"] is not None]
        labels = {r["label"] for r in mine}
        common = sorted(n for n in {r["length"] for r in mine}
                        if all(any(r["length"] == n and r["label"] == lab for r in mine) for lab in labels))
        if common:
            out[task] = prefer if prefer in common else common[-1]
    return out


def lengths_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The preset's JSON rows: :func:`length_rows` without the task config and the learning rates tried."""
    keys = ("task", "task_label", "model", "label", "layers", "width", "length", "accuracy", "accuracy_sd", "seeds",
            "lr", "settings", "tried", "state_size", "chance", "steps", "seconds", "eval_examples", "eval_protocol",
            "runs", "failed")
    optional = ("config",)  # tuned rows (best_per_family)
    return [{**{k: r[k] for k in keys}, **{k: r[k] for k in optional if k in r}} for r in rows]
