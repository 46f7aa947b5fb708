"""The seed-to-seed spread behind the accuracy thresholds of the tests that train (not a test itself).

Each guarded test trains one configuration at seed 0 and asserts an accuracy or a loss. A change of summation order
(threads, kernels, grouping) moves a run as a change of seed does, only less, so a threshold is safe when every seed
clears it with room. This trains each configuration at seeds 0..N-1 on 1 and 2 threads and prints, per test, the
worst and median outcome and the threshold the test uses.

    python benchmarks/threshold_spread.py --seeds 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from depthlab.config import parse_run
from depthlab.store import Store
from depthlab.sweeps.local import run_local

INDEX_LOOKUP_FAMILIES = [{"name": "lstm", "width": 16}, {"name": "dss", "width": 16},
                         {"name": "mamba", "width": 16, "layers": 1}, {"name": "linear_transformer", "width": 16},
                         {"name": "retnet", "width": 16}, {"name": "transformer", "width": 16, "layers": 1}]
OBJECTIVE_MODELS = {"attention_only": {"name": "attention_only", "layers": 1, "init": "random"},
                    "transformer": {"name": "transformer", "layers": 1, "width": 16, "heads": 2}}


def cases() -> dict[str, dict[str, Any]]:
    """name -> the run (without its seed), the metric read, which end of it is the worst, and the test's
    threshold on it."""
    out: dict[str, dict[str, Any]] = {
        "test_engine::tiny_memorization (steps to 100 %, of 600)": {
            "run": {"task": {"name": "memorization", "n_words": 6, "length": 3, "n_examples": 24},
                    "model": {"name": "attention_only", "layers": 1, "heads": 2},
                    "train": {"optimizer": "adamw", "lr": 0.02, "steps": 600, "batch_size": 24, "eval_every": 50,
                              "target_accuracy": 1.0}},
            "metric": "steps", "worst": max, "threshold": "accuracy == 1.0 within 600 steps"},
        "test_notebook::icqa 1 layer (accuracy)": {
            "run": {"task": {"name": "icqa", "k": 3, "n_q": 8, "n_a": 8},
                    "model": {"name": "attention_only", "attention": "relu", "init": "paper", "qk_scale": 0.01,
                              "layers": 1},
                    "train": {"optimizer": "adamw", "lr": 0.003, "warmup_steps": 300, "steps": 600,
                              "eval_every": 50, "eval_examples": 512, "target_accuracy": 0.99}},
            "metric": "accuracy", "worst": max, "threshold": "< 0.4"},
    }
    one = out["test_notebook::icqa 1 layer (accuracy)"]["run"]
    two = {"run": {**one, "model": {**one["model"], "layers": 2}}, "metric": "accuracy"}
    out["test_notebook::icqa 2 layers (accuracy)"] = {**two, "worst": min, "threshold": ">= 0.99 within 600 steps"}
    out["test_notebook::icqa 2 layers (steps to 0.99, of 600)"] = {**two, "metric": "steps", "worst": max,
                                                                   "threshold": "≤ 600"}
    for name, model in OBJECTIVE_MODELS.items():
        train = {"optimizer": "adamw", "lr": 0.01, "steps": 300, "batch_size": 32, "eval_every": 100}
        out[f"test_engine::other_objectives copy_all {name} (accuracy)"] = {
            "run": {"task": {"name": "test_copy_all"}, "model": model, "train": train},
            "metric": "accuracy", "worst": min, "threshold": "> 0.9"}
        out[f"test_engine::other_objectives regress {name} (loss)"] = {
            "run": {"task": {"name": "test_regress"}, "model": model, "train": train},
            "metric": "loss", "worst": max, "threshold": "< 1.0"}
    for model in INDEX_LOOKUP_FAMILIES:
        out[f"test_seed003_lengths::index_lookup {model['name']} (accuracy)"] = {
            "run": {"task": {"name": "index_lookup", "N": 4, "alphabet": 4, "min_length": 4, "eval_size": 256},
                    "model": model,
                    "train": {"optimizer": "adamw", "lr": 0.01, "steps": 300, "eval_every": 25, "batch_size": 32,
                              "eval_examples": 128, "target_accuracy": 0.7}},
            "metric": "accuracy", "worst": min, "threshold": ">= 0.5"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--only", default="", help="cases whose name contains this")
    parser.add_argument("--json", action="store_true", help="one JSON object at the end instead of a line per case")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from test_engine import _register_test_tasks  # the two test tasks of test_other_objectives_train

    _register_test_tasks()
    report = {}
    for name, case in cases().items():
        if args.only not in name:
            continue
        values: dict[int, list[float]] = {}
        for threads in args.threads:
            torch.set_num_threads(threads)
            configs = [parse_run({**case["run"], "seed": s}) for s in range(args.seeds)]
            with tempfile.TemporaryDirectory() as root:
                results = run_local(configs, Store(root), group_size=1)  # each alone, as the tests train them
            values[threads] = [results[Store.run_id(c.to_dict())][case["metric"]] for c in configs]
        every = [v for vs in values.values() for v in vs]
        worst = case["worst"](every)
        report[name] = {"threshold": case["threshold"], "worst": worst, "median": statistics.median(every),
                        "seed 0": {t: vs[0] for t, vs in values.items()}, "by threads": values}
        if not args.json:
            print(f"{name}: worst {worst:.4g}, median {statistics.median(every):.4g}, seed 0 {report[name]['seed 0']}"
                  f" (test: {case['threshold']})", flush=True)
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
