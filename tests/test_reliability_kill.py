"""A real `depthlab sweep` process killed with SIGKILL at random moments, or stopped with Ctrl-C (SIGINT).

After every kill: each checkpoint on disk loads (none half-written), no finished run was touched again, and the
process wrote each metric row at most once and only rows after the step each run resumed from (writes are counted
by an SQLite trigger: the table's primary key would hide a row written twice). After the final re-run: every run done
exactly once, none missing or extra, the re-run wrote exactly the rows after each run's checkpoint, and the results
equal an uninterrupted sweep's. The kill moments come from a seeded generator (the seed is printed; set
DEPTHLAB_KILL_SEED to replay one) and the sweep's observed progress (its checkpoints and finished runs), never from
the wall clock, so a slow or loaded machine kills at the same points of the work as a fast one.

The sweep processes use one torch thread (conftest sets OMP_NUM_THREADS=1, which the commands honour), as the
uninterrupted reference does.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from conftest import run_depthlab
from depthlab.config import expand_sweep
from depthlab.store import Store
from depthlab.training.checkpoint import load_checkpoint

SWEEP = {
    "task": {"name": "memorization", "n_words": 6, "length": 3, "n_examples": 24},
    "model": {"name": "attention_only", "layers": 1, "heads": 2, "init": "random"},
    # Long enough (about 2 s of training on one core) that a kill can land inside it on a fast machine.
    "train": {"optimizer": "adamw", "lr": 0.02, "steps": 600, "batch_size": 24, "eval_every": 100,
              "checkpoint_every": 9},
    "sweep": {"model.layers": [1, 2], "seed": [0, 1]},
}
LOG_STEPS = list(range(100, 601, 100))
KILLS = 4  # one during start-up, three during training
# start-up milestones the first kill waits for (one drawn): none (during imports), the database file, the runs
# registered, the first checkpoint
STARTUP = ("spawned", "database", "runs", "checkpoint")


def start(sweep_file: Path, store: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "depthlab.cli", "sweep", str(sweep_file), "--store", str(store),
                             "--group-size", "1", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(sweep_file: Path, store: Path) -> dict:
    """The sweep run to its end through the real entry point, in this process: the uninterrupted reference and the
    final re-runs need no process of their own (only the kills do), which saves a start-up (imports) each."""
    code, out, err = run_depthlab("sweep", str(sweep_file), "--store", str(store), "--group-size", "1", "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sweep") / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    return path


@pytest.fixture(scope="module")
def reference(sweep_file, tmp_path_factory):
    """The sweep without interruption: its results and its metrics."""
    root = tmp_path_factory.mktemp("reference")
    out = finish(sweep_file, root)
    store = Store(root)
    return {"runs": {r["id"]: r for r in out["runs"]},
            "metrics": {i: store.metric_columns(i) for i in store_ids(store)}}


def store_ids(store: Store) -> list[str]:
    return sorted(r["id"] for r in store.find_runs())


def expected_ids() -> list[str]:
    return sorted(Store.run_id(c.to_dict()) for c in expand_sweep(SWEEP))


def _runs(root: Path) -> list[tuple[str, str]]:
    """(id, status) of every run in the store, read without writing anything ([] while it is being created)."""
    if not (root / "depthlab.sqlite").exists():
        return []
    try:
        conn = sqlite3.connect(f"file:{root / 'depthlab.sqlite'}?mode=ro", uri=True, timeout=30)
        try:
            return conn.execute("SELECT id, status FROM runs").fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError:  # being created right now
        return []


def work_left(root: Path) -> float:
    """The fraction of the sweep's run-steps not yet done or checkpointed (read without writing anything)."""
    steps = SWEEP["train"]["steps"]
    done = 0
    for run_id, status in _runs(root):
        sidecar = root / "artifacts" / run_id / "checkpoint.json"
        if status == "done":
            done += steps
        elif sidecar.exists():
            done += json.loads(sidecar.read_text())["step"]
    return 1 - done / (len(expected_ids()) * steps)


def reached(root: Path, milestone: str) -> bool:
    if milestone == "database":
        return (root / "depthlab.sqlite").exists()
    if milestone == "runs":
        return bool(_runs(root))
    return milestone == "spawned" or work_left(root) < 1.0


def resume_points(store: Store) -> dict[str, int | None]:
    """The step each run of the sweep resumes from: None for a finished run (it writes nothing again), else its
    checkpoint's step (0 without one)."""
    status = {r["id"]: r["status"] for r in store.find_runs()}
    points: dict[str, int | None] = {}
    for run_id in expected_ids():
        loaded = load_checkpoint(store.artifacts_root / run_id)
        points[run_id] = None if status.get(run_id) == "done" else (loaded[1]["step"] if loaded else 0)
    return points


def rows_after(points: dict[str, int | None], reference: dict) -> list[tuple[str, int, str, str]]:
    """The metric rows a sweep resuming from ``points`` must write: each run's rows after its resume point."""
    return sorted((run_id, step, split, name) for run_id, point in points.items() if point is not None
                  for step in LOG_STEPS if step > point
                  for split, columns in reference["metrics"][run_id].items() for name in columns if name != "step")


def check_writes(written: list[tuple], points: dict[str, int | None], context: str) -> None:
    """One process's metric writes: each row at most once, and only rows after the step its run resumed from."""
    keys = [(run_id, step, split, name) for run_id, step, split, name, _ in written]
    assert len(keys) == len(set(keys)), f"{context}: a metric row written twice"
    again = [k for k in keys if points[k[0]] is None or k[1] <= points[k[0]]]
    assert again == [], f"{context}: rows written again, at or before the step their run resumed from"


def check_on_disk(store: Store) -> None:
    """Every checkpoint in the store loads (raises CheckpointError if half-written or corrupted)."""
    for run_id in store_ids(store):
        load_checkpoint(store.artifacts_root / run_id)


def check_complete(store: Store, reference: dict, out: dict) -> None:
    assert store_ids(store) == expected_ids()  # none missing, none extra
    assert all(r["status"] == "done" for r in out["runs"]) and len(out["runs"]) == len(expected_ids())
    conn = sqlite3.connect(store.db_path)
    try:
        rows = conn.execute("SELECT run_id, step, split FROM metrics").fetchall()
    finally:
        conn.close()
    assert set(rows) == {(r, s, split) for r in expected_ids() for s in LOG_STEPS for split in ("train", "eval")}
    for run in out["runs"]:
        want = reference["runs"][run["id"]]["metrics"]
        assert run["metrics"]["loss"] == pytest.approx(want["loss"], rel=1e-5)
        assert run["metrics"]["accuracy"] == pytest.approx(want["accuracy"], abs=1e-9)
        got_metrics, want_metrics = store.metric_columns(run["id"]), reference["metrics"][run["id"]]
        for split in want_metrics:
            for name, values in want_metrics[split].items():
                assert got_metrics[split][name] == pytest.approx(values, rel=1e-5, nan_ok=True)
    leftovers = [p.name for p in store.artifacts_root.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def rerun_and_check(sweep_file: Path, root: Path, reference: dict, writes) -> None:
    """The final re-run: it writes exactly each unfinished run's rows after its checkpoint, and completes the sweep."""
    with Store(root) as store:
        points, before = resume_points(store), len(writes())
    out = finish(sweep_file, root)
    written = writes()[before:]
    assert sorted(w[:4] for w in written) == rows_after(points, reference)
    check_complete(Store(root), reference, out)


def kill_when(proc: subprocess.Popen, root: Path, done: Callable[[], bool]) -> bool:
    """SIGKILL the sweep as soon as ``done()`` holds (or after 10 minutes without it, however slow the machine).

    Returns whether it was still running when killed.
    """
    deadline = time.time() + 600  # a bound on a hung process, not a measure of progress
    while proc.poll() is None and not done() and time.time() < deadline:
        time.sleep(0.02)
    running = proc.poll() is None
    proc.kill()
    proc.communicate(timeout=60)
    return running


def test_sigkill_at_random_moments_then_rerun_completes_every_run_exactly_once(sweep_file, reference, tmp_path,
                                                                                metric_writes):
    seed = int(os.environ.get("DEPTHLAB_KILL_SEED", random.SystemRandom().randrange(2**32)))
    print(f"kill points from seed {seed} (DEPTHLAB_KILL_SEED={seed} replays them)")
    rng = random.Random(seed)
    milestone = rng.choice(STARTUP)
    # the share of the sweep's work left at each later kill: three points spread over 75 %..25 %, so that a kill
    # always lands with hundreds of steps still to do
    targets = sorted((rng.uniform(0.25 + 0.5 * i / 3, 0.25 + 0.5 * (i + 1) / 3) for i in range(KILLS - 1)),
                     reverse=True)
    root = tmp_path / "store"
    finished: dict[str, dict] = {}  # run id -> its record when first seen done
    killed_while_running = 0
    writes = None  # metric writes are counted from the first kill on (the store exists then)
    for attempt in range(KILLS):
        points, before = {}, 0
        if writes:  # after the first kill: where each run resumes, and how many rows were written so far
            with Store(root) as store:
                points, before = resume_points(store), len(writes())
        proc = start(sweep_file, root)
        if attempt == 0:  # somewhere in start-up: imports, opening the store, the first steps
            running = kill_when(proc, root, lambda: reached(root, milestone))
        else:
            running = kill_when(proc, root, lambda a=attempt: work_left(root) <= targets[a - 1])
        killed_while_running += running
        context = f"seed {seed}, attempt {attempt}"
        print(f"{context}: killed with {work_left(root):.0%} of the work left")
        if writes:
            check_writes(writes()[before:], points, context)
        else:
            writes = metric_writes(root)  # creates the store if the kill came before the sweep did
        store = Store(root)
        check_on_disk(store)
        for record in store.find_runs():
            if record["id"] in finished:  # done exactly once: a finished run is never trained or recorded again
                assert record == finished[record["id"]], context
            elif record["status"] == "done":
                finished[record["id"]] = record
        store.close()
    assert killed_while_running == KILLS, f"seed {seed}: a sweep finished before its kill point"
    rerun_and_check(sweep_file, root, reference, writes)
    store = Store(root)
    for run_id, record in finished.items():
        assert store.get_run(run_id) == record, f"seed {seed}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_checkpoints_marks_interrupted_exits_130_and_the_rerun_completes(sweep_file, reference, tmp_path, sig,
                                                                              metric_writes):
    """Ctrl-C (SIGINT), and SIGTERM the same way (what `timeout`, schedulers and Ray send)."""
    root = tmp_path / "store"
    proc = start(sweep_file, root)
    deadline = time.time() + 600  # a bound on a hung process, not a measure of progress
    while time.time() < deadline:  # wait until a run is checkpointed past its first metric row (a re-run that
        # trained it again from step 0 would then write that row a second time)
        sidecars = (root / "artifacts").glob("*/checkpoint.json")
        if any(json.loads(p.read_text())["step"] > LOG_STEPS[0] for p in sidecars):
            break
        time.sleep(0.05)
    else:
        pytest.fail("no checkpoint past the first metric row appeared")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, f"exit code {proc.returncode}: {err}"
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "interrupted"
    store = Store(root)
    statuses = {r["id"]: r for r in store.find_runs()}
    interrupted = [r for r in statuses.values() if r["status"] == "interrupted"]
    assert len(interrupted) == 1 and all(r["status"] in ("done", "interrupted") for r in statuses.values())
    run = interrupted[0]
    _, meta = load_checkpoint(store.artifacts_root / run["id"])
    assert meta["step"] == run["step"] > 0  # checkpointed where it stopped, not only at the last multiple of 9
    check_on_disk(store)
    store.close()
    rerun_and_check(sweep_file, root, reference, metric_writes(root))
