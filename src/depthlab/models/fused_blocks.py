"""The pre-norm MLP sublayer as one autograd node (issue 45 item 5): x + MLP(LN(x)), with the MLP
GELU(y W_in + b_in) W_out + b_out (seed 002 §7.1's GPT-2 block; the recurrent families' blocks with an MLP).

Autograd builds it from nine nodes (the layer norm, the view of its output as rows, the added axes of the two
per-run biases, two ``baddbmm``, the GELU, the view back and the residual add); :class:`ResidualMLP` makes the same
kernels on the same operands in the same order — ``native_layer_norm``, ``addcmul``, ``baddbmm``, ``gelu``,
``baddbmm``, ``add`` — and in its backward the products and sums of ``BaddbmmBackward0``, ``gelu_backward`` and the
layer norm's (``models.fused_nodes``), so values and gradients equal autograd's bit for bit
(``tests/test_fused_nodes.py``).
Used where no hook of the block is attached and autocast is off.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .fused_nodes import as_shape, layer_norm, layer_norm_grads, product_grads


class ResidualMLP(torch.autograd.Function):
    """``x`` [R, …, d] -> x + GELU(LN(x) W_in + b_in) W_out + b_out, with the LayerNorm's ``ln_w``, ``ln_b`` [R, d],
    ``W_in`` [R, d, d_mlp], ``b_in`` [R, d_mlp], ``W_out`` [R, d_mlp, d], ``b_out`` [R, d]."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, ln_w: torch.Tensor, ln_b: torch.Tensor, w_in: torch.Tensor,
                b_in: torch.Tensor, w_out: torch.Tensor, b_out: torch.Tensor) -> torch.Tensor:
        runs = x.shape[0]
        rows = as_shape(x, runs, -1, x.shape[-1])
        normed_rows, normed, mean, rstd, ln_w_rows = layer_norm(rows, ln_w, ln_b)
        pre = torch.baddbmm(b_in.view(runs, 1, -1), normed_rows, w_in)
        post = F.gelu(pre)
        ctx.save_for_backward(rows, ln_w_rows, normed, mean, rstd, normed_rows, w_in, pre, post, w_out)
        return x + torch.baddbmm(b_out.view(runs, 1, -1), post, w_out).view(x.shape)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        rows, ln_w_rows, normed, mean, rstd, normed_rows, w_in, pre, post, w_out = ctx.saved_tensors
        grad_post, grad_w_out, grad_b_out = product_grads(as_shape(grad, *rows.shape), post, w_out)
        grad_pre = torch.ops.aten.gelu_backward(grad_post, pre)
        grad_normed, grad_w_in, grad_b_in = product_grads(grad_pre, normed_rows, w_in)
        grad_rows, grad_ln_w, grad_ln_b = layer_norm_grads(grad_normed, rows, ln_w_rows, normed, mean, rstd)
        return grad + grad_rows.view(grad.shape), grad_ln_w, grad_ln_b, grad_w_in, grad_b_in, grad_w_out, grad_b_out
