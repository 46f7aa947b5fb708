"""How far stacking runs can take a bench case past its plain loop on this machine: a step's fixed cost and its cost
per run (issue 45 item 5).

    python benchmarks/overhead_bound.py [--case icqa-quick] [--runs 1,2,4,8,16,32] [--rounds 3] [--seconds 1] [--json]

The engine and the plain loop (``training.throughput``) train the same model class with the same kernels, so a
step of R runs costs about T(R) = O + C·R (O: what a step costs whatever its size — Python, dispatch, the
optimizer's and the bookkeeping's operations; C: one run's arithmetic and memory traffic), and the plain loop's
step T_p = O_p + C (its own fixed cost, the same C). The engine's ratio to the plain loop at R runs is then
R·T_p / (O + C·R), which no number of runs lifts above T_p / C. Measured in CPU seconds of this process
(``time.process_time``: other processes' load does not count, though what they do to the caches does), rounds
interleaved, medians; O and C by least squares over the run counts. ``speedup_needed`` is how much faster one run's
arithmetic (C, in both loops alike) would have to get for the engine to reach ``--target`` times the plain loop at
16 runs (null: no speed-up of C reaches it, the fixed costs alone forbid it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from depthlab.training.bench_cases import chosen_cases
from depthlab.training.throughput import bench_configs, engine, plain_loop


def speedup_needed(plain_fixed: float, fixed: float, per_run: float, target: float, runs: int = 16) -> float | None:
    """The factor s by which C must shrink (in both loops) for runs·(O_p + C/s) / (O + runs·C/s) = target."""
    room = runs * plain_fixed - target * fixed
    return None if room <= 0 else per_run * runs * (target - 1) / room


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="icqa-quick")
    parser.add_argument("--runs", default="1,2,4,8,16,32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--target", type=float, default=6.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    case = chosen_cases([args.case])[0]
    run_counts = [int(r) for r in args.runs.split(",")]
    base = bench_configs(case, 1, "fp32")[0]
    batch = base.train.batch_size
    plain: list[float] = []
    steps: dict[int, list[float]] = {r: [] for r in run_counts}
    for _ in range(args.rounds):
        plain.append(batch / plain_loop(base, args.seconds, clock=time.process_time))
        for r in run_counts:
            rate, _ = engine(bench_configs(case, r, "fp32"), args.seconds, clock=time.process_time)
            steps[r].append(r * batch / rate)
    t_plain = statistics.median(plain)
    t = {r: statistics.median(v) for r, v in steps.items()}
    per_run, fixed = np.polyfit(run_counts, [t[r] for r in run_counts], 1)
    result = {
        "case": args.case, "clock": "process CPU seconds", "rounds": args.rounds,
        "plain_step_ms": round(t_plain * 1e3, 4),
        "engine_step_ms": {r: round(t[r] * 1e3, 4) for r in run_counts},
        "ratio": {r: round(r * t_plain / t[r], 2) for r in run_counts},
        "fixed_ms": round(fixed * 1e3, 4), "per_run_ms": round(per_run * 1e3, 4),
        "plain_fixed_ms": round((t_plain - per_run) * 1e3, 4),
        "bound": round(t_plain / per_run, 2), "target": args.target,
        "speedup_needed": (None if (s := speedup_needed(t_plain - per_run, fixed, per_run, args.target)) is None
                           else round(s, 2)),
    }
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
