"""Attention maps: every run's model is loaded from its checkpoint and run on the same few examples of its
task (``ctx.examples`` per task, drawn with a fixed seed); the page draws every layer and head with the
tokens on the axes and the values on hover. This section shows one seed per (task, depth) on its first
example; the selection panel shows every seed and example of a cell."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ...analysis.capability import depth_label
from ...analysis.runs import attention_maps, load_run, sample_examples
from ...draw.svg import esc
from ...tasks import TASKS
from ..html import ReportContext, section
from ._common import ensure_runs, grids, model_summary

EXAMPLE_SEED = 0


def _round(a: np.ndarray) -> list:
    return np.round(a.astype(np.float64), 4).tolist()


def compute_attention(ctx: ReportContext) -> None:
    """``ctx.data["runs"][id]["attention"]`` for every detailed run: examples with patterns, or a note why not."""
    runs = ensure_runs(ctx)
    batches: dict[str, Any] = {}
    for record in ctx.detailed:
        run_id = record["id"]
        ctx.tick(f"attention {run_id}")
        if ctx.examples <= 0:
            runs[run_id]["attention"] = {"note": "not computed (--examples 0)"}
            continue
        if record["status"] not in ("done", "interrupted", "diverged"):
            runs[run_id]["attention"] = {"note": f"run is {record['status']}"}
            continue
        task = ((record["config"] or {}).get("task") or {}).get("name")
        if task not in TASKS:  # a plugin's task, its file not given: said in the section, not silently dropped
            runs[run_id]["attention"] = {"note": unloaded_note(task), "unloaded": True}
            continue
        try:
            loaded = load_run(ctx.store, run_id)
            key = json.dumps(record["config"]["task"], sort_keys=True)
            if key not in batches:
                batches[key] = sample_examples(loaded.task, ctx.examples, EXAMPLE_SEED, option="--examples")
            examples = attention_maps(loaded, batches[key])
        except Exception as e:  # one unreadable run must not cost the whole report; the page says why
            runs[run_id]["attention"] = {"note": f"{type(e).__name__}: {e}" if not str(e).startswith("run ")
                                         else str(e)}
            continue
        for ex in examples:
            ex["layers"] = [_round(layer) for layer in ex["layers"]]
        runs[run_id]["attention"] = {"step": loaded.step, "examples": examples}


def unloaded_note(task: str | None) -> str:
    """Why a run of a task this process does not know (a plugin's, loaded without its file) has no maps."""
    return (f"task {task!r} is not loaded in this depthlab (a plugin's task?): its model cannot be run; give the "
            f"plugin's file, depthlab --plugin FILE report …, to draw its attention maps")


@section("attention", "Attention maps", order=30)
def render(ctx: ReportContext) -> str | None:
    compute_attention(ctx)
    runs = ctx.data["runs"]
    unloaded = sorted({record["task"] for record in ctx.detailed
                       if runs.get(record["id"], {}).get("attention", {}).get("unloaded")})
    notes = [f'<p class="muted attention-note">{esc(unloaded_note(task))}</p>' for task in unloaded]
    if not any(r.get("attention", {}).get("examples") for r in runs.values()):
        return "".join(notes) or None
    all_grids = grids(ctx)
    parts = [f'<p class="legend">The first example (of {ctx.examples} per task, the same for every run of a task) '
             'through one run per task and depth (the lowest seed that finished), every layer and head. Rows are '
             'queries, columns keys; hover a square for its value. Click a heat-map cell for every seed and '
             'example.</p>', *notes]
    for grid in all_grids:
        if len(all_grids) > 1:
            parts.append(f'<h3>{esc(grid["model_label"])}</h3>')
        parts.append(f'<p class="grid-note">model <code>{esc(model_summary(grid["model"]))}</code></p>')
        for t, task in enumerate(grid["tasks"]):
            slots = []
            for cell in sorted((c for c in grid["cells"] if c["task_index"] == t),
                               key=lambda c: grid["depths"].index(c["depth"])):
                shown = [r for r in cell["runs"] if runs.get(r, {}).get("attention", {}).get("examples")]
                shown.sort(key=lambda r: (runs[r]["status"] != "done", runs[r]["seed"] or 0))
                if shown:
                    slots.append(f'<div class="attn-slot" data-run="{esc(shown[0])}" data-example="0" '
                                 f'data-cell="{esc(cell["key"])}" title="{esc(depth_label(cell["depth"]))}"></div>')
            if slots:
                parts.append(f'<h4>{esc(task["label"])}</h4>' + "".join(slots))
    return "".join(parts)
