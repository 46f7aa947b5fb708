"""The bounded-stream initialisations of seed 001's attention-only model (``models.init.bound_stream``).

§3.1's eq. 2 has no normalisation, so at N(0, 1/d') the ReLU stream grows cubically per layer and a 4-layer IC-TM
model's logits are ~10⁸ at initialisation; ``paper-first-stream`` and ``random-stream`` rescale each random layer's
W_QK so that on a probe of inputs it adds at most r/√L of a row's norm (r = ``STREAM_RATIO``)."""

from itertools import pairwise

import numpy as np
import pytest
import torch

import depthlab
from depthlab.models import TaskShapes, build_model
from depthlab.models.attention_only import AttentionOnlySpec
from depthlab.models.init import STREAM_RATIO, stream_probe

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


def growth(model, tokens):
    """Each layer's largest ratio ‖update‖ / ‖row‖ over rows and positions: [L] of [R]."""
    h = stream(model, tokens)
    return [((after - before).norm(dim=-1) / before.norm(dim=-1)).amax((1, 2)) for before, after in pairwise(h)]


@pytest.mark.parametrize("init", ["paper-first-stream", "random-stream"])
@pytest.mark.parametrize("layers", [4, 6, 8])
def test_stream_and_logits_stay_bounded_at_depth(init, layers):
    """On the probe every random layer adds exactly r/√L of its largest row; on the task's sequences, noise and
    constant sequences no row of H^(L) is more than (1 + r/√L)^L times the largest row the random layers receive,
    and the logits of the task's sequences stay O(1) (measured ≤ 1.1 at 2-8 layers). The plain init, at the same
    depth and draws, is 10⁵ times larger or not even finite."""
    model, tokens = build(init, layers), inputs()
    first = 0 if init == "random-stream" else 1
    step = STREAM_RATIO / layers**0.5
    with torch.no_grad():
        probe = stream_probe(model.d, model.n).expand(2, -1, -1)
        for ratio in growth(model, probe)[first:]:
            torch.testing.assert_close(ratio, torch.full_like(ratio, step), rtol=1e-5, atol=0)  # scaled in fp32
        h = stream(model, tokens)
        received = h[first].norm(dim=-1).amax()
        assert h[-1].norm(dim=-1).amax() <= (1 + step) ** (layers - first) * received
        logits = model(tokens[:, :32]).outputs  # the task's own sequences
        assert logits.abs().max() < 5
        plain = build(init.removesuffix("-stream"), layers)(tokens).outputs
    assert not bool(torch.isfinite(plain).all()) or plain.abs().max() > 1e5 * logits.abs().max()


def test_stream_init_rescales_only_the_random_w_qk_of_the_plain_draws():
    """The same draws as the plain init: W_V and W_U equal, the constructed first layer equal, each random
    layer's W_QK a positive multiple (one per run and head) of the plain one."""
    for init, first in (("paper-first", 1), ("random", 0)):
        plain, bounded = build(init, 4), build(f"{init}-stream", 4)
        for name, param in plain.named_parameters():
            new = bounded.param(name)
            layer = int(name.split(".")[1]) if name.startswith("blocks.") else -1
            if not name.endswith("W_QK") or layer < first:
                torch.testing.assert_close(new, param, rtol=0, atol=0)
                continue
            per_head = (new / param).flatten(2)
            assert bool((per_head > 0).all())
            torch.testing.assert_close(per_head, per_head[..., :1].expand_as(per_head))


def test_a_smaller_ratio_gives_proportionally_smaller_updates():
    """bound_stream's ratio sets the scale: r = 1 gives each random layer a tenth of r = 10's W_QK at layer 1
    (the stream below it is the same), and every layer's largest probe update is r/√L."""
    from depthlab.models.init import bound_stream

    big, small = build("paper-first", 4), build("paper-first", 4)
    bound_stream(big, first_random=1, ratio=10.0)
    bound_stream(small, first_random=1, ratio=1.0)
    torch.testing.assert_close(small.param("blocks.1.attn.W_QK"), big.param("blocks.1.attn.W_QK") / 10)
    with torch.no_grad():
        for ratio in growth(small, stream_probe(small.d, small.n).expand(2, -1, -1))[1:]:
            torch.testing.assert_close(ratio, torch.full_like(ratio, 1 / 2), rtol=1e-5, atol=0)


def test_stream_init_needs_relu_attention():
    with pytest.raises(ValueError, match="softmax attention is bounded"):
        AttentionOnlySpec(layers=4, init="random-stream", attention="softmax")
