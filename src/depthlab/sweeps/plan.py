"""How long a list of runs takes on this device, measured before training it (``depthlab reproduce … --plan``).

The runs are put into the groups the local executor would train (``sweeps.local.plan_groups``: runs of one shape
train together, a run axis on every tensor). For every distinct group shape (the group key and the number of runs
in it) one group is built in a scratch store that is deleted afterwards — nothing is recorded in the user's
store — and timed: building it (model, optimizer, the evaluation set) and its warm-up (the first step, a
compile with ``train.compile: on``, on a GPU the eager steps and the capture of the step's CUDA graph: once per
group, so counted with the build), a few optimizer steps after it, the device synchronised before and after
(a GPU queues graph replays: timing without it measured only the queueing, and seed 001's paper-scale plan on an H200
read 1 minute for a study that trained for 94 s with eight workers), and one evaluation on its probe set. A group
then costs

    build + steps × step + log points × probe evaluation + one final evaluation,

the final evaluation scaled from the probe's by the number of examples (the evaluation set is built at the probe's
size where the task has an ``eval_size``, so a plan never builds a paper-scale evaluation set). Groups train one
after another in one process, so the projection is their sum. It is an **upper bound** in steps: every run is
counted to its last step, while runs that reach ``train.target_accuracy`` (or a capability study's stop, or a
study that settles early) stop sooner; checkpoints and data-sampling spikes are not counted.

Past ``max_seconds`` of measuring, the remaining shapes are estimated instead of measured: their step and
evaluation times scaled from the measured shapes' by their multiply-adds (``work``), never below the fastest step
measured (small models on a GPU are bound by kernel launches, not multiply-adds), and marked ``measured: false``.
:func:`plan_runs` is what ``atlas``-style estimates call.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import torch

from ..config import RunConfig
from ..store import Store
from ..training.data import eval_examples
from ..training.device import COMPILED_WARMUP_STEPS, GRAPH_WARMUP_STEPS, resolve_device, synchronize
from ..training.engine import Group, group_key
from ..training.evaluate import evaluate
from ..training.footprint import check_group
from .local import plan_groups, work

MIN_SECONDS = 0.25  # time at least this long of steps per shape …
MIN_STEPS, MAX_STEPS = 3, 50  # … and at least / at most this many steps
WARMUP_STEPS = max(GRAPH_WARMUP_STEPS, COMPILED_WARMUP_STEPS)  # the most a group takes before its graph replays


@dataclass
class Timing:
    """One group shape measured (or estimated): seconds to build, per step, per probe evaluation."""

    build: float
    step: float
    probe: float
    probe_examples: int
    steps_timed: int
    measured: bool = True


def _scratch(config: RunConfig, steps: int) -> RunConfig:
    """The run as the plan trains it: ``steps`` steps, no checkpoints kept, the evaluation set at most twice the
    probe's size where the task draws a fixed one (``eval_size``). ``train.compile: auto`` is planned as ``off``:
    auto keeps the faster of the eager and the compiled step, so the eager step bounds its steps (its trial would
    otherwise compile in the middle of the timed steps)."""
    compile_mode = "off" if config.train.compile == "auto" else config.train.compile
    train = config.train.model_copy(update={"steps": steps, "checkpoint_every": None, "keep_checkpoints": False,
                                            "target_accuracy": None, "compile": compile_mode})
    task = config.task
    if "eval_size" in type(task).model_fields:
        task = task.model_copy(update={"eval_size": min(task.eval_size, 2 * config.train.eval_examples)})
    return config.model_copy(update={"train": train, "task": task})


def measure(group: list[RunConfig], min_seconds: float = MIN_SECONDS) -> Timing:
    """Build ``group`` in a scratch store and time it (see the module docstring)."""
    scratch = [_scratch(c, 1 + WARMUP_STEPS + MAX_STEPS) for c in group]
    device = resolve_device(group[0].train.device)
    check_group(scratch)  # a group that cannot fit is refused (one line) before anything is allocated
    with tempfile.TemporaryDirectory(prefix="depthlab-plan-") as tmp:
        store = Store(tmp)
        ids = [store.create_run(c.to_dict(), c.task.name, c.model.name) for c in scratch]
        started = time.perf_counter()
        built = Group(list(zip(scratch, ids, strict=True)), store, len(scratch))
        build = time.perf_counter() - started
        try:
            # the first chunk of data, lazy allocations, a compile, a GPU's capture: once per group, so counted with
            # the build, and over before the steps are timed (a compiled step is captured after more warm-up steps)
            started = time.perf_counter()
            for done in range(1, 2 + WARMUP_STEPS):
                built.step()
                if done > GRAPH_WARMUP_STEPS and (built.graphed is None or built.graphed.replaying):
                    break
            synchronize(device)
            build += time.perf_counter() - started
            steps, started = 0, time.perf_counter()
            while steps < MAX_STEPS and (steps < MIN_STEPS or time.perf_counter() - started < min_seconds):
                built.step()
                steps += 1
            synchronize(device)
            step = (time.perf_counter() - started) / steps
            started = time.perf_counter()
            evaluate(built.model, built.task, built.probe, built.autocast, {})
            synchronize(device)
            probe = time.perf_counter() - started
        finally:
            for run in built.runs:
                run.stream.close()
    return Timing(build, step, probe, len(built.probe), steps)


def _estimate(config: RunConfig, runs: int, measured: list[tuple[RunConfig, int, Timing]]) -> Timing:
    """A shape not measured: the measured shapes' seconds per unit of :func:`work` (per trained example and per
    evaluated example; medians), times this shape's; its step never faster than the fastest measured one."""
    mine = work(config, runs)
    train = statistics.median(t.step / (work(c, r) * c.train.batch_size) for c, r, t in measured)
    fastest = min(t.step for _, _, t in measured)
    probe = statistics.median(t.probe / (work(c, r) * t.probe_examples) for c, r, t in measured)
    examples = min(config.train.eval_examples, eval_examples(config.task))
    return Timing(statistics.median(t.build for _, _, t in measured),
                  max(fastest, train * mine * config.train.batch_size),
                  probe * mine * examples, examples, 0, measured=False)


def group_seconds(config: RunConfig, timing: Timing) -> dict[str, float]:
    """The projected seconds of one group of ``config``'s shape: building, steps, log-point and final
    evaluations."""
    steps = config.train.steps
    logs = math.ceil(steps / config.train.eval_every)
    final = timing.probe * eval_examples(config.task) / max(timing.probe_examples, 1)
    parts = {"build": timing.build, "steps": steps * timing.step, "evaluation": logs * timing.probe + final}
    return {**parts, "total": sum(parts.values())}


def plan_runs(configs: list[RunConfig], group_size: int | None = None, max_seconds: float | None = None,
              done: set[str] | None = None) -> dict[str, Any]:
    """The projected wall time of training ``configs`` on this device (see the module docstring).

    ``done``: run ids already finished (left out, as a sweep skips them); ``max_seconds``: measuring time after
    which the remaining shapes are estimated. Returns ``{"runs", "done", "groups", "shapes", "steps" (optimizer
    steps of all groups), "run_steps" (of all runs), "projected_seconds", "upper_bound": true, "measured_seconds",
    "device", "threads", "shapes_detail": [{"task", "model", "runs_per_group", "groups", "steps", "seconds_per_step",
    "probe_seconds", "build_seconds", "projected_seconds", "measured"}]}``."""
    todo = [c for c in configs if done is None or Store.run_id(c.to_dict()) not in done]
    groups = plan_groups(todo, group_size) if todo else []
    by_shape: dict[tuple[str, int], list[list[RunConfig]]] = {}
    for group in groups:
        by_shape.setdefault((group_key(group[0]), len(group)), []).append(group)
    started = time.perf_counter()
    timings: dict[tuple[str, int], Timing] = {}
    measured: list[tuple[RunConfig, int, Timing]] = []
    for key, shaped in by_shape.items():
        first = shaped[0]
        if max_seconds is not None and measured and time.perf_counter() - started > max_seconds:
            timings[key] = _estimate(first[0], len(first), measured)
        else:
            timings[key] = measure(first)
            measured.append((first[0], len(first), timings[key]))
    detail, total = [], 0.0
    for key, shaped in by_shape.items():
        config, timing = shaped[0][0], timings[key]
        seconds = group_seconds(config, timing)
        total += seconds["total"] * len(shaped)
        detail.append({"task": config.task.name, "model": config.model.name, "runs_per_group": key[1],
                       "groups": len(shaped), "steps": config.train.steps, "seconds_per_step": timing.step,
                       "probe_seconds": timing.probe, "build_seconds": timing.build,
                       "projected_seconds": seconds["total"] * len(shaped), "measured": timing.measured})
    device = str(resolve_device(groups[0][0].train.device)) if groups else "cpu"
    return {"runs": len(todo), "done": len(configs) - len(todo), "groups": len(groups), "shapes": len(by_shape),
            "steps": sum(g[0].train.steps for g in groups), "run_steps": sum(c.train.steps for c in todo),
            "projected_seconds": total, "upper_bound": True,
            "measured_seconds": time.perf_counter() - started, "device": device,
            "threads": torch.get_num_threads(), "shapes_detail": detail}


def plan_preset(preset: Any, group_size: int | None = None, max_seconds: float | None = None,
                done: set[str] | None = None) -> dict[str, Any]:
    """:func:`plan_runs` of every run a preset's scale may train (a study's every depth: an upper bound too), with
    the preset's name and scale."""
    return {"preset": preset.name, "scale": preset.scale,
            **plan_runs(preset.every_run, group_size, max_seconds, done)}
