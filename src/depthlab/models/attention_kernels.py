"""A hand-written forward and backward pass for the hot spot of the attention-only model (``attention_only``).

At the sizes of quick studies (d' ≈ 28, n ≈ 11, 16 runs × 64 examples) a training step moves about 80 MB
through memory for 0.16 GFLOP of matrix products, so it runs at the speed of memory, not of arithmetic, and
autograd's generic backward passes add whole activation-sized tensors: a zero-filled gradient for every slice
of H and a sum for every use of it. The last layer, which reads one query, is written here with fewer passes
over memory; a test checks it against the generic code (``tests/test_model.py``: values and gradients, in
float64). The other layers are one autograd node each (:class:`FullLayer`, issue 45 item 5: fewer operations a
step), equal to autograd's composition bit for bit (``tests/test_fused_nodes.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .fused_nodes import transposed


def attention_pattern(scores: torch.Tensor, softmax: bool) -> torch.Tensor:
    """σ over the keys (the last axis): the paper's ReLU (seed 001 eq. 2), or the softmax."""
    return scores.softmax(-1) if softmax else torch.relu(scores)


def stacked_heads(w: torch.Tensor) -> torch.Tensor:
    """[R, heads, d', e] as [R, d', heads · e]: every head's map side by side, so that one product per run
    applies them all (a view for one head, a copy of the small weight otherwise)."""
    runs, heads, width, e = w.shape
    return w.view(runs, width, e) if heads == 1 else w.transpose(1, 2).reshape(runs, width, heads * e)


def weighted_keys(weights: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Σ_k weights[:, k, i] keys[:, k] for every head i: ``weights`` [R·B, n, heads], ``keys`` [R·B, n, d'] ->
    [R·B, heads, d'], as a broadcast product and a sum over keys (several times faster than a batched product of
    that shape on a CPU). With one head the weights broadcast as they are: the same products and the same sum,
    without the two added axes (four operations fewer in a step's forward and backward)."""
    if weights.shape[-1] == 1:
        return (weights * keys).sum(1, keepdim=True)
    return (weights.unsqueeze(-1) * keys.unsqueeze(2)).sum(1)


def full_layer(h: torch.Tensor, w_qk: torch.Tensor, w_v: torch.Tensor, softmax: bool) -> torch.Tensor:
    """H + (1/m) Σ_i σ(H W_QK,i Hᵀ) H W_V,i for every position (seed 001 eq. 2), [R, B, n, d'], as four
    batched products on views (the 1/m applied to the product's result): what a layer computes when no hook
    asks for its intermediates. Rows (query, head) of every example are one matrix, so the scores, the pattern
    and the mixed keys need no transposes or copies, and the residual is one product over (head, coordinate).
    One autograd node (:class:`FullLayer`) where autocast is off; autograd's composition (:func:`composed_layer`)
    under autocast, which casts the products' operands.
    """
    if torch.is_autocast_enabled(h.device.type):
        return composed_layer(h, w_qk, w_v, softmax)
    return FullLayer.apply(h, w_qk, w_v, softmax)


def composed_layer(h: torch.Tensor, w_qk: torch.Tensor, w_v: torch.Tensor, softmax: bool) -> torch.Tensor:
    """:func:`full_layer` as autograd composes it (under autocast: the residual stream stays fp32)."""
    rows, _, _, _, _, mixed = _mixed_keys(h, w_qk, softmax, lambda t: t.transpose(1, 2))
    heads, w_o = w_qk.shape[1], w_v.view(rows.shape[0], -1, rows.shape[-1])
    if torch.is_autocast_enabled(h.device.type):  # … except in bf16, where the residual stream stays fp32
        return h + torch.bmm(mixed, w_o).mul_(1 / heads).view(h.shape)
    return torch.baddbmm(rows, mixed, w_o, alpha=1 / heads).view(h.shape)


def _mixed_keys(h: torch.Tensor, w_qk: torch.Tensor, softmax: bool, flip: Callable[[torch.Tensor], torch.Tensor]
                ) -> tuple[torch.Tensor, ...]:
    """A layer's products up to the mixed keys, as views of one another: rows [R, B·n, d'], keys [R·B, n, d'], the
    heads' W_QK side by side [R, d', heads·d'], queries [R·B, n·heads, d'] (x_q W_QK,i per (q, i)), the pattern
    [R·B, n·heads, n] and mixed [R, B·n, heads·d'] (Σ_k pattern[(q, i), k] x_k). ``flip`` transposes the keys:
    ``transpose`` under autograd, :func:`transposed` inside a node."""
    runs, batch, n, width = h.shape
    heads = w_qk.shape[1]
    rows = h.view(runs, batch * n, width)
    keys = rows.view(runs * batch, n, width)
    w_q = stacked_heads(w_qk)
    queries = torch.bmm(rows, w_q).view(runs * batch, n * heads, width)
    pattern = attention_pattern(torch.bmm(queries, flip(keys)), softmax)
    mixed = torch.bmm(pattern, keys).view(runs, batch * n, heads * width)
    return rows, keys, w_q, queries, pattern, mixed


class FullLayer(torch.autograd.Function):
    """:func:`composed_layer` (autocast off) as one autograd node: the same kernels on the same operands, forward and
    backward (autograd's ``BaddbmmBackward0``, ``BmmBackward0``, ``ReluBackward0`` or ``SoftmaxBackward0``), and H's
    three gradients summed in the order autograd's engine sums them, so values and gradients are equal bit for bit
    (``tests/test_fused_nodes.py``); without the seven nodes that view, transpose and reshape (and undo it)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, w_qk: torch.Tensor, w_v: torch.Tensor, softmax: bool) -> torch.Tensor:
        rows, keys, w_q, queries, pattern, mixed = _mixed_keys(h, w_qk, softmax, transposed)
        w_o = w_v.view(rows.shape[0], -1, rows.shape[-1])
        ctx.save_for_backward(rows, keys, w_q, queries, pattern, mixed, w_o)
        ctx.softmax = softmax
        return torch.baddbmm(rows, mixed, w_o, alpha=1 / w_qk.shape[1]).view(h.shape)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        rows, keys, w_q, queries, pattern, mixed, w_o = ctx.saved_tensors
        runs, rows_per_run, width = rows.shape
        heads = w_q.shape[-1] // width
        alpha = 1 / heads
        grad_rows = grad.view(rows.shape)
        grad_w_v = _scaled(torch.bmm(transposed(mixed), grad_rows), alpha).view(runs, heads, width, width) \
            if ctx.needs_input_grad[2] else None
        grad_mixed = _scaled(torch.bmm(grad_rows, transposed(w_o)), alpha).view(pattern.shape[0], -1, width)
        grad_pattern = torch.bmm(grad_mixed, transposed(keys))
        if ctx.softmax:
            grad_scores = torch.ops.aten._softmax_backward_data(grad_pattern, pattern, -1, pattern.dtype)
        else:
            grad_scores = torch.ops.aten.threshold_backward(grad_pattern, pattern, 0)  # ReLU's, from its result
        grad_queries = torch.bmm(grad_scores, keys).view(runs, rows_per_run, -1)
        grad_w_qk = _heads_first(torch.bmm(transposed(rows), grad_queries), heads) if ctx.needs_input_grad[1] else None
        grad_h = None
        if ctx.needs_input_grad[0]:  # H's shares: the residual, the queries', then the keys' (their two summed)
            grad_keys = torch.bmm(transposed(pattern), grad_mixed) + transposed(
                torch.bmm(transposed(queries), grad_scores))
            grad_h = (grad_rows + torch.bmm(grad_queries, transposed(w_q))).view(grad.shape) + grad_keys.view(
                grad.shape)
        return grad_h, grad_w_qk, grad_w_v, None


def _scaled(t: torch.Tensor, alpha: float) -> torch.Tensor:
    """``t`` times ``alpha`` (autograd's ``maybe_multiply``: no operation when alpha is 1)."""
    return t if alpha == 1 else t * alpha


def _heads_first(grad: torch.Tensor, heads: int) -> torch.Tensor:
    """The gradient of :func:`stacked_heads`' [R, d', heads · e] as the weight's [R, heads, d', e]: a view for one
    head (as autograd's ``ViewBackward0`` makes it), else a transposed view."""
    runs, width, e = grad.shape[0], grad.shape[1], grad.shape[2] // heads
    return grad.view(runs, 1, width, e) if heads == 1 else grad.view(runs, width, heads, e).transpose(1, 2)


class LastQueryAttention(torch.autograd.Function):
    """The last layer for its one query, with the residual: h_{n-1} + (1/m) Σ_i (Σ_k σ(s_i)_k x_k) W_V,i,
    where s_i,k = x_{n-1} W_QK,i x_kᵀ (seed 001 eq. 2, the classifier's column only).

    ``h`` [R, B, n, d'], ``w_qk`` and ``w_v`` [R, heads, d', d'] (the 1/m is applied to the product with
    ``w_v``), ``softmax``: σ is the softmax over keys instead of the ReLU -> [R, B, d'].

    Scores and pattern are laid out [R·B, key, head]. The backward writes H's gradient once (the last position's
    shares are added into it in place); the scores and the pattern's gradient are batched matrix-vector
    products, which read H once; products with a unit dimension (one head) are written as broadcasts, which a
    CPU runs several times faster than batched matrix products of that shape.
    """

    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx, h: torch.Tensor, w_qk: torch.Tensor, w_v: torch.Tensor, softmax: bool) -> torch.Tensor:
        runs, batch, n, width = h.shape
        heads = w_qk.shape[1]
        keys = h.view(runs * batch, n, width)
        x = h[:, :, -1]
        w_q = stacked_heads(w_qk)
        queries = torch.bmm(x, w_q).view(runs * batch, heads, width)  # [R·B, heads, d']
        scores = torch.bmm(keys, transposed(queries))  # [R·B, n, heads]
        pattern = scores.softmax(1) if softmax else torch.relu(scores)
        mixed = weighted_keys(pattern, keys).view(runs, batch, heads * width)
        w_o = w_v.view(runs, heads * width, width)
        ctx.save_for_backward(keys, x, w_q, w_o, queries, scores, pattern, mixed)
        ctx.softmax = softmax
        if torch.is_autocast_enabled("cpu"):  # the residual stays in the input's precision (fp32)
            return x + torch.bmm(mixed, w_o).mul_(1 / heads)
        return torch.baddbmm(x, mixed, w_o, alpha=1 / heads)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad: torch.Tensor):
        keys, x, w_q, w_o, queries, scores, pattern, mixed = ctx.saved_tensors
        runs, batch, width = x.shape
        heads = queries.shape[1]
        grad_out = grad if heads == 1 else grad * (1 / heads)  # the output's 1/m
        grad_mixed = torch.bmm(grad_out, transposed(w_o))  # [R, B, heads·d']
        grad_w_v = torch.bmm(transposed(mixed), grad_out).view(runs, heads, width, width)
        grad_mixed = grad_mixed.view(runs * batch, heads, width)
        grad_pattern = torch.bmm(keys, transposed(grad_mixed))  # [R·B, n, heads]
        if ctx.softmax:
            grad_scores = pattern * (grad_pattern - (pattern * grad_pattern).sum(1, keepdim=True))
        else:
            grad_scores = torch.ops.aten.threshold_backward(grad_pattern, scores, 0)  # ReLU's: zero where scores <= 0
        grad_queries = weighted_keys(grad_scores, keys)  # [R·B, heads, d']
        flat_queries = grad_queries.view(runs, batch, heads * width)
        grad_w_qk = _heads_first(torch.bmm(transposed(x), flat_queries), heads)
        # H's gradient: every key's share of the pattern and the scores, all heads at once, in one tensor
        if heads == 1:
            grad_h = torch.mul(pattern, grad_mixed).addcmul_(grad_scores, queries)
        else:
            grad_h = torch.bmm(pattern, grad_mixed).baddbmm_(grad_scores, queries)
        grad_h = (grad_h if grad_h.dtype == x.dtype else grad_h.to(x.dtype)).view(runs, batch, -1, width)
        grad_h[:, :, -1].add_(grad).add_(torch.bmm(flat_queries, transposed(w_q)))
        return grad_h, grad_w_qk, grad_w_v, None

