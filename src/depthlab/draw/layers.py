"""Seed 002 Figure 4: final loss against depth, IC and non-IC, and the IC partial losses per chain position; from
the rows of ``depthlab.analysis.layers.layers_rows``."""

from __future__ import annotations

from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .style import figure_legend, literal, new_figure, whole_decades

PALETTE = {"ic": ["tab:blue", "tab:cyan", "tab:purple"], "non_ic": ["tab:red", "tab:orange", "tab:brown"]}


def layers_figure(rows: list[dict[str, Any]], title: str = "") -> Figure:
    """Left, final loss against layers, IC and non-IC (a line per D); right, IC partial losses per x_k at the
    largest D; panels of one size, one legend at the right."""
    with new_figure(figsize=(8.4, 3.3)) as fig:
        left, right = fig.subplots(1, 2)
        for formulation in ("ic", "non_ic"):
            mine = [r for r in rows if r["formulation"] == formulation and r["loss"] is not None]
            for i, depth in enumerate(sorted({r["D"] for r in mine})):
                color = PALETTE[formulation][i % 3]
                these = sorted((r for r in mine if r["D"] == depth), key=lambda r: r["layers"])
                x = [r["layers"] for r in these]
                label = f"{'IC' if formulation == 'ic' else 'non-IC'}, D={depth}"
                left.plot(x, [r["loss"] for r in these], "o-", color=color, label=label)
                left.fill_between(x, [r["loss_min"] for r in these], [r["loss_max"] for r in these],
                                  color=color, alpha=0.15, lw=0)
        left.set_xlabel("layers")
        left.set_ylabel("final validation loss (MSE)")
        left.set_yscale("log")
        ic = [r for r in rows if r["formulation"] == "ic" and r["partial_losses"]]
        deepest = max((r["D"] for r in ic), default=None)  # the seed plots the partial losses at its largest D
        ic = sorted((r for r in ic if r["D"] == deepest), key=lambda r: r["layers"])
        if ic:
            names = ic[0]["partial_names"]
            colors = matplotlib.colormaps["viridis"](np.linspace(0.1, 0.85, len(names)))
            for i, (name, color) in enumerate(zip(names, colors, strict=True)):
                right.plot([r["layers"] for r in ic], [r["partial_losses"][i] for r in ic], "s--", color=color,
                           label=f"partial loss {literal(name)}")
        right.set_xlabel("layers")
        right.set_ylabel(f"partial validation loss (IC, D={deepest})")
        right.set_yscale("log")
        for ax in (left, right):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            whole_decades(ax)
        figure_legend(fig, (left, right))
        if title:
            fig.suptitle(literal(title), fontsize=9)
    return fig
