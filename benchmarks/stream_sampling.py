"""Sampling speed of the two training-data streams, every task, on one CPU thread (issue 45, item 1).

    python benchmarks/stream_sampling.py [--runs 16] [--batch 64] [--rounds 3] [--seconds 0.3] [--task NAME …] [--json]
    python benchmarks/stream_sampling.py --base REV [--processes 2] [the options above]

Three figures per task, each the best round's examples per second:

- ``stream1``: what a run's ``DataStream`` does, ``task.sample`` of one chunk (``CHUNK_EXAMPLES`` examples, numpy);
- ``stream2_chunk``: what a group's ``CounterChunks`` does on a CPU per ``sample_counter`` call, one
  ``counter_chunk`` of ``counter_call_steps(runs, batch)`` steps for ``--runs`` runs of ``--batch`` examples (about
  as many examples as stream 1's chunk: the fair comparison);
- ``stream2_step``: what ``CounterBatches`` does on an accelerator, ``task.sample_counter`` of one step for the runs.

All three are timed in the same process, interleaved round by round; ``chunk_ratio`` and ``step_ratio`` are the
stream-2 figures over stream 1's. (Sampling only: in training both streams sample their chunks on the data thread
while the model trains.)

With ``--base REV`` the benchmark runs in fresh processes on REV's ``src`` (``git archive`` into a temporary
directory) and on this tree's, alternately (base, this, this, base, …: ``--processes`` each), so that the machine's
drift falls on both sides alike; the JSON holds every process's figures and, per task, each side's chunk and step
ratios and stream 2's best rates.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from depthlab.tasks import TASKS
from depthlab.tasks.counter import Counter, seed_keys
from depthlab.training.data import CHUNK_EXAMPLES, counter_call_steps, counter_chunk
from vmap_vs_run_axis import rate  # examples per second of a step, best kept to one definition

FIGURES = ("stream1", "stream2_chunk", "stream2_step")
HERE = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--task", action="append", choices=sorted(TASKS), help="default: every task")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--base", help="a git revision to compare with, in alternating processes")
    parser.add_argument("--processes", type=int, default=2, help="with --base: processes per side")
    args = parser.parse_args()
    if args.base:
        result = compare(args)
        print(json.dumps(result) if args.json else json.dumps(result["tasks"], indent=1))
        return
    torch.set_num_threads(1)
    names = args.task or sorted(TASKS)
    tasks = {name: TASKS[name]() for name in names}
    keys = seed_keys(torch.arange(args.runs))
    chunk_steps = counter_call_steps(args.runs, args.batch)
    best: dict[str, dict[str, float]] = {name: dict.fromkeys(FIGURES, 0.0) for name in names}
    for round_ in range(args.rounds):
        for name, task in tasks.items():
            rng = np.random.default_rng(round_)
            steps = torch.zeros(args.runs, dtype=torch.int64)

            def counter_step(task=task, steps=steps) -> None:
                task.sample_counter(Counter(keys, steps, args.batch))
                steps += 1

            def chunk(task=task, steps=steps) -> None:
                counter_chunk(task, keys, steps, chunk_steps, args.batch)
                steps += chunk_steps

            rates = {"stream1": rate(lambda task=task, rng=rng: task.sample(CHUNK_EXAMPLES, rng, "train"),
                                     CHUNK_EXAMPLES, args.seconds),
                     # the first call of each warms the task's device tables
                     "stream2_chunk": rate(chunk, chunk_steps * args.runs * args.batch, args.seconds),
                     "stream2_step": rate(counter_step, args.runs * args.batch, args.seconds)}
            best[name] = {figure: max(best[name][figure], rates[figure]) for figure in FIGURES}
    rows = {name: {**{f"{figure}_examples_per_s": round(value) for figure, value in figures.items()},
                   "chunk_ratio": round(figures["stream2_chunk"] / figures["stream1"], 3),
                   "step_ratio": round(figures["stream2_step"] / figures["stream1"], 3)}
            for name, figures in best.items()}
    result = {"runs": args.runs, "batch": args.batch, "chunk": CHUNK_EXAMPLES, "stream2_chunk_steps": chunk_steps,
              "rounds": args.rounds, "threads": 1, "tasks": rows}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'task':24} {'stream 1 ex/s':>14} {'2 chunk ex/s':>14} {'2 step ex/s':>14} {'chunk/1':>8} {'step/1':>7}")
    for name, row in rows.items():
        print(f"{name:24} {row['stream1_examples_per_s']:>14,} {row['stream2_chunk_examples_per_s']:>14,} "
              f"{row['stream2_step_examples_per_s']:>14,} {row['chunk_ratio']:>8.2f} {row['step_ratio']:>7.2f}")


def compare(args: argparse.Namespace) -> dict:
    """This benchmark on ``args.base``'s source and on this tree's, in alternating fresh processes."""
    forwarded = ["--runs", str(args.runs), "--batch", str(args.batch), "--rounds", str(args.rounds),
                 "--seconds", str(args.seconds), *(f"--task={name}" for name in args.task or [])]
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(HERE), "archive", args.base, "src"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        trees = {"base": Path(tmp), "this": HERE}
        for i in range(2 * args.processes):
            side = ("base", "this", "this", "base")[i % 4]
            env = {**os.environ, "PYTHONPATH": f"{trees[side] / 'src'}{os.pathsep}{HERE / 'benchmarks'}"}
            out = subprocess.run([sys.executable, __file__, *forwarded, "--json"], capture_output=True, text=True,
                                 check=True, env=env)
            runs.append({"side": side, **json.loads(out.stdout)})
    tasks = {}
    for name in runs[0]["tasks"]:
        tasks[name] = {f"{side}_{figure}": [r["tasks"][name][figure] for r in runs if r["side"] == side]
                       for side in ("base", "this") for figure in ("chunk_ratio", "step_ratio")}
        for side in ("base", "this"):
            for figure in ("stream2_chunk", "stream2_step"):
                tasks[name][f"{side}_{figure}_examples_per_s"] = max(
                    r["tasks"][name][f"{figure}_examples_per_s"] for r in runs if r["side"] == side)
    return {"base": args.base, "processes": args.processes, "order": [r["side"] for r in runs], "tasks": tasks,
            "runs": runs}


if __name__ == "__main__":
    main()
