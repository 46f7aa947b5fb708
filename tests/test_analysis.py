"""Ablations, circuits, attention maps and emergence on a hand-constructed induction model, and `depthlab analyze`.

The constructed model solves the token retrieval task with D = 1 (the induction problem, seed 002 §3.1) with two
softmax heads of the seed 001 attention-only family: head 0.0 copies each position's previous token into a slot
of its own ("previous-token head"); head 1.0 lets the query x_0 attend to the position whose previous token is
x_0 — the second of its pair — and copies that token, x_1, to the output slot.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from depthlab.analysis.ablation import HeadPattern, ablate, capture, parse_ablation, score
from depthlab.analysis.circuit import discover, parse_circuit, role_attention, validate
from depthlab.analysis.emergence import emergence, first_crossing, save_history, settled_crossing
from depthlab.analysis.runs import load_run, sample_examples
from depthlab.config import parse_run
from depthlab.errors import UserError
from depthlab.models import TaskShapes, build_model
from depthlab.store import Store
from depthlab.tasks import TASKS
from depthlab.training.checkpoint import save_checkpoint

SCALE = 30.0
CONFIG = {
    "task": {"name": "retrieval", "N": 2, "D": 1, "n_symbols": 6},
    "model": {"name": "attention_only", "layers": 2, "heads": 1, "width": 23, "attention": "softmax",
              "init": "random"},
    "train": {"optimizer": "adamw", "lr": 0.001, "steps": 10},
    "seed": 0,
}
CIRCUIT = {"paths": [{"head": "0.0", "from": "second of pair {k}", "to": "first of pair {k}"},
                     {"head": "1.0", "from": "query", "to": "pair 1 second"}]}


def constructed(config=None):
    """The induction model: tokens [0, d), positions [d, d+n), previous token [d+n, 2d+n), output [2d+n, 3d+n)."""
    config = parse_run(config or CONFIG)
    task = config.task
    d, n = len(task.vocab), task.seq_len
    model = build_model(config.model, TaskShapes(d, n, d), [torch.Generator().manual_seed(0)])
    width = model.width
    prev, out = d + n, 2 * d + n
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        qk0, v0 = model.param("blocks.0.attn.W_QK")[0, 0], model.param("blocks.0.attn.W_V")[0, 0]
        for i in range(1, n):
            qk0[d + i, d + i - 1] = SCALE  # position i attends to position i - 1
        qk1, v1 = model.param("blocks.1.attn.W_QK")[0, 0], model.param("blocks.1.attn.W_V")[0, 0]
        for t in range(d):
            v0[t, prev + t] = width  # (the family divides values by the width)
            qk1[t, prev + t] = SCALE  # token t attends to where the previous token is t
            v1[t, out + t] = width
            model.param("unembed.W_U")[0, out + t, t] = 10.0
    model.eval()
    return config, model


@pytest.fixture(scope="module")
def built():
    config, model = constructed()
    batch = config.task.enumerate()
    return config.task, model, batch


def test_constructed_model_solves_induction(built):
    task, model, batch = built
    result = score(model, task, batch)
    assert result["accuracy"] == 1.0 and result["loss"] < 1e-3
    assert result["examples"] == task.dataset_size() == len(batch)


def test_recorded_pattern_override_changes_nothing(built):
    task, model, batch = built
    x = torch.from_numpy(batch.inputs)[None]
    plain = model(x).outputs
    for layer, head in [(0, 0), (1, 0)]:
        patterns = {(layer, head): HeadPattern("recorded")}
        from depthlab.analysis.ablation import build_override

        same = model(x, override=build_override(model, task, batch, patterns), capture=True).outputs
        assert torch.equal(plain, same)
    result = ablate(model, task, batch, {(0, 0): HeadPattern("recorded"), (1, 0): HeadPattern("recorded")})
    assert result["rise"]["loss"] == 0.0


def test_recorded_pattern_changes_nothing_on_the_gpt_transformer():
    """The same check on the seed 002 transformer with vector inputs and several read-outs (random weights)."""
    config = parse_run({"task": {"name": "retrieval_vec", "N": 2, "D": 2},
                        "model": {"name": "transformer", "layers": 2, "heads": 2, "width": 16},
                        "train": {"optimizer": "adamw"}})
    task = config.task
    model = build_model(config.model, TaskShapes(task.input_dim, task.seq_len, task.n_outputs),
                        [torch.Generator().manual_seed(1)]).eval()
    batch = sample_examples(task, 64)
    patterns = {(0, 1): HeadPattern("recorded"), (1, 0): HeadPattern("recorded")}
    result = ablate(model, task, batch, patterns)
    assert result["after"]["loss"] == pytest.approx(result["before"]["loss"], abs=1e-6)
    assert set(result["before"]["partial_losses"]) == {"x1", "x2"}
    uniform = ablate(model, task, batch, {(1, 0): HeadPattern("uniform")})
    assert uniform["after"]["loss"] != uniform["before"]["loss"]


def test_uniform_ablation_of_the_needed_head_raises_the_loss(built):
    task, model, batch = built
    for head in ("1.0", "0.0"):
        result = ablate(model, task, batch, dict([parse_ablation(f"{head}=uniform", model, task)]))
        assert result["after"]["loss"] > result["before"]["loss"] + 0.5, head
        assert result["after"]["accuracy"] < 0.7
    # the one-hot pattern the circuit claims for the induction head keeps the model exact
    onehot = ablate(model, task, batch, dict([parse_ablation("1.0=onehot:second of pair 1", model, task)]))
    assert onehot["after"]["accuracy"] == 1.0


def test_ablation_errors(built):
    task, model, _ = built
    with pytest.raises(UserError, match=r"no head 2\.0"):
        parse_ablation("2.0=uniform", model, task)
    with pytest.raises(UserError, match="unknown pattern"):
        parse_ablation("1.0=zero", model, task)
    with pytest.raises(UserError, match="unknown role"):
        parse_ablation("1.0=onehot:third of pair 1", model, task)
    with pytest.raises(UserError, match="cannot read"):
        parse_ablation("1.0", model, task)


def test_circuit_validation(built):
    task, model, batch = built
    circuit = parse_circuit(CIRCUIT, model, task)
    assert len(circuit.paths) == 2  # {k} expands over the one pair
    result = validate(model, task, batch, circuit)
    assert result["circuit"]["loss"] < 1e-3 and result["circuit"]["accuracy"] == 1.0
    by_path = {p["path"]: p for p in result["paths"]}
    induction = by_path["1.0 query → second of pair 1"]
    assert induction["attention"] > 0.99 and induction["rise"] > 0.5
    # With the induction head forced one-hot, the previous-token head no longer matters (seed 002 App. E).
    assert by_path["0.0 second of pair 1 → first of pair 1"]["rise"] < 0.05
    with pytest.raises(UserError, match="unknown role"):
        parse_circuit({"paths": [{"head": "1.0", "from": "query", "to": "pair 2 second"}]}, model, task)
    with pytest.raises(UserError, match="off_circuit"):
        parse_circuit({**CIRCUIT, "off_circuit": "zero"}, model, task)


def test_role_attention_and_discovery(built):
    task, model, batch = built
    attention = role_attention(capture(model, batch), task, batch)
    names = task.role_names
    assert attention.shape == (2, 1, len(names), len(names))
    assert attention[1, 0, names.index("query"), names.index("second of pair 1")] > 0.99
    circuit, log = discover(model, task, batch)
    labels = {p.label for p in circuit.paths}
    assert "1.0 query → second of pair 1" in labels
    assert log["circuit_loss"] <= log["limit"]


def test_first_crossing_interpolates():
    assert first_crossing([0, 10, 20], [0.0, 0.25, 0.75]) == pytest.approx(15.0)
    assert first_crossing([0, 10], [0.9, 1.0]) == 0.0
    assert first_crossing([0, 10], [0.1, 0.2]) is None
    assert first_crossing([0, 10], [1.0, 0.0], above=False) == pytest.approx(5.0)
    # a path that crosses early, falls back, and rises for good later
    assert settled_crossing([0, 10, 20, 30], [0.0, 0.75, 0.25, 0.75]) == pytest.approx(25.0)
    assert settled_crossing([0, 10], [0.75, 0.25]) is None


@pytest.fixture
def stored(tmp_path):
    """The constructed model saved as a finished run, with a checkpoint history for emergence."""
    store = Store(tmp_path / "store")
    config, model = constructed()
    run_id = store.create_run(config.to_dict(), config.task.name, config.model.name)
    save_checkpoint(store.run_folder(run_id), model.run_state_dict(0), 40, {"run_id": run_id})
    store.finish_run(run_id, {"loss": 0.0, "steps": 40}, step=40)
    blank = {k: torch.zeros_like(v) for k, v in model.run_state_dict(0).items()}
    save_history(store, run_id, blank, 10)  # zero weights: uniform attention everywhere
    half = {k: v * (0.15 if "1.attn.W_QK" in k else 1.0) for k, v in model.run_state_dict(0).items()}
    save_history(store, run_id, half, 20)
    save_history(store, run_id, model.run_state_dict(0), 30)
    return store, run_id


def test_emergence_over_a_checkpoint_history(stored):
    store, run_id = stored
    run = load_run(store, run_id)
    circuit = parse_circuit(CIRCUIT, run.model, run.task)
    result = emergence(store, run, circuit, examples=32, loss_examples=64)
    assert result["steps"] == [0, 10, 20, 30, 40]
    induction = next(p for p in result["paths"] if p["head"] == "1.0")
    assert induction["attention"][1] < 0.5 < induction["attention"][3]
    assert 10 < induction["first_step_above"] <= 30
    assert result["loss"][-1] < 1e-3 < result["loss"][1]


runner = CliRunner()


def _app():
    from depthlab.cli import app

    return app


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_analyze_commands_print_one_json_object(stored, tmp_path):
    store, run_id = stored
    app, s = _app(), ["--store", str(store.root), "--json"]
    out = _json(runner.invoke(app, ["analyze", "attention", run_id[:8], "-n", "1", *s]))
    assert out["run"] == run_id and len(out["figures"]) == 1
    assert out["examples"][0]["correct"] is True
    from pathlib import Path

    assert Path(out["figures"][0]).exists() and Path(out["figures"][0]).stat().st_size > 1000
    out = _json(runner.invoke(app, ["analyze", "attention", run_id, "--example", "a b c d a", *s]))
    assert out["examples"][0]["prediction"] == "b"

    out = _json(runner.invoke(app, ["analyze", "ablate", run_id, "--head", "1.0=uniform", "-n", "64", *s]))
    assert out["after"]["loss"] > out["before"]["loss"] + 0.5

    circuit_file = tmp_path / "circuit.yaml"
    circuit_file.write_text(yaml.safe_dump(CIRCUIT))
    out = _json(runner.invoke(app, ["analyze", "circuit", run_id, str(circuit_file), "-n", "128", *s]))
    assert out["circuit"]["accuracy"] == 1.0 and Path(out["figure"]).exists()
    out = _json(runner.invoke(app, ["analyze", "circuit", run_id, "--discover", "-n", "128", *s]))
    assert Path(out["circuit_file"]).exists() and out["discovery"]["paths"] >= 1

    out = _json(runner.invoke(app, ["analyze", "emergence", run_id, str(circuit_file), *s]))
    assert out["steps"][-1] == 40 and Path(out["figure"]).exists()
    assert np.isfinite(out["paths"][0]["final_attention"])


def test_analyze_user_errors(stored):
    store, run_id = stored
    app = _app()
    result = runner.invoke(app, ["analyze", "ablate", run_id, "--head", "7.0=uniform", "--store", str(store.root)])
    assert isinstance(result.exception, UserError) and "no head 7.0" in str(result.exception)
    result = runner.invoke(app, ["analyze", "attention", "ffffffff", "--store", str(store.root)])
    assert isinstance(result.exception, UserError)
    result = runner.invoke(app, ["analyze", "circuit", run_id, "--store", str(store.root)])
    assert isinstance(result.exception, UserError) and "--discover" in str(result.exception)


def test_constructed_task_layout_matches_roles(built):
    task, _, batch = built
    roles = task.roles(batch)
    rows = np.arange(len(batch))[:, None]
    # the query token is the first of pair 1, and the target is the second of pair 1
    assert np.array_equal(batch.inputs[rows, roles["first of pair 1"]][:, 0], batch.inputs[:, -1])
    assert np.array_equal(batch.inputs[rows, roles["second of pair 1"]][:, 0], batch.targets)
    assert TASKS["retrieval"](N=2, D=1, n_symbols=6).dataset_size() == len(batch)
