"""Seed 001's positive constructions (Theorems 1, 3, 5, 6): exactly right on every example, at several sizes."""

import numpy as np
import pytest
import torch

from depthlab.config import parse_run
from depthlab.constructions import attention_only
from depthlab.constructions.registry import EXHAUSTIVE_LIMIT, evaluate, make_task
from depthlab.models import TaskShapes, build_model
from depthlab.models.attention_only import AttentionOnly


def check(model, task, margin, examples=3000, expect_exhaustive=True):
    """Right on every example, with the smallest logit margin the theorem's proof gives, exactly (the forward pass is
    exact in float64: a construction off by a cross-talk term keeps its accuracy but not its margin). The examples
    are those ``registry.evaluate`` scores: every one when the dataset is small, else ``examples`` drawn with seed 1.
    Returns them and the model's logits on them."""
    exhaustive = task.dataset_size("all") <= EXHAUSTIVE_LIMIT
    assert exhaustive is expect_exhaustive
    batch = task.enumerate("all") if exhaustive else task.sample(examples, np.random.default_rng(1), "all")
    with torch.no_grad():
        logits = torch.cat([model(torch.as_tensor(batch.inputs[i : i + 4096])[None]).outputs[0]
                            for i in range(0, len(batch), 4096)])
    targets = torch.as_tensor(batch.targets)
    assert torch.equal(logits.argmax(-1), targets)
    target = logits.gather(1, targets[:, None])[:, 0]
    rival = logits.scatter(1, targets[:, None], float("-inf")).amax(-1)
    smallest = float((target - rival).min())
    assert smallest == margin, f"smallest logit margin {smallest}, the proof gives {margin}"
    return batch, logits


def test_the_registry_reports_the_margin_and_accuracy_the_logits_give():
    task = make_task("icqa", k=2, n_q=4, n_a=3)
    model = attention_only.icqa_model(task)
    result = evaluate(model, task, seed=1)
    batch, _ = check(model, task, margin=3.0)
    assert result == {"examples": len(batch), "exhaustive": True, "accuracy": 1.0, "min_margin": 3.0}


def one_hot(targets, classes):
    return torch.nn.functional.one_hot(torch.as_tensor(targets), classes).double()


@pytest.mark.parametrize("n_words,length,N", [(2, 1, 2), (4, 2, 16), (8, 3, 64), (10, 5, 300)])
def test_theorem1_memorization(n_words, length, N):
    task = make_task("memorization", n_words=n_words, length=length, n_examples=N)
    model = attention_only.memorization_model(task)
    n, d = task.seq_len, len(task.vocab)
    assert isinstance(model, AttentionOnly)
    assert model.layers == 1 and model.spec.heads_per_layer == [n] and model.width == max(n * d, d + n)
    # Lemma 3's matched filter: the logit of sequence t's label on sequence s is the number of positions where the
    # two agree (n-1 for its own), so the margin is n-1 minus the closest other sequence's agreement
    words = task.dataset.inputs[:, : n - 1]
    agree = (words[:, None, :] == words[None, :, :]).sum(-1)
    closest = np.where(np.eye(len(words), dtype=bool), -1, agree).max(1)
    batch, logits = check(model, task, margin=float((n - 1 - closest).min()))
    assert np.array_equal(batch.inputs, task.dataset.inputs)
    assert torch.equal(logits[:, torch.as_tensor(batch.targets)], torch.as_tensor(agree, dtype=torch.float64))


@pytest.mark.parametrize("k,n_q,n_a", [(1, 3, 3), (2, 2, 2), (2, 4, 3), (3, 4, 4), (4, 4, 4), (5, 5, 5)])
def test_theorem3_icqa_exhaustive(k, n_q, n_a):
    task = make_task("icqa", k=k, n_q=n_q, n_a=n_a)
    model = attention_only.icqa_model(task)
    assert model.layers == 2 and model.spec.heads_per_layer == [1, 1]
    assert model.width == len(task.vocab) + task.seq_len  # d' = d + n
    batch, logits = check(model, task, margin=3.0)
    assert len(batch) == task.dataset_size()
    # §13.2: the last position gains 3·a_c (the three positions of the matching block) and nothing else
    assert torch.equal(logits, 3.0 * one_hot(batch.targets, len(task.labels)))


@pytest.mark.parametrize("k", [6, 8])
def test_theorem3_icqa_large_k_sampled(k):
    task = make_task("icqa", k=k, n_q=12, n_a=10)
    model = attention_only.icqa_model(task)
    batch, logits = check(model, task, margin=3.0, examples=2000, expect_exhaustive=False)
    assert torch.equal(logits, 3.0 * one_hot(batch.targets, len(task.labels)))


@pytest.mark.parametrize("l,n_symbols", [(1, 2), (2, 3), (3, 4), (4, 5), (5, 5), (6, 6)])
def test_theorem5_template_exhaustive(l, n_symbols):
    task = make_task("template", l=l, n_symbols=n_symbols, eval_fraction=0.0)
    model = attention_only.template_model(task)
    assert model.layers == 2 and model.spec.heads_per_layer == [1, 1]
    assert model.width == len(task.vocab) + task.seq_len + l
    # the proof's logits: template t scores 2·u·u_t - |u_t|², u_t the base-3 rows of t's equality matrix, so the
    # margin is the smallest squared distance between two templates' codes
    powers = 3 ** np.arange(l - 1, -1, -1)
    rows = task.template_rows
    codes = (rows[:, :, None] == rows[:, None, :]) @ powers  # [T, l]
    gaps = ((codes[:, None] - codes[None]) ** 2).sum(-1) + np.eye(len(codes), dtype=int) * 10**9
    batch, logits = check(model, task, margin=float(gaps.min()) if len(codes) > 1 else float("inf"))  # 1: no rival
    assert len(batch) == n_symbols**l  # every sequence over the alphabet belongs to one template
    x = batch.inputs[:, :l]
    u = (x[:, :, None] == x[:, None, :]) @ powers  # [B, l]
    expected = torch.as_tensor(2 * u @ codes.T - (codes**2).sum(1), dtype=torch.float64)
    assert torch.equal(logits[:, torch.as_tensor(task.template_labels)], expected)



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
    check_ictm(model, task)


def check_ictm(model, task, **kw):
    """§15's proof: logit 1 for the right answer (the one block with the query's template), ≤ 0 for every other."""
    batch, logits = check(model, task, margin=1.0, **kw)
    assert (logits.gather(1, torch.as_tensor(batch.targets)[:, None]) == 1.0).all()


@pytest.mark.parametrize("k,l,n_symbols", [(4, 4, 6), (3, 5, 7), (2, 6, 8)])
def test_theorem6_ictm_larger_sampled(k, l, n_symbols):
    task = make_task("ictm", k=k, l=l, n_symbols=n_symbols, n_a=6, eval_fraction=0.0)
    check_ictm(attention_only.ictm_model(task), task, examples=1500, expect_exhaustive=False)


def layer1(source, task_fields, model):
    """Layer 1 of Theorem ``model``'s construction, or of the trainer's §9.1 initialisation of a model of the same
    depth (``init: paper`` with its random W_QK scaled down to 1e-9, so the constructed pattern is all that acts)."""
    task = make_task(**task_fields)
    built = getattr(attention_only, model)(task)
    if source == "construction":
        return task, built
    config = parse_run({"task": task_fields, "model": {"name": "attention_only", "layers": built.layers,
                                                       "heads": built.spec.heads, "attention": "relu", "init": "paper",
                                                       "qk_scale": 1e-9}})
    return task, build_model(config.model, TaskShapes.of(config.task), [0]).double()


def after_layer1(model, inputs):
    with torch.no_grad():
        return model.blocks[0](model.residual_stream(torch.as_tensor(inputs)[None]))[0]


@pytest.mark.parametrize("source", ["construction", "trainer"])
def test_theorem3_first_layer_copies_each_block_into_its_positions(source):
    """§13.2 "copy among Q-A block": after layer 1 every position of block b holds q_b + r + a_b on the token
    coordinates, and both final positions hold q_c + r, in the construction and in the trainer's initialisation."""
    task, model = layer1(source, {"name": "icqa", "k": 3, "n_q": 4, "n_a": 4}, "icqa_model")
    batch = task.sample(200, np.random.default_rng(0), "all")
    d, k = len(task.vocab), task.k
    tokens = np.eye(d)[batch.inputs]  # [B, n, d]
    blocks = [tokens[:, 3 * b : 3 * b + 3].sum(1, keepdims=True).repeat(3, 1) for b in range(k)]
    blocks.append(tokens[:, 3 * k :].sum(1, keepdims=True).repeat(2, 1))
    expected = torch.as_tensor(np.concatenate(blocks, 1))
    torch.testing.assert_close(after_layer1(model, batch.inputs)[..., :d], expected, rtol=0, atol=1e-6)


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


@pytest.mark.parametrize("source", ["construction", "trainer"])
def test_ictm_layer1_template_rows(source):
    """§15 parse: after layer 1, symbol position o of a block holds row o of its template's equality matrix, in
    Theorem 6's construction and in the trainer's initialisation."""
    task, model = layer1(source, {"name": "ictm", "k": 2, "l": 3, "n_symbols": 4, "n_a": 3, "eval_fraction": 0.0},
                         "ictm_model")
    batch = task.sample(50, np.random.default_rng(0), "all")
    d, n = len(task.vocab), task.seq_len
    free = after_layer1(model, batch.inputs)[:, :, d + n : d + n + task.l]  # [B, n, l]
    for b in range(len(batch)):
        for block in range(task.k + 1):
            x = batch.inputs[b, block * (task.l + 2) : block * (task.l + 2) + task.l]
            expected = torch.as_tensor((x[:, None] == x[None, :]).astype(float))
            got = free[b, block * (task.l + 2) : block * (task.l + 2) + task.l]
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("k,hops,n_symbols,shuffle", [
    (1, 1, 2, True), (1, 3, 4, False), (2, 2, 6, True), (3, 1, 6, True),
])  # the registry's default (k = 2, 3 hops, 8 symbols: 80,640 sequences) is checked in the CLI test
@pytest.mark.parametrize("depth", ["paper", "compact"])
def test_seed001_section7_nested_icqa_exhaustive(k, hops, n_symbols, shuffle, depth):
    task = make_task("nested_icqa", k=k, hops=hops, n_symbols=n_symbols, shuffle=shuffle)
    model = attention_only.nested_icqa_model(task, depth)
    layers = 2 * hops if depth == "paper" else hops + 1  # §7: 6 layers for 3 hops
    assert model.layers == layers and model.spec.heads_per_layer == [1] * layers
    batch, logits = check(model, task, margin=1.0)
    assert len(batch) == task.dataset_size()
    assert torch.equal(logits, one_hot(batch.targets, len(task.labels)))  # PTR read out: 1 for the answer, 0 elsewhere



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
