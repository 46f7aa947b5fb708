"""Seed 002 Figures 6-7: a run's loss and partial losses, and the attention on each path of its circuit, against
training steps; from ``depthlab.analysis.emergence.emergence``'s result."""

from __future__ import annotations

from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .style import caption, figure_legend, literal, log_ticks, new_figure


def emergence_figure(result: dict[str, Any], title: str = "") -> Figure:
    """Left: loss and partial losses against steps (Figure 6); right: attention on each path (Figure 7, App. D),
    the first step above the threshold dotted. Panels of one size, one legend at the right."""
    steps = result["steps"]
    with new_figure(figsize=(9.6, 3.4)) as fig:
        left, right = fig.subplots(1, 2)
        left.plot(steps, result["loss"], color="black", lw=1.5, label="loss")
        colors = matplotlib.colormaps["viridis"](np.linspace(0.1, 0.85, len(result["partial_losses"])))
        for (name, values), color in zip(result["partial_losses"].items(), colors, strict=True):
            left.plot(steps, values, color=color, label=f"partial loss {literal(name)}")
        left.set_yscale("log")
        log_ticks(left)
        left.set_xlabel("step")
        left.set_ylabel("validation loss")
        path_colors = matplotlib.colormaps["tab20"](np.linspace(0, 1, len(result["paths"])))
        for p, color in zip(result["paths"], path_colors, strict=True):
            right.plot(steps, p["attention"], color=color, label=literal(p["path"]))
            if p["first_step_above"] is not None:
                right.axvline(p["first_step_above"], color=color, lw=0.6, ls=":")
        right.axhline(result["threshold"], color="grey", ls="--", lw=0.8, label="threshold (dotted: first step above)")
        right.set_ylim(-0.02, 1.02)
        right.set_xlabel("step")
        right.set_ylabel("mean attention on path")
        figure_legend(fig, (left, right), fontsize=7, title="paths: head (layer.head) from → to", title_fontsize=7)
        if title:
            fig.suptitle(literal(title), fontsize=9)
        caption(fig, "Left (seed 002 Figure 6): validation loss and the partial loss of each chain position. Right "
                     "(Figure 7): the mean attention each circuit head puts on its path, the first step it passes the "
                     "threshold dotted in the path's colour.")
    return fig
