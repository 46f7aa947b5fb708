"""Hand-written model parts equal what they replace, bit for bit (issue 45 item 5): the per-run LayerNorm and the q/k/v
projection as single autograd nodes, and the one-head last layer's broadcasts."""

import pytest
import torch
import torch.nn.functional as F

from depthlab.models.attention_kernels import weighted_keys
from depthlab.models.fused_nodes import HeadsProjection, RunLayerNorm


def composed(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """What ``components.LayerNorm`` computed before: F.layer_norm, then the per-run affine map by autograd."""
    shape = (w.shape[0], *([1] * (x.dim() - 2)), w.shape[-1])
    return torch.addcmul(b.view(shape), F.layer_norm(x, x.shape[-1:]), w.view(shape))


@pytest.mark.parametrize("shape", [(3, 5, 7, 16), (2, 4, 16), (1, 1, 1, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_values_and_gradients_equal_autograds_composition_bit_for_bit(shape, dtype):
    g = torch.Generator().manual_seed(0)
    leaves = [torch.randn(shape, generator=g, dtype=dtype) * 3 + 1,
              torch.randn(shape[0], shape[-1], generator=g, dtype=dtype),
              torch.randn(shape[0], shape[-1], generator=g, dtype=dtype)]
    grad = torch.randn(shape, generator=g, dtype=dtype)
    results = []
    for fn in (composed, RunLayerNorm.apply):
        inputs = [t.clone().requires_grad_() for t in leaves]
        out = fn(*inputs)
        out.backward(grad)
        results.append([out.detach(), *(t.grad for t in inputs)])
    for expected, got in zip(*results, strict=True):
        assert torch.equal(expected, got)


def test_only_the_gradients_asked_for_are_computed():
    x = torch.randn(2, 3, 8, requires_grad=True)
    w, b = torch.ones(2, 8), torch.zeros(2, 8, requires_grad=True)
    RunLayerNorm.apply(x, w, b).sum().backward()
    assert x.grad is not None and b.grad is not None and w.grad is None


def composed_projection(rows, w_q, w_k, w_v, b_q, b_k, b_v):
    """What ``HeadProjections.fused_qkv`` computed before: the side-by-side weight and bias built under autograd."""
    runs, d = w_q.shape[0], w_q.shape[2]
    w = torch.cat((w_q, w_k, w_v), dim=-1).transpose(1, 2).reshape(runs, d, -1)
    if b_q is None:
        return torch.bmm(rows, w)
    return torch.baddbmm(torch.cat((b_q, b_k, b_v), dim=-1).view(runs, 1, -1), rows, w)


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("heads", [1, 3])
def test_heads_projection_equals_autograds_composition_bit_for_bit(with_bias, heads):
    g = torch.Generator().manual_seed(1)
    runs, rows, d, d_head = 2, 10, 12, 4
    leaves = [torch.randn(runs, rows, d, generator=g)]
    leaves += [torch.randn(runs, heads, d, d_head, generator=g) for _ in range(3)]
    leaves += [torch.randn(runs, heads, d_head, generator=g) for _ in range(3)] if with_bias else []
    grad = torch.randn(runs, rows, heads * 3 * d_head, generator=g)
    results = []
    for fn in (composed_projection, HeadsProjection.apply):
        inputs = [t.clone().requires_grad_() for t in leaves]
        out = fn(*inputs, *([] if with_bias else [None, None, None]))
        out.backward(grad)
        results.append([out.detach(), *(t.grad for t in inputs)])
    for expected, got in zip(*results, strict=True):
        assert torch.equal(expected, got)


def test_one_heads_weighted_keys_equal_the_broadcast_over_added_axes_bit_for_bit():
    """The last layer's one-head shortcut (no added axes) makes the same products and the same sum."""
    g = torch.Generator().manual_seed(3)
    weights = torch.relu(torch.randn(64, 11, 1, generator=g))
    keys = torch.randn(64, 12, 28, generator=g)[:, 1:]  # a view, as the layer's keys are
    general = (weights.unsqueeze(-1) * keys.unsqueeze(2)).sum(1)
    assert torch.equal(weighted_keys(weights, keys), general)
    heads = torch.relu(torch.randn(64, 11, 3, generator=g))
    assert torch.equal(weighted_keys(heads, keys), (heads.unsqueeze(-1) * keys.unsqueeze(2)).sum(1))
