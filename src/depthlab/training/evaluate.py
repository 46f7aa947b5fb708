"""Loss and accuracy of every run of a group on the same evaluation examples, in memory-bounded chunks."""

from __future__ import annotations

from typing import Any

import torch

from ..tasks import Batch, Task
from .device import to_device
from .objectives import per_run_correct, per_run_loss

EVAL_CHUNK = 8192  # at most this many examples per evaluation forward pass …
EVAL_ELEMENTS = 2**27  # … and about this many activations (runs × examples × n × max(n, 64)): long sequences
# with many runs would otherwise ask for tens of GB at once (attention scores grow with n²)


def eval_chunk(runs: int, seq_len: int) -> int:
    """How many examples one evaluation forward pass of ``runs`` runs takes at a time, for sequences of
    ``seq_len`` positions."""
    return max(1, min(EVAL_CHUNK, EVAL_ELEMENTS // (runs * seq_len * max(seq_len, 64))))


def read_tensor(task: Task, device: torch.device | None = None) -> torch.Tensor | None:
    """The positions the task's loss reads, as the models' ``read`` argument (None: the last position only)."""
    positions = task.read_positions
    return None if positions is None else torch.as_tensor(positions, dtype=torch.long, device=device)


@torch.no_grad()
def evaluate(model: torch.nn.Module, task: Task, batch: Batch, autocast: Any,
             partial: dict[str, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss and accuracy (NaN for regression) of every run of ``model`` on ``batch``, the same examples for all,
    computed on the model's device and returned on the CPU (one synchronisation per evaluation).

    When the task defines ``partial_losses(outputs, targets) -> {name: [R]}`` (seed 002 Figure 4: the loss of
    each chain position), their means over ``batch`` are put in ``partial`` (when given).
    """
    device = next(model.parameters()).device
    runs, read = model.n_runs, read_tensor(task, device)
    loss_sum = torch.zeros(runs, device=device)
    correct = torch.zeros(runs, device=device)
    partial_fn = getattr(task, "partial_losses", None) if partial is not None else None
    inputs, targets = torch.from_numpy(batch.inputs), torch.from_numpy(batch.targets)
    chunk = eval_chunk(runs, inputs.shape[1])
    sums: dict[str, torch.Tensor] = {}
    for start in range(0, len(batch), chunk):
        x, y = (to_device(t[start : start + chunk], device) for t in (inputs, targets))
        x, y = x.expand(runs, *x.shape), y.expand(runs, *y.shape)
        with autocast:
            outputs = model(x, read=read).outputs
        loss_sum += per_run_loss(outputs, y, task.loss) * y.shape[1]
        hits = per_run_correct(outputs, y, task.loss, task.accuracy_over)
        correct += hits if hits is not None else float("nan")
        if partial_fn is not None:
            for name, value in partial_fn(outputs, y).items():
                sums[name] = sums.get(name, torch.zeros(runs, device=device)) + value.float() * y.shape[1]
    if partial is not None:
        partial.update({name: (value / len(batch)).cpu() for name, value in sums.items()})
    return (loss_sum / len(batch)).cpu(), (correct / len(batch)).cpu()
