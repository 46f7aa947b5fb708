"""Seed 003 Lemma 2, Theorems 1 and 6: the smallest width at which each construction is exact, against N; from
``depthlab.constructions.log_width.widths_table``."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from .style import literal, new_figure


def widths_figure(table: dict[str, Any]) -> Figure:
    """A point per N and construction, with its fitted width ≈ a·ln N + b dashed; N on a log axis."""
    with new_figure(figsize=(5.5, 3.8)) as fig:
        ax = fig.subplots()
        for name, entry in table["constructions"].items():
            ns = np.array([r["N"] for r in entry["rows"]])
            widths = np.array([r["width"] for r in entry["rows"]])
            fit = entry["fit_width"]
            (points,) = ax.plot(ns, widths, "o", label=f"{literal(name)} (smallest exact width)")
            grid = np.geomspace(ns.min(), ns.max(), 100)
            ax.plot(grid, fit["slope_per_ln_N"] * np.log(grid) + fit["intercept"], "--", color=points.get_color(),
                    label=f"{fit['slope_per_ln_N']:.1f}·ln N + {fit['intercept']:.1f}  (R² {fit['r2']:.3f})")
        ax.set_xscale("log")
        ax.set_xlabel("N (sequence length)")
        ax.set_ylabel("model width d_model")
        ax.set_title("seed 003: width at which the construction is still exact")
        ax.legend(fontsize=8)
    return fig
