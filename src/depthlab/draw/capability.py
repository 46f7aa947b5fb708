"""The minimum-depth heat map: a row per cell (task, width, varied value), a column per depth.

Each square is the mean final accuracy over seeds (blank where that depth was not trained: the climb had
settled); the minimum depth is outlined in black, the expected depth (the seed's claim or a bound) marked
with a red dashed outline.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from ..analysis.capability import mean_accuracy
from ..sweeps.climb import CellResult
from .style import caption, literal, new_figure
from .svg import NEAR_CHANCE


def min_depth_figure(cells: Sequence[CellResult], title: str = "", expected_label: str = "expected") -> Figure:
    """The heat map of the cells a capability study settled."""
    labels = [c.label for c in cells]
    minimum = [c.min_layers for c in cells]
    expected = [c.expected for c in cells]
    depths = sorted({d for c in cells for d in c.accuracies} | {d for d in minimum if d}
                    | {d for d in expected if d} | {1})
    grid = np.full((len(labels), len(depths)), np.nan)
    for i, cell in enumerate(cells):
        for d, accuracies in cell.accuracies.items():
            value = mean_accuracy(accuracies)
            if value is not None:
                grid[i, depths.index(d)] = value
    with new_figure(figsize=(1.2 + 0.75 * len(depths) + 0.06 * max(map(len, labels), default=8),
                             1.1 + 0.42 * max(len(labels), 1))) as fig:
        ax = fig.subplots()
        image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        for i in range(len(labels)):
            for j in range(len(depths)):
                if not np.isnan(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="black" if grid[i, j] > 0.6 else "white")
                    if cells[i].chance is not None and grid[i, j] <= cells[i].chance + NEAR_CHANCE:
                        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="////", lw=0,
                                               edgecolor="0.65"))
            if minimum[i] in depths:
                ax.add_patch(Rectangle((depths.index(minimum[i]) - 0.5, i - 0.5), 1, 1, fill=False, lw=2.2,
                                       edgecolor="black"))
            if expected[i] in depths:
                ax.add_patch(Rectangle((depths.index(expected[i]) - 0.42, i - 0.42), 0.84, 0.84, fill=False,
                                       lw=1.2, ls="--", edgecolor="tab:red"))
        ax.set_xticks(range(len(depths)), [str(d) for d in depths])
        ax.set_yticks(range(len(labels)), [literal(label) for label in labels])
        ax.set_xlabel("layers")
        if title:
            ax.set_title(literal(title), fontsize=8)
        fig.colorbar(image, ax=ax, label="accuracy (mean over seeds)", shrink=0.8)
        note = ("Black outline: the minimum depth (most seeds reach the target)"
                + (f"; red dashed: {expected_label}" if any(expected) else "")
                + f"; hatched: at most chance + {NEAR_CHANCE:g}; blank: not trained (the climb had settled).")
        caption(fig, note)
    return fig
