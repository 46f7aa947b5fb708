"""One tiny training per seed 003 model family through the engine, and the length table built from them."""

import json

import pytest

from depthlab.analysis.lengths import best_per_family, length_rows, state_size
from depthlab.config import parse_run
from depthlab.report.summaries import RUN_SUMMARIES, index_lookup_summary, lengths_summary
from depthlab.store import Store
from depthlab.sweeps.local import run_local
from depthlab.sweeps.presets import load_preset

FAMILIES = [{"name": "lstm", "width": 16}, {"name": "dss", "width": 16}, {"name": "mamba", "width": 16, "layers": 1},
            {"name": "linear_transformer", "width": 16}, {"name": "retnet", "width": 16},
            {"name": "transformer", "width": 16, "layers": 1}]


def config(model, n=4, steps=300):
    return parse_run({
        "task": {"name": "index_lookup", "N": n, "alphabet": 4, "min_length": min(n, 4), "eval_size": 256},
        "model": model,
        "train": {"optimizer": "adamw", "lr": 0.01, "steps": steps, "eval_every": 25, "batch_size": 32,
                  "eval_examples": 128, "target_accuracy": 0.7},
    })


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("seed003"))
    configs = [config(m) for m in FAMILIES] + [config(FAMILIES[-1], n=2, steps=100)]
    results = run_local(configs, store)
    return store, [Store.run_id(c.to_dict()) for c in configs], results


def test_every_family_learns_a_tiny_index_lookup(trained):
    store, ids, _ = trained
    for model, run_id in zip(FAMILIES, ids, strict=False):
        final = store.get_run(run_id)["final"]
        assert final["accuracy"] >= 0.5, (model["name"], final)  # chance is 0.25; the probe stops runs at 0.7


def test_length_table_rows_figures_and_json(trained, tmp_path):
    store, ids, _ = trained
    out, (table,) = lengths_summary(store, ids, tmp_path / "lengths.png", "tiny")
    rows = out["rows"]
    assert len(rows) == 7
    assert {"model", "layers", "width", "length", "accuracy", "state_size"} <= set(rows[0])
    tf = [r for r in rows if r["model"] == "transformer"]
    assert sorted(r["length"] for r in tf) == [2, 4] and tf[0]["label"] == "TF-(1, 16)"
    assert {r["state_size"] for r in tf} == {2 * 16 * 2, 2 * 16 * 4}  # key-value cache at N
    assert next(r for r in rows if r["model"] == "lstm")["state_size"] == 32
    assert out["curve_lengths"] == {"index_lookup": 4}  # the longest length every model has
    assert (tmp_path / "lengths.png").stat().st_size > 0 and (tmp_path / "lengths-curves.png").stat().st_size > 0
    json.dumps(out)
    assert table.row_count == 6  # one task: the title names it, no task column
    assert [c.header for c in table.columns] == ["model", "N=2", "N=4", "state size", "chance"]
    out2, _ = index_lookup_summary(store, ids, tmp_path / "il.png", "tiny")
    assert out2["curve_lengths"] == {"index_lookup": 4}  # 200 was not run


def test_best_learning_rate_is_reported(tmp_path):
    store = Store(tmp_path / "store")
    configs = [config(FAMILIES[-1], n=2, steps=30).model_copy(update={"train": config(FAMILIES[-1]).train.model_copy(
        update={"lr": lr, "steps": 30})}) for lr in (0.01, 1e-6)]
    run_local(configs, store)
    rows = length_rows(store, [Store.run_id(c.to_dict()) for c in configs])
    assert len(rows) == 1 and rows[0]["lr"] == 0.01 and rows[0]["lrs_tried"] == [1e-6, 0.01]


def test_best_configuration_per_family_is_reported(tmp_path):
    """App. H: several depths and widths of one family at one length give one row, the best, with its config."""
    store = Store(tmp_path / "store")
    configs = [config({**FAMILIES[-1], "width": width}, n=2, steps=40) for width in (8, 16)]
    configs.append(configs[0].model_copy(update={"train": configs[0].train.model_copy(update={"lr": 1e-6})}))
    run_local(configs, store)
    ids = [Store.run_id(c.to_dict()) for c in configs]
    rows = length_rows(store, ids)
    assert len(rows) == 2  # one per width, each the best of its learning rates
    (tuned,) = best_per_family(rows)
    best = max(rows, key=lambda r: r["accuracy"])
    assert tuned["accuracy"] == best["accuracy"] and tuned["config"]["width"] == best["width"]
    assert tuned["label"] == "TF (tuned)" and tuned["tried"] == 3 and tuned["runs"] == best["runs"]
    out, (table,) = RUN_SUMMARIES["lengths-tuned"](store, ids, tmp_path / "tuned.png", "tiny")
    assert [r["config"] for r in out["rows"]] == [tuned["config"]] and table.row_count == 1


SEED003_PRESETS = ("seed003-index-lookup", "seed003-dyck", "seed003-equality")


def test_medium_scales_sit_between_quick_and_paper():
    for name in SEED003_PRESETS:
        quick, medium, paper = (load_preset(name, s) for s in ("quick", "medium", "paper"))
        lengths = {s.scale: {r.task.N for r in s.runs} for s in (quick, medium, paper)}
        assert lengths["quick"] < lengths["medium"] or max(lengths["medium"]) > max(lengths["quick"]), name
        assert max(lengths["medium"]) < max(lengths["paper"]), name
        steps = {s.scale: max(r.train.steps for r in s.runs) for s in (quick, medium, paper)}
        assert steps["quick"] < steps["medium"] < steps["paper"] == 250_000, name
        assert all(r.train.target_accuracy == 0.99 for r in medium.runs + paper.runs)  # early stop as the seed


def test_paper_scales_search_app_h_grid():
    """App. H: learning rates {1e-2, 5e-3, …, 1e-6} for every model; depths {1, 2, 4, 6} (LSTM {1, 2, 3}) and
    widths up to 256 for every recurrent model on index lookup, its best configuration reported."""
    app_h_lrs = {0.01, 0.005, 0.001, 0.0005, 0.0001, 0.00005, 0.000001}
    for name in SEED003_PRESETS:
        paper = load_preset(name, "paper")
        for family in {r.model.name for r in paper.runs}:
            mine = [r for r in paper.runs if r.model.name == family]
            assert {r.train.lr for r in mine} == app_h_lrs, (name, family)
    lookup = load_preset("seed003-index-lookup", "paper")
    assert lookup.summary == "index-lookup-tuned" and load_preset("seed003-index-lookup", "medium").summary == \
        "index-lookup"
    assert {r.task.N for r in lookup.runs} == {20, 50, 100, 200, 400}
    for family in ("dss", "mamba", "linear_transformer", "retnet", "lstm"):
        mine = [r for r in lookup.runs if r.model.name == family]
        depths = {1, 2, 3} if family == "lstm" else {1, 2, 4, 6}
        assert {r.model.layers for r in mine} == depths and {r.model.width for r in mine} == {64, 128, 256}
    transformers = [r for r in lookup.runs if r.model.name == "transformer"]
    assert {(r.model.layers, r.model.width) for r in transformers} == {(1, 64)}


@pytest.mark.parametrize("name", SEED003_PRESETS)
def test_medium_preset_runs_a_few_steps(name, tmp_path):
    """The first run of every medium sweep, shortened to 3 steps, trains and summarizes."""
    preset = load_preset(name, "medium", ["train.steps=3", "train.eval_every=3", "task.eval_size=64",
                                          "train.eval_examples=32"])
    runs = [min(sweep, key=lambda r: r.task.N) for sweep in preset.sweeps]
    store = Store(tmp_path / "store")
    run_local(runs, store)
    out, _ = RUN_SUMMARIES[preset.summary](store, [Store.run_id(r.to_dict()) for r in runs], tmp_path / "m.png", name)
    assert len(out["rows"]) == len(runs) and all(r["steps"] == 3 for r in out["rows"])


def test_seed003_presets_load_at_every_scale():
    for name in SEED003_PRESETS:
        for scale in ("quick", "medium", "paper"):
            preset = load_preset(name, scale)
            assert preset.runs and preset.note
            assert all(state_size(r.model.model_dump(), 10) for r in preset.runs)
    quick = load_preset("seed003-index-lookup", "quick")
    assert {r.model.name for r in quick.runs} == {"transformer", "lstm", "dss", "mamba", "linear_transformer", "retnet"}
