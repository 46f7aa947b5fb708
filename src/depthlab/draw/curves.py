"""Training curves of runs as inline SVG for the HTML report: one run's eval and train curves, and every seed
of a capability cell with their mean and spread."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..analysis.capability import aggregate_curves
from .depth import CHART_H, CHART_W
from .svg import Series, grid_svg, line_chart_svg, viridis


def run_curves_svg(run_id: str, metrics: dict[str, dict[str, list]], chance: float | None) -> str:
    """Accuracy and loss of one run against steps: eval (solid) and train (dashed)."""
    ev, tr = metrics.get("eval", {}), metrics.get("train", {})
    colours = {"eval": viridis(0.3), "train": viridis(0.75)}
    charts = []
    for name, log in (("accuracy", False), ("loss", True)):
        series = [Series(f"{split} {name}", m["step"], m[name], colours[split], dash=None if split == "eval" else "5 3")
                  for split, m in (("eval", ev), ("train", tr)) if name in m]
        charts.append(line_chart_svg(series, f"{name} — run {run_id}", y_label=name,
                                     y_range=(0, 1.02) if not log else None, log_y=log,
                                     hline=chance if not log else None, width=CHART_W, height=CHART_H))
    return grid_svg(charts, 2, CHART_W, CHART_H)


def cell_curves_svg(curves: Mapping[str, dict[str, list]], seeds: Mapping[str, Any], chance: float | None,
                    title: str) -> str:
    """A cell's runs (``curves``: eval metrics by run id; ``seeds``: their seeds): every seed thin, their mean
    thick, the band from the lowest to the highest seed."""
    colour = viridis(0.35)
    charts = []
    for name, log in (("accuracy", False), ("loss", True)):
        steps, mean, lo, hi = aggregate_curves(list(curves.values()), name)
        series = [Series(f"seed {seeds[rid]}", c["step"], c.get(name, []), viridis(0.7),
                         width=0.9, opacity=0.7, legend=False) for rid, c in curves.items()]
        series.append(Series(f"mean of {len(curves)}", steps, mean, colour, lo=lo, hi=hi, width=2.2))
        charts.append(line_chart_svg(series, f"eval {name}", y_label=name, y_range=(0, 1.02) if not log else None,
                                     log_y=log, hline=chance if not log else None, width=CHART_W, height=CHART_H))
    return grid_svg(charts, 2, CHART_W, CHART_H, title)
