"""Chunked parallel scans of the linear recurrences of seed 003's families (issue 45, item 3).

DSS, Mamba's selective SSM, the linear transformer and RetNet are linear recurrences in their state,

    h_t = a_t ⊙ h_{t-1} + b_t        (h_0 = 0),

so their states need not be computed one position after another. The chunked form (the Mamba-2 paper's "chunkwise"
algorithm; RetNet's "chunkwise recurrent representation") splits the n positions into chunks of C:

1. within every chunk at once, the states from a zero start (``local``) and the products of the a's (``decay``):
   C steps, each over all n/C chunks together;
2. the state at the end of every chunk from the one before: H_c = decay_c,end ⊙ H_{c-1} + local_c,end — the same
   recurrence, n/C positions long, scanned the same way;
3. every state: h_t = local_t + decay_t ⊙ H_{c(t)-1}.

With C ≈ √n that is about 2√n steps of whole-sequence tensor operations instead of n small ones, exact (every
number is a sum of the same products; in float64 the tests find it equal to the position-by-position loop), and
without the exp(−Σ Δ A) factors of a log-space cumulative sum, which overflow in float32 once a chunk's decay
passes e^-88.

For the attention-like recurrences with a d_head × d_head state (linear transformer, RetNet) the chunkwise form is
a product instead: within a chunk the masked quadratic form (Q Kᵀ ⊙ M) V on C × C scores, across chunks the states
Σ k vᵀ of the chunks before (a cumulative sum; for RetNet decayed by γ^C per chunk, a product with an
n/C × n/C matrix of powers of γ). :func:`chunkwise_attention` computes both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

CHUNK = 64  # positions per chunk of the chunkwise attention: no chunking up to this length (the quadratic form)


def chunks_pay(x: torch.Tensor) -> bool:
    """Whether the chunked scan beats the loop over positions where ``x`` lives: not on a CPU. There each of the
    loop's steps works on a small tensor that stays in the caches, while the chunked scan streams whole-sequence
    tensors through memory about twice: Mamba's scan at batch 64, n = 400, d_inner 128, N = 16, one thread, took
    0.62 s as the loop and 2.1 s chunked (the scan
    alone, forward; the whole mixer forward and backward: 1.6 s against 22.8 s). An accelerator runs
    the loop's thousands of small kernels slowly and the few large ones fast."""
    return x.device.type != "cpu"


def chunk_size(n: int) -> int:
    """C ≈ √n: C steps within chunks plus about n/C across them."""
    return max(1, math.ceil(math.sqrt(n)))


SLACK = 2.0  # a block may take up to this many times the least memory the scan can take: fewer, longer blocks


def scan_memory(n: int, block: int, kept: float, transient: float) -> float:
    """States of one position (batch × state numbers) that a blocked scan over ``n`` positions holds at its peak:
    ``kept`` states (one per layer) at every boundary of the ⌈n/L⌉ blocks of L = ``block``, waiting for the
    backward pass, and the ``transient`` states per position of the one block being computed."""
    return kept * math.ceil(n / block) + transient * block


def block_length(n: int, kept: float, transient: float) -> int:
    """Positions per block of :func:`in_blocks`, chosen from a memory budget: the longest block (the fewest
    sequential steps) whose :func:`scan_memory` stays within ``SLACK`` times the least any block length gives.
    Both lie below 2·SLACK·L* + 2·kept/transient + 3, L* = √(kept · n / transient), where the search stops: past
    it, transient · L alone exceeds the budget."""
    optimum = math.sqrt(kept * n / transient)
    lengths = range(1, min(n, math.ceil(2 * SLACK * optimum + 2 * kept / transient + 3)) + 1)
    memory = [scan_memory(n, length, kept, transient) for length in lengths]
    budget = SLACK * min(memory)
    return max(length for length, used in zip(lengths, memory, strict=True) if used <= budget)


def in_blocks(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]], state: torch.Tensor,
              sliced: Sequence[torch.Tensor], fixed: Sequence[torch.Tensor], block: int, dim: int = 2
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``fn(state, *slices, *fixed) -> (out, state)`` over consecutive blocks of ``block`` positions of ``sliced``
    along ``dim``, each block's last state the next one's first: the outputs concatenated along ``dim``, and the
    final state. Each block runs under activation checkpointing (``torch.utils.checkpoint``, non-reentrant): its
    intermediates — the [batch, block, …, state] tensors of a scan — are dropped after its forward and recomputed
    in the backward pass, so only the block boundaries' states and one block's tensors are alive at once, not
    every position's. Exact: the recomputation repeats the same operations."""
    n, outs = sliced[0].shape[dim], []
    for start in range(0, n, block):
        parts = [t.narrow(dim, start, min(block, n - start)) for t in sliced]
        out, state = checkpoint(fn, state, *parts, *fixed, use_reentrant=False, preserve_rng_state=False)
        outs.append(out)
    return torch.cat(outs, dim=dim), state


def chunked_scan(a: torch.Tensor, b: torch.Tensor, dim: int = 2, initial: torch.Tensor | None = None) -> torch.Tensor:
    """Every h_t of h_t = a_t ⊙ h_{t-1} + b_t along ``dim`` (the positions), from h_0 = ``initial`` (shaped as
    ``b`` without ``dim``; None: zero), by the chunked scan of the module docstring; ``a`` broadcasts against
    ``b`` (a size-1 ``dim`` for a time-invariant recurrence)."""
    n = b.shape[dim]
    a = a.expand_as(b)
    if n <= 4:  # too short to gain from chunks
        return sequential_scan(a, b, dim, initial)
    size = chunk_size(n)
    chunks = math.ceil(n / size)
    pad = chunks * size - n
    if pad:  # trailing a = 1, b = 0: the padded positions change no earlier state
        a, b = _pad(a, dim, pad, 1.0), _pad(b, dim, pad, 0.0)
    shape = (*b.shape[:dim], chunks, size, *b.shape[dim + 1:])
    a, b = a.reshape(shape), b.reshape(shape)
    local, decay = [], []
    h, p = b.select(dim + 1, 0), a.select(dim + 1, 0)
    for j in range(size):
        if j:
            a_j = a.select(dim + 1, j)
            h, p = a_j * h + b.select(dim + 1, j), a_j * p
        local.append(h)
        decay.append(p)
    ends = chunked_scan(p, h, dim, initial)  # H_c, the state after every chunk
    start = torch.zeros_like(ends.narrow(dim, 0, 1)) if initial is None else initial.unsqueeze(dim)
    before = torch.cat([start, ends.narrow(dim, 0, chunks - 1)], dim=dim)
    states = torch.stack(local, dim + 1) + torch.stack(decay, dim + 1) * before.unsqueeze(dim + 1)
    return states.flatten(dim, dim + 1).narrow(dim, 0, n)


def sequential_scan(a: torch.Tensor, b: torch.Tensor, dim: int = 2, initial: torch.Tensor | None = None
                    ) -> torch.Tensor:
    """The same states as :func:`chunked_scan`, position by position."""
    h = b.select(dim, 0) if initial is None else a.select(dim, 0) * initial + b.select(dim, 0)
    states = [h]
    for t in range(1, b.shape[dim]):
        h = a.select(dim, t) * h + b.select(dim, t)
        states.append(h)
    return torch.stack(states, dim)


def _pad(x: torch.Tensor, dim: int, count: int, value: float) -> torch.Tensor:
    filler = torch.full((*x.shape[:dim], count, *x.shape[dim + 1:]), value, dtype=x.dtype, device=x.device)
    return torch.cat([x, filler], dim=dim)


def chunkwise_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, gamma: torch.Tensor | None = None,
                        chunk: int = CHUNK) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Σ_{m ≤ t} γ^(t−m) (q_t · k_m) v_m for every t, and (without γ) the normaliser Σ_{m ≤ t} q_t · k_m.

    q, k [..., heads, n, d], v [..., heads, n, e]; ``gamma`` [heads] (RetNet's decays) or None (linear attention:
    no decay, and the normaliser is returned). Chunks of ``chunk`` positions; up to that length the quadratic form."""
    n, heads = q.shape[-2], q.shape[-3]
    size = min(chunk, n)
    chunks = math.ceil(n / size)
    pad = chunks * size - n
    if pad:  # zero keys and values after the end: they add nothing to any earlier position
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
    q, k, v = (t.unflatten(-2, (chunks, size)) for t in (q, k, v))  # [..., heads, chunks, C, d]
    steps = torch.arange(size, device=q.device)
    gap = steps[:, None] - steps[None]  # i − j within a chunk
    if gamma is None:
        mask = (gap >= 0).to(q.dtype)
    else:
        log_gamma = gamma.to(torch.float64).log().view(heads, 1, 1)  # powers of γ computed in float64
        mask = _powers(log_gamma, gap, q.dtype).unsqueeze(-3)  # [heads, 1, C, C]: γ^(i−j) for j ≤ i, else 0
    scores = (q @ k.transpose(-1, -2)) * mask
    out = scores @ v
    norm = scores.sum(-1) if gamma is None else None
    if chunks > 1:
        if gamma is None:
            kv, ksum = k.transpose(-1, -2) @ v, k.sum(-2)  # per chunk: Σ k vᵀ [..., chunks, d, e] and Σ k
            out = out + q @ _sum_before(kv, -3)  # the state after the chunks before each chunk
            norm = norm + (q * _sum_before(ksum, -2).unsqueeze(-2)).sum(-1)
        else:
            to_end = _powers(log_gamma, size - 1 - steps[None], q.dtype)  # γ^(C−1−j) [heads, 1, C]
            kv = (k * to_end[..., None]).transpose(-1, -2) @ v  # [..., heads, chunks, d, e]
            c = torch.arange(chunks, device=q.device)
            across = _powers(log_gamma * size, c[:, None] - 1 - c[None], q.dtype)  # γ^(C(c−1−c')) for c' < c
            before = torch.einsum("hcj,...hjde->...hcde", across, kv)
            from_start = _powers(log_gamma, steps[None] + 1, q.dtype)[..., None]  # γ^(i+1) [heads, 1, C, 1]
            out = out + (q * from_start) @ before
    out = out.flatten(-3, -2)[..., :n, :]
    return out, None if norm is None else norm.flatten(-2)[..., :n]


def _sum_before(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The exclusive cumulative sum along ``dim`` (not cumsum − x: in bf16 that difference loses the small terms)."""
    total = x.narrow(dim, 0, x.shape[dim] - 1).cumsum(dim)
    return torch.cat([torch.zeros_like(x.narrow(dim, 0, 1)), total], dim=dim)


def _powers(log_base: torch.Tensor, exponent: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """base^exponent where the exponent is ≥ 0, else 0 (the causal mask), in float64, then as ``dtype``."""
    exponent = exponent.to(torch.float64)
    return torch.where(exponent >= 0, torch.exp(exponent.clamp(min=0) * log_base), 0.0).to(dtype)
