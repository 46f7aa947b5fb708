"""`depthlab analyze label-sets`: seed 003's Eq-ncp criterion split into open and determined prefixes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import depthlab
from depthlab.analysis.label_sets import label_set_counts, summarize
from depthlab.analysis.runs import load_run, sample_examples
from depthlab.cli import app
from depthlab.errors import UserError
from depthlab.store import Store
from depthlab.tasks import TASKS
from depthlab.training.evaluate import read_tensor
from depthlab.training.objectives import per_run_correct

runner = CliRunner()


def test_a_false_positive_fails_the_string_but_not_the_copy():
    task = TASKS["eq_ncp"](N=8, alphabet=6)
    targets = torch.from_numpy(task.sample(10, np.random.default_rng(0), "eval").targets)
    logits = targets.float() * 4 - 2  # every label set right
    perfect = summarize(label_set_counts(logits, targets))
    assert perfect["accuracy"] == perfect["determined_top1_all"] == perfect["open_sets_right"] == 1.0
    assert (perfect["open_prefixes"], perfect["determined_prefixes"]) == (4, 5)  # w; [sep], 3 copies, the end
    logits[0, 5, (int(targets[0, 5].argmax()) + 1) % 6] = 1.0  # example 0: one invalid symbol above 0 in the copy
    one_extra = summarize(label_set_counts(logits, targets))
    assert one_extra["accuracy"] == 0.9 and one_extra["determined_top1_all"] == 1.0
    assert one_extra["determined_false_positives"] == pytest.approx(1 / 50)
    assert one_extra["per_position"]["false_positives"][5] == pytest.approx(0.1)
    logits[1, 6] = -logits[1, 6]  # example 1: the copied symbol below 0 and an invalid one on top
    swapped = summarize(label_set_counts(logits, targets))
    assert swapped["accuracy"] == 0.8 and swapped["determined_top1_all"] == 0.9
    assert swapped["determined_valid_positive"] == pytest.approx(49 / 50)


@pytest.fixture(scope="module")
def ncp_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("ncp") / "store"
    run = {"task": {"name": "eq_ncp", "N": 6, "alphabet": 4, "eval_size": 64},
           "model": {"name": "transformer", "layers": 1, "width": 16, "heads": 2},
           "train": {"optimizer": "adamw", "lr": 0.01, "steps": 300, "eval_every": 100, "batch_size": 32}}
    result = depthlab.train(run, store=root)
    assert result.status == "done"
    return root, result.id


def test_label_sets_cli_agrees_with_the_engines_accuracy(ncp_run):
    root, run_id = ncp_run
    done = runner.invoke(app, ["analyze", "label-sets", run_id[:8], "-n", "96", "--seed", "3", "--positions",
                               "--store", str(root), "--json"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert (out["run"], out["examples"], out["open_prefixes"], out["determined_prefixes"]) == (run_id, 96, 3, 4)
    assert len(out["per_position"]["set_right"]) == 7 and out["per_position"]["determined"] == [0] * 3 + [1] * 4
    loaded = load_run(Store(root), run_id)
    batch = sample_examples(loaded.task, 96, 3)
    with torch.no_grad():
        logits = loaded.model(torch.from_numpy(batch.inputs)[None], read=read_tensor(loaded.task)).outputs
    correct = per_run_correct(logits, torch.from_numpy(batch.targets)[None], loaded.task.loss, "example")
    assert 0 < out["accuracy"] == pytest.approx(float(correct[0]) / 96)
    human = runner.invoke(app, ["analyze", "label-sets", run_id, "-n", "32", "--store", str(root)])
    assert human.exit_code == 0 and "every prefix right" in human.output and "determined" in human.output


def test_label_sets_refuses_a_task_without_label_sets(tmp_path):
    run = {"task": {"name": "memorization", "n_words": 4, "length": 2, "n_examples": 8},
           "model": {"name": "attention_only", "layers": 1},
           "train": {"optimizer": "adamw", "lr": 0.01, "steps": 2, "batch_size": 8}}
    result = depthlab.train(run, store=tmp_path / "s")
    done = runner.invoke(app, ["analyze", "label-sets", result.id, "--store", str(tmp_path / "s")])
    assert isinstance(done.exception, UserError) and "label set" in str(done.exception)
