"""Mutation testing of the modules every result depends on (``make mutants``; not in CI: 3,796 mutants, hours).

Cosmic Ray (https://cosmic-ray.readthedocs.io) changes one operator, number or keyword at a time in a module and runs
that module's tests against the change; a change no test notices ("survived") is either a missing test or an
equivalent program. Each module has its own focused, fastest-first test selection (pytest ``-x``: a mutant is
killed by its first failing test). Cosmic Ray edits the files it mutates, so everything runs in a copy of the tree
under ``mutants/tree`` and the working tree is never touched.

Operators: every one of Cosmic Ray's core operators, except the binary-operator swaps to bitwise, shift, modulo,
floor-division and power operators and between additive and multiplicative ones, and the comparison swaps other than
a boundary or a negation (< and <=, == and !=, is and is not, in and not in): on floats and tensors the left-out ones
raise at once or repeat what a kept swap already tests, and they are four times as many. Mutants inside an
annotation are skipped too: every module here starts with ``from __future__ import annotations``, so an annotation is
never evaluated and ``float | None`` turned into ``float + None`` is the same program. A line ending in
``# pragma: no mutate`` is skipped (none is marked so far).

    python mutation/run.py                  # every module: mutants/summary.json, mutants/survivors.md
    python mutation/run.py --only optim     # one module
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "mutants"
TREE = OUT / "tree"
BIN = Path(sys.executable).parent
PYTEST = f"{sys.executable} -m pytest -x -q -p no:cacheprovider -p no:xdist"
SLOW = "not figure and not pickle and not other_objectives and not every_family and not bf16 and not meta_device"

# module (under src/depthlab) -> (tests, fastest and most sensitive first; seconds a test run may take). Every run
# leaves out the slow tests that do not concern these modules (SLOW, pytest's -k).
MODULES: dict[str, tuple[list[str], float]] = {
    "training/optim.py": ([
        "tests/test_optim.py",
        "tests/test_model.py::test_group_optimizer_matches_torch_optim",
        "tests/test_engine_resume.py::test_a_resumed_run_follows_its_checkpoint_when_the_checkpoint_is_altered",
        "tests/test_reliability.py::test_checkpoint_that_does_not_fit_the_config_is_a_clear_error_and_is_left_alone",
        "tests/test_engine_recipes.py",
        "tests/test_engine_resume.py",
    ], 300),
    "training/engine.py": ([
        "tests/test_reliability.py::test_ctrl_c_finishes_the_step_checkpoints_marks_interrupted_and_resumes_exactly",
        "tests/test_engine_resume.py",
        "tests/test_reliability.py",
        "tests/test_engine.py",
        "tests/test_engine_recipes.py",
        "tests/test_device.py::test_metrics_summed_on_the_device_are_the_per_step_sums",
        "tests/test_device.py::test_auto_is_the_cpu_here_and_the_results_say_where_and_in_what_precision",
        "tests/test_seed002_presets.py::test_engine_keeps_history_and_logs_partial_losses",
        "tests/test_step_cost.py::test_a_step_calls_the_same_operations_for_16_runs_as_for_one_and_no_more_than_today",
    ], 600),
    "training/checkpoint.py": ([
        "tests/test_reliability.py",
        "tests/test_engine_resume.py",
        "tests/test_engine.py::test_resume_from_checkpoint_continues_exactly",
    ], 300),
    "training/data.py": ([
        "tests/test_engine.py::test_data_stream_is_the_same_with_prefetching_and_after_a_restore",
        "tests/test_engine.py::test_big_chunks_are_not_sampled_ahead",
        "tests/test_engine_resume.py",
        "tests/test_reliability.py::test_ctrl_c_finishes_the_step_checkpoints_marks_interrupted_and_resumes_exactly",
        "tests/test_engine.py::test_tiny_memorization_reaches_100_percent",
    ], 300),
    "models/attention_kernels.py": ([
        "tests/test_model.py",
        "tests/test_engine_recipes.py::test_each_run_of_a_group_trains_as_torch_optim_trains_it_alone",
    ], 300),
    "constructions/attention_only.py": (["tests/test_constructions.py"], 600),
    "constructions/registry.py": (["tests/test_constructions.py", "tests/test_constructions_cli.py"], 900),
    "constructions/impossibility.py": (["tests/test_constructions_bounds.py"], 600),
    "constructions/information_flow.py": (["tests/test_constructions_cli.py"], 600),
    "constructions/log_width.py": (["tests/test_constructions_log_width.py"], 600),
    "constructions/nearest_neighbor.py": (["tests/test_constructions_nearest_neighbor.py"], 600),
}
EXCLUDED_OPERATORS = [
    r"core/ReplaceBinaryOperator_\w+_(BitAnd|BitOr|BitXor|LShift|RShift|Mod|FloorDiv|Pow)$",
    r"core/ReplaceBinaryOperator_(Add|Sub)_(Mul|Div)$",
    r"core/ReplaceBinaryOperator_(Mul|Div)_(Add|Sub)$",
    r"core/ReplaceComparisonOperator_(?!(Eq_NotEq|NotEq_Eq|Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Is_IsNot|IsNot_Is|In_NotIn"
    r"|NotIn_In)$)\w+$",
]


def name_of(module: str) -> str:
    return module.removesuffix(".py").replace("/", "-")


def copy_tree() -> None:
    """A fresh copy of what the tests need, for Cosmic Ray to edit."""
    shutil.rmtree(TREE, ignore_errors=True)
    TREE.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("src", "tests", "configs", "examples"):
        if (ROOT / part).exists():
            shutil.copytree(ROOT / part, TREE / part, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", TREE / "pyproject.toml")


def write_config(module: str, tests: list[str], timeout: float) -> Path:
    path = OUT / f"{name_of(module)}.toml"
    command = f"{PYTEST} -k '{SLOW}' {' '.join(tests)}"
    lines = [
        "[cosmic-ray]",
        f'module-path = "src/depthlab/{module}"',
        f"timeout = {timeout}",
        "excluded-modules = []",
        f"test-command = {json.dumps(command)}",
        "[cosmic-ray.distributor]",
        'name = "local"',
        "[cosmic-ray.filters.operators-filter]",
        f"exclude-operators = {json.dumps(EXCLUDED_OPERATORS)}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def cosmic(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / args[0]), *args[1:]], cwd=TREE, env=env, capture_output=True, text=True)


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where a module's annotations are, as ((line, column), (line, column)) from and to."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        for field in ("annotation", "returns"):
            part = getattr(node, field, None)
            if isinstance(part, ast.AST):
                spans.append(((part.lineno, part.col_offset), (part.end_lineno, part.end_col_offset)))
    return spans


def skip_annotations(session: Path, module: str) -> None:
    """Mark the mutants inside an annotation skipped: with ``from __future__ import annotations`` they are
    equivalent (the annotation is a string nobody evaluates)."""
    from cosmic_ray.work_db import use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    source = (TREE / "src" / "depthlab" / module).read_text()
    if "from __future__ import annotations" not in source:
        return
    spans = annotation_spans(source)
    with use_db(str(session)) as db:
        for item in list(db.pending_work_items):
            start = tuple(item.mutations[0].start_pos)
            if any(first <= start < last for first, last in spans):
                db.set_result(item.job_id, WorkResult(output="in an annotation (never evaluated)",
                                                      worker_outcome=WorkerOutcome.SKIPPED))


def outcomes(session: Path, env: dict[str, str]) -> dict:
    """Counts by outcome, and the survivors with their diffs, from a session's records."""
    dump = cosmic("cosmic-ray", "dump", str(session), env=env).stdout
    counts = {"mutants": 0, "killed": 0, "survived": 0, "incompetent": 0, "skipped": 0, "not run": 0}
    survivors = []
    for line in dump.splitlines():
        item, result = json.loads(line)
        counts["mutants"] += 1
        if result is None:
            counts["not run"] += 1
        elif result["worker_outcome"] == "skipped":
            counts["skipped"] += 1
        elif result["test_outcome"] == "survived":
            counts["survived"] += 1
            mutation = item["mutations"][0]
            survivors.append({"job": item["job_id"], "operator": mutation["operator_name"],
                              "line": mutation["start_pos"][0], "diff": result.get("diff", "")})
        else:
            counts[result["test_outcome"]] += 1
    return {**counts, "survivors": survivors}


def run_module(module: str, env: dict[str, str]) -> dict:
    tests, timeout = MODULES[module]
    config, session = write_config(module, tests, timeout), OUT / f"{name_of(module)}.sqlite"
    started = time.time()
    if not session.exists():  # a session already there is resumed where it stopped
        for step in (("cosmic-ray", "init", str(config), str(session)),
                     ("cr-filter-operators", str(session), str(config)),
                     ("cr-filter-pragma", str(session))):
            done = cosmic(*step, env=env)
            if done.returncode:
                raise SystemExit(f"{' '.join(step)}: {done.stderr.strip()[-2000:]}")
        skip_annotations(session, module)
        baseline = cosmic("cosmic-ray", "baseline", str(config), env=env)
        if baseline.returncode:
            raise SystemExit(f"{module}: the tests fail without any mutation:\n{baseline.stdout[-3000:]}"
                             f"{baseline.stderr[-3000:]}")
    cosmic("cosmic-ray", "exec", str(config), str(session), env=env)
    result = {"module": module, "tests": tests, **outcomes(session, env),
              "seconds": round(time.time() - started, 1)}
    print(f"{module}: {result['mutants']} mutants, {result['killed']} killed, {result['survived']} survived, "
          f"{result['incompetent']} incompetent, {result['skipped']} skipped by the operator filter, "
          f"{result['not run']} not run ({result['seconds']:.0f} s)", flush=True)
    return result


def report(results: list[dict]) -> None:
    summary = OUT / "summary.json"
    previous = json.loads(summary.read_text()) if summary.exists() else {}
    merged = {**previous, **{r["module"]: r for r in results}}
    summary.write_text(json.dumps(merged, indent=1))
    lines = ["# Surviving mutants", ""]
    for module, r in merged.items():
        lines.append(f"## {module}: {len(r['survivors'])} of {r['mutants'] - r['skipped']} survived")
        for s in r["survivors"]:
            lines += ["", f"### {s['job']} ({s['operator']}, line {s['line']})", "", "```diff", s["diff"].strip(),
                      "```"]
        lines.append("")
    (OUT / "survivors.md").write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="modules whose path contains one of these")
    parser.add_argument("--fresh", action="store_true", help="start the chosen modules' sessions again")
    args = parser.parse_args()
    chosen = [m for m in MODULES if not args.only or any(o in m for o in args.only)]
    OUT.mkdir(exist_ok=True)
    if args.fresh:
        for module in chosen:
            (OUT / f"{name_of(module)}.sqlite").unlink(missing_ok=True)
    copy_tree()
    env = {**os.environ, "PYTHONPATH": "src", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    started = time.time()
    results = []
    for module in chosen:  # the summary is rewritten after every module: a stopped run keeps what it finished
        results.append(run_module(module, env))
        report(results)
    total = {k: sum(r[k] for r in results) for k in ("mutants", "killed", "survived", "incompetent", "skipped")}
    print(f"all: {total} in {time.time() - started:.0f} s; survivors with their diffs in {OUT / 'survivors.md'}")


if __name__ == "__main__":
    main()
