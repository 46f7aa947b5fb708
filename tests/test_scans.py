"""Issue 45, item 3: the chunked parallel scans equal the position-by-position recurrences in float64, values and
gradients, for the scan itself and for every family that uses one (and Mamba's against ``mambapy``)."""

import pytest
import torch

from depthlab.models import MODELS, TaskShapes, build_model, mamba
from depthlab.models.scans import chunked_scan, chunkwise_attention

LONG = TaskShapes(vocab_size=7, seq_len=150, n_classes=3)  # beyond one chunk of the chunkwise attention (64)


def sequential(a, b):
    h, states = torch.zeros_like(b[:, 0]), []
    for t in range(b.shape[1]):
        h = a[:, t] * h + b[:, t]
        states.append(h)
    return torch.stack(states, 1)


def grads_of(fn, *inputs):
    """The value of fn and the gradients of a fixed random projection of it with respect to ``inputs``."""
    inputs = [t.detach().requires_grad_() for t in inputs]
    out = fn(*inputs)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    return out, torch.autograd.grad((out * weights).sum(), inputs, materialize_grads=True)


@pytest.mark.parametrize("n", [1, 4, 5, 16, 17, 101])
def test_chunked_scan_equals_the_loop_values_and_gradients(n):
    gen = torch.Generator().manual_seed(n)
    a = torch.rand(3, n, 4, dtype=torch.float64, generator=gen) * 1.2  # some |a| > 1: errors would grow
    b = torch.randn(3, n, 4, dtype=torch.float64, generator=gen)
    chunked, chunked_grads = grads_of(lambda a, b: chunked_scan(a, b, dim=1), a, b)
    loop, loop_grads = grads_of(sequential, a, b)
    torch.testing.assert_close(chunked, loop, rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(chunked_grads, loop_grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_chunkwise_attention_equals_the_masked_product_for_both_decays():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.rand(2, 3, 70, 5, dtype=torch.float64, generator=gen) for _ in range(3))
    gamma = torch.tensor([0.9, 0.97, 0.5], dtype=torch.float64)
    gap = torch.arange(70)[:, None] - torch.arange(70)[None]
    for decay in (None, gamma):
        mask = (gap >= 0).double() if decay is None else torch.where(gap >= 0, decay[:, None, None] ** gap, 0.0)
        scores = (q @ k.transpose(-1, -2)) * mask
        out, norm = chunkwise_attention(q, k, v, decay, chunk=16)  # 70 = 4 chunks of 16 and 6 padded positions
        torch.testing.assert_close(out, scores @ v, rtol=1e-12, atol=1e-12)
        assert (norm is None) == (decay is not None)
        if decay is None:
            torch.testing.assert_close(norm, scores.sum(-1), rtol=1e-12, atol=1e-12)


def model(name, **kw):
    spec = MODELS[name](name=name, width=16, **kw)
    return build_model(spec, LONG, [torch.Generator().manual_seed(3 + r) for r in range(2)]).double()


def stream(net):
    tokens = torch.randint(0, LONG.vocab_size, (2, 2, LONG.seq_len), generator=torch.Generator().manual_seed(2))
    return net.residual_stream(tokens).detach()


@pytest.mark.parametrize("name", ["linear_transformer", "retnet"])
def test_chunkwise_forward_equals_the_recurrence_beyond_one_chunk(name):
    net = model(name, heads=2, init_std=0.5)
    mixer = net.blocks[0].token_mixer
    x = stream(net)
    params = list(mixer.parameters())
    fast, fast_grads = grads_of(lambda x, *p: mixer(x), x, *params)
    slow, slow_grads = grads_of(lambda x, *p: mixer.recurrent(x), x, *params)
    assert fast.abs().max() > 1e-2
    torch.testing.assert_close(fast, slow, rtol=1e-9, atol=1e-9)
    for ours, theirs in zip(fast_grads, slow_grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-8, atol=1e-9)


def test_mamba_chunked_scan_equals_its_loop_values_and_gradients():
    net = model("mamba", layers=1, d_state=4)
    mixer = net.blocks[0].mixer
    xs, _, delta, b, c, a = (t.detach() for t in mixer.prepare(stream(net)))
    fast, fast_grads = grads_of(lambda *t: mixer.scan(*t)[0], xs, delta, b, c, a)
    slow, slow_grads = grads_of(lambda *t: mixer.sequential_scan(*t)[0], xs, delta, b, c, a)
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-12)
    for ours, theirs in zip(fast_grads, slow_grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-11)
    states = mixer.states(stream(net))[..., :4]  # h_t, without the convolution's window
    torch.testing.assert_close(mixer.scan(xs, delta, b, c, a)[1], states, rtol=1e-10, atol=1e-12)


def test_mamba_chunked_equals_mambapy(monkeypatch):
    """The chunked scan as forward (what an accelerator runs) against mambapy's own scan, weights copied."""
    mambapy = pytest.importorskip("mambapy.mamba")
    net = model("mamba", layers=1, d_state=4)
    x = stream(net)
    monkeypatch.setattr(mamba, "chunks_pay", lambda x: True)
    ours = net.body(x)
    ref = mambapy.Mamba(mambapy.MambaConfig(d_model=16, n_layers=1, d_state=4, pscan=True)).double()
    get = lambda name: net.param(f"blocks.0.mixer.{name}")[0]  # noqa: E731
    ref.load_state_dict({"layers.0.norm.weight": net.param("blocks.0.ln1.w")[0], "layers.0.mixer.in_proj.weight":
                         get("W_in").T, "layers.0.mixer.conv1d.weight": get("conv_w")[:, None],
                         "layers.0.mixer.conv1d.bias": get("conv_b"), "layers.0.mixer.x_proj.weight": get("W_x").T,
                         "layers.0.mixer.dt_proj.weight": get("W_dt").T, "layers.0.mixer.dt_proj.bias": get("b_dt"),
                         "layers.0.mixer.A_log": get("A_log"), "layers.0.mixer.D": get("D"),
                         "layers.0.mixer.out_proj.weight": get("W_out").T})
    torch.testing.assert_close(ours[0], ref(x[0]), rtol=1e-7, atol=1e-9)


def test_dss_chunked_states_equal_the_loop():
    net = model("dss", d_state=3)
    mixer = net.blocks[0].ssm
    x = stream(net)
    loop = torch.stack(mixer.scan(x)[0], dim=2)
    torch.testing.assert_close(mixer.chunked_states(x), loop, rtol=1e-10, atol=1e-12)
