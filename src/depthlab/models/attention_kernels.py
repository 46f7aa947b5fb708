"""A hand-written forward and backward pass for the hot spot of the attention-only model (``attention_only``).

At the sizes of quick studies (d' ≈ 28, n ≈ 11, 16 runs × 64 examples) a training step moves about 80 MB
through memory for 0.16 GFLOP of matrix products, so it runs at the speed of memory, not of arithmetic, and
autograd's generic backward passes add whole activation-sized tensors: a zero-filled gradient for every slice
of H and a sum for every use of it. The last layer, which reads one query, is written here with fewer passes
over memory; a test checks it against the generic code (``tests/test_model.py``: values and gradients, in
float64).
"""

from __future__ import annotations

import torch


def attention_pattern(scores: torch.Tensor, softmax: bool) -> torch.Tensor:
    """σ over the keys (the last axis): the paper's ReLU (seed 001 eq. 2), or the softmax."""
    return scores.softmax(-1) if softmax else torch.relu(scores)


class LastQueryAttention(torch.autograd.Function):
    """The last layer for its one query, with the residual: h_{n-1} + (1/m) Σ_i (Σ_k σ(s_i)_k x_k) W_V,i,
    where s_i,k = x_{n-1} W_QK,i x_kᵀ (seed 001 eq. 2, the classifier's column only).

    ``h`` [R, B, n, d'], ``w_qk`` and ``w_v`` [R, heads, d', d'] (``w_v`` with the 1/m already in it),
    ``softmax``: σ is the softmax over keys instead of the ReLU -> [R, B, d'].

    The backward writes H's gradient once (the last position's shares are added into it in place); the scores
    and the pattern's gradient are batched matrix-vector products, which read H once.
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx, h: torch.Tensor, w_qk: torch.Tensor, w_v: torch.Tensor, softmax: bool) -> torch.Tensor:
        x = h[:, :, -1]
        queries = torch.einsum("rbd,rhde->rbhe", x, w_qk)  # [R, B, heads, d']
        scores = _per_key(h, queries)  # [R, B, heads, n]
        pattern = attention_pattern(scores, softmax)
        mixed = (pattern.unsqueeze(-1) * h.unsqueeze(2)).sum(-2)  # [R, B, heads, d']
        ctx.save_for_backward(h, w_qk, w_v, queries, scores, pattern, mixed)
        ctx.softmax = softmax
        return x + torch.einsum("rbhd,rhde->rbe", mixed, w_v)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad: torch.Tensor):
        h, w_qk, w_v, queries, scores, pattern, mixed = ctx.saved_tensors
        grad_mixed = torch.einsum("rbe,rhde->rbhd", grad, w_v)
        grad_w_v = torch.einsum("rbhd,rbe->rhde", mixed, grad)
        grad_pattern = _per_key(h, grad_mixed)
        if ctx.softmax:
            grad_scores = pattern * (grad_pattern - (pattern * grad_pattern).sum(-1, keepdim=True))
        else:
            grad_scores = grad_pattern * (scores > 0)
        grad_queries = (grad_scores.unsqueeze(-1) * h.unsqueeze(2)).sum(-2)  # [R, B, heads, d']
        x = h[:, :, -1]
        grad_w_qk = torch.einsum("rbd,rbhe->rhde", x, grad_queries)
        # H's gradient: every key's share of the pattern and the scores, one head after another, in one tensor
        grad_h = None
        for weights, vectors in ((pattern, grad_mixed), (grad_scores, queries)):
            for head in range(pattern.shape[2]):
                w, v = weights[:, :, head, :, None], vectors[:, :, head, None, :]
                grad_h = (w * v).to(h.dtype) if grad_h is None else grad_h.addcmul_(w, v)
        grad_h[:, :, -1] += grad + torch.einsum("rbhe,rhde->rbd", grad_queries, w_qk)
        return grad_h, grad_w_qk, grad_w_v, None


def _per_key(h: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """x_k · v_i for every key k and head i: [R, B, heads, n] from H [R, B, n, d'] and v [R, B, heads, d'],
    as one batched product per example (faster than a broadcast product and a sum: H is read once)."""
    runs, batch, n, width = h.shape
    out = h.reshape(runs * batch, n, width) @ vectors.reshape(runs * batch, -1, width).transpose(1, 2)
    return out.view(runs, batch, n, -1).transpose(2, 3)
