"""Where a next-character-prediction model misses seed 003's all-prefixes criterion (Eq-ncp, App. H.2 iii).

H.2: "a model is required to predict the next set of valid continuations for every prefix of a given string […]
The prediction for a particular input string is considered correct if the prediction for every prefix is
correct." A prefix's prediction is the set of labels with a positive logit; one wrong label anywhere among the
N + 1 prefixes × (|Σ| + 2) labels makes the string wrong. That all-or-nothing number says nothing about *what*
is wrong, so this splits it by the kind of prefix, read from the targets themselves (any multi-label task with
one label set per position works):

- **open** prefixes, where several labels are valid (Eq-ncp: inside w, every symbol and [sep]);
- **determined** prefixes, where exactly one label is valid (Eq-ncp: the symbol to copy after [sep] and each
  copied symbol, then [eos] once the copy is complete).

At determined prefixes it also reports what a greedy decoder would do — whether the top logit is the one valid
label, per prefix and for every determined prefix of a string at once (the string copied correctly) — and
the count of invalid labels that are still above 0 (false positives) next to the valid label's own sign. A model
that copies by argmax but keeps a few invalid labels positive scores 0 on the strict criterion and 1 on the copy.

Evaluation strings of seed 003's equality tasks all have length exactly N, so position p is the same prefix in
every example and per-position rates are comparable across examples.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import UserError
from ..tasks.base import Batch, Task
from ..training.evaluate import read_tensor

CHUNK = 128  # examples per forward pass: Eq-ncp's logits are examples × (N + 1) × (|Σ| + 2) floats


def check_multilabel(task: Task) -> None:
    """UserError unless ``task`` predicts one label set per read position (binary cross-entropy at positions)."""
    if task.loss not in ("bce", "bce_balanced") or task.read_positions is None:
        raise UserError(f"label sets: task {task.name} does not predict a label set at every position "
                        f"(its loss is {task.loss}); this analysis reads next-character tasks such as eq_ncp")


def label_set_counts(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per example and position, from ``logits`` and 0/1 ``targets`` [B, P, C]: whether the set is right, the
    number of valid labels, false positives, whether every valid label is positive, whether the top logit is
    valid (all [B, P])."""
    valid = targets > 0.5
    predicted = logits > 0
    top = logits.argmax(-1, keepdim=True)
    return {"set_right": (predicted == valid).all(-1), "n_valid": valid.sum(-1),
            "false_positives": (predicted & ~valid).sum(-1), "valid_positive": (predicted | ~valid).all(-1),
            "top_valid": valid.gather(-1, top).squeeze(-1)}


def summarize(counts: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Rates over examples from :func:`label_set_counts` of a whole evaluation set."""
    set_right, determined = counts["set_right"], counts["n_valid"] == 1
    open_ = counts["n_valid"] > 1

    def mean_where(values: torch.Tensor, where: torch.Tensor) -> float | None:
        return float(values[where].double().mean()) if where.any() else None

    top_all = (counts["top_valid"] | ~determined).all(-1)
    return {
        "examples": int(set_right.shape[0]),
        "accuracy": float(set_right.all(-1).double().mean()),  # the strict criterion: every prefix right
        "open_prefixes": int(open_[0].sum()), "determined_prefixes": int(determined[0].sum()),
        "open_sets_right": mean_where(set_right, open_),
        "determined_sets_right": mean_where(set_right, determined),
        "determined_top1": mean_where(counts["top_valid"], determined),
        "determined_top1_all": float(top_all.double().mean()),  # greedy decoding right at every determined prefix
        "determined_valid_positive": mean_where(counts["valid_positive"], determined),
        "determined_false_positives": mean_where(counts["false_positives"], determined),
        "per_position": {
            "set_right": set_right.double().mean(0).tolist(),
            "top1": counts["top_valid"].double().mean(0).tolist(),
            "false_positives": counts["false_positives"].double().mean(0).tolist(),
            "determined": determined.double().mean(0).tolist(),
        },
    }


@torch.no_grad()
def label_set_breakdown(model: torch.nn.Module, task: Task, batch: Batch) -> dict[str, Any]:
    """:func:`summarize` of a one-run ``model`` (``n_runs == 1``) on ``batch``, in chunks of ``CHUNK`` examples."""
    check_multilabel(task)
    read = read_tensor(task)
    parts: list[dict[str, torch.Tensor]] = []
    for start in range(0, len(batch), CHUNK):
        x = torch.from_numpy(batch.inputs[start : start + CHUNK])[None]
        y = torch.from_numpy(batch.targets[start : start + CHUNK])
        parts.append(label_set_counts(model(x, read=read).outputs[0].float(), y))
    return summarize({k: torch.cat([p[k] for p in parts]) for k in parts[0]})
