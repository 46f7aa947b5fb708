"""A resumed run continues from its checkpoint: it trains only the steps after it, writes only the metric rows
after it, and follows what the checkpoint holds (an altered checkpoint changes what the run does next).

Training is deterministic, so a run that ignored its checkpoint and trained again from step 0 would end with the same
results and the same metric rows (written twice onto the same keys): these tests count steps and writes instead.
"""

from __future__ import annotations

import math

import pytest
import torch

from depthlab.config import parse_run
from depthlab.store import Store
from depthlab.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from depthlab.training.engine import train_group


def config(**train):
    return parse_run({
        "task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4},
        "model": {"name": "attention_only", "layers": 2, "heads": 1, "attention": "softmax", "init": "random"},
        "train": {"optimizer": "adamw", "lr": 0.02, "batch_size": 32, **train},
        "seed": 3,
    })


class _Killed(BaseException):
    """A kill: not an Exception, so the engine records nothing on its way out (the run stays 'running')."""


def killed_after(steps: int):
    """A progress callback (called after every step) that kills the training after ``steps`` steps."""
    seen = []

    def progress(runs: int) -> None:
        seen.append(runs)
        if len(seen) == steps:
            raise _Killed

    return progress


def folder(store: Store, c):
    return store.artifacts_root / Store.run_id(c.to_dict())


def train_losses(store: Store, c) -> dict[int, float]:
    train = store.metric_columns(Store.run_id(c.to_dict()))["train"]
    return dict(zip(train["step"], train["loss"], strict=True))


def test_a_resumed_run_trains_and_logs_only_the_steps_after_its_checkpoint(tmp_path, metric_writes):
    c = config(steps=40, eval_every=10, checkpoint_every=20)
    whole = Store(tmp_path / "whole")
    train_group([c], whole)
    store = Store(tmp_path / "s")
    writes = metric_writes(store.root)
    with pytest.raises(_Killed):
        train_group([c], store, progress=killed_after(25))  # the checkpoint of step 20 is the last one
    assert load_checkpoint(folder(store, c))[1]["step"] == 20
    before = len(writes())
    trained: list[int] = []
    train_group([c], store, progress=trained.append)
    assert sum(trained) == 40 - 20  # run-steps trained after the restart
    after = [(step, split, name) for _, step, split, name, _ in writes()[before:]]
    assert sorted(after) == sorted({(s, split, name) for s in (30, 40) for split in ("train", "eval")
                                    for name in ("loss", "accuracy")})  # each row once, none before step 20
    got = load_checkpoint(folder(store, c))[0]
    want = load_checkpoint(folder(whole, c))[0]
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-6, atol=1e-7)


def test_a_resumed_run_follows_its_checkpoint_when_the_checkpoint_is_altered(tmp_path):
    """The classifier W_U zeroed in the checkpoint of step 20: at step 21 every logit is 0, so the train loss row of
    step 21 (the loss of step 21's batch before its update) is exactly ln(classes)."""
    c = config(steps=22, eval_every=1, checkpoint_every=20)
    whole = Store(tmp_path / "whole")
    train_group([c], whole)
    store = Store(tmp_path / "s")
    with pytest.raises(_Killed):
        train_group([c], store, progress=killed_after(21))
    tensors, meta = load_checkpoint(folder(store, c))
    assert meta["step"] == 20
    tensors["unembed.W_U"] = torch.zeros_like(tensors["unembed.W_U"])
    save_checkpoint(folder(store, c), tensors, 20, {k: v for k, v in meta.items() if k not in ("step", "format")})
    trained: list[int] = []
    train_group([c], store, progress=trained.append)
    assert sum(trained) == 2
    uniform = math.log(len(c.task.labels))
    resumed, uninterrupted = train_losses(store, c), train_losses(whole, c)
    assert resumed[21] == pytest.approx(uniform, rel=1e-6)
    assert abs(uninterrupted[21] - uniform) > 0.05  # the unaltered run was somewhere else
    assert resumed[20] == uninterrupted[20]  # logged before the checkpoint: left as it was


MISSING = object()  # the stream's state left out of the checkpoint


@pytest.mark.parametrize(("step", "pos", "refused"), [
    (-1, 0, "step -1 or data-stream position 0 out of range"), (20, -1, "position -1 out of range"),
    (20, 257, "position 257 out of range"), (20, MISSING, "does not fit"), (20, "x", "does not fit"),
    (20, None, "does not fit"), (0, 0, None), (20, 256, None),
], ids=["negative-step", "negative-position", "position-past-the-chunk", "no-stream", "position-not-a-number",
        "position-none", "step-0", "position-at-the-chunk-end"])
def test_a_checkpoint_s_step_and_stream_position_are_checked_before_it_is_loaded(tmp_path, step, pos, refused):
    """A checkpoint whose step is negative, or whose data-stream position is missing, not a number or outside its
    chunk (256 steps of 32 examples), is refused before any work, one line saying so; a checkpoint of step 0 is a run
    at its start, one at position 256 at the end of its chunk."""
    c = config(steps=22, eval_every=11, checkpoint_every=20)
    store = Store(tmp_path)
    with pytest.raises(_Killed):
        train_group([c], store, progress=killed_after(21))
    tensors, meta = load_checkpoint(folder(store, c))
    extra = {k: v for k, v in meta.items() if k not in ("step", "format", "stream")}
    if pos is not MISSING:
        extra["stream"] = {**meta["stream"], "pos": pos}
    save_checkpoint(folder(store, c), tensors, step, extra)
    trained: list[int] = []
    if refused is None:
        train_group([c], store, progress=trained.append)
        assert sum(trained) == 22 - step  # from its step to the end
        return
    with pytest.raises(CheckpointError, match=refused):
        train_group([c], store, progress=trained.append)
    assert trained == []
