"""Seed 002 Figure 2: a language model's accuracy on the retrieval questions; from ``depthlab.llm.bench``'s
summary.

The seed's Figure 2 has two panels, and §4 says what they hold: "I test the large language models on 500 randomly
generated questions for each formulation. The results are presented in Figure 2. For the equations formulation,
I also measure the accuracy for different difficulty levels D". Read so: left, the accuracy of each of the five
formulations (equations and lives-with at D = 5, the seed's setting, or the deepest D asked when 5 was not;
kingdoms at its fixed 5); right, accuracy against D for every formulation asked at several depths (equations, as
the seed; lives-with too when asked). Dashed lines: the accuracy of random guessing (the seed's caption). The seed
draws a series per LLM; a bench run is one model, so the series here are the formulations, one colour each.
"""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from ..llm.prompts import FORMULATIONS
from .style import caption, figure_legend, literal, new_figure

SEED_DEPTH = 5  # the D of the seed's per-formulation comparison


def _err(rows: list[dict[str, Any]]) -> list[list[float]]:
    return [[c["accuracy"] - c["ci_low"] for c in rows], [c["ci_high"] - c["accuracy"] for c in rows]]


def per_formulation(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One cell per formulation, in the seed's order: D = 5 where asked, else the deepest D asked."""
    out = []
    for f in FORMULATIONS:
        mine = [c for c in cells if c["formulation"] == f]
        if mine:
            out.append(next((c for c in mine if c["depth"] == SEED_DEPTH),
                            max(mine, key=lambda c: c["depth"] or 0)))
    return out


def accuracy_figure(summary: dict[str, Any], title: str | None = None) -> Figure:
    """Seed 002 Figure 2: each formulation's accuracy as bars (left) and accuracy against D (right, formulations
    asked at several depths); 95 % intervals as error bars, chance dashed; one legend at the right."""
    cells = [c for c in summary["cells"] if c["n"]]
    bars = per_formulation(cells)
    over_d = [f for f in FORMULATIONS if len({c["depth"] for c in cells if c["formulation"] == f}) > 1]
    colors = {f: f"C{i}" for i, f in enumerate(FORMULATIONS)}
    widths = [1.4 + 0.55 * len(bars)] + ([3.2] if over_d else [])
    with new_figure(figsize=(2.4 + sum(widths), 3.2)) as fig:
        axes = fig.subplots(1, len(widths), squeeze=False, width_ratios=widths)[0]
        ax = axes[0]
        xs = list(range(len(bars)))
        ax.bar(xs, [c["accuracy"] for c in bars], yerr=_err(bars), capsize=3, width=0.65,
               color=[colors[c["formulation"]] for c in bars])
        for x, c in zip(xs, bars, strict=True):
            ax.plot([x - 0.42, x + 0.42], [c["chance"]] * 2, ls="--", lw=1.0, color="black")
        ax.set_xticks(xs, [literal(c["formulation"] + ("" if c["depth"] is None else f"\nD={c['depth']}"))
                           for c in bars], fontsize=8)
        ax.set_ylabel("accuracy")
        ax.set_title("each formulation")
        note = ""
        if over_d:
            ax = axes[1]
            chances = {}
            for f in over_d:
                rows = sorted((c for c in cells if c["formulation"] == f), key=lambda c: c["depth"])
                ds = [c["depth"] for c in rows]
                ax.errorbar(ds, [c["accuracy"] for c in rows], yerr=_err(rows), marker="o", ms=4, lw=1.3,
                            capsize=2, color=colors[f], label=literal(f))
                chances[f] = (sum(c["chance"] * c["n"] for c in rows) / sum(c["n"] for c in rows), min(ds), max(ds))
            # one black line over every depth where the formulations share their chance (as the legend draws it);
            # else each in its formulation's colour, and the caption says so
            shared = len({round(chance, 9) for chance, _, _ in chances.values()}) == 1
            if shared:
                spans = list(chances.values())
                chances = {"": (spans[0][0], min(s[1] for s in spans), max(s[2] for s in spans))}
            for f, (chance, low, high) in chances.items():
                ax.plot([low - 0.3, high + 0.3], [chance, chance], ls="--", lw=1.0, color=colors.get(f, "black"))
            note = "" if shared else " (against D, each formulation's in its colour)"
            ax.set_xticks(sorted({c["depth"] for c in cells if c["formulation"] in over_d}))
            ax.set_xlabel("D (statements per chain)")
            ax.set_title("accuracy against D")
        for ax in axes:
            ax.set_ylim(0, 1.02)
        ax = axes[-1]
        ax.plot([], [], ls="--", lw=1.0, color="black", label="random guessing")
        figure_legend(fig, [ax])
        fig.suptitle(literal(f"seed 002 Figure 2: {title}" if title else "seed 002 Figure 2"), fontsize=9)
        caption(fig, "Bars and points: the share of questions answered correctly; error bars: its 95 % interval; "
                     f"dashed: the accuracy of random guessing{note}.")
    return fig
