"""Seed 001 Figures 4-7 (§9.2-§9.3): accuracy and loss against steps, a column per task panel, a line per head list."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ..analysis.capability import aggregate_curves
from .style import literal, new_figure, whole_decades


def heads_figure(rows: list[dict[str, Any]], title: str) -> Figure:
    """Evaluation accuracy (top) and loss (bottom, log) against steps: a column per panel (task configuration), a
    line per head list (mean over seeds, shaded between the lowest and highest seed), chance dashed; under each
    column the legend of its head lists (colours are per column: the panels' lists differ, and one legend of a dozen
    lists reused colours). ``rows`` as ``depthlab.analysis.heads.head_rows`` returns them."""
    panels = list(dict.fromkeys(r["panel"] for r in rows))
    with new_figure(figsize=(2.9 * max(len(panels), 1), 5.6)) as fig:
        axes = fig.subplots(2, max(len(panels), 1), squeeze=False)
        for col, panel in enumerate(panels):
            in_panel = [r for r in rows if r["panel"] == panel]
            colours = {c: f"C{i % 10}" for i, c in enumerate(dict.fromkeys(r["heads"] for r in in_panel))}
            for r in in_panel:
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
            handles, labels = axes[0, col].get_legend_handles_labels()
            if handles:
                axes[1, col].legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2,
                                    frameon=False, fontsize=8, title="heads per layer", title_fontsize=8)
        axes[0, 0].set_ylabel("accuracy (eval)")
        axes[1, 0].set_ylabel("loss (eval)")
        fig.suptitle(literal(title), fontsize=10)
    return fig
