"""Seed 002 Figure 2 from a small bench summary: the five formulations as bars (D = 5 where asked) with chance
dashed, and accuracy against D for the formulations asked at several depths; one legend outside the panels."""

from __future__ import annotations

import matplotlib
import pytest
from matplotlib.colors import to_hex

from depthlab.draw.llm import accuracy_figure, per_formulation


def cell(formulation: str, depth: int | None, accuracy: float, chance: float = 0.25, n: int = 10) -> dict:
    return {"formulation": formulation, "depth": depth, "n": n, "accuracy": accuracy, "ci_low": accuracy / 2,
            "ci_high": (1 + accuracy) / 2, "chance": chance}


def summary() -> dict:
    cells = [cell("equations", d, 1.0 - 0.15 * d) for d in range(1, 6)]
    cells += [cell("lives-with", d, 0.9 - 0.1 * d) for d in (1, 3, 5)]
    cells += [cell("kingdoms", 5, 0.4), cell("functions", None, 0.3), cell("relatives", None, 0.2, chance=1 / 16)]
    return {"cells": cells}


def drawn(s: dict, title: str | None = "tiny") -> matplotlib.figure.Figure:
    fig = accuracy_figure(s, title)
    with matplotlib.rc_context(fig.style):
        fig.draw_without_rendering()
    return fig


def test_bars_for_the_five_formulations_and_lines_against_d():
    fig = drawn(summary())
    bars, lines = fig.axes
    assert fig.get_suptitle() == "seed 002 Figure 2: tiny"
    assert bars.get_title() == "each formulation" and lines.get_title() == "accuracy against D"
    heights = [round(p.get_height(), 6) for p in bars.patches]
    assert heights == [0.25, 0.4, 0.4, 0.3, 0.2]  # equations and lives-with at D = 5, in the seed's order
    assert [t.get_text() for t in bars.get_xticklabels()] == [
        "equations\nD=5", "lives-with\nD=5", "kingdoms\nD=5", "functions", "relatives"]
    dashed = [ln for ln in bars.get_lines() if ln.get_linestyle() == "--"]
    assert [ln.get_ydata()[0] for ln in dashed] == pytest.approx([0.25, 0.25, 0.25, 0.25, 1 / 16])
    solid = [ln for ln in lines.get_lines() if ln.get_linestyle() == "-"]
    assert [list(ln.get_xdata()) for ln in solid] == [[1, 2, 3, 4, 5], [1, 3, 5]]
    assert list(solid[0].get_ydata()) == pytest.approx([0.85, 0.7, 0.55, 0.4, 0.25])
    assert {t.get_text() for t in fig.legends[0].get_texts()} == {"equations", "lives-with", "random guessing"}
    assert not [ax for ax in fig.axes if ax.get_legend() is not None]
    box = fig.legends[0].get_window_extent()
    assert not [ax for ax in fig.axes if box.overlaps(ax.get_window_extent())]


def test_chance_against_d_is_black_like_its_legend_entry_where_shared_else_in_each_formulations_colour():
    """The committed figure drew equations' and lives-with's shared chance in orange over blue, while the legend's
    "random guessing" was black."""
    fig = drawn(summary())
    dashed = [ln for ln in fig.axes[1].get_lines() if ln.get_linestyle() == "--" and len(ln.get_xdata())]
    assert [(to_hex(ln.get_color()), ln.get_ydata()[0]) for ln in dashed] == [("#000000", 0.25)]
    s = summary()
    s["cells"] = [{**c, "chance": 0.5} if c["formulation"] == "lives-with" else c for c in s["cells"]]
    fig = drawn(s)
    dashed = [ln for ln in fig.axes[1].get_lines() if ln.get_linestyle() == "--" and len(ln.get_xdata())]
    assert [(to_hex(ln.get_color()), ln.get_ydata()[0]) for ln in dashed] == [(to_hex("C0"), 0.25),
                                                                              (to_hex("C1"), 0.5)]
    assert "each formulation's in its colour" in " ".join(fig.texts[-1].get_text().split())


def test_one_depth_only_draws_the_bars_alone():
    s = {"cells": [cell("equations", 3, 0.5), cell("functions", None, 0.3), cell("relatives", None, 0.0, n=0)]}
    fig = drawn(s, None)
    [bars] = fig.axes
    assert fig.get_suptitle() == "seed 002 Figure 2"
    assert [t.get_text() for t in bars.get_xticklabels()] == ["equations\nD=3", "functions"]  # n = 0 left out


def test_per_formulation_prefers_the_seed_depth():
    cells = [cell("equations", d, 0.1 * d) for d in (4, 5, 6)]
    assert per_formulation(cells)[0]["depth"] == 5
    assert per_formulation(cells[:1])[0]["depth"] == 4
