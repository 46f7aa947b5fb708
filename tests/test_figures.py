"""Figures fit to publish: real exponents on log axes, text from data drawn as written, panels of one size with one
legend outside them, no backend chosen by an import, and every command that draws writes PNG and, with
``--format pdf|svg``, the vector file next to it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from depthlab.analysis.emergence import save_history
from depthlab.cli import app
from depthlab.config import parse_run
from depthlab.draw import save
from depthlab.draw.capability import min_depth_figure
from depthlab.draw.circuit import circuit_figure
from depthlab.draw.depth import depth_figure
from depthlab.draw.emergence import emergence_figure
from depthlab.draw.induction import bleeding_figure, log_odds_figure, powers_figure, strength_figure
from depthlab.draw.layers import layers_figure
from depthlab.draw.lengths import curves_figure, heatmap_figure
from depthlab.draw.llm import accuracy_figure
from depthlab.draw.widths import widths_figure
from depthlab.errors import UserError
from depthlab.induction.measure import Bleeding, LogOddsPair, Powers
from depthlab.models import TaskShapes, build_model
from depthlab.store import Store
from depthlab.sweeps.climb import CellResult
from depthlab.training.checkpoint import save_checkpoint

SRC = Path(__file__).resolve().parents[1] / "src"
HOSTILE = [r"$\notacommand{x}$", "$x^2$", r"a\$b", "50% {}"]  # task names, tokens, labels as configs may write them
SVG = "{http://www.w3.org/2000/svg}"
runner = CliRunner()


def svg_of(fig, path: Path) -> ET.Element:
    """``fig`` written as SVG with its text kept as text, parsed (comments, where matplotlib repeats the source
    string of every label, are dropped)."""
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        return ET.parse(save(fig, path)).getroot()


def drawn_text(root: ET.Element, group_prefix: str = "") -> list[str]:
    """The text of every ``<text>`` element (inside groups whose id starts with ``group_prefix``), the pieces of a
    mathtext label (one ``<tspan>`` a glyph) joined."""
    groups = [g for g in root.iter(f"{SVG}g") if g.get("id", "").startswith(group_prefix)] if group_prefix else [root]
    return ["".join((e.text or "").strip() for e in t.iter()) for g in groups for t in g.iter(f"{SVG}text")]


def curves_for(names: list[str], decades: int = 5) -> dict:
    loss = list(np.logspace(0, -decades, 6))
    return {(name, depth): [{"step": list(range(0, 60, 10)), "accuracy": list(np.linspace(0.1, 0.9, 6)),
                             "loss": loss}] for name in names for depth in (1, 2)}


# ------------------------------------------------------------------------------------- log axes


def test_log_axis_tick_labels_are_real_exponents_not_mathtext_source(tmp_path):
    """The loss axis of seed 001 Figure 2 (the README's first figure) and the N axis of the widths figure: tick
    labels read back from the SVG are 10 and an exponent, never ``$\\mathdefault{10^{-2}}$``."""
    depth = svg_of(depth_figure(curves_for(["icqa"]), ["icqa"], {"icqa": 0.25}), tmp_path / "depth.svg")
    ticks = [t for t in drawn_text(depth, "ytick_") if t]
    assert ticks and not [t for t in ticks if "$" in t or "mathdefault" in t], ticks
    assert {"10−2", "10−4", "100"} <= set(ticks), ticks  # 10^-2 drawn as "10" and a superscript "−2"
    table = {"constructions": {"log width": {"rows": [{"N": n, "width": 8 + 2 * i} for i, n in enumerate(
        (10, 100, 1000))], "fit_width": {"slope_per_ln_N": 1.0, "intercept": 6.0, "r2": 0.99}}}}
    ticks = [t for t in drawn_text(svg_of(widths_figure(table), tmp_path / "widths.svg"), "xtick_") if t]
    assert "102" in ticks and not [t for t in ticks if "$" in t or "mathdefault" in t], ticks


def test_a_log_axis_of_less_than_two_and_a_half_decades_labels_enough_ticks(tmp_path):
    """Seed 002 Figure 4's losses lie between 0.03 and 0.75: matplotlib alone labels two or three powers of ten
    there (issue 31); the axis labels 1, 2 and 5 × 10^k instead, as real exponents."""
    rows = [{"formulation": "ic", "D": 2, "layers": n, "loss": loss, "loss_min": loss, "loss_max": loss,
             "partial_losses": [], "partial_names": [], "variant": ""} for n, loss in ((1, 0.75), (2, 0.03))]
    root = svg_of(layers_figure(rows), tmp_path / "layers.svg")
    left = next(g for g in root.iter(f"{SVG}g") if g.get("id") == "axes_1")
    ticks = [t for t in drawn_text(left, "ytick_") if t]
    assert len(ticks) >= 4 and "10−1" in ticks and "2×10−1" in ticks, ticks
    assert not [t for t in ticks if "$" in t or "mathdefault" in t], ticks


# ----------------------------------------------------------------------------- text drawn as written


def _every_figure_with(names: list[str]) -> dict:
    """Every drawing function of depthlab, its data-borne text (task names, model labels, paths, tokens) set to
    ``names``."""
    a, b, c, d = names
    rng = np.random.default_rng(0)
    rows = [{"task": task, "task_label": task, "task_title": task, "label": b, "length": n, "accuracy": 0.5,
             "chance": 0.25, "runs": []} for task in (a, c) for n in (10, 20)]
    cell = CellResult(task=a, width=None, field=None, value=None, max_layers=2, target=0.9, expected=2,
                      accuracies={1: [0.4], 2: [1.0]}, min_layers=2)
    layer_rows = [{"formulation": "ic", "D": 2, "layers": n, "loss": 0.1 / n, "loss_min": 0.05 / n,
                   "loss_max": 0.2 / n, "partial_losses": [0.1 / n, 0.01 / n], "partial_names": [c, d], "variant": ""}
                  for n in (1, 2)]
    steps = [0, 10, 20]
    emergence = {"steps": steps, "loss": [1.0, 0.1, 0.01], "partial_losses": {c: [1.0, 0.5, 0.01]},
                 "paths": [{"path": d, "attention": [0.1, 0.6, 0.9], "first_step_above": 10}], "threshold": 0.5}
    circuit = {"paths": [{"path": d, "loss_without": 0.5}], "circuit": {"loss": 0.1}, "intact": {"loss": 0.05}}
    pair = LogOddsPair(rng.normal(size=200), rng.normal(size=200))
    powers = Powers(np.arange(5), rng.normal(size=5), np.full(5, 0.1), rng.normal(size=5), np.full(5, 0.1), 4)
    bleed = Bleeding(rng.normal(size=20), rng.normal(size=(20, 3)), rng.normal(size=(20, 3)))
    llm = {"cells": [{"formulation": "equations", "depth": k, "n": 10, "accuracy": 0.5, "ci_low": 0.3,
                      "ci_high": 0.7, "chance": 0.25} for k in (1, 2)]}
    return {
        "depth": depth_figure(curves_for(names), names, {n: 0.25 for n in names}),
        "heat": heatmap_figure(rows, c),
        "curves": curves_figure({(task, b): [{"step": steps, "accuracy": [0, .5, 1]}] for task in (a, c)}, {a: 0.5},
                                {a: 20, c: 10}),
        "capability": min_depth_figure([cell], c, d), "layers": layers_figure(layer_rows, a),
        "emergence": emergence_figure(emergence, a), "circuit": circuit_figure(circuit, b),
        "strength": strength_figure({a: pair.strength}), "log_odds": log_odds_figure({b: pair, d: pair}, c),
        "powers": powers_figure(powers, d), "bleeding": bleeding_figure({a: bleed}), "llm": accuracy_figure(llm, a),
    }


def test_text_from_data_is_drawn_as_written_in_every_figure(tmp_path):
    """One helper (``depthlab.draw.style.literal``) escapes data-borne text for every figure: a malformed `$…$`
    would crash the figure, a valid one would change the text; both must come out exactly as written."""
    for name, fig in _every_figure_with(HOSTILE).items():
        texts = drawn_text(svg_of(fig, tmp_path / f"{name}.svg"))
        shown = [h for h in HOSTILE if any(h in t for t in texts)]
        assert shown, f"{name}: none of {HOSTILE} drawn as written in {texts}"


# ------------------------------------------------------------------------ panels and legends


@pytest.fixture(scope="module")
def drawn() -> dict:
    figures = _every_figure_with(["memorization", "TF-(1, 64)", "x1", "0.0 query → pair 1"])
    for fig in figures.values():
        with matplotlib.rc_context(fig.style):
            fig.draw_without_rendering()  # constrained layout places the panels and legends
    return figures


@pytest.mark.parametrize("name", ["depth", "heat", "curves", "layers", "emergence", "log_odds", "powers"])
def test_multi_panel_figures_have_panels_of_one_size_and_one_legend_outside_them(drawn, name):
    fig = drawn[name]
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    sizes = {(round(ax.get_position().width, 3), round(ax.get_position().height, 3)) for ax in panels}
    assert len(panels) > 1 and len(sizes) == 1, f"{name}: panels of sizes {sizes}"
    assert not [ax for ax in fig.axes if ax.get_legend() is not None], f"{name}: a legend inside a panel"
    assert len(fig.legends) <= 1
    for legend in fig.legends:
        box = legend.get_window_extent()
        assert not [ax for ax in fig.axes if box.overlaps(ax.get_window_extent())], f"{name}: legend over a panel"


# --------------------------------------------------------------------------------- backends


def test_no_module_of_depthlab_chooses_a_backend_on_import_and_the_command_draws_with_agg():
    """A notebook's backend survives ``import depthlab`` and every module under it; the ``depthlab`` command's
    own process (``depthlab.cli.main``) chooses Agg."""
    script = """
import importlib, pkgutil, sys, depthlab, matplotlib
for module in pkgutil.walk_packages(depthlab.__path__, "depthlab."):
    if not module.name.endswith("__main__"):
        importlib.import_module(module.name)
print(matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules)
sys.argv = ["depthlab", "tasks", "--json"]
try:
    depthlab.cli.main()
except SystemExit:
    pass
print(matplotlib.get_backend())
"""
    env = {**os.environ, "MPLBACKEND": "svg", "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "svg False" and lines[-1] == "agg", out.stdout[-500:]


# -------------------------------------------------------------------- --format on every command


def _json(result) -> dict:
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


def _both(png: str, vector: str) -> None:
    path = Path(png)
    assert path.suffix == ".png" and path.stat().st_size > 1000, png
    assert path.with_suffix(f".{vector}").stat().st_size > 1000, f"no {vector} next to {png}"


def test_reproduce_and_capability_write_png_and_the_vector_file(tmp_path, small_evaluation):
    out = _json(runner.invoke(app, [
        "reproduce", "seed001-depth", "--store", str(tmp_path / "s"), "--out", str(tmp_path / "fig"), "--json",
        "--format", "pdf", "--set", "train.steps=10", "--set", "train.eval_every=5", "--set", "sweep.seed=[0]",
        "--set", "sweep.model.layers=[1]"]))
    _both(out["figure"], "pdf")
    out = _json(runner.invoke(app, ["capability", "icqa", "--layers", "1", "--seeds", "1", "--set", "train.steps=10",
                                    "--set", "train.eval_every=5", "--store", str(tmp_path / "s"), "--format", "svg",
                                    "--json"]))
    _both(out["figure"], "svg")
    plain = _json(runner.invoke(app, ["capability", "icqa", "--layers", "1", "--seeds", "1", "--set",
                                      "train.steps=10", "--set", "train.eval_every=5", "--store", str(tmp_path / "s"),
                                      "--figure", str(tmp_path / "plain.png"), "--json"]))
    assert Path(plain["figure"]).is_file() and sorted(p.name for p in tmp_path.glob("plain.*")) == ["plain.png"]


@pytest.fixture
def retrieval_run(tmp_path) -> tuple[Store, str]:
    """test_analysis's hand-built induction circuit on the retrieval task, stored with a checkpoint history."""
    from test_analysis import constructed

    store = Store(tmp_path / "store")
    config, model = constructed()
    run_id = store.create_run(config.to_dict(), config.task.name, config.model.name)
    save_checkpoint(store.run_folder(run_id), model.run_state_dict(0), 20, {"run_id": run_id})
    store.finish_run(run_id, {"loss": 0.0, "steps": 20}, step=20)
    for step in (0, 10, 20):
        save_history(store, run_id, model.run_state_dict(0), step)
    return store, run_id


def test_analyze_commands_write_png_and_the_vector_file_and_record_both(retrieval_run, tmp_path):
    from test_analysis import CIRCUIT

    store, run_id = retrieval_run
    s = ["--store", str(store.root), "--format", "svg", "--json"]
    out = _json(runner.invoke(app, ["analyze", "attention", run_id, "-n", "1", *s]))
    _both(out["figures"][0], "svg")
    circuit = tmp_path / "circuit.yaml"
    circuit.write_text(yaml.safe_dump(CIRCUIT))
    out = _json(runner.invoke(app, ["analyze", "circuit", run_id, str(circuit), "-n", "16", *s]))
    _both(out["figure"], "svg")
    out = _json(runner.invoke(app, ["analyze", "emergence", run_id, str(circuit), "--examples", "4", *s]))
    _both(out["figure"], "svg")
    recorded = {a["name"] for a in store.artifacts(run_id, kind="figure")}
    assert {"analysis/attention-seed0-0.png", "analysis/attention-seed0-0.svg", "analysis/circuit.png",
            "analysis/circuit.svg", "analysis/emergence.png", "analysis/emergence.svg"} <= recorded


@pytest.fixture
def induction_run(tmp_path) -> tuple[Store, str]:
    """A stored two-layer GPT-style run on the induction task, its weights as initialised."""
    config = parse_run({"task": {"name": "induction", "n_tokens": 20, "length": 24},
                        "model": {"name": "transformer", "layers": 2, "heads": 2, "width": 16, "mlp": False},
                        "train": {"steps": 1}, "seed": 0})
    model = build_model(config.model, TaskShapes.of(config.task), [config.seed]).eval()
    store = Store(tmp_path / "store")
    run_id = store.create_run(config.to_dict(), config.task.name, config.model.name)
    save_checkpoint(store.run_folder(run_id), model.run_state_dict(0), 1, {"run_id": run_id})
    return store, run_id


def test_induction_writes_png_and_the_vector_file(induction_run, tmp_path):
    store, run_id = induction_run
    out = _json(runner.invoke(app, ["induction", "--run", run_id, "--store", str(store.root), "--sequences", "16",
                                    "--per-token", "2", "--neighbours", "2", "--out", str(tmp_path / "fig"),
                                    "--format", "pdf", "--json"]))
    assert len(out["figures"]) == 4
    for figure in out["figures"]:
        _both(figure, "pdf")


def test_llm_bench_writes_png_and_the_vector_file(tmp_path):
    pytest.importorskip("transformers")
    from depthlab.llm.prompts import generate_many
    from test_llm_local import tiny_model

    model = tiny_model(tmp_path / "gpt2", [p.prompt for p in generate_many("equations", 10, seed=0, depth=1)])
    torch.set_num_threads(1)
    out = _json(runner.invoke(app, ["llm-bench", "--model", str(model), "--formulation", "equations", "--depth", "1",
                                    "-n", "4", "--max-tries", "2", "--max-new-tokens", "1", "--device", "cpu",
                                    "--store", str(tmp_path / "s"), "--out", str(tmp_path / "llm.png"),
                                    "--format", "svg", "--json"]))
    _both(out["figure"], "svg")


def test_an_unknown_format_is_refused_before_any_work(tmp_path):
    result = runner.invoke(app, ["reproduce", "seed001-depth", "--store", str(tmp_path / "s"), "--format", "eps"])
    assert isinstance(result.exception, UserError)
    assert str(result.exception) == "--format: unknown format 'eps'; allowed: png, pdf, svg"
    assert not (tmp_path / "s").exists()


def test_head_lists_never_wear_the_chance_lines_grey():
    """seed001-heads drew [4, 4] grey dashed, like its chance line: the head lists' colours leave the greys out."""
    from depthlab.draw.heads import line_colours

    colours = list(line_colours([f"[{i}]" for i in range(18)]).values())
    assert len(set(colours)) == 18 and all(max(c[:3]) - min(c[:3]) > 0.05 for c in colours)
