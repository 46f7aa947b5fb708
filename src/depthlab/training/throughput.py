"""Throughput of the batched engine against a plain one-run-at-a-time loop, and against the machine's peak.

Measured in one process, one case after another, so every ratio compares numbers taken minutes apart on
the same machine. Used by ``benchmarks/throughput.py`` and ``depthlab bench``.

- peak: median rate of 2048×2048 matrix products (fp32 and bf16);
- plain loop: the same model class with one run, ``torch.optim`` (the config's optimizer), batches drawn from
  the task as the engine draws them (vectorised, a chunk of steps per call) — a careful hand-written loop;
- engine: ``Group.step`` for R runs stacked on the run axis, data streams included; with ``compile`` (``bench
  --compile on`` or ``both``) also, or instead, with ``train.compile: on`` (on a GPU: the compiled step captured
  as the CUDA graph; its compile happens in the untimed warm-up steps).

FLOPs count the matrix products the model executes (forward, and twice that for backward).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from ..config import RunConfig, parse_run
from ..models import TaskShapes, build_model
from ..store import Store
from .bench_cases import CASES, Case, TorchLSTM, chosen_cases
from .data import DataStream
from .device import COMPILED_WARMUP_STEPS, CPU, autocast, prepare, release, resolve_device, synchronize, to_device
from .engine import Group
from .objectives import per_run_loss

__all__ = ["CASES", "Case", "bench_configs", "engine", "forward_flops", "plain_loop", "run_benchmark"]


def peak_gflops(dtype: torch.dtype, device: torch.device = CPU, size: int = 2048, repeats: int = 5,
                budget: float = 1.0) -> float:
    """The measured matrix-product rate at ``dtype`` (fp32 on CUDA: TF32, as training uses it): the median of
    ``repeats`` products of ``size`` × ``size`` matrices, or of the largest size from 256 up whose product is
    expected to take under ``budget`` seconds (a size is doubled only while 8 times its warm-up product stays under
    the budget: a CPU without bf16 matrix units, AVX2 only, multiplies bf16 through a slow fallback of about
    0.5 GFLOP/s, where one 1024³ product takes 3 s and one 2048³ product half a minute)."""
    if device.type != "cpu":
        size *= 4  # a GPU needs larger products to be busy (and has no slow fallback: no budget there)
    n = min(256, size) if device.type == "cpu" else size
    while True:
        a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
        synchronize(device)
        start = time.perf_counter()
        a @ b  # warm-up
        synchronize(device)
        if n >= size or 8 * (time.perf_counter() - start) > budget:  # the next size costs 8 times this one
            break
        n *= 2
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def forward_flops(config: RunConfig) -> float:
    """Matrix-product FLOPs of one example's forward pass, as the model computes it: written out for the
    attention-only, GPT-style and LSTM models, counted by ``torch.utils.flop_counter`` on one example for the others."""
    task, m = config.task, config.model
    n, d_vocab, classes = task.seq_len, len(task.vocab), len(task.labels)
    if m.name == "lstm":  # aten::lstm is one operation to the counter: its gates, 4·width × 2·width per position
        return m.layers * n * 2 * (4 * m.width) * (2 * m.width) + 2 * m.width * classes
    if m.name not in ("attention_only", "transformer"):
        return counted_flops(config)
    if m.name == "attention_only":
        w = m.width or d_vocab + n
        flops = 0.0
        for layer, h in enumerate(m.heads_per_layer):
            q = 1 if layer == m.layers - 1 else n  # the last layer computes only the read-out query
            flops += h * (2 * q * w * w + 2 * q * n * w + 2 * q * n * w + 2 * q * w * w)
        return flops + 2 * w * classes
    d, inner = m.width, m.heads * m.head_size
    per_layer = 3 * 2 * n * d * inner + 2 * 2 * n * n * inner + 2 * n * inner * d
    if m.mlp:
        per_layer += 2 * 2 * n * d * (m.d_mlp or 4 * d)
    return m.layers * per_layer + 2 * d * classes


def counted_flops(config: RunConfig) -> float:
    """FLOPs of the matrix products (and convolutions) in one example's forward pass, on the CPU."""
    model = build_model(config.model, TaskShapes.of(config.task), [0])
    inputs = torch.as_tensor(config.task.sample(1, np.random.default_rng(0), "train").inputs)[None]
    with FlopCounterMode(display=False) as counter:  # not under no_grad: its module tracker needs autograd
        model(inputs)
    return float(counter.get_total_flops())


def plain_model(config: RunConfig, device: torch.device) -> torch.nn.Module:
    """The plain loop's model: the same class with one run, or for the LSTM ``torch.nn.LSTM`` itself."""
    shapes = TaskShapes.of(config.task)
    if config.model.name == "lstm":
        m = config.model
        return TorchLSTM(shapes.vocab_size, m.width, m.layers, shapes.n_classes).to(device)
    return build_model(config.model, shapes, [0]).to(device)


def bench_configs(case: Case, runs: int, precision: str, device: str = "cpu",
                  compile: str = "off") -> list[RunConfig]:
    return [parse_run({**case.raw, "train": {**case.raw["train"], "precision": precision, "steps": 10**6,
                                             "eval_every": 10**6, "device": device, "compile": compile},
                       "seed": s})
            for s in range(runs)]


# Untimed steps before each measurement: the eager warm-ups (a compiled step's: its compile among them), a CUDA
# graph's capture and a replay, so that one-time costs (the compile, the capture, kernels loaded at their first call)
# stay out of a 0.5-s window. On an H100 (one full `bench --device cuda` each, the same day) retrieval at 1 run went
# from 0.6× the plain loop with 79 % of the time counted as data to 4.1× and 3 %; the other rates moved both ways, as
# one round's rates do.
WARMUP_STEPS = COMPILED_WARMUP_STEPS + 2


def _warm_up(fn, device: torch.device) -> None:
    for _ in range(WARMUP_STEPS):
        fn()
    synchronize(device)  # their queued work is not timed


Clock = Callable[[], float]


def _time(fn, min_seconds: float, device: torch.device = CPU, clock: Clock = time.perf_counter) -> tuple[int, float]:
    steps, start = 0, clock()
    while clock() - start < min_seconds:
        fn()
        steps += 1
    synchronize(device)
    return steps, clock() - start


def plain_loop(config: RunConfig, min_seconds: float, clock: Clock = time.perf_counter) -> float:
    """Examples per second of one run trained alone, written as a careful hand loop (seconds of ``clock``: wall
    time, or ``time.process_time`` for the CPU time of this process, which other processes do not inflate)."""
    task, device = config.task, resolve_device(config.train.device)
    prepare(device, config.train.precision)
    model = plain_model(config, device)
    t = config.train
    opt = (torch.optim.SGD(model.parameters(), lr=t.lr) if t.optimizer == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay))
    stream = DataStream(task, 0, t.batch_size)  # the engine's chunked sampling, so data costs the same
    batch = t.batch_size
    mixed = autocast(device, config.train.precision)

    def step() -> None:
        data = stream.next()
        x, y = to_device(data.inputs, device)[None], to_device(data.targets, device)[None]
        with mixed:
            logits = model(x)
            logits = logits if isinstance(logits, torch.Tensor) else logits.outputs
        opt.zero_grad()
        per_run_loss(logits, y, task.loss).sum().backward()
        opt.step()

    _warm_up(step, device)
    steps, seconds = _time(step, min_seconds, device, clock)
    return steps * batch / seconds


def engine(configs: list[RunConfig], min_seconds: float, clock: Clock = time.perf_counter) -> tuple[float, float]:
    """Examples per second (of ``clock``, as :func:`plain_loop`) of the engine training ``configs`` as one group,
    and the share of the step time spent waiting for data (wall time, measured inside the steps, so it includes
    what sampling does to the caches; a share of wall time only with the default clock)."""
    with tempfile.TemporaryDirectory() as folder:
        group = Group([(c, Store.run_id(c.to_dict())) for c in configs], Store(folder), len(configs))
        _warm_up(group.step, group.device)
        group.data_seconds = 0.0
        steps, seconds = _time(group.step, min_seconds, group.device, clock)
    examples = steps * len(configs) * configs[0].train.batch_size
    return examples / seconds, group.data_seconds / seconds


def check_sizes(run_counts: list[int], cases: list[str] | None = None, device: str = "cpu") -> list[dict[str, Any]]:
    """Before anything is allocated, as a sweep is checked: at most ``MAX_GRID_POINTS`` runs in a group (else a
    UserError naming --runs), and every case's group at every size within the memory budget — on a GPU, the parts
    that live there within its free memory (``training.footprint``). Returns what does not fit, to be left out:
    ``{"name", "runs", "reason"}`` with the one-line reason; when nothing fits, the first reason is the error."""
    from ..config import MAX_GRID_POINTS
    from ..errors import ResourceError, UserError
    from .footprint import check_runs

    largest = max(run_counts)
    if largest > MAX_GRID_POINTS:
        raise UserError(f"--runs: group sizes of at most {MAX_GRID_POINTS:,} runs, as a sweep may hold (got "
                        f"{largest:,})")
    chosen, counts = chosen_cases(cases), sorted(set(run_counts))
    left_out, first = [], None
    for case in chosen:
        config = bench_configs(case, 1, "fp32", device)[0]
        for runs in counts:
            try:
                check_runs(config, runs, fix="lower --runs")
            except ResourceError as e:
                first = first or e
                left_out.append({"name": case.name, "runs": runs, "reason": str(e)})
    if first is not None and len(left_out) == len(chosen) * len(counts):
        raise first
    return left_out


def run_benchmark(run_counts: list[int], cases: list[str] | None = None, min_seconds: float = 1.0,
                  progress=None, rounds: int = 3, device: str = "cpu",
                  left_out: list[dict[str, Any]] | None = None, compile_modes: tuple[str, ...] = ("off",)
                  ) -> dict[str, Any]:
    """Every case at every group size, ``rounds`` times interleaved (plain loop, then each group size), each
    rate the median of its rounds: this machine's speed drifts by ±15 % over minutes, and interleaving
    puts the drift into every measurement alike instead of into the ratios. On a GPU every default case runs
    in fp32 (TF32 matmuls) and bf16, the family cases in fp32; on the CPU, bf16 for icqa-paper only. The
    (case, group size) pairs in ``left_out`` (``check_sizes``: they cannot fit) are not measured; a case left out
    at every size is not measured at all. What each measurement built is given back to the device before the
    next one (``device.release``). ``compile_modes`` (``off``, ``on`` or both): the engine's step as it is,
    compiled (``train.compile: on``), or each in turn (rows say which: ``compile``); the plain loop is not
    compiled."""
    skip = {(entry["name"], entry["runs"]) for entry in left_out or []}
    where = resolve_device(device, "--device")
    fp32 = prepare(where, "fp32")
    peak = peak_gflops(torch.float32, where)
    peak_bf16 = peak_gflops(torch.bfloat16, where)
    rows = []
    chosen = chosen_cases(cases)
    both = where.type != "cpu"
    # the family cases in fp32 (TF32) only: 24 of them in both precisions would not fit gpu_check.sh's 8 minutes
    plan = [(c, p) for c in chosen
            for p in (["fp32", "bf16"] if (both and c.group == "default") or c.name == "icqa-paper" else ["fp32"])]
    for case, precision in plan:
        counts = [runs for runs in run_counts if (case.name, runs) not in skip]
        if not counts:
            continue
        base = bench_configs(case, 1, precision, device)[0]
        flops = 3 * forward_flops(base)
        plain_rates: list[float] = []
        measured: dict[tuple[int, str], list[tuple[float, float]]] = {
            (runs, mode): [] for runs in counts for mode in compile_modes}
        for _ in range(rounds):
            plain_rates.append(plain_loop(base, min_seconds))
            release(where)
            for runs, mode in measured:
                measured[runs, mode].append(engine(bench_configs(case, runs, precision, device, mode), min_seconds))
                release(where)
        plain = statistics.median(plain_rates)
        for runs, mode in measured:
            rate = statistics.median(r for r, _ in measured[runs, mode])
            data_share = statistics.median(d for _, d in measured[runs, mode])
            rows.append({
                "name": case.name, "precision": fp32 if precision == "fp32" else precision, "runs": runs,
                "compile": mode,
                "plain_examples_per_s": round(plain, 1), "engine_examples_per_s": round(rate, 1),
                "speedup": round(rate / plain, 2), "engine_gflops": round(rate * flops / 1e9, 1),
                "fraction_of_peak": round(rate * flops / 1e9 / peak, 3), "data_fraction": round(data_share, 4),
            })
            if progress:
                progress(rows[-1])
    return {"device": str(where), "peak_gflops": round(peak, 1), "peak_gflops_bf16": round(peak_bf16, 1),
            "threads": torch.get_num_threads(), "rounds": rounds, "cases": rows, "left_out": list(left_out or []),
            "notes": {c.name: c.note for c in chosen}}
