"""Seed 002 Appendix E: the loss of a circuit without each of its paths; from
``depthlab.analysis.circuit.validate``'s result."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from .style import figure_legend, literal, new_figure


def circuit_figure(result: dict[str, Any], run_id: str) -> Figure:
    """A bar per path (the circuit's loss without it) against the circuit's and the intact model's loss; the legend
    below."""
    paths = result["paths"]
    with new_figure(figsize=(6, 0.3 * len(paths) + 1.6)) as fig:
        ax = fig.subplots()
        ax.barh(range(len(paths)), [p["loss_without"] for p in paths], color="tab:red", alpha=0.7,
                label="circuit without this path")
        ax.axvline(result["circuit"]["loss"], color="black", lw=1, label="circuit only")
        ax.axvline(result["intact"]["loss"], color="grey", ls="--", lw=1, label="intact model")
        ax.set_yticks(range(len(paths)), [literal(p["path"]) for p in paths], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("validation loss")
        ax.set_title(f"run {literal(run_id)}: circuit validation (seed 002 Appendix E)", fontsize=8)
        figure_legend(fig, [ax], loc="outside lower center", ncols=3, fontsize=7)
    return fig
