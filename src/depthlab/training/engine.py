"""The training engine: a group of runs of equal shapes, trained as one batched program.

Runs in a group share the task, the model family and its sizes, and the training settings except the seed
and the learning rate. Their parameters are stacked on a leading run axis (see ``models.base``), so every
step is one forward and one backward for all of them; each run still has its own initialisation, data stream,
optimizer state, metrics, early stop, divergence check and checkpoint, and a run that finishes leaves the
group (its rows are dropped from every tensor) without touching the others.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save

from ..config import RunConfig
from ..models import TaskShapes, build_model
from ..store import Store, atomic_write_bytes
from .best import best_and_lost
from .checkpoint import STOP_SIGNALS, WEIGHTS, CheckpointError, Owner, layout_of, load_checkpoint, save_checkpoint
from .compile_choice import CompileTrial
from .data import EVAL_SEED, CounterBatches, data_stream, eval_set, group_batches
from .device import GraphedStep, autocast, graph_plan, prepare, resolve_device
from .eval_label import final_eval_fields
from .evaluate import evaluate, read_tensor
from .footprint import check_group
from .objectives import per_run_correct, per_run_loss
from .optim import GroupOptimizer
from .tracking import Tracker

COMPILE_BACKEND = "inductor"  # torch.compile's default (tests trace with "aot_eager": the same graphs, no codegen)


def group_key(config: RunConfig) -> str:
    """Runs with equal keys can train in one group: everything but the seed and the learning rate (where they
    execute included)."""
    d = config.to_dict()
    d.pop("seed")
    d["train"] = {k: v for k, v in config.train.model_dump(mode="json").items() if k != "lr"}
    return json.dumps(d, sort_keys=True)


class _Run:
    """Book-keeping for one run while it is in the group."""

    def __init__(self, config: RunConfig, run_id: str, folder: Path) -> None:
        self.config, self.id, self.folder = config, run_id, folder
        train = config.train
        self.stream = data_stream(config.task, config.seed, train.batch_size, train.steps, train.train_examples,
                                  train.stream or 1)
        self.step = 0
        self.seen = 0  # examples since the last log point (their loss and hits are summed in Group.sums)
        self.final = False  # resumed from the checkpoint its final evaluation wrote (killed before recording it)

    @property
    def at_end(self) -> bool:
        return self.step >= self.config.train.steps

    def log_point(self) -> bool:
        return self.step % self.config.train.eval_every == 0 or self.at_end

    def take_train_metrics(self, loss_sum: float, correct: float) -> dict[str, float]:
        out = {"loss": loss_sum / max(self.seen, 1), "accuracy": correct / max(self.seen, 1)}
        self.seen = 0
        return out


class Group:
    """The runs of one group while they train: the stacked model, the optimizer, and each run's state."""

    def __init__(self, configs: list[tuple[RunConfig, str]], store: Store, group_size: int,
                 tracker: Tracker | None = None) -> None:
        first = configs[0][0]
        self.task, self.train, self.store, self.group_size = first.task, first.train, store, group_size
        self.tracker = tracker or Tracker()
        task, t = self.task, self.train
        self.device = resolve_device(t.device)
        self.precision = prepare(self.device, t.precision)
        self.read = read_tensor(task, self.device)
        # built on the CPU from the runs' seeds (the same initial weights on every device), then moved
        self.model = build_model(first.model, TaskShapes.of(task), [c.seed for c, _ in configs]).to(self.device)
        self.names = [name for name, _ in self.model.named_parameters()]
        self.opt = GroupOptimizer(list(self.model.parameters()), [c.train.lr for c, _ in configs], t.optimizer,
                                  t.momentum, t.weight_decay, t.betas, grad_clip=t.grad_clip,
                                  warmup_steps=t.warmup_steps, schedule=t.schedule, total_steps=t.steps,
                                  lr_min=t.lr_min)
        self.runs = [_Run(c, i, store.artifact_path(i, "checkpoint", WEIGHTS).parent) for c, i in configs]
        self.evaluation, self.exhaustive = eval_set(task)
        order = np.random.default_rng(EVAL_SEED).permutation(len(self.evaluation))
        self.probe = self.evaluation.take(order[: t.eval_examples])
        self.autocast = autocast(self.device, t.precision)
        # each run's train loss and hits since its last log point, summed on the device: read at log points only
        self.sums = torch.zeros(len(self.runs), 2, dtype=torch.float64, device=self.device)
        self.loss_sums, self.hit_sums = self.sums.unbind(1)
        self.step_losses = torch.zeros(len(self.runs), dtype=torch.float64, device=self.device)  # tally's scratch
        self.batches = group_batches([run.stream for run in self.runs], task, self.device)
        # how the step runs: None = to be replayed as a CUDA graph (device.GraphedStep), else why not (one line)
        self.eager_because = graph_plan(t.cuda_graph, self.device)
        self.graphed = GraphedStep(self.device) if self.eager_because is None else None
        # train.compile: on compiles (and captures, on CUDA); auto times both captured steps on CUDA and keeps the
        # faster (compile_choice), and is off where nothing is captured (compiling on a CPU takes minutes)
        self.backend = COMPILE_BACKEND
        self.trial = CompileTrial(self.device) if t.compile == "auto" and self.graphed is not None else None
        self.compile_note: str | None = None  # a compile given up, or a mode kept from a checkpoint: why
        self.compiling = False
        self.compiled_losses: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
        self.set_compiling(t.compile == "on")
        self.started = time.perf_counter()
        self.data_seconds = 0.0  # time the steps waited for their batches (the benchmark's data share)
        self.results: dict[str, dict[str, Any]] = {}

    # --- one step for every run ---------------------------------------------------------------------
    def batch_losses(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each run's mean loss on its batch, and the outputs (what ``train.compile`` compiles)."""
        with self.autocast:
            outputs = self.model(x, read=self.read).outputs
        return per_run_loss(outputs, y, self.task.loss), outputs

    def set_compiling(self, on: bool) -> None:
        """Compile the step (its forward and loss, whose backward AOT autograd compiles too, and the optimizer's
        update) with ``torch.compile`` in Inductor's default mode, or go back to the eager step; a captured step
        warms up (where it compiles) and is captured again. Shapes are static until runs leave, then the run axis
        becomes dynamic (TorchDynamo's automatic dynamic shapes: one recompile for every later group size)."""
        self.compiling = on
        backend = self.backend if on else None
        # the class's function, not a bound method: a group holding its own bound method is a reference cycle, and
        # its (GPU) memory would wait for the garbage collector instead of being given back when the group is dropped
        self.compiled_losses = torch.compile(Group.batch_losses, backend=backend, dynamic=None) if on else None
        self.opt.compile(backend)
        if self.graphed is not None:
            self.graphed.compile(backend)

    def drop_compile(self, reason: str) -> None:
        """The compiled step failed (to compile, or to be captured): the eager step from now on, and why."""
        self.compile_note = f"compile given up: {reason}"
        self.trial = None
        self.set_compiling(False)

    def keep_mode(self, compiled: bool) -> None:
        """``train.compile: auto`` resuming a run: continue in the mode its checkpoint trained in, without a trial
        (the compiled step rounds differently from the eager one). Nothing to say where nothing changes: ``auto``
        is off here (a CPU) and the run trained eagerly."""
        if self.trial is None and compiled == self.compiling:
            return
        self.trial = None
        self.compile_note = f"train.compile auto: {'compiled' if compiled else 'eager'}, as before its checkpoint"
        if compiled != self.compiling:
            self.set_compiling(compiled)

    def losses(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`batch_losses`, compiled when ``train.compile`` is on."""
        if self.compiled_losses is None:
            return self.batch_losses(x, y)
        # The parameters' run axis may become dynamic too: TorchDynamo keeps a parameter's shape static by default,
        # and the batch's run axis, bound to it, would then recompile at every group size (past its recompile limit
        # the forward would run uncompiled); so, as the optimizer's buffers do, one recompile serves every size.
        with torch._dynamo.config.patch(force_parameter_static_shapes=False):
            return self.compiled_losses(self, x, y)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every run's next batch on the device (inputs, targets [runs, batch, …]); the time it took is counted."""
        start = time.perf_counter()
        x, y = self.batches.next()
        self.data_seconds += time.perf_counter() - start
        return x, y

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Forward, loss, backward, the optimizer's update and the train metrics' sums, for every run."""
        losses, outputs = self.losses(x, y)
        self.opt.step(self.gradients(losses))
        self.tally(losses, outputs, y)

    def gradients(self, losses: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """Every parameter's gradient of the runs' summed losses, in the optimizer's order. ``autograd.grad``, not
        ``backward``: no gradient is added into a ``.grad`` (one operation, one kernel, per parameter tensor fewer:
        the optimizer gathers them in one). The sum's gradient, not an explicit one of ones: that makes autograd
        import sympy (2 s of every process's first step) and check its shape symbolically at each step."""
        return torch.autograd.grad(losses.sum(), self.opt.params, allow_unused=True)

    @torch.no_grad()  # the sums are no part of the graph (two detach() calls were two operations a step)
    def tally(self, losses: torch.Tensor, outputs: torch.Tensor, y: torch.Tensor) -> None:
        """Add each run's summed loss (mean × batch) and hits to its sums (float64, on the device)."""
        # in float64: exact (a copy_ casts in one operation, where add_ of the float32 losses would cast in four)
        self.loss_sums.add_(self.step_losses.copy_(losses), alpha=self.train.batch_size)
        hits = per_run_correct(outputs, y, self.task.loss, self.task.accuracy_over)
        self.hit_sums.add_(math.nan if hits is None else hits)

    def sampled_step(self) -> None:
        """Make the batch on the device and train on it (stream 2): the whole step is one CUDA graph."""
        self.train_step(*self.batches.sample())

    def step(self) -> None:
        replaying = self.graphed is not None and self.graphed.replaying
        if self.trial is not None:
            self.trial.before(replaying)
        if self.graphed is not None and isinstance(self.batches, CounterBatches):
            self.guarded(self.graphed, self.sampled_step)
            self.batches.count()
        elif self.graphed is None:
            self.guarded(self.train_step, *self.next_batch())
        else:
            self.guarded(self.graphed, self.train_step, *self.next_batch())
        if self.graphed is not None and self.graphed.failure is not None:
            if self.compiling:  # the compiled step could not be captured: capture the eager one instead
                self.drop_compile(f"its CUDA graph capture failed: {self.graphed.failure}")
            else:  # eager from now on, and say why (auto has no captured steps to time: off)
                self.eager_because, self.graphed, self.trial = self.graphed.mode(), None, None
        if self.trial is not None and (switch := self.trial.after(replaying)) is not None:
            self.set_compiling(switch == "on")
        for run in self.runs:
            run.step += 1
            run.seen += self.train.batch_size

    def guarded(self, step: Callable[..., None], *inputs: torch.Tensor) -> None:
        """``step(*inputs)``; while the step is compiled, a failure (a compile that fails: Inductor's codegen, a
        compiler missing) gives the compile up and runs the same step eagerly (nothing of it ran: compiling comes
        first); an eager step's failure is the failure."""
        if not self.compiling:
            step(*inputs)
            return
        try:
            step(*inputs)
        except Exception as e:
            self.drop_compile(" ".join(f"{type(e).__name__}: {e}".split())[:200])
            step(*inputs)

    def step_mode(self) -> str:
        """How the steps ran, one line (what the final metrics record as ``step_mode``)."""
        mode = self.graphed.mode() if self.graphed is not None else self.eager_because or "eager"
        if self.compiling and self.graphed is None:
            mode += f" + compiled ({self.backend})"
        notes = [self.trial.summary() if self.trial is not None else None, self.compile_note]
        return "; ".join([mode, *(note for note in notes if note)])

    # --- metrics, early stop, divergence, checkpoints -----------------------------------------------
    def after_step(self) -> None:
        """Log the runs at a log point (and finish those done), then checkpoint the runs due for one.

        In that order: a checkpoint taken on a log point then holds the train sums after its row was written, so
        a run resumed from it writes exactly the rows an uninterrupted run writes (and a kill between the two
        resumes from the previous checkpoint, which writes the same row again)."""
        self.log()
        for r, run in enumerate(self.runs):
            every = run.config.train.checkpoint_every
            if every and run.step % every == 0 and not run.at_end:
                self.save(r)
                if run.config.train.keep_checkpoints:
                    self.keep(r)

    def log(self) -> None:
        """Train and eval rows of the runs at a log point; runs that are done or diverged leave the group."""
        logging = [r for r, run in enumerate(self.runs) if run.log_point()]
        if not logging:
            return
        partial: dict[str, torch.Tensor] = {}
        eval_loss, eval_acc = evaluate(self.model, self.task, self.probe, self.autocast, partial)
        rows, diverged, done = [], [], []
        sums = self.sums.tolist()
        self.sums[logging] = 0.0
        for r in logging:
            run = self.runs[r]
            train = run.take_train_metrics(*sums[r])
            rows.append((run.id, run.step, "train", train))
            partials = {f"loss_{name}": float(value[r]) for name, value in partial.items()}
            rows.append((run.id, run.step, "eval",
                         {"loss": float(eval_loss[r]), "accuracy": float(eval_acc[r]), **partials}))
            target, accuracy = run.config.train.target_accuracy, float(eval_acc[r])
            reached = target is not None and not math.isnan(accuracy) and accuracy >= target
            if not (math.isfinite(train["loss"]) and math.isfinite(float(eval_loss[r]))):
                diverged.append(r)
            elif run.at_end or reached:
                done.append(r)
        self.store.log_metrics_many(rows)
        self.tracker.log(rows)
        for r in diverged:
            run = self.runs[r]
            self.store.set_status(run.id, "diverged", step=run.step, error=f"non-finite loss at step {run.step}")
            self.tracker.finish(run.id, "diverged", None)
        if done:
            self.finish(done)
        self.leave(diverged + done)

    def finish(self, indices: list[int]) -> None:
        """Final evaluation on the whole evaluation set, a checkpoint, and the final row, for these runs."""
        if not indices:
            return
        partial: dict[str, torch.Tensor] = {}
        loss, acc = evaluate(self.model, self.task, self.evaluation, self.autocast, partial)
        for r in indices:
            run = self.runs[r]
            self.save(r, final=True)
            final = {
                "accuracy": None if math.isnan(acc[r]) else float(acc[r]), "loss": float(loss[r]),
                "steps": run.step, "chance": self.task.chance,
                **final_eval_fields(self.task, len(self.evaluation), self.exhaustive),
                "seconds": round(time.perf_counter() - self.started, 3),
                "group_size": self.group_size, "threads": torch.get_num_threads(), "precision": self.precision,
                "device": str(self.device), "step_mode": self.step_mode(),
                **(self.trial.metrics() if self.trial is not None else {}),
            }
            curve = self.store.metric_columns(run.id, "eval").get("eval", {})
            final.update(best_and_lost(curve, final["accuracy"], run.config.train.target_accuracy, len(self.probe)))
            if partial:
                final["partial_losses"] = {name: float(value[r]) for name, value in partial.items()}
            self.store.add_artifact(run.id, "checkpoint", WEIGHTS, {"step": run.step})
            self.store.finish_run(run.id, final, status="done", step=run.step)
            self.tracker.finish(run.id, "done", final)
            self.results[run.id] = final

    def leave(self, indices: list[int]) -> None:
        """Drop these runs from every tensor of the group; the others continue untouched."""
        if not indices:
            return
        keep = [r for r in range(len(self.runs)) if r not in indices]
        for r in indices:
            self.runs[r].stream.close()
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.model.select_runs(index)
        self.opt.select_runs(index, list(self.model.parameters()))
        self.sums = self.sums[index]
        self.loss_sums, self.hit_sums = self.sums.unbind(1)
        self.step_losses = self.step_losses[index]
        self.batches.select_runs(keep)
        self.runs = [self.runs[r] for r in keep]
        if self.graphed is not None:  # the graph read and wrote the tensors just replaced: capture again
            self.graphed.reset()
        if self.trial is not None:
            self.trial.restart()

    def save(self, r: int, final: bool = False) -> None:
        """Checkpoint run r: weights, optimizer state, data stream, and the train metrics since the last log."""
        run = self.runs[r]
        state = {**self.model.run_state_dict(r), **self.opt.run_state_dict(r, self.names)}
        tensors = {k: v.cpu() for k, v in state.items()}
        loss_sum, correct = self.sums[r].tolist()
        sums = {"loss": float(loss_sum).hex(), "correct": float(correct).hex(), "seen": run.seen}
        # the mode the step trains in (None while train.compile auto is still timing both): a resumed run keeps it
        compiled = None if self.trial is not None and self.trial.chosen is None else self.compiling
        extra = {"stream": run.stream.state(), "train_sums": sums, "final": final, "compiled": compiled}
        save_checkpoint(run.folder, tensors, run.step, extra, Owner.of(run.config))

    def keep(self, r: int) -> None:
        """Keep run r's weights of this step (``train.keep_checkpoints``): ``history/step-NNNNNNN.safetensors``."""
        run = self.runs[r]
        name = f"history/step-{run.step:07d}.safetensors"
        path = self.store.artifact_path(run.id, "history", name)
        weights = {k: v.cpu() for k, v in self.model.run_state_dict(r).items()}
        atomic_write_bytes(path, save(weights, metadata={"step": str(run.step)}))
        self.store.add_artifact(run.id, "history", name, {"step": run.step})

    def resume(self, r: int) -> None:
        """Continue run r from its checkpoint, if it has one (weights, optimizer, data stream, step).

        A checkpoint that is corrupted, belongs to another run or does not fit the run's config raises
        CheckpointError (a UserError) and marks the run failed; the checkpoint itself is left as it is.
        """
        run = self.runs[r]
        try:
            loaded = load_checkpoint(run.folder, Owner.of(run.config), layout_of(run.config))
            if loaded is not None:
                self._load(r, *loaded)
        except CheckpointError as e:
            self.store.set_status(run.id, "failed", error=str(e))
            raise

    def _load(self, r: int, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
        run = self.runs[r]
        try:  # names, dtypes and shapes were checked on the file's header (layout_of)
            step, stream, sums = int(meta["step"]), meta["stream"], meta.get("train_sums")
            if step < 0 or not 0 <= int(stream["pos"]) <= run.stream.steps_per_chunk:
                raise ValueError(f"step {step} or data-stream position {stream['pos']} out of range")
            # load_run_state_dict checks every weight's name and shape before it writes anything
            self.model.load_run_state_dict(r, {k: v for k, v in tensors.items() if not k.startswith("optimizer.")})
            self.opt.load_run_state_dict(r, self.names, tensors)
            run.stream.restore(stream, step)
            self.batches.reload(r)
            if sums is not None:  # format 2: the train metrics accumulated since the last log point
                self.sums[r, 0], self.sums[r, 1] = float.fromhex(sums["loss"]), float.fromhex(sums["correct"])
                run.seen = int(sums["seen"])
        except (KeyError, ValueError, TypeError, RuntimeError, IndexError, AttributeError) as e:
            detail = " ".join(str(e).split())[:200] or type(e).__name__
            raise CheckpointError(
                f"checkpoint in {run.folder} does not fit run {run.id}'s config ({detail}); nothing was changed; "
                f"delete {run.folder} to start the run again from step 0"
            ) from None
        run.step = step
        run.final = bool(meta.get("final", False))  # the run's own final word (the owner was checked)
        if self.train.compile == "auto" and isinstance(meta.get("compiled"), bool):
            self.keep_mode(meta["compiled"])


TERMINAL = ("done", "diverged")  # a re-run skips these: their outcome is recorded and would not change


class _StopRequest:
    requested = False


@contextlib.contextmanager
def graceful_interrupt() -> Iterator[_StopRequest]:
    """A first SIGINT (Ctrl-C) or SIGTERM (what ``timeout``, schedulers and Ray send) asks the training loop to
    stop after the current step; a second one stops now.

    Only in the main thread (signal handlers live there); elsewhere ``requested`` simply stays False.
    """
    stop = _StopRequest()
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        yield stop
        return

    def handler(signum: int, frame: Any) -> None:
        if stop.requested:
            raise KeyboardInterrupt
        stop.requested = True

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def train_group(configs: list[RunConfig], store: Store, progress: Callable[[int], None] | None = None,
                resume: bool = True, tracker: Tracker | None = None) -> dict[str, dict[str, Any]]:
    """Train every run in ``configs`` (one group) to completion; returns final metrics by run id.

    Runs already done (or diverged) in the store are skipped; a group that needs more memory than the machine
    can give raises ResourceError before anything is built (``footprint``); runs with a usable checkpoint resume
    from it, and a checkpoint that is not usable raises CheckpointError before any step. Ctrl-C (SIGINT, in the main
    thread) stops after the current step: every run still training is checkpointed and marked
    ``interrupted``, then KeyboardInterrupt propagates; a second Ctrl-C stops at once (a checkpoint being
    written is still finished first). A worker killed outright leaves its runs ``running``; a re-run resumes
    them from their last checkpoint. ``tracker`` mirrors each run's start, metrics rows and end
    (``training.tracking``).
    """
    if len({group_key(c) for c in configs}) != 1:
        raise ValueError("train_group: runs of one group must share everything but seed and lr")
    ids = [store.create_run(c.to_dict(), c.task.name, c.model.name) for c in configs]
    records = {i: store.get_run(i) for i in ids}
    results = {i: records[i]["final"] for i in ids if records[i]["status"] == "done"}
    todo = [(c, i) for c, i in zip(configs, ids, strict=True) if records[i]["status"] not in TERMINAL]
    if not todo:
        return results
    check_group([c for c, _ in todo])  # a group that cannot fit is refused before anything is allocated
    group = Group(todo, store, len(configs), tracker)
    if resume:
        for r in range(len(group.runs)):
            group.resume(r)
    for run in group.runs:
        group.tracker.start(run.id, run.config.to_dict())
    with graceful_interrupt() as stop:
        try:
            # at the end, or killed between the final checkpoint and recording the result: finish now
            ended = [r for r, run in enumerate(group.runs) if run.at_end or run.final]
            group.finish(ended)
            group.leave(ended)
            for run in group.runs:
                store.set_status(run.id, "running", step=run.step)
            while group.runs:
                group.step()
                if progress:
                    progress(len(group.runs))
                group.after_step()
                if stop.requested:
                    break
            if stop.requested:  # checkpoint what is left, then stop the sweep (even if this group is done)
                for r in range(len(group.runs)):
                    group.save(r)
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            for run in group.runs:
                store.set_status(run.id, "interrupted", step=run.step)
                group.tracker.finish(run.id, "interrupted", None)
            raise
        except Exception as e:
            for run in group.runs:
                store.set_status(run.id, "failed", step=run.step, error=f"{type(e).__name__}: {e}")
                group.tracker.finish(run.id, "failed", None)
            raise
    return {**results, **group.results}
