"""Where a group trains: the one module that turns ``train.device`` into a torch device and knows CUDA.

``train.device`` is ``auto`` (a GPU when PyTorch sees one, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``. Asking
for CUDA where PyTorch has none is a :class:`UserError` before any work. On CUDA every tensor a step touches lives
on the device: parameters and optimizer state (the model is built on the CPU from the runs' seeds, so its initial
weights are the same on every device, then moved), batches (sampled on the CPU by the runs' own generators,
copied from pinned memory without blocking), and the running train metrics (summed on the device, read at log
points only: no host synchronisation per step).

Precision: ``fp32`` on CUDA lets matrix products use TF32 (``torch.set_float32_matmul_precision("high")``, what
PyTorch recommends for training on Ampere and later); the results record it as ``tf32``. ``bf16`` is autocast to
bfloat16 on either device. No other module of depthlab's training path names CUDA (``tests/test_architecture.py``).

CUDA graphs (``train.cuda_graph``, :class:`GraphedStep`): on CUDA a group's whole training step (forward, loss,
backward, the optimizer, the train metrics' sums) is captured once after a few warm-up steps and replayed at
every later step, one launch instead of hundreds; the batch is copied into the graph's input buffers first,
evaluation and logging run outside it, and a group whose runs change captures again. A compiled step
(``train.compile``) is compiled in the warm-up steps, then captured the same way (compile, then capture).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch

from ..config import DEVICE_NAMES, DEVICES_ALLOWED
from ..errors import UserError

CPU = torch.device("cpu")


def check_device_name(name: str, field: str = "train.device") -> None:
    """A UserError naming ``field`` when ``name`` is not a device name (whether this machine has it aside)."""
    if not DEVICE_NAMES.fullmatch(name):
        raise UserError(f"{field}: {name!r} is not a device; allowed: {DEVICES_ALLOWED}")


def resolve_device(name: str, field: str = "train.device") -> torch.device:
    """The torch device ``name`` stands for; a UserError naming ``field`` for a device this machine lacks."""
    check_device_name(name, field)
    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise UserError(f"{field}: {name} asked for, but PyTorch sees no CUDA GPU here (torch {torch.__version__}, "
                        f"{build}); use --device cpu (or auto), or install a CUDA build of torch (docs/how-to/gpus.md)")
    device = torch.device("cuda" if name == "auto" else name)
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise UserError(f"{field}: {name} asked for, but only {count} GPU{'s' if count != 1 else ''} "
                        f"{'are' if count != 1 else 'is'} visible (cuda:0 to cuda:{count - 1})")
    # the GPU itself, not "whichever is current": what a run's final metrics record as its device
    return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())


def asks_for_gpu(name: str) -> bool:
    """Whether ``name`` (a valid ``train.device``) names a GPU, whatever this machine has."""
    return name.startswith("cuda")


def trains_on_gpu(name: str) -> bool:
    """Whether a group whose ``train.device`` is ``name`` trains on a GPU (``auto``: where PyTorch sees one)."""
    return asks_for_gpu(name) or (name == "auto" and torch.cuda.is_available())


def gpu_free_for(name: str) -> tuple[torch.device, int] | None:
    """The GPU a group with ``train.device`` = ``name`` trains on here and its free bytes; None where it trains on
    the CPU, or on a GPU this process cannot see (a Ray driver planning for GPU workers: their check is theirs)."""
    if not trains_on_gpu(name) or not torch.cuda.is_available():
        return None
    try:
        device = resolve_device(name)
    except UserError:  # cuda:N past this machine's GPUs: training says so where it runs
        return None
    free = free_memory(device)
    return None if free is None else (device, free)


def release(device: torch.device) -> None:
    """Give what dropped models, optimizers and CUDA graphs held back to the device before the next thing is built
    on it: collect what only the garbage collector frees, then return the CUDA caching allocator's free blocks
    (a graph's private pool among them) to the driver, so one benchmark case's leftovers do not crowd the next."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def gpus_for(name: str) -> list[str]:
    """The devices the local executor spreads groups over: every visible GPU for ``cuda`` (or ``auto`` with
    GPUs); the one named device otherwise."""
    device = resolve_device(name)
    if device.type == "cuda" and name in ("cuda", "auto"):
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return [str(device)]


def prepare(device: torch.device, precision: str) -> str:
    """Set the device's numeric options for ``precision``; returns the precision as the results record it."""
    if device.type == "cuda" and precision == "fp32":
        torch.set_float32_matmul_precision("high")
        return "tf32"
    return precision


def autocast(device: torch.device, precision: str) -> AbstractContextManager:
    """bfloat16 autocast on ``device`` for ``bf16``; nothing for fp32. On CUDA without autocast's cache of cast
    weights, which a CUDA graph cannot hold (PyTorch's graph notes): the casts are recomputed, the values are the
    same."""
    if precision != "bf16":
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=device.type != "cuda")


def to_device(array: np.ndarray | torch.Tensor, device: torch.device) -> torch.Tensor:
    """``array`` on ``device``: the same memory on the CPU, a non-blocking copy from pinned memory on CUDA."""
    tensor = torch.from_numpy(array) if isinstance(array, np.ndarray) else array
    if device.type == "cpu":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def copy_to(destination: torch.Tensor, array: np.ndarray) -> None:
    """Copy a host array into ``destination`` (of its shape's size): directly on the CPU, from pinned memory
    without blocking on CUDA (the copy is ordered after the work already queued that reads ``destination``)."""
    source = torch.from_numpy(array).view(destination.shape)
    if destination.device.type == "cpu":
        destination.copy_(source)
    else:
        destination.copy_(source.pin_memory(), non_blocking=True)


def samples_ahead(device: torch.device) -> bool:
    """Whether stream 2's batches are made ahead of the step, a chunk of steps at a time: on a CPU, where one call
    for many steps costs far less per example than one a step; on an accelerator the batch is made in the step,
    inside its captured graph."""
    return device.type == "cpu"


def samples_on_data_thread() -> bool:
    """Whether a CPU's next chunk of stream 2 is made on the data thread while the model trains, or in line when
    the step needs it: on the thread only when torch runs one intra-op thread. Stream 2's samplers are torch
    operations; with more threads, the data thread's parallel regions and the step's run at once on the same cores
    and both slow down. Measured on this project's 2-core machine with 2 threads (`depthlab reproduce
    seed001-depth --scale quick`'s settings, 2 layers, 3 runs): an IC-QA group trained in 14.2 / 12.8 s with the
    chunks ahead on the thread and 10.2 / 9.4 s with them in line (stream 1: 10.7 / 8.8 s), a template group in
    6.5 s against 2.8 s (stream 1: 3.0 s); with one thread the data thread is worth it (icqa-quick: 50 / 126
    thousand examples a second at 1 / 16 runs against 43 / 108 in line)."""
    return torch.get_num_threads() == 1


def profiler_activities(device: torch.device) -> list[torch.profiler.ProfilerActivity]:
    """What ``torch.profiler`` records for a step on ``device``: host operations, and the GPU's kernels."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return activities


def is_device_event(event: Any) -> bool:
    """Whether a profiler event is work on a GPU (a kernel, a copy or a memset), not a host operation."""
    return event.device_type == torch.autograd.DeviceType.CUDA


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (a GPU runs asynchronously; timings need this)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free_memory(device: torch.device) -> int | None:
    """Bytes free on a GPU (None on the CPU: the host's budget applies, ``depthlab.memory``)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


GRAPH_WARMUP_STEPS = 3  # eager steps on the capture stream before each capture (PyTorch's whole-network recipe)
# ... and before a compiled step's capture: the first compiles the forward, the loss and (at its backward) the
# backward, and the optimizer's update; the ones after it must run the compiled code as it is, with nothing left to
# compile, for a recompile during the capture would fail it (it is refused there: ``fail_on_recompile``)
COMPILED_WARMUP_STEPS = 5


def graph_plan(mode: str, device: torch.device) -> str | None:
    """None when a group's step is to be captured as a CUDA graph (``train.cuda_graph`` auto or on, on CUDA);
    otherwise how it runs instead, in one line. ``on`` where there is no CUDA is a UserError: it promises a GPU.
    A compiled step (``train.compile``) is captured too: compile, then capture (Inductor's default mode launches
    plain kernels, which a capture holds)."""
    if mode == "off":
        return "eager (train.cuda_graph: off)"
    if device.type != "cuda":
        if mode == "on":
            raise UserError(f"train.cuda_graph: on needs a CUDA GPU, and this group trains on {device}; "
                            "use auto (graphs where there is CUDA) or off")
        return f"eager ({device.type})"
    return None


class GraphedStep:
    """A training step replayed as one CUDA graph: PyTorch's whole-network capture (``torch.cuda.graph``).

    Each call ``graphed(step, *inputs)`` names the step; ``step(*inputs)`` must be capturable: the same kernels on
    the same memory every call (forward, loss, backward, optimizer, metric sums into tensors that live across
    steps), no host synchronisation. The first ``warmup`` calls run it eagerly on a side stream (lazy
    initialisations — cuBLAS handles, autograd's streams — happen outside the capture); the next call copies its
    inputs into static buffers, captures ``step`` on them on that same stream (recorded, not run; a step compiled
    with ``torch.compile`` has compiled in its warm-up calls, and may not compile during the capture) and replays
    the graph; every later call copies its inputs into the buffers and replays. :meth:`reset` (the tensors the step
    touches were replaced: runs left the group) starts over with warm-up and a new capture. A capture that fails (an
    operation a graph cannot hold) runs that call's step eagerly and leaves ``failure`` set, one line: the caller
    then trains eagerly. The step is passed at each call, not kept: a group holding a GraphedStep that held the
    group's own bound method would be a reference cycle, and the group's GPU memory would wait for the garbage
    collector instead of being given back when the group is dropped (on the H100 the throughput benchmark ran out of
    memory so).
    """

    def __init__(self, device: torch.device, warmup: int = GRAPH_WARMUP_STEPS) -> None:
        self.device, self.warmup = device, warmup
        self.stream = torch.cuda.Stream(device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: tuple[torch.Tensor, ...] = ()
        self.eager_calls = 0
        self.captures = 0
        self.failure: str | None = None
        self.compiled: str | None = None  # the torch.compile backend of the step captured (None: eager)

    def reset(self) -> None:
        self.graph, self.static, self.eager_calls, self.failure = None, (), 0, None

    def compile(self, backend: str | None) -> None:
        """The step is (``backend``) or is no longer (None) compiled: warm up again (the compile happens in the
        warm-up calls, :data:`COMPILED_WARMUP_STEPS` of them) and capture again."""
        self.reset()
        self.compiled = backend
        self.warmup = GRAPH_WARMUP_STEPS if backend is None else COMPILED_WARMUP_STEPS

    @property
    def replaying(self) -> bool:
        """Whether the next call replays a captured graph."""
        return self.graph is not None

    def mode(self) -> str:
        """How the steps ran, one line (the final metrics' ``step_mode``)."""
        if self.failure is not None:
            return f"eager (CUDA graph capture failed: {self.failure})"
        times = f"captured {self.captures} time{'s' if self.captures > 1 else ''}"
        if self.captures:
            return f"cuda graph + compiled ({self.compiled}; {times})" if self.compiled else f"cuda graph ({times})"
        return f"eager (ended within the {self.warmup} warm-up steps before a CUDA graph capture)"

    def __call__(self, step: Callable[..., None], *inputs: torch.Tensor) -> None:
        if self.graph is not None:
            for static, value in zip(self.static, inputs, strict=True):
                static.copy_(value)
            self.graph.replay()
            return
        current = torch.cuda.current_stream(self.device)
        if self.eager_calls < self.warmup:
            self.stream.wait_stream(current)
            with torch.cuda.stream(self.stream):
                step(*inputs)
            current.wait_stream(self.stream)
            self.eager_calls += 1
            return
        self.static = tuple(t.clone() for t in inputs)
        graph = torch.cuda.CUDAGraph()
        try:  # a compiled step must not compile during the capture: refused, the capture fails instead
            with torch.cuda.graph(graph, stream=self.stream), torch.compiler.set_stance("fail_on_recompile"):
                step(*self.static)
        except RuntimeError as e:  # nothing ran during the capture: this call's step runs eagerly instead
            self.failure = " ".join(str(e).split())[:200] or type(e).__name__
            self.static = ()
            step(*inputs)
            return
        self.graph = graph
        self.captures += 1
        graph.replay()
