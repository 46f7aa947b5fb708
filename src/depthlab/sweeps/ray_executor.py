"""Run a sweep on Ray: one Ray task per group of runs, on a local Ray instance or on any Ray cluster.

``run_ray`` plans the same groups as the local executor (``plan_groups``) and submits each group that still
has work as one task asking for the ``resources:`` of the sweep file (``cpus`` per task, also its torch
threads; ``gpus``; ``memory_gb``). Each task runs :func:`depthlab.training.engine.train_group`, exactly the
code the local executor runs, so results do not depend on the executor.

Where things are written, and why:

- The SQLite store is opened by one process only: a small *store writer* actor pinned to the driver's node
  (``num_cpus=0``). Workers send it their store calls (create run, metrics, status, final row), each call
  waited for. SQLite's WAL mode needs every process that opens the database on one host, so letting
  workers on other nodes open it (over NFS, say) would not be safe; the actor keeps every write on the
  driver's host, in order, in transactions. Every call is idempotent (``INSERT OR IGNORE`` / ``OR REPLACE``,
  status updates), so the actor can be restarted and its calls retried.
- Checkpoints are written by the workers themselves into the store's artifact folder
  (``<store>/artifacts/<run_id>/``), atomically, each task holding its runs' folders while it trains
  (``training.claims``, as a local sweep does: another command training the same runs waits). On a
  multi-node cluster that folder must be on a shared filesystem mounted at the same path on every node, so
  a retried task (on any node) finds the checkpoint and the driver's analyses find the trained weights;
  without one, a retried group restarts from step 0 on another node (still correct, only slower).

A worker that dies (killed, out of memory, node lost) is retried by Ray up to ``max_retries`` times; the
retry calls ``train_group`` again, which skips the runs already done and resumes the others from their last
checkpoint. A group still failing after its retries has its unfinished runs marked ``failed``; the other
groups go on. An exception raised by the training code is not retried: the remaining tasks are cancelled
(they checkpoint and mark their runs ``interrupted``) and the exception is raised on the driver, a
``UserError`` (such as a checkpoint that does not fit its config) as itself. Ctrl-C on the driver does the
same and raises KeyboardInterrupt.

Without an address a local Ray instance is started (as many CPUs as this process may use) and shut down at
the end; with one (``auto``, ``host:6379``, or ``ray://host:10001`` with ``ray[client]``) the driver joins
that cluster. Every node needs the same depthlab (and torch) installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..config import ResourceSpec, RunConfig
from ..errors import UserError
from ..store import Store
from ..training.claims import hold_runs
from ..training.engine import TERMINAL, train_group
from .local import check_checkpoints, plan_groups
from .ray_store import RemoteStore, StoreWriter

DEFAULT_MAX_RETRIES = 3
CANCEL_GRACE_S = 60.0  # how long cancelled tasks get to checkpoint and record their status
CONNECT_TIMEOUT_S = 10.0  # to reach a cluster's address before calling ray.init
LOCAL_INSTANCE_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # Linux too: bind the node to 127.0.0.1
                      "RAY_USAGE_STATS_ENABLED": "0"}
# Ray starts its workers at niceness 15; a local instance's workers are the sweep's training itself, so they run at
# the command's own priority (at 15, any other busy program on the machine starves them: a two-run sweep beside two
# busy processes took 150 s instead of 25 s on a 2-core machine). Read by the raylet when the instance starts.
LOCAL_WORKER_NICENESS = {"RAY_worker_niceness": "0"}
_ACTOR_RETRIES = -1  # the store writer's calls are idempotent: retry them as long as Ray can
WORKER_START_S = 60.0  # the store writer, the first worker, answers within this (seconds on a quiet machine)
OBJECT_STORE_ENV = "DEPTHLAB_RAY_OBJECT_STORE"  # a local instance's object store size: 512MiB, 2GiB


def _require_ray() -> None:
    if importlib.util.find_spec("ray") is None:
        raise UserError("--executor ray: Ray is not installed; pip install 'depthlab[ray]'")


def _ray():
    _require_ray()
    import ray

    return ray


def _train_group_task(configs: list[RunConfig], root: str, writer: Any, threads: int,
                      train_fn: Callable[..., dict[str, dict[str, Any]]] | None) -> dict[str, dict[str, Any]]:
    """Body of the Ray task: train one group against the remote store (nothing if the sweep is stopping), holding
    its runs' folders as a local sweep does, so that a run another command trains is waited for, not trained twice."""
    import ray
    import torch

    if ray.get(writer.is_stopping.remote()):
        return {}
    torch.set_num_threads(threads)
    store = RemoteStore(root, writer)
    with hold_runs(store, configs):
        return (train_fn or train_group)(configs, store)


def _available_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def check_address(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail fast (ray.init would retry for minutes) when nothing listens at a ``host:port`` address."""
    if address == "auto":
        return  # Ray looks for a cluster started on this machine and says so at once if there is none
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://")
    host, _, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
    try:
        port_number = int(port) if port else (10001 if client else 6379)
    except ValueError:
        raise UserError(f"--address {address}: expected auto, HOST:PORT or ray://HOST:PORT") from None
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", port_number), timeout=timeout).close()
    except OSError as e:
        raise UserError(f"--address {address}: no Ray cluster answers at {host}:{port_number} "
                        f"({e.strerror or e}); start one with `ray start --head`, or leave out --address "
                        f"for a local instance") from None


def connect(address: str | None = None, local_cpus: int | None = None) -> bool:
    """Join the cluster at ``address``, or start a local instance; True if this call started Ray."""
    if not address and "ray" not in sys.modules:
        # A private single-node instance: on the loopback address, and without usage reports to the outside
        # (Ray reads these when it is imported; set them beforehand to choose otherwise).
        for variable, value in LOCAL_INSTANCE_ENV.items():
            os.environ.setdefault(variable, value)
    ray = _ray()
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if address:
        check_address(address)
        try:
            ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, ValueError) as e:
            detail = " ".join(str(e).split())[:200]
            raise UserError(f"--address {address}: cannot connect to a Ray cluster ({detail})") from None
    else:
        for variable, value in LOCAL_WORKER_NICENESS.items():
            os.environ.setdefault(variable, value)
        store = _object_store()
        _check_address_space(store.get("object_store_memory"))
        try:
            ray.init(num_cpus=local_cpus or _available_cpus(), include_dashboard=False, **options, **store)
        except Exception as e:  # Ray raises a bare Exception when its raylet never registers
            if "timed out during startup" not in str(e):
                raise
            raise UserError(f"--executor ray: Ray's local instance did not start (its raylet never registered); a "
                            f"raylet that cannot map its object store memory (shared memory too small, or an "
                            f"address-space limit such as `ulimit -v`) dies at once: set {OBJECT_STORE_ENV}=512MiB "
                            f"(the local instance's object store size)") from None
    return True


RAY_PROCESS_GROWTH = 1536 << 20  # what ray.init adds to a process beside the object store (measured: 1.2 GB of
# threads and their malloc arenas in the driver; a worker is alike)


def _check_address_space(object_store: int | None) -> None:
    """A UserError, before Ray starts, when the object store a local instance would map (``object_store``, else
    Ray's default: 30 % of the available memory) does not fit this process's address-space limit (``ulimit -v``,
    which Ray's processes inherit) beside what the process holds and what Ray adds to it: every Ray process maps the
    store (a raylet that cannot died at once and ``ray.init`` waited 30 s for it; a driver that cannot aborted)."""
    try:
        import resource
    except ImportError:  # not a POSIX system: no such limit
        return
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit == resource.RLIM_INFINITY:
        return
    size = object_store if object_store is not None else _default_object_store()
    held = _address_space_in_use()
    if size is not None and size + held + RAY_PROCESS_GROWTH > limit:
        from ..memory import format_bytes

        raise UserError(f"--executor ray: the object store memory Ray would map ({format_bytes(size)}), which every "
                        f"Ray process maps beside its own {format_bytes(held + RAY_PROCESS_GROWTH)}, does not fit "
                        f"this process's address-space limit of {format_bytes(limit)} (`ulimit -v`), so no Ray "
                        f"worker could start: set {OBJECT_STORE_ENV}=512MiB (the local instance's object store "
                        f"size), or raise the limit")


def _address_space_in_use() -> int:
    """This process's virtual memory size in bytes (``VmSize``; 0 where ``/proc`` does not say)."""
    try:
        with open("/proc/self/status") as status:
            line = next((line for line in status if line.startswith("VmSize:")), "")
    except OSError:
        return 0
    parts = line.split()
    return int(parts[1]) << 10 if len(parts) == 3 and parts[1].isdigit() else 0


def _default_object_store() -> int | None:
    """The object store size a local instance takes when none is given, as Ray computes it (None where this Ray's
    private helpers differ: then ``ray.init``'s own failure is named instead)."""
    try:
        from ray._private import utils

        return int(utils.resolve_object_store_memory(utils.estimate_available_memory()))
    except (ImportError, AttributeError, TypeError, ValueError):
        return None


def _object_store() -> dict[str, int]:
    """``object_store_memory`` for a local instance from ``$DEPTHLAB_RAY_OBJECT_STORE`` (else Ray's default)."""
    from ..memory import parse_size

    text = os.environ.get(OBJECT_STORE_ENV, "").strip()
    if not text:
        return {}
    try:
        size = parse_size(text)
    except ValueError as e:
        raise UserError(f"${OBJECT_STORE_ENV}: {e}") from None
    if size is None:
        raise UserError(f"${OBJECT_STORE_ENV}: a size such as 512MiB or 2GiB (got {text!r})")
    return {"object_store_memory": size}


def _wait_for_worker(ray: Any, writer: Any, address: str | None) -> None:
    """The store writer answering, or a UserError naming why no worker starts: a worker that cannot map its
    object store (too little shared memory, an address-space limit such as ``ulimit -v``) never starts, and Ray
    waits for it without a word."""
    try:
        ray.get(writer.is_stopping.remote(), timeout=WORKER_START_S)
    except ray.exceptions.GetTimeoutError:
        fix = (f"set {OBJECT_STORE_ENV}=512MiB (the local instance's object store size)" if not address else
               "start the cluster's nodes with a smaller `ray start --object-store-memory`")
        raise UserError(f"--executor ray: no Ray worker started within {WORKER_START_S:.0f} s; a worker that cannot "
                        f"map its object store memory (shared memory too small, or an address-space limit such as "
                        f"`ulimit -v`) never starts: {fix}") from None


def _address(address: str | None) -> str | None:
    """The cluster to join: ``address``, else ``$RAY_ADDRESS`` (as ray.init itself would), else None (local)."""
    return address or os.environ.get("RAY_ADDRESS") or None


@contextlib.contextmanager
def ray_session(address: str | None = None) -> Iterator[None]:
    """One Ray connection for several sweeps (a capability climb trains one depth at a time): each
    ``run_ray`` inside finds Ray initialised and reuses it, instead of starting a local instance per depth."""
    started = connect(_address(address))
    try:
        yield
    finally:
        if started:
            _ray().shutdown()


def _check_fits(ray: Any, resources: ResourceSpec) -> None:
    """A request no node of a fixed-size cluster could ever grant would wait forever: say so now."""
    largest = {"CPU": 0.0, "GPU": 0.0}
    for node in ray.nodes():
        if node.get("Alive"):
            for key in largest:
                largest[key] = max(largest[key], float(node.get("Resources", {}).get(key, 0.0)))
    for key, field, wanted in (("CPU", "cpus", resources.cpus), ("GPU", "gpus", resources.gpus)):
        if wanted > largest[key]:
            raise UserError(f"resources.{field}: each task asks for {wanted:g} but the largest node of this Ray "
                            f"instance has {largest[key]:g}; lower it or use a larger cluster (--address)")


def _start_writer(ray: Any, root: Path) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    actor = ray.remote(StoreWriter).options(
        num_cpus=0, max_restarts=-1, max_task_retries=_ACTOR_RETRIES,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
    )
    return actor.remote(str(root))


def _cancel(ray: Any, writer: Any, refs: list[Any]) -> None:
    """Stop the sweep: tasks not started yet return at once; running ones get KeyboardInterrupt (they finish
    their step, checkpoint and mark their runs interrupted). Waits for them, at most CANCEL_GRACE_S."""
    with contextlib.suppress(Exception):
        ray.get(writer.stop.remote(), timeout=CANCEL_GRACE_S)
    for ref in refs:
        with contextlib.suppress(Exception):  # already finished, or its worker already gone
            ray.cancel(ref)
    deadline = time.monotonic() + CANCEL_GRACE_S
    remaining = list(refs)
    while remaining and time.monotonic() < deadline:
        _, remaining = ray.wait(remaining, num_returns=len(remaining), timeout=1.0)


def _mark_failed(store: Store, group: list[RunConfig], reason: str) -> None:
    for config in group:
        run_id = Store.run_id(config.to_dict())
        record = store.get_run(run_id)
        if record is not None and record["status"] not in TERMINAL:
            store.set_status(run_id, "failed", error=reason)


def run_ray(configs: list[RunConfig], store: Store, group_size: int | None = None, address: str | None = None,
            resources: ResourceSpec | None = None, max_retries: int = DEFAULT_MAX_RETRIES,
            progress: Callable[[int], None] | None = None, local_cpus: int | None = None,
            train_fn: Callable[..., dict[str, dict[str, Any]]] | None = None) -> dict[str, dict[str, Any]]:
    """Train every run not yet done, one Ray task per group; returns final metrics by run id.

    ``address``: a Ray cluster to join (default ``$RAY_ADDRESS``; without either, a local instance with
    ``local_cpus`` CPUs, default all this process may use; if Ray is already initialised in this process,
    that instance is used). ``resources``: what each task asks for. ``max_retries``: how often Ray retries
    a task whose worker died. ``progress`` is called on the driver with the run-steps of each group as it
    completes. ``train_fn`` replaces ``train_group`` in the workers (tests); it must be importable there or
    picklable by value.
    """
    _require_ray()
    address = _address(address)
    resources = resources or ResourceSpec()
    check_checkpoints(configs, store)
    groups = plan_groups(configs, group_size)
    ids = [[Store.run_id(c.to_dict()) for c in group] for group in groups]
    records = {r["id"]: r for r in store.find_runs(ids=[i for g in ids for i in g])}
    results = {i: r["final"] for i, r in records.items() if r["status"] == "done"}
    todo = [g for g, g_ids in zip(groups, ids, strict=True)
            if any(records.get(i, {}).get("status") not in TERMINAL for i in g_ids)]
    if not todo:
        return results
    started = connect(address, local_cpus)
    ray = _ray()
    try:
        if not address:
            _check_fits(ray, resources)
        for group in todo:  # every run is in the store from the start (pending), so a failure can be recorded
            for c in group:
                store.create_run(c.to_dict(), c.task.name, c.model.name)
        writer = _start_writer(ray, store.root)
        _wait_for_worker(ray, writer, address)
        options: dict[str, Any] = {"num_cpus": resources.cpus, "num_gpus": resources.gpus,
                                   "max_retries": max_retries, "retry_exceptions": False}
        if resources.memory_gb:
            options["memory"] = int(resources.memory_gb * (1 << 30))
        task = ray.remote(_train_group_task).options(**options)
        threads = max(1, int(resources.cpus))
        pending = {task.remote(group, str(store.root), writer, threads, train_fn): group for group in todo}
        try:
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                group = pending.pop(ref)
                try:
                    results.update(ray.get(ref))
                except ray.exceptions.TaskCancelledError:  # cancelled from outside: its runs say `interrupted`
                    pass
                except ray.exceptions.RayTaskError as e:  # the training code raised: stop the sweep
                    _cancel(ray, writer, list(pending))
                    cause = getattr(e, "cause", None)
                    if isinstance(cause, UserError):
                        raise cause from None
                    raise
                except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                        ray.exceptions.OutOfMemoryError, ray.exceptions.ObjectLostError,
                        ray.exceptions.TaskUnschedulableError) as e:
                    detail = " ".join(str(e).split())[:300]
                    _mark_failed(store, group, f"Ray task failed after {max_retries} retries: "
                                               f"{type(e).__name__}: {detail}")
                if progress:
                    progress(sum(c.train.steps for c in group))
        except KeyboardInterrupt:
            _cancel(ray, writer, list(pending))
            raise
    finally:
        if started:
            ray.shutdown()
    return results
