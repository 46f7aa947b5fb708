"""ATen operations per training step, counted with ``torch.profiler`` (issue 29): ``depthlab bench --ops``.

Every operation the dispatcher runs costs a fixed overhead on the CPU (a few microseconds) and, on a GPU, is a
kernel launch or at least a trip through the dispatcher: at the seeds' small sizes a step's time is mostly that
overhead. So the count is the engine's figure of merit beside examples per second, and it can be measured on any
machine.

For each case of ``training.throughput`` and group size, a group is built as the engine builds it, trained a few
steps (the optimizer's state, the data stream and the autotuners settle; on CUDA the step is captured as a graph
then, and the profiled steps are its replays), then ``steps`` steps are profiled. The parts of a step
(``optimizer_ops``, ``data_ops``) are counted before, on eager steps, after a few unprofiled ones:

- ``ops``: every ATen operation, nested ones included (``aten::reshape`` calling ``aten::view`` counts two;
  what ``torch.profiler``'s ``key_averages`` sums), per step;
- ``top_ops``: the operations called from Python (or from autograd's engine), per step;
- ``compute_ops``: the operations that compute (neither views nor allocations) and are not inside another that
  does (``sum`` filling its output counts once), per step: the work a GPU launches kernels for, read on a machine
  without one (a lower bound: a fused operation such as attention or the cross-entropy is several kernels there);
- ``forward_ops``, ``backward_ops``, ``optimizer_ops`` and ``data_ops``: the part of ``ops`` in the forward pass
  with the loss, in the backward pass from the losses' sum, inside ``GroupOptimizer.step`` and inside the step's
  batch (profiled on their own); the rest of ``ops`` is the engine's bookkeeping (the train sums);
- ``kernels``: device kernels and copies per step (on a GPU only).
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import profile

from ..store import Store
from .bench_cases import Case, chosen_cases
from .device import is_device_event, profiler_activities, resolve_device, synchronize
from .engine import Group
from .throughput import WARMUP_STEPS, bench_configs


def _counted(fn: Callable[[], Any], times: int, device: torch.device) -> dict[str, float]:
    """ATen operations (all, and those not inside another) and device events per call of ``fn``."""
    synchronize(device)
    with profile(activities=profiler_activities(device)) as prof:
        for _ in range(times):
            fn()
        synchronize(device)
    events = prof.events()
    aten = [e for e in events if e.name.startswith("aten::")]
    top = [e for e in aten if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]
    work = compute_events(aten)
    kernels = [e for e in events if is_device_event(e)]
    return {"ops": len(aten) / times, "top_ops": len(top) / times, "compute_ops": len(work) / times,
            "kernels": len(kernels) / times}


def compute_events(aten: list[Any]) -> list[Any]:
    """The profiler's ATen events that compute (``compute_ops``: neither views nor allocations, and not inside
    another that computes)."""
    return [e for e in aten if _works(e.name) and not _inside_work(e)]


@functools.cache
def _works(name: str) -> bool:
    """Whether an ATen operation computes (not a view, which only makes a tensor's metadata, nor an allocation):
    a view's schema returns an alias of an input that it does not write (``Tensor(a)``)."""
    op = name.removeprefix("aten::")
    if op.startswith("empty") or op == "_unsafe_view":  # _unsafe_view: a view its schema does not annotate
        return False
    packet = getattr(torch.ops.aten, op, None)
    if packet is None:
        return True
    returns = getattr(packet, packet.overloads()[0])._schema.returns
    return not (returns and all(r.alias_info is not None and not r.alias_info.is_write for r in returns))


def _inside_work(event: Any) -> bool:
    """Whether an operation runs inside another that computes (``sum`` filling its output, ``clone`` copying)."""
    parent = event.cpu_parent
    while parent is not None and parent.name.startswith("aten::"):
        if _works(parent.name):
            return True
        parent = parent.cpu_parent
    return False


def count_case(case: Case, runs: int, device: str = "cpu", steps: int = 5,
               warmup: int = WARMUP_STEPS, compile: str = "off") -> dict[str, Any]:
    """The operation counts of one training step of ``case`` with ``runs`` runs in the group (``compile``: its
    ``train.compile``, off or on)."""
    configs = bench_configs(case, runs, "fp32", device, compile)
    with tempfile.TemporaryDirectory() as folder:
        group = Group([(c, Store.run_id(c.to_dict())) for c in configs], Store(folder), runs)
        where = group.device
        x, y = group.next_batch()

        def backward_then_update() -> None:
            group.opt.step(group.gradients(group.losses(x, y)[0]))

        def backward_only() -> None:
            group.gradients(group.losses(x, y)[0])

        def forward_only() -> None:
            group.losses(x, y)

        # The eager parts before the step is captured: a CUDA graph keeps the memory of its step's activations
        # for its replays, and an eager step beside it needs as much again (256 retrieval runs ran out of
        # memory on the H100 so). Their activations are freed here; the capture may reuse that memory.
        for _ in range(warmup):
            group.next_batch()
            backward_then_update()
        data = _counted(group.next_batch, steps, where)
        both, without = _counted(backward_then_update, steps, where), _counted(backward_only, steps, where)
        forward = _counted(forward_only, steps, where)
        for _ in range(warmup):
            group.step()
        whole = _counted(group.step, steps, where)
        mode = group.step_mode()
    row = {"name": case.name, "runs": runs, "compile": compile, "device": str(where),
           "parameter_tensors": len(group.names),
           "ops": whole["ops"], "top_ops": whole["top_ops"], "compute_ops": whole["compute_ops"],
           "forward_ops": forward["ops"],
           "backward_ops": without["ops"] - forward["ops"], "optimizer_ops": both["ops"] - without["ops"],
           "data_ops": data["ops"], "step_mode": mode}
    if where.type != "cpu":
        row["kernels"] = whole["kernels"]
    return row


def count_ops(run_counts: list[int], cases: list[str] | None = None, device: str = "cpu",
              progress: Callable[[dict[str, Any]], None] | None = None,
              compile_modes: tuple[str, ...] = ("off",)) -> dict[str, Any]:
    """Every case at every group size (and ``train.compile`` of ``compile_modes``): one row each (see the module's
    docstring)."""
    where = resolve_device(device, "--device")
    rows = []
    for case in chosen_cases(cases):
        for runs in run_counts:
            for mode in compile_modes:
                rows.append(count_case(case, runs, device, compile=mode))
                if progress:
                    progress(rows[-1])
    return {"device": str(where), "torch": torch.__version__, "cases": rows}
