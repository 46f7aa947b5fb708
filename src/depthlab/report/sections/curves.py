"""Training curves per group: seed 001 Figure 2 as SVG, one figure per model variant."""

from __future__ import annotations

from ...draw.svg import esc
from ..html import CURVE_RUNS, ReportContext, section
from ._common import curve_runs, depth_curves_figure, ensure_runs, grids, model_summary


@section("curves", "Training curves", order=20)
def render(ctx: ReportContext) -> str | None:
    all_grids = grids(ctx)
    ensure_runs(ctx)
    figures = []
    for grid in all_grids:
        if not any(ctx.metrics(r).get("eval") for c in grid["cells"] for r in curve_runs(c)):
            continue
        title = "training curves" if len(all_grids) == 1 else grid["model_label"]
        figures.append(f'<p class="grid-note">model <code>{esc(model_summary(grid["model"]))}</code></p>')
        figures.append(depth_curves_figure(ctx, grid, title))
    if not figures:
        return None
    most = max(c["n_runs"] for grid in all_grids for c in grid["cells"])
    bound = (f" A cell of more than {CURVE_RUNS} runs is drawn from its first {CURVE_RUNS} (the largest has "
             f"{most:,}); its accuracy in the heat map is over every run." if most > CURVE_RUNS else "")
    return ('<p class="legend">A column per task: eval accuracy above, eval loss below (log scale), a line per '
            'depth (mean over seeds), shaded from the lowest to the highest seed. Each run\'s own curves are in '
            f'the selection panel above.{bound}</p>' + "".join(figures))
