"""Issue 47 item 3: every wait and every size bounded.

`Retry-After: 99999`, an HTTP date in 2100 or `retry-after-ms: inf` slept 300 s per retry under `--timeout 3`;
`--timeout inf` killed the deadline's timer thread (a traceback, exit 1); `bench --runs 1000000` built a million
configs (1.7 GB and growing) before anything checked its size; a store whose `metrics` is an endless recursive
view hung `metrics` and `report`; a plugin's non-daemon thread kept the process alive after its result.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from email.utils import formatdate
from pathlib import Path

import pytest

from conftest import one_line_exit_2, run_depthlab
from depthlab.llm import runners
from depthlab.llm.runners import EndpointError, EndpointRunner, Request
from depthlab.store import Store
from hostile_http import Answer, HostileServer


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(runners, "_sleep", slept.append)
    return slept


@pytest.mark.parametrize("header", [{"Retry-After": "99999"}, {"Retry-After": formatdate(4102444800, usegmt=True)},
                                    {"retry-after-ms": "inf"}, {"retry-after-ms": "nan"}, {"Retry-After": "1e400"},
                                    {"Retry-After": "4"}])
def test_a_retry_after_past_the_deadline_is_refused_naming_the_header_never_slept(sleeps, header):
    with HostileServer() as server:
        server.answer = Answer(status=429, headers=header)
        runner = EndpointRunner(server.url, "m", timeout=3, retries=3)
        try:
            with pytest.raises(EndpointError, match="asks to wait before a retry") as refused:
                runner.complete(Request("q", 0.0, 0))
        finally:
            runner.close()
    name = next(iter(header))
    assert f"({name}: {header[name][:20]}" in str(refused.value) and "3 s --timeout" in str(refused.value)
    assert sleeps == []


def test_a_retry_after_within_the_deadline_is_waited(sleeps):
    with HostileServer() as server:
        server.answer = Answer(status=503, headers={"retry-after-ms": "1500"})
        runner = EndpointRunner(server.url, "m", timeout=3, retries=2)
        try:
            with pytest.raises(EndpointError, match="HTTP 503, after 3 attempts"):
                runner.complete(Request("q", 0.0, 0))
        finally:
            runner.close()
    assert sleeps == [1.5, 1.5]


@pytest.mark.parametrize(("timeout", "needle"), [("inf", "at most 3,600 (got inf)"), ("1e9", "at most 3,600"),
                                                 ("nan", "greater than or equal to 0.001")])
def test_timeout_is_finite_and_bounded(timeout, needle, tmp_path):
    one_line_exit_2(run_depthlab("llm-bench", "--endpoint", "http://127.0.0.1:9/v1", "--model-name", "m",
                                 "--timeout", timeout, "--store", str(tmp_path / "s")), "--timeout", needle)


def test_bench_is_sized_before_it_allocates():
    started = time.perf_counter()
    one_line_exit_2(run_depthlab("bench", "--runs", "1,1000000"), "--runs: group sizes of at most 10,000 runs")
    one_line_exit_2(run_depthlab("--memory", "4GiB", "bench", "--runs", "9000", "--case", "retrieval"),
                    "memory: a group of 9000 runs", "lower --runs (at most")
    assert time.perf_counter() - started < 5


RECURSIVE_METRICS = ("CREATE VIEW metrics AS WITH RECURSIVE r(run_id, step, split, name, value) AS "
                     "(SELECT 'a', 0, 'eval', 'accuracy', 1.0 UNION ALL "
                     "SELECT run_id, step + 1, split, name, value FROM r) SELECT * FROM r")


@pytest.fixture
def endless(tmp_path: Path) -> Path:
    """A store whose `metrics` table was replaced by an endless recursive view."""
    root = tmp_path / "S"
    Store(root).close()
    with sqlite3.connect(root / "depthlab.sqlite") as conn:
        conn.execute("DROP TABLE metrics")
        conn.execute(RECURSIVE_METRICS)
    return root


@pytest.mark.parametrize("command", [["metrics"], ["report", "--examples", "0"]])
def test_a_recursive_view_named_metrics_is_refused_not_read(endless, command, tmp_path):
    """`metrics` and `report` never ended on it."""
    started = time.perf_counter()
    one_line_exit_2(run_depthlab(*command, "--store", str(endless), "--out", str(tmp_path / "o.html")),
                    "metrics is a view, not the table depthlab writes")
    assert time.perf_counter() - started < 10


def test_every_read_has_a_deadline(tmp_path, monkeypatch):
    """Whatever a read runs into (a view under another name, a query that never ends), SQLite stops it."""
    from depthlab.store import connection
    from depthlab.store.errors import database_failure

    Store(tmp_path / "S").close()
    monkeypatch.setattr(connection, "MAX_STATEMENT_S", 0.2)
    conn = connection.open_database(tmp_path / "S" / "depthlab.sqlite", "read")
    started = time.perf_counter()
    with pytest.raises(sqlite3.OperationalError, match="interrupted") as stopped:
        conn.execute("WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r")
    assert time.perf_counter() - started < 5
    assert "a read ran past" in str(database_failure(tmp_path / "S", stopped.value))
    conn.close()


THREAD_PLUGIN = '''
import threading, time
from depthlab.tasks.base import Batch, Task, register, letter_names, number_names

threading.Thread(target=time.sleep, args=(5,), name="plugin-sleeper").start()

@register
class Sleeper(Task):
    name = "sleeper"
    section = "a test"
    summary = "a plugin that leaves a non-daemon thread running"
    eval_protocol = "fresh sample"
    vocab = property(lambda self: letter_names(4))
    labels = property(lambda self: number_names(4))
    seq_len = property(lambda self: 3)
    chance = property(lambda self: 0.25)

    def sample(self, n, rng, split="train"):
        return Batch(rng.integers(0, 4, (n, 3)), rng.integers(0, 4, n))

    def dataset_size(self, split="eval"):
        return 10**9

    def enumerate(self, split="eval"):
        return None
'''


def test_a_plugins_thread_cannot_keep_the_command_alive(tmp_path):
    """A thread the plugin starts (not a daemon) kept the process alive after its result, for as long as it ran;
    it is now a daemon, which the interpreter does not wait for (benchmarks/hostile_cases.py runs the process)."""
    from depthlab import plugins
    from depthlab.tasks import TASKS

    plugin = tmp_path / "sleeper.py"
    plugin.write_text(THREAD_PLUGIN)
    tasks, loaded = dict(TASKS), dict(plugins.LOADED)
    try:
        code, out, err = run_depthlab("--plugin", str(plugin), "tasks", "--json")
        assert code == 0 and "sleeper" in out, err
        (sleeper,) = [t for t in threading.enumerate() if t.name == "plugin-sleeper"]
        assert sleeper.daemon
    finally:
        for registry, before in ((TASKS, tasks), (plugins.LOADED, loaded)):
            registry.clear()
            registry.update(before)


def test_a_ray_executor_whose_worker_never_starts_fails_fast_naming_the_object_store(monkeypatch):
    """Ray's workers, unable to map their object store under an 8 GB address-space cap, never started, and the
    sweep waited for minutes without a word; the first worker (the store writer) now has WORKER_START_S."""
    ray = pytest.importorskip("ray")
    from depthlab.errors import UserError
    from depthlab.sweeps import ray_executor

    asked: list[float] = []

    def get(ref, timeout):
        asked.append(timeout)
        raise ray.exceptions.GetTimeoutError("timed out")

    fake = type("FakeRay", (), {"get": staticmethod(get), "exceptions": ray.exceptions})
    writer = type("Writer", (), {"is_stopping": type("Method", (), {"remote": staticmethod(lambda: "ref")})})
    with pytest.raises(UserError, match=r"no Ray worker started within 60 s; .*object store memory.*"
                                        r"set DEPTHLAB_RAY_OBJECT_STORE=512MiB"):
        ray_executor._wait_for_worker(fake, writer, None)
    assert asked == [ray_executor.WORKER_START_S]
    monkeypatch.setenv("DEPTHLAB_RAY_OBJECT_STORE", "512MiB")
    assert ray_executor._object_store() == {"object_store_memory": 512 << 20}
    monkeypatch.setenv("DEPTHLAB_RAY_OBJECT_STORE", "lots")
    with pytest.raises(UserError, match=r"\$DEPTHLAB_RAY_OBJECT_STORE: "):
        ray_executor._object_store()


@pytest.fixture
def local_ray(monkeypatch):
    """Ray, with ``connect``'s settings of the environment given back after the test and ``ray.init`` recorded
    (never started)."""
    ray = pytest.importorskip("ray")
    from depthlab.sweeps import ray_executor

    for variable in (*ray_executor.LOCAL_INSTANCE_ENV, *ray_executor.LOCAL_WORKER_NICENESS):
        monkeypatch.setenv(variable, os.environ.get(variable, ray_executor.LOCAL_INSTANCE_ENV.get(variable, "0")))
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    inits: list[dict] = []
    monkeypatch.setattr(ray, "init", lambda **options: inits.append(options))
    return ray_executor, inits


def test_an_object_store_the_address_space_limit_cannot_hold_fails_before_ray_starts(local_ray, monkeypatch):
    """Under `ulimit -v 4000000` (this machine: Ray's default object store 6.7 GiB) Ray's raylet died mapping its
    object store, ray.init waited 30 s and the sweep ended in an internal error (exit 1); under 8000000 the driver
    aborted mapping it (exit 1; benchmarks/hostile_cases.py runs both with real Ray). The size is now checked
    against the limit, beside what each Ray process holds, before Ray starts."""
    import resource

    from depthlab.errors import UserError

    ray_executor, inits = local_ray
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (4_000_000 << 10, resource.RLIM_INFINITY))
    monkeypatch.setenv("DEPTHLAB_RAY_OBJECT_STORE", "6GiB")
    with pytest.raises(UserError, match=r"object store memory Ray would map \(6\.0 GiB\), which every Ray process "
                                        r"maps beside its own .*, does not fit this process's address-space limit of "
                                        r"3\.8 GiB \(`ulimit -v`\).*set DEPTHLAB_RAY_OBJECT_STORE=512MiB"):
        ray_executor.connect()
    monkeypatch.delenv("DEPTHLAB_RAY_OBJECT_STORE")
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (600 << 20, resource.RLIM_INFINITY))
    with pytest.raises(UserError, match=r"object store memory Ray would map \(.*\), which every"):  # Ray's default
        ray_executor.connect()
    assert inits == []
    monkeypatch.setenv("DEPTHLAB_RAY_OBJECT_STORE", "512MiB")
    fits = (512 << 20) + ray_executor._address_space_in_use() + ray_executor.RAY_PROCESS_GROWTH + (64 << 20)
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (fits, resource.RLIM_INFINITY))
    ray_executor.connect()  # fits: Ray is started with that size
    assert inits and inits[0]["object_store_memory"] == 512 << 20


def test_a_local_ray_instance_that_never_registers_is_one_line_naming_the_object_store(local_ray, monkeypatch):
    """ray.init's own failure when the raylet dies for another reason (shared memory): named, exit 2, not an
    internal error."""
    ray = pytest.importorskip("ray")
    from depthlab.errors import UserError

    ray_executor, _ = local_ray

    def init(**options):
        raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                        "failed to startup or the GCS has become overloaded.")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray_executor, "_check_address_space", lambda size: None)
    with pytest.raises(UserError, match=r"^--executor ray: Ray's local instance did not start .*object store memory.*"
                                        r"set DEPTHLAB_RAY_OBJECT_STORE=512MiB"):
        ray_executor.connect()
