"""Seed 003's recurrent families: shapes, state sizes, per-run independence, and for every hand-written model
the parallel (training) form against a direct step-by-step transcription of its recurrence."""

import math

import pytest
import torch

from depthlab.models import MODELS, TaskShapes, build_model

SHAPES = TaskShapes(vocab_size=9, seq_len=11, n_classes=5)
FAMILIES = ["lstm", "linear_transformer", "retnet", "dss", "mamba"]


def make(name, runs=2, shapes=SHAPES, **kw):
    spec = MODELS[name](name=name, **kw)
    return build_model(spec, shapes, [torch.Generator().manual_seed(10 + r) for r in range(runs)])


def tokens(runs=2, batch=3, shapes=SHAPES, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, shapes.vocab_size, (runs, batch, shapes.seq_len), generator=gen)


@pytest.mark.parametrize("name", FAMILIES)
def test_shapes_read_positions_and_vector_inputs(name):
    model = make(name, runs=3, width=16, layers=2)
    x = tokens(runs=3, batch=4)
    assert model(x).outputs.shape == (3, 4, 5)
    assert model(x, read=torch.tensor([0, 4, 10])).outputs.shape == (3, 4, 3, 5)
    torch.testing.assert_close(model(x, read=torch.tensor([10])).outputs[:, :, 0], model(x).outputs)
    vec = make(name, runs=2, shapes=TaskShapes(6, 8, 2), width=16)
    assert vec(torch.randn(2, 5, 8, 6)).outputs.shape == (2, 5, 2)
    with pytest.raises(ValueError):
        model(x, override={(0, 0): "uniform"})


@pytest.mark.parametrize("name", FAMILIES)
def test_runs_are_independent_and_initialised_from_their_own_generator(name):
    group = make(name, runs=3, width=16)
    x = tokens(runs=3)
    alone = MODELS[name](name=name, width=16)
    single = build_model(alone, SHAPES, [torch.Generator().manual_seed(12)])  # run 2 of the group
    torch.testing.assert_close(group(x).outputs[2], single(x[2:3]).outputs[0])
    state = group.run_state_dict(1)
    assert all(not k.startswith("_") for k in state)
    group.select_runs(torch.tensor([2]))
    torch.testing.assert_close(group(x[2:3]).outputs, single(x[2:3]).outputs)


def test_state_sizes():
    assert MODELS["lstm"](name="lstm", layers=2, width=64).state_size == 2 * 2 * 64
    assert MODELS["linear_transformer"](name="linear_transformer", layers=2, width=64, heads=4).state_size == \
        2 * 4 * 16 * 17
    assert MODELS["retnet"](name="retnet", layers=2, width=64, heads=4).state_size == 2 * 4 * 16 * 16
    assert MODELS["dss"](name="dss", layers=2, width=64, d_state=32).state_size == 2 * 64 * 32 * 2
    assert MODELS["mamba"](name="mamba", layers=2, width=64).state_size == 2 * 128 * (16 + 3)


@pytest.mark.parametrize("name", ["linear_transformer", "retnet", "dss"])
def test_parallel_form_equals_recurrence(name):
    model = make(name, runs=2, width=16, layers=2, init_std=0.5).double()
    x = model.residual_stream(tokens())
    for block in model.blocks:
        parallel, recurrent = block.token_mixer(x), block.token_mixer.recurrent(x)
        assert parallel.abs().max() > 1e-2  # not a trivially small comparison
        torch.testing.assert_close(parallel, recurrent, rtol=1e-9, atol=1e-9)


def test_dss_kernel_is_the_zoh_diagonal_ssm():
    """K̄_l = Re Σ_n W_n (e^{ΛΔ} − 1)/Λ e^{lΛΔ}, written out with Python complex numbers for one channel."""
    model = make("dss", runs=1, width=4, d_state=3).double()
    p = "blocks.0.ssm"
    lam = [complex(-math.exp(a), b) for a, b in zip(model.param(f"{p}.Lambda_re_log")[0].tolist(),
                                                   model.param(f"{p}.Lambda_im")[0].tolist(), strict=True)]
    dt = math.exp(model.param(f"{p}.log_dt")[0, 1].item())
    w = [complex(a, b) for a, b in zip(model.param(f"{p}.W_re")[0, 1].tolist(), model.param(f"{p}.W_im")[0, 1].tolist(),
                                       strict=True)]
    import cmath

    expected = [sum(wn * (cmath.exp(ln * dt) - 1) / ln * cmath.exp(ln * dt * step)
                    for wn, ln in zip(w, lam, strict=True)).real for step in range(6)]
    torch.testing.assert_close(model.blocks[0].ssm.kernel(6)[0, 1], torch.tensor(expected, dtype=torch.float64))


def test_lstm_is_torch_lstm():
    model = make("lstm", runs=2, width=8, layers=2).double()
    x = tokens()
    for r in range(2):
        ref = torch.nn.LSTM(8, 8, num_layers=2, batch_first=True).double()
        ref.load_state_dict({name: model.param(f"lstm.{name}")[r] for name, _ in ref.named_parameters()})
        h = ref(model.residual_stream(x)[r])[0]
        torch.testing.assert_close(model.body(model.residual_stream(x))[r], h)


@pytest.mark.parametrize("parallel", [True, False])
def test_mamba_equals_mambapy(parallel):
    """Our run-axis Mamba against mambapy's (the parallel scan, or its sequential scan), weights copied."""
    mambapy = pytest.importorskip("mambapy.mamba")
    model = make("mamba", runs=2, width=16, layers=2, d_state=4).double()
    x = model.residual_stream(tokens())
    ours = model.body(x)
    config = mambapy.MambaConfig(d_model=16, n_layers=2, d_state=4, pscan=parallel)
    for r in range(2):
        ref = mambapy.Mamba(config).double()
        state = {}
        for layer in range(2):
            p, q = f"blocks.{layer}.mixer", f"layers.{layer}"
            get = lambda name, p=p, r=r: model.param(f"{p}.{name}")[r]  # noqa: E731
            state |= {f"{q}.norm.weight": model.param(f"blocks.{layer}.ln1.w")[r],
                      f"{q}.mixer.in_proj.weight": get("W_in").T, f"{q}.mixer.conv1d.weight": get("conv_w")[:, None],
                      f"{q}.mixer.conv1d.bias": get("conv_b"), f"{q}.mixer.x_proj.weight": get("W_x").T,
                      f"{q}.mixer.dt_proj.weight": get("W_dt").T, f"{q}.mixer.dt_proj.bias": get("b_dt"),
                      f"{q}.mixer.A_log": get("A_log"), f"{q}.mixer.D": get("D"),
                      f"{q}.mixer.out_proj.weight": get("W_out").T}
        ref.load_state_dict(state)
        torch.testing.assert_close(ours[r], ref(x[r]), rtol=1e-7, atol=1e-9)


def test_mamba_scan_is_the_selective_recurrence():
    """h_t = exp(Δ_t A) h_{t-1} + Δ_t x_t B_t, y_t = C_t·h_t + D x_t, element by element for one run and example."""
    model = make("mamba", runs=1, width=8, layers=1, d_state=3).double()
    x = model.residual_stream(tokens(runs=1, batch=1))
    mixer = model.blocks[0].mixer
    xs, z, delta, b, c, a = mixer.prepare(x)
    e, n = a.shape[-2:]
    h = [[0.0] * n for _ in range(e)]
    ys = []
    for t in range(x.shape[2]):
        row = []
        for i in range(e):
            d_t = delta[0, 0, t, i].item()
            for j in range(n):
                decay = math.exp(d_t * a[0, i, j].item())
                h[i][j] = decay * h[i][j] + d_t * xs[0, 0, t, i].item() * b[0, 0, t, j].item()
            row.append(sum(h[i][j] * c[0, 0, t, j].item() for j in range(n)))
        ys.append(row)
    expected = mixer.finish(xs, z, torch.tensor(ys, dtype=torch.float64)[None, None])
    torch.testing.assert_close(mixer(x), expected)
