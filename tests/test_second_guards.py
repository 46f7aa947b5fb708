"""Second, independent guards of guarantees that each rested on one test (issue 44), each of another kind than the
first: weight decay seen in the weights a run ends with (the first: the recipe test's step-by-step comparison with
``torch.optim``); the checkpoint owner check seen through the command line (the first: ``test_hostile.py``, through
the Python API). Resume's second guard is in ``test_provenance.py`` (the batches a resumed run trains on; the first
guards count steps and metric writes, ``test_engine_resume.py``).
"""

from __future__ import annotations

import json
import shutil

import torch
import yaml
from safetensors.torch import load_file

from depthlab.config import parse_run
from depthlab.store import Store
from depthlab.training.checkpoint import SIDECAR, WEIGHTS
from depthlab.training.engine import train_group


def raw_config(seed: int = 0, **train) -> dict:
    return {
        "task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4},
        "model": {"name": "attention_only", "layers": 1, "heads": 1, "attention": "softmax", "init": "random"},
        "train": {"optimizer": "adamw", "lr": 0.01, "steps": 20, "batch_size": 32, "eval_every": 20, **train},
        "seed": seed,
    }


def final_weights(store: Store, config) -> dict[str, torch.Tensor]:
    path = store.artifacts_root / Store.run_id(config.to_dict()) / WEIGHTS
    return {k: v for k, v in load_file(path).items() if not k.startswith("optimizer.")}


def test_weight_decay_shrinks_the_weights_a_run_ends_with(tmp_path):
    """AdamW's decoupled decay multiplies every weight by 1 - lr·λ each step (0.99 here, 0.99^20 = 0.82 over the
    run): the run with λ = 1 ends with a clearly smaller weight norm than the same run (same seed, data, updates'
    sizes) without it."""
    store = Store(tmp_path)
    plain, decayed = parse_run(raw_config()), parse_run(raw_config(weight_decay=1.0))
    train_group([plain], store)
    train_group([decayed], store)
    norm = {name: torch.linalg.vector_norm(torch.cat([w.flatten() for w in final_weights(store, c).values()]))
            for name, c in (("plain", plain), ("decayed", decayed))}
    ratio = float(norm["decayed"] / norm["plain"])
    assert ratio < 0.92, f"weight decay 1.0 left the weight norm at {ratio:.3f} of the run without it"


def test_another_run_s_checkpoint_is_refused_by_the_command_line(tmp_path, depthlab_main):
    """`depthlab train` of run B, whose folder holds run A's checkpoint: exit 2, one line naming both runs, nothing
    trained."""
    store = tmp_path / "store"
    a, b = raw_config(seed=0, checkpoint_every=10), raw_config(seed=1, checkpoint_every=10)
    files = {}
    for name, raw in (("a", a), ("b", b)):
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(yaml.safe_dump(raw))
    code, out, err = depthlab_main("train", str(files["a"]), "--store", str(store), "--json")
    assert code == 0, err
    run_a, run_b = Store.run_id(parse_run(a).to_dict()), Store.run_id(parse_run(b).to_dict())
    assert json.loads(out)["id"] == run_a
    (store / "artifacts" / run_b).mkdir(parents=True)
    for name in (WEIGHTS, SIDECAR):
        shutil.copy(store / "artifacts" / run_a / name, store / "artifacts" / run_b / name)
    code, out, err = depthlab_main("train", str(files["b"]), "--store", str(store), "--json")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert f"belongs to run {run_a}" in lines[0] and f"not to run {run_b}" in lines[0], lines[0]
    for raw in (a, b):  # each run's config named by the first 16 hex digits of its SHA-256
        assert f"(config sha256 {Store.config_hash(parse_run(raw).to_dict())[:16]}…)" in lines[0], lines[0]
    assert Store(store).metric_columns(run_b) == {}, "run B trained from run A's checkpoint"
