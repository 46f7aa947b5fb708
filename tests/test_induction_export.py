"""The induction task, `depthlab export --to transformerlens` round trips, the ReLU hooks, and the CLI on a run."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from depthlab.analysis.runs import LoadedRun
from depthlab.config import parse_run
from depthlab.errors import UserError
from depthlab.induction import tl
from depthlab.models import TaskShapes, build_model
from depthlab.models.export import transformerlens_export, write_export
from depthlab.store import Store
from depthlab.tasks import TASKS
from depthlab.training.checkpoint import save_checkpoint

# skipped without TransformerLens, which is imported by the tests that use it, not at collection (2 s in every
# pytest-xdist worker)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformer_lens") is None,
                                reason="transformer_lens is not installed")

TASK = {"name": "induction", "n_tokens": 20, "length": 12}


def _run(model: dict, task: dict = TASK, seed: int = 0) -> LoadedRun:
    """A run of ``model`` on the induction task with every weight random (biases and LayerNorm gains too)."""
    config = parse_run({"task": task, "model": model, "train": {"steps": 1}, "seed": seed})
    net = build_model(config.model, TaskShapes.of(config.task), [config.seed])
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    return LoadedRun("r0", {}, config, net.eval().requires_grad_(False), 0)


def _round_trip(run: LoadedRun, tmp_path) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits at the last position from depthlab and from TransformerLens after export and load."""
    state, config = transformerlens_export(run.model, {"run": run.id, "step": run.step})
    write_export(state, config, tmp_path / "export")
    loaded = tl.load_folder(tmp_path / "export")
    inputs = torch.from_numpy(run.task.sample(64, np.random.default_rng(0)).inputs)
    return run.model(inputs[None]).outputs[0], loaded.logits(inputs)


def test_induction_task_repeats_one_bigram_and_asks_for_b() -> None:
    task = TASKS["induction"](**{k: v for k, v in TASK.items() if k != "name"})
    batch = task.sample(2000, np.random.default_rng(0))
    x, y, first = batch.inputs, batch.targets, batch.meta["first"]
    rows = np.arange(len(x))
    assert x.shape == (2000, 12) and (x[:, 0] == 1).all() and x[:, 1:].min() >= 4 and x.max() < 24
    a, b = x[:, -1], y
    assert (x[rows, first + 1] == a).all() and (x[rows, first + 2] == b).all() and (a != b).all()
    assert ((x[:, 1:] == a[:, None]).sum(1) == 2).all()  # A occurs only at the bigram and at the end
    assert len(np.unique(first)) == 12 - 3 and first.max() <= 12 - 4  # B never touches the final A
    assert task.labels == task.vocab and task.vocab[1] == "<bos>" and task.vocab[4] == "t4"
    fixed = TASKS["induction"](n_tokens=20, length=24, first=10).sample(50, np.random.default_rng(1))
    assert (fixed.inputs[:, 11] == fixed.inputs[:, -1]).all() and (fixed.inputs[:, 12] == fixed.targets).all()
    with pytest.raises(ValueError, match="first"):
        TASKS["induction"](length=12, first=9)


@pytest.mark.parametrize(("positional", "mlp", "embedding_scale"), [
    ("learned", True, 1.0), ("learned", False, 1.0), ("sinusoidal", True, 1.0), ("sinusoidal", False, 1.0),
    ("learned", True, 1e-2), ("learned", False, 1e-2),
])
def test_transformer_export_loads_in_transformerlens_with_equal_logits(tmp_path, positional: str, mlp: bool,
                                                                        embedding_scale: float) -> None:
    """Logits equal up to float32 rounding (measured: at most 3.8e-6). Learned embeddings and positions scaled by
    1e-2 make the first LayerNorm's input variance about 1e-5, where its eps counts: an exported eps of 1e-4 or 1e-6
    instead of 1e-5 moves those logits by 3.4 to 5.8, and the unscaled ones by 3e-4 to 7e-3 (sinusoidal positions
    are not scaled, so scaling adds nothing there)."""
    run = _run({"name": "transformer", "layers": 2, "heads": 2, "width": 16, "mlp": mlp, "positional": positional})
    with torch.no_grad():
        for name, p in run.model.named_parameters():
            if name.startswith(("embed.", "pos_embed.")):
                p.mul_(embedding_scale)
    ours, theirs = _round_trip(run, tmp_path)
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-5), (ours - theirs).abs().max()


def test_export_writes_transformerlens_names_and_shapes(tmp_path) -> None:
    from safetensors.torch import load_file

    run = _run({"name": "transformer", "layers": 1, "heads": 2, "width": 16, "d_head": 4, "mlp": True})
    files = write_export(*transformerlens_export(run.model, {"run": run.id, "step": run.step}), tmp_path)
    state, config = load_file(files[0]), json.loads(files[1].read_text())
    assert state["embed.W_E"].shape == (24, 16) and state["pos_embed.W_pos"].shape == (12, 16)
    assert state["blocks.0.attn.W_Q"].shape == (2, 16, 4) and state["blocks.0.attn.W_O"].shape == (2, 4, 16)
    assert state["unembed.W_U"].shape == (16, 24) and config["d_head"] == 4 and config["depthlab"]["run"] == "r0"
    assert files[0].stat().st_mode == files[1].stat().st_mode  # the weights as readable as the config
    with pytest.raises(UserError, match="positional"):
        transformerlens_export(_run({"name": "transformer", "layers": 1, "width": 16, "positional": "rotary"}).model)


@pytest.mark.parametrize(("attention", "heads"), [("relu", [1, 2]), ("relu", 2), ("softmax", 2)])
def test_attention_only_hooks_reproduce_depthlab_logits(tmp_path, attention: str, heads) -> None:
    run = _run({"name": "attention_only", "layers": 2, "heads": heads, "attention": attention, "init": "random"})
    ours, theirs = _round_trip(run, tmp_path)
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=1e-4), (ours - theirs).abs().max()
    if attention == "relu":  # the loader attached the hooks: without them TransformerLens' softmax differs
        config = json.loads((tmp_path / "export" / "config.json").read_text())
        bare = tl.load_folder(str(tmp_path / "export"))  # a str path as well as a Path
        bare.model.reset_hooks()
        inputs = torch.from_numpy(run.task.sample(8, np.random.default_rng(0)).inputs)
        ours = run.model(inputs[None]).outputs[0]
        assert torch.allclose(bare.logits(inputs), ours, atol=1e-4, rtol=1e-4)  # permanent: reset_hooks() keeps them …
        bare.model.reset_hooks(including_permanent=True)
        assert config["depthlab"]["attention"] == "relu"
        assert not torch.allclose(bare.logits(inputs), ours, atol=1e-3)  # … only this removes them


@pytest.mark.parametrize("model", [
    {"name": "transformer", "layers": 2, "heads": 2, "width": 16, "mlp": True},
    {"name": "transformer", "layers": 1, "heads": 2, "width": 16, "mlp": False, "positional": "sinusoidal"},
    {"name": "attention_only", "layers": 2, "heads": [1, 2], "attention": "softmax", "init": "random"},
    {"name": "attention_only", "layers": 2, "heads": 2, "attention": "relu", "init": "random"},
])
def test_exported_transformerlens_model_has_depthlab_s_activations_at_every_shared_hook(tmp_path, model) -> None:
    """depthlab's cache against TransformerLens' on the exported model, name by name (the run axis dropped).

    Two documented differences: the attention-only export writes W_Q = √d' · W_QK (TransformerLens divides scores
    by √d_head), so its ``hook_q`` is √d' times depthlab's; and it pads layers with fewer heads with zero heads.
    ``hook_attn_scores`` is left out: TransformerLens 4.x's bridge records it after the pattern.
    """
    run = _run(model)
    write_export(*transformerlens_export(run.model, {"run": run.id, "step": run.step}), tmp_path / "export")
    loaded = tl.load_folder(tmp_path / "export")
    inputs = torch.from_numpy(run.task.sample(6, np.random.default_rng(0)).inputs)
    _, ours = run.model.run_with_cache(inputs[None])
    _, theirs = loaded.model.run_with_cache(inputs)  # ReLU attention through the loader's permanent hooks
    shared = [name for name in ours if name in theirs and not name.endswith("hook_attn_scores")]
    assert len(shared) == len(ours) - run.config.model.layers  # every depthlab hook but the scores
    width = run.model.width if model["name"] == "attention_only" else model["width"]
    for name in shared:
        mine, other = ours[name][0], theirs[name]
        if name.endswith(("hook_q", "hook_k", "hook_v", "hook_z")):
            other = other[:, :, : mine.shape[2]]  # [batch, pos, head, d_head]: padded heads dropped
        elif name.endswith("hook_pattern"):
            other = other[:, : mine.shape[1]]
        if model["name"] == "attention_only" and name.endswith("hook_q"):
            other = other / width**0.5
        torch.testing.assert_close(mine, other.to(mine.dtype), rtol=1e-4, atol=1e-4, msg=name)


def test_cli_export_and_induction_on_a_stored_run(tmp_path) -> None:
    from depthlab.cli import app

    run = _run({"name": "attention_only", "layers": 2, "heads": 1, "attention": "relu", "init": "random"},
               {**TASK, "length": 24})  # the seed's length, as TransformerLens is measured
    store = Store(tmp_path / "store")
    run_id = store.create_run(run.config.to_dict(), "induction", "attention_only")
    save_checkpoint(store.run_folder(run_id), run.model.run_state_dict(0), 5, {"run_id": run_id})
    cli = CliRunner()
    out = cli.invoke(app, ["export", run_id[:6], "--store", str(tmp_path / "store"), "--json"])
    assert out.exit_code == 0, out.output
    exported = json.loads(out.stdout)
    assert exported["relu_hooks"] and all(p.endswith((".safetensors", ".json")) for p in exported["files"])
    args = ["--sequences", "24", "--per-token", "3", "--neighbours", "2", "--json"]
    by_run = cli.invoke(app, ["induction", "--run", run_id, "--store", str(tmp_path / "store"), *args])
    by_folder = cli.invoke(app, ["induction", "--model", exported["folder"], "--store", str(tmp_path / "store"), *args])
    assert by_run.exit_code == 0 and by_folder.exit_code == 0, by_run.output + by_folder.output
    a, b = json.loads(by_run.stdout), json.loads(by_folder.stdout)
    assert a["tokens"] == "4-23" and all(str(tmp_path) in f for f in a["figures"])
    assert a["strength"]["mean"] == pytest.approx(b["strength"]["mean"], rel=1e-5)  # same model, same draws
    for bad, field in ((["export", run_id, "--to", "onnx"], "--to"), (["induction"], "--model/--run")):
        result = cli.invoke(app, [*bad, "--store", str(tmp_path / "store")])
        assert isinstance(result.exception, UserError) and str(result.exception).startswith(field)
