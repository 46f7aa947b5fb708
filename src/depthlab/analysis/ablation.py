"""Head ablations (seed 002 Appendix E): re-evaluate a trained model with chosen heads' attention replaced.

A head is written ``L.H`` (layer and head, from 0). Its replacement pattern (``L.H=KIND``):

- ``uniform``: every key the query may see weighted equally (the causal mask is respected: a causal model's
  query q spreads 1/(q+1) over keys 0 … q; a bidirectional model's over all n keys);
- ``identity``: each query attends to itself; ``previous``: to the position before it (position 0 to itself);
- ``recorded``: the head's own pattern on these examples (changes nothing: the check of the override machinery);
- ``onehot:ROLE`` / ``onehot:FROM->TO``: for every read-out, the row of the FROM position of its chain (default
  ``query``) attends only to the TO position of that chain; the head's other rows keep their recorded pattern.
  Roles are the task's (``task.roles``, e.g. "second of pair 2" for the retrieval tasks), since positions move
  between examples.

``score`` gives the loss, the accuracy (None for regression) and the partial losses: the task's own
(``task.partial_losses``, e.g. per chain position x_k for ``retrieval_vec``) or, with several read-out positions,
one per position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import UserError
from ..models.base import override_pattern
from ..tasks.base import Batch, Task
from ..training.evaluate import read_tensor
from ..training.objectives import per_run_correct, per_run_loss

KINDS = ("uniform", "identity", "previous", "recorded", "onehot")
CHUNK = 512  # examples per forward pass when scoring (override tensors are [B, n, n] per head)


# ----------------------------------------------------------------------------------------------- heads


def heads_per_layer(model: Any) -> list[int]:
    """Heads in each layer of a model with attention (every family exposes its spec)."""
    spec = model.spec
    if hasattr(spec, "heads_per_layer"):
        return list(spec.heads_per_layer)
    return [int(spec.heads)] * int(spec.layers)


def all_heads(model: Any) -> list[tuple[int, int]]:
    return [(layer, h) for layer, n in enumerate(heads_per_layer(model)) for h in range(n)]


def head_name(head: tuple[int, int]) -> str:
    return f"{head[0]}.{head[1]}"


def parse_head(text: str, model: Any) -> tuple[int, int]:
    """``L.H`` -> (layer, head), checked against the model; UserError otherwise."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(text))
    if not m:
        raise UserError(f"--head: cannot read head {text!r}; write LAYER.HEAD counted from 0, e.g. 1.0")
    layer, head = int(m.group(1)), int(m.group(2))
    per_layer = heads_per_layer(model)
    if layer >= len(per_layer) or head >= per_layer[layer]:
        raise UserError(f"--head: no head {layer}.{head}; the model has {len(per_layer)} layers with "
                        f"{'/'.join(map(str, per_layer))} heads (counted from 0)")
    return layer, head


def is_causal(model: Any) -> bool:
    return bool(getattr(model.spec, "causal", False))


# ----------------------------------------------------------------------------------------------- roles


def task_roles(task: Task) -> list[str]:
    names = getattr(task, "role_names", None)
    if not names or not hasattr(task, "roles"):
        raise UserError(f"task {task.name} names no roles (positions of a chain); onehot ablations and circuits "
                        f"need a task that does, e.g. retrieval, retrieval_vec or conditional_retrieval")
    return list(names)


def parse_role(task: Task, text: str) -> str:
    """A role's canonical name for ``task``; UserError listing the allowed roles otherwise."""
    allowed = task_roles(task)
    spelled = " ".join(str(text).strip().lower().split())
    from ..tasks.retrieval import parse_role as retrieval_role

    try:
        return retrieval_role(spelled, allowed)
    except ValueError:
        pass
    if spelled in allowed:
        return spelled
    raise UserError(f"unknown role {text!r} for task {task.name}; allowed: {', '.join(allowed)}")


# ---------------------------------------------------------------------------------------- head patterns


@dataclass
class HeadPattern:
    """What replaces one head's pattern: a fixed kind, or one-hot paths over the rows ``rest`` leaves."""

    kind: str  # uniform | identity | previous | recorded | onehot
    paths: list[tuple[str, str]] = field(default_factory=list)  # (from role, to role), for onehot
    rest: str = "recorded"  # the rows no path covers (onehot only): recorded | uniform | identity
    dropped: frozenset[int] = frozenset()  # indices of paths whose rows get uniform attention instead

    def describe(self) -> str:
        if self.kind != "onehot":
            return self.kind
        return "onehot:" + ", ".join(f"{a}->{b}" for a, b in self.paths) + f" (other rows {self.rest})"


def parse_ablation(text: str, model: Any, task: Task) -> tuple[tuple[int, int], HeadPattern]:
    """``L.H=KIND`` (see the module doc) -> (head, HeadPattern); UserError naming what is allowed."""
    head_text, sep, kind = str(text).partition("=")
    if not sep or not kind.strip():
        raise UserError(f"--head: cannot read {text!r}; write L.H=KIND with KIND one of uniform, identity, "
                        f"previous, recorded, onehot:ROLE or onehot:FROM->TO")
    head = parse_head(head_text, model)
    kind = kind.strip()
    if kind.startswith("onehot:"):
        spec = kind.removeprefix("onehot:")
        src, arrow, dst = spec.partition("->")
        if not arrow:
            src, dst = "query", spec
        return head, HeadPattern("onehot", [(parse_role(task, src), parse_role(task, dst))])
    if kind not in KINDS or kind == "onehot":
        raise UserError(f"--head {head_text}: unknown pattern {kind!r}; allowed: uniform, identity, previous, "
                        f"recorded, onehot:ROLE, onehot:FROM->TO")
    return head, HeadPattern(kind)


def fixed_pattern(kind: str, n: int, causal: bool) -> torch.Tensor:
    """[n, n] pattern of a positional kind: uniform (over the visible keys), identity or previous."""
    return override_pattern(kind, torch.zeros(n, n), causal)


def onehot_rows(base: torch.Tensor, paths: list[tuple[str, str]], roles: dict[str, np.ndarray],
                causal: bool, dropped: frozenset[int] = frozenset()) -> torch.Tensor:
    """``base`` [B, n, n] with the FROM row of every read-out set to one-hot at its TO position.

    A row that several paths start from attends equally to their TO positions. Paths whose index is in
    ``dropped`` give their share to uniform attention instead (a path's ablation in the circuit procedure).
    """
    size, n = base.shape[0], base.shape[-1]
    weights = torch.zeros(size, n, n, dtype=base.dtype)
    counts = torch.zeros(size, n, dtype=base.dtype)
    uniform = fixed_pattern("uniform", n, causal).to(base.dtype)
    for i, (src, dst) in enumerate(paths):
        src_pos, dst_pos = roles[src], roles[dst]  # [B, P]
        if causal and (dst_pos > src_pos).any():
            raise UserError(f"path {src} -> {dst}: the key comes after the query in a causal model")
        b = torch.from_numpy(np.repeat(np.arange(size), src_pos.shape[1]))
        q = torch.from_numpy(src_pos.reshape(-1).astype(np.int64))
        k = torch.from_numpy(dst_pos.reshape(-1).astype(np.int64))
        ones = torch.ones(len(b), dtype=base.dtype)
        counts.index_put_((b, q), ones, accumulate=True)
        if i in dropped:
            weights.index_put_((b, q), uniform[q], accumulate=True)
        else:
            weights.index_put_((b, q, k), ones, accumulate=True)
    covered = counts > 0
    out = base.clone()
    out[covered] = weights[covered] / counts[covered][:, None]
    return out


def build_override(model: Any, task: Task, batch: Batch, patterns: dict[tuple[int, int], HeadPattern],
                   recorded: list[torch.Tensor] | None = None) -> dict[tuple[int, int], torch.Tensor]:
    """The ``override`` argument (tensors [1, B, n, n], R = 1) that applies ``patterns`` to ``batch``.

    ``recorded`` (each layer's captured pattern [1, B, heads, n, n]) is computed when a pattern needs it.
    """
    n, causal, size = task.seq_len, is_causal(model), len(batch)
    needs = any(p.kind == "recorded" or (p.kind == "onehot" and p.rest == "recorded") for p in patterns.values())
    if needs and recorded is None:
        recorded = capture(model, batch)
    roles = task.roles(batch) if any(p.kind == "onehot" for p in patterns.values()) else None
    override = {}
    for (layer, head), p in patterns.items():
        if p.kind == "recorded":
            pattern = recorded[layer][0, :, head]
        elif p.kind == "onehot":
            if p.rest == "recorded":
                base = recorded[layer][0, :, head]
            else:
                base = fixed_pattern(p.rest, n, causal).expand(size, n, n)
            pattern = onehot_rows(base, p.paths, roles, causal, p.dropped)
        else:
            pattern = fixed_pattern(p.kind, n, causal).expand(size, n, n)
        override[(layer, head)] = pattern[None]
    return override


# ---------------------------------------------------------------------------------------------- scoring


def _as_tensors(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.from_numpy(batch.inputs)[None], torch.from_numpy(batch.targets)[None]


@torch.no_grad()
def capture(model: Any, batch: Batch) -> list[torch.Tensor]:
    """Each layer's attention pattern [1, B, heads, n, n] on ``batch`` (no override)."""
    x, _ = _as_tensors(batch)
    return [p.float() for p in model(x, capture=True).attentions]


def partial_losses(task: Task, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """The task's partial losses [R] by name, or one per read position when there are several, else none."""
    if hasattr(task, "partial_losses"):
        return task.partial_losses(outputs, targets)
    positions = task.read_positions
    if positions is None or len(positions) < 2:
        return {}
    return {f"pos{pos}": per_run_loss(outputs[:, :, i], targets[:, :, i], task.loss) for i, pos in enumerate(positions)}


@torch.no_grad()
def score(model: Any, task: Task, batch: Batch,
          patterns: dict[tuple[int, int], HeadPattern] | None = None) -> dict[str, Any]:
    """Loss, accuracy (None for regression) and partial losses of a one-run model on ``batch``, with
    ``patterns`` applied (chunked: override tensors are built per chunk)."""
    read = read_tensor(task)
    loss_sum, correct, parts, total = 0.0, 0.0, {}, 0
    for start in range(0, len(batch), CHUNK):
        chunk = batch.take(slice(start, start + CHUNK))
        x, y = _as_tensors(chunk)
        override = build_override(model, task, chunk, patterns) if patterns else None
        outputs = model(x, read=read, override=override).outputs
        m = len(chunk)
        loss_sum += float(per_run_loss(outputs, y, task.loss)[0]) * m
        hits = per_run_correct(outputs, y, task.loss, task.accuracy_over)
        correct = None if hits is None else correct + float(hits[0])
        for name, value in partial_losses(task, outputs, y).items():
            parts[name] = parts.get(name, 0.0) + float(value[0]) * m
        total += m
    return {"loss": loss_sum / total, "accuracy": None if correct is None else correct / total,
            "partial_losses": {k: v / total for k, v in parts.items()}, "examples": total}


def ablate(model: Any, task: Task, batch: Batch, patterns: dict[tuple[int, int], HeadPattern]) -> dict[str, Any]:
    """Scores before and after replacing ``patterns``, and the rise of every loss."""
    before, after = score(model, task, batch), score(model, task, batch, patterns)
    rise = {"loss": after["loss"] - before["loss"],
            "partial_losses": {k: after["partial_losses"][k] - v for k, v in before["partial_losses"].items()}}
    return {"ablations": [{"head": head_name(h), "pattern": p.describe()} for h, p in patterns.items()],
            "before": before, "after": after, "rise": rise}
