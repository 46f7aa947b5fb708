"""Seed 002 Figure 2: a language model's accuracy on the retrieval questions; from ``depthlab.llm.bench``'s
summary."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from ..llm.prompts import CONDITIONAL, FORMULATIONS
from .style import figure_legend, literal, new_figure


def accuracy_figure(summary: dict[str, Any], title: str | None = None) -> Figure:
    """Accuracy against D per retrieval formulation (left), the conditional-retrieval formulations as bars
    (right); 95 % intervals as error bars, chance dashed; one legend at the right."""
    cells = [c for c in summary["cells"] if c["n"]]
    chained = [c for c in cells if c["formulation"] not in CONDITIONAL]
    conditional = [c for c in cells if c["formulation"] in CONDITIONAL]
    panels = [p for p in (chained, conditional) if p] or [chained]
    widths = [3.0 if p is chained else 1.2 + 0.6 * len(p) for p in panels]
    with new_figure(figsize=(2.2 + sum(widths), 3.0)) as fig:
        axes = fig.subplots(1, len(panels), squeeze=False, width_ratios=widths)[0]
        colors = {f: f"C{i}" for i, f in enumerate(FORMULATIONS)}
        for ax, panel in zip(axes, panels, strict=True):
            if panel is chained:
                for f in dict.fromkeys(c["formulation"] for c in panel):
                    rows = sorted((c for c in panel if c["formulation"] == f), key=lambda c: c["depth"])
                    xs = [c["depth"] for c in rows]
                    ys = [c["accuracy"] for c in rows]
                    err = [[y - c["ci_low"] for y, c in zip(ys, rows, strict=True)],
                           [c["ci_high"] - y for y, c in zip(ys, rows, strict=True)]]  # fmt: skip
                    ax.errorbar(xs, ys, yerr=err, marker="o", ms=4, lw=1.2, capsize=2, color=colors[f],
                                label=literal(f))
                    chance = sum(c["chance"] * c["n"] for c in rows) / sum(c["n"] for c in rows)
                    lo, hi = min(xs), max(xs)
                    ax.plot([lo - 0.3, hi + 0.3], [chance, chance], ls="--", lw=0.9, color=colors[f], alpha=0.8)
                ax.set_xlabel("D (depth)")
                ax.set_ylabel("accuracy")
                ax.set_title("retrieval")
                depths = sorted({c["depth"] for c in panel})
                ax.set_xticks(depths)
            else:
                names = [c["formulation"] for c in panel]
                xs = list(range(len(panel)))
                ys = [c["accuracy"] for c in panel]
                err = [[y - c["ci_low"] for y, c in zip(ys, panel, strict=True)],
                       [c["ci_high"] - y for y, c in zip(ys, panel, strict=True)]]  # fmt: skip
                ax.bar(xs, ys, yerr=err, capsize=3, color=[colors[f] for f in names], width=0.6,
                       label=[literal(f) for f in names])
                for x, c in zip(xs, panel, strict=True):
                    ax.plot([x - 0.4, x + 0.4], [c["chance"]] * 2, ls="--", lw=0.9, color="black")
                ax.set_xticks(xs, [literal(f) for f in names])
                ax.set_title("conditional retrieval")
            ax.set_ylim(0, 1.02)
        figure_legend(fig, axes, title="dashed: chance")
        if title:
            fig.suptitle(literal(title), fontsize=9)
    return fig
