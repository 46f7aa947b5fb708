"""Hand-written model parts equal what they replace, bit for bit (issue 45 item 5): the per-run LayerNorm, the q/k/v
projection, attention's output projection and the MLP sublayer as single autograd nodes, each in the blocks of every
family that uses it, and the one-head last layer's broadcasts."""

import pytest
import torch
import torch.nn.functional as F

from depthlab.models import MODELS, TaskShapes, build_model
from depthlab.models.attention_kernels import FullLayer, composed_layer, weighted_keys
from depthlab.models.fused_blocks import ResidualMLP
from depthlab.models.fused_nodes import HeadsOutput, HeadsProjection, RunLayerNorm


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


def equal_values_and_gradients(fns, leaves: list[torch.Tensor], grads: list[torch.Tensor], *extra) -> None:
    """Each of ``fns`` on fresh copies of ``leaves`` (then ``extra``): outputs, and the leaves' gradients for the
    outputs' gradients ``grads``, equal bit for bit."""
    results = []
    for fn in fns:
        inputs = [t.clone().requires_grad_() for t in leaves]
        outs = fn(*inputs, *extra)
        outs = outs if isinstance(outs, tuple) else (outs,)
        torch.autograd.backward(outs, grads)
        results.append([*(out.detach() for out in outs), *(t.grad for t in inputs)])
    for expected, got in zip(*results, strict=True):
        assert torch.equal(expected, got)


def composed_projection(x, w_q, w_k, w_v, b_q, b_k, b_v):
    """What ``HeadProjections.fused_qkv`` computed before: x's rows, the side-by-side weight and bias built under
    autograd, and the product split into q, k, v [R·B, heads, n, d_head]."""
    runs, batch, n, d = x.shape
    heads, d_head = w_q.shape[1], w_q.shape[-1]
    rows = x.reshape(runs, batch * n, d)
    w = torch.cat((w_q, w_k, w_v), dim=-1).transpose(1, 2).reshape(runs, d, -1)
    qkv = (torch.bmm(rows, w) if b_q is None
           else torch.baddbmm(torch.cat((b_q, b_k, b_v), dim=-1).view(runs, 1, -1), rows, w))
    return qkv.view(runs * batch, n, heads, 3 * d_head).transpose(1, 2).split(d_head, dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("heads", [1, 3])
def test_heads_projection_equals_autograds_composition_bit_for_bit(with_bias, heads, dtype):
    g = torch.Generator().manual_seed(1)
    runs, batch, n, d, d_head = 2, 3, 5, 12, 4
    leaves = [torch.randn(runs, batch, n, d, generator=g, dtype=dtype)]
    leaves += [torch.randn(runs, heads, d, d_head, generator=g, dtype=dtype) for _ in range(3)]
    leaves += [torch.randn(runs, heads, d_head, generator=g, dtype=dtype) for _ in range(3)] if with_bias else []
    # q's gradient as attention's backward leaves it (a transposed layout); k's and v's contiguous
    grads = [torch.randn(runs * batch, n, heads, d_head, generator=g, dtype=dtype).transpose(1, 2)]
    grads += [torch.randn(runs * batch, heads, n, d_head, generator=g, dtype=dtype) for _ in range(2)]
    equal_values_and_gradients((composed_projection, HeadsProjection.apply), leaves, grads,
                               *([] if with_bias else [None, None, None]))


def composed_output(z, w_o, b_o, residual, shape):
    """What ``HeadProjections.fused_output`` and the block's residual add computed before, under autograd."""
    runs, heads, d_head = w_o.shape[0], w_o.shape[1], w_o.shape[2]
    rows = z.transpose(1, 2).reshape(runs, -1, heads * d_head)
    out = torch.baddbmm(b_o.unsqueeze(1), rows, w_o.reshape(runs, heads * d_head, -1)).view(shape)
    return out if residual is None else residual + out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("with_residual", [True, False])
def test_heads_output_equals_autograds_composition_bit_for_bit(with_residual, dtype):
    g = torch.Generator().manual_seed(2)
    runs, batch, n, heads, d_head, d = 2, 3, 5, 4, 3, 10
    # z as scaled_dot_product_attention returns it: [R·B, heads, n, d_head], a transposed view
    leaves = [torch.randn(runs * batch, n, heads, d_head, generator=g, dtype=dtype).transpose(1, 2),
              torch.randn(runs, heads, d_head, d, generator=g, dtype=dtype),
              torch.randn(runs, d, generator=g, dtype=dtype)]
    leaves += [torch.randn(runs, batch, n, d, generator=g, dtype=dtype)] if with_residual else []
    grads = [torch.randn(runs, batch, n, d, generator=g, dtype=dtype)]
    extra = ([] if with_residual else [None]) + [torch.Size((runs, batch, n, d))]
    equal_values_and_gradients((composed_output, HeadsOutput.apply), leaves, grads, *extra)


def composed_mlp(x, ln_w, ln_b, w_in, b_in, w_out, b_out):
    """What the pre-norm MLP sublayer computed before: the LayerNorm's node, the two ``baddbmm`` on rows with the
    per-run biases unsqueezed, the GELU, the view back and the residual add, under autograd."""
    normed = RunLayerNorm.apply(x, ln_w, ln_b)
    rows = normed.reshape(x.shape[0], -1, x.shape[-1])
    pre = torch.baddbmm(b_in.unsqueeze(1), rows, w_in)
    return x + torch.baddbmm(b_out.unsqueeze(1), F.gelu(pre), w_out).view(x.shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(2, 3, 5, 8), (3, 4, 8)])
def test_residual_mlp_equals_autograds_composition_bit_for_bit(shape, dtype):
    g = torch.Generator().manual_seed(4)
    runs, d, d_mlp = shape[0], shape[-1], 4 * shape[-1]
    leaves = [torch.randn(shape, generator=g, dtype=dtype) * 2 + 1]
    leaves += [torch.randn(size, generator=g, dtype=dtype)
               for size in ((runs, d), (runs, d), (runs, d, d_mlp), (runs, d_mlp), (runs, d_mlp, d), (runs, d))]
    grads = [torch.randn(shape, generator=g, dtype=dtype)]
    equal_values_and_gradients((composed_mlp, ResidualMLP.apply), leaves, grads)


def no_op(x, hook):
    return None


BLOCKS = {  # family -> spec fields: every family whose blocks use the fused nodes
    "transformer": {"layers": 1, "heads": 2, "width": 16},
    "transformer, no MLP": {"layers": 1, "heads": 2, "width": 16, "mlp": False},
    "transformer, rotary": {"layers": 1, "heads": 2, "width": 16, "positional": "rotary", "causal": False},
    "dss": {"layers": 1, "width": 8, "d_state": 3, "mlp": True},
    "linear_transformer": {"layers": 1, "heads": 2, "width": 16, "mlp": True},
    "retnet": {"layers": 1, "heads": 2, "width": 16, "mlp": True},
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("family", list(BLOCKS))
def test_a_block_without_hooks_equals_the_hooked_sublayers_bit_for_bit(family, dtype):
    """A block with no hook attached (its sublayers and residual adds as the fused nodes) gives the values and
    gradients of the same block with a hook that changes nothing on its residual stream (each sublayer through
    the modules' own forwards, the residual adds by autograd)."""
    raw = BLOCKS[family]
    name = family.split(",")[0]
    model = build_model(MODELS[name](name=name, **raw), TaskShapes(9, 7, 5), range(2)).to(dtype)
    block = model.blocks[0]
    x = torch.randn(2, 3, 7, raw["width"], generator=torch.Generator().manual_seed(6), dtype=dtype)
    grad = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=dtype)

    def values_and_gradients():
        inputs = x.clone().requires_grad_()
        block.zero_grad()
        out = block(inputs)
        out.backward(grad)
        return [out.detach(), inputs.grad, *(p.grad for p in block.parameters())]

    fused = values_and_gradients()
    assert type(block(x).grad_fn).__name__ in ("ResidualMLPBackward", "HeadsOutputBackward")  # the fused path ran
    block.hook_resid_post.add_hook(no_op)
    composed = values_and_gradients()
    block.hook_resid_post.remove_hooks()
    for expected, got in zip(composed, fused, strict=True):
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



@pytest.mark.parametrize("heads", [1, 2])
@pytest.mark.parametrize("softmax", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_attention_only_layer_equals_autograds_composition_bit_for_bit(heads, softmax, dtype):
    """``FullLayer`` (one node) against the same layer composed by autograd: values, and the gradients of H (three
    shares, summed in autograd's order), W_QK and W_V."""
    g = torch.Generator().manual_seed(1)
    runs, batch, n, width = 3, 4, 5, 6
    leaves = [torch.randn(runs, batch, n, width, generator=g, dtype=dtype),
              torch.randn(runs, heads, width, width, generator=g, dtype=dtype) * 0.3,
              torch.randn(runs, heads, width, width, generator=g, dtype=dtype) * 0.3]
    grad = torch.randn(runs, batch, n, width, generator=g, dtype=dtype)
    equal_values_and_gradients((composed_layer, FullLayer.apply), leaves, [grad], softmax)
