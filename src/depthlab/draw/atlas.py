"""The depth atlas's heat map, one per model family: a row per task (and width), a column per size of its axis.

Each square is coloured by the trained minimum depth (one colour per depth, the scale at the side), hatched grey
with ``>L`` where no depth up to L learned, white with ``…`` where runs are missing. The bounds sit in the square
as marks: ``≥L`` bottom left (the binding lower bound), ``≤U`` bottom right (the smallest construction). A red
frame marks a trained depth below the lower bound, an orange one a trained depth above the construction (or none
reached up to a limit at or past it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .style import literal, new_figure

FRAME = {"below_lower": "tab:red", "above_upper": "tab:orange"}


def _rows(cells: Sequence[dict[str, Any]]) -> list[tuple[str, Any]]:
    """(task, width) in order of first appearance."""
    return list(dict.fromkeys((c["task"], c["width"]) for c in cells))


def _size_text(cell: dict[str, Any]) -> str:
    return "" if cell["axis"] is None else f"{cell['axis'].removeprefix('task.')}={cell['size']}"


def atlas_figure(cells: Sequence[dict[str, Any]], family: str, title: str = "") -> Figure:
    """The heat map of one family's atlas cells (``depthlab.analysis.atlas.atlas_cell`` dictionaries)."""
    rows = _rows(cells)
    columns = max((sum(1 for c in cells if (c["task"], c["width"]) == row) for row in rows), default=1)
    deepest = max([c["max_layers"] for c in cells] + [1])
    colours = mpl.colormaps["viridis_r"].resampled(deepest)
    # at least as wide as the two lines of the legend above it (a one-column atlas, a plugin task's, was narrower)
    with new_figure(figsize=(max(5.0, 2.2 + 1.25 * columns), 2.0 + 0.62 * max(len(rows), 1))) as fig:
        ax = fig.subplots()
        ax.set_xlim(-0.5, columns - 0.5)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        for i, row in enumerate(rows):
            for j, cell in enumerate(c for c in cells if (c["task"], c["width"]) == row):
                _square(ax, i, j, cell, colours)
        several = {task for task, _ in rows if sum(t == task for t, _ in rows) > 1}
        labels = [f"{task}, width {width}" if task in several else task for task, width in rows]
        ax.set_yticks(range(len(rows)), [literal(label) for label in labels])
        sized = any(c["axis"] is not None for c in cells)  # a task at its defaults has no size axis: no "size 1"
        ax.set_xticks(range(columns) if sized else [], [f"size {j + 1}" for j in range(columns)] if sized else [])
        ax.tick_params(length=0)
        for spine in ax.spines.values():
            spine.set_visible(False)
        legend = ("colour: trained minimum depth (hatched: none up to >L; …: runs missing)\n"
                  "≥L lower bound, ≤U smallest construction\n"
                  "frame: red below the lower bound, orange above the construction")
        fig.suptitle(f"{literal(title or family)}\n{legend}", fontsize=7.5)  # above the colour bar too
        norm = mpl.colors.BoundaryNorm(np.arange(0.5, deepest + 1.5), deepest)
        bar = fig.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=colours), ax=ax, shrink=0.8,
                           ticks=range(1, deepest + 1))
        bar.set_label("trained minimum depth", fontsize=7.5)
    return fig


def _square(ax: Any, i: int, j: int, cell: dict[str, Any], colours: Any) -> None:
    depth = cell["min_layers"]
    unfinished = cell["status"] == "unfinished"
    face = "white" if unfinished else ("0.85" if depth is None else colours(depth - 1))
    ax.add_patch(Rectangle((j - 0.48, i - 0.46), 0.96, 0.92, facecolor=face, edgecolor="0.6", lw=0.5,
                           hatch=None if depth is not None or unfinished else "///"))
    text = "…" if unfinished else (str(depth) if depth is not None else f">{cell['max_layers']}")
    red, green, blue = mpl.colors.to_rgb(face)
    ink = "white" if 0.299 * red + 0.587 * green + 0.114 * blue < 0.5 else "black"
    ax.text(j, i - 0.08, text, ha="center", va="center", fontsize=11, fontweight="bold", color=ink)
    ax.text(j, i - 0.34, literal(_size_text(cell)), ha="center", va="center", fontsize=6, color=ink)
    if cell["lower"] is not None:
        ax.text(j - 0.44, i + 0.36, f"≥{cell['lower']}", ha="left", va="center", fontsize=7, color=ink)
    if cell["upper"] is not None:
        ax.text(j + 0.44, i + 0.36, f"≤{cell['upper']}", ha="right", va="center", fontsize=7, color=ink)
    for mark in cell["marks"]:
        if mark["mark"] in FRAME:
            ax.add_patch(Rectangle((j - 0.45, i - 0.43), 0.9, 0.86, fill=False, lw=2.4,
                                   edgecolor=FRAME[mark["mark"]]))
