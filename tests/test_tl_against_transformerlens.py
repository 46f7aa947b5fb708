"""depthlab's TransformerLens-style helpers against TransformerLens itself, on exported models.

A run of each exportable family (seed 002's GPT-style transformer with its MLP and random LayerNorm gains, seed
001's ReLU attention-only model) is exported (``depthlab export --to transformerlens``) and loaded in
TransformerLens 4.x; then every helper that both libraries have is called on both with the same arguments:
logits at every position, the cache's indexing and helpers, the weight views and their factored circuits,
``add_hook`` / ``reset_hooks``, backward hooks, and the tokenizer calls (TransformerLens given a word-level
tokenizer of the task's vocabulary).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from depthlab.config import parse_run
from depthlab.induction import tl
from depthlab.models import FactoredMatrix, SingleRunModel, TaskShapes, build_model
from depthlab.models.export import transformerlens_export, write_export

# skipped without TransformerLens, which is imported by the tests that use it, not at collection (2 s in every
# pytest-xdist worker)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformer_lens") is None,
                                reason="transformer_lens is not installed")

TASK = {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4}
MODELS = {
    "transformer": {"name": "transformer", "layers": 2, "heads": 2, "width": 16, "mlp": True},
    "attention_only": {"name": "attention_only", "layers": 2, "heads": 2, "attention": "relu", "init": "random"},
}
CLOSE = {"rtol": 1e-4, "atol": 1e-4}


@dataclass
class Pair:
    ours: SingleRunModel
    theirs: Any  # transformer_lens TransformerBridge
    tokens: torch.Tensor
    width: int


@pytest.fixture(scope="module", params=list(MODELS))
def pair(request, tmp_path_factory) -> Pair:
    config = parse_run({"task": TASK, "model": MODELS[request.param], "train": {"steps": 1}})
    net = build_model(config.model, TaskShapes.of(config.task), [0])
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every weight random, LayerNorm gains and biases too
        for p in net.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    folder = tmp_path_factory.mktemp("export")
    write_export(*transformerlens_export(net, {"run": "r0"}, config.task), folder)
    theirs = tl.load_folder(folder).model
    tokens = torch.from_numpy(config.task.sample(5, np.random.default_rng(0)).inputs)
    return Pair(SingleRunModel(net, config.task).eval(), theirs, tokens, net.cfg.d_model)


def close(mine: torch.Tensor, other: torch.Tensor, msg: str = "") -> None:
    torch.testing.assert_close(mine, other.to(mine.dtype), **CLOSE, msg=msg)


def test_logits_at_every_position(pair):
    close(pair.ours(pair.tokens, read="all"), pair.theirs(pair.tokens), "logits")


def test_cache_helpers_equal_transformerlens(pair):
    _, ours = pair.ours.run_with_cache(pair.tokens)
    _, theirs = pair.theirs.run_with_cache(pair.tokens)
    close(ours["pattern", -1], theirs["pattern", -1])
    targets = pair.tokens[:, 0] % pair.ours.cfg.d_vocab_out  # any labels, one per example
    calls = {
        "accumulated_resid": {"return_labels": True},
        "accumulated_resid ln": {"return_labels": True, "apply_ln": True},
        "accumulated_resid mid": {"return_labels": True, "incl_mid": pair.ours.cfg.d_mlp is not None, "layer": 1,
                                  "pos_slice": -1},  # resid_mid where a block has one (between attention and MLP)
        "decompose_resid": {"return_labels": True},
        "decompose_resid ln": {"return_labels": True, "apply_ln": True, "pos_slice": (2, 6)},
        "decompose_resid attn": {"return_labels": True, "mode": "attn", "layer": 1, "mlp_input": True},
        "stack_head_results": {"return_labels": True, "incl_remainder": True},
        "stack_head_results ln": {"return_labels": True, "apply_ln": True, "layer": 1},
    }
    for name, kwargs in calls.items():
        call = name.split()[0]
        (mine, labels), (other, their_labels) = getattr(ours, call)(**kwargs), getattr(theirs, call)(**kwargs)
        assert labels == their_labels, name
        close(mine, other, name)
    stack = ours.decompose_resid()
    close(ours.logit_attrs(stack, targets), theirs.logit_attrs(theirs.decompose_resid(), targets), "logit_attrs")
    wrong = (targets + 1) % pair.ours.cfg.d_vocab_out
    close(ours.logit_attrs(stack[:, :, -1], targets, wrong, pos_slice=-1),
          theirs.logit_attrs(theirs.decompose_resid()[:, :, -1], targets, wrong, pos_slice=-1), "logit_attrs diff")


def test_weights_and_circuits_equal_transformerlens(pair):
    ours, theirs = pair.ours, pair.theirs
    # seed 001's export writes W_Q = √d_head · W_QK (TransformerLens divides its scores by √d_head): depthlab's
    # QK is the model's own bilinear form, TransformerLens' the same form times √d_head
    scale = pair.width**0.5 if ours.cfg.model_name == "attention_only" else 1.0
    for name in ("W_Q", "W_K", "W_V", "W_O", "W_E", "W_pos", "W_U"):
        mine, other = getattr(ours, name), getattr(theirs, name)
        close(mine * (scale if name == "W_Q" else 1.0), other, name)
    close(ours.QK.AB * scale, theirs.QK.AB, "QK")
    close(ours.OV.AB, theirs.OV.AB, "OV")
    shared = ("n_layers", "n_heads", "d_head", "d_model", "attn_only", "n_ctx", "d_vocab", "d_vocab_out",
              "attention_dir", "normalization_type", *(() if ours.cfg.attn_only else ("d_mlp", "act_fn")))
    assert {f: getattr(ours.cfg, f) for f in shared} == {f: getattr(theirs.cfg, f) for f in shared}


def test_hooks_act_as_in_transformerlens(pair):
    ours, theirs = pair.ours, pair.theirs

    def first_head_uniform(pattern, hook):
        pattern = pattern.clone()
        pattern[:, 0] = 1.0 / pattern.shape[-1]
        return pattern

    for model in (ours, theirs):
        model.add_hook("blocks.1.attn.hook_pattern", first_head_uniform)
    close(ours(pair.tokens, read="all"), theirs(pair.tokens), "add_hook")
    for model in (ours, theirs):
        model.reset_hooks()  # the loader's permanent ReLU hooks stay on TransformerLens' model
    close(ours(pair.tokens, read="all"), theirs(pair.tokens), "reset_hooks")

    grads: dict[str, torch.Tensor] = {}
    for label, model in (("ours", ours), ("theirs", theirs)):
        def keep(grad, hook, label=label):
            grads[label] = grad.detach().clone()

        model.add_hook("blocks.0.hook_resid_post", keep, dir="bwd")
        logits = model(pair.tokens, read="all") if label == "ours" else model(pair.tokens)
        logits[:, -1].logsumexp(-1).sum().backward()
        model.reset_hooks()
        model.zero_grad()
    close(grads["ours"], grads["theirs"], "backward hook")


def test_tokenizer_calls_on_the_export_equal_depthlabs(pair):
    """The export carries the task's vocabulary and the loader builds the tokenizer from it (issue 46: the exported
    model had none); no beginning-of-sequence token is prepended by default, as no task has one."""
    vocab = pair.ours.task.vocab
    text = pair.ours.to_string(pair.tokens[0])
    texts = pair.ours.to_string(pair.tokens[:2])
    assert torch.equal(pair.ours.to_tokens(text), pair.theirs.to_tokens(text))
    assert torch.equal(pair.ours.to_tokens(texts), pair.theirs.to_tokens(texts))
    assert pair.ours.to_str_tokens(text) == pair.theirs.to_str_tokens(text)
    assert pair.ours.to_str_tokens(pair.tokens[0]) == pair.theirs.to_str_tokens(pair.tokens[0])
    assert pair.ours.to_str_tokens(texts) == pair.theirs.to_str_tokens(texts)
    assert texts == pair.theirs.to_string(pair.tokens[:2]) and text == pair.theirs.to_string(pair.tokens[0])
    assert pair.ours.to_single_token(vocab[3]) == pair.theirs.to_single_token(vocab[3])
    close(pair.ours(text, read="all"), pair.theirs(text), "text input")
    with pytest.raises(Exception, match=r"UNK|unk"):  # a word outside the vocabulary is refused, not guessed
        pair.theirs.to_tokens("no-such-token")


def test_attention_scores_mean_the_same_in_the_export(pair):
    """``hook_attn_scores`` holds q·k / √d_head (−∞ behind a causal mask) on both sides: before, the export's held
    the pattern (ReLU'd for seed 001, softmax for the transformer), up to 1.36 away from depthlab's scores."""
    _, ours = pair.ours.run_with_cache(pair.tokens)
    _, theirs = pair.theirs.run_with_cache(pair.tokens)
    for layer in range(pair.ours.cfg.n_layers):
        close(ours["attn_scores", layer], theirs["attn_scores", layer], f"layer {layer}")
        assert (ours["attn_scores", layer] < 0).any()  # scores, not a pattern (which is never negative)
    close(pair.ours(pair.tokens, read="all"), pair.theirs(pair.tokens), "the logits stay TransformerLens' own")


def test_factored_matrix_equals_transformerlens():
    from transformer_lens.FactoredMatrix import FactoredMatrix as TLFactoredMatrix

    gen = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    a, b, c, d = randn(2, 3, 6, 4), randn(3, 4, 5), randn(5, 3), randn(3, 2)
    ours, theirs = FactoredMatrix(a, b), TLFactoredMatrix(a, b)
    square, their_square = FactoredMatrix(a, a.transpose(-1, -2)), TLFactoredMatrix(a, a.transpose(-1, -2))
    vector, matrix, left = randn(5), randn(5, 7), randn(6)
    assert ours.shape == theirs.shape and (ours.ldim, ours.mdim, ours.rdim) == (theirs.ldim, theirs.mdim, theirs.rdim)
    checks = {
        "AB": (ours.AB, theirs.AB), "T": (ours.T.AB, theirs.T.AB), "S": (ours.S, theirs.S),
        "norm": (ours.norm(), theirs.norm()), "@ vector": (ours @ vector, theirs @ vector),
        "@ matrix": ((ours @ matrix).AB, (theirs @ matrix).AB), "vector @": (left @ ours, left @ theirs),
        "@ factored": ((ours @ FactoredMatrix(c, d)).AB, (theirs @ TLFactoredMatrix(c, d)).AB),
        "* 3": ((ours * 3).AB, (theirs * 3).AB), "[1, 2]": (ours[1, 2].AB, theirs[1, 2].AB),
        "svd": (ours.U @ torch.diag_embed(ours.S) @ ours.V.transpose(-1, -2), theirs.AB),
        "BA": (square.BA, their_square.BA), "eigenvalues": (square.eigenvalues, their_square.eigenvalues),
    }
    for name, (mine, other) in checks.items():
        torch.testing.assert_close(mine, other, msg=name)


def test_kept_cache_takes_gradients_at_every_point_as_transformerlens(pair):
    """``run_with_cache(detach=False)``: the gradient of a function of the logits with respect to a cached
    activation, at points that depend on no trained weight in seed 001's model (the one-hot embeddings, the first
    residual stream, the first layer's keys), equals TransformerLens' on the export (there, each activation made a
    leaf by a forward hook, one point per forward pass: TransformerLens' own cache is always detached, and its
    backward hooks miss the keys and queries that the ReLU hooks read)."""
    names = ["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre", "blocks.0.attn.hook_k",
             "blocks.1.attn.hook_q"]
    logits, cache = pair.ours.run_with_cache(pair.tokens, detach=False, read="all")
    ours = torch.autograd.grad(logits[:, -1].logsumexp(-1).sum(), [cache[name] for name in names])

    def their_gradient(name: str) -> torch.Tensor:
        kept: list[torch.Tensor] = []

        def as_leaf(activation: torch.Tensor, hook: Any) -> torch.Tensor:
            kept.append(activation.detach().requires_grad_())
            return kept[-1]

        pair.theirs.hook_dict[name].add_hook(as_leaf, prepend=True)  # before the loader's ReLU hooks read it
        try:
            their_logits = pair.theirs(pair.tokens)
        finally:
            pair.theirs.reset_hooks()
        return torch.autograd.grad(their_logits[:, -1].logsumexp(-1).sum(), kept)[0]

    q_scale = pair.width**0.5 if pair.ours.cfg.model_name == "attention_only" else 1.0  # the export's q is √d' ours
    for name, mine in zip(names, ours, strict=True):
        close(mine, their_gradient(name) * (q_scale if name.endswith("hook_q") else 1.0), name)
