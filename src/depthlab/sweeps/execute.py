"""Train a list of runs with an executor: what the CLI's training commands and the Python API both call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config import ResourceSpec, RunConfig
from ..errors import UserError
from ..store import Store
from ..training.device import asks_for_gpu
from ..training.tracking import Tracker

EXECUTORS = ("local", "ray")


def check_tracked(executor: str, tracked: bool) -> None:
    """Trackers mirror what the engine does in this process: refuse them with Ray, before any work."""
    if tracked and executor == "ray":
        raise UserError("--log: trackers mirror runs that the local executor trains; leave out --executor ray")


def train_runs(runs: list[RunConfig], store: Store, group_size: int | None = None, executor: str = "local",
               address: str | None = None, resources: ResourceSpec | None = None,
               progress: Callable[[int], None] | None = None,
               tracker: Tracker | None = None) -> dict[str, dict[str, Any]]:
    """Train ``runs`` (finished ones are skipped) in this process or on Ray; returns final metrics by run id.

    ``progress(run_steps)`` is called as steps complete; ``tracker`` mirrors the runs (the local executor's only:
    it is refused with Ray before any work)."""
    if executor not in EXECUTORS:
        raise UserError(f"executor: must be local or ray (got {executor!r})")
    check_tracked(executor, tracker is not None)
    if executor == "ray":
        from ..plugins import share_with_ray
        from .ray_executor import run_ray

        share_with_ray()
        if any(asks_for_gpu(run.train.device) for run in runs) and (resources is None or not resources.gpus):
            # a run that asks for CUDA needs a GPU on its worker: one per group unless resources: says otherwise
            resources = (resources or ResourceSpec()).model_copy(update={"gpus": 1.0})
        return run_ray(runs, store, group_size=group_size, address=address, resources=resources, progress=progress)
    from .local import run_local

    return run_local(runs, store, group_size=group_size, progress=progress, tracker=tracker)
