"""How `depthlab runs`, `runs --json`, `metrics` and `report` scale with the store: 10,000 / 30,000 / 100,000 runs.

Builds each store by a script (realistic rows: configs as `depthlab sweep` writes them, over a grid of tasks,
depths, learning rates, widths and seeds; final metrics of the finished runs; a curve of 20 evaluations, eval and
train, loss and accuracy, for every 20th run), then runs each command as its own process and reads its wall
time, CPU time and peak resident memory (``os.wait4``: that child's ``ru_utime + ru_stime`` and ``ru_maxrss``; on a
shared machine the CPU time is the steadier number). With ``--before SRC`` the same commands run a
second time on another checkout's ``src`` (main's code before a change), in the same run, so the two are measured
on the same machine at the same load:

    git -C . archive 33a417a src | tar -x -C /tmp/main-33a417a
    PYTHONPATH=src nice -n 10 python benchmarks/store_scale.py --before /tmp/main-33a417a/src --json

A command past ``--limit`` seconds is stopped and reported as such (its memory then is the peak until it was
stopped). Prints a line per command, then (``--json``) one JSON object.

Each store is built by a child process of its own (``--build``): a child's peak resident memory counts the pages
it shared with this process between its fork and its exec, so a parent that had built a store of 100,000 runs
itself (204 MB) gave every command a floor of 204 MB (measured: ``runs --json`` 204 MB here, 65 MB from a parent of
34 MB). This process stays at about 34 MB, the floor of every number below.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from depthlab.store import Store, to_json

SIZES = (10_000, 30_000, 100_000)
TASKS = {"icqa": {"k": 3, "n_q": 8, "n_a": 8},
         "memorization": {"n_words": 8, "length": 3, "n_examples": 64, "data_seed": 0},
         "ictm": {"k": 2, "l": 3, "n_symbols": 16, "n_a": 8, "n_wildcards": None, "templates": None,
                  "eval_fraction": 0.25, "split_seed": 0},
         "index_lookup": {"N": 20, "alphabet": 64, "min_length": 10, "padding": "before_index", "eval_size": 5000}}
CURVE_EVERY = 20  # every 20th run has a curve
CURVE_POINTS = 20
STATUS_CYCLE = ("done",) * 17 + ("diverged", "failed", "interrupted")


def run_config(task: str, layers: int, lr: float, width: int, seed: int) -> dict[str, Any]:
    """A config shaped as `depthlab sweep` stores one (``RunConfig.to_dict``)."""
    return {"task": {"name": task, **TASKS[task]},
            "model": {"name": "attention_only", "layers": layers, "heads": 1, "width": width, "attention": "relu",
                      "init": "paper", "qk_scale": 1.0},
            "train": {"optimizer": "sgd", "lr": lr, "momentum": 0.0, "weight_decay": 0.0, "betas": [0.9, 0.999],
                      "warmup_steps": 0, "grad_clip": None, "steps": 2000, "batch_size": 64, "eval_every": 100,
                      "eval_examples": 2048, "target_accuracy": None, "precision": "fp32", "checkpoint_every": None,
                      "keep_checkpoints": False},
            "seed": seed}


def build_store(root: Path, n: int) -> None:
    """A store of ``n`` runs written straight into SQLite (the schema by :class:`Store` itself)."""
    Store(root).close()
    grid = itertools.product(TASKS, range(1, 6), (0.001, 0.003, 0.01, 0.03, 0.1), (32, 64, 128, 256))
    cells = list(itertools.islice(itertools.cycle(grid), 400))
    runs, metrics = [], []
    now = time.time() - n
    for i in range(n):
        task, layers, lr, width = cells[i % len(cells)]
        config = run_config(task, layers, lr, width, seed=i // len(cells))
        run_id = Store.run_id(config)
        status = STATUS_CYCLE[i % len(STATUS_CYCLE)]
        accuracy = min(1.0, 0.3 + 0.15 * layers + (i % 7) / 50)
        final = {"accuracy": accuracy, "loss": 1.0 - accuracy + 0.01, "steps": 2000, "chance": 1 / 3,
                 "exhaustive": False} if status != "failed" else None
        runs.append((run_id, task, "attention_only", to_json(config), status, 2000, now + i, now + i,
                     None if final is None else to_json(final), "boom" if status == "failed" else None,
                     f"g{i // 16}", "[]"))
        if i % CURVE_EVERY == 0:
            for point, split, name in itertools.product(range(1, CURVE_POINTS + 1), ("eval", "train"),
                                                        ("loss", "accuracy")):
                value = accuracy * point / CURVE_POINTS if name == "accuracy" else 2.0 / point
                metrics.append((run_id, point * 100, split, name, value))
    with sqlite3.connect(root / "depthlab.sqlite") as conn:
        conn.executemany("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", runs)
        conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?)", metrics)


COMMANDS = {"runs": ["runs"], "runs --json": ["runs", "--json"], "metrics": ["metrics", "--format", "csv"],
            "report": ["report", "--examples", "0", "--json"]}


def measure(src: str, args: list[str], store: Path, work: Path, limit: float) -> dict[str, Any]:
    """Wall time, peak resident memory (MB) and exit code of one `depthlab` process on the store."""
    env = {**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1", "COLUMNS": "160"}
    extra = ["--out", str(work / "report.html")] if args[0] == "report" else []
    started = time.perf_counter()
    with open(work / "stdout", "wb") as out:
        child = subprocess.Popen([sys.executable, "-m", "depthlab.cli", *args, *extra, "--store", str(store)],
                                 env=env, stdout=out, stderr=subprocess.PIPE, start_new_session=True)
        deadline, finished = started + limit, None
        while finished is None:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                finished = (os.waitstatus_to_exitcode(status), usage)
            elif time.perf_counter() > deadline:
                os.killpg(child.pid, signal.SIGKILL)
                _, status, usage = os.wait4(child.pid, 0)
                finished = (None, usage)
            else:
                time.sleep(0.05)
        child.returncode = -1  # reaped here: Popen must not wait for it again
    seconds = time.perf_counter() - started
    stderr = child.stderr.read().decode(errors="replace").strip().splitlines() if child.stderr else []
    code, usage = finished
    return {"exit": code, "seconds": round(seconds, 2), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_mb": round(usage.ru_maxrss / 1024),
            "stdout_bytes": (work / "stdout").stat().st_size, "stopped": code is None,
            "stderr": stderr[0][:160] if stderr else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=list(SIZES))
    parser.add_argument("--before", help="another checkout's src folder to measure too (main's code)")
    parser.add_argument("--limit", type=float, default=120.0, help="seconds a command may take")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="which of: " + ", ".join(COMMANDS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--build", nargs=2, metavar=("STORE", "RUNS"), help=argparse.SUPPRESS)  # the child's part
    options = parser.parse_args()
    if options.build:
        build_store(Path(options.build[0]), int(options.build[1]))
        return
    after = str(Path(__file__).resolve().parents[1] / "src")
    versions = {"after": after, **({"before": options.before} if options.before else {})}
    results = []
    with tempfile.TemporaryDirectory(prefix="store-scale-") as folder:
        work = Path(folder)
        for n in options.sizes:
            store = work / f"store-{n}"
            started = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--build", str(store), str(n)], check=True)  # see the top
            print(f"{n:,} runs: store built in {time.perf_counter() - started:.1f} s "
                  f"({(store / 'depthlab.sqlite').stat().st_size / 1e6:.0f} MB)", flush=True)
            for name in options.commands.split(","):
                for version, src in versions.items():
                    result = {"runs": n, "command": name, "version": version,
                              **measure(src, COMMANDS[name], store, work, options.limit)}
                    results.append(result)
                    took = f"stopped after {result['seconds']} s" if result["stopped"] else f"{result['seconds']} s"
                    print(f"  {name:12} {version:6} {took:>22}  {result['cpu_seconds']:6} s CPU  "
                          f"{result['peak_mb']:5} MB  exit {result['exit']}  "
                          f"{result['stdout_bytes']:,} bytes out  {result['stderr'][:60]}", flush=True)
    if options.json:
        print(json.dumps({"python": sys.version.split()[0], "cpus": os.cpu_count(), "results": results}))


if __name__ == "__main__":
    main()
