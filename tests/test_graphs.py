"""CUDA-graph steps (issue 29, ``train.cuda_graph``): what can be checked without a GPU. The capture and replay
themselves are in tests/test_gpu.py (marked ``gpu``)."""

import pytest
import torch

from depthlab.config import parse_run
from depthlab.errors import UserError
from depthlab.store import Store
from depthlab.sweeps.local import run_local
from depthlab.training.engine import Group

RUN = {"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4},
       "model": {"name": "transformer", "layers": 1, "heads": 2, "width": 16},
       "train": {"optimizer": "adamw", "lr": 0.01, "steps": 6, "eval_every": 3, "batch_size": 8, "grad_clip": 1.0,
                 "warmup_steps": 2, "weight_decay": 0.1, "eval_examples": 32, "device": "cpu"}}


def configs(seeds=(0, 1), **train):
    return [parse_run({**RUN, "train": {**RUN["train"], **train}, "seed": s}) for s in seeds]


def test_cuda_graph_on_without_cuda_is_one_line_before_any_work(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(UserError, match=r"^train\.cuda_graph: on needs a CUDA GPU, and this group trains on cpu; "
                                        r"use auto \(graphs where there is CUDA\) or off$"):
        run_local(configs(cuda_graph="on"), store)
    assert store.find_runs() == []


@pytest.mark.parametrize("mode,recorded", [("auto", "eager (cpu)"), ("off", "eager (train.cuda_graph: off)")])
def test_the_final_metrics_say_how_the_steps_ran(tmp_path, mode, recorded):
    results = run_local(configs((0,), cuda_graph=mode), Store(tmp_path))
    assert [r["step_mode"] for r in results.values()] == [recorded]


def test_the_step_on_static_buffers_is_the_step(tmp_path):
    """What a graph replays: the batch copied into buffers that live across steps, then ``train_step`` on them.
    Run eagerly that way, it trains exactly as the plain step does (clipping, warm-up and AdamW included)."""
    def group(folder):
        return Group([(c, Store.run_id(c.to_dict())) for c in configs()], Store(tmp_path / folder), 2)

    plain, static = group("plain"), group("static")
    buffers = None
    for _ in range(5):
        plain.step()
        x, y = static.next_batch()
        if buffers is None:
            buffers = (x.clone(), y.clone())
        buffers[0].copy_(x)
        buffers[1].copy_(y)
        static.train_step(*buffers)
    for a, b in zip(plain.model.parameters(), static.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(plain.sums, static.sums) and torch.equal(plain.opt.steps, static.opt.steps)
