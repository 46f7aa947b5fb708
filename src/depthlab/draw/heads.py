"""Seed 001 Figures 4-7 (§9.2-§9.3): accuracy and loss against steps, a column per task panel, a line per head list."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..analysis.capability import aggregate_curves
from .style import figure_legend, literal, new_figure, whole_decades


def heads_figure(rows: list[dict[str, Any]], title: str) -> Figure:
    """Evaluation accuracy (top) and loss (bottom, log) against steps: a column per panel (task configuration), a
    line per head list (mean over seeds, shaded between the lowest and highest seed), chance dashed; one legend
    naming every head list. ``rows`` as ``depthlab.analysis.heads.head_rows`` returns them."""
    panels = list(dict.fromkeys(r["panel"] for r in rows))
    configs = list(dict.fromkeys(r["heads"] for r in rows))
    colours = {c: f"C{i % 10}" for i, c in enumerate(configs)}
    with new_figure(figsize=(2.9 * max(len(panels), 1) + 1.4, 4.8)) as fig:
        axes = fig.subplots(2, max(len(panels), 1), squeeze=False)
        for col, panel in enumerate(panels):
            for r in (r for r in rows if r["panel"] == panel):
                for row, metric in enumerate(("accuracy", "loss")):
                    steps, mean, lo, hi = aggregate_curves(r["curves"], metric)
                    if not steps:
                        continue
                    ax = axes[row, col]
                    ax.plot(steps, mean, color=colours[r["heads"]], lw=1.3, label=literal(r["heads"]))
                    if len(r["curves"]) > 1:
                        ax.fill_between(steps, lo, hi, color=colours[r["heads"]], alpha=0.15, lw=0)
            chance = next((r["chance"] for r in rows if r["panel"] == panel and r["chance"] is not None), None)
            if chance is not None:
                axes[0, col].axhline(chance, color="grey", ls="--", lw=0.8, label="chance")
            axes[0, col].set_title(literal(panel), fontsize=9)
            axes[0, col].set_ylim(-0.02, 1.02)
            if np.any([line.get_ydata().size for line in axes[1, col].get_lines()]):
                axes[1, col].set_yscale("log")
                whole_decades(axes[1, col])
            axes[1, col].set_xlabel("step")
        axes[0, 0].set_ylabel("accuracy (eval)")
        axes[1, 0].set_ylabel("loss (eval)")
        figure_legend(fig, axes.flat, title="heads per layer")
        fig.suptitle(literal(title), fontsize=10)
    return fig
