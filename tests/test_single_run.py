"""One run as a model of its own (``Store.load_model``, ``models.SingleRunModel``): the stacked model's logits,
cache and hooks for that run, without the run axis, under TransformerLens' names and shapes."""

from __future__ import annotations

import pytest
import torch

import depthlab
from depthlab.config import parse_run
from depthlab.errors import UserError
from depthlab.models import MODELS, SingleRunModel, TaskShapes, build_model

SHAPES = TaskShapes(vocab_size=9, seq_len=7, n_classes=5)
RUNS, PICK = 3, 1  # a stacked model of three runs, and the run looked at alone
FAMILIES = {
    "attention_only": {"layers": 2, "heads": [2, 3], "init": "random", "attention": "relu"},
    "transformer": {"layers": 2, "heads": 2, "width": 16, "positional": "rotary"},
    "retnet": {"layers": 2, "heads": 2, "width": 16},
    "mamba": {"layers": 1, "width": 8, "d_state": 3},
    "lstm": {"layers": 2, "width": 8},
}


def stacked_and_single(name: str) -> tuple[torch.nn.Module, SingleRunModel]:
    spec = MODELS[name](name=name, **FAMILIES[name])
    stacked = build_model(spec, SHAPES, range(RUNS)).double().eval()
    one = build_model(spec, SHAPES, [PICK]).double()
    one.load_run_state_dict(0, stacked.run_state_dict(PICK))
    return stacked, SingleRunModel(one).eval()


def tokens(batch: int = 4) -> torch.Tensor:
    return torch.randint(0, SHAPES.vocab_size, (batch, SHAPES.seq_len), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_logits_and_cache_are_the_stacked_model_s_for_that_run(name):
    stacked, single = stacked_and_single(name)
    x = tokens()
    stacked_logits, stacked_cache = stacked.run_with_cache(x.expand(RUNS, -1, -1))
    logits, cache = single.run_with_cache(x)
    torch.testing.assert_close(single(x), stacked_logits[PICK])
    torch.testing.assert_close(logits, stacked_logits[PICK])
    assert list(cache) == list(stacked_cache) and set(cache) <= set(single.hook_names)
    for hook, activation in cache.items():
        torch.testing.assert_close(activation, stacked_cache[hook][PICK], msg=hook)


@pytest.mark.parametrize("name", ["attention_only", "transformer"])
def test_a_hook_that_replaces_a_pattern_acts_as_on_the_stacked_model(name):
    stacked, single = stacked_and_single(name)
    x = tokens()
    seen = []

    def one_run(pattern, hook):  # TransformerLens' shape: [batch, head, query, key]
        seen.append(tuple(pattern.shape))
        pattern = pattern.clone()
        pattern[:, 1] = 1.0 / pattern.shape[-1]
        return pattern

    def every_run(pattern, hook):  # the stacked model's: [runs, batch, head, query, key]
        pattern = pattern.clone()
        pattern[:, :, 1] = 1.0 / pattern.shape[-1]
        return pattern

    ablated = single.run_with_hooks(x, fwd_hooks=[("blocks.1.attn.hook_pattern", one_run)])
    expected = stacked.run_with_hooks(x.expand(RUNS, -1, -1), fwd_hooks=[("blocks.1.attn.hook_pattern", every_run)])
    torch.testing.assert_close(ablated, expected[PICK])
    assert not torch.allclose(ablated, single(x))  # the hook changed the answer …
    assert seen == [(4, 3 if name == "attention_only" else 2, SHAPES.seq_len, SHAPES.seq_len)]
    assert not any(point.active for point in single.hook_dict.values())  # … and is gone afterwards


def test_transformerlens_names_and_shapes_and_gradients():
    stacked, single = stacked_and_single("transformer")
    state = single.state_dict()
    assert list(state) == [name for name, _ in stacked.named_parameters()]
    for name, value in state.items():
        assert value.shape == stacked.get_parameter(name).shape[1:], name
        torch.testing.assert_close(value, stacked.get_parameter(name)[PICK])
    assert state["embed.W_E"].shape == (9, 16) and state["blocks.0.attn.W_Q"].shape == (2, 16, 8)
    assert single.blocks[0].attn.W_O.shape == (2, 8, 16) and state["unembed.W_U"].shape == (16, 5)
    single.requires_grad_(True)
    single(tokens()).sum().backward()
    assert single.unembed.W_U.grad.shape == (16, 5)  # trainable as a plain module
    with pytest.raises(ValueError, match=r"\[batch, n\] token ids"):
        single(tokens()[0])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two runs trained as one group, keeping the weights of step 10."""
    root = tmp_path_factory.mktemp("single") / "store"
    config = {"task": {"name": "memorization", "n_words": 4, "length": 2, "n_examples": 8},
              "model": {"name": "attention_only", "layers": 2, "qk_scale": 0.01},
              "train": {"optimizer": "adamw", "lr": 0.01, "steps": 20, "eval_every": 10, "batch_size": 8,
                        "checkpoint_every": 10, "keep_checkpoints": True},
              "sweep": {"seed": [0, 1]}}
    results = depthlab.sweep(config, store=root, group_size=2)
    return depthlab.Store(root), results, config


def test_load_model_gives_the_engine_s_stacked_model_for_that_run(trained):
    store, results, config = trained
    run = parse_run({section: value for section, value in config.items() if section != "sweep"})
    stacked = build_model(run.model, TaskShapes.of(run.task), [0, 1]).eval()
    for r, result in enumerate(results):  # the group's model, each run's trained weights in its place
        stacked.load_run_state_dict(r, dict(store.load_model(result.id).state_dict()))
    batch = run.task.enumerate()
    x = torch.from_numpy(batch.inputs)
    with torch.no_grad():
        expected = stacked(x.expand(2, -1, -1)).outputs
        for r, result in enumerate(results):
            model = store.load_model(result.id[:7])  # an id prefix names the run
            torch.testing.assert_close(model(batch.inputs), expected[r])
            accuracy = (model(x).argmax(-1) == torch.from_numpy(batch.targets)).float().mean().item()
            assert accuracy == pytest.approx(result.metrics["accuracy"])  # what the engine measured


def test_load_model_at_a_kept_step(trained):
    from safetensors.torch import load_file

    store, results, _ = trained
    run_id = results[0].id
    early = store.load_model(run_id, step=10)
    kept = load_file(store.run_folder(run_id) / "history" / "step-0000010.safetensors")
    for name, value in early.state_dict().items():
        torch.testing.assert_close(value, kept[name])
    last = store.load_model(run_id, step=20)
    assert all(torch.equal(a, b) for a, b in zip(last.state_dict().values(), store.load_model(run_id).state_dict()
                                                 .values(), strict=True))
    assert not torch.equal(early.unembed.W_U, last.unembed.W_U)
    with pytest.raises(UserError, match="has weights at steps 10, 20"):
        store.load_model(run_id, step=15)


def test_a_loaded_model_takes_gradients_and_trains_on(trained):
    store, results, _ = trained
    model = store.load_model(results[0].id)
    assert all(p.requires_grad for p in model.parameters()) and model.task.name == "memorization"
    batch = model.task.enumerate()
    x, y = torch.from_numpy(batch.inputs), torch.from_numpy(batch.targets)
    logits, cache = model.run_with_cache(x, detach=False)
    loss = torch.nn.functional.cross_entropy(logits, y)
    pattern_grad, = torch.autograd.grad(loss, cache["pattern", 0], retain_graph=True)
    assert pattern_grad.shape == cache["pattern", 0].shape and pattern_grad.abs().sum() > 0
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)  # as the run trained
    losses = []
    for _ in range(5):  # training on from the trained weights lowers the loss further
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    frozen = store.load_model(results[0].id, requires_grad=False)
    assert not any(p.requires_grad for p in frozen.parameters()) and not frozen(x).requires_grad


def test_attention_command_draws_a_run_on_given_tokens(trained, depthlab_main):
    import json

    store, results, _ = trained
    run_id, root = results[0].id, str(store.root)
    code, out, err = depthlab_main("attention", run_id[:8], "--tokens", "a c -> _5", "--store", root, "--json")
    assert code == 0, err
    shown = json.loads(out)
    model = store.load_model(run_id)
    _, cache = model.run_with_cache("a c →")
    assert shown["tokens"] == ["a", "c", "→"] and shown["target"] == "5" and len(shown["patterns"]) == 2
    for layer, pattern in enumerate(shown["patterns"]):  # [layer][head][query][key], the model's own
        torch.testing.assert_close(torch.tensor(pattern), cache["pattern", layer][0])
    assert shown["prediction"] == model.task.labels[int(model("a c →").argmax())]
    assert shown["figure"].endswith("attention-tokens.png") and (store.root / shown["figure"]).is_file()
    code, out, err = depthlab_main("attention", run_id, "--example", "3", "--store", root, "--json")
    assert code == 0 and json.loads(out)["figure"].endswith("attention-seed0-example3.png"), err
    code, out, err = depthlab_main("attention", run_id, "--tokens", "a z ->", "--store", root)
    assert code == 2 and err.strip().splitlines() == ["error: --tokens: unknown token 'z'; the memorization "
                                                      "vocabulary is a b c d →"]
    code, out, err = depthlab_main("attention", run_id, "--out", root, "--store", root)  # a folder, not a file
    assert code == 2 and err.startswith(f"error: --out: {root} is a folder; give the path of a file")
    code, out, err = depthlab_main("attention", run_id, "--out", "x.jpg", "--store", root)
    assert code == 2 and err.startswith("error: --out: x.jpg must end in .png, .svg, .pdf")
