"""Seed 003's Theorem 7: the two-layer nearest-neighbour transformer (Appendix G.2), on the task's own data."""

import contextlib

import numpy as np
import pytest
import torch

from depthlab.constructions import nearest_neighbor as nn
from depthlab.constructions.registry import run
from depthlab.models.transformer import Transformer
from depthlab.training.evaluate import evaluate, read_tensor

N, D, GAMMA = 4, 16, 0.5  # the task samples this margin readily; certified at k = 88




@pytest.fixture(scope="module")
def certified():
    found = nn.smallest_nearest_neighbor_width(N, D, GAMMA)
    return found, nn.nearest_neighbor_model(N, found["k"], D, GAMMA)


def test_certified_width_is_exact_on_the_task(certified):
    found, built = certified
    cert = nn.certify_nearest_neighbor(built)
    assert cert["exact"] and cert["structure_ok"] and cert["min_margin"] > 0 and found["k_minus_1_fails"]
    assert cert["layer0_norm_spread"] < 1e-12 and cert["rho2"] < 1e-5
    assert built.width == 2 * (D + 4 + 3 * found["k"])
    scores = nn.run_nearest_neighbor(built, examples=256, seed=1)
    assert scores["accuracy"] == 1.0 and scores["min_logit_margin"] > 0


@pytest.mark.parametrize("k", [8, "found - 1"])
def test_certificate_fails_below(certified, k):
    k = certified[0]["k"] - 1 if k == "found - 1" else k
    cert = nn.certify_nearest_neighbor(nn.nearest_neighbor_model(N, k, D, GAMMA))
    assert not cert["exact"] and cert["min_margin"] <= 0


def test_first_layer_weight_bound_holds_in_the_forward_pass(certified):
    """On the task's data the attention on x_{j*} is at least the certificate's min_weight1."""
    _, built = certified
    task = built.task()
    batch = task.sample(64, np.random.default_rng(2), "eval")
    with torch.no_grad():
        out = built.model(torch.as_tensor(batch.inputs)[None], capture=True, read=read_tensor(task))
    pattern = out.attentions[0][0, :, 0]  # [B, query, key] of layer 1
    queries = torch.as_tensor(task.read_positions)
    on_nearest = pattern[:, queries].gather(2, 2 * torch.as_tensor(batch.meta["nearest"])[..., None])
    assert float(on_nearest.min()) >= nn.certify_nearest_neighbor(built)["min_weight1"] - 1e-12


def test_is_a_plain_transformer_run_by_the_engine(certified):
    _, built = certified
    model, task = built.model, built.task()
    assert isinstance(model, Transformer) and model.spec.name == "transformer"
    assert model.layers == 2 and model.spec.mlp and model.n_runs == 1
    assert set(model.run_state_dict(0)) >= {"embed.W_E", "blocks.1.attn.W_Q", "blocks.0.mlp.W_in", "unembed.W_U"}
    assert model.param("embed.W_E").shape[1:] == (task.input_dim, built.width)
    batch = task.sample(128, np.random.default_rng(3), "eval")
    _, accuracy = evaluate(model, task, batch, contextlib.nullcontext())
    assert float(accuracy[0]) == 1.0


def test_registry_entry():
    result = run("seed003-nearest-neighbor", {"examples": 32})
    assert result["certified_all_inputs"] and result["accuracy"] == 1.0
    assert result["layers"] == 2 and result["width"] == 2 * (D + 4 + 3 * result["k"])
