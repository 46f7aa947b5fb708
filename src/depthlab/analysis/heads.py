"""Seed 001 Figures 4-7 (§9.2-§9.3): training dynamics of attention-only models with different heads per layer.

§9.2: "we represent the number of heads on each layer using the list [h_1, h_2, ⋯]" — Figure 4 (memorization),
Figure 5 (in-context QA), Figure 6 (template matching): "increasing the number of attention heads allows the model
to more easily memorize the data […] for tasks that require reasoning and generalization […] additional attention
heads does not yield a significant impact". §9.3, Figure 7 (in-context template matching with k examples, heads and
layers): "when each sequence contains 4 examples, a 3-layer transformer with a single head in the last layer
exhibits faster learning compared to models with multiple attention heads […] a 4-layer transformer with a single
head achieves even faster learning".

A *panel* is one task configuration (``Figure 7: ictm, k=4``), a *line* one head list (``[1, 1, 6]``, its length
the depth); each line is the mean of its seeds' evaluation curves. Speed is read as the first logged step at which
the seeds' mean evaluation accuracy reaches ``SPEED_AT``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from ..cells import field_values, group_cells, labelled, variant_fields, variant_labels
from ..store import Store
from ..tasks import task_title
from .capability import aggregate_curves, format_cell, seeds_note
from .runs import is_trained
from .tables import Column, Table

FIGURE_OF_TASK = {"memorization": "Figure 4", "icqa": "Figure 5", "template": "Figure 6", "ictm": "Figure 7"}
SPEED_AT = 0.95


def heads_label(model: dict[str, Any]) -> str:
    """The paper's list notation for a model's heads per layer: ``[1, 1, 6]``."""
    heads = model.get("heads", 1)
    return str(list(heads) if isinstance(heads, list) else [heads] * int(model.get("layers", 1)))


def _steps_to(steps: list[int], mean: list[float], level: float) -> int | None:
    return next((s for s, v in zip(steps, mean, strict=True) if v >= level), None)


def head_rows(store: Store, run_ids: list[str]) -> list[dict[str, Any]]:
    """One row per cell (the runs that differ only in the seed: ``depthlab.cells``): ``panel`` (its task
    configuration), ``heads`` (the head list, with any other setting in which cells of one panel and head list
    differ: ``[1, 4] lr=0.01``), ``settings`` (those settings), ``layers``, ``seeds``, ``accuracy`` and
    ``accuracy_sd`` (final, over seeds), ``steps_to`` (first step the mean curve reaches ``SPEED_AT``, or None),
    ``chance`` and ``curves`` (each seed's eval metrics), in the order the runs are given."""
    records = [r for r in (store.get_run(i) for i in run_ids) if r is not None and is_trained(r)]
    groups = group_cells(records)
    configs = [runs[0]["config"] for runs in groups]
    tasks = list(dict.fromkeys(json.dumps(c["task"], sort_keys=True) for c in configs))
    names = dict(zip(tasks, variant_labels([json.loads(t) for t in tasks], lambda t: t["name"], ignore=("data_seed",)),
                     strict=True))
    fields = variant_fields(configs, lambda c: json.dumps([c["task"], heads_label(c["model"])], sort_keys=True),
                            ignore=("model.heads", "model.layers"))
    rows = []
    for runs, config, distinguishing in zip(groups, configs, fields, strict=True):
        curves = [m for m in (store.metric_columns(r["id"]).get("eval") for r in runs) if m]
        done = [r["final"] for r in runs if r["status"] == "done" and r["final"]]
        accs = np.array([f["accuracy"] for f in done if f.get("accuracy") is not None], dtype=float)
        steps, mean, _, _ = aggregate_curves(curves, "accuracy")
        task = config["task"]
        figure = FIGURE_OF_TASK.get(task["name"])
        name = names[json.dumps(task, sort_keys=True)].replace(task["name"], task_title(task["name"]), 1)
        rows.append({
            "panel": f"{figure}: {name}" if figure else name,
            "heads": labelled(heads_label(config["model"]), config, distinguishing),
            "settings": field_values(config, distinguishing),
            "layers": config["model"].get("layers"),
            "seeds": len(accs),
            "accuracy": float(accs.mean()) if len(accs) else None,
            "accuracy_sd": float(accs.std(ddof=1)) if len(accs) > 1 else (0.0 if len(accs) else None),
            "steps_to": _steps_to(steps, mean, SPEED_AT),
            "chance": done[0].get("chance") if done else None,
            "runs": [r["id"] for r in runs],
            "curves": curves,
        })
    return rows


def heads_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows without their curves (what ``reproduce --json`` prints)."""
    return [{k: v for k, v in r.items() if k != "curves"} for r in rows]


def heads_table(rows: list[dict[str, Any]], title: str) -> Table:
    """A row per cell: its panel, head list, final accuracy (mean ± sd over seeds, said once in the caption),
    speed and chance."""
    n, seeds = seeds_note(rows)
    table = Table([Column("panel", no_wrap=True), Column("heads", no_wrap=True),
                   Column("final accuracy", "right", no_wrap=True),
                   Column(f"first step at {SPEED_AT:g}", "right"), Column("chance", "right", no_wrap=True)],
                  title=title, caption=f"final accuracy: {seeds}; first step at which the seeds' mean evaluation "
                                       f"accuracy reaches {SPEED_AT:g}")
    for r in rows:
        acc = format_cell(r) + (f" (n={r['seeds']})" if r["accuracy"] is not None and r["seeds"] != n else "")
        speed = "not reached" if r["steps_to"] is None else str(r["steps_to"])
        chance = "—" if r["chance"] is None or not math.isfinite(r["chance"]) else f"{r['chance']:.3f}"
        table.add_row(r["panel"], r["heads"], acc, speed, chance)
    return table
