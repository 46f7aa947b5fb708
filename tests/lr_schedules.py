"""The reference learning-rate schedule of the optimizer tests, from ``torch.optim.lr_scheduler``'s parts only:
a linear warm-up from lr / w to lr over w steps (``LambdaLR``), then ``CosineAnnealingLR`` or ``LinearLR`` down to
``lr_min`` over the remaining steps (``SequentialLR`` switches at step w)."""

from __future__ import annotations

import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LambdaLR, LinearLR, LRScheduler, SequentialLR


def torch_schedule(opt: torch.optim.Optimizer, warmup: int, schedule: str = "constant", total: int = 0,
                   lr_min: float = 0.0) -> LRScheduler | None:
    """The scheduler a run of ``total`` steps with this warm-up and schedule gets from torch alone (None: none)."""
    warm = LambdaLR(opt, lambda done: min(1.0, (done + 1) / warmup)) if warmup else None
    if schedule == "constant":
        return warm
    lr = opt.param_groups[0]["initial_lr" if warm else "lr"]
    if schedule == "cosine":
        decay = CosineAnnealingLR(opt, T_max=total - warmup, eta_min=lr_min)
    else:
        decay = LinearLR(opt, start_factor=1.0, end_factor=lr_min / lr, total_iters=total - warmup)
    return decay if warm is None else SequentialLR(opt, [warm, decay], milestones=[warmup])
