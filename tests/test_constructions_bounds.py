"""Seed 001's one-layer impossibility (§11, §13.1, §14.1, §16) and seed 002's information-flow bound (§5)."""

import numpy as np
import pytest
import torch

from depthlab.constructions import attention_only, impossibility, information_flow
from depthlab.constructions.registry import make_task
from depthlab.models import TaskShapes, build_model
from depthlab.models.attention_only import AttentionOnlySpec

FLOAT_TOL = 1e-12  # relative deviation; float64 rounding is ~1e-16




def shapes(task):
    return TaskShapes(len(task.vocab), task.seq_len, len(task.labels))


# --- dependent sets ------------------------------------------------------------------------------------

def test_icqa_set_is_the_paper_set():
    task = make_task("icqa", k=2, n_q=2, n_a=2)
    dep = impossibility.dependent_set(task)
    assert dep.decoded() == ["a → 0 b → 1 a → _0", "a → 1 b → 0 b → _0", "a → 1 b → 0 a → _1", "a → 0 b → 1 b → _1"]
    assert dep.coefficients.tolist() == [1, 1, -1, -1]
    assert dep.accuracy_bound == 0.75


@pytest.mark.parametrize("k", [2, 3, 6])
def test_icqa_set_dependent_for_any_k(k):
    dep = impossibility.dependent_set(make_task("icqa", k=k, n_q=k + 1, n_a=k + 2))
    assert impossibility.is_dependent(dep.batch.inputs, dep.coefficients)
    assert not impossibility.is_dependent(dep.batch.inputs, np.array([1, -1, 1, -1]))


@pytest.mark.parametrize("l,n_symbols", [(2, 3), (3, 4), (4, 4)])
def test_template_pair_dependent(l, n_symbols):
    task = make_task("template", l=l, n_symbols=n_symbols, eval_fraction=0.0)
    dep = impossibility.dependent_set(task)
    n0 = int((dep.batch.meta["template"] == 0).sum())
    n1 = int((dep.batch.meta["template"] == 1).sum())
    assert n0 == n_symbols  # all-equal template: one sequence per symbol
    assert dep.accuracy_bound == 1 - 1 / (n0 + n1)
    assert impossibility.is_dependent(dep.batch.inputs, dep.coefficients)


def test_small_k_refused():
    with pytest.raises(ValueError, match="k ≥ 2"):
        impossibility.dependent_set(make_task("icqa", k=1, n_q=2, n_a=2))


# --- the relation on random single-layer models ------------------------------------------------------

@pytest.mark.parametrize("task_name,fields", [
    ("icqa", {"k": 2, "n_q": 2, "n_a": 2}),
    ("icqa", {"k": 4, "n_q": 6, "n_a": 5}),
    ("template", {"l": 3, "n_symbols": 4, "eval_fraction": 0.0}),
])
def test_relation_holds_for_relu_1_to_8_heads_and_one_softmax_head(task_name, fields):
    dep = impossibility.dependent_set(make_task(task_name, **fields))
    result = impossibility.certify_many(dep, per_kind=4, seed=3)
    kinds = {k["model"] for k in result["by_kind"]}
    assert {f"relu, {h} head{'s' if h > 1 else ''}" for h in range(1, 9)} <= kinds
    assert "softmax, 1 head" in kinds
    assert result["models_tried"] == 4 * 17
    assert result["max_deviation"] < FLOAT_TOL
    assert result["max_accuracy_seen"] <= dep.accuracy_bound


def test_relation_is_not_vacuous():
    """Two layers break it (Theorem 3's model), and so does a perturbed set that is not dependent."""
    task = make_task("icqa", k=2, n_q=2, n_a=2)
    dep = impossibility.dependent_set(task)
    model = attention_only.icqa_model(task)
    outputs = model(torch.as_tensor(dep.batch.inputs)[None]).outputs[0].detach().numpy()
    assert np.abs(dep.coefficients @ outputs).max() > 1.0
    with pytest.raises(ValueError, match="single-layer"):
        impossibility.certify(model, dep)
    wrong = impossibility.DependentSet(task, dep.batch, np.array([1, -1, 1, -1]), 0.75, "")
    label, one_layer = impossibility.random_models(task, per_kind=2)[1]
    assert label.endswith("paper init")  # positive W_QK: every position attends, nothing cancels by accident
    assert impossibility.certify(one_layer, wrong)["max_deviation"] > 1e-3


@pytest.mark.parametrize("task_name,fields", [
    ("icqa", {"k": 3, "n_q": 4, "n_a": 4}),
    ("template", {"l": 3, "n_symbols": 4, "eval_fraction": 0.0}),
])
def test_softmax_relation_needs_the_normalisers(task_name, fields):
    """With one softmax head the plain relation fails and the Z-weighted one (Proposition 10) holds."""
    task = make_task(task_name, **fields)
    dep = impossibility.dependent_set(task)
    spec = AttentionOnlySpec(layers=1, heads=1, attention="softmax", init="random")
    model = build_model(spec, shapes(task), [torch.Generator().manual_seed(s) for s in range(4)]).double()
    with torch.no_grad():
        model.param("blocks.0.attn.W_QK").mul_(3)
    outputs = model(torch.as_tensor(dep.batch.inputs)[None].expand(4, -1, -1)).outputs.detach().numpy()
    terms = dep.coefficients[None, :, None] * outputs
    plain = np.abs(terms.sum(1)).max(-1) / np.abs(terms).max((1, 2))
    assert plain.max() > 1e-3
    assert impossibility.certify(model, dep)["max_deviation"] < FLOAT_TOL


# --- honest training ---------------------------------------------------------------------------------

LN2 = float(np.log(2))
TIE = 1e-9  # an example counts as right only if its target logit wins by more than TIE × the largest |logit|


def robust_accuracy(logits, targets):
    """[R, B, C] logits: per run, the fraction of examples whose target wins by a margin above rounding."""
    target = logits.gather(-1, targets[None, :, None].expand(logits.shape[0], -1, 1))[..., 0]
    others = logits.scatter(-1, targets[None, :, None].expand(logits.shape[0], -1, 1), float("-inf")).amax(-1)
    scale = logits.abs().amax((1, 2), keepdim=True)[..., 0]
    return ((target - others) > TIE * scale).double().mean(1)


def _train_on_set(task, dep, attention, heads, runs=6, steps=300, lr=0.05):
    """Adam, full batch on the set, float64; the best robust accuracy and the lowest loss of any run, any step."""
    spec = AttentionOnlySpec(layers=1, heads=heads, attention=attention, init="random")
    model = build_model(spec, shapes(task), [torch.Generator().manual_seed(s) for s in range(runs)]).double()
    x = torch.as_tensor(dep.batch.inputs)[None].expand(runs, -1, -1)
    y = torch.as_tensor(dep.batch.targets)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    best, lowest = 0.0, float("inf")
    for step in range(steps + 1):
        logits = model(x).outputs
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), y.expand(runs, -1), reduction="none")
        best = max(best, float(robust_accuracy(logits.detach(), y).max()))
        lowest = min(lowest, float(losses.detach().mean(1).min()))
        if step < steps:
            opt.zero_grad()
            losses.mean(1).sum().backward()
            opt.step()
    return best, lowest


@pytest.mark.parametrize("attention,heads", [("relu", 1), ("relu", 4), ("relu", 8), ("softmax", 1)])
def test_training_one_layer_on_the_13_1_set_never_beats_three_quarters(attention, heads):
    """Accuracy never above 3/4. With ReLU also the mean cross-entropy never goes below ln 2, the minimum of
    Σ softplus(∓δ_i) under δ0 + δ1 = δ2 + δ3 (δ = logit of x minus logit of y): the runs end at the tie.
    (With softmax the relation has weights Z_i, and the loss can go lower at accuracy 3/4.)"""
    task = make_task("icqa", k=2, n_q=2, n_a=2)
    dep = impossibility.dependent_set(task)
    best, lowest = _train_on_set(task, dep, attention, heads)
    assert best <= 0.75
    if attention == "relu":
        assert lowest >= LN2 - 1e-9
        assert lowest < LN2 + 0.01  # it did train: the runs reach the best a single layer can do


def test_two_softmax_heads_escape_the_bound():
    """The paper proves the softmax case for one head only (§16); two softmax heads fit the §13.1 set."""
    task = make_task("icqa", k=2, n_q=2, n_a=2)
    dep = impossibility.dependent_set(task)
    best, lowest = _train_on_set(task, dep, "softmax", 2)
    assert best == 1.0 and lowest < 0.01


def test_training_with_the_engine_never_beats_three_quarters(tmp_path):
    """The engine on icqa k=2 with two questions and two answers: its 8 sequences are two §13.1 sets."""
    from depthlab.config import parse_run
    from depthlab.store import Store
    from depthlab.training.checkpoint import WEIGHTS, load_checkpoint
    from depthlab.training.engine import train_group

    store = Store(tmp_path)
    for init, heads in [("paper", 2), ("random", 4)]:
        configs = [parse_run({
            "task": {"name": "icqa", "k": 2, "n_q": 2, "n_a": 2},
            "model": {"name": "attention_only", "layers": 1, "heads": heads, "init": init},
            "train": {"optimizer": "adamw", "lr": 0.05, "steps": 300, "batch_size": 8, "eval_every": 10},
            "seed": seed,
        }) for seed in range(3)]
        results = train_group(configs, store)
        for config in configs:
            run_id = Store.run_id(config.to_dict())
            assert results[run_id]["exhaustive"] and results[run_id]["eval_examples"] == 8
            history = store.metric_columns(run_id)
            assert min(history["eval"]["loss"]) >= LN2 - 1e-4  # float32 engine
            # the final weights, in float64, with ties (logits equal up to rounding) counted as wrong
            tensors, _ = load_checkpoint(store.artifact_path(run_id, "checkpoint", WEIGHTS).parent)
            model = build_model(config.model, shapes(config.task), [torch.Generator()])
            model.load_run_state_dict(0, {k: v for k, v in tensors.items() if not k.startswith("optimizer.")})
            model = model.double()
            batch = config.task.enumerate()
            logits = model(torch.as_tensor(batch.inputs)[None]).outputs.detach()
            assert float(robust_accuracy(logits, torch.as_tensor(batch.targets))[0]) <= 0.75


# --- seed 002 ------------------------------------------------------------------------------------------

def test_information_flow_closed_forms_d_1_to_100():
    for D in range(1, 101):
        r = information_flow.simulate(D, N=2, seed=D)
        assert r["layers_any"] == information_flow.closed_form(D) == int(np.ceil(np.log(2 * D) / np.log(3) - 1e-12))
        assert r["layers_last"] == information_flow.last_position_form(D)
        bound = information_flow.closed_form(D)
        assert bound <= r["layers_last"] <= bound + 1  # Theorem 1 holds
        # Lemma 3: after t layers a position holds at most 3^t + 1 consecutive pieces, and that is reached
        for t, run in enumerate(r["longest_chain_run"]):
            assert run == min(3**t + 1, 2 * D + 1)


def test_information_flow_on_the_sequence():
    seq = information_flow.retrieval_sequence(3, N=2, seed=0)
    assert len(seq.tokens) == 2 * (2 * 3 + 1)
    assert seq.tokens[seq.last] == seq.chain_tokens[0]
    # x_k occurs twice for 0 ≤ k < D, x_D once
    counts = np.bincount(seq.tokens)
    assert counts[seq.chain_tokens[:-1]].tolist() == [2, 2, 2] and counts[seq.target_token] == 1
    # induction (D = 1) needs two layers in this model
    assert information_flow.simulate(1)["layers_last"] == 2


def test_information_flow_on_the_retrieval_task():
    """The same numbers on examples drawn from depthlab's own retrieval task (one query, N chains)."""
    for D in (1, 2, 3, 5, 13, 14, 40, 41):
        r = information_flow.simulate_task(D, N=3, seed=D)
        assert r["layers_any"] == information_flow.closed_form(D)
        assert r["layers_last"] == information_flow.last_position_form(D)
