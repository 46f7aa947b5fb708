"""The bounded-stream initialisations of seed 001's attention-only model (``models.init.bound_stream``).

§3.1's eq. 2 has no normalisation, so at N(0, 1/d') the ReLU stream grows cubically per layer and a 4-layer IC-TM
model's logits are ~10⁸ at initialisation; ``paper-first-stream`` and ``random-stream`` rescale each random layer's
W_QK so that no input's stream grows by more than e over the depth."""

import math

import numpy as np
import pytest
import torch

import depthlab
from depthlab.models import TaskShapes, build_model
from depthlab.models.attention_only import AttentionOnlySpec

ICTM = depthlab.task("ictm", k=4, l=3, n_symbols=16, n_a=8)  # seed001-heads' quick Figure 7 task
SHAPES = TaskShapes.of(ICTM)


def build(init, layers, runs=2):
    """Layers of one head and a last of two; W_QK N(0, 1/d') where random (qk_scale 1), paper-first's first layer
    on a uniform [0, 0.01) background (seed001-heads' IC-TM runs)."""
    gens = [torch.Generator().manual_seed(s) for s in range(runs)]
    qk_scale = 0.01 if init.startswith("paper") else 1.0
    spec = AttentionOnlySpec(layers=layers, heads=[1] * (layers - 1) + [2], init=init, qk_scale=qk_scale)
    return build_model(spec, SHAPES, gens).double()


def inputs(runs=2):
    """A batch of the task's own sequences, one of uniformly random tokens and every constant sequence."""
    real = torch.as_tensor(ICTM.sample(32, np.random.default_rng(1), "train").inputs)
    noise = torch.randint(0, SHAPES.vocab_size, (32, SHAPES.seq_len), generator=torch.Generator().manual_seed(1))
    const = torch.arange(SHAPES.vocab_size)[:, None].expand(-1, SHAPES.seq_len)
    return torch.cat([real, noise, const]).expand(runs, -1, -1)


def stream(model, tokens):
    """Every H^(l), l = 0 … L, all positions: [L + 1] of [R, B, n, d']."""
    h = [model.residual_stream(tokens)]
    for block in model.blocks:
        h.append(block(h[-1]))
    return h


@pytest.mark.parametrize("init", ["paper-first-stream", "random-stream"])
@pytest.mark.parametrize("layers", [4, 6, 8])
def test_stream_and_logits_stay_bounded_at_depth(init, layers):
    """Every row of H^(L) is at most e times the largest row the random layers receive, on the task's sequences,
    on noise and on constant sequences; the logits are then at most ‖W_U‖ times that. The plain init, at the
    same depth and draws, is 10⁵ times larger or not even finite."""
    model, tokens = build(init, layers), inputs()
    with torch.no_grad():
        h = stream(model, tokens)
        logits = model(tokens).outputs
        first = 0 if init == "random-stream" else 1
        received = h[first].norm(dim=-1).amax()
        assert h[-1].norm(dim=-1).amax() <= math.e * received * 1.001
        w_u = torch.linalg.matrix_norm(model.param("unembed.W_U"), ord=2).max()
        assert logits.abs().max() <= w_u * math.e * received * 1.001
        assert logits.abs().max() < 10  # O(1): √2 · e · ‖W_U‖ with ‖W_U‖ ≈ 1.5 here
        plain = build(init.removesuffix("-stream"), layers)(tokens).outputs
    assert not bool(torch.isfinite(plain).all()) or plain.abs().max() > 1e5 * logits.abs().max()


def test_stream_init_rescales_only_the_random_w_qk_of_the_plain_draws():
    """The same draws as the plain init: W_V and W_U equal, the constructed first layer equal, each random
    layer's W_QK a positive multiple (one per run and head) of the plain one, each head's update at most R/L."""
    for init, first in (("paper-first", 1), ("random", 0)):
        plain, bounded = build(init, 4), build(f"{init}-stream", 4)
        for name, param in plain.named_parameters():
            new = bounded.param(name)
            layer = int(name.split(".")[1]) if name.startswith("blocks.") else -1
            if not name.endswith("W_QK") or layer < first:
                torch.testing.assert_close(new, param, rtol=0, atol=0)
                continue
            ratio = new / param
            per_head = ratio.flatten(2)
            assert bool((per_head > 0).all())
            torch.testing.assert_close(per_head, per_head[..., :1].expand_as(per_head))
            size = (torch.linalg.matrix_norm(new, ord=2)
                    * torch.linalg.matrix_norm(bounded.param(name.replace("W_QK", "W_V")), ord=2))
            assert bool((size * SHAPES.seq_len * 2 <= 1 / 4 * 1.001).all())  # n ‖W_QK‖ ‖W_V‖ R² ≤ 1/L, R ≥ √2


def test_stream_init_needs_relu_attention():
    with pytest.raises(ValueError, match="softmax attention is bounded"):
        AttentionOnlySpec(layers=4, init="random-stream", attention="softmax")
