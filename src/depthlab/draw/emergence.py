"""Seed 002 Figures 6-7: a run's loss and partial losses, and the attention on each path of its circuit, against
training steps; from ``depthlab.analysis.emergence.emergence``'s result."""

from __future__ import annotations

from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .style import new_figure


def emergence_figure(result: dict[str, Any], title: str = "") -> Figure:
    """Left: loss and partial losses against steps (Figure 6); right: attention on each path (Figure 7, App. D),
    the first step above the threshold dotted."""
    steps = result["steps"]
    with new_figure(figsize=(10, 3.8)) as fig:
        left, right = fig.subplots(1, 2)
        left.plot(steps, result["loss"], color="black", lw=1.5, label="loss")
        colors = matplotlib.colormaps["viridis"](np.linspace(0.1, 0.85, len(result["partial_losses"])))
        for (name, values), color in zip(result["partial_losses"].items(), colors, strict=True):
            left.plot(steps, values, color=color, label=f"partial loss {name}")
        left.set_yscale("log")
        left.set_xlabel("step")
        left.set_ylabel("validation loss")
        left.legend(frameon=False, fontsize=7)
        path_colors = matplotlib.colormaps["tab20"](np.linspace(0, 1, len(result["paths"])))
        for p, color in zip(result["paths"], path_colors, strict=True):
            right.plot(steps, p["attention"], color=color, label=p["path"])
            if p["first_step_above"] is not None:
                right.axvline(p["first_step_above"], color=color, lw=0.6, ls=":")
        right.axhline(result["threshold"], color="grey", ls="--", lw=0.8)
        right.set_ylim(-0.02, 1.02)
        right.set_xlabel("step")
        right.set_ylabel("mean attention on path")
        right.legend(frameon=False, fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
        if title:
            fig.suptitle(title, fontsize=9)
        fig.tight_layout()
    return fig
