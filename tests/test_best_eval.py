"""Issue 43: each run's best evaluation beside its final one, "learned, then lost" marked, and evaluation labels
that say what the evaluation did (exhaustive, held-out or sampled, with the count)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from depthlab.analysis.atlas import marks
from depthlab.analysis.capability import capability_rows, capability_table
from depthlab.cli import app
from depthlab.cli.common import rich_table
from depthlab.config import parse_run, parse_task
from depthlab.store import Store
from depthlab.sweeps.climb import CellResult, seed_losses
from depthlab.training.best import best_evaluation, lost_at
from depthlab.training.data import eval_set
from depthlab.training.engine import train_group
from depthlab.training.eval_label import final_eval_fields, protocol_of

# A warm-up to a rate far too high for AdamW (3 at step 500; the run stops at 300): the run learns the 24 sequences
# early, while the rate is small (0.958 at step 30), then the growing rate throws it to 0.042 (1/24) for good.
# Measured (one thread): best 0.958 at step 30, lost at step 130, final 0.042; about 1.5 s.
COLLAPSE = {"task": {"name": "memorization", "n_words": 6, "length": 3, "n_examples": 24},
            "model": {"name": "attention_only", "layers": 1, "heads": 2, "init": "random"},
            "train": {"optimizer": "adamw", "lr": 3.0, "warmup_steps": 500, "steps": 300, "batch_size": 24,
                      "eval_every": 10, "grad_clip": 1.0}, "seed": 0}


@pytest.fixture(scope="module")
def collapsed(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("collapse"))
    config = parse_run(COLLAPSE)
    train_group([config], store)
    return store, Store.run_id(config.to_dict())


def test_a_run_that_learns_and_then_collapses_is_flagged_learned_then_lost(collapsed):
    store, run_id = collapsed
    final = store.get_run(run_id)["final"]
    assert final["best"]["accuracy"] >= 0.95 and final["accuracy"] < 0.1, final
    lost = final["learned_then_lost"]
    assert lost["target"] == 0.95 and final["best"]["step"] < lost["step"] <= final["steps"]
    curve = store.metric_columns(run_id, "eval")["eval"]
    i = curve["step"].index(lost["step"])  # from that log point on, below the target at every one
    assert curve["accuracy"][i - 1] >= 0.95 and max(curve["accuracy"][i:]) < 0.95
    row = capability_rows(store, [run_id])[0]
    assert row["shows"] == "final" and row["lost"] == [{"run": run_id, **lost}]
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(rich_table(capability_table([row], "collapse")))
    text = out.getvalue()
    assert "†" in text and f"at step {lost['step']:,}" in " ".join(text.split())


def test_depthlab_runs_marks_the_run_and_its_json_keeps_best_and_final(collapsed):
    store, _ = collapsed
    runner = CliRunner()
    shown = runner.invoke(app, ["runs", "--store", str(store.root)], env={"COLUMNS": "80"})
    text = " ".join(shown.output.split())
    assert shown.exit_code == 0 and "0.042 † 0.958" in text and "† learned, then lost: " in text, text
    data = json.loads(runner.invoke(app, ["runs", "--store", str(store.root), "--json"]).output)
    metrics = data["runs"][0]["metrics"]
    assert data["shows"] == "final"
    assert metrics["best"]["accuracy"] > metrics["accuracy"] and metrics["learned_then_lost"]["step"] > 0


def test_a_run_that_ends_at_its_target_or_never_reaches_it_is_not_lost():
    curve = {"step": [10, 20, 30], "accuracy": [0.5, 0.97, 0.96], "loss": [1.0, 0.1, 0.2]}
    assert best_evaluation(curve) == {"accuracy": 0.97, "step": 20, "loss": 0.1}
    assert lost_at(curve, 0.96, 0.95) is None  # ends at the target
    assert lost_at(curve, 0.90, 0.95) == 30  # the final step's probe was at it, the whole set is not
    assert lost_at({"step": [10, 20], "accuracy": [0.5, 0.6]}, 0.6, 0.95) is None  # never learned


def test_labels_say_sampled_or_exhaustive_from_what_the_evaluation_did():
    """IC-QA at seed 001's paper sizes is scored on a sample: its label says sampled and the count, never
    exhaustive; a small IC-QA is scored on every example; IC-TM's sample is of held-out maps."""
    for raw, kind in [({"name": "icqa", "k": 3, "n_q": 100, "n_a": 100}, "sampled"),
                      ({"name": "icqa", "k": 2, "n_q": 4, "n_a": 4}, "exhaustive")]:
        task = parse_task(raw)
        batch, exhaustive = eval_set(task)
        fields = final_eval_fields(task, len(batch), exhaustive)
        assert fields["eval_kind"] == kind and fields["exhaustive"] is (kind == "exhaustive")
        assert fields["eval_protocol"].startswith(f"{kind}: ") and f"{len(batch):,}" in fields["eval_protocol"]
        assert (kind == "exhaustive") == ("exhaustive" in fields["eval_protocol"])
    ictm = parse_task({"name": "ictm"})
    assert final_eval_fields(ictm, 20_000, False)["eval_protocol"].startswith("held-out: 20,000 sampled")
    # a run stored before the labels: its old text said exhaustive for a sample; the table no longer does
    old = {"eval_protocol": "exhaustive dataset", "eval_examples": 20000, "exhaustive": False}
    assert protocol_of(old) == "sampled: 20,000 examples"


def test_the_atlas_marks_a_cell_whose_run_learned_and_then_lost_it(collapsed):
    store, run_id = collapsed
    lost = seed_losses(store, [run_id])
    assert lost == [{"run": run_id, **store.get_run(run_id)["final"]["learned_then_lost"]}]
    cell = CellResult(task="memorization", width=None, field=None, value=None, max_layers=1, target=0.95,
                      accuracies={1: [0.04]}, lost={1: lost})
    found = {m["mark"]: m["detail"] for m in marks(cell, None, None)}
    assert found.keys() == {"learned_then_lost", "not_reached"}
    assert found["learned_then_lost"].startswith(f"1 layer: run {run_id} (≥ 0.95) lost at step ")


def test_scoring_all_of_a_fixed_sample_is_labelled_sampled():
    """Seed 003's evaluation split is a fixed sample of eval_size strings: all of it scored is a sample, unless the
    sample holds every input."""
    dyck = parse_task({"name": "dyck", "N": 20, "eval_size": 64})
    batch, whole_split = eval_set(dyck)
    fields = final_eval_fields(dyck, len(batch), whole_split)
    assert whole_split and fields["eval_kind"] == "sampled" and not fields["exhaustive"]
    assert fields["eval_protocol"].startswith("sampled: 64 examples")
