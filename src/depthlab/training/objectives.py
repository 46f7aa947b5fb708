"""Losses and accuracy per run, for every kind of task objective.

Outputs are [R, B, C] (one read-out, the last position) or [R, B, P, C] (several read-out positions);
targets are the task's targets stacked per run: [R, B] or [R, B, P] class indices for cross-entropy,
floats of the output's shape for "mse" and "bce".
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def per_run_loss(outputs: torch.Tensor, targets: torch.Tensor, kind: str) -> torch.Tensor:
    """Mean loss of each run over its examples (and read positions): [R]."""
    runs = outputs.shape[0]
    outputs = outputs.float()
    if kind == "cross_entropy":
        flat = F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1), reduction="none")
    elif kind == "mse":
        flat = F.mse_loss(outputs, targets.to(outputs.dtype), reduction="none")
    elif kind == "bce":
        flat = F.binary_cross_entropy_with_logits(outputs, targets.to(outputs.dtype), reduction="none")
    else:
        raise ValueError(f"unknown loss {kind!r}")
    return flat.reshape(runs, -1).mean(1)


def per_run_correct(outputs: torch.Tensor, targets: torch.Tensor, kind: str, over: str) -> torch.Tensor | None:
    """Number of correctly predicted examples of each run, [R] (None for regression)."""
    if kind == "mse":
        return None
    # [R, B] or [R, B, P]: a class index matches, or every label's sign matches
    hit = outputs.argmax(-1) == targets if kind == "cross_entropy" else ((outputs > 0) == (targets > 0.5)).all(-1)
    if hit.dim() == 2:
        return hit.float().sum(1)
    return hit.all(-1).float().sum(1) if over == "example" else hit.float().mean(-1).sum(1)
