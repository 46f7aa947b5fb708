"""Seed 001's positive constructions (Theorems 1, 3, 5, 6): exactly right on every example, at several sizes."""

import numpy as np
import pytest
import torch

from depthlab.constructions import attention_only
from depthlab.constructions.registry import evaluate, make_task
from depthlab.models.attention_only import AttentionOnly

pytestmark = pytest.mark.usefixtures("one_thread")


def check(model, task, examples=3000, expect_exhaustive=True):
    result = evaluate(model, task, examples=examples, seed=1)
    assert result["exhaustive"] is expect_exhaustive
    assert result["accuracy"] == 1.0
    assert result["min_margin"] >= 1.0
    return result


@pytest.mark.parametrize("n_words,length,N", [(2, 1, 2), (4, 2, 16), (8, 3, 64), (10, 5, 300)])
def test_theorem1_memorization(n_words, length, N):
    task = make_task("memorization", n_words=n_words, length=length, n_examples=N)
    model = attention_only.memorization_model(task)
    n, d = task.seq_len, len(task.vocab)
    assert isinstance(model, AttentionOnly)
    assert model.layers == 1 and model.spec.heads_per_layer == [n] and model.width == max(n * d, d + n)
    check(model, task)


@pytest.mark.parametrize("k,n_q,n_a", [(1, 3, 3), (2, 2, 2), (2, 4, 3), (3, 4, 4), (4, 4, 4), (5, 5, 5)])
def test_theorem3_icqa_exhaustive(k, n_q, n_a):
    task = make_task("icqa", k=k, n_q=n_q, n_a=n_a)
    model = attention_only.icqa_model(task)
    assert model.layers == 2 and model.spec.heads_per_layer == [1, 1]
    assert model.width == len(task.vocab) + task.seq_len  # d' = d + n
    assert check(model, task)["examples"] == task.dataset_size()


@pytest.mark.parametrize("k", [6, 8])
def test_theorem3_icqa_large_k_sampled(k):
    task = make_task("icqa", k=k, n_q=12, n_a=10)
    check(attention_only.icqa_model(task), task, examples=2000, expect_exhaustive=False)


@pytest.mark.parametrize("l,n_symbols", [(1, 2), (2, 3), (3, 4), (4, 5), (5, 5), (6, 6)])
def test_theorem5_template_exhaustive(l, n_symbols):
    task = make_task("template", l=l, n_symbols=n_symbols, eval_fraction=0.0)
    model = attention_only.template_model(task)
    assert model.layers == 2 and model.spec.heads_per_layer == [1, 1]
    assert model.width == len(task.vocab) + task.seq_len + l
    result = check(model, task)
    assert result["examples"] == n_symbols**l  # every sequence over the alphabet belongs to one template


def test_theorem5_template_codes_distinct_up_to_l8():
    from depthlab.tasks.templates_common import all_templates

    for l in range(1, 9):
        codes = attention_only.template_codes(all_templates(l, l))
        assert len({tuple(c) for c in codes}) == len(codes)  # Bell(l) templates, Bell(l) codes


def test_theorem5_refuses_shared_labels():
    task = make_task("template", l=3, n_symbols=4, eval_fraction=0.0, n_classes=2)
    with pytest.raises(ValueError, match="n_classes"):
        attention_only.template_model(task)


@pytest.mark.parametrize("k,l,n_symbols,n_a,templates", [
    (1, 1, 2, 2, None), (2, 2, 4, 4, None), (2, 3, 3, 3, None), (3, 3, 3, 3, ["aaa", "aab", "abc"]),
])
def test_theorem6_ictm_exhaustive(k, l, n_symbols, n_a, templates):
    task = make_task("ictm", k=k, l=l, n_symbols=n_symbols, n_a=n_a, eval_fraction=0.0, templates=templates)
    model = attention_only.ictm_model(task)
    assert model.layers == 3 and model.spec.heads_per_layer == [1, 1, 2 * l]
    assert model.width == len(task.vocab) + task.seq_len + l + 2  # d' = d + n + l + 2
    check(model, task)


@pytest.mark.parametrize("k,l,n_symbols", [(4, 4, 6), (3, 5, 7), (2, 6, 8)])
def test_theorem6_ictm_larger_sampled(k, l, n_symbols):
    task = make_task("ictm", k=k, l=l, n_symbols=n_symbols, n_a=6, eval_fraction=0.0)
    check(attention_only.ictm_model(task), task, examples=1500, expect_exhaustive=False)


def test_theorem6_first_layer_is_the_trainers_initialisation():
    """Theorem 6's layer 1 is exactly ``block_parse_layer`` (the trainer's IC-TM first layer)."""
    task = make_task("ictm", k=2, l=3, n_symbols=4, n_a=3, eval_fraction=0.0)
    model = attention_only.ictm_model(task)
    d, n = len(task.vocab), task.seq_len
    w_qk, w_v = attention_only.block_parse_layer(task.k, task.l).build(d, n, model.width)
    assert torch.equal(model.param("blocks.0.attn.W_QK")[0, 0], w_qk.double())
    assert torch.equal(model.param("blocks.0.attn.W_V")[0, 0], w_v.double())
    assert attention_only.block_parse_layer(task.k, task.l).extra_width == model.width - d - n


def test_theorem3_first_layer_is_the_trainers_initialisation():
    task = make_task("icqa", k=3, n_q=4, n_a=4)
    model = attention_only.icqa_model(task)
    w_qk, w_v = attention_only.copy_layer(3).build(len(task.vocab), task.seq_len, model.width)
    assert torch.equal(model.param("blocks.0.attn.W_QK")[0, 0], w_qk.double())
    assert torch.equal(model.param("blocks.0.attn.W_V")[0, 0], w_v.double())


def test_constructions_are_ordinary_models():
    """They capture attention, accept overrides (ablations) and train like any model."""
    task = make_task("icqa", k=2, n_q=3, n_a=3)
    model = attention_only.icqa_model(task)
    batch = task.enumerate()
    x = torch.as_tensor(batch.inputs)[None]
    out = model(x, capture=True)
    assert [a.shape[2] for a in out.attentions] == [1, 1]
    # the copying head is essential: a uniform first layer breaks retrieval
    ablated = model(x, override={(0, 0): "uniform"}).outputs[0]
    assert (ablated.argmax(-1) == torch.as_tensor(batch.targets)).double().mean() < 1.0
    loss = torch.nn.functional.cross_entropy(out.outputs[0], torch.as_tensor(batch.targets))
    loss.backward()
    assert model.param("unembed.W_U").grad is not None


def test_paper_typos_documented_in_docstrings():
    for fn in (attention_only.template_model, attention_only.ictm_model):
        assert "Fixes to" in fn.__doc__


def test_ictm_layer1_template_rows():
    """After layer 1, symbol position o of a block holds row o of its template's equality matrix."""
    task = make_task("ictm", k=2, l=3, n_symbols=4, n_a=3, eval_fraction=0.0)
    model = attention_only.ictm_model(task)
    batch = task.sample(50, np.random.default_rng(0), "all")
    d, n = len(task.vocab), task.seq_len
    with torch.no_grad():
        h = model.residual_stream(torch.as_tensor(batch.inputs)[None])
        after = model.blocks[0](h)
    free = after[0, :, :, d + n : d + n + task.l]  # [B, n, l]
    for b in range(len(batch)):
        for block in range(task.k + 1):
            x = batch.inputs[b, block * (task.l + 2) : block * (task.l + 2) + task.l]
            expected = (x[:, None] == x[None, :]).astype(float)
            got = free[b, block * (task.l + 2) : block * (task.l + 2) + task.l].numpy()
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("k,hops,n_symbols,shuffle", [
    (1, 1, 2, True), (1, 3, 4, False), (2, 2, 6, True), (3, 1, 6, True),
])  # the registry's default (k = 2, 3 hops, 8 symbols: 80,640 sequences) is checked in the CLI test
@pytest.mark.parametrize("depth", ["paper", "compact"])
def test_seed001_section7_nested_icqa_exhaustive(k, hops, n_symbols, shuffle, depth):
    task = make_task("nested_icqa", k=k, hops=hops, n_symbols=n_symbols, shuffle=shuffle)
    model = attention_only.nested_icqa_model(task, depth)
    layers = 2 * hops if depth == "paper" else hops + 1  # §7: 6 layers for 3 hops
    assert model.layers == layers and model.spec.heads_per_layer == [1] * layers
    assert check(model, task)["examples"] == task.dataset_size()


def test_seed001_section7_nested_icqa_one_hop_fewer_fails():
    """The pointer really moves one link per match layer: a model cut after hops-1 matches answers the symbol
    one link short of the end (accuracy 0 on every sequence)."""
    task = make_task("nested_icqa", k=2, hops=2, n_symbols=6)
    model = attention_only.nested_icqa_model(task, "compact")  # layers: copy, match, match
    batch = task.enumerate("all")
    cut = torch.nn.ModuleList(list(model.blocks)[:2])
    full = model.blocks
    model.blocks = cut
    try:
        logits = model(torch.as_tensor(batch.inputs)[None]).outputs[0]
    finally:
        model.blocks = full
    predicted = logits.argmax(-1).numpy()
    first_link = np.argmax(batch.inputs[:, 0:-2:3] == batch.inputs[:, -2:-1], 1)  # the link leaving the query
    middle = batch.inputs[np.arange(len(batch)), 3 * first_link + 2]
    assert (predicted == middle).all() and (predicted != batch.targets).all()


def test_seed001_section7_nested_icqa_refuses_an_unknown_depth():
    task = make_task("nested_icqa", k=1, hops=1, n_symbols=2)
    with pytest.raises(ValueError, match="depth"):
        attention_only.nested_icqa_model(task, "deep")
