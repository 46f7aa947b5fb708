"""Shared fixtures."""

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

# `make test` is pytest -n 2 on 2 cores: one torch thread in each test process and in each process a test starts
# (the commands' setup_threads honours OMP_NUM_THREADS). At two threads each, four share two cores and a tiny
# model's ops spin-wait for each other: a 300-step test took 21 s at two threads, 5 s at one, beside two busy
# processes. Tests that are about threads set them themselves.
os.environ["OMP_NUM_THREADS"] = "1"
torch.set_num_threads(1)


def crash_at_step(n: int) -> Callable[[int], None]:
    """A ``progress`` callback for ``train_group`` that raises ``RuntimeError("crash")`` at the n-th step: a crash
    in the middle of training, after the checkpoints the run wrote before it."""
    steps: list[int] = []

    def progress(step: int) -> None:
        steps.append(step)
        if len(steps) == n:
            raise RuntimeError("crash")

    return progress


class Killed(BaseException):
    """A kill: not an Exception, so the engine records nothing on its way out (as SIGKILL leaves it)."""


def killed_after_step(n: int) -> Callable[[int], None]:
    """A ``progress`` callback for ``train_group`` that raises :class:`Killed` at the n-th step."""
    steps: list[int] = []

    def progress(step: int) -> None:
        steps.append(step)
        if len(steps) == n:
            raise Killed

    return progress


def record_metric_writes(root: Path) -> Callable[[], list[tuple[str, int, str, str, float]]]:
    """Record every row written into the metrics table of the store at ``root`` from now on, by any process.

    An SQLite trigger copies each inserted row (``INSERT OR REPLACE`` included) into a side table; the returned
    function reads them, oldest first, as (run_id, step, split, name, value). The metrics table's primary key keeps
    one row per (run, step, split, name) however often it is written: a test of "no duplicate rows" must count the
    writes, not the keys.
    """
    from depthlab.store import Store

    store = Store(root)  # the schema exists
    db = store.db_path
    store.close()
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("CREATE TABLE metric_writes (run_id TEXT, step INTEGER, split TEXT, name TEXT, value REAL)")
        conn.execute("CREATE TRIGGER record_metric_write AFTER INSERT ON metrics BEGIN INSERT INTO metric_writes "
                     "VALUES (NEW.run_id, NEW.step, NEW.split, NEW.name, NEW.value); END")
    conn.close()

    def writes() -> list[tuple[str, int, str, str, float]]:
        reader = sqlite3.connect(db)
        try:
            return reader.execute(
                "SELECT run_id, step, split, name, value FROM metric_writes ORDER BY rowid").fetchall()
        finally:
            reader.close()

    return writes


@pytest.fixture
def small_evaluation(monkeypatch):
    """Final evaluations on 512 sampled examples where a task's set has more than 4,096 (the presets' IC-QA is an
    exhaustive 338,688, IC-TM a sample of 20,000): for tests of what a command writes or draws, not of a score."""
    from depthlab.training import data

    monkeypatch.setattr(data, "EXHAUSTIVE_EVAL_LIMIT", 4096)
    monkeypatch.setattr(data, "SAMPLED_EVAL_EXAMPLES", 512)


@pytest.fixture
def metric_writes():
    """:func:`record_metric_writes` as a fixture."""
    return record_metric_writes


def run_depthlab(*args: str) -> tuple[int, str, str]:
    """``depthlab ARGS`` in this process through its real entry point (``depthlab.cli.main``, so its error
    boundary too): (exit code, stdout, stderr). The environment is given back as it was, as a process would leave
    it: what the command sets for the processes it starts (``--memory``'s $DEPTHLAB_MEMORY, ``--plugin``'s
    $DEPTHLAB_PLUGINS) must not reach the tests that run after it."""
    import io
    import os
    import sys
    from contextlib import redirect_stderr, redirect_stdout
    from unittest import mock

    from depthlab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with (mock.patch.dict(os.environ), mock.patch.object(sys, "argv", ["depthlab", *args]), redirect_stdout(out),
          redirect_stderr(err)):
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def one_line_exit_2(result: tuple[int, str, str], *needles: str) -> str:
    """The one ``error:`` line of a :func:`run_depthlab` result that exited with code 2 and printed nothing on
    stdout, checked to hold each of ``needles``."""
    code, out, err = result
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert out == "", out
    return lines[0]


@pytest.fixture
def depthlab_main():
    """:func:`run_depthlab` as a fixture."""
    return run_depthlab


# The longest files (seconds of one worker, quiet 2-core machine), handed out first: `pytest -n 2 --dist loadfile`
# gives each worker whole files in collection order, and one of these started last ran on alone for a minute.
LONGEST_FIRST = ("test_reliability_kill.py", "test_capability.py", "test_figures.py", "test_api.py",
                 "test_ray_executor.py", "test_seed003_lengths.py", "test_notebook.py", "test_seed001_presets.py")


# The fast tier (`make test-fast`: pytest -m fast): a file, or a test (every case of it) or one case, each a guard
# of a flagship guarantee that a deliberate breakage once got past (mutation/breakages.py re-makes all fifteen and
# checks the tier catches each). Where the data come from and each run's own stream; resume by its batches, steps,
# writes and an altered checkpoint; the optimizer against torch.optim (clipping, warm-up, decay, bias correction,
# runs leaving); the engine's recipes; weight decay and the owner check a second way; Theorem 3's margin; compile;
# the TransformerLens export's eps; the cell key.
FAST = ("test_provenance.py", "test_second_guards.py", "test_optim.py", "test_engine_resume.py",
        "test_engine_recipes.py", "test_group_data.py", "test_fixed_data.py",
        "test_cells.py::test_a_cell_is_the_config_less_its_seed",
        "test_constructions.py::test_theorem3_icqa_exhaustive",
        "test_device.py::test_a_compiled_step_traces_the_real_forward_and_backward_and_trains_the_same",
        "test_induction_export.py::test_transformer_export_loads_in_transformerlens_with_equal_logits[learned-True-0.01]")


def pytest_ignore_collect(collection_path, config):
    """With ``-m fast`` alone, the test files outside the tier are not even imported (their imports are most of the
    tier's time)."""
    if config.getoption("markexpr") == "fast" and collection_path.name.startswith("test_") \
            and collection_path.suffix == ".py":
        return collection_path.name not in {entry.split("::")[0] for entry in FAST}
    return None


def in_fast_tier(item: pytest.Item, entry: str) -> bool:
    name = item.nodeid.rsplit("/", 1)[-1]
    return name == entry or name.startswith((f"{entry}::", f"{entry}["))


def mark_fast_tier(items: list[pytest.Item]) -> None:
    """Mark the tests of ``FAST`` ``fast``; an entry that names a collected file but none of its tests (renamed or
    gone) is an error, so the tier never shrinks unnoticed."""
    files = {item.path.name for item in items}
    for entry in FAST:
        marked = [item for item in items if in_fast_tier(item, entry)]
        if not marked and entry.split("::")[0] in files:
            raise pytest.UsageError(f"tests/conftest.py FAST names {entry!r}, which is not among the tests collected")
        for item in marked:
            item.add_marker(pytest.mark.fast)


def pytest_collection_modifyitems(config, items):
    """The fast tier marked; the longest files first (the order is the same in every worker, as xdist requires);
    tests marked ``gpu`` run only where PyTorch sees a CUDA GPU."""
    import torch

    mark_fast_tier(items)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order is kept
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU (torch.cuda.is_available() is false)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)
