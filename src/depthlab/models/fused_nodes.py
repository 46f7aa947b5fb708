"""Parts of the models as one autograd node each, with hand-written backwards (issue 45 item 5: fewer operations a
step); each equals autograd's own composition bit for bit, values and gradients (``tests/test_fused_nodes.py``).

:class:`RunLayerNorm`: ``LN(x) ⊙ w + b`` over the last axis, with ``w`` and ``b`` [R, d] (one row per run), what
``torch.addcmul(b, F.layer_norm(x, (d,)), w)`` computes, with the same kernels in the same order: forward
``native_layer_norm`` then ``addcmul``; backward the products and sums autograd's ``AddcmulBackward0`` makes and
``native_layer_norm_backward``. Autograd builds that from four nodes (the per-run views of ``w`` and ``b``, the layer
norm, the affine map and its broadcast sums): 12 operations fewer for each LayerNorm of a step (about 23 of about 35
left). :class:`HeadsProjection`: the transformer's q, k and v in one product.

Both are used where autocast is off (autocast casts the products' operands, which autograd's nodes record).
"""

from __future__ import annotations

import torch

EPS = 1e-5  # F.layer_norm's default


def _per_run(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[R, d] as [R, 1, …, 1, d], to broadcast against ``like`` [R, …, d]."""
    return t.view(t.shape[0], *([1] * (like.dim() - 2)), t.shape[-1])


class RunLayerNorm(torch.autograd.Function):
    """``x`` [R, …, d], ``w`` and ``b`` [R, d] -> LN(x) · w + b (LN without affine over the last axis, eps 1e-5)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        normed, mean, rstd = torch.native_layer_norm(x, x.shape[-1:], None, None, EPS)
        ctx.save_for_backward(x, w, normed, mean, rstd)
        return torch.addcmul(_per_run(b, x), normed, _per_run(w, x))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, w, normed, mean, rstd = ctx.saved_tensors
        rows = tuple(range(1, x.dim() - 1))  # the axes a run's w and b are broadcast over
        grad_w = grad_b = grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.ops.aten.native_layer_norm_backward(grad * _per_run(w, x), x, x.shape[-1:], mean, rstd,
                                                               None, None, [True, False, False])[0]
        if ctx.needs_input_grad[1]:
            grad_w = (grad * normed).sum(rows) if rows else grad * normed
        if ctx.needs_input_grad[2]:
            grad_b = grad.sum(rows) if rows else grad
        return grad_x, grad_w, grad_b


def side_by_side(w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    """``W_Q``, ``W_K``, ``W_V`` [R, heads, d, d_head] as one [R, d, heads · 3 · d_head] matrix, each head's q, k, v
    columns adjacent (the biases likewise: :func:`side_by_side_bias`)."""
    runs, heads, d, d_head = w_q.shape
    return torch.cat((w_q, w_k, w_v), dim=-1).transpose(1, 2).reshape(runs, d, heads * 3 * d_head)


def side_by_side_bias(b_q: torch.Tensor, b_k: torch.Tensor, b_v: torch.Tensor) -> torch.Tensor:
    """``b_Q``, ``b_K``, ``b_V`` [R, heads, d_head] as [R, 1, heads · 3 · d_head], in :func:`side_by_side`'s order."""
    return torch.cat((b_q, b_k, b_v), dim=-1).view(b_q.shape[0], 1, -1)


class HeadsProjection(torch.autograd.Function):
    """``rows`` [R, M, d] times ``W_Q``, ``W_K``, ``W_V`` [R, heads, d, d_head] side by side (plus ``b_Q``, ``b_K``,
    ``b_V`` [R, heads, d_head], or None for no bias) -> [R, M, heads · 3 · d_head], each head's q, k, v adjacent.

    The products autograd's ``BaddbmmBackward0`` makes, on the same operands (the side-by-side weight is built once,
    in the forward); without the nodes that concatenate, transpose and reshape the six parameters (and undo it in
    the backward): 17 operations fewer for each attention layer of a step."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                b_q: torch.Tensor | None, b_k: torch.Tensor | None, b_v: torch.Tensor | None) -> torch.Tensor:
        w = side_by_side(w_q, w_k, w_v)
        ctx.save_for_backward(rows, w)
        ctx.heads, ctx.d_head = w_q.shape[1], w_q.shape[-1]
        return torch.bmm(rows, w) if b_q is None else torch.baddbmm(side_by_side_bias(b_q, b_k, b_v), rows, w)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        rows, w = ctx.saved_tensors
        grad_rows = torch.bmm(grad, w.transpose(1, 2)) if ctx.needs_input_grad[0] else None
        grad_w = torch.bmm(rows.transpose(1, 2), grad)  # [R, d, heads · 3 · d_head]
        grad_b = grad.sum(1) if ctx.needs_input_grad[4] else None  # [R, heads · 3 · d_head]
        return grad_rows, *_thirds(grad_w, ctx.heads, ctx.d_head), *_thirds(grad_b, ctx.heads, ctx.d_head)


def _thirds(grad: torch.Tensor | None, heads: int, d_head: int) -> tuple[torch.Tensor | None, ...]:
    """The q, k and v parts of a side-by-side gradient [R, (d,) heads · 3 · d_head] as [R, heads, (d,) d_head]
    strided views: one ``as_strided`` each (a view, a transpose and a split made ten operations of it)."""
    if grad is None:
        return None, None, None
    step = grad.stride(-1)  # of the last axis, the (head, part, coordinate) one
    if grad.dim() == 3:  # a weight's [R, d, heads · 3 · d_head]
        size = (grad.shape[0], heads, grad.shape[1], d_head)
        stride = (grad.stride(0), 3 * d_head * step, grad.stride(1), step)
    else:  # a bias's [R, heads · 3 · d_head]
        size, stride = (grad.shape[0], heads, d_head), (grad.stride(0), 3 * d_head * step, step)
    # a product's or a sum's fresh result: its storage starts at the tensor (no offset to add, none for TorchDynamo
    # to trace: storage_offset() breaks a compiled graph)
    q, k, v = [grad.as_strided(size, stride, part * d_head * step) for part in range(3)]
    return q, k, v
