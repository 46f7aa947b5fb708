"""Hook points: every family's documented names and shapes, reading and replacing activations, and the recurrent
states checked against the recurrences that define them."""

import re

import pytest
import torch

from depthlab.models import MODELS, TaskShapes, build_model

SHAPES = TaskShapes(vocab_size=9, seq_len=7, n_classes=5)
R, B, N = 2, 3, SHAPES.seq_len
FAMILIES = {  # family -> spec fields (small, several heads and layers)
    "attention_only": {"layers": 2, "heads": [2, 3], "init": "random", "attention": "softmax"},
    "transformer": {"layers": 2, "heads": 2, "width": 16},
    "linear_transformer": {"layers": 2, "heads": 2, "width": 16},
    "retnet": {"layers": 2, "heads": 2, "width": 16},
    "dss": {"layers": 2, "width": 8, "d_state": 3},
    "mamba": {"layers": 2, "width": 8, "d_state": 3},
    "lstm": {"layers": 2, "width": 8},
}
MIXERS = {"linear_transformer": "attn", "retnet": "ret", "dss": "ssm", "mamba": "mixer"}


def make(name: str, **extra):
    spec = MODELS[name](name=name, **{**FAMILIES[name], **extra})
    return build_model(spec, SHAPES, range(R)).double()


def tokens(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, SHAPES.vocab_size, (R, B, N), generator=torch.Generator().manual_seed(seed))


def documented(name: str, model) -> dict[str, tuple[int, ...]]:
    """Every hook name a family documents, with its shape [R, B, …] (per-head ones in TransformerLens' layout)."""
    spec = model.spec
    width = model.width if name == "attention_only" else spec.width
    out = {"hook_embed": (R, B, N, width)}
    per_layer = {"hook_resid_pre": (R, B, N, width), "hook_resid_post": (R, B, N, width)}
    if name in ("attention_only", "transformer", "linear_transformer"):  # positions added to the tokens
        out["hook_pos_embed"] = (R, B, N, width)
    if name in ("attention_only", "transformer"):
        per_layer["hook_attn_out"] = (R, B, N, width)
    if name == "transformer":
        heads, dh = spec.heads, spec.head_size
        per_layer |= {f"attn.hook_{s}": (R, B, N, heads, dh) for s in "qkvz"}
        per_layer |= {"attn.hook_attn_scores": (R, B, heads, N, N), "attn.hook_pattern": (R, B, heads, N, N),
                      "hook_resid_mid": (R, B, N, width), "mlp.hook_pre": (R, B, N, 4 * width),
                      "mlp.hook_post": (R, B, N, 4 * width), "hook_mlp_out": (R, B, N, width)}
    if name in MIXERS:
        mixer = MIXERS[name]
        per_layer |= {f"hook_{mixer}_out": (R, B, N, width), "hook_state": None}
        if name in ("linear_transformer", "retnet"):
            per_layer |= {f"{mixer}.hook_{s}": (R, B, N, spec.heads, spec.d_head) for s in "qkvz"}
            per_layer |= {"hook_resid_mid": (R, B, N, width), "mlp.hook_pre": (R, B, N, 4 * width),
                          "mlp.hook_post": (R, B, N, 4 * width), "hook_mlp_out": (R, B, N, width)}
    if name == "lstm":
        per_layer["hook_state"] = (R, B, N, 2, width)
    for layer in range(spec.layers):
        for key, shape in per_layer.items():
            out[f"blocks.{layer}.{key}"] = shape
        if name == "attention_only":
            heads = spec.heads_per_layer[layer]
            out |= {f"blocks.{layer}.attn.hook_{s}": (R, B, N, heads, width) for s in "qkvz"}
            out |= {f"blocks.{layer}.attn.hook_{s}": (R, B, heads, N, N) for s in ("attn_scores", "pattern")}
    return out


@pytest.mark.parametrize("name", list(FAMILIES))
def test_run_with_cache_gives_every_documented_hook_with_its_shape(name):
    model = make(name)
    x = tokens()
    logits, cache = model.run_with_cache(x)
    expected = documented(name, model)
    assert set(cache) == set(expected) == set(model.hook_names)
    for hook, shape in expected.items():
        if shape is not None:
            assert tuple(cache[hook].shape) == shape, hook
    for layer in range(model.spec.layers):  # the state: state_size / layers numbers per position
        if f"blocks.{layer}.hook_state" in cache:
            state = cache[f"blocks.{layer}.hook_state"][0, 0, -1]
            numbers = state.numel() * (2 if state.is_complex() else 1)
            assert numbers * model.spec.layers == model.spec.state_size
    # asking for everything computes what is otherwise skipped, and changes nothing
    torch.testing.assert_close(logits, model(x).outputs, rtol=1e-10, atol=1e-10)
    assert not any(point.active for point in model.hook_points())  # every hook removed afterwards


@pytest.mark.parametrize("name", list(FAMILIES))
def test_replacing_the_last_residual_stream_sets_the_logits(name):
    """A hook that returns a tensor replaces the activation: the logits are then the read-out of that tensor."""
    model = make(name)
    last = f"blocks.{model.spec.layers - 1}.hook_resid_post"
    stream = torch.randn(R, B, N, model.width if name == "attention_only" else model.spec.width, dtype=torch.float64)
    logits = model.run_with_hooks(tokens(), fwd_hooks=[(last, lambda x, hook: stream)])
    head = stream[:, :, -1] if name == "attention_only" else model.ln_final(stream[:, :, -1])
    torch.testing.assert_close(logits, model.unembed(head))


@pytest.mark.parametrize("name", ["attention_only", "transformer"])
def test_a_uniform_pattern_by_hook_equals_the_uniform_override(name):
    model = make(name)
    x = tokens(1)
    heads = model.heads_per_layer
    override = {(layer, h): "uniform" for layer, n in enumerate(heads) for h in range(n)}

    def uniform(pattern, hook):
        visible = (pattern > 0).to(pattern.dtype)  # softmax: exactly the keys the query may see
        return visible / visible.sum(-1, keepdim=True)

    by_hook = model.run_with_hooks(x, fwd_hooks=[(lambda n: n.endswith("hook_pattern"), uniform)])
    torch.testing.assert_close(by_hook, model(x, override=override).outputs, rtol=1e-12, atol=1e-12)
    captured = model(x, capture=True).attentions
    _, cache = model.run_with_cache(x, names=lambda n: n.endswith("hook_pattern"))
    assert [torch.equal(a, b) for a, b in zip(captured, cache.values(), strict=True)] == [True] * len(heads)


def test_hooks_compose_in_order_and_unknown_names_are_refused_with_a_suggestion():
    model = make("transformer")
    seen = []
    model.run_with_hooks(tokens(), fwd_hooks=[("blocks.1.attn.hook_z", lambda x, h: seen.append((h.name, h.layer()))),
                                              ("blocks.0.hook_resid_pre", lambda x, h: seen.append((h.name, None)))])
    assert seen == [("blocks.0.hook_resid_pre", None), ("blocks.1.attn.hook_z", 1)]
    with pytest.raises(ValueError, match=re.escape("did you mean blocks.0.attn.hook_pattern")):
        model.run_with_cache(tokens(), names=["blocks.0.attn.hook_patern"])


def test_the_recurrent_state_can_be_read_but_not_replaced():
    model = make("dss")
    with pytest.raises(ValueError, match="can be read"):
        model.run_with_hooks(tokens(), fwd_hooks=[("blocks.0.hook_state", lambda x, h: torch.zeros_like(x))])


def _cache(name: str, **extra):
    model = make(name, **extra)
    return model, model.run_with_cache(tokens(2))[1]


def test_linear_transformer_state_is_the_running_sums():
    """[S_t | z_t]: out_t = S_tᵀ φ(q_t) / (z_tᵀ φ(q_t)) reproduces hook_z."""
    from depthlab.models.linear_transformer import EPS, feature_map

    _, cache = _cache("linear_transformer")
    state, q = cache["blocks.1.hook_state"], feature_map(cache["blocks.1.attn.hook_q"])  # [R,B,n,h,e,e+1]
    s, z = state[..., :-1], state[..., -1]
    out = torch.einsum("rbnhe,rbnhef->rbnhf", q, s) / ((q * z).sum(-1, keepdim=True) + EPS)
    torch.testing.assert_close(out, cache["blocks.1.attn.hook_z"])


def test_retnet_state_gives_the_retention_output():
    """o_n = q_n S_n (q rotated and scaled as the parallel form), before the normalisation and gate."""
    model, cache = _cache("retnet")
    ret = model.blocks[0].ret
    q, _, _ = ret.queries_keys_values(model.blocks[0].ln1(cache["blocks.0.hook_resid_pre"]))
    o = torch.einsum("rbhne,rbnhef->rbhnf", q, cache["blocks.0.hook_state"])
    torch.testing.assert_close(ret.finish(model.blocks[0].ln1(cache["blocks.0.hook_resid_pre"]), o),
                               cache["blocks.0.hook_ret_out"])


def test_dss_state_gives_the_output():
    """y_l = Re(W · x_l) + D u, then GELU and the output map: the layer's output from its state."""
    model, cache = _cache("dss")
    ssm, u = model.blocks[1].ssm, model.blocks[1].ln1(cache["blocks.1.hook_resid_pre"])
    _, _, w = ssm.discretised()
    y = (w[:, None, None] * cache["blocks.1.hook_state"]).sum(-1).real
    torch.testing.assert_close(ssm.finish(u, y), cache["blocks.1.hook_ssm_out"])


def test_mamba_state_is_h_and_the_convolution_window():
    model, cache = _cache("mamba")
    mixer, x = model.blocks[0].mixer, model.blocks[0].ln1(cache["blocks.0.hook_resid_pre"])
    state = cache["blocks.0.hook_state"]
    xs, z, _, _, c, _ = mixer.prepare(x)
    h, window = state[..., : model.spec.d_state], state[..., model.spec.d_state :]
    y = (h * c[:, :, :, None, :]).sum(-1)
    torch.testing.assert_close(mixer.finish(xs, z, y), cache["blocks.0.hook_mixer_out"])
    conv_in = mixer.conv_input(x)[0][:, :, model.spec.d_conv - 1 :]  # the inputs at positions 0 … n-1
    torch.testing.assert_close(window[..., -1], conv_in)
    torch.testing.assert_close(window[:, :, 1:, :, -2], conv_in[:, :, :-1])


def test_lstm_state_is_h_and_c_and_h_is_the_layer_output():
    _, cache = _cache("lstm")
    for layer in range(2):
        state = cache[f"blocks.{layer}.hook_state"]
        torch.testing.assert_close(state[:, :, :, 0], cache[f"blocks.{layer}.hook_resid_post"])
    torch.testing.assert_close(cache["blocks.1.hook_resid_pre"], cache["blocks.0.hook_resid_post"])


def test_the_cache_takes_transformerlens_short_names():
    _, cache = make("transformer").run_with_cache(tokens())
    assert cache["pattern", 1] is cache["blocks.1.attn.hook_pattern"] is cache["attn", 1]
    assert cache["resid_post", 0] is cache["blocks.0.hook_resid_post"] and cache["embed"] is cache["hook_embed"]
    assert cache["pattern", -1] is cache["pattern", 1] and cache["k1"] is cache["blocks.1.attn.hook_k"]
    with pytest.raises(KeyError, match=r"blocks\.5\.attn\.hook_pattern\) is not in the cache; did you mean "
                                       r"blocks\.1\.attn\.hook_pattern"):
        cache["pattern", 5]
    with pytest.raises(KeyError, match=r"did you mean blocks\.0\.attn\.hook_pattern, "):
        cache["blocks.0.attn.hook_patern"]
