"""Seed 001's figure presets: seed001-attention (Figure 3), seed001-heads (Figures 4-7), seed001-nested (§7). Each
loads at both scales and runs a few steps, and its summary draws its figure from the tiny store."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from depthlab.analysis.construction_maps import FIGURE3_EXAMPLES
from depthlab.api.reproduce import climb_studies
from depthlab.api.training import train_configs
from depthlab.report.summaries import attention_summary, heads_summary, min_depth_summary, preset_summary
from depthlab.store import Store
from depthlab.sweeps.presets import load_preset

FEW = ["train.steps=6", "train.eval_every=3", "train.eval_examples=64", "train.warmup_steps=0"]


def _train(preset, store: Store) -> list[str]:
    train_configs(preset.runs, store, preset.name)
    return [store.run_id(run.to_dict()) for run in preset.runs]


@pytest.mark.parametrize("scale", ["quick", "paper"])
def test_presets_load(scale):
    attention = load_preset("seed001-attention", scale)
    assert attention.note and attention.summary == "attention" and callable(preset_summary(attention))
    assert {(r.task.name, r.task.k, r.model.layers, r.model.heads) for r in attention.runs} == {("icqa", 2, 2, 1)}
    assert {r.model.init for r in attention.runs} == {"paper", "random"}

    heads = load_preset("seed001-heads", scale)
    assert heads.summary == "heads" and callable(preset_summary(heads))
    lists = {(r.task.name, str(r.model.heads_per_layer)) for r in heads.runs}
    assert {t for t, _ in lists} == {"memorization", "icqa", "template", "ictm"}
    assert ("ictm", "[1, 1, 1, 1]") in lists and ("memorization", "[8]") in lists
    assert {r.task.k for r in heads.runs if r.task.name == "ictm"} == {2, 4}  # Figure 7's k examples
    l = next(r.task.l for r in heads.runs if r.task.name == "ictm")
    assert ("ictm", str([1, 1, 2 * l])) in lists  # Theorem 6's heads

    nested = load_preset("seed001-nested", scale)
    assert nested.summary == "min-depth" and callable(preset_summary(nested))
    assert [s.expected for s in nested.studies] == [2 * s.base["task"]["hops"] for s in nested.studies]
    assert [s.base["task"]["hops"] for s in nested.studies] == [1, 2, 3]
    assert all(max(s.layers) >= s.expected for s in nested.studies)


def test_attention_preset_draws_figure3_next_to_the_construction(tmp_path):
    store = Store(tmp_path / "store")
    preset = load_preset("seed001-attention", "quick", FEW)
    ids = _train(preset, store)
    figure = tmp_path / "fig" / "attention.png"
    summary, (table,) = attention_summary(store, ids, figure, "tiny")
    assert Path(summary["figure"]).exists() and figure.stat().st_size > 10_000
    assert [text.replace(" ", "") for text in summary["examples"]] == [t.replace(" ", "") for t in FIGURE3_EXAMPLES]
    assert {r["label"].split(",")[1].strip() for r in summary["rows"]} == {"init=paper", "init=random"}
    assert [r["layer"] for r in summary["rows"]] == [0, 1, 0, 1] and table.row_count == 4
    for row in summary["rows"]:
        assert 0.0 <= row["share"] <= 1.0 and 0.0 <= row["share_last_row"] <= 1.0
    paper = next(r for r in summary["rows"] if "init=paper" in r["label"] and r["layer"] == 0)
    random = next(r for r in summary["rows"] if "init=random" in r["label"] and r["layer"] == 0)
    assert paper["share"] > random["share"]  # the paper's init starts from the constructed copying layer


def test_the_construction_maps_are_section_13_2s_copy_and_match():
    from depthlab.analysis.construction_maps import constructed_run, figure3_batch
    from depthlab.analysis.runs import LoadedRun, attention_maps
    from depthlab.config import parse_run

    config = parse_run({"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4},
                        "model": {"name": "attention_only", "layers": 2}, "train": {}})
    built = constructed_run(LoadedRun("x", {}, config, None, 0))
    (first, second) = attention_maps(built, figure3_batch(config.task))
    copy = first["layers"][0][0]
    blocks = np.kron(np.eye(2), np.ones((3, 3))) - np.eye(6)
    assert np.array_equal(copy[:6, :6], blocks) and np.array_equal(copy[6:, 6:], [[0, 1], [1, 0]])
    assert first["prediction"] == "1" and second["prediction"] == "2"
    assert second["layers"][1][0][-1].tolist() == [0, 0, 0, 1, 1, 1, 1, 1]  # "b →" matches the block b → 2


def test_heads_preset_draws_figures_4_to_7(tmp_path, small_evaluation):
    store = Store(tmp_path / "store")
    preset = load_preset("seed001-heads", "quick", FEW)
    preset.sweeps = [sweep[:2] for sweep in preset.sweeps]  # one head list per sweep is enough here
    ids = _train(preset, store)
    figure = tmp_path / "fig" / "heads.png"
    summary, (table,) = heads_summary(store, ids, figure, "tiny")
    assert Path(summary["figure"]).exists() and table.row_count == len(summary["rows"])
    panels = list(dict.fromkeys(r["panel"] for r in summary["rows"]))
    assert panels == ["Figure 4: memorization", "Figure 5: IC-QA", "Figure 6: template matching",
                      "Figure 7: IC-TM k=2", "Figure 7: IC-TM k=4"]  # the seed's names of the tasks
    assert {r["heads"] for r in summary["rows"]} == {"[1]", "[1, 1]", "[1, 1, 1]", "[1, 1, 1, 1]"}
    for row in summary["rows"]:
        assert row["seeds"] == 2 and 0.0 <= row["accuracy"] <= 1.0 and "curves" not in row
    json.dumps(summary)


def test_nested_preset_climbs_and_capability_nested_icqa_works(tmp_path):
    store = Store(tmp_path / "store")
    preset = load_preset("seed001-nested", "quick", FEW)
    studies = [dataclasses.replace(s, layers=[1, 2], seeds=[0]) for s in preset.studies[:2]]

    def train(configs, label):
        train_configs(configs, store, label)

    cells = climb_studies(studies, store, train, preset.name)
    assert [c.expected for c in cells] == [2, 4] and all(c.task == "nested_icqa" for c in cells)
    assert all(set(c.accuracies) == {1, 2} for c in cells)  # 6 steps learn nothing: both depths tried
    summary, (table,) = min_depth_summary(cells, tmp_path / "nested.png", "tiny")
    assert Path(summary["figure"]).exists() and table.row_count == 2


def test_finished_only_draws_from_the_done_runs_and_says_how_many(tmp_path):
    from depthlab.api.reproduce import run_preset
    from depthlab.errors import UserError
    from depthlab.report.html import build_report
    from depthlab.store import reproductions

    def never(configs, label):
        raise AssertionError("--finished-only trained")

    store = Store(tmp_path / "store")
    preset = load_preset("seed001-attention", "quick", FEW)
    with pytest.raises(UserError, match="no run of seed001-attention"):
        run_preset(preset, store, tmp_path, never, finished_only=True)
    train_configs(preset.runs[:1], store, preset.name)
    result, (table,) = run_preset(preset, store, tmp_path, never, finished_only=True)
    assert result["partial"] == [1, len(preset.runs)] and Path(result["figure"]).exists()
    assert f"(partial: 1 of {len(preset.runs)} runs)" in str(table.title)
    (entry,) = reproductions(store.root)
    assert entry["partial"] == [1, len(preset.runs)] and len(entry["run_ids"]) == 1
    build_report(store, tmp_path / "report.html", examples=0)
    assert f"from 1 of {len(preset.runs)} runs" in (tmp_path / "report.html").read_text()  # the gallery says so
    with pytest.raises(UserError, match="--finished-only: seed001-nested climbs"):
        run_preset(load_preset("seed001-nested", "quick", FEW), store, tmp_path, never, finished_only=True)
