"""A TransformerLens user's habits on depthlab's own models: the task's vocabulary as a tokenizer, text input,
logits at every position, ``cfg``, the W_Q/W_K/W_O views and QK/OV circuits, the cache's helpers, ``add_hook`` /
``reset_hooks`` and backward hooks. Each checked against what the model computes; the same helpers against
TransformerLens itself are in ``tests/test_tl_against_transformerlens.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import depthlab
from depthlab.models import MODELS, SingleRunModel, TaskShapes, build_model
from depthlab.models.tokens import Vocabulary

ICQA = depthlab.task("icqa", k=2, n_q=4, n_a=4)  # 8 positions (a → 1 b → 2 a →), 9 tokens
N, WIDTH = ICQA.seq_len, ICQA.vocab_size + ICQA.seq_len  # seed 001's d' = d + n
MODELS_ON_ICQA = {
    "attention_only": {"layers": 2, "heads": [1, 2], "init": "random", "attention": "relu"},
    "transformer": {"layers": 2, "heads": 2, "width": 16},
    "lstm": {"layers": 1, "width": 8},
}


def single(name: str, task=ICQA, seed: int = 0, **fields) -> SingleRunModel:
    spec = MODELS[name](name=name, **{**MODELS_ON_ICQA[name], **fields})
    return SingleRunModel(build_model(spec, TaskShapes.of(task), [seed]).double(), task).eval()


def examples(n: int = 5, task=ICQA) -> torch.Tensor:
    return torch.from_numpy(task.sample(n, np.random.default_rng(0)).inputs)


# ------------------------------------------------------------------------------------------------ tokens


def test_the_task_vocabulary_reads_and_writes_tokens():
    vocab = Vocabulary(ICQA.vocab, ICQA.labels, "icqa")
    tokens = vocab.to_tokens("a → 1 b -> 2 a →")  # -> stands for →
    assert tokens.shape == (1, 8) and vocab.to_str_tokens(tokens) == ["a", "→", "1", "b", "→", "2", "a", "→"]
    assert vocab.to_string(tokens[0]) == "a → 1 b → 2 a →" and vocab.to_string(tokens) == ["a → 1 b → 2 a →"]
    assert vocab.to_str_tokens(["a → 1", "b → 2"]) == [["a", "→", "1"], ["b", "→", "2"]]
    assert vocab.to_str_tokens(tokens[0, 2]) == ["1"] and vocab.to_single_token("→") == ICQA.vocab.index("→")
    assert torch.equal(vocab.to_tokens(["a → 1", "b → 2"]), torch.tensor([[0, 4, 6], [1, 4, 7]]))
    dyck = depthlab.task("dyck")
    assert Vocabulary(dyck.vocab, dyck.labels).to_str_tokens("([]) [") == ["(", "[", "]", ")", "["]  # run together
    lookup = depthlab.task("index_lookup")
    assert Vocabulary(lookup.vocab, lookup.labels).to_str_tokens("a1b c") == ["a1", "b", "c"]  # longest first
    for call, match in ((lambda: vocab.to_tokens("a → z"), r"unknown token 'z'; the icqa vocabulary is a b c d"),
                        (lambda: vocab.to_tokens(["a → 1", "a"]), "different lengths"),
                        (lambda: vocab.to_tokens("a", prepend_bos=True), "no beginning-of-sequence token"),
                        (lambda: vocab.to_str_tokens(torch.zeros(2, 3, dtype=torch.long)), "one input at a time"),
                        (lambda: vocab.to_single_token("a → 1"), "3 tokens, not one"),
                        (lambda: vocab.label_id("zz"), "not a label of icqa")):
        with pytest.raises(ValueError, match=match):
            call()


def test_text_input_and_logits_at_every_position():
    model = single("attention_only")
    text = ICQA.decode(ICQA.sample(1, np.random.default_rng(1)), 0).rsplit(" _", 1)[0]
    x = model.to_tokens(text)
    torch.testing.assert_close(model(text), model(x))
    logits, cache = model.run_with_cache([text, text])
    torch.testing.assert_close(logits, model(x.expand(2, -1)))
    every = model(x, read="all")
    assert every.shape == (1, N, ICQA.n_outputs) and "blocks.0.hook_resid_pre" in cache
    torch.testing.assert_close(every[:, -1], model(x))  # the read-out position is the last of them
    torch.testing.assert_close(every, model(x, read=torch.arange(N)))


def test_seed_001_model_is_not_causal_and_the_transformer_is():
    x = examples(4)
    changed = x.clone()
    changed[:, -1] = (changed[:, -1] + 1) % ICQA.vocab_size  # another final token
    for name, causal in (("attention_only", False), ("transformer", True)):
        model = single(name)
        before, after = model(x, read="all"), model(changed, read="all")
        assert torch.allclose(before[:, 0], after[:, 0]) == causal, name  # position 0 sees the last token iff not
        assert model.cfg.attention_dir == ("causal" if causal else "bidirectional")


def test_inputs_longer_than_the_context_are_one_clear_error():
    with pytest.raises(ValueError, match=r"inputs: 9 positions; this transformer model takes at most 8 \(cfg\.n_ctx"):
        single("transformer")(torch.zeros(2, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="attention_only model takes exactly 8"):
        single("attention_only")(torch.zeros(2, 6, dtype=torch.long))
    assert single("transformer")(torch.zeros(2, 5, dtype=torch.long)).shape == (2, ICQA.n_outputs)  # shorter: fine
    with pytest.raises(ValueError, match="built without its task"):
        SingleRunModel(build_model(MODELS["lstm"](name="lstm"), TaskShapes.of(ICQA), [0])).to_tokens("a")


def test_cfg_in_transformerlens_names():
    aon, tf, lstm = (single(name).cfg for name in ("attention_only", "transformer", "lstm"))
    assert (aon.n_layers, aon.d_model, aon.d_head, aon.n_heads, aon.heads_per_layer) == (2, WIDTH, WIDTH, 2, (1, 2))
    assert (aon.attention, aon.attn_scale, aon.use_attn_scale, aon.normalization_type) == ("relu", 1.0, False, None)
    assert (aon.n_ctx, aon.d_vocab, aon.d_vocab_out, aon.task) == (N, ICQA.vocab_size, ICQA.n_outputs, "icqa")
    assert (tf.d_head, tf.attn_scale, tf.d_mlp, tf.act_fn, tf.attention) == (8, 8**0.5, 64, "gelu", "softmax")
    assert (tf.normalization_type, tf.positional_embedding_type, tf.attn_only) == ("LN", "standard", False)
    assert (lstm.n_heads, lstm.attention, lstm.attention_dir, lstm.d_model) == (-1, None, "causal", 8)
    assert aon.to_dict()["read_out"] == "last" and not aon.default_prepend_bos


# ------------------------------------------------------------------------------------------ weights


def test_seed_001_qk_is_the_bilinear_form_and_ov_what_a_head_writes():
    """W_Q = W_QK, W_K = I, W_O = I/m: hook_q = x W_Q, hook_k = x W_K, score = x_q QK x_kᵀ, and the heads'
    pattern · x · OV add up to the layer's output."""
    model = single("attention_only")
    _, cache = model.run_with_cache(examples())
    for layer, attn in enumerate(model.blocks):
        attn = attn.attn
        x = cache["resid_pre", layer]  # [batch, pos, d']
        torch.testing.assert_close(cache["q", layer], torch.einsum("bpd,hde->bphe", x, attn.W_Q))
        torch.testing.assert_close(cache["k", layer], torch.einsum("bpd,hde->bphe", x, attn.W_K))
        scores = torch.einsum("bqd,hde,bke->bhqk", x, attn.QK.AB, x)
        torch.testing.assert_close(scores, cache["attn_scores", layer])
        torch.testing.assert_close(attn.QK.AB, attn.W_QK)  # the model's own W_QK, not a rescaled copy
        written = torch.einsum("bhqk,bkd,hde->bqe", cache["pattern", layer], x, attn.OV.AB)
        torch.testing.assert_close(written, cache["attn_out", layer])
    assert model.W_Q.shape == (2, 2, WIDTH, WIDTH) and not model.W_Q[0, 1].any()  # layer 0 padded with a zero head
    assert model.QK[1, 0].shape == (WIDTH, WIDTH) and model.OV.AB.shape == (2, 2, WIDTH, WIDTH)
    assert torch.equal(model.W_E, torch.eye(ICQA.vocab_size, WIDTH)) and model.W_pos.shape == (N, WIDTH)


def test_transformer_circuits_are_its_projections():
    model = single("transformer")
    attn = model.blocks[1].attn
    torch.testing.assert_close(attn.QK.AB, attn.W_Q @ attn.W_K.transpose(-1, -2))
    torch.testing.assert_close(model.OV.AB[1], attn.W_V @ attn.W_O)
    assert model.W_Q.shape == (2, 2, 16, 8) and model.W_O.shape == (2, 2, 8, 16) and model.W_pos.shape == (N, 16)
    u, s, v = model.QK[0, 1].svd()
    torch.testing.assert_close(u @ torch.diag_embed(s) @ v.transpose(-1, -2), model.QK[0, 1].AB)
    with pytest.raises(AttributeError):
        single("lstm").W_Q  # noqa: B018


# ------------------------------------------------------------------------------------------- cache


@pytest.mark.parametrize("name", ["attention_only", "transformer"])
def test_cache_helpers_add_up_to_the_stream(name):
    model = single(name)
    logits, cache = model.run_with_cache(examples())
    final = cache["resid_post", -1]
    parts, labels = cache.decompose_resid(return_labels=True)
    torch.testing.assert_close(parts.sum(0), final)
    expected = ["embed", "pos_embed", "0_attn_out", *(["0_mlp_out"] if name == "transformer" else []), "1_attn_out"]
    assert labels[: len(expected)] == expected
    stream, labels = cache.accumulated_resid(return_labels=True)
    assert labels == ["0_pre", "1_pre", "final_post"] and torch.equal(stream[-1], final)
    heads, labels = cache.stack_head_results(return_labels=True, incl_remainder=True)
    heads_of = model.cfg.heads_per_layer
    assert labels == [f"L{l}H{h}" for l, m in enumerate(heads_of) for h in range(m)] + ["remainder"]
    torch.testing.assert_close(heads.sum(0), final)
    by_layer = heads[: heads_of[0]].sum(0)
    attn_out = cache["attn_out", 0] - (model.blocks[0].attn.b_O if name == "transformer" else 0)
    torch.testing.assert_close(by_layer, attn_out)
    assert cache.decompose_resid(pos_slice=-1).shape == (len(parts), 5, model.cfg.d_model)
    if name == "attention_only":  # no norm, no bias: the attributions add up to the logits
        targets = torch.as_tensor(ICQA.sample(5, np.random.default_rng(0)).targets)
        attrs = cache.logit_attrs(parts[:, :, -1], targets, pos_slice=-1)  # the stack at the read-out position
        torch.testing.assert_close(attrs.sum(0), logits.gather(1, targets[:, None])[:, 0])
        label = ICQA.labels[int(targets[0])]
        torch.testing.assert_close(cache.logit_attrs(parts[:, :, -1], label, pos_slice=-1)[:, 0], attrs[:, 0])
    else:  # the final LayerNorm's scale divided out: the logit lens's last entry is the model's last stream, normed
        normed = cache.accumulated_resid(apply_ln=True)[-1]
        torch.testing.assert_close(normed[:, -1] @ model.W_U + model.b_U, logits)
    assert cache.to("cpu") is cache
    with pytest.raises(ValueError, match="one-run model"):
        build_model(model.spec, model.shapes, [0]).run_with_cache(examples()[None])[1].stack_head_results()


@pytest.mark.parametrize(("name", "fields"), [("linear_transformer", {"layers": 2, "heads": 2, "width": 16}),
                                             ("mamba", {"layers": 2, "width": 8})])
def test_the_recurrent_families_decompose_too(name, fields):
    spec = MODELS[name](name=name, **fields)
    model = SingleRunModel(build_model(spec, TaskShapes.of(ICQA), [0]).double(), ICQA)
    _, cache = model.run_with_cache(examples())
    parts, labels = cache.decompose_resid(return_labels=True)
    torch.testing.assert_close(parts.sum(0), cache["resid_post", -1])  # positions, mixers and MLPs: the whole stream
    assert labels == {"linear_transformer": ["embed", "pos_embed", "0_attn_out", "0_mlp_out", "1_attn_out",
                                             "1_mlp_out"],
                      "mamba": ["embed", "0_mixer_out", "1_mixer_out"]}[name]
    with pytest.raises(KeyError, match="not the LSTM"):
        single("lstm").run_with_cache(examples())[1].decompose_resid()


# ------------------------------------------------------------------------------------------- hooks


def test_add_hook_stays_until_reset_hooks_and_permanent_hooks_stay_longer():
    model = single("transformer")
    x = examples()
    clean = model(x)

    def uniform(pattern, hook):
        return torch.ones_like(pattern).tril() / torch.arange(1, N + 1, dtype=pattern.dtype)[:, None]

    model.add_hook("blocks.1.attn.hook_pattern", uniform)
    hooked = model(x)
    assert not torch.allclose(hooked, clean)
    torch.testing.assert_close(model(x), hooked)  # still attached
    model.reset_hooks()
    torch.testing.assert_close(model(x), clean)
    model.add_hook(lambda name: name == "blocks.1.attn.hook_pattern", uniform, is_permanent=True)
    model.reset_hooks()
    torch.testing.assert_close(model(x), hooked)  # a permanent hook survives reset_hooks() …
    model.reset_hooks(including_permanent=True)
    torch.testing.assert_close(model(x), clean)  # … but not this one
    with pytest.raises(ValueError, match=r"did you mean blocks\.1\.attn\.hook_pattern"):
        model.add_hook("blocks.1.attn.hook_patern", uniform)


@pytest.mark.parametrize("name", ["attention_only", "transformer"])
def test_backward_hooks_see_the_gradient_of_their_activation(name):
    model = single(name)
    x = examples()
    logits, cache = model.run_with_cache(x, detach=False)
    point = "blocks.1.hook_resid_pre"
    expected = torch.autograd.grad(logits[:, 0].sum(), cache[point])[0]
    seen, kept = [], {}

    def keep(activation, hook):
        activation.retain_grad()  # retain_grad in a forward hook, as TransformerLens users do
        kept["x"] = activation

    with model.hooks(fwd_hooks=[(point, keep)], bwd_hooks=[(point, lambda grad, hook: seen.append(grad))]):
        out = model(x)
    out[:, 0].sum().backward()  # after the block: the hook was attached to the forward pass's activation
    assert len(seen) == 1
    torch.testing.assert_close(seen[0], expected)
    torch.testing.assert_close(kept["x"].grad, expected)
    model.zero_grad()
    embed = []  # seed 001's embedding depends on no parameter; its gradient is still computed for a hook
    model.run_with_hooks(x, bwd_hooks=[("hook_embed", lambda grad, hook: embed.append(grad.shape))]).sum().backward()
    assert embed == [(5, N, model.cfg.d_model)]
    model.zero_grad()
    model.run_with_hooks(x, bwd_hooks=[(point, lambda grad, hook: torch.zeros_like(grad))]).sum().backward()
    assert not model.blocks[0].attn.W_V.grad.any()  # a returned gradient replaces it: nothing reaches layer 0
    assert not any(p.active for p in model.hook_dict.values())


# ------------------------------------------------------------------------------------------- picture


def test_return_type_loss_is_the_tasks_training_loss():
    """``model(x, return_type="loss", labels=y)`` as TransformerLens' ``return_type``: the engine's loss of the
    logits against the task's targets, a scalar that takes gradients; "both" gives (logits, loss); None nothing."""
    from depthlab.training.objectives import per_run_loss

    model = single("attention_only")
    batch = ICQA.sample(6, np.random.default_rng(1))
    x, y = torch.from_numpy(batch.inputs), torch.from_numpy(batch.targets)
    loss = model(x, return_type="loss", labels=y)
    assert loss.dim() == 0 and loss.requires_grad
    torch.testing.assert_close(loss.float(), per_run_loss(model(x)[None], y[None], ICQA.loss)[0])  # fp32 there
    logits, both = model(x, return_type="both", labels=y)
    assert torch.equal(logits, model(x)) and torch.equal(both, loss) and model(x, return_type=None) is None
    with pytest.raises(ValueError, match="give labels="):
        model(x, return_type="loss")
    with pytest.raises(ValueError, match="return_type: must be one of logits, loss, both, None"):
        model(x, return_type="probs")


def test_a_cache_prints_as_a_summary_not_its_tensors():
    model = single("attention_only")
    _, cache = model.run_with_cache(examples(2))
    text = repr(cache)
    assert "tensor(" not in text and str(cache) == text and len(text.splitlines()) == len(cache) + 1
    assert text.startswith(f"ActivationCache of {len(cache)} activations (attention_only)")
    assert "  blocks.1.attn.hook_pattern [2, 2, 8, 8]" in text.splitlines()


def test_a_figure_as_a_cells_last_line_shows_in_jupyter_without_a_magic():
    """IPython's display formatter (what Jupyter calls on a cell's last value) finds a PNG on depthlab's figures
    with no ``%matplotlib inline`` run first: before, it found only ``<StyledFigure size … with 3 Axes>``."""
    from IPython.core.formatters import DisplayFormatter

    from depthlab import draw

    model = single("attention_only")
    x = examples(1)
    fig = draw.attention(model.run_with_cache(x)[1], x)
    data, _ = DisplayFormatter().format(fig)
    assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n" and len(data["image/png"]) > 10_000


def test_one_call_draws_every_layer_and_head_of_a_cache():
    import sys

    from depthlab import draw

    assert depthlab.__getattr__("draw") is sys.modules["depthlab.draw"]  # depthlab.draw after `import depthlab`
    model = single("attention_only")
    x = examples(3)
    _, cache = model.run_with_cache(x)
    fig = draw.attention(cache, model.to_str_tokens(x[1]), batch=1)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images and ax.get_label() != "<colorbar>"]
    assert [ax.get_title() for ax in panels] == ["L0H0", "L1H0", "L1H1"]  # layer 0 has one head, layer 1 two
    assert [t.get_text() for t in panels[0].get_xticklabels()] == model.to_str_tokens(x[1])
    assert [t.get_text() for t in panels[2].get_yticklabels()] == model.to_str_tokens(x[1])
    np.testing.assert_allclose(panels[2].images[0].get_array(), cache["pattern", 1][1, 1].numpy())
    colorbars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(colorbars) == 1 and "relu" in colorbars[0].get_ylabel()
    largest = max(float(cache["pattern", layer][1].max()) for layer in range(2))
    assert panels[0].images[0].get_clim() == (0.0, pytest.approx(largest))  # one scale for every panel
    own = draw.attention(cache, x, shared_scale=False)  # token ids, read by the cache's model
    assert own.get_suptitle() == " ".join(model.to_str_tokens(x[0]))
    assert "max" in own.axes[0].get_title() and own.axes[0].images[0].get_clim() == (0.0, 1.0)
    with pytest.raises(ValueError, match="3 tokens for patterns over 8 positions"):
        draw.attention(cache, ["a", "b", "c"])
    with pytest.raises(ValueError, match="run axis"):
        draw.attention(build_model(model.spec, model.shapes, [0]).run_with_cache(x[None])[1])
