"""The seed 002 presets: they load at both scales, and their summaries work end to end on tiny runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from depthlab.config import parse_run
from depthlab.report.summaries import layers_summary, preset_summary
from depthlab.store import Store
from depthlab.sweeps.local import run_local
from depthlab.sweeps.presets import load_preset
from depthlab.training.engine import train_group


@pytest.mark.parametrize(("name", "scale"), [("seed002-layers", "quick"), ("seed002-layers", "medium"),
                                           ("seed002-layers", "paper"), ("seed002-emergence", "quick"),
                                           ("seed002-emergence", "paper")])
def test_presets_load(name, scale):
    preset = load_preset(name, scale)
    assert preset.runs and preset.note
    assert callable(preset_summary(preset))
    names = {r.task.name for r in preset.runs}
    assert names == {"retrieval_vec"}
    if name == "seed002-layers":
        assert {r.task.target for r in preset.runs} == {"ic", "non_ic"}
    else:
        assert all(r.model.heads == 1 and r.train.keep_checkpoints for r in preset.runs)


def test_layers_medium_scale_has_the_papers_d_between_quick_and_paper(tmp_path, small_evaluation):
    quick, medium, paper = (load_preset("seed002-layers", s) for s in ("quick", "medium", "paper"))
    cells = {(r.task.D, r.task.target) for r in medium.runs}
    assert cells == {(3, "ic"), (3, "non_ic"), (5, "ic")} == {(r.task.D, r.task.target) for r in paper.runs}
    depths = [max(r.model.layers for r in p.runs) for p in (quick, medium, paper)]
    seeds = [len({r.seed for r in p.runs}) for p in (quick, medium, paper)]
    steps = [max(r.train.steps for r in p.runs) for p in (quick, medium, paper)]
    assert depths == sorted(depths) and seeds == sorted(seeds) and steps == sorted(steps) and steps[1] > steps[0]
    few = load_preset("seed002-layers", "medium", ["train.steps=2", "train.eval_every=2", "train.eval_examples=64"])
    runs = [r for r in few.runs if r.model.layers == 1 and r.seed == 0]
    store = Store(tmp_path / "store")
    run_local(runs, store)
    assert all(store.get_run(Store.run_id(r.to_dict()))["status"] == "done" for r in runs)


def test_layers_summary_on_tiny_runs(tmp_path):
    store = Store(tmp_path / "store")
    ids = []
    for target in ("ic", "non_ic"):
        configs = [parse_run({
            "task": {"name": "retrieval_vec", "N": 2, "D": 2, "target": target},
            "model": {"name": "transformer", "layers": 1, "heads": 2, "width": 16, "mlp": False},
            "train": {"optimizer": "adamw", "lr": 0.003, "steps": 20, "batch_size": 16, "eval_every": 10,
                      "eval_examples": 64},
            "seed": seed}) for seed in (0, 1)]
        results = train_group(configs, store)
        ids += list(results)
    figure = tmp_path / "fig" / "layers.png"
    summary, (table,) = layers_summary(store, ids, figure, "tiny")
    rows = {r["formulation"]: r for r in summary["rows"]}
    assert set(rows) == {"ic", "non_ic"}
    assert rows["ic"]["layers"] == 1 and rows["ic"]["seeds"] == 2
    assert len(rows["ic"]["partial_losses"]) == 2 and rows["ic"]["partial_names"] == ["x1", "x2"]
    assert len(rows["non_ic"]["partial_losses"]) == 1 and rows["non_ic"]["partial_names"] == ["x2"]
    assert 0.3 < rows["non_ic"]["loss"] < 3.0  # about the targets' variance after 20 steps
    assert Path(summary["figure"]).exists() and table.row_count == 2


def test_engine_keeps_history_and_logs_partial_losses(tmp_path):
    """The engine hooks the seed 002 analyses rely on: partial losses in the metrics and the final row, and the
    weights of every checkpoint kept as history (read by `analyze emergence`)."""
    from depthlab.analysis.emergence import history

    store = Store(tmp_path / "store")
    config = parse_run({
        "task": {"name": "retrieval_vec", "N": 2, "D": 2},
        "model": {"name": "transformer", "layers": 1, "heads": 1, "width": 8, "mlp": False},
        "train": {"optimizer": "adamw", "steps": 30, "batch_size": 8, "eval_every": 10, "eval_examples": 32,
                  "checkpoint_every": 10, "keep_checkpoints": True}})
    (run_id, final), = train_group([config], store).items()
    assert set(final["partial_losses"]) == {"x1", "x2"}
    assert len(store.metric_columns(run_id)["eval"]["loss_x1"]) == 3
    assert [step for step, _ in history(store, run_id)] == [10, 20]  # the last step is the final checkpoint
