"""Seed 003's length figures (Figure 2): accuracy of each model at each input length, and validation curves at one
length; from the rows of ``depthlab.analysis.lengths``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .style import CHANCE, caption, chance_line, figure_legend, literal, new_figure
from .svg import NEAR_CHANCE

NOTATION = ("TF-(L, W): a transformer with L layers of width W, as seed 003 writes it (Figure 2); LSTM, DSS, Mamba, "
            "LinTF (linear transformer), RetNet and AttnOnly (attention-only) likewise.")


def heatmap_figure(rows: list[dict[str, Any]], title: str) -> Figure:
    """A heat map per task: models (rows) × lengths (columns), accuracy as colour and number, cells not above
    chance hatched and chance ticked on the one colour bar; the notation and the marks said below."""
    tasks = list(dict.fromkeys(r["task_label"] for r in rows))
    with new_figure(figsize=(3.0 * max(len(tasks), 1) + 1.6, 2.9)) as fig:
        axes = fig.subplots(1, max(len(tasks), 1), squeeze=False)[0]
        image = None
        chances: set[float] = set()
        for ax, task in zip(axes, tasks, strict=False):
            mine = [r for r in rows if r["task_label"] == task]
            labels = list(dict.fromkeys(r["label"] for r in mine))
            lengths = sorted({r["length"] for r in mine})
            grid = np.full((len(labels), len(lengths)), np.nan)
            chance = next((r["chance"] for r in mine if r["chance"] is not None), None)
            for r in mine:
                if r["accuracy"] is not None:
                    grid[labels.index(r["label"]), lengths.index(r["length"])] = r["accuracy"]
            image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
            for i in range(len(labels)):
                for j in range(len(lengths)):
                    if math.isnan(grid[i, j]):
                        continue
                    ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="black" if grid[i, j] > 0.6 else "white")
                    if chance is not None and grid[i, j] <= chance + NEAR_CHANCE:
                        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="////", lw=0,
                                               edgecolor="0.65"))
            if chance is not None:
                chances.add(round(chance, 4))
            ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
            ax.set_yticks(range(len(labels)), [literal(label) for label in labels])
            ax.set_xlabel("length N")
            if len(tasks) > 1:
                ax.set_title(literal(next(r["task_title"] for r in mine)), fontsize=9)
        if image is not None:
            bar = fig.colorbar(image, ax=list(axes), label="accuracy (mean over seeds)", shrink=0.9, pad=0.02)
            for chance in chances:
                bar.ax.axhline(chance, color="red", lw=1.5)
        fig.suptitle(literal(title), fontsize=9)
        marks = (f" Hatched: at most chance + {NEAR_CHANCE:g} (chance {', '.join(f'{c:.3f}' for c in sorted(chances))}"
                 ", red on the colour bar)." if chances else "")
        caption(fig, NOTATION + marks)
    return fig


def curves_figure(curve_sets: dict[tuple[str, str], list[dict[str, list]]], chance: dict[str, float],
                  lengths: dict[str, int], title: str | None = None, titles: dict[str, str] | None = None,
                  budgets: dict[str, int] | None = None, target: float | None = None) -> Figure:
    """Validation accuracy against steps at one length, a panel per task (``titles``: its seed name), a colour per
    model (a thin line per seed); one legend under the panels (at the right it ran into a title), each model with
    its step budget where budgets differ (``budgets``: by model label); ``title`` above them, what the lines are
    and why they end below."""
    tasks = list(dict.fromkeys(task for task, _ in curve_sets))
    models = list(dict.fromkeys(label for _, label in curve_sets))
    colors = {label: f"C{i % 10}" for i, label in enumerate(models)}
    differ = budgets is not None and len({budgets.get(m) for m in models}) > 1
    with new_figure(figsize=(3.0 * max(len(tasks), 1) + 1.4, 3.8)) as fig:
        axes = fig.subplots(1, max(len(tasks), 1), squeeze=False)[0]
        for ax, task in zip(axes, tasks, strict=False):
            for (t, label), runs in curve_sets.items():
                if t != task:
                    continue
                said = f"{label} ({budgets[label]:,} steps)" if differ and budgets and label in budgets else label
                for i, metrics in enumerate(runs):
                    ax.plot(metrics["step"], metrics["accuracy"], color=colors[label], lw=1.0, alpha=0.75,
                            label=literal(said) if i == 0 else None)
            chance_line(ax, chance.get(task))
            ax.set_ylim(-0.02, 1.02)
            ax.set_xlabel("step")
            ax.set_title(literal(f"{(titles or {}).get(task, task)}, N = {lengths[task]}"), fontsize=9)
        axes[0].set_ylabel("accuracy (validation)")
        legend = figure_legend(fig, axes, loc="outside lower center", ncol=3, fontsize=8)
        if title:
            fig.suptitle(literal(title), fontsize=9)
        ends = "its step budget" + (" (beside each model)" if differ else "")
        if target is not None:
            ends += f", or early, once validation accuracy reached {target:g}"
        caption(fig, f"A line per seed, a colour per model; grey dashed: chance. A line ends where its run stopped: "
                     f"at {ends}. " + NOTATION, legend=legend)
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
                ax.axhline(min(chances), color="grey", ls=":", lw=0.8, label=CHANCE)
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
        caption(fig, "Each point: the final validation accuracy at that width and length N, the mean over seeds of "
                     "the best configuration searched (learning rate); dotted: chance.")
    return fig
