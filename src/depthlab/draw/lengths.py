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
                  lengths: dict[str, int], title: str | None = None) -> Figure:
    """Validation accuracy against steps at one length, a panel per task, a colour per model (a line per seed);
    one legend under the panels (at the right it ran into a title); ``title`` above them."""
    tasks = list(dict.fromkeys(task for task, _ in curve_sets))
    models = list(dict.fromkeys(label for _, label in curve_sets))
    colors = {label: f"C{i % 10}" for i, label in enumerate(models)}
    with new_figure(figsize=(3.0 * max(len(tasks), 1) + 1.4, 3.6)) as fig:
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
        figure_legend(fig, axes, loc="outside lower center", ncol=3, title="a line per seed", fontsize=8)
        if title:
            fig.suptitle(literal(title), fontsize=9)
    return fig


def width_figure(rows: list[dict[str, Any]], title: str) -> Figure:
    """Seed 003 Figure 3: (a) accuracy against width, a line per length N; (b) accuracy against N, a line per
    width; chance dashed. From the rows of ``depthlab.analysis.lengths.length_rows`` (one model family)."""
    rows = [r for r in rows if r["accuracy"] is not None and r["width"] is not None and r["length"] is not None]
    widths = sorted({r["width"] for r in rows})
    lengths = sorted({r["length"] for r in rows})
    acc = {(r["width"], r["length"]): r["accuracy"] for r in rows}
    with new_figure(figsize=(8.4, 3.2)) as fig:
        by_width, by_length = fig.subplots(1, 2, sharey=True)
        for i, n in enumerate(lengths):
            ws = [w for w in widths if (w, n) in acc]
            by_width.plot(ws, [acc[w, n] for w in ws], "o-", color=f"C{i % 10}", label=f"N = {n}")
        for i, w in enumerate(widths):
            ns = [n for n in lengths if (w, n) in acc]
            by_length.plot(ns, [acc[w, n] for n in ns], "s--", color=f"C{(i + len(lengths)) % 10}",
                           label=f"width {w}")
        chances = {r["chance"] for r in rows if r["chance"] is not None}
        for ax in (by_width, by_length):
            if chances:
                ax.axhline(min(chances), color="grey", ls=":", lw=0.8, label="chance")
            ax.set_ylim(-0.02, 1.02)
        by_width.set_xscale("log", base=2)
        by_width.set_xticks(widths, [str(w) for w in widths])
        by_width.set_xlabel("width")
        by_width.set_ylabel("accuracy at length N")
        by_width.set_title("(a) against width", fontsize=8)
        by_length.set_xticks(lengths, [str(n) for n in lengths])
        by_length.set_xlabel("length N")
        by_length.set_title("(b) against length", fontsize=8)
        figure_legend(fig, (by_width, by_length), fontsize=7)
        fig.suptitle(literal(title), fontsize=9)
    return fig
