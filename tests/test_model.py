"""The attention-only model of seed 001 §3.1: shapes, and equality with a direct transcription of eq. (2)."""

import pytest
import torch

from depthlab.models import TaskShapes, build_model
from depthlab.models.attention_only import AttentionOnlySpec
from depthlab.training.optim import GroupOptimizer

SHAPES = TaskShapes(vocab_size=7, seq_len=5, n_classes=4)


def make(runs=3, **kw):
    spec = AttentionOnlySpec(**kw)
    gens = [torch.Generator().manual_seed(s) for s in range(runs)]
    return build_model(spec, SHAPES, gens).double()


def transcription(model, run, tokens):
    """Eq. (2) and (3) with columns: H^(l+1) = H^(l) + (1/m) Σ_i V_i σ(Q_iᵀ K_i); o = W_O h_{n-1}."""
    d, n, width = model.d, model.n, model.width
    H = torch.zeros(width, n, dtype=torch.float64)
    for j, t in enumerate(tokens):
        H[t, j] = 1.0
        H[d + j, j] = 1.0
    for layer in range(model.layers):
        w_qk = model.param(f"blocks.{layer}.attn.W_QK")[run]
        w_v = model.param(f"blocks.{layer}.attn.W_V")[run]
        m = w_qk.shape[0]
        total = torch.zeros_like(H)
        for i in range(m):
            paper_qk = w_qk[i].T  # the paper's W_QK = W_Qᵀ W_K, score(key a, query b) = H[:, a]ᵀ W H[:, b]
            paper_v = w_v[i].T
            scores = H.T @ paper_qk @ H
            sigma = torch.relu(scores) if model.spec.attention == "relu" else torch.softmax(scores, dim=0)
            total += paper_v @ H @ sigma
        H = H + total / m
    return model.param("unembed.W_U")[run].T @ H[:, -1]


@pytest.mark.parametrize("attention", ["relu", "softmax"])
@pytest.mark.parametrize("init", ["paper", "random"])
def test_forward_equals_equation_2(attention, init):
    model = make(runs=3, layers=3, heads=[2, 1, 3], attention=attention, init=init, qk_scale=0.3)
    tokens = torch.randint(0, SHAPES.vocab_size, (3, 4, SHAPES.seq_len), generator=torch.Generator().manual_seed(0))
    out = model(tokens)
    assert out.outputs.shape == (3, 4, SHAPES.n_classes)
    for r in range(3):
        for b in range(4):
            expected = transcription(model, r, tokens[r, b].tolist())
            torch.testing.assert_close(out.outputs[r, b], expected, rtol=1e-9, atol=1e-9)


def test_qk_scale_shrinks_random_w_qk_only_and_keeps_deep_relu_models_finite():
    """Under ``init: random`` qk_scale multiplies W_QK and nothing else (same draws); under ``paper-first`` the
    random later layers ignore it. Why it exists: ReLU attention without normalisation is cubic in the residual
    stream per layer, so 8 layers at N(0, 1/width) overflow float32 at initialisation, and 0.1 of that does not."""
    one, tenth = make(layers=2, init="random"), make(layers=2, init="random", qk_scale=0.1)
    for name, param in one.named_parameters():  # drawn in float32, compared in float64
        scale = 0.1 if name.endswith("W_QK") else 1.0
        torch.testing.assert_close(dict(tenth.named_parameters())[name], scale * param, rtol=1e-6, atol=0)
    first = make(layers=2, init="paper-first", qk_scale=0.1)
    torch.testing.assert_close(first.param("blocks.1.attn.W_QK"), one.param("blocks.1.attn.W_QK"))
    shapes = TaskShapes(vocab_size=14, seq_len=20, n_classes=14)
    tokens = torch.randint(0, 14, (2, 64, 20), generator=torch.Generator().manual_seed(0))
    for qk_scale, finite in ((1.0, False), (0.1, True)):
        gens = [torch.Generator().manual_seed(s) for s in range(2)]
        deep = build_model(AttentionOnlySpec(layers=8, init="random", qk_scale=qk_scale), shapes, gens)
        with torch.no_grad():
            assert bool(torch.isfinite(deep(tokens).outputs).all()) is finite


def test_h0_from_the_table_of_token_positions_equals_eq_3():
    """H^(0) looked up in the (token, position) table, and built as one-hot token + one-hot position (the way
    taken when the table would be too big), are the same matrix."""
    model = make(runs=2, layers=1)
    tokens = torch.randint(0, SHAPES.vocab_size, (2, 6, SHAPES.seq_len))
    looked_up = model.residual_stream(tokens)
    model.token_positions = None
    built = model.residual_stream(tokens)
    assert torch.equal(looked_up, built)
    assert torch.equal(built[..., : SHAPES.vocab_size].argmax(-1), tokens)


def test_bf16_keeps_the_residual_stream_in_fp32():
    """Under autocast the products run in bf16, but H^(l+1) = H^(l) + … is summed and kept in fp32."""
    model = make(runs=2, layers=2, heads=2, init="random").float()
    tokens = torch.randint(0, SHAPES.vocab_size, (2, 3, SHAPES.seq_len))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, cache = model.run_with_cache(tokens, names=["blocks.0.hook_resid_post", "blocks.0.attn.hook_pattern"])
    after, pattern = cache["blocks.0.hook_resid_post"], cache["blocks.0.attn.hook_pattern"]
    assert after.dtype == torch.float32 and pattern.dtype == torch.bfloat16


@pytest.mark.parametrize("attention", ["relu", "softmax"])
def test_hand_written_last_layer_gives_the_generic_values_and_gradients(attention):
    """The last layer for its one query (``LastQueryAttention``, hand-written backward) against the same layer
    computed for every query by autograd's generic code (``read`` asks for the last position as a read-out)."""
    model = make(runs=3, layers=2, heads=[2, 3], attention=attention, init="random")
    tokens = torch.randint(0, SHAPES.vocab_size, (3, 4, SHAPES.seq_len), generator=torch.Generator().manual_seed(2))
    results = []
    for read in (None, torch.tensor([SHAPES.seq_len - 1])):
        model.zero_grad()
        out = model(tokens, read=read).outputs.reshape(3, 4, -1)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view(out.shape)).sum().backward()
        results.append([out.detach()] + [p.grad.clone() for p in model.parameters()])
    for fused, generic in zip(*results, strict=True):
        torch.testing.assert_close(fused, generic, rtol=1e-12, atol=1e-12)


def test_capture_shapes_and_same_outputs():
    model = make(layers=2, heads=[2, 3])
    tokens = torch.randint(0, SHAPES.vocab_size, (3, 6, SHAPES.seq_len))
    plain, captured = model(tokens), model(tokens, capture=True)
    torch.testing.assert_close(plain.outputs, captured.outputs)
    assert [a.shape for a in captured.attentions] == [(3, 6, 2, 5, 5), (3, 6, 3, 5, 5)]


def test_override_with_own_pattern_changes_nothing_and_uniform_does():
    model = make(layers=2, heads=2, attention="softmax")
    tokens = torch.randint(0, SHAPES.vocab_size, (3, 6, SHAPES.seq_len))
    captured = model(tokens, capture=True)
    same = model(tokens, override={(0, 1): captured.attentions[0][:, :, 1]})
    torch.testing.assert_close(same.outputs, captured.outputs)
    changed = model(tokens, override={(0, 1): "uniform"})
    assert not torch.allclose(changed.outputs, captured.outputs)


def test_runs_are_independent_and_selectable():
    model = make(runs=4, layers=2, heads=2)
    tokens = torch.randint(0, SHAPES.vocab_size, (4, 3, SHAPES.seq_len))
    before = model(tokens).outputs
    state = model.run_state_dict(2)
    assert state["blocks.0.attn.W_QK"].shape == (2, model.width, model.width)
    assert state["unembed.W_U"].shape == (model.width, SHAPES.n_classes)
    model.select_runs(torch.tensor([2, 0]))
    after = model(tokens[[2, 0]]).outputs
    torch.testing.assert_close(after, before[[2, 0]])


@pytest.mark.parametrize("kind,extra,schedule", [
    ("sgd", {"momentum": 0.9, "weight_decay": 0.01}, {}),
    ("adamw", {"weight_decay": 0.1}, {}),
    ("sgd", {"momentum": 0.9, "weight_decay": 0.01}, {"grad_clip": 1.0, "warmup_steps": 3}),  # the paper's clip
    ("adamw", {"weight_decay": 0.1}, {"grad_clip": 1.0, "warmup_steps": 3}),  # the presets' warm-up
], ids=["sgd", "adamw", "sgd-clip-warmup", "adamw-clip-warmup"])
def test_group_optimizer_matches_torch_optim(kind, extra, schedule):
    """Each run's update is torch.optim's on that run alone: clipped to the run's own global norm
    (``clip_grad_norm_``), warmed up linearly from lr / w at the first step (``LambdaLR``)."""
    torch.manual_seed(0)
    lrs = [0.1, 0.01, 0.003]
    stacked = [torch.nn.Parameter(torch.randn(3, 4, 5)), torch.nn.Parameter(torch.randn(3, 2))]
    singles = [[torch.nn.Parameter(p.detach()[r].clone()) for p in stacked] for r in range(3)]
    group = GroupOptimizer(stacked, lrs, kind, **extra, **schedule)
    cls = torch.optim.SGD if kind == "sgd" else torch.optim.AdamW
    refs = [cls(params, lr=lr, **extra) for params, lr in zip(singles, lrs, strict=True)]
    warmup = schedule.get("warmup_steps", 0)
    schedules = [torch.optim.lr_scheduler.LambdaLR(opt, lambda done: min(1.0, (done + 1) / warmup) if warmup else 1.0)
                 for opt in refs]
    scales = torch.tensor([0.05, 0.5, 5.0])  # gradient norms below and above the clip, per run
    for _ in range(5):
        grads = [torch.randn(p.shape) * scales.view(3, *[1] * (p.dim() - 1)) for p in stacked]
        for p, g in zip(stacked, grads, strict=True):
            p.grad = g.clone()
        group.step()
        for r, (params, opt, sched) in enumerate(zip(singles, refs, schedules, strict=True)):
            for p, g in zip(params, grads, strict=True):
                p.grad = g[r].clone()
            if "grad_clip" in schedule:
                torch.nn.utils.clip_grad_norm_(params, schedule["grad_clip"])
            opt.step()
            sched.step()
    for r in range(3):
        for p, single in zip(stacked, singles[r], strict=True):
            torch.testing.assert_close(p.detach()[r], single.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rotary", "onehot"])
def test_transformer_shapes_causality_and_run_independence(positional):
    from depthlab.models.transformer import TransformerSpec

    spec = TransformerSpec(layers=2, heads=2, width=16, positional=positional)
    gens = [torch.Generator().manual_seed(s) for s in range(3)]
    model = build_model(spec, SHAPES, gens).double()
    tokens = torch.randint(0, SHAPES.vocab_size, (3, 4, SHAPES.seq_len))
    out = model(tokens, capture=True)
    assert out.outputs.shape == (3, 4, SHAPES.n_classes)
    assert [a.shape for a in out.attentions] == [(3, 4, 2, 5, 5)] * 2
    assert torch.all(out.attentions[0].triu(1) == 0)  # causal
    torch.testing.assert_close(out.attentions[1].sum(-1), torch.ones(3, 4, 2, 5, dtype=torch.float64))
    single = build_model(spec, SHAPES, [torch.Generator().manual_seed(1)]).double()
    torch.testing.assert_close(single(tokens[1:2]).outputs, out.outputs[1:2])
    same = model(tokens, override={(1, 0): out.attentions[1][:, :, 0]})
    torch.testing.assert_close(same.outputs, out.outputs)


def test_causal_uniform_override_never_sees_the_future():
    """A causal model's uniform ablation weights only keys 0 … i at query i (seed 002 App. E ablations)."""
    from depthlab.models.base import override_pattern

    pattern = override_pattern("uniform", torch.zeros(1, 1, 4, 4), causal=True)[0, 0]
    assert torch.allclose(pattern.sum(-1), torch.ones(4))
    assert torch.all(pattern.triu(1) == 0) and torch.isclose(pattern[3, 0], torch.tensor(0.25))


def test_override_of_the_last_layer_is_placed_at_the_last_query():
    """identity / a full-size tensor on the read-out layer act on the last query, as on every other layer."""
    spec = AttentionOnlySpec(layers=1, heads=1, attention="softmax", init="random")
    model = build_model(spec, TaskShapes(vocab_size=5, seq_len=4, n_classes=5), [torch.Generator().manual_seed(0)])
    tokens = torch.randint(0, 5, (1, 3, 4))
    identity = torch.eye(4)
    by_name = model(tokens, override={(0, 0): "identity"}).outputs
    by_tensor = model(tokens, override={(0, 0): identity}).outputs
    expected = model(tokens, override={(0, 0): identity}, capture=True).outputs
    assert torch.allclose(by_name, by_tensor) and torch.allclose(by_name, expected)


def test_sizing_a_model_on_the_meta_device_does_not_import_torchdynamo():
    """``model_size`` runs before every group; a random draw or ``triu`` on the meta device imports TorchDynamo
    (seconds at every start of a training command). A fresh interpreter, since the suite may have imported it."""
    import subprocess
    import sys

    code = """
import sys
from depthlab.config import parse_run
from depthlab.models.base import TaskShapes, model_size
names = ("transformer", "attention_only", "lstm", "dss", "mamba", "linear_transformer", "retnet")
for model in [{"name": name} for name in names] + [{"name": "transformer", "positional": "rotary"}]:
    name = model["name"]
    config = parse_run({"task": {"name": "index_lookup", "N": 20}, "model": model})
    assert model_size(config.model, TaskShapes.of(config.task)).parameters > 0
    assert "torch._dynamo" not in sys.modules, name
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
