"""What the built-in sections share: the capability grids, cell keys, run labels and the per-run data and
curve templates the page's selection panel uses. Computed once per report (``ctx.cached``)."""

from __future__ import annotations

from typing import Any

from ...analysis.capability import arrange_grids, depth_label
from ...cells import field_values, list_fields
from ...draw.curves import cell_curves_svg, run_curves_svg
from ...draw.depth import depth_curves_svg
from ...draw.svg import fmt
from ..html import CURVE_RUNS, ReportContext


def cell_key(grid: int, task: int, depth: Any) -> str:
    return f"g{grid}-t{task}-d{depth}"


def grids(ctx: ReportContext) -> list[dict[str, Any]]:
    """The capability grids of the selected runs, each cell with its ``key``; runs know their cell."""

    def compute() -> list[dict[str, Any]]:
        out = arrange_grids(ctx.reading.cells)
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


def _ensure_runs(ctx: ReportContext) -> dict[str, dict[str, Any]]:
    """Fill ``ctx.data["runs"]`` (what the page's script shows of each detailed run) and each one's curve
    template."""
    runs: dict[str, dict[str, Any]] = ctx.data.setdefault("runs", {})
    all_grids = grids(ctx)
    fields = report_fields(ctx)
    cell_of: dict[str, tuple[dict, dict]] = {}
    for grid in all_grids:
        for cell in grid["cells"]:
            for run_id in cell["runs"]:
                cell_of[run_id] = (grid, cell)
    for record in ctx.detailed:
        run_id, config, final = record["id"], record["config"] or {}, record["final"] or {}
        grid, cell = cell_of.get(run_id, (None, None))
        model = config.get("model") or {}
        label = record["task"]
        if cell is not None:
            label = f"{cell['task_label']} × {depth_label(cell['depth'])}"
            if len(all_grids) > 1:
                label += f" ({grid['model_label']})"
        runs[run_id] = {
            "id": run_id, "label": label, "task": record["task"], "model": record["model"],
            "layers": model.get("layers"), "seed": config.get("seed"), "status": record["status"],
            "step": record["step"], "accuracy": final.get("accuracy"), "loss": final.get("loss"),
            "chance": final.get("chance"), "cell": cell["key"] if cell else None,
            "settings": field_values(config, fields),
        }
        figure = run_curves_figure(ctx, run_id, label, final.get("chance"))
        if figure:
            ctx.add_template(f"tpl-run-{run_id}", figure)
    return runs


def report_fields(ctx: ReportContext) -> list[str]:
    """The config fields the runs table shows (``depthlab.cells.list_fields`` of every selected run: of one config
    per cell, which is the same), once."""
    return ctx.cached("fields", lambda: list_fields(ctx.reading.configs))


def ensure_runs(ctx: ReportContext) -> dict[str, dict[str, Any]]:
    return ctx.cached("runs-data", lambda: _ensure_runs(ctx))


def run_curves_figure(ctx: ReportContext, run_id: str, label: str, chance: float | None) -> str | None:
    """Accuracy and loss of one run against steps: eval (solid) and train (dashed)."""
    metrics = ctx.metrics(run_id)
    if not metrics:
        return None
    return ctx.figure(run_curves_svg(run_id, metrics, chance), f"curves-{run_id}",
                      f"run {run_id} ({label}): accuracy and loss against steps; solid: eval, dashed: train")


def cell_curves_figure(ctx: ReportContext, cell: dict[str, Any], title: str) -> str | None:
    """A cell's runs: every seed thin, their mean thick, the band from the lowest to the highest seed."""
    curves = {run_id: ctx.metrics(run_id).get("eval") for run_id in curve_runs(cell)}
    curves = {k: v for k, v in curves.items() if v}
    if not curves:
        return None
    seeds = {run["id"]: run["seed"] for run in cell["first"] if run["id"] in curves}
    return ctx.figure(cell_curves_svg(curves, seeds, cell.get("chance"), title), f"curves-{title}",
                      f"{title}: eval accuracy and loss of each seed (thin), their mean (thick) and the band from the "
                      f"lowest to the highest seed{curves_note(cell)}")


def curve_runs(cell: dict[str, Any]) -> list[str]:
    """The runs of a cell whose curves are drawn: the first :data:`CURVE_RUNS` (reading every run's metrics of a
    store of 100,000 runs would not end)."""
    return cell["runs"][:CURVE_RUNS]


def curves_note(cell: dict[str, Any]) -> str:
    left = cell["n_runs"] - CURVE_RUNS
    return f" (the first {CURVE_RUNS} of its {cell['n_runs']:,} runs; {left:,} not drawn)" if left > 0 else ""


def depth_curves_figure(ctx: ReportContext, grid: dict[str, Any], title: str) -> str:
    """Seed 001 Figure 2 as SVG: a column per task, accuracy above and loss below, a line per depth with the
    band over seeds."""
    curves = {r: ctx.metrics(r).get("eval") for c in grid["cells"] for r in curve_runs(c)}
    return ctx.figure(depth_curves_svg(grid, curves, title), f"training-curves-{title}",
                      f"{title}: eval accuracy (top) and loss (bottom) against steps, mean over seeds with the band "
                      "from the lowest to the highest seed; chance dashed")


def accuracy_text(cell: dict[str, Any], seeds: bool = True) -> str:
    """``0.850 ± 0.071 n=2``, ``1.000 n=1``: the mean over seeds, its spread, and (``seeds``) how many seeds."""
    if cell["accuracy"] is None:
        return "—"
    spread = f" ± {fmt(cell['accuracy_sd'])}" if cell["seeds"] > 1 else ""
    return f"{fmt(cell['accuracy'])}{spread}" + (f" n={cell['seeds']}" if seeds else "")
