"""Mutation testing of the modules every result depends on (``make mutants``; not in CI: hours for all of them).

Cosmic Ray (https://cosmic-ray.readthedocs.io) makes the mutants: one operator, number, comparison, boolean or loop
changed at a time. Each mutant is tested by the tests that run its line (``selection.py``: derived from one coverage
pass of the whole suite, fastest first, pytest ``-x``: killed by the first failing test); a change no test notices
("survived") is either a missing test or an equivalent program. Cosmic Ray edits the files it mutates, so everything
runs in a copy of the tree under ``mutants/tree`` and the working tree is never touched.

This runner applies and tests the mutants itself (Cosmic Ray's ``init`` and filters make and record them): the
summary is rewritten after every mutant, ``--limit`` and ``--time`` bound a run, a stopped run resumes where it
stopped, and a test process is ended with its whole process group whatever stops the run (Ctrl-C, SIGTERM, a
timeout), so nothing is left behind.

Operators: every one of Cosmic Ray's core operators, except the binary-operator swaps to bitwise, shift, modulo,
floor-division and power operators and between additive and multiplicative ones, and the comparison swaps other than
a boundary or a negation (< and <=, == and !=, is and is not, in and not in): on floats and tensors the left-out ones
raise at once or repeat what a kept swap already tests, and they are four times as many. Mutants inside an
annotation are skipped too: every module here starts with ``from __future__ import annotations``, so an annotation is
never evaluated and ``float | None`` turned into ``float + None`` is the same program. A line ending in
``# pragma: no mutate`` is skipped (none is marked so far).

    python mutation/run.py                              # every module: mutants/summary.json, mutants/survivors.md
    python mutation/run.py --only optim --time 1800     # one module, for at most half an hour
    python mutation/run.py --only data --limit 20       # the next 20 mutants of one module
    python mutation/run.py --select                     # derive the test selection again (after tests changed)
    python mutation/run.py --select tests/test_optim.py tests/test_engine.py --limit 0   # over some files only
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from selection import MODULES, OUT, ROOT, SELECTION, collect, statement_lines, tests_for

TREE = OUT / "tree"
BIN = Path(sys.executable).parent
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
START_SECONDS = 30  # a test process's imports before its first test, on a loaded machine
TIMEOUT_FACTOR = 4  # a mutant's tests may take this many times their unmutated time (a loop made endless is killed)
EXCLUDED_OPERATORS = [
    r"core/ReplaceBinaryOperator_\w+_(BitAnd|BitOr|BitXor|LShift|RShift|Mod|FloorDiv|Pow)$",
    r"core/ReplaceBinaryOperator_(Add|Sub)_(Mul|Div)$",
    r"core/ReplaceBinaryOperator_(Mul|Div)_(Add|Sub)$",
    r"core/ReplaceComparisonOperator_(?!(Eq_NotEq|NotEq_Eq|Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Is_IsNot|IsNot_Is|In_NotIn"
    r"|NotIn_In)$)\w+$",
]
OUTCOMES = ("killed", "timeout", "survived", "not reached", "incompetent", "skipped", "not run")


def name_of(module: str) -> str:
    return module.removesuffix(".py").replace("/", "-")


def copy_tree() -> None:
    """A fresh copy of what the tests need, for the mutants to edit."""
    shutil.rmtree(TREE, ignore_errors=True)
    TREE.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("src", "tests", "configs", "examples"):
        if (ROOT / part).exists():
            shutil.copytree(ROOT / part, TREE / part, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", TREE / "pyproject.toml")


def write_config(module: str) -> Path:
    """Cosmic Ray's config: what to mutate and with which operators (the tests are chosen per mutant here)."""
    path = OUT / f"{name_of(module)}.toml"
    lines = [
        "[cosmic-ray]",
        f'module-path = "src/depthlab/{module}"',
        "timeout = 600",
        "excluded-modules = []",
        'test-command = "false"',
        "[cosmic-ray.distributor]",
        'name = "local"',
        "[cosmic-ray.filters.operators-filter]",
        f"exclude-operators = {json.dumps(EXCLUDED_OPERATORS)}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where a module's annotations are, as ((line, column), (line, column)) from and to."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        for field in ("annotation", "returns"):
            part = getattr(node, field, None)
            if isinstance(part, ast.AST):
                spans.append(((part.lineno, part.col_offset), (part.end_lineno, part.end_col_offset)))
    return spans


def init_session(module: str, session: Path, env: dict[str, str]) -> None:
    """Make and filter the module's mutants (Cosmic Ray's init and filters), the annotations' marked skipped."""
    from cosmic_ray.work_db import use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    config = write_config(module)
    for step in (("cosmic-ray", "init", str(config), str(session)),
                 ("cr-filter-operators", str(session), str(config)),
                 ("cr-filter-pragma", str(session))):
        done = subprocess.run([str(BIN / step[0]), *step[1:]], cwd=TREE, env=env, capture_output=True, text=True)
        if done.returncode:
            session.unlink(missing_ok=True)
            raise SystemExit(f"{' '.join(step)}: {done.stderr.strip()[-2000:]}")
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


def run_tests(tests: list[str], timeout: float, env: dict[str, str]) -> tuple[str, str]:
    """Run ``tests`` in a new process group: ("killed" | "timeout" | "survived", the output's tail). The group is
    killed however this returns (a timeout, Ctrl-C, SIGTERM), so no test process outlives the run."""
    args = OUT / "tests.txt"
    args.write_text("\n".join(tests) + "\n")
    proc = subprocess.Popen([*PYTEST, f"@{args}"], cwd=TREE, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
        text = output.decode(errors="replace")[-4000:]
        return ("killed" if proc.returncode else "survived"), text
    except subprocess.TimeoutExpired:
        return "timeout", f"no result in {timeout:.0f} s"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def baseline(module: str, selection: dict, env: dict[str, str]) -> None:
    """Every test of the module's selection passes on the unmutated tree, or the run stops (a test failing without
    a mutant would count every mutant killed)."""
    tests = selection["modules"].get(module, {}).get("tests", [])
    if not tests:
        raise SystemExit(f"{module}: no test runs this module (mutants/selection.json)")
    seconds = sum(selection["durations"].get(t, 1.0) for t in tests)
    outcome, output = run_tests(tests, START_SECONDS + TIMEOUT_FACTOR * seconds, env)
    if outcome != "survived":
        raise SystemExit(f"{module}: the selected tests fail without any mutation ({outcome}):\n{output}")


def test_mutant(item, module: str, selection: dict, env: dict[str, str]) -> tuple[str, str, str, list[str]]:
    """Apply one mutant in the tree, run the tests that reach its lines, put the file back: (outcome, output,
    diff, tests)."""
    from cosmic_ray.mutating import _make_diff, use_mutation
    from cosmic_ray.plugins import get_operator

    mutation = item.mutations[0]
    path = TREE / mutation.module_path
    lines = statement_lines(path.read_text(), mutation.start_pos[0], mutation.end_pos[0])
    tests = tests_for(selection, module, lines)
    with use_mutation(path, get_operator(mutation.operator_name)(), mutation.occurrence) as (before, after):
        if after is None:
            return "incompetent", "no mutation at this occurrence", "", tests
        diff = "\n".join(_make_diff(before, after, mutation.module_path))
        if not tests:
            return "not reached", "no test runs this line", diff, tests
        seconds = sum(selection["durations"].get(t, 1.0) for t in tests)
        outcome, output = run_tests(tests, START_SECONDS + TIMEOUT_FACTOR * seconds, env)
        return outcome, output, diff, tests


def record(session: Path, job: str, outcome: str, output: str, diff: str, tests: list[str]) -> None:
    """Store a mutant's result in its session (Cosmic Ray's database) and beside it (what tested it)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    test_outcome = {"killed": TestOutcome.KILLED, "timeout": TestOutcome.KILLED,
                    "incompetent": TestOutcome.INCOMPETENT}.get(outcome, TestOutcome.SURVIVED)
    worker = WorkerOutcome.NO_TEST if outcome == "incompetent" else WorkerOutcome.NORMAL
    with use_db(str(session), WorkDB.Mode.open) as db:
        db.set_result(job, WorkResult(output=json.dumps({"outcome": outcome, "tests": len(tests), "output": output}),
                                      diff=diff, test_outcome=test_outcome, worker_outcome=worker))


def outcomes(module: str, session: Path) -> dict:
    """Counts by outcome, and the survivors with their diffs, from a session's records."""
    from cosmic_ray.work_db import WorkDB, use_db

    counts = dict.fromkeys(OUTCOMES, 0)
    survivors = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        results = dict(db.results)
        for item in db.work_items:
            result = results.get(item.job_id)
            if result is None:
                counts["not run"] += 1
                continue
            if result.worker_outcome == "skipped":
                counts["skipped"] += 1
                continue
            outcome = json.loads(result.output)["outcome"]
            counts[outcome] += 1
            if outcome in ("survived", "not reached"):
                mutation = item.mutations[0]
                survivors.append({"job": item.job_id, "operator": mutation.operator_name, "outcome": outcome,
                                  "line": mutation.start_pos[0], "diff": result.diff or ""})
    survivors.sort(key=lambda s: (s["line"], s["operator"]))
    return {"module": module, "mutants": sum(counts.values()), **counts, "survivors": survivors}


def report(results: dict[str, dict]) -> None:
    """``summary.json`` (every module run so far) and ``survivors.md`` (each survivor's diff)."""
    summary = OUT / "summary.json"
    merged = {**(json.loads(summary.read_text()) if summary.exists() else {}), **results}
    summary.write_text(json.dumps(merged, indent=1))
    lines = ["# Surviving mutants", ""]
    for module, r in merged.items():
        lines.append(f"## {module}: {r['survived']} survived, {r['not reached']} not reached by any test "
                     f"({r['killed']} killed, {r['timeout']} by a timeout; {r['not run']} not run yet)")
        for s in r["survivors"]:
            lines += ["", f"### {s['job']} ({s['operator']}, line {s['line']}, {s['outcome']})", "", "```diff",
                      s["diff"].strip(), "```"]
        lines.append("")
    (OUT / "survivors.md").write_text("\n".join(lines))


def line_of(result: dict) -> str:
    tried = result["killed"] + result["timeout"] + result["survived"] + result["not reached"]
    return (f"{result['module']}: {tried} of {result['mutants'] - result['skipped']} run: {result['killed']} killed, "
            f"{result['timeout']} by a timeout, {result['survived']} survived, {result['not reached']} not reached, "
            f"{result['incompetent']} incompetent, {result['not run']} not run")


def run_module(module: str, selection: dict, env: dict[str, str], results: dict, deadline: float,
               limit: int | None) -> float | None:
    """Test the module's pending mutants, those whose tests take least time first, until done, the deadline or the
    limit (the deadline moved on by the baseline's time: it must finish, and tests no mutant); the summary is
    rewritten after each. The deadline, moved; None when it stopped the module."""
    from cosmic_ray.work_db import WorkDB, use_db

    session = OUT / f"{name_of(module)}.sqlite"
    if not session.exists():  # a session already there is resumed where it stopped
        started = time.time()
        baseline(module, selection, env)
        init_session(module, session, env)
        deadline += time.time() - started
    with use_db(str(session), WorkDB.Mode.open) as db:
        pending = list(db.pending_work_items)
    source = (TREE / "src" / "depthlab" / module).read_text()

    def cost(item) -> tuple[float, tuple[int, int], str]:
        """The seconds its tests took unmutated: the cheapest first, so a bounded run tests the most mutants."""
        start, end = item.mutations[0].start_pos, item.mutations[0].end_pos
        tests = tests_for(selection, module, statement_lines(source, start[0], end[0]))
        return sum(selection["durations"].get(t, 1.0) for t in tests), tuple(start), item.job_id

    pending.sort(key=cost)
    results[module] = outcomes(module, session)
    report(results)
    for count, item in enumerate(pending):
        if time.time() >= deadline:
            return None
        if limit is not None and count >= limit:
            break
        record(session, item.job_id, *test_mutant(item, module, selection, env))
        results[module] = outcomes(module, session)
        report(results)
    return deadline


def stop_on_sigterm() -> None:
    """SIGTERM (``timeout``, a scheduler) stops the run as Ctrl-C does: the test process group is killed and the
    mutated file put back."""
    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=[], help="modules whose path contains one of these")
    parser.add_argument("--fresh", action="store_true", help="start the chosen modules' sessions again")
    parser.add_argument("--select", nargs="*", default=None, metavar="TEST",
                        help="derive the test selection from coverage again, over these test files (default: all)")
    parser.add_argument("--limit", type=int, default=None, help="at most this many mutants of each module")
    parser.add_argument("--time", type=float, default=None,
                        help="start no mutant after this many seconds (a module's baseline not counted)")
    args = parser.parse_args()
    chosen = [m for m in MODULES if not args.only or any(o in m for o in args.only)]
    if not chosen:
        raise SystemExit(f"--only: no module matches {args.only}; the modules are {', '.join(MODULES)}")
    stop_on_sigterm()
    OUT.mkdir(exist_ok=True)
    env = {**os.environ, "PYTHONPATH": "src", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.time()
    if args.select is not None or not SELECTION.exists():
        selection = collect(env, args.select or ["tests"])
    else:
        selection = json.loads(SELECTION.read_text())
    if args.limit == 0:  # the selection only
        print(json.dumps({m: len(e["tests"]) for m, e in selection["modules"].items()}))
        return
    if args.fresh:
        for module in chosen:
            (OUT / f"{name_of(module)}.sqlite").unlink(missing_ok=True)
    copy_tree()
    deadline = started + args.time if args.time else float("inf")
    results: dict[str, dict] = {}
    for module in chosen:
        deadline = run_module(module, selection, env, results, deadline, args.limit)
        if deadline is None:
            print(f"--time {args.time:.0f} s reached in {module}", flush=True)
            break
    for module in chosen:
        if module in results:
            print(line_of(results[module]), flush=True)
    print(f"{time.time() - started:.0f} s; survivors with their diffs in {OUT / 'survivors.md'}")


if __name__ == "__main__":
    main()
