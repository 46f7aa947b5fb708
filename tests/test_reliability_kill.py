"""A real `depthlab sweep` process killed with SIGKILL at random moments, or stopped with Ctrl-C (SIGINT).

After every kill: each checkpoint on disk loads (none half-written), and no finished run was touched again.
After the final re-run: every run done exactly once, none missing or extra, one metrics row per (run, step,
split, name) and none missing, results equal to an uninterrupted sweep. The random kill times come from a
seed printed on failure (set DEPTHLAB_KILL_SEED to replay one).

The sweep processes are pinned to one CPU (``taskset``-like affinity), so they use one torch thread, as
the uninterrupted reference does.
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
from pathlib import Path

import pytest
import yaml

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


def _one_cpu() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def start(sweep_file: Path, store: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "depthlab.cli", "sweep", str(sweep_file), "--store", str(store),
                             "--group-size", "1", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, preexec_fn=_one_cpu)


def finish(sweep_file: Path, store: Path) -> dict:
    proc = start(sweep_file, store, "--json")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sweep") / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    return path


@pytest.fixture(scope="module")
def reference(sweep_file, tmp_path_factory):
    """The sweep without interruption: its results, its metrics, and how long it took."""
    root = tmp_path_factory.mktemp("reference")
    began = time.time()
    out = finish(sweep_file, root)
    seconds = time.time() - began
    store = Store(root)
    first_run = min(r["created"] for r in store.find_runs())
    return {"runs": {r["id"]: r for r in out["runs"]},
            "metrics": {i: store.metric_columns(i) for i in store_ids(store)},
            "seconds": seconds, "startup": first_run - began}


def store_ids(store: Store) -> list[str]:
    return sorted(r["id"] for r in store.find_runs())


def expected_ids() -> list[str]:
    return sorted(Store.run_id(c.to_dict()) for c in expand_sweep(SWEEP))


def work_left(root: Path) -> float:
    """The fraction of the sweep's run-steps not yet done or checkpointed (read without writing anything)."""
    steps = SWEEP["train"]["steps"]
    if not (root / "depthlab.sqlite").exists():
        return 1.0
    try:
        conn = sqlite3.connect(f"file:{root / 'depthlab.sqlite'}?mode=ro", uri=True, timeout=30)
        try:
            rows = conn.execute("SELECT id, status FROM runs").fetchall()
        finally:
            conn.close()
    except sqlite3.OperationalError:  # being created right now
        return 1.0
    done = 0
    for run_id, status in rows:
        sidecar = root / "artifacts" / run_id / "checkpoint.json"
        if status == "done":
            done += steps
        elif sidecar.exists():
            done += json.loads(sidecar.read_text())["step"]
    return 1 - done / (len(expected_ids()) * steps)


def check_on_disk(store: Store) -> None:
    """Every checkpoint in the store loads (raises CheckpointError if half-written or corrupted)."""
    for run_id in store_ids(store):
        load_checkpoint(store.artifacts_root / run_id)


def check_complete(store: Store, reference: dict, out: dict) -> None:
    assert store_ids(store) == expected_ids()  # none missing, none extra
    assert all(r["status"] == "done" for r in out["runs"]) and len(out["runs"]) == len(expected_ids())
    conn = sqlite3.connect(store.db_path)
    try:
        rows = conn.execute("SELECT run_id, step, split, name FROM metrics").fetchall()
    finally:
        conn.close()
    assert len(rows) == len(set(rows))
    logged = {(r, step, split) for r, step, split, _ in rows}
    assert logged == {(r, s, split) for r in expected_ids() for s in LOG_STEPS for split in ("train", "eval")}
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


def kill_when(proc: subprocess.Popen, root: Path, target_left: float, extra_s: float) -> bool:
    """Wait until the sweep has at most ``target_left`` of its work left, then ``extra_s`` more; SIGKILL it.

    Returns whether it was still running when killed.
    """
    deadline = time.time() + 120
    while proc.poll() is None and work_left(root) > target_left and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(extra_s)
    running = proc.poll() is None
    proc.kill()
    proc.communicate(timeout=60)
    return running


def test_sigkill_at_random_moments_then_rerun_completes_every_run_exactly_once(sweep_file, reference, tmp_path):
    seed = int(os.environ.get("DEPTHLAB_KILL_SEED", random.SystemRandom().randrange(2**32)))
    print(f"kill times from seed {seed} (DEPTHLAB_KILL_SEED={seed} replays them)")
    rng = random.Random(seed)
    root = tmp_path / "store"
    finished: dict[str, dict] = {}  # run id -> its record when first seen done
    killed_while_running = 0
    # Under heavy load a sweep can finish what is left before the kill lands; such an attempt does not count,
    # so there are up to twice as many attempts as kills wanted.
    for attempt in range(2 * KILLS):
        left = work_left(root)
        if not left or killed_while_running == KILLS:
            break
        proc = start(sweep_file, root)
        if attempt == 0:  # somewhere in start-up: imports, opening the store, the first steps (never later:
            # the reference's start-up may have been slower than this one, so stop waiting at the first checkpoint)
            deadline = time.time() + rng.uniform(0.5, 1.2) * reference["startup"]
            while proc.poll() is None and time.time() < deadline and work_left(root) == 1.0:
                time.sleep(0.02)
            running = kill_when(proc, root, 1.0, 0.0)
        else:  # after a random share of what is left, plus a random moment (inside a step, a checkpoint, …)
            running = kill_when(proc, root, left * rng.uniform(0.1, 0.9), rng.uniform(0.0, 0.15))
        killed_while_running += running
        context = f"seed {seed}, attempt {attempt}"
        print(f"{context}: killed with {work_left(root):.0%} of the work left")
        if not (root / "depthlab.sqlite").exists():
            continue
        store = Store(root)
        check_on_disk(store)
        for record in store.find_runs():
            if record["id"] in finished:  # done exactly once: a finished run is never trained or recorded again
                assert record == finished[record["id"]], context
            elif record["status"] == "done":
                finished[record["id"]] = record
        store.close()
    assert killed_while_running >= KILLS - 1, f"seed {seed}: the kills came too late to test anything"
    out = finish(sweep_file, root)
    store = Store(root)
    check_complete(store, reference, out)
    for run_id, record in finished.items():
        assert store.get_run(run_id) == record, f"seed {seed}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_checkpoints_marks_interrupted_exits_130_and_the_rerun_completes(sweep_file, reference, tmp_path, sig):
    """Ctrl-C (SIGINT), and SIGTERM the same way (what `timeout`, schedulers and Ray send)."""
    root = tmp_path / "store"
    proc = start(sweep_file, root)
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until the first run has written a checkpoint
        if any((root / "artifacts").glob("*/checkpoint.json")):
            break
        time.sleep(0.05)
    else:
        pytest.fail("no checkpoint appeared")
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
    check_complete(Store(root), reference, finish(sweep_file, root))
