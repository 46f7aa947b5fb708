"""Seed 002 Figure 4: final loss against depth, IC and non-IC, and the IC partial losses per chain position; from
the rows of ``depthlab.analysis.layers.layers_rows``."""

from __future__ import annotations

from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .style import caption, figure_legend, literal, log_ticks, new_figure

PALETTE = {"ic": ["tab:blue", "tab:cyan", "tab:purple"], "non_ic": ["tab:red", "tab:orange", "tab:brown"]}


def _say_where_it_stops(ax: Axes, these: list[dict[str, Any]], deepest: int, color: Any) -> bool:
    """A line that ends before the deepest model of the figure says so at its last point: no finished run there.
    True when it did."""
    last = these[-1]
    if last["layers"] >= deepest:
        return False
    missing = f"{last['layers'] + 1}" if last["layers"] + 1 == deepest else f"{last['layers'] + 1}–{deepest}"
    ax.annotate(f"no finished run\nat {missing} layers", (last["layers"], last["loss"]), xytext=(6, -2),
                textcoords="offset points", fontsize=7, color=color, va="top")
    return True


def layers_figure(rows: list[dict[str, Any]], title: str = "") -> Figure:
    """Left, final loss against layers, IC and non-IC (a line per D and distinguishing settings, mean over seeds,
    shaded from the lowest to the highest seed); right, IC partial losses per x_k at the largest D; a line that
    stops early says so; panels of one size, one legend at the right, what the marks mean below."""
    with new_figure(figsize=(8.4, 3.4)) as fig:
        left, right = fig.subplots(1, 2)
        done = [r for r in rows if r["loss"] is not None]
        deepest = max((r["layers"] for r in done), default=0)
        stops_early = False
        for formulation in ("ic", "non_ic"):
            mine = [r for r in done if r["formulation"] == formulation]
            lines = list(dict.fromkeys((r["D"], r["variant"]) for r in mine))
            for i, (depth, variant) in enumerate(lines):
                color = PALETTE[formulation][i % 3]
                these = sorted((r for r in mine if (r["D"], r["variant"]) == (depth, variant)),
                               key=lambda r: r["layers"])
                x = [r["layers"] for r in these]
                label = f"{'IC' if formulation == 'ic' else 'non-IC'}, D={depth}" + (f", {variant}" if variant else "")
                left.plot(x, [r["loss"] for r in these], "o-", color=color, label=literal(label))
                left.fill_between(x, [r["loss_min"] for r in these], [r["loss_max"] for r in these],
                                  color=color, alpha=0.15, lw=0)
                stops_early |= _say_where_it_stops(left, these, deepest, color)
        left.set_xlabel("layers")
        left.set_ylabel("final validation loss (MSE)")
        left.set_yscale("log")
        ic = [r for r in rows if r["formulation"] == "ic" and r["partial_losses"]]
        largest = max((r["D"] for r in ic), default=None)  # the seed plots the partial losses at its largest D
        ic = [r for r in ic if r["D"] == largest]
        first = ic[0]["variant"] if ic else ""
        ic = sorted((r for r in ic if r["variant"] == first), key=lambda r: r["layers"])
        if ic:
            names = ic[0]["partial_names"]
            colors = matplotlib.colormaps["viridis"](np.linspace(0.1, 0.85, len(names)))
            for i, (name, color) in enumerate(zip(names, colors, strict=True)):
                right.plot([r["layers"] for r in ic], [r["partial_losses"][i] for r in ic], "s--", color=color,
                           label=f"partial loss {literal(name)}")
        right.set_xlabel("layers")
        right.set_ylabel(literal(f"partial validation loss (IC, D={largest}{', ' + first if first else ''})"))
        right.set_yscale("log")
        for ax in (left, right):
            ax.set_xticks(range(1, max(deepest, 1) + 1))
            room = 0.9 if ax is left and stops_early else 0  # room to say where a line stops
            ax.set_xlim(0.7, max(deepest, 1) + 0.3 + room)
            log_ticks(ax)
        figure_legend(fig, (left, right))
        if title:
            fig.suptitle(literal(title), fontsize=9)
        caption(fig, "Left: mean over seeds of the final validation loss, shaded from the lowest to the highest "
                     "seed. Right: the mean over seeds of the partial loss of each chain position x_k (IC).")
    return fig
