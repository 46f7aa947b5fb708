"""The Ray executor on a local Ray instance with 2 CPUs: same results as the local executor, a killed worker
retried by Ray resumes its runs from their checkpoints, errors come back as themselves.

One Ray instance for the whole module (started by ``depthlab.sweeps.ray_executor.connect``, as the CLI does).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read when ray is imported: as connect() does
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ray = pytest.importorskip("ray")

from depthlab.config import ResourceSpec, parse_run  # noqa: E402
from depthlab.errors import UserError  # noqa: E402
from depthlab.store import Store  # noqa: E402
from depthlab.sweeps.local import run_local  # noqa: E402
from depthlab.sweeps.ray_executor import connect, run_ray  # noqa: E402
from depthlab.training.checkpoint import WEIGHTS, CheckpointError  # noqa: E402
from depthlab.training.engine import train_group  # noqa: E402

STEPS, EVERY = 40, 10


def config(seed: int, layers: int = 1):
    return parse_run({
        "task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4},
        "model": {"name": "attention_only", "layers": layers, "heads": 1, "attention": "softmax", "init": "random"},
        "train": {"optimizer": "adamw", "lr": 0.05, "steps": STEPS, "batch_size": 32, "eval_every": 15,
                  "checkpoint_every": EVERY},
        "seed": seed,
    })


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    assert connect(None, local_cpus=2)  # what `depthlab sweep --executor ray` does without --address
    assert {node["NodeManagerAddress"] for node in ray.nodes()} == {"127.0.0.1"}  # a private, loopback instance
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same runs on the local executor."""
    store = Store(tmp_path_factory.mktemp("reference"))
    configs = [config(s) for s in range(4)]
    return run_local(configs, store, group_size=2), store


def same_results(got: dict, want: dict) -> None:
    assert set(got) >= set(want)
    for run_id, final in want.items():
        assert got[run_id]["loss"] == pytest.approx(final["loss"], rel=1e-5)
        assert got[run_id]["accuracy"] == pytest.approx(final["accuracy"], abs=1e-9)


def _niceness() -> int:
    return os.nice(0)


def test_a_local_instance_trains_at_the_commands_priority(local_ray):
    """Ray's default worker niceness (15) would let any busy program on the machine starve a local sweep."""
    assert ray.get(ray.remote(_niceness).remote()) == os.nice(0)


def test_ray_sweep_equals_local_sweep(local_ray, reference, tmp_path):
    want, ref_store = reference
    store = Store(tmp_path)
    steps = []
    results = run_ray([config(s) for s in range(4)], store, group_size=2, progress=steps.append)
    same_results(results, want)
    assert sorted(steps) == [2 * STEPS, 2 * STEPS]  # one progress report per group
    for run_id in want:
        assert store.get_run(run_id)["status"] == "done"
        got, ref = store.metric_columns(run_id), ref_store.metric_columns(run_id)
        assert got.keys() == ref.keys()
        for split in ref:
            assert got[split].keys() == ref[split].keys()
            for name in ref[split]:
                assert got[split][name] == pytest.approx(ref[split][name], rel=1e-5)
        assert store.artifacts(run_id, "checkpoint")  # recorded by the writer actor, file by the worker
    assert run_ray([config(s) for s in range(4)], store, group_size=2) == results  # nothing left: no task


def crash_once_then_count(configs, store):
    """First attempt: train until a periodic checkpoint exists, then die like a killed worker (os._exit).

    The retry trains normally and writes how many steps it ran, so the test sees that it resumed.
    """
    folder = store.artifacts_root / Store.run_id(configs[0].to_dict())
    marker = folder.parent.parent / "crashed"
    steps = []

    def progress(n):
        steps.append(n)
        if not marker.exists() and (folder / WEIGHTS).exists() and len(steps) > EVERY:
            marker.write_text(str(len(steps)))
            os._exit(1)

    results = train_group(configs, store, progress=progress)
    (marker.parent / "retry_steps").write_text(str(len(steps)))
    return results


def test_killed_worker_is_retried_and_resumes_from_its_checkpoint(local_ray, reference, tmp_path):
    want, _ = reference
    store = Store(tmp_path)
    configs = [config(0), config(1)]  # one group, one task
    results = run_ray(configs, store, group_size=2, train_fn=crash_once_then_count, max_retries=2)
    died_after = int((tmp_path / "crashed").read_text())
    retry_steps = int((tmp_path / "retry_steps").read_text())
    assert died_after > EVERY  # the first attempt died mid-run, after its first checkpoint
    assert retry_steps == STEPS - EVERY  # the retry resumed from step 10, not from 0
    same_results(results, {k: want[k] for k in results})
    assert len(results) == 2
    assert all(r["status"] == "done" for r in store.find_runs())


def test_a_task_holds_its_groups_runs_while_it_trains(local_ray, reference, tmp_path):
    """As a local sweep does (``training.claims``): a second command training the same run waits, not joins. The
    task's train_fn probes the lock from another open file, which ``flock`` refuses while the task holds it."""
    want, _ = reference
    store = Store(tmp_path)
    folder = store.run_folder(Store.run_id(config(0).to_dict()))

    def probe_then_train(configs, s):
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            raise AssertionError("the Ray task trains without holding its run")
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
        return train_group(configs, s)

    results = run_ray([config(0)], store, train_fn=probe_then_train)
    same_results(results, {k: want[k] for k in results})


def always_crash(configs, store):
    os._exit(1)


def test_a_group_whose_worker_keeps_dying_is_marked_failed_and_the_others_go_on(local_ray, reference, tmp_path):
    want, _ = reference
    store = Store(tmp_path)
    doomed = config(5, layers=2)  # a group of its own
    results = run_ray([config(0), doomed], store, group_size=1, max_retries=1,
                      train_fn=lambda configs, s: (always_crash if configs[0] == doomed else train_group)(configs, s))
    assert set(results) == {Store.run_id(config(0).to_dict())}
    same_results(results, {k: want[k] for k in results})
    record = store.get_run(Store.run_id(doomed.to_dict()))
    assert record["status"] == "failed" and "WorkerCrashedError" in record["error"]


def test_user_errors_come_back_as_themselves_and_nothing_is_overwritten(local_ray, tmp_path):
    store = Store(tmp_path)
    small, big = config(7, layers=1), config(7, layers=2)
    train_group([small], store)
    src = store.artifacts_root / Store.run_id(small.to_dict())
    dst = store.artifact_path(Store.run_id(big.to_dict()), "checkpoint", WEIGHTS).parent
    for f in src.iterdir():  # a checkpoint whose shapes do not fit its run's config
        (dst / f.name).write_bytes(f.read_bytes())
    before = {f.name: f.read_bytes() for f in dst.iterdir()}
    with pytest.raises(CheckpointError, match="does not fit") as info:
        run_ray([big], store)
    assert "\n" not in str(info.value) and str(dst) in str(info.value)
    assert {f.name: f.read_bytes() for f in dst.iterdir()} == before
    assert store.get_run(Store.run_id(big.to_dict()))["status"] == "failed"


def test_a_request_no_node_can_grant_is_refused_before_any_work(local_ray, tmp_path):
    with pytest.raises(UserError, match=r"resources\.cpus: each task asks for 3"):
        run_ray([config(0)], Store(tmp_path), resources=ResourceSpec(cpus=3))
    assert Store(tmp_path).find_runs() == []


def test_remote_store_offers_the_store_methods(local_ray, tmp_path):
    from depthlab.sweeps.ray_store import RemoteStore, StoreWriter

    writer = ray.remote(StoreWriter).remote(str(tmp_path))
    remote = RemoteStore(tmp_path, writer)
    run_id = remote.create_run({"seed": 1}, "t", "m")
    remote.log_metrics(run_id, 1, "train", {"loss": 0.5})
    assert Store(tmp_path).metric_columns(run_id)["train"]["loss"] == [0.5]
    assert remote.artifact_path(run_id, "x", "a.txt") == Path(tmp_path) / "artifacts" / run_id / "a.txt"
    with pytest.raises(AttributeError):
        remote.no_such_method  # noqa: B018


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1", "localhost:notaport"])
def test_an_address_where_no_cluster_answers_fails_fast(address):
    from depthlab.sweeps.ray_executor import check_address

    with pytest.raises(UserError, match=r"^--address "):
        check_address(address, timeout=2.0)
