"""Several GPUs on one machine, or several workers on one device: the local executor's groups spread over worker
processes, each holding one device.

Each worker claims one device slot when it starts and trains whole groups on it, taking the next group from the
queue when one finishes, so G GPUs with W workers each train G·W groups at a time (several processes share a GPU
as CUDA's time-slicing lets them: small groups leave a GPU mostly idle, and four or eight of them side by side
trained 3.2x and 6.6x the examples of one on an H100). Workers are started with ``spawn`` (CUDA cannot be used in
a forked child), load the same plugins (``$DEPTHLAB_PLUGINS``), open the same store (SQLite in WAL mode takes
writers from several processes) and receive each group as its runs' configs (plain data, re-validated in the
worker), with ``train.device`` set to the worker's device and the group's other execution settings kept: where a
run trains is not part of its id, so a run is the same run on any GPU. Workers sharing the CPU split its cores.
A group holds its runs' folders while it trains (``training.claims``), as in one process. A group's failure stops
the sweep as it would in one process.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from ..config import EXECUTION_FIELDS, RunConfig
from ..store import Store

_DEVICE: str | None = None  # the device this worker process trains on


def _claim(devices: Any, cpu_threads: int) -> None:
    global _DEVICE
    import torch

    from ..plugins import load_plugins

    load_plugins()
    _DEVICE = devices.get()
    if _DEVICE == "cpu":
        torch.set_num_threads(cpu_threads)


def _train(runs: list[dict[str, Any]], execution: dict[str, Any], root: str) -> dict[str, dict[str, Any]]:
    from ..config import parse_run
    from ..training.claims import hold_runs
    from ..training.engine import train_group

    execution = {**execution, "device": _DEVICE, "workers_per_device": 1}
    configs = [parse_run({**run, "train": {**run["train"], **execution}}) for run in runs]
    store = Store(root)
    with hold_runs(store, configs):  # as in one process: a run another command trains is waited for
        return train_group(configs, store)


def _execution(config: RunConfig) -> dict[str, Any]:
    """A group's execution settings (what ``RunConfig.to_dict`` leaves out), to send with its runs."""
    return {field: getattr(config.train, field) for field in EXECUTION_FIELDS}


def train_on_devices(groups: list[list[RunConfig]], store: Store, devices: list[str],
                     progress: Callable[[int], None] | None = None) -> dict[str, dict[str, Any]]:
    """Train ``groups`` with one worker process per entry of ``devices`` (a device named twice has two workers);
    final metrics by run id.

    ``progress`` is told each group's steps when the group ends (a worker's steps are not seen one by one)."""
    context = multiprocessing.get_context("spawn")
    queue = context.SimpleQueue()  # handed to each worker as it starts: its device
    for device in devices:
        queue.put(device)
    results: dict[str, dict[str, Any]] = {}
    root = str(Path(store.root).resolve())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cpu_threads = max(1, cores // max(1, devices.count("cpu")))
    with ProcessPoolExecutor(len(devices), mp_context=context, initializer=_claim,
                             initargs=(queue, cpu_threads)) as pool:
        futures = {pool.submit(_train, [run.to_dict() for run in group], _execution(group[0]), root): group
                   for group in groups}
        pending = set(futures)
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for future in finished:
                    results.update(future.result())  # a group's error is raised here, as in one process
                    if progress:
                        progress(sum(run.train.steps for run in futures[future]))
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # groups not started are dropped; started ones end
            raise
    return results
