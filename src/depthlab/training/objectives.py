"""Losses and accuracy per run, for every kind of task objective.

Outputs are [R, B, C] (one read-out, the last position) or [R, B, P, C] (several read-out positions);
targets are the task's targets stacked per run: [R, B] or [R, B, P] class indices for cross-entropy,
floats of the output's shape for "mse", "bce" and "bce_balanced".

"bce_balanced" weighs each label set (the last axis) so that its positive and its negative labels count equally:
the mean binary cross-entropy over the positives plus the mean over the negatives, halved. With one valid label
among a thousand (seed 003's Eq-ncp after [sep]) the plain mean lets a model that predicts nothing reach a loss
near 0; balanced, missing the one positive costs as much as all the negatives together.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def per_run_loss(outputs: torch.Tensor, targets: torch.Tensor, kind: str) -> torch.Tensor:
    """Mean loss of each run over its examples (and read positions): [R]."""
    runs = outputs.shape[0]
    outputs = outputs if outputs.dtype == torch.float32 else outputs.float()  # no operation when already fp32
    if kind == "cross_entropy":
        flat = F.cross_entropy(_view(outputs, -1, outputs.shape[-1]), _view(targets, -1), reduction="none")
    elif kind == "mse":
        flat = F.mse_loss(outputs, targets.to(outputs.dtype), reduction="none")
    elif kind == "bce":
        flat = F.binary_cross_entropy_with_logits(outputs, targets.to(outputs.dtype), reduction="none")
    elif kind == "bce_balanced":
        flat = balanced_bce(outputs, targets.to(outputs.dtype))
    else:
        raise ValueError(f"unknown loss {kind!r}")
    return _view(flat, runs, -1).mean(1)



def _view(t: torch.Tensor, *shape: int) -> torch.Tensor:
    """``t.reshape(shape)``, as a view when ``t`` is contiguous (a reshape is two operations, a view one)."""
    return t.view(shape) if t.is_contiguous() else t.reshape(shape)


def balanced_bce(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per label set: (mean BCE of its positive labels + mean BCE of its negative labels) / 2; a set without
    positives (or negatives) counts its other side only."""
    each = F.binary_cross_entropy_with_logits(outputs, targets, reduction="none")
    positive = targets > 0.5
    n_pos = positive.sum(-1, dtype=outputs.dtype)
    n_neg = outputs.shape[-1] - n_pos
    pos = (each * positive).sum(-1) / n_pos.clamp(min=1)
    neg = (each * ~positive).sum(-1) / n_neg.clamp(min=1)
    sides = (n_pos > 0).to(outputs.dtype) + (n_neg > 0).to(outputs.dtype)
    return (pos + neg) / sides


def per_run_correct(outputs: torch.Tensor, targets: torch.Tensor, kind: str, over: str) -> torch.Tensor | None:
    """Number of correctly predicted examples of each run, [R] (None for regression): float64 counts (summed in
    that dtype: exact, and what the engine's sums add without a cast), or a float sum of per-position fractions
    when accuracy is over positions."""
    if kind == "mse":
        return None
    # [R, B] or [R, B, P]: a class index matches, or every label's sign matches
    hit = outputs.argmax(-1) == targets if kind == "cross_entropy" else ((outputs > 0) == (targets > 0.5)).all(-1)
    if hit.dim() == 2:
        return hit.sum(1, dtype=torch.float64)
    return hit.all(-1).sum(1, dtype=torch.float64) if over == "example" else hit.float().mean(-1).sum(1)
