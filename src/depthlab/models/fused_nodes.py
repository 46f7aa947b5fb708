"""Parts of the models as one autograd node each, with hand-written backwards (issue 45 item 5: fewer operations a
step); each equals autograd's own composition bit for bit, values and gradients (``tests/test_fused_nodes.py``).

:class:`RunLayerNorm`: ``LN(x) ⊙ w + b`` over the last axis, with ``w`` and ``b`` [R, d] (one row per run), what
``torch.addcmul(b, F.layer_norm(x, (d,)), w)`` computes, with the same kernels in the same order: forward
``native_layer_norm`` then ``addcmul``; backward the products and sums autograd's ``AddcmulBackward0`` makes and
``native_layer_norm_backward``. Autograd builds that from four nodes (the per-run views of ``w`` and ``b``, the layer
norm, the affine map and its broadcast sums): 12 operations fewer for each LayerNorm of a step (about 23 of about 35
left). :class:`HeadsProjection`: the transformer's q, k and v in one product, handed to attention as views;
:class:`HeadsOutput`: Σ_h z_h W_O,h + b_O, with the residual stream added when given. The MLP sublayer is
``models.fused_blocks``.

All are used where autocast is off (autocast casts the products' operands, which autograd's nodes record).
"""

from __future__ import annotations

import torch

EPS = 1e-5  # F.layer_norm's default
SWAP_1_2 = (0, 2, 1, 3)  # a 4-d tensor's transpose(1, 2), as a permutation


def transposed(t: torch.Tensor) -> torch.Tensor:
    """``t.transpose(1, 2)`` for a 3-d ``t``, as one ``as_strided`` (``transpose`` calls it: two operations; 1.5 µs
    against 1.4 µs a call, measured). For the hand-written nodes' own operands only: under autograd an
    ``as_strided`` view has a costly backward."""
    return permuted(t, (0, 2, 1))


def permuted(t: torch.Tensor, order: tuple[int, ...]) -> torch.Tensor:
    """``t.permute(order)`` as one ``as_strided`` (:func:`transposed` for any axes, with the same caveat)."""
    return t.as_strided([t.shape[i] for i in order], [t.stride(i) for i in order])


def as_shape(t: torch.Tensor, *shape: int) -> torch.Tensor:
    """``t.reshape(shape)``, as a view when ``t`` is contiguous (a reshape is two operations, a view one)."""
    return t.view(shape) if t.is_contiguous() else t.reshape(shape)


def _per_run(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[R, d] as [R, 1, …, 1, d], to broadcast against ``like`` [R, …, d]."""
    return t.view(t.shape[0], *([1] * (like.dim() - 2)), t.shape[-1])


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """LN(x) · w + b for ``x`` [R, …, d] and ``w``, ``b`` [R, d], and what its backward needs: (out, normed, mean,
    rstd, w as [R, 1, …, 1, d])."""
    normed, mean, rstd = torch.native_layer_norm(x, x.shape[-1:], None, None, EPS)
    w_rows = _per_run(w, x)  # kept for the backward, which needs it in this shape too (one view fewer)
    return torch.addcmul(_per_run(b, x), normed, w_rows), normed, mean, rstd, w_rows


def layer_norm_grads(grad: torch.Tensor, x: torch.Tensor, w_rows: torch.Tensor, normed: torch.Tensor,
                     mean: torch.Tensor, rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`layer_norm`'s gradients (x, w, b) from the output's ``grad`` (``w_rows``: w as :func:`layer_norm`
    returned it): the products and sums autograd's ``AddcmulBackward0`` makes, and ``native_layer_norm_backward``."""
    rows = tuple(range(1, x.dim() - 1))  # the axes a run's w and b are broadcast over
    grad_x = torch.ops.aten.native_layer_norm_backward(grad * w_rows, x, x.shape[-1:], mean, rstd,
                                                       None, None, [True, False, False])[0]
    grad_w = (grad * normed).sum(rows) if rows else grad * normed
    grad_b = grad.sum(rows) if rows else grad
    return grad_x, grad_w, grad_b


class RunLayerNorm(torch.autograd.Function):
    """``x`` [R, …, d], ``w`` and ``b`` [R, d] -> LN(x) · w + b (LN without affine over the last axis, eps 1e-5)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out, normed, mean, rstd, w_rows = layer_norm(x, w, b)
        ctx.save_for_backward(x, w_rows, normed, mean, rstd)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return layer_norm_grads(grad, *ctx.saved_tensors)


def product_grads(grad: torch.Tensor, rows: torch.Tensor, w: torch.Tensor,
                  bias: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The gradients of ``baddbmm(b [R, 1, e], rows [R, M, d], w [R, d, e])`` (``bmm(rows, w)`` without ``bias``)
    from the output's ``grad``: rows, w and b ([R, e], or None), as autograd's ``BaddbmmBackward0`` and the bias's
    broadcast sum make them."""
    return torch.bmm(grad, transposed(w)), torch.bmm(transposed(rows), grad), grad.sum(1) if bias else None


def side_by_side(w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    """``W_Q``, ``W_K``, ``W_V`` [R, heads, d, d_head] as one [R, d, heads · 3 · d_head] matrix, each head's q, k, v
    columns adjacent (the biases likewise: :func:`side_by_side_bias`)."""
    runs, heads, d, d_head = w_q.shape
    return torch.cat((w_q, w_k, w_v), dim=-1).transpose(1, 2).reshape(runs, d, heads * 3 * d_head)


def side_by_side_bias(b_q: torch.Tensor, b_k: torch.Tensor, b_v: torch.Tensor) -> torch.Tensor:
    """``b_Q``, ``b_K``, ``b_V`` [R, heads, d_head] as [R, 1, heads · 3 · d_head], in :func:`side_by_side`'s order."""
    return torch.cat((b_q, b_k, b_v), dim=-1).view(b_q.shape[0], 1, -1)


def _side_by_side_copy(w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor) -> torch.Tensor:
    """:func:`side_by_side`'s matrix in five operations (its differentiable transposes and reshapes are ten)."""
    runs, heads, d, d_head = w_q.shape
    return _heads_side_by_side((w_q, w_k, w_v)).view(runs, d, heads * 3 * d_head)


def _heads_side_by_side(parts: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Three tensors [a, heads, b, d_head] as one contiguous [a, b, heads, 3 · d_head], each head's three parts
    adjacent: one copy (a ``cat`` of views, whatever the parts' strides)."""
    return torch.cat([permuted(t, SWAP_1_2) for t in parts], dim=-1)


def _qkv_layout(runs: int, batch: int, n: int, heads: int, d_head: int) -> tuple[list[int], list[int]]:
    """Size and stride of q, k or v [R·B, heads, n, d_head] inside a product [R, B·n, heads · 3 · d_head]."""
    row = heads * 3 * d_head
    return [runs * batch, heads, n, d_head], [n * row, 3 * d_head, row, 1]


class HeadsProjection(torch.autograd.Function):
    """``x`` [R, B, n, d] times ``W_Q``, ``W_K``, ``W_V`` [R, heads, d, d_head] side by side (plus ``b_Q``, ``b_K``,
    ``b_V`` [R, heads, d_head], or None for no bias) -> q, k, v [R·B, heads, n, d_head], strided views of one
    product [R, B·n, heads · 3 · d_head] (each head's q, k, v columns adjacent), what attention kernels take.

    The products autograd's ``BaddbmmBackward0`` makes, on the same operands (the side-by-side weight is built once,
    in the forward); without the nodes that concatenate, transpose and reshape the six parameters (and undo it in
    the backward), nor those that reshape x and split the product into q, k and v (the backward writes the three
    gradients into one buffer where autograd concatenated and copied)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                b_q: torch.Tensor | None, b_k: torch.Tensor | None, b_v: torch.Tensor | None):
        runs, batch, n, d = x.shape
        heads, d_head = w_q.shape[1], w_q.shape[-1]
        rows, w = as_shape(x, runs, batch * n, d), _side_by_side_copy(w_q, w_k, w_v)
        ctx.save_for_backward(rows, w)
        ctx.shape, ctx.x_shape = (runs, batch, n, heads, d_head), x.shape
        qkv = torch.bmm(rows, w) if b_q is None else torch.baddbmm(side_by_side_bias(b_q, b_k, b_v), rows, w)
        size, stride = _qkv_layout(*ctx.shape)
        # a product's fresh result: its storage starts at the tensor (no offset to read, none for TorchDynamo to
        # trace: storage_offset() breaks a compiled graph)
        return tuple(qkv.as_strided(size, stride, part * d_head) for part in range(3))

    @staticmethod
    def backward(ctx, grad_q: torch.Tensor, grad_k: torch.Tensor, grad_v: torch.Tensor):
        rows, w = ctx.saved_tensors
        runs, batch, n, heads, d_head = ctx.shape
        # the three gradients (attention's backward chooses their strides) side by side, as the product's columns
        grad = _heads_side_by_side((grad_q, grad_k, grad_v)).view(runs, batch * n, heads * 3 * d_head)
        grad_rows, grad_w, grad_b = product_grads(grad, rows, w, bias=ctx.needs_input_grad[4])
        return grad_rows.view(ctx.x_shape), *_thirds(grad_w, heads, d_head), *_thirds(grad_b, heads, d_head)


def _thirds(grad: torch.Tensor | None, heads: int, d_head: int) -> tuple[torch.Tensor | None, ...]:
    """The q, k and v parts of a side-by-side gradient [R, (d,) heads · 3 · d_head] as three contiguous [R, heads,
    (d,) d_head] tensors, in one copy: the optimizer gathers a contiguous gradient by a view (a strided third would
    cost it a copy of its own, four operations)."""
    if grad is None:
        return None, None, None
    runs, middle = grad.shape[0], grad.shape[1:-1]  # middle: (d,) for a weight, () for a bias
    parts = torch.empty(3, runs, heads, *middle, d_head, dtype=grad.dtype, device=grad.device)
    order = (1, 3, 2, 0, 4) if middle else (1, 2, 0, 3)  # parts' axes in the gradient's order: R, (d,) heads, 3, d_head
    permuted(parts, order).copy_(grad.view(runs, *middle, heads, 3, d_head))
    # each part as one as_strided (unbind is seven operations): a fresh tensor, so no offset of its own to add
    return tuple(parts.as_strided(parts.shape[1:], parts.stride()[1:], part * parts.stride(0)) for part in range(3))


class HeadsOutput(torch.autograd.Function):
    """``z`` [R·B, heads, n, d_head] (what attention returns) -> Σ_h z_h W_O,h + b_O [R, B, n, d] (``W_O`` [R, heads,
    d_head, d], ``b_O`` [R, d]) as one ``baddbmm``, plus ``residual`` [R, B, n, d] when given (the block's
    x + attn(…)).

    The products and the bias's sum autograd's ``BaddbmmBackward0`` makes; without the nodes that transpose and
    reshape z, reshape W_O, add an axis to b_O, view the result and add the residual (and undo each in the
    backward)."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, w_o: torch.Tensor, b_o: torch.Tensor, residual: torch.Tensor | None,
                shape: torch.Size) -> torch.Tensor:
        runs, heads, d_head, d = w_o.shape
        rows = as_shape(permuted(z, SWAP_1_2), runs, -1, heads * d_head)  # a view of attention's output on a CPU
        w = w_o.view(runs, heads * d_head, d)
        ctx.save_for_backward(rows, w)
        ctx.z_shape = z.shape
        out = torch.baddbmm(b_o.view(runs, 1, d), rows, w).view(shape)
        return out if residual is None else residual + out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        rows, w = ctx.saved_tensors
        batches, heads, n, d_head = ctx.z_shape
        grad_rows, grad_w, grad_b = product_grads(as_shape(grad, w.shape[0], -1, w.shape[-1]), rows, w)
        grad_z = permuted(grad_rows.view(batches, n, heads, d_head), SWAP_1_2)
        grad_residual = grad if ctx.needs_input_grad[3] else None
        return grad_z, grad_w.view(-1, heads, d_head, w.shape[-1]), grad_b, grad_residual, None
