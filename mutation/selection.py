"""Which tests reach which line of each mutated module, derived from coverage (``mutation/run.py --select``).

One pass of the whole suite under Coverage.py (one process, no xdist) records every test's lines in the modules
``MODULES`` names, each test under its pytest node id (``coverage_contexts.py``), and each test's time. A mutant
on line L is then tested by the tests that run line L, fastest first: a test that never runs the line cannot tell
the mutant from the original. Lines that run at import (``def`` lines, constants, defaults) are reached by every
test that imports the module, so a mutant there gets every test that reaches the module. A line no test runs gives
a survivor without running anything. Tests that reach a module only in a process they start (the kill tests) are
not seen by coverage: the selection says what a mutant is tested by, and those are not among it.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "mutants"
SELECTION = OUT / "selection.json"

# the modules every result depends on (under src/depthlab), in the order `make mutants` runs them
MODULES = (
    "training/optim.py", "training/engine.py", "training/checkpoint.py", "training/data.py",
    "models/attention_kernels.py", "constructions/attention_only.py", "constructions/registry.py",
    "constructions/impossibility.py", "constructions/information_flow.py", "constructions/log_width.py",
    "constructions/nearest_neighbor.py",
)


def collect(env: dict[str, str], tests: list[str]) -> dict:
    """Run ``tests`` (the whole suite: ``["tests"]``) under coverage and write ``SELECTION``: per module, its tests
    (fastest first), and per line the tests that run it; ``at_import`` lists the lines run while the tests were
    collected."""
    OUT.mkdir(exist_ok=True)
    data_file, durations = OUT / ".coverage", OUT / "durations.json"
    include = ",".join(f"*/src/depthlab/{m}" for m in MODULES)
    command = [sys.executable, "-m", "coverage", "run", f"--data-file={data_file}", f"--include={include}",
               "-m", "pytest", "-q", "-p", "coverage_contexts", "-p", "no:xdist", "-p", "no:cacheprovider", *tests]
    started = time.time()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env={**env, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT / 'mutation'}",
                               "DEPTHLAB_TEST_DURATIONS": str(durations)})
    if done.returncode:  # a failing suite gives no baseline to mutate against
        raise SystemExit(f"the suite fails under coverage (exit {done.returncode}):\n{done.stdout[-3000:]}")
    selection = build(data_file, json.loads(durations.read_text()))
    selection["seconds"], selection["candidates"] = round(time.time() - started, 1), tests
    SELECTION.write_text(json.dumps(selection))
    return selection


def build(data_file: Path, durations: dict[str, float]) -> dict:
    """The selection from a coverage data file with node-id contexts and the tests' durations."""
    import coverage

    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    files = {m: f for m in MODULES for f in data.measured_files() if f.endswith(f"/src/depthlab/{m}")}
    modules = {}
    for module, path in files.items():
        by_line = data.contexts_by_lineno(path)
        reached = {c for contexts in by_line.values() for c in contexts if c}
        tests = sorted(reached, key=lambda t: (durations.get(t, 0.0), t))
        index = {t: i for i, t in enumerate(tests)}
        modules[module] = {
            "tests": tests,
            "lines": {str(line): sorted(index[c] for c in contexts if c) for line, contexts in by_line.items()},
            "at_import": sorted(line for line, contexts in by_line.items() if "" in contexts),
        }
    return {"modules": modules, "durations": durations}


def statement_lines(source: str, first: int, last: int) -> set[int]:
    """Lines ``first``..``last`` and the first line of the innermost statement holding each: coverage records a
    statement written over several lines at its first line."""
    lines = set(range(first, last + 1))
    statements = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.stmt)]
    for line in range(first, last + 1):
        holding = [n for n in statements if n.lineno <= line <= (n.end_lineno or n.lineno)]
        if holding:
            lines.add(max(holding, key=lambda n: n.lineno).lineno)
    return lines


def tests_for(selection: dict, module: str, lines: set[int]) -> list[str]:
    """The tests that run any of ``lines`` of ``module`` (every test of the module if one of the lines runs at
    import), fastest first; empty when no test runs them."""
    entry = selection["modules"].get(module)
    if entry is None:
        return []
    if any(line in entry["at_import"] for line in lines):
        return list(entry["tests"])
    chosen = sorted({i for line in lines for i in entry["lines"].get(str(line), [])})
    return [entry["tests"][i] for i in chosen]
