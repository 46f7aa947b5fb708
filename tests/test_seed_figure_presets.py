"""The presets of seed 002 Figures 3/8 and 5, seed 003 Figure 3 and seed 004's hypotheses: they load at both scales
and train a few steps, and each summary (its table and figure) works end to end on tiny runs."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pytest

from depthlab.api.reproduce import run_preset
from depthlab.config import parse_run
from depthlab.constructions.information_flow import closed_form, flow, last_position_form
from depthlab.draw.circuit import circuits_figure
from depthlab.draw.information_flow import information_flow_figure
from depthlab.induction.hypotheses import HYPOTHESES, knob_groups
from depthlab.report.summaries import (
    circuits_summary,
    hypotheses_summary,
    mamba_width_summary,
    preset_summary,
)
from depthlab.store import Store
from depthlab.sweeps.presets import load_preset
from depthlab.training.engine import train_group

NEW = ["seed002-information-flow", "seed002-circuits", "seed003-mamba-width", "seed004-hypotheses"]
TINY_TRAIN = {"steps": 3, "eval_every": 3, "eval_examples": 16, "batch_size": 8}


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_presets_load(name, scale):
    preset = load_preset(name, scale)
    assert preset.note and callable(preset_summary(preset))
    runs = preset.runs
    if name == "seed002-information-flow":
        assert runs == [] and preset.options["D"] == 5  # the seed's figure is drawn at D = 5
    elif name == "seed002-circuits":
        assert [r.seed for r in runs] == [0, 1, 2]  # transformers A, B, C
        assert {(r.task.name, r.task.D, r.task.target, r.model.heads) for r in runs} == {("retrieval_vec", 3, "ic", 1)}
        assert {r.model.layers for r in runs} == ({12} if scale == "paper" else {6})
    elif name == "seed003-mamba-width":
        assert {r.model.name for r in runs} == {"mamba"} and {r.model.layers for r in runs} == {2}
        widths, lengths = {r.model.width for r in runs}, {r.task.N for r in runs}
        if scale == "paper":  # seed 003 App. H.1: widths {32, 64, 256, 512, 1024}, lengths 20 … 400
            assert widths == {32, 64, 256, 512, 1024} and lengths == {20, 50, 100, 200, 400}
        assert len(runs) == len({(r.model.width, r.task.N, r.train.lr) for r in runs})
    else:
        assert {(r.task.name, r.model.layers, r.model.mlp) for r in runs} == {("induction", 2, False)}
        assert len({Store.run_id(r.to_dict()) for r in runs}) == len(runs)  # the base model is trained once
        assert set(preset.options) == {"per_token", "sequences"}


@pytest.mark.parametrize("name", NEW[1:])
def test_quick_runs_train_a_few_steps(tmp_path, name, small_evaluation):
    preset = load_preset(name, "quick", [f"train.{k}={v}" for k, v in TINY_TRAIN.items()])
    results = train_group(preset.runs[:1], Store(tmp_path / "store"))
    (final,) = results.values()
    assert final["steps"] == 3 and np.isfinite(final["loss"])


def test_information_flow_preset_end_to_end(tmp_path):
    """No training: run_preset passes the scale's options to the summary, which simulates and draws."""
    preset = load_preset("seed002-information-flow", "quick")
    trained = []
    result, (table,) = run_preset(preset, Store(tmp_path / "store"), tmp_path, lambda configs, label:
                                  trained.append(configs))
    assert trained == [[]]
    rows = {r["D"]: r for r in result["rows"]}
    assert set(rows) == set(preset.options["depths"])
    for D, r in rows.items():
        assert r["closed_form"] == closed_form(D) and r["layers_any"] == r["closed_form"]  # Lemma 3 is tight
        assert r["layers_last"] == last_position_form(D) >= r["closed_form"]  # Theorem 1 holds for the query
    assert table.row_count == len(rows)
    assert Path(result["figure"]).exists() and result["figure"].endswith("seed002-information-flow-quick.png")


def test_flow_is_figure_3_and_lemma_3():
    f = flow(5)
    assert f["tokens"] == [4, 5, 3, 4, 2, 3, 1, 2, 0, 1, 0]  # (x4 x5) (x3 x4) … (x0 x1) x0
    assert sorted(f["s"]) == list(range(11)) and f["s"][-1] == 0
    assert len(f["token_edges"]) == 5 and len(f["pair_edges"]) == 5
    held = [np.array(h) for h in f["held"]]
    assert all(h.sum(axis=1).max() <= 3**t + 1 for t, h in enumerate(held))  # Lemma 3
    last = f["last"]
    assert [bool(h[last, -1]) for h in held] == [False, False, False, True]  # x_5 reaches s_0 after 3 layers
    fig = information_flow_figure(f, "tiny")
    assert len(fig.axes) == 1 + len(held)


def test_circuits_figure_draws_an_arrow_per_path():
    roles = ["query", "first of pair 1", "second of pair 1", "first of pair 2", "second of pair 2"]
    row = {"name": "A", "seed": 0, "layers": 3, "D": 2, "roles": roles, "intact_loss": 0.01, "circuit_loss": 0.02,
           "heads_used": 2, "paths": [{"layer": 0, "head": 0, "from": "second of pair 1", "to": "first of pair 1"},
                                      {"layer": 2, "head": 0, "from": "query", "to": "second of pair 1"}]}
    fig = circuits_figure([row, {**row, "name": "B", "paths": [], "circuit_loss": None}], "tiny")
    arrows = [a for a in fig.axes[0].texts if isinstance(a, matplotlib.text.Annotation)]
    assert len(arrows) == 2 and len(fig.axes) == 2
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels[0] == "$x_{1}$" and labels[-1].startswith("$x_0$")  # pair 2's first token first, the query last


def _train(store: Store, mappings: list[dict]) -> list[str]:
    return [run_id for m in mappings for run_id in train_group([parse_run(m)], store)]


def test_circuits_summary_on_tiny_runs(tmp_path, monkeypatch):
    from depthlab.report import summaries

    titles, save = [], summaries.save
    monkeypatch.setattr(summaries, "save",
                        lambda fig, *a, **k: titles.append(fig._suptitle.get_text()) or save(fig, *a, **k))
    store = Store(tmp_path / "store")
    ids = _train(store, [{"task": {"name": "retrieval_vec", "N": 2, "D": 2},
                          "model": {"name": "transformer", "layers": 2, "heads": 1, "width": 16, "mlp": False},
                          "train": {"optimizer": "adamw", "lr": 0.003, **TINY_TRAIN, "steps": 20}, "seed": s}
                         for s in (0, 1)])
    summary, (table,) = circuits_summary(store, ids, tmp_path / "c.png", "tiny (seed 002 Figure 5)")
    assert titles == ["tiny (seed 002 Figure 5)"]  # the preset's title names the seed figure; said once
    assert [r["name"] for r in summary["rows"]] == ["A", "B"]
    assert all(r["layers"] == 2 and r["D"] == 2 and r["intact_loss"] > 0 for r in summary["rows"])
    assert Path(summary["figure"]).exists() and table.row_count >= 2


def test_mamba_width_summary_on_tiny_runs(tmp_path):
    store = Store(tmp_path / "store")
    ids = _train(store, [{"task": {"name": "index_lookup", "N": n, "eval_size": 16},
                          "model": {"name": "mamba", "layers": 1, "width": w},
                          "train": {"optimizer": "adamw", "lr": 0.001, **TINY_TRAIN}}
                         for w in (4, 8) for n in (12, 16)])
    summary, (table,) = mamba_width_summary(store, ids, tmp_path / "m.png", "tiny")
    assert {(r["width"], r["length"]) for r in summary["rows"]} == {(4, 12), (4, 16), (8, 12), (8, 16)}
    assert table.row_count == 2  # a row per width, a column per N
    assert Path(summary["figure"]).exists()


def test_hypotheses_summary_on_tiny_runs(tmp_path):
    store = Store(tmp_path / "store")
    base = {"name": "transformer", "layers": 2, "heads": 2, "width": 8, "d_head": 4, "mlp": False}
    ids = _train(store, [{"task": {"name": "induction", "n_tokens": 20}, "model": {**base, **change},
                          "train": {"optimizer": "adamw", "lr": 0.003, **TINY_TRAIN}}
                         for change in ({}, {"width": 16}, {"d_head": 2})])
    summary, (table,) = hypotheses_summary(store, ids, tmp_path / "h.png", "tiny", per_token=4, sequences=16)
    rows = summary["rows"]
    assert [(r["width"], r["d_head"]) for r in rows] == [(8, 4), (16, 4), (8, 2)]
    assert all(np.isfinite(r["median_strength"]) and r["a_power_sd"] >= 0 for r in rows)
    assert rows[0]["ov_dimensions"] == 8 and summary["hypotheses"] == HYPOTHESES
    assert table.row_count == 3 and "Hypothesis 1" in table.caption
    assert Path(summary["figure"]).exists()


def test_knob_groups_pick_the_runs_that_differ_in_one_knob():
    from depthlab.induction.hypotheses import CapacityRow

    def row(width, d_head, heads=2, n_tokens=64):
        return CapacityRow("r", width, d_head, heads, n_tokens, {})

    rows = [row(32, 8), row(16, 8), row(64, 8), row(32, 4), row(32, 8, heads=1), row(16, 4, n_tokens=8)]
    groups = knob_groups(rows)
    assert [r.width for r in groups["width"]] == [16, 32, 64]
    assert [r.d_head for r in groups["d_head"]] == [4, 8]
    assert [r.heads for r in groups["heads"]] == [1, 2]
    assert "n_tokens" not in groups  # its two values differ in other knobs too
