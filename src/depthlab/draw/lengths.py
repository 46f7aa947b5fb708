"""Seed 003's length figures (Figure 2): accuracy of each model at each input length, and validation curves at one
length; from the rows of ``depthlab.analysis.lengths``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from .style import new_figure


def heatmap_figure(rows: list[dict[str, Any]], title: str) -> Figure:
    """A heat map per task: models (rows) × lengths (columns), accuracy as colour and number."""
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    with new_figure(figsize=(3.6 * max(len(tasks), 1), 2.6)) as fig:
        axes = fig.subplots(1, max(len(tasks), 1), squeeze=False)
        for ax, task in zip(axes[0], tasks, strict=False):
            mine = [r for r in rows if r["task"] == task]
            labels = list(dict.fromkeys(r["label"] for r in mine))
            lengths = sorted({r["length"] for r in mine})
            grid = np.full((len(labels), len(lengths)), np.nan)
            for r in mine:
                if r["accuracy"] is not None:
                    grid[labels.index(r["label"]), lengths.index(r["length"])] = r["accuracy"]
            ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            for i in range(len(labels)):
                for j in range(len(lengths)):
                    if not math.isnan(grid[i, j]):
                        ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7,
                                color="black" if grid[i, j] > 0.6 else "white")
            ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
            ax.set_yticks(range(len(labels)), labels)
            ax.set_xlabel("length N")
            ax.set_title(task)
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
    return fig


def curves_figure(curve_sets: dict[tuple[str, str], list[dict[str, list]]], chance: dict[str, float],
                  lengths: dict[str, int]) -> Figure:
    """Validation accuracy against steps at one length, a line per model, a panel per task."""
    tasks = list(dict.fromkeys(task for task, _ in curve_sets))
    with new_figure(figsize=(3.6 * max(len(tasks), 1), 2.8)) as fig:
        axes = fig.subplots(1, max(len(tasks), 1), squeeze=False)
        for ax, task in zip(axes[0], tasks, strict=False):
            for (t, label), runs in curve_sets.items():
                if t != task:
                    continue
                for i, metrics in enumerate(runs):
                    ax.plot(metrics["step"], metrics["accuracy"], label=label if i == 0 else None, lw=1.2)
            if task in chance:
                ax.axhline(chance[task], color="grey", ls="--", lw=0.8)
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel("step")
            ax.set_title(f"{task}, N = {lengths[task]}")
            ax.legend(frameon=False, fontsize=7)
        axes[0, 0].set_ylabel("accuracy (validation)")
        fig.tight_layout()
    return fig
