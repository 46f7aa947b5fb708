"""One tiny training per seed 003 model family through the engine, and the length table built from them."""

import json

import pytest
import torch

from depthlab.analysis.lengths import length_rows, state_size
from depthlab.config import parse_run
from depthlab.report.summaries import index_lookup_summary, lengths_summary
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
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        store = Store(tmp_path_factory.mktemp("seed003"))
        configs = [config(m) for m in FAMILIES] + [config(FAMILIES[-1], n=2, steps=100)]
        results = run_local(configs, store)
    finally:
        torch.set_num_threads(threads)
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
    assert table.row_count == 6 and len(table.columns) == 2 + 2 + 2
    out2, _ = index_lookup_summary(store, ids, tmp_path / "il.png", "tiny")
    assert out2["curve_lengths"] == {"index_lookup": 4}  # 200 was not run


def test_best_learning_rate_is_reported(tmp_path):
    store = Store(tmp_path / "store")
    configs = [config(FAMILIES[-1], n=2, steps=30).model_copy(update={"train": config(FAMILIES[-1]).train.model_copy(
        update={"lr": lr, "steps": 30})}) for lr in (0.01, 1e-6)]
    run_local(configs, store)
    rows = length_rows(store, [Store.run_id(c.to_dict()) for c in configs])
    assert len(rows) == 1 and rows[0]["lr"] == 0.01 and rows[0]["lrs_tried"] == [1e-6, 0.01]


def test_seed003_presets_load_at_both_scales():
    for name in ("seed003-index-lookup", "seed003-dyck", "seed003-equality"):
        for scale in ("quick", "paper"):
            preset = load_preset(name, scale)
            assert preset.runs and preset.note
            assert all(state_size(r.model.model_dump(), 10) for r in preset.runs)
    quick = load_preset("seed003-index-lookup", "quick")
    assert {r.model.name for r in quick.runs} == {"transformer", "lstm", "dss", "mamba", "linear_transformer", "retnet"}
