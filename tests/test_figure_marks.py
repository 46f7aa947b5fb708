"""Figures a reader trusts (issue 31): one colour per legend entry across a figure's panels, histograms on shared
bins that hide nothing, chance marked wherever accuracy is drawn, bands and marks defined in a caption, a line that
stops early saying why, enough ticks on a log axis."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Polygon

from depthlab.draw.heads import heads_figure
from depthlab.draw.induction import strength_figure
from depthlab.draw.layers import layers_figure
from depthlab.draw.lengths import curves_figure, heatmap_figure

CURVE = {"step": [10, 20, 30], "accuracy": [0.2, 0.5, 0.9], "loss": [1.0, 0.3, 0.05]}


def caption_text(fig) -> str:
    """The caption: text below the figure, or the title of a legend below the panels (lines joined as read)."""
    texts = [t.get_text() for t in fig.texts] + [legend.get_title().get_text() for legend in fig.legends]
    return " ".join(" ".join(texts).split())


def test_a_head_list_has_one_colour_in_every_panel_of_seed001_figures_4_to_7():
    """The issue: red meant [8], [4, 4] and [1, 1, 1, 1] in neighbouring panels."""
    lists = {"Figure 4: memorization": ["[1]", "[8]"], "Figure 5: IC-QA": ["[1, 1]", "[4, 4]"],
             "Figure 7: IC-TM k=2": ["[1, 1]", "[1, 1, 1, 1]"]}
    rows = [{"panel": panel, "heads": heads, "layers": heads.count(",") + 1, "curves": [CURVE, CURVE],
             "chance": 0.25} for panel, names in lists.items() for heads in names]
    fig = heads_figure(rows, "seed 001 Figures 4-7")
    colours: dict[str, set[str]] = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_") and line.get_label() != "chance":
                colours.setdefault(line.get_label(), set()).add(to_hex(line.get_color()))
    assert set(colours) == {"[1]", "[8]", "[1, 1]", "[4, 4]", "[1, 1, 1, 1]"}
    assert all(len(c) == 1 for c in colours.values()), colours  # one colour per list, in every panel
    assert len({next(iter(c)) for c in colours.values()}) == len(colours)  # and no two lists share one
    (legend,) = fig.legends
    assert sorted(t.get_text() for t in legend.get_texts()) == sorted([*colours, "chance"])
    assert all(any(abs(y - 0.25) < 1e-9 for line in ax.get_lines() for y in np.ravel(line.get_ydata())[:1])
               for ax in fig.axes[:3])  # chance on every accuracy panel
    assert "shaded: from the lowest to the highest seed" in caption_text(fig)


def test_strength_histograms_share_their_bins_and_none_hides_another():
    rng = np.random.default_rng(0)
    untrained = rng.normal(0, 0.1, 500)
    fig = strength_figure({"one-hot, 1 layer": untrained, "2 layers": rng.normal(20, 5, 500),
                           "GPT-style, 1 layer": untrained.copy()}, "seed 004")
    ax = fig.axes[0]
    outlines = [p for p in ax.patches if isinstance(p, Polygon)]
    assert len(outlines) == 3 and all(not p.get_fill() for p in outlines)  # outlines: nothing drawn over
    edges = [np.unique(np.round(p.get_xy()[:, 0], 9)) for p in outlines]
    assert all(np.array_equal(edges[0], e) for e in edges[1:])  # the same bins for every model
    assert np.array_equal(outlines[0].get_xy(), outlines[2].get_xy())  # the two untrained models coincide …
    assert outlines[0].get_linewidth() > outlines[1].get_linewidth() > outlines[2].get_linewidth()  # … both show
    assert fig._suptitle is not None and "seed 004" in fig._suptitle.get_text()


def test_length_figures_mark_chance_and_explain_the_notation_and_where_lines_end():
    rows = [{"task": "index_lookup", "task_label": "index_lookup", "task_title": "index lookup", "label": label,
             "length": n, "accuracy": acc, "chance": 1 / 64} for label, acc in (("TF-(1, 64)", 0.99),
                                                                              ("LSTM-(1, 256)", 0.02))
            for n in (20, 50)]
    heat = heatmap_figure(rows, "seed 003 index lookup (seed 003 Figure 2)")
    text = caption_text(heat)
    assert "TF-(L, W)" in text and "chance" in text and "0.016" in text
    assert [ax.get_title() for ax in heat.axes[:1]] == [""]  # one task: the figure's title names it, once
    sets = {("index_lookup", "TF-(1, 64)"): [CURVE],
            ("index_lookup", "LSTM-(1, 256)"): [{"step": [10, 20], "accuracy": [0.1, 0.2]}]}
    curves = curves_figure(sets, {"index_lookup": 1 / 64}, {"index_lookup": 200}, "t", {"index_lookup": "index lookup"},
                           {"TF-(1, 64)": 4000, "LSTM-(1, 256)": 2000}, 0.99)
    labels = [t.get_text() for t in curves.legends[0].get_texts()]
    assert "TF-(1, 64) (4,000 steps)" in labels and "chance" in labels
    assert "once validation accuracy reached 0.99" in caption_text(curves)
    assert curves.axes[0].get_title() == "index lookup, N = 200"


def test_a_layers_line_that_stops_early_says_so_and_the_log_axis_has_enough_ticks():
    rows = [{"formulation": f, "D": 3, "layers": n, "loss": 0.75 if f == "non_ic" else 0.75 / n ** 2,
             "loss_min": 0.02, "loss_max": 0.75, "partial_losses": [], "partial_names": [], "variant": ""}
            for f in ("ic", "non_ic") for n in range(1, 7 if f == "ic" else 5)]
    fig = layers_figure(rows, "seed 002 Figure 4")
    notes = [t.get_text() for t in fig.axes[0].texts]
    assert notes == ["no finished run\nat 5–6 layers"]
    assert fig.axes[0].get_xlim()[1] > 6.3 + 0.5  # room for the note, on the left panel only
    assert fig.axes[1].get_xlim()[1] == pytest.approx(6.3)
    # every line reaches the deepest model: no note, and no empty room after the last point
    whole = layers_figure([r for r in rows if r["formulation"] == "ic"], "seed 002 Figure 4")
    assert not whole.axes[0].texts and whole.axes[0].get_xlim()[1] == pytest.approx(6.3)
    fig.canvas.draw()
    labelled = [t for t in fig.axes[0].get_yticklabels() if t.get_text()]
    assert len(labelled) >= 4


def chance_drawn(ax, chance: float) -> bool:
    """A horizontal line across ``ax`` at ``chance``."""
    return any(len(set(np.ravel(line.get_ydata()))) == 1 and abs(np.ravel(line.get_ydata())[0] - chance) < 1e-9
               for line in ax.get_lines())


def test_seed001_figure_2_names_tasks_by_the_seed_marks_chance_on_every_accuracy_panel_and_defines_its_band():
    from depthlab.draw.depth import depth_figure

    chance = {"icqa": 0.25, "ictm": 0.125}
    curves = {(task, depth): [CURVE, {**CURVE, "accuracy": [0.1, 0.3, 0.7]}] for task in chance for depth in (1, 2)}
    fig = depth_figure(curves, list(chance), chance, {"icqa": "IC-QA", "ictm": "IC-TM"},
                       "seed 001 depth study (seed 001 Figure 2)")
    accuracy_panels = fig.axes[:2]  # the top row
    assert [ax.get_title() for ax in accuracy_panels] == ["IC-QA", "IC-TM"]
    assert all(chance_drawn(ax, c) for ax, c in zip(accuracy_panels, chance.values(), strict=True))
    assert not any(chance_drawn(ax, c) for ax in fig.axes[2:] for c in chance.values())  # loss panels: none
    assert "seed 001 Figure 2" in fig._suptitle.get_text()
    text = caption_text(fig)
    assert "shaded: from the lowest to the highest seed" in text and "chance" in text and "2 seeds" in text


def test_the_chance_entry_comes_after_every_depth_even_one_only_the_last_panel_draws():
    """Seed 001's Figure 2 at the paper's scale: IC-TM alone has 4 layers, and its legend read 1, 2, 3 layers,
    chance, 4 layers."""
    from depthlab.draw.depth import depth_figure

    chance = {"icqa": 0.25, "ictm": 0.125}
    curves = {(task, depth): [CURVE] for task in chance for depth in ((1, 2) if task == "icqa" else (1, 2, 4))}
    fig = depth_figure(curves, list(chance), chance, {"icqa": "IC-QA", "ictm": "IC-TM"}, "seed 001 Figure 2")
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["1 layer", "2 layers", "4 layers", "chance"]


def test_validation_curves_have_one_colour_and_one_legend_entry_per_model_however_many_seeds():
    """The issue: seed 003's Dyck curves drew 10 lines with 4 legend entries, a colour per line."""
    seeds = {"TF-(1, 64)": 3, "TF-(2, 64)": 3, "LSTM-(1, 64)": 3, "Mamba-(1, 64)": 1}
    sets = {("dyck", label): [{"step": [10, 20], "accuracy": [0.5 + i / 100, 0.6]} for i in range(n)]
            for label, n in seeds.items()}
    fig = curves_figure(sets, {"dyck": 0.5}, {"dyck": 50}, "seed 003 Dyck (seed 003 Figure 2)", {"dyck": "Dyck-(2, 2)"})
    (ax,) = fig.axes
    lines = [line for line in ax.get_lines() if line.get_label() != "chance"]
    assert len(lines) == sum(seeds.values())
    ends = np.cumsum([0, *seeds.values()])  # each model's lines are drawn together, in the order of ``sets``
    colours = {label: {to_hex(line.get_color()) for line in lines[a:b]}
               for label, a, b in zip(seeds, ends[:-1], ends[1:], strict=True)}
    assert all(len(c) == 1 for c in colours.values()) and len({next(iter(c)) for c in colours.values()}) == 4
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [*seeds, "chance"]
    assert {to_hex(h.get_color()) for h in legend.legend_handles[:4]} == {next(iter(c)) for c in colours.values()}
    assert chance_drawn(ax, 0.5) and "a colour per model" in caption_text(fig)
