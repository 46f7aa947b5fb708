"""Seed 001 Figures 4-7 (§9.2-§9.3): accuracy and loss against steps, a column per task panel, a line per head list."""

from __future__ import annotations

from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from ..analysis.capability import aggregate_curves
from .style import PROBE_NOTE, caption, chance_line, figure_legend, literal, log_ticks, new_figure

DEPTH_STYLES = ("-", "--", ":", "-.")  # line style by depth: the head list's length


def line_colours(labels: list[str]) -> dict[str, Any]:
    """One colour per label, the same in every panel: tab10's, then tab20's lighter ones, then viridis; never their
    greys, which the chance line wears."""
    palette = [c for c in (*matplotlib.colormaps["tab10"].colors, *matplotlib.colormaps["tab20"].colors[1::2])
               if max(c) - min(c) > 0.05]
    if len(labels) > len(palette):
        palette = list(matplotlib.colormaps["viridis"](np.linspace(0, 0.9, len(labels))))
    return {label: palette[i] for i, label in enumerate(labels)}


def heads_figure(rows: list[dict[str, Any]], title: str) -> Figure:
    """Evaluation accuracy (top) and loss (bottom, log) against steps: a column per panel (task configuration), a
    line per head list (mean over seeds, shaded between the lowest and highest seed), chance dashed. Each head list
    has one colour in every panel (line style by depth) and one entry in the legend below. ``rows`` as
    ``depthlab.analysis.heads.head_rows`` returns them."""
    panels = list(dict.fromkeys(r["panel"] for r in rows))
    colours = line_colours(list(dict.fromkeys(r["heads"] for r in rows)))
    with new_figure(figsize=(2.9 * max(len(panels), 1), 5.9)) as fig:
        axes = fig.subplots(2, max(len(panels), 1), squeeze=False)
        seeds: set[int] = set()
        for col, panel in enumerate(panels):
            for r in (r for r in rows if r["panel"] == panel):
                style = DEPTH_STYLES[(int(r["layers"] or 1) - 1) % len(DEPTH_STYLES)]
                seeds.add(len(r["curves"]))
                for row, metric in enumerate(("accuracy", "loss")):
                    steps, mean, lo, hi = aggregate_curves(r["curves"], metric)
                    if not steps:
                        continue
                    ax = axes[row, col]
                    ax.plot(steps, mean, style, color=colours[r["heads"]], lw=1.3, label=literal(r["heads"]))
                    if len(r["curves"]) > 1:
                        ax.fill_between(steps, lo, hi, color=colours[r["heads"]], alpha=0.12, lw=0)
            chance_line(axes[0, col], next((r["chance"] for r in rows if r["panel"] == panel
                                            and r["chance"] is not None), None))
            axes[0, col].set_title(literal(panel), fontsize=9)
            axes[0, col].set_ylim(-0.02, 1.02)
            if np.any([line.get_ydata().size for line in axes[1, col].get_lines()]):
                axes[1, col].set_yscale("log")
                log_ticks(axes[1, col])
            axes[1, col].set_xlabel("step")
        axes[0, 0].set_ylabel("accuracy (eval)")
        axes[1, 0].set_ylabel("loss (eval)")
        legend = figure_legend(fig, axes.flat, loc="outside lower center", ncols=min(len(colours) + 1, 7),
                               fontsize=8)
        fig.suptitle(literal(title), fontsize=10)
        n = "/".join(str(k) for k in sorted(seeds)) or "the"
        caption(fig, f"Heads per layer [h1, h2, …], one colour each in every panel, the line style by depth. Lines: "
                     f"mean over {n} seeds of evaluation accuracy (top) and loss (bottom) at every log point (on the "
                     f"probe: {PROBE_NOTE}); shaded: from the lowest to the highest seed; grey dashed: chance.",
                legend=legend)
    return fig
