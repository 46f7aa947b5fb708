"""The training engine: a group of runs of equal shapes, trained as one batched program.

Runs in a group share the task, the model family and its sizes, and the training settings except the seed
and the learning rate. Their parameters are stacked on a leading run axis (see ``models.base``), so every
step is one forward and one backward for all of them; each run still has its own initialisation, data stream,
optimizer state, metrics, early stop, divergence check and checkpoint, and a run that finishes leaves the
group (its rows are dropped from every tensor) without touching the others.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..config import RunConfig
from ..constructions.seed001 import paper_first_layer
from ..models import TaskShapes, build_model
from ..store import Store
from ..tasks import Batch, Task
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .optim import GroupOptimizer

EXHAUSTIVE_EVAL_LIMIT = 400_000  # evaluate on the whole dataset when it has at most this many examples
SAMPLED_EVAL_EXAMPLES = 20_000  # otherwise on this many held-out examples, the same for every run
EVAL_SEED = 20240229  # the fixed evaluation sample does not depend on any run's seed
CHUNK_EXAMPLES = 8192  # examples generated per call to task.sample (one call covers many steps)
EVAL_CHUNK = 8192


def group_key(config: RunConfig) -> str:
    """Runs with equal keys can train in one group: everything but the seed and the learning rate."""
    d = config.to_dict()
    d.pop("seed")
    d["train"] = {k: v for k, v in d["train"].items() if k != "lr"}
    return json.dumps(d, sort_keys=True)


class DataStream:
    """One run's training data: its own seeded generator, sampled a chunk of steps at a time.

    Its state (generator state at the start of the current chunk, and the position in it) goes into
    checkpoints, so a resumed run sees exactly the batches it would have seen.
    """

    def __init__(self, task: Task, seed: int, batch_size: int) -> None:
        self.task, self.batch_size = task, batch_size
        self.steps_per_chunk = max(1, CHUNK_EXAMPLES // batch_size)
        self.rng = np.random.default_rng([seed, 0xDA7A])
        self.chunk_state: dict[str, Any] = self.rng.bit_generator.state
        self.buffer: Batch | None = None
        self.pos = self.steps_per_chunk

    def _refill(self) -> None:
        self.chunk_state = self.rng.bit_generator.state
        self.buffer = self.task.sample(self.batch_size * self.steps_per_chunk, self.rng, "train")
        self.pos = 0

    def next(self) -> Batch:
        if self.pos >= self.steps_per_chunk:
            self._refill()
        start = self.pos * self.batch_size
        self.pos += 1
        return self.buffer.take(slice(start, start + self.batch_size))

    def state(self) -> dict[str, Any]:
        return {"rng": self.chunk_state, "pos": self.pos}

    def restore(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._refill()
        self.pos = state["pos"]


def eval_set(task: Task) -> tuple[Batch, bool]:
    """The evaluation data every run of this task is scored on, and whether it is the whole dataset."""
    if task.dataset_size("eval") <= EXHAUSTIVE_EVAL_LIMIT:
        full = task.enumerate("eval")
        if full is not None:
            return full, True
    return task.sample(SAMPLED_EVAL_EXAMPLES, np.random.default_rng(EVAL_SEED), "eval"), False


def run_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per run: logits [R, B, C], targets [R, B] -> [R]."""
    r, b, c = logits.shape
    return F.cross_entropy(logits.reshape(r * b, c).float(), targets.reshape(-1), reduction="none").view(r, b).mean(1)


@torch.no_grad()
def evaluate(model: torch.nn.Module, batch: Batch, autocast: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss and accuracy of every run of ``model`` on ``batch`` (the same examples for every run)."""
    runs = model.n_runs
    loss_sum = torch.zeros(runs)
    correct = torch.zeros(runs)
    inputs, targets = torch.from_numpy(batch.inputs), torch.from_numpy(batch.targets)
    for start in range(0, len(batch), EVAL_CHUNK):
        x = inputs[start : start + EVAL_CHUNK].expand(runs, -1, -1)
        y = targets[start : start + EVAL_CHUNK].expand(runs, -1)
        with autocast:
            logits = model(x).outputs
        loss_sum += run_loss(logits, y) * y.shape[1]
        correct += (logits.argmax(-1) == y).float().sum(1)
    return loss_sum / len(batch), correct / len(batch)


class _Run:
    """Book-keeping for one run while it is in the group."""

    def __init__(self, config: RunConfig, run_id: str, folder: Path) -> None:
        self.config, self.id, self.folder = config, run_id, folder
        self.stream = DataStream(config.task, config.seed, config.train.batch_size)
        self.step = 0
        self.loss_sum = 0.0
        self.correct = 0.0
        self.seen = 0


def train_group(configs: list[RunConfig], store: Store, progress: Callable[[int], None] | None = None,
                resume: bool = True) -> dict[str, dict[str, Any]]:
    """Train every run in ``configs`` (one group) to completion; returns final metrics by run id.

    Runs already done in the store are skipped; runs with a usable checkpoint resume from it.
    """
    if len({group_key(c) for c in configs}) != 1:
        raise ValueError("train_group: runs of one group must share everything but seed and lr")
    first = configs[0]
    task, spec, train = first.task, first.model, first.train
    ids = [store.create_run(c.to_dict(), task.name, spec.name) for c in configs]
    todo = [(c, i) for c, i in zip(configs, ids, strict=True) if store.get_run(i)["status"] != "done"]
    results = {i: store.get_run(i)["final"] for i in ids if i not in {t[1] for t in todo}}
    if not todo:
        return results

    shapes = TaskShapes(len(task.vocab), task.seq_len, len(task.labels))
    generators = [torch.Generator().manual_seed(c.seed) for c, _ in todo]
    construction = paper_first_layer(task, spec)
    options = {"extra_width": construction.extra_width} if construction else {}
    model = build_model(spec, shapes, generators, **options)
    if construction:
        construction.apply(model)
    names = list(model.tl_names.values())
    opt = GroupOptimizer(list(model.parameters()), [c.train.lr for c, _ in todo], train.optimizer,
                         train.momentum, train.weight_decay, train.betas, grad_clip=train.grad_clip)
    runs = [_Run(c, i, store.artifact_path(i, "checkpoint", "x").parent) for c, i in todo]
    for r, run in enumerate(runs):
        if resume:
            _resume(run, r, model, opt, names, store)

    evaluation, exhaustive = eval_set(task)
    probe = evaluation.take(np.random.default_rng(EVAL_SEED).permutation(len(evaluation))[: train.eval_examples])
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if train.precision == "bf16" else nullcontext()
    started = time.perf_counter()
    for run in runs:
        store.set_status(run.id, "running", step=run.step)

    def leave(indices: list[int]) -> None:
        keep = torch.tensor([r for r in range(len(runs)) if r not in indices], dtype=torch.long)
        model.select_runs(keep)
        opt.select_runs(keep, list(model.parameters()))
        runs[:] = [runs[r] for r in keep.tolist()]

    def finish(indices: list[int], status: str) -> None:
        if status == "done":
            loss, acc = evaluate(model, evaluation, autocast)
        for r in indices:
            run = runs[r]
            _save(run, r, model, opt, names)
            final = {
                "accuracy": float(acc[r]) if status == "done" else None,
                "loss": float(loss[r]) if status == "done" else None,
                "steps": run.step, "chance": task.chance, "eval_examples": len(evaluation),
                "exhaustive": exhaustive, "eval_protocol": task.eval_protocol,
                "seconds": round(time.perf_counter() - started, 3), "group_size": len(configs),
                "threads": torch.get_num_threads(), "precision": train.precision,
            }
            store.add_artifact(run.id, "checkpoint", "checkpoint.safetensors", {"step": run.step})
            store.finish_run(run.id, final, status=status, step=run.step)
            results[run.id] = final
        leave(indices)

    try:
        while runs:
            batches = [run.stream.next() for run in runs]
            x = torch.from_numpy(np.stack([b.inputs for b in batches]))
            y = torch.from_numpy(np.stack([b.targets for b in batches]))
            with autocast:
                logits = model(x).outputs
            losses = run_loss(logits, y)
            opt.zero_grad()
            losses.sum().backward()
            opt.step()
            with torch.no_grad():
                step_loss = losses.detach().tolist()
                step_correct = (logits.argmax(-1) == y).float().sum(1).tolist()
            for r, run in enumerate(runs):
                run.step += 1
                run.loss_sum += step_loss[r] * len(batches[r])
                run.correct += step_correct[r]
                run.seen += len(batches[r])
            if progress:
                progress(len(runs))
            _log_and_stop(runs, model, probe, autocast, store, finish, opt, names)
    except KeyboardInterrupt:
        for run in runs:
            store.set_status(run.id, "interrupted", step=run.step)
        raise
    except Exception as e:
        for run in runs:
            store.set_status(run.id, "failed", step=run.step, error=f"{type(e).__name__}: {e}")
        raise
    return results


def _log_and_stop(runs, model, probe, autocast, store, finish, opt, names) -> None:
    """At each run's log point: log metrics, then let runs that are done, diverged or on target leave."""
    logging = [r for r, run in enumerate(runs) if run.step % run.config.train.eval_every == 0
               or run.step >= run.config.train.steps]
    for r, run in enumerate(runs):
        every = run.config.train.checkpoint_every
        if every and run.step % every == 0 and run.step < run.config.train.steps:
            _save(run, r, model, opt, names)
    if not logging:
        return
    eval_loss, eval_acc = evaluate(model, probe, autocast)
    rows, diverged, done = [], [], []
    for r in logging:
        run = runs[r]
        train_loss = run.loss_sum / max(run.seen, 1)
        rows.append((run.id, run.step, "train", {"loss": train_loss, "accuracy": run.correct / max(run.seen, 1)}))
        rows.append((run.id, run.step, "eval", {"loss": float(eval_loss[r]), "accuracy": float(eval_acc[r])}))
        run.loss_sum = run.correct = 0.0
        run.seen = 0
        target = run.config.train.target_accuracy
        if not (math.isfinite(train_loss) and math.isfinite(float(eval_loss[r]))):
            diverged.append(r)
        elif run.step >= run.config.train.steps or (target is not None and float(eval_acc[r]) >= target):
            done.append(r)
    store.log_metrics_many(rows)
    # Leave in two calls; indices refer to the group before either call, so the later set is remapped.
    if diverged:
        for r in diverged:
            store.set_status(runs[r].id, "diverged", step=runs[r].step, error=f"non-finite loss at step {runs[r].step}")
        stay = [r for r in range(len(runs)) if r not in diverged]
        keep = torch.tensor(stay, dtype=torch.long)
        model.select_runs(keep)
        opt.select_runs(keep, list(model.parameters()))
        done = [stay.index(r) for r in done]
        runs[:] = [runs[r] for r in stay]
    if done:
        finish(done, "done")


def _save(run: _Run, r: int, model, opt: GroupOptimizer, names: list[str]) -> None:
    tensors = {**model.run_state_dict(r), **opt.run_state_dict(r, names)}
    save_checkpoint(run.folder, tensors, run.step, {"run_id": run.id, "stream": run.stream.state()})


def _resume(run: _Run, r: int, model, opt: GroupOptimizer, names: list[str], store: Store) -> None:
    try:
        loaded = load_checkpoint(run.folder)
    except CheckpointError as e:
        store.set_status(run.id, "failed", error=str(e))
        raise
    if loaded is None:
        return
    tensors, meta = loaded
    weights = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
    model.load_run_state_dict(r, weights)
    opt.load_run_state_dict(r, names, tensors)
    run.stream.restore(meta["stream"])
    run.step = int(meta["step"])
