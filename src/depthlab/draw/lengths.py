"""Seed 003's length figures (Figure 2): accuracy of each model at each input length, and validation curves at one
length; from the rows of ``depthlab.analysis.lengths``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from .style import figure_legend, literal, new_figure


def heatmap_figure(rows: list[dict[str, Any]], title: str) -> Figure:
    """A heat map per task: models (rows) × lengths (columns), accuracy as colour and number; one colour bar."""
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    with new_figure(figsize=(3.0 * max(len(tasks), 1) + 1.6, 2.6)) as fig:
        axes = fig.subplots(1, max(len(tasks), 1), squeeze=False)[0]
        image = None
        for ax, task in zip(axes, tasks, strict=False):
            mine = [r for r in rows if r["task"] == task]
            labels = list(dict.fromkeys(r["label"] for r in mine))
            lengths = sorted({r["length"] for r in mine})
            grid = np.full((len(labels), len(lengths)), np.nan)
            for r in mine:
                if r["accuracy"] is not None:
                    grid[labels.index(r["label"]), lengths.index(r["length"])] = r["accuracy"]
            image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            for i in range(len(labels)):
                for j in range(len(lengths)):
                    if not math.isnan(grid[i, j]):
                        ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7,
                                color="black" if grid[i, j] > 0.6 else "white")
            ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
            ax.set_yticks(range(len(labels)), [literal(label) for label in labels])
            ax.set_xlabel("length N")
            ax.set_title(literal(task))
        if image is not None:
            fig.colorbar(image, ax=list(axes), label="accuracy (mean over seeds)", shrink=0.9, pad=0.02)
        fig.suptitle(literal(title), fontsize=9)
    return fig


def curves_figure(curve_sets: dict[tuple[str, str], list[dict[str, list]]], chance: dict[str, float],
                  lengths: dict[str, int]) -> Figure:
    """Validation accuracy against steps at one length, a panel per task, a colour per model (a line per seed);
    one legend at the right."""
    tasks = list(dict.fromkeys(task for task, _ in curve_sets))
    models = list(dict.fromkeys(label for _, label in curve_sets))
    colors = {label: f"C{i % 10}" for i, label in enumerate(models)}
    with new_figure(figsize=(3.0 * max(len(tasks), 1) + 1.4, 2.6)) as fig:
        axes = fig.subplots(1, max(len(tasks), 1), squeeze=False)[0]
        for ax, task in zip(axes, tasks, strict=False):
            for (t, label), runs in curve_sets.items():
                if t != task:
                    continue
                for i, metrics in enumerate(runs):
                    ax.plot(metrics["step"], metrics["accuracy"], color=colors[label], lw=1.1, alpha=0.8,
                            label=literal(label) if i == 0 else None)
            if task in chance:
                ax.axhline(chance[task], color="grey", ls="--", lw=0.8, label="chance")
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel("step")
            ax.set_title(f"{literal(task)}, N = {lengths[task]}")
        axes[0].set_ylabel("accuracy (validation)")
        figure_legend(fig, axes, title="a line per seed")
    return fig
