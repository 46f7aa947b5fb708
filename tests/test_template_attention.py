"""Seed 001 §6.2 on template matching (``seed001-template-attention``): the trained model's attention on "AAB=" and
"ABB=" beside §14.2's parse–mapping construction, whose first layer parses exactly as §6.2 describes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from depthlab.analysis.construction_maps import constructed_run, section62_batch, template_batch
from depthlab.analysis.runs import attention_maps, load_run
from depthlab.api.training import train_configs
from depthlab.errors import UserError
from depthlab.report.summaries import attention_summary
from depthlab.store import Store
from depthlab.sweeps.presets import load_preset
from depthlab.tasks import TASKS

FEW = ["train.steps=6", "train.eval_every=3", "train.eval_examples=64", "train.warmup_steps=0"]


def test_section_6_2_sequences_and_their_classes():
    task = TASKS["template"](l=3, n_symbols=16)
    batch = section62_batch(task)
    assert [task.decode(batch, i) for i in range(2)] == ["a a b → _1", "a b b → _3"]
    assert task.template_strings[batch.meta["template"][0]] == "ααβ"
    assert task.template_strings[batch.meta["template"][1]] == "αββ"
    with pytest.raises(UserError, match="need templates of length 3"):
        template_batch(TASKS["template"](l=4, n_symbols=16))


def test_preset_draws_the_template_maps_beside_the_construction(tmp_path):
    store = Store(tmp_path / "store")
    preset = load_preset("seed001-template-attention", "quick", [*FEW, "sweep.seed=[0]"])
    assert {(r.task.name, r.task.l, r.model.layers) for r in preset.runs} == {("template", 3, 2)}
    train_configs(preset.runs, store, preset.name)
    ids = [store.run_id(run.to_dict()) for run in preset.runs]
    figure = tmp_path / "template.png"
    summary, (table,) = attention_summary(store, ids, figure, "tiny")
    assert summary["examples"] == ["a a b → _1", "a b b → _3"] and Path(summary["figure"]).exists()
    assert [r["layer"] for r in summary["rows"]] == [0, 1, 0, 1] and table.row_count == 4  # paper and random init
    run = load_run(store, ids[0])
    parse = attention_maps(constructed_run(run), section62_batch(run.task))
    aab, abb = (np.asarray(example["layers"][0]).sum(0) for example in parse)
    # §6.2: in AAB= "the repeat token 'A' in positions 0 and 1 share attention with each other"; in ABB= positions 1, 2
    assert aab[0, 1] > 0 and aab[1, 0] > 0 and aab[0, 2] == aab[2, 0] == 0
    assert abb[1, 2] > 0 and abb[2, 1] > 0 and abb[0, 1] == abb[1, 0] == 0
