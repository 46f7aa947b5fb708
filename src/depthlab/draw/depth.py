"""Seed 001 Figure 2: accuracy and loss against steps, a column per task, a line per depth.

:func:`depth_figure` draws it with matplotlib for files; :func:`depth_curves_svg` draws it as inline SVG for the
HTML report, from a capability grid (``depthlab.analysis.capability.capability_grids``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ..analysis.capability import aggregate_curves, depth_label
from .style import PROBE_NOTE, caption, chance_line, figure_legend, literal, log_ticks, new_figure
from .svg import Series, depth_colours, grid_svg, line_chart_svg

CHART_W, CHART_H = 340, 220  # one chart of the HTML report, in pixels


def depth_figure(curves: dict[tuple[str, int], list[dict[str, list[float]]]], tasks: list[str],
                 chance: dict[str, float], titles: Mapping[str, str] | None = None, title: str = "") -> Figure:
    """Accuracy (top) and loss (bottom) against steps, a column per task, a line per depth.

    ``curves`` maps (task, depth) to each seed's eval metrics (the runs of one cell); ``titles`` names each task's
    column (its seed name; default the task key). Lines are the mean over seeds, shaded between the lowest and
    highest seed (said in the caption below); chance dashed. Panels of one size, one colour per depth in every
    panel, one legend at the right.
    """
    with new_figure(figsize=(2.6 * len(tasks) + 1.2, 4.6)) as fig:
        axes = fig.subplots(2, len(tasks), squeeze=False)
        depths = sorted({layers for (_, layers) in curves})
        colors = matplotlib.colormaps["viridis"](np.linspace(0.1, 0.85, max(len(depths), 1)))
        seeds: set[int] = set()
        for col, task in enumerate(tasks):
            for depth, color in zip(depths, colors, strict=True):
                runs = curves.get((task, depth))
                if not runs:
                    continue
                seeds.add(len(runs))
                for row, metric in enumerate(("accuracy", "loss")):
                    steps, mean, lo, hi = aggregate_curves(runs, metric)
                    ax = axes[row, col]
                    ax.plot(steps, mean, color=color, label=depth_label(depth))
                    if len(runs) > 1:
                        ax.fill_between(steps, lo, hi, color=color, alpha=0.2, lw=0)
            axes[0, col].set_title(literal((titles or {}).get(task, task)), fontsize=9)
            chance_line(axes[0, col], chance.get(task))
            axes[0, col].set_ylim(-0.02, 1.02)
            axes[1, col].set_yscale("log")
            log_ticks(axes[1, col])
            axes[1, col].set_xlabel("step")
        axes[0, 0].set_ylabel("accuracy (eval)")
        axes[1, 0].set_ylabel("loss (eval)")
        figure_legend(fig, axes.flat)
        if title:
            fig.suptitle(literal(title), fontsize=10)
        n = "/".join(str(k) for k in sorted(seeds)) or "the"
        caption(fig, f"Lines: mean over {n} seeds of evaluation accuracy (top) and loss (bottom) at every log point "
                     f"(on the probe: {PROBE_NOTE}); shaded: from the lowest to the highest seed; grey dashed: "
                     "chance.")
    return fig


def depth_curves_svg(grid: dict[str, Any], eval_curves: Mapping[str, dict[str, list] | None], title: str) -> str:
    """The same figure as SVG for one capability grid: a column per task, accuracy above and loss below, a line
    per depth with the band over seeds, its legend entry saying over how many (``2 layers n=3``). ``eval_curves``
    maps each run id of the grid to its eval metrics."""
    colours = dict(zip(grid["depths"], depth_colours(len(grid["depths"])), strict=True))
    acc_charts, loss_charts = [], []
    for t, task in enumerate(grid["tasks"]):
        cells = sorted((c for c in grid["cells"] if c["task_index"] == t),
                       key=lambda c: grid["depths"].index(c["depth"]))
        for name, log, out in (("accuracy", False, acc_charts), ("loss", True, loss_charts)):
            series = []
            for cell in cells:
                curves = [m for m in (eval_curves.get(r) for r in cell["runs"]) if m]
                if not curves:
                    continue
                steps, mean, lo, hi = aggregate_curves(curves, name)
                band = {"lo": lo, "hi": hi} if len(curves) > 1 else {}
                series.append(Series(f"{depth_label(cell['depth'])} n={len(curves)}", steps, mean,
                                     colours[cell["depth"]], **band))
            out.append(line_chart_svg(series, f"{task['label']}" if not log else f"{task['label']} (loss)",
                                      y_label=f"eval {name}", y_range=(0, 1.02) if not log else None, log_y=log,
                                      hline=task["chance"] if not log else None, width=CHART_W, height=CHART_H))
    return grid_svg(acc_charts + loss_charts, len(grid["tasks"]), CHART_W, CHART_H, title)
