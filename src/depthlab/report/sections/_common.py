"""What the built-in sections share: the capability grids, cell keys, run labels and the per-run data and
curve templates the page's selection panel uses. Computed once per report (``ctx.cached``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...analysis.capability import capability_grids
from ..html import ReportContext
from ..svg import Series, depth_colours, fmt, grid_svg, line_chart_svg, viridis

CHART_W, CHART_H = 340, 220


def plural(depth: Any) -> str:
    return f"{depth} layer" if depth == 1 else f"{depth} layers"


def cell_key(grid: int, task: int, depth: Any) -> str:
    return f"g{grid}-t{task}-d{depth}"


def grids(ctx: ReportContext) -> list[dict[str, Any]]:
    """The capability grids of the selected runs, each cell with its ``key``; runs know their cell."""

    def compute() -> list[dict[str, Any]]:
        out = capability_grids(ctx.store, ctx.run_ids)
        for g, grid in enumerate(out):
            for cell in grid["cells"]:
                cell["key"] = cell_key(g, cell["task_index"], cell["depth"])
                cell["task_label"] = grid["tasks"][cell["task_index"]]["label"]
        return out

    return ctx.cached("grids", compute)


def model_summary(model: dict[str, Any]) -> str:
    """``attention_only: heads=1, attention=relu, init=paper`` (the model config without layers)."""
    fields = ", ".join(f"{k}={v}" for k, v in model.items() if k != "name" and v is not None)
    return f"{model.get('name', '?')}: {fields}" if fields else str(model.get("name", "?"))


def aggregate(curves: list[dict[str, list]], name: str) -> tuple[list[float], list[float], list[float], list[float]]:
    """Steps, mean, lowest and highest of metric ``name`` over runs, at every step any run logged."""
    by_step: dict[int, list[float]] = {}
    for c in curves:
        for step, v in zip(c.get("step", []), c.get(name, []), strict=False):
            if v is not None and math.isfinite(v):
                by_step.setdefault(step, []).append(v)
    steps = sorted(by_step)
    values = [np.asarray(by_step[s]) for s in steps]
    return (steps, [float(v.mean()) for v in values], [float(v.min()) for v in values],
            [float(v.max()) for v in values])


def _ensure_runs(ctx: ReportContext) -> dict[str, dict[str, Any]]:
    """Fill ``ctx.data["runs"]`` (what the page's script shows of each run) and each run's curve template."""
    runs: dict[str, dict[str, Any]] = ctx.data.setdefault("runs", {})
    all_grids = grids(ctx)
    cell_of: dict[str, tuple[dict, dict]] = {}
    for grid in all_grids:
        for cell in grid["cells"]:
            for run_id in cell["runs"]:
                cell_of[run_id] = (grid, cell)
    for record in ctx.runs:
        run_id, config, final = record["id"], record["config"] or {}, record["final"] or {}
        grid, cell = cell_of.get(run_id, (None, None))
        model = config.get("model") or {}
        label = record["task"]
        if cell is not None:
            label = f"{cell['task_label']} × {plural(cell['depth'])}"
            if len(all_grids) > 1:
                label += f" ({grid['model_label']})"
        runs[run_id] = {
            "id": run_id, "label": label, "task": record["task"], "model": record["model"],
            "layers": model.get("layers"), "seed": config.get("seed"), "status": record["status"],
            "step": record["step"], "accuracy": final.get("accuracy"), "loss": final.get("loss"),
            "chance": final.get("chance"), "cell": cell["key"] if cell else None,
        }
        figure = run_curves_figure(ctx, run_id, label, final.get("chance"))
        if figure:
            ctx.add_template(f"tpl-run-{run_id}", figure)
    return runs


def ensure_runs(ctx: ReportContext) -> dict[str, dict[str, Any]]:
    return ctx.cached("runs-data", lambda: _ensure_runs(ctx))


def run_curves_figure(ctx: ReportContext, run_id: str, label: str, chance: float | None) -> str | None:
    """Accuracy and loss of one run against steps: eval (solid) and train (dashed)."""
    metrics = ctx.metrics(run_id)
    if not metrics:
        return None
    ev, tr = metrics.get("eval", {}), metrics.get("train", {})
    colours = {"eval": viridis(0.3), "train": viridis(0.75)}
    charts = []
    for name, log in (("accuracy", False), ("loss", True)):
        series = [Series(f"{split} {name}", m["step"], m[name], colours[split], dash=None if split == "eval" else "5 3")
                  for split, m in (("eval", ev), ("train", tr)) if name in m]
        charts.append(line_chart_svg(series, f"{name} — run {run_id}", y_label=name,
                                     y_range=(0, 1.02) if not log else None, log_y=log,
                                     hline=chance if not log else None, width=CHART_W, height=CHART_H))
    svg = grid_svg(charts, 2, CHART_W, CHART_H)
    return ctx.figure(svg, f"curves-{run_id}", f"run {run_id} ({label}): accuracy and loss against steps; "
                      "solid: eval, dashed: train")


def cell_curves_figure(ctx: ReportContext, cell: dict[str, Any], title: str) -> str | None:
    """A cell's runs: every seed thin, their mean thick, the band from the lowest to the highest seed."""
    curves = {run_id: ctx.metrics(run_id).get("eval") for run_id in cell["runs"]}
    curves = {k: v for k, v in curves.items() if v}
    if not curves:
        return None
    colour = viridis(0.35)
    charts = []
    for name, log in (("accuracy", False), ("loss", True)):
        steps, mean, lo, hi = aggregate(list(curves.values()), name)
        series = [Series(f"seed {ctx.data['runs'][rid]['seed']}", c["step"], c.get(name, []), viridis(0.7),
                         width=0.9, opacity=0.7, legend=False) for rid, c in curves.items()]
        series.append(Series(f"mean of {len(curves)}", steps, mean, colour, lo=lo, hi=hi, width=2.2))
        charts.append(line_chart_svg(series, f"eval {name}", y_label=name, y_range=(0, 1.02) if not log else None,
                                     log_y=log, hline=cell.get("chance") if not log else None,
                                     width=CHART_W, height=CHART_H))
    svg = grid_svg(charts, 2, CHART_W, CHART_H, title)
    return ctx.figure(svg, f"curves-{title}", f"{title}: eval accuracy and loss of each seed (thin), their mean "
                      "(thick) and the band from the lowest to the highest seed")


def depth_curves_figure(ctx: ReportContext, grid: dict[str, Any], title: str) -> str:
    """Seed 001 Figure 2 as SVG: a column per task, accuracy above and loss below, a line per depth with the
    band over seeds."""
    colours = dict(zip(grid["depths"], depth_colours(len(grid["depths"])), strict=True))
    acc_charts, loss_charts = [], []
    for t, task in enumerate(grid["tasks"]):
        cells = sorted((c for c in grid["cells"] if c["task_index"] == t),
                       key=lambda c: grid["depths"].index(c["depth"]))
        for name, log, out in (("accuracy", False, acc_charts), ("loss", True, loss_charts)):
            series = []
            for cell in cells:
                curves = [m for m in (ctx.metrics(r).get("eval") for r in cell["runs"]) if m]
                if not curves:
                    continue
                steps, mean, lo, hi = aggregate(curves, name)
                series.append(Series(plural(cell["depth"]), steps, mean, colours[cell["depth"]],
                                     lo=lo if len(curves) > 1 else None, hi=hi if len(curves) > 1 else None))
            out.append(line_chart_svg(series, f"{task['label']}" if not log else f"{task['label']} (loss)",
                                      y_label=f"eval {name}", y_range=(0, 1.02) if not log else None, log_y=log,
                                      hline=task["chance"] if not log else None, width=CHART_W, height=CHART_H))
    svg = grid_svg(acc_charts + loss_charts, len(grid["tasks"]), CHART_W, CHART_H, title)
    return ctx.figure(svg, f"training-curves-{title}", f"{title}: eval accuracy (top) and loss (bottom) against "
                      "steps, mean over seeds with the band from the lowest to the highest seed; chance dashed")


def accuracy_text(cell: dict[str, Any]) -> str:
    if cell["accuracy"] is None:
        return "—"
    if cell["seeds"] > 1:
        return f"{fmt(cell['accuracy'])} ± {fmt(cell['accuracy_sd'])}"
    return fmt(cell["accuracy"])
