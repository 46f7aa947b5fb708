"""Seed 001's constructions with hand-set weights, in the attention-only model's coordinates.

Coordinates (``models.attention_only``): token one-hot in [0, d), position one-hot in [d, d + n), then free
dimensions. Weights use the model's row convention: score(query q, key k) = x_q W_QK x_kᵀ and value = x W_V,
so the paper's α[i, j] (key i, query j; Lemma 1) lands at W_QK[d + j, d + i].

§10 gives two lemmas used everywhere below:
- instructive attention (Lemma 1): any position-only pattern α is obtained with W_pp = α;
- constrained attention (Lemma 2): a large negative W_pp entry masks a pair of positions.

§9.1: "For other tasks, we initialize W_QK in the first layer of the transformer with constructed pattern
for different tasks, as illustrated in 13.2, 14.2, and 15." ``paper_first_layer`` returns that first layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..tasks import Task

MASK = -1.0e4  # "a sufficiently large negative value" (Lemma 2)


def instructive_attention(alpha: np.ndarray, d: int, width: int) -> torch.Tensor:
    """Lemma 1: W_QK whose pattern is the position-only ``alpha`` (key i, query j), whatever the tokens."""
    n = alpha.shape[0]
    w = torch.zeros(width, width)
    w[d : d + n, d : d + n] = torch.as_tensor(alpha, dtype=torch.float32).T
    return w


def constrained_attention(w_qk: torch.Tensor, allowed: np.ndarray, d: int) -> torch.Tensor:
    """Lemma 2: add MASK to every (key i, query j) position pair where ``allowed[i, j]`` is False."""
    n = allowed.shape[0]
    out = w_qk.clone()
    out[d : d + n, d : d + n] += torch.as_tensor(np.where(allowed, 0.0, MASK), dtype=torch.float32).T
    return out


def token_match(d: int, width: int) -> torch.Tensor:
    """W_QK = I on the token coordinates: a query attends to every position holding the same token."""
    w = torch.zeros(width, width)
    w[:d, :d] = torch.eye(d)
    return w


def block_diagonal(sizes: list[int], inner: Callable[[int], np.ndarray]) -> np.ndarray:
    """A block-diagonal n×n matrix with ``inner(size)`` on each diagonal block."""
    n = sum(sizes)
    out = np.zeros((n, n))
    start = 0
    for size in sizes:
        out[start : start + size, start : start + size] = inner(size)
        start += size
    return out


def _ones_off_diagonal(size: int) -> np.ndarray:
    return np.ones((size, size)) - np.eye(size)


@dataclass
class FirstLayer:
    """A constructed first layer: how many free dimensions it needs, and how to set it on a model."""

    extra_width: int
    build: Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]  # (d, n, width) -> (W_QK, W_V)

    def apply(self, model: torch.nn.Module) -> None:
        """Add the construction to every head of layer 0's W_QK (in every run) and set its W_V.

        The construction is added to the random initial W_QK rather than replacing it: ReLU attention has no
        gradient where a score is exactly 0, so a pure construction could never leave its zero pattern.
        """
        w_qk, w_v = self.build(model.d, model.n, model.width)
        with torch.no_grad():
            model.param("blocks.0.attn.W_QK").add_(w_qk)
            model.param("blocks.0.attn.W_V")[:] = w_v


def copy_layer(k: int) -> FirstLayer:
    """§13.2 "copy among Q-A block": α(1) = blockdiag(A_3×3 × k, A_2×2), W_V = I."""
    sizes = [3] * k + [2]

    def build(d: int, n: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        return instructive_attention(block_diagonal(sizes, _ones_off_diagonal), d, width), torch.eye(width)

    return FirstLayer(0, build)


def parse_layer() -> FirstLayer:
    """§14.2 "check position with the same token": W_QK = I on tokens; values copy the positional one-hot.

    Row j of the positional block then holds p_j + Σ_{i: x_i = x_j} p_i, the template representation.
    The paper's W_V also subtracts the tokens; no linear map can cancel a token that repeats a varying number
    of times, so the tokens stay in the residual stream (the trained second layer may ignore them).
    """

    def build(d: int, n: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        w_v = torch.zeros(width, width)
        w_v[d : d + n, d : d + n] = torch.eye(n)
        return token_match(d, width), w_v

    return FirstLayer(0, build)


def block_parse_layer(k: int, l: int) -> FirstLayer:
    """§15 first layer: parse each question into its template, attention constrained to its own block.

    Blocks are (question, r, answer) of l + 2 positions, then the query block of l + 1. Values write a
    position's offset inside its block into l + 2 free coordinates, so equal templates in different blocks
    get equal representations (the paper's d' = d + n + l + 2).
    """
    sizes = [l + 2] * k + [l + 1]

    def build(d: int, n: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        allowed = block_diagonal(sizes, lambda s: np.ones((s, s))).astype(bool)
        w_qk = constrained_attention(token_match(d, width), allowed, d)
        w_v = torch.zeros(width, width)
        offsets = np.concatenate([np.arange(s) for s in sizes])
        w_v[d + np.arange(n), d + n + offsets] = 1.0
        return w_qk, w_v

    return FirstLayer(l + 2, build)


def paper_first_layer(task: Task, spec) -> FirstLayer | None:
    """The §9.1 constructed first layer for ``task``, or None (memorization, other models, random init)."""
    if getattr(spec, "name", None) != "attention_only" or spec.init != "paper":
        return None
    if task.name == "icqa":
        return copy_layer(task.k)
    if task.name == "nested_icqa":
        return copy_layer(task.k * task.hops)
    if task.name == "template":
        return parse_layer()
    if task.name == "ictm":
        return block_parse_layer(task.k, task.l)
    return None
