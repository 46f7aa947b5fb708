"""The capability heat map (task × depth, colour by accuracy, chance marked) and the selection panel: a
click on a cell shows the cell's runs, their curves and their attention maps."""

from __future__ import annotations

from ...analysis.capability import depth_label
from ...draw.svg import NEAR_CHANCE, Cell, esc, fmt, heatmap_svg
from ..html import TIP_RUNS, ReportContext, section
from ._common import accuracy_text, cell_curves_figure, ensure_runs, grids, model_summary


def _tip(cell: dict) -> str:
    lines = [f"{cell['task_label']} × {depth_label(cell['depth'])}"]
    more = f", … {cell['n_runs'] - TIP_RUNS:,} more" if cell["n_runs"] > TIP_RUNS else ""
    if cell["accuracy"] is not None:
        accuracies = [run["accuracy"] for run in cell["first"][:TIP_RUNS]]
        each = ", ".join(fmt(a) for a in accuracies if a is not None) + more
        sd = f" ± {fmt(cell['accuracy_sd'])}" if cell["seeds"] > 1 else ""
        lines.append(f"accuracy {fmt(cell['accuracy'])}{sd} over {cell['seeds']} seed"
                     f"{'s' if cell['seeds'] != 1 else ''} ({each})")
    else:
        lines.append("no finished run")
    if cell["chance"] is not None:
        lines.append(f"chance {fmt(cell['chance'])}")
    statuses = cell["statuses"]
    if set(statuses) != {"done"}:
        lines.append("status: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())))
    lines.append("runs: " + " ".join(cell["runs"][:TIP_RUNS]) + more)
    lines.append("click for curves and attention maps")
    return "\n".join(lines)


@section("capability", "Capability: task × depth", order=10)
def render(ctx: ReportContext) -> str | None:
    all_grids = grids(ctx)
    if not all_grids:
        return None
    runs = ensure_runs(ctx)
    cells_data = ctx.data.setdefault("cells", {})
    parts = ['<p class="legend">Colour: final accuracy, mean over seeds (0 to 1). '
             '<span class="chance">Red tick</span>: chance level on the gauge at the foot of each cell (the bar is '
             f'the accuracy); hatched: not above chance (at most chance + {NEAR_CHANCE:g}). Hover a cell for its '
             'numbers and run ids; click it for its runs, their training curves and attention maps.</p>']
    for g, grid in enumerate(all_grids):
        rows = [t["label"] for t in grid["tasks"]]
        cols = [depth_label(d) for d in grid["depths"]]
        cells = []
        for cell in grid["cells"]:
            tip = _tip(cell)
            text = accuracy_text(cell)
            if cell["accuracy"] is None:
                text = "failed" if cell["n_failed"] and cell["n_failed"] == cell["n_runs"] else "no result"
            cells.append(Cell(
                row=cell["task_index"], col=grid["depths"].index(cell["depth"]), value=cell["accuracy"],
                text=text, tip=tip, href=f"#cell={cell['key']}", key=cell["key"], chance=cell["chance"],
                attrs={"data-task": grid["tasks"][cell["task_index"]]["name"], "data-layers": str(cell["depth"]),
                       "data-accuracy": "" if cell["accuracy"] is None else repr(cell["accuracy"]),
                       "data-runs": " ".join(cell["runs"][:TIP_RUNS])}))
            title = f"{cell['task_label']} × {depth_label(cell['depth'])}"
            task = grid["tasks"][cell["task_index"]]
            summary = (f"Accuracy {accuracy_text(cell, seeds=False)} over {cell['seeds']} finished of "
                       f"{cell['n_runs']} runs "
                       f"(chance {fmt(cell['chance'])}); evaluated on {task['eval_protocol'] or '?'}; "
                       f"model {model_summary(grid['model'])}; "
                       f"{cell['steps'] if cell['steps'] is not None else '?'} steps.")
            detailed = [r for r in cell["runs"] if r in runs]
            cells_data[cell["key"]] = {"title": title, "summary": summary, "runs": detailed,
                                       "more": cell["n_runs"] - len(detailed), "accuracy": cell["accuracy"],
                                       "chance": cell["chance"]}
            figure = cell_curves_figure(ctx, cell, title)
            if figure:
                ctx.add_template(f"tpl-cell-{cell['key']}", figure)
        notes = [fmt(t["chance"]) for t in grid["tasks"]]
        title = "final accuracy" if len(all_grids) == 1 else grid["model_label"]
        svg = heatmap_svg(rows, cols, cells, title, row_notes=notes, uid=f"hm{g}", cell_w=140)  # room for n=…
        protocols = "; ".join(f"{t['label']}: {t['eval_protocol']}" for t in grid["tasks"] if t["eval_protocol"])
        parts.append(f'<p class="grid-note">model <code>{esc(model_summary(grid["model"]))}</code></p>')
        parts.append(ctx.figure(svg, f"capability-{grid['model_label']}",
                                f"Capability table as a heat map. Evaluated on — {protocols}"))
    parts.append('<p id="selection-hint" class="muted">Click a cell (or a run id below) to see its runs here.</p>')
    parts.append('<div id="selection" hidden></div>')
    return "".join(parts)
