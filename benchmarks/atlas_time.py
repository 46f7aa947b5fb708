"""How long an atlas scale may take on one CPU core: measured CPU time per step at each cell's sizes × the steps.

For every study of ``depthlab atlas --scale SCALE`` and every cell (size, width) of it, the engine trains the
cell's group (its seeds together, as the climb does) at the study's first two depths for ``--seconds`` each and
the process's CPU time per step is read (one thread: ``OMP_NUM_THREADS=1``); the time of a group step is taken as
linear in depth through those two points, and the cell's most time is the sum over all its depths of
``steps × seconds per step``: every cell climbed to the study's last depth and every run trained to its last step,
so an upper bound (runs that reach the stop accuracy and cells settled early cost less; evaluation is left out).
Prints a line per study, then one JSON object.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/atlas_time.py --scale paper --seconds 1
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from depthlab.store import Store
from depthlab.sweeps.atlas import load_atlas
from depthlab.sweeps.climb import plan
from depthlab.training.engine import Group


def group_seconds(runs: list, seconds: float) -> float:
    """CPU seconds per step of one group of ``runs`` (the process's CPU time, data threads included: on a shared
    machine the wall clock measures the other jobs too)."""
    with tempfile.TemporaryDirectory() as folder:
        group = Group([(c, Store.run_id(c.to_dict())) for c in runs], Store(folder), len(runs))
        group.step()  # warm-up
        steps, cpu, wall = 0, time.process_time(), time.perf_counter()
        while time.perf_counter() - wall < seconds or steps < 3:
            group.step()
            steps += 1
        return (time.process_time() - cpu) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="paper")
    parser.add_argument("--tasks")
    parser.add_argument("--families")
    parser.add_argument("--seconds", type=float, default=1.0, help="measuring time per group and depth")
    args = parser.parse_args()
    started = time.perf_counter()
    atlas = load_atlas(args.scale, args.tasks, args.families)
    studies = []
    for entry in atlas.studies:
        cells = []
        for cell, by_depth in plan(entry.study):
            depths = sorted(by_depth)
            measured = {d: group_seconds(by_depth[d], args.seconds) for d in depths[:2]}
            d0, d1 = (depths + depths)[:2]
            slope = (measured[d1] - measured[d0]) / (d1 - d0) if d1 != d0 else 0.0
            per_step = {d: max(measured[d0] + slope * (d - d0), 1e-6) for d in depths}
            steps = by_depth[depths[0]][0].train.steps
            cells.append({"label": cell.label, "seconds_per_step": {str(d): round(s, 5) for d, s in per_step.items()},
                          "most_seconds": round(sum(steps * s for s in per_step.values()), 1)})
        studies.append({"task": entry.task, "family": entry.family, "cells": cells,
                        "most_seconds": round(sum(c["most_seconds"] for c in cells), 1)})
        print(f"{entry.task:>18} {entry.family:<18} {studies[-1]['most_seconds'] / 3600:8.2f} h", flush=True)
    total = sum(s["most_seconds"] for s in studies)
    print(json.dumps({"scale": args.scale, "threads": torch.get_num_threads(), "most_seconds": round(total),
                      "most_hours": round(total / 3600, 2), "studies": studies,
                      "measured_in_seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
