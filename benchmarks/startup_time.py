"""How long ``depthlab --help`` and ``depthlab tasks`` take to start: this checkout against a git revision.

Each command runs ``--runs`` times in a fresh ``python -m depthlab.cli`` process, alternating between the sources
compared (this checkout's ``src`` and the revision's, extracted with ``git archive`` into a temporary folder, so
nothing in the work tree changes); the median wall time and the median CPU time (user + system of the child) are
reported. On a shared machine the wall time counts the other jobs too: read the CPU time beside it. Prints a line
per command and source, then one JSON object.

    OMP_NUM_THREADS=1 python benchmarks/startup_time.py --base 33a417a --runs 7
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {"--help": ["--help"], "tasks": ["tasks"]}


def extract_src(revision: str, folder: Path) -> Path:
    """The revision's ``src`` folder, written under ``folder``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "src"], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    return folder / "src"


def one_run(src: Path, args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one ``python -m depthlab.cli ARGS`` with ``src`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "depthlab.cli", *args], env=env, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="33a417a", help="the git revision to compare with")
    parser.add_argument("--runs", type=int, default=7, help="runs of each command per source")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sources = {"this checkout": ROOT / "src", args.base: extract_src(args.base, Path(tmp))}
        times: dict[str, dict[str, list[tuple[float, float]]]] = {c: {s: [] for s in sources} for c in COMMANDS}
        for command, argv in COMMANDS.items():
            for _ in range(args.runs):
                for source, src in sources.items():  # alternating: a busy spell falls on both
                    times[command][source].append(one_run(src, argv))
    results = {}
    for command, by_source in times.items():
        results[command] = {}
        for source, runs in by_source.items():
            wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
            results[command][source] = {"median_wall_s": round(wall, 3), "median_cpu_s": round(cpu, 3)}
            print(f"depthlab {command:7} {source:14} wall {wall:6.2f} s   cpu {cpu:6.2f} s", file=sys.stderr)
    print(json.dumps({"runs": args.runs, "base": args.base, "results": results}))


if __name__ == "__main__":
    main()
