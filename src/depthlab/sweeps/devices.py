"""Several GPUs on one machine: the local executor's groups spread over them, one worker process per device.

Each worker claims one device when it starts and trains whole groups on it, taking the next group from the
queue when one finishes, so a machine with G GPUs trains G groups at a time. Workers are started with ``spawn``
(CUDA cannot be used in a forked child), load the same plugins (``$DEPTHLAB_PLUGINS``), open the same store (SQLite
in WAL mode takes writers from several processes) and receive each group as its runs' configs (plain data,
re-validated in the worker), with ``train.device`` set to the worker's device: where a run trains is not part of
its id, so a run is the same run on any GPU. A group's failure stops the sweep as it would in one process.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from ..config import RunConfig
from ..store import Store

_DEVICE: str | None = None  # the device this worker process trains on


def _claim(devices: Any) -> None:
    global _DEVICE
    from ..plugins import load_plugins

    load_plugins()
    _DEVICE = devices.get()


def _train(runs: list[dict[str, Any]], compile_step: bool, root: str) -> dict[str, dict[str, Any]]:
    from ..config import parse_run
    from ..training.engine import train_group

    execution = {"device": _DEVICE, "compile": compile_step}
    configs = [parse_run({**run, "train": {**run["train"], **execution}}) for run in runs]
    return train_group(configs, Store(root))


def train_on_devices(groups: list[list[RunConfig]], store: Store, devices: list[str],
                     progress: Callable[[int], None] | None = None) -> dict[str, dict[str, Any]]:
    """Train ``groups`` with one worker process per device of ``devices``; final metrics by run id.

    ``progress`` is told each group's steps when the group ends (a worker's steps are not seen one by one)."""
    context = multiprocessing.get_context("spawn")
    queue = context.SimpleQueue()  # handed to each worker as it starts: its device
    for device in devices:
        queue.put(device)
    results: dict[str, dict[str, Any]] = {}
    root = str(Path(store.root).resolve())
    with ProcessPoolExecutor(len(devices), mp_context=context, initializer=_claim, initargs=(queue,)) as pool:
        futures = {pool.submit(_train, [run.to_dict() for run in group], group[0].train.compile, root): group
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
