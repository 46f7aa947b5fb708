"""Sampling speed of the two training-data streams, every task, on one CPU thread (issue 45, item 1).

    python benchmarks/stream_sampling.py [--runs 16] [--batch 64] [--rounds 3] [--seconds 0.3] [--task NAME …] [--json]

Stream 1 is what a run's ``DataStream`` does: ``task.sample`` of one chunk (``CHUNK_EXAMPLES`` examples) with numpy.
Stream 2 is what a group's ``CounterBatches`` does: ``task.sample_counter`` of one step for ``--runs`` runs of
``--batch`` examples each, with torch on the CPU. Each task runs at its default settings. Both are timed in the same
process, interleaved round by round; each figure is the best round's examples per second, and ``ratio`` is stream 2
over stream 1. (Sampling only: stream 1 also runs on a background thread while the model trains, stream 2 in line.)
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from depthlab.tasks import TASKS
from depthlab.tasks.counter import Counter, seed_keys
from depthlab.training.data import CHUNK_EXAMPLES
from vmap_vs_run_axis import rate  # examples per second of a step, best kept to one definition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--task", action="append", choices=sorted(TASKS), help="default: every task")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    names = args.task or sorted(TASKS)
    tasks = {name: TASKS[name]() for name in names}
    keys = seed_keys(torch.arange(args.runs))
    best: dict[str, list[float]] = {name: [0.0, 0.0] for name in names}
    for round_ in range(args.rounds):
        for name, task in tasks.items():
            rng = np.random.default_rng(round_)
            steps = torch.zeros(args.runs, dtype=torch.int64)

            def counter_step(task=task, steps=steps) -> None:
                task.sample_counter(Counter(keys, steps, args.batch))
                steps += 1

            host = rate(lambda task=task, rng=rng: task.sample(CHUNK_EXAMPLES, rng, "train"), CHUNK_EXAMPLES,
                        args.seconds)
            device = rate(counter_step, args.runs * args.batch, args.seconds)  # the first call warms the tables
            best[name] = [max(best[name][0], host), max(best[name][1], device)]
    rows = {name: {"stream1_examples_per_s": round(host), "stream2_examples_per_s": round(device),
                   "ratio": round(device / host, 3)} for name, (host, device) in best.items()}
    result = {"runs": args.runs, "batch": args.batch, "chunk": CHUNK_EXAMPLES, "rounds": args.rounds,
              "threads": 1, "tasks": rows}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'task':24} {'stream 1 ex/s':>14} {'stream 2 ex/s':>14} {'2 / 1':>7}")
    for name, row in rows.items():
        print(f"{name:24} {row['stream1_examples_per_s']:>14,} {row['stream2_examples_per_s']:>14,} "
              f"{row['ratio']:>7.2f}")


if __name__ == "__main__":
    main()
