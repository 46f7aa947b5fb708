"""Turn a list of runs into groups of equal shapes and train them: in this process, or in worker processes spread
over the GPUs, several on each when ``train.workers_per_device`` asks."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..config import RunConfig
from ..errors import UserError
from ..store import Store
from ..training.checkpoint import SIDECAR, WEIGHTS, Owner, layout_of, load_checkpoint
from ..training.claims import hold_runs
from ..training.device import free_memory, gpus_for, graph_plan, resolve_device
from ..training.engine import TERMINAL, group_key, train_group
from ..training.footprint import check_group, footprint
from ..training.tracking import Tracker
from .devices import train_on_devices

MEMORY_FRACTION = 0.25  # of physical memory, for the activations and state of one group
# A group's widest per-step activation tensor is kept near this size. Measured with benchmarks/throughput.py on
# the 2-core CPU (one process, 1/4/16/64 runs per group): IC-QA at d' = 28 (80 KB per run) gained up to 64 runs
# (3.8x a plain loop), at d' = 212 (600 KB) peaked at 4 runs (73 % of the fp32 peak, 39 % at 64), and the
# seed 002 transformer with an MLP (7.6 MB) was fastest alone (0.37x at 16 runs): past the caches, stacking
# more runs only adds memory traffic.
GROUP_TENSOR_BYTES = 4 << 20
GPU_MOST_RUNS = 256  # runs per group on a GPU (the benchmark's largest group)
AUTO_MOST_WORKERS = 8  # workers per GPU with workers_per_device: auto (8 small groups gave 6.6x one on an H100)
WORKER_BYTES = 1 << 30  # what a worker process takes on a GPU besides its group (CUDA context, allocator slack)
GPU_MEMORY_FRACTION = 0.8  # of a GPU's free memory, for all its workers together


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def run_bytes(config: RunConfig) -> int:
    """A generous estimate of one run's memory inside a group: activations, patterns, weights, optimizer."""
    task, model, train = config.task, config.model, config.train
    n, width = task.seq_len, task.vocab_size + task.seq_len + 8
    width = getattr(model, "width", None) or width
    heads = max(getattr(model, "heads_per_layer", [1]))
    layers = getattr(model, "layers", 1)
    batch = max(train.batch_size, min(train.eval_examples, 8192))
    activations = batch * layers * heads * n * (2 * width + 2 * n) * 4
    weights = layers * heads * 2 * width * width * 4 * 4
    return activations + weights


def widest_tensor_bytes(config: RunConfig) -> int:
    """Bytes of one run's widest activation in a training step: batch × n × max(width, MLP width) floats."""
    task, model = config.task, config.model
    width = getattr(model, "width", None) or task.vocab_size + task.seq_len
    if getattr(model, "mlp", False):
        width = max(width, getattr(model, "d_mlp", None) or 4 * width)
    return config.train.batch_size * task.seq_len * width * 4


def auto_group_size(config: RunConfig) -> int:
    """Runs per group. On the CPU: as many as fit in memory and keep the group's widest activation near the
    caches. On a GPU: as many as fit in a quarter of its free memory, up to 256 (a GPU needs wide products to be
    busy, and has no small cache to stay in)."""
    gpu_memory = free_memory(resolve_device(config.train.device))
    if gpu_memory is not None:
        return max(1, min(GPU_MOST_RUNS, int(gpu_memory * MEMORY_FRACTION // max(run_bytes(config), 1))))
    by_memory = int(_physical_memory() * MEMORY_FRACTION // max(run_bytes(config), 1))
    by_cache = GROUP_TENSOR_BYTES // max(widest_tensor_bytes(config), 1)
    return max(1, min(64, by_memory, by_cache))


def plan_groups(configs: list[RunConfig], group_size: int | None = None) -> list[list[RunConfig]]:
    """Group runs that can train together (same shapes), in first-seen order, split to ``group_size``."""
    by_key: dict[str, list[RunConfig]] = {}
    for config in configs:
        by_key.setdefault(group_key(config), []).append(config)
    groups = []
    for members in by_key.values():
        size = group_size or auto_group_size(members[0])
        groups.extend(members[i : i + size] for i in range(0, len(members), size))
    return groups


def preflight(configs: list[RunConfig], group_size: int | None = None) -> tuple[int, int]:
    """Before the first run trains: every group of the command checked against the memory budget (ResourceError
    naming the first that cannot fit, ``training.footprint``); returns (groups, bytes the largest group needs)."""
    groups = plan_groups(configs, group_size)
    for group in groups:
        check_group(group)
    return len(groups), max((footprint(g[0]).total(len(g)) for g in groups), default=0)


def check_checkpoints(configs: list[RunConfig], store: Store) -> int:
    """Before any work: every checkpoint a run of this sweep would resume from must be intact.

    Reads (never writes) the checkpoint of each run that is in the store and not finished; a truncated or
    corrupted one, another run's, or one whose tensors do not fit the run raises CheckpointError (a UserError
    naming the folder). Returns how many were checked.
    """
    by_id = {Store.run_id(c.to_dict()): c for c in configs}
    checked = 0
    for record in store.find_runs(ids=list(by_id)):
        if record["status"] in TERMINAL:
            continue
        folder = store.artifacts_root / record["id"]
        if (folder / WEIGHTS).exists() or (folder / WEIGHTS).is_symlink() or (folder / SIDECAR).exists():
            config = by_id[record["id"]]
            load_checkpoint(folder, Owner.of(config), layout_of(config))
            checked += 1
    return checked


def work(config: RunConfig, runs: int) -> float:
    """Multiply-adds of one example through a group, roughly: runs × positions × layers × (width² + positions ×
    width) — what an estimated shape's times are scaled by."""
    task, model = config.task, config.model
    n = task.seq_len
    width = getattr(model, "width", None) or task.vocab_size + n
    layers = getattr(model, "layers", 1)
    return float(runs * n * layers * (width * width + n * width))


def longest_first(groups: list[list[RunConfig]]) -> list[list[RunConfig]]:
    """``groups`` in decreasing order of their steps × :func:`work`: with several workers on a device, the long
    groups start first instead of one starting last and training alone while the others sit idle (largest
    processing time first, the classic list-scheduling rule)."""
    return sorted(groups, key=lambda group: -group[0].train.steps * work(group[0], len(group)))


def workers_per_device(groups: list[list[RunConfig]], device: str) -> int:
    """How many of these groups train at once on ``device``: the groups' ``train.workers_per_device``, where
    ``auto`` is 1 on the CPU and, on a GPU, as many workers as GPU_MEMORY_FRACTION of its free memory holds with
    the largest group's footprint (``training.footprint``) and WORKER_BYTES each, at most AUTO_MOST_WORKERS."""
    asked = groups[0][0].train.workers_per_device
    if asked != "auto":
        return min(int(asked), len(groups))
    free = free_memory(resolve_device(device))
    if free is None:
        return 1
    need = max(footprint(group[0]).total(len(group)) for group in groups) + WORKER_BYTES
    return max(1, min(AUTO_MOST_WORKERS, len(groups), int(free * GPU_MEMORY_FRACTION // need)))


def run_local(configs: list[RunConfig], store: Store, group_size: int | None = None,
              progress: Callable[[int], None] | None = None,
              tracker: Tracker | None = None) -> dict[str, dict[str, Any]]:
    """Train every run not yet done, group by group (mirrored to ``tracker``); returns final metrics by run id.

    Groups whose ``train.device`` stands for several GPUs (``cuda``, or ``auto`` on a machine with more than one)
    are spread over them, one worker process per GPU (``sweeps.devices``), and ``train.workers_per_device`` puts
    that many workers on each device (several groups at once on one GPU); the others train in this process."""
    check_checkpoints(configs, store)
    preflight(configs, group_size)
    results: dict[str, dict[str, Any]] = {}
    # every group's device first: one this machine lacks (or cuda_graph: on without CUDA) is refused before any
    # run trains
    placed: dict[tuple[tuple[str, ...], str], list[list[RunConfig]]] = {}
    for group in plan_groups(configs, group_size):
        train = group[0].train
        key = (tuple(gpus_for(train.device)), str(train.workers_per_device))
        graph_plan(train.cuda_graph, resolve_device(key[0][0]))  # `on` without CUDA: refused now
        placed.setdefault(key, []).append(group)
    slots = {key: [d for d in key[0] for _ in range(workers_per_device(groups, key[0][0]))]
             for key, groups in placed.items()}
    if tracker is not None and any(len(s) > 1 for s in slots.values()):
        raise UserError("--log: trackers mirror runs trained in this process; with several GPUs or workers per "
                        "device, pick one GPU (--device cuda:0) and one worker")
    for key, groups in placed.items():
        if len(slots[key]) == 1:
            for group in groups:
                with hold_runs(store, group):  # another process training these runs is waited for, not joined
                    results.update(train_group(group, store, progress=progress, tracker=tracker))
    for key, groups in placed.items():
        if len(slots[key]) > 1:
            results.update(train_on_devices(longest_first(groups), store, slots[key], progress))
    return results
