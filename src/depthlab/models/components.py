"""The parts the families are built from, each holding its own parameters with the run axis first.

Names and shapes are TransformerLens' (after the run axis): ``Embed.W_E`` [d_vocab, d_model],
``PosEmbed.W_pos`` [n_ctx, d_model], ``LayerNorm.w``/``.b`` [d_model], ``MLP.W_in`` [d_model, d_mlp] …,
``Unembed.W_U`` [d_model, d_vocab_out], and :class:`HeadProjections`' ``W_Q``/``W_K``/``W_V``
[heads, d_model, d_head] and ``W_O`` [heads, d_head, d_model]. A family's module tree therefore names its
parameters ``embed.W_E``, ``blocks.0.attn.W_Q``, ``blocks.0.mlp.W_in``, ``unembed.W_U``: a run's state dict is
a TransformerLens state dict up to the run index.

:class:`Init` draws every parameter run by run from the run's own generator, in the order the parts are built,
so a run initialises the same alone and inside any group.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from .factored import Circuits
from .fused_blocks import ResidualMLP
from .fused_nodes import HeadsOutput, HeadsProjection, RunLayerNorm, side_by_side, side_by_side_bias
from .hooks import HookPoint, hooked


def per_run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [R, …, d] @ w [R, d, e] as one matrix product per run (not one per batch element)."""
    if x.dim() == 3:  # already [R, rows, d]: no reshapes (each is a node autograd walks back through)
        return torch.bmm(x, w)  # not ``@``: matmul's broadcasting logic adds ten operations around the bmm
    return torch.bmm(x.reshape(x.shape[0], -1, x.shape[-1]), w).view(*x.shape[:-1], w.shape[-1])


def bias(b: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-run bias [R, e] shaped to broadcast against ``like`` [R, …, e]."""
    return b.view(b.shape[0], *([1] * (like.dim() - 2)), b.shape[-1])


def heads_last(x: torch.Tensor) -> torch.Tensor:
    """[R, B, heads, n, e] (how attention computes) as [R, B, n, heads, e] (TransformerLens' hook layout)."""
    return x.transpose(2, 3)


def through_head_hook(hook: HookPoint, x: torch.Tensor) -> torch.Tensor:
    """Pass a per-head activation [R, B, heads, n, e] through ``hook`` in TransformerLens' layout."""
    return heads_last(hook(heads_last(x))) if hook.active else x


def shapes_only() -> bool:
    """Whether modules are being built on the meta device (``model_size``), where values are never read: weights
    are then left empty, because drawing random ones there goes through a decomposition that imports TorchDynamo
    (seconds at every start of a training command)."""
    return torch.get_default_device().type == "meta"


def fixed_table(shape: list[int], build: Callable[[], torch.Tensor],
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A constant table of a module (a mask, one-hot positions, decay rates) from ``build``; on the meta device
    only an empty tensor of its ``shape`` and ``dtype`` (:func:`shapes_only`: ``triu``, ``eye`` or an indexed
    write there import TorchDynamo as well)."""
    return torch.empty(shape, dtype=dtype) if shapes_only() else build()


def causal_mask(n: int) -> torch.Tensor:
    """[n, n] bool, True where the key comes after the query."""
    return fixed_table([n, n], lambda: torch.ones(n, n, dtype=torch.bool).triu(1), torch.bool)


class Init:
    """Initial values for R runs, run r drawn from ``generators[r]`` (normal, uniform or constant)."""

    def __init__(self, generators: list[torch.Generator], std: float) -> None:
        self.generators, self.std = generators, std

    @property
    def runs(self) -> int:
        return len(self.generators)

    def _shapes_only(self, shape: list[int]) -> torch.nn.Parameter | None:
        return torch.nn.Parameter(torch.empty([self.runs, *shape])) if shapes_only() else None

    def normal(self, shape: list[int], std: float | None = None) -> torch.nn.Parameter:
        if (empty := self._shapes_only(shape)) is not None:
            return empty
        std = self.std if std is None else std
        return torch.nn.Parameter(torch.stack([torch.randn(shape, generator=g) * std for g in self.generators]))

    def uniform(self, shape: list[int], low: float, high: float) -> torch.nn.Parameter:
        if (empty := self._shapes_only(shape)) is not None:
            return empty
        return torch.nn.Parameter(torch.stack([torch.rand(shape, generator=g) * (high - low) + low
                                               for g in self.generators]))

    def const(self, shape: list[int], value: float) -> torch.nn.Parameter:
        return torch.nn.Parameter(torch.full([self.runs, *shape], float(value)))


class Embed(torch.nn.Module):
    """Token embedding ``W_E`` [R, d_vocab, d_model]; vector inputs [R, B, n, d_in] are projected by it."""

    def __init__(self, d_vocab: int, d_model: int, init: Init) -> None:
        super().__init__()
        self.W_E = init.normal([d_vocab, d_model])
        # each run's index, [R, 1, 1], made once (an arange and two added axes were eight operations a step)
        runs = init.runs
        self.register_buffer("run_index", fixed_table([runs, 1, 1], lambda: torch.arange(runs).view(runs, 1, 1),
                                                      torch.long), persistent=False)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.is_floating_point():
            return per_run(inputs.to(self.W_E.dtype), self.W_E)
        return self.W_E[self.run_index, inputs]  # a gather per run

    def select_run_buffers(self, keep: torch.Tensor) -> None:
        """After runs left (``RunModule.select_runs``): run r's index is r again, the arange's first ``len(keep)``."""
        self.run_index = self.run_index[: keep.numel()]


class PosEmbed(torch.nn.Module):
    """Learned absolute positions ``W_pos`` [R, n_ctx, d_model]; ``forward(n)`` -> [R, 1, n, d_model]."""

    def __init__(self, n_ctx: int, d_model: int, init: Init) -> None:
        super().__init__()
        self.W_pos = init.normal([n_ctx, d_model])

    def forward(self, n: int) -> torch.Tensor:
        return self.W_pos[:, None, :n]


class LayerNorm(torch.nn.Module):
    """LayerNorm with each run's own gain ``w`` and bias ``b``, or RMSNorm (gain only) with ``rms``."""

    def __init__(self, d: int, init: Init, rms: bool = False) -> None:
        super().__init__()
        self.rms = rms
        self.w = init.const([d], 1.0)
        if not rms:
            self.b = init.const([d], 0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rms:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * bias(self.w, x)
        if torch.is_autocast_enabled(x.device.type):  # autocast's own casting rules for layer_norm apply
            return torch.addcmul(bias(self.b, x), F.layer_norm(x, x.shape[-1:]), bias(self.w, x))
        return RunLayerNorm.apply(x, self.w, self.b)  # the same, as one autograd node (models.fused_nodes)


class MLP(torch.nn.Module):
    """GELU(x W_in + b_in) W_out + b_out; ``hook_pre`` and ``hook_post`` around the GELU."""

    def __init__(self, d: int, d_mlp: int, init: Init, out_std: float) -> None:
        super().__init__()
        self.W_in = init.normal([d, d_mlp])
        self.b_in = init.const([d_mlp], 0.0)
        self.W_out = init.normal([d_mlp, d], out_std)
        self.b_out = init.const([d], 0.0)
        self.hook_pre, self.hook_post = HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.hook_pre.fns or self.hook_post.fns):  # no hook: two products with their biases, on rows
            rows = x.reshape(x.shape[0], -1, x.shape[-1])
            pre = torch.baddbmm(self.b_in.unsqueeze(1), rows, self.W_in)
            return torch.baddbmm(self.b_out.unsqueeze(1), F.gelu(pre), self.W_out).view(x.shape)
        pre = self.hook_pre(per_run(x, self.W_in) + bias(self.b_in, x))
        return per_run(self.hook_post(F.gelu(pre)), self.W_out) + bias(self.b_out, x)

    def residual(self, x: torch.Tensor, norm: LayerNorm) -> torch.Tensor:
        """x + MLP(norm(x)), the pre-norm sublayer: one autograd node (``models.fused_blocks``) where no hook is
        attached (the caller's to check), ``norm`` is a LayerNorm and autocast is off; else the modules' own."""
        if norm.rms or torch.is_autocast_enabled(x.device.type):
            return x + self(norm(x))
        return ResidualMLP.apply(x, norm.w, norm.b, self.W_in, self.b_in, self.W_out, self.b_out)


class Unembed(torch.nn.Module):
    """Logits = x W_U (+ b_U): ``W_U`` [R, d_model, classes], ``b_U`` [R, classes] (None: no bias)."""

    def __init__(self, w_u: torch.nn.Parameter, b_u: torch.nn.Parameter | None = None) -> None:
        super().__init__()
        self.W_U = w_u
        if b_u is not None:
            self.b_U = b_u

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "b_U") and x.dim() == 3:  # [R, B, d]: the product and the bias in one operation
            return torch.baddbmm(self.b_U.unsqueeze(1), x, self.W_U)
        logits = per_run(x, self.W_U)
        return logits + bias(self.b_U, logits) if hasattr(self, "b_U") else logits


class HeadProjections(Circuits, torch.nn.Module):
    """The per-head maps of multi-head attention and its relatives (linear attention, retention).

    ``W_Q``, ``W_K``, ``W_V`` [R, heads, d_model, d_head] (with biases ``b_Q``… [R, heads, d_head] unless
    ``with_bias`` is False), registered in that order, then a subclass's own parameters, then ``W_O``
    [R, heads, d_head, d_model] (and ``b_O``) through :meth:`add_output`: the registration order is the
    initialisation order, which a run's seed fixes. ``hook_q``, ``hook_k``, ``hook_v`` and ``hook_z`` see
    [R, B, n, heads, d_head] (TransformerLens' layout); the computation keeps heads before positions. ``QK`` and
    ``OV`` are TransformerLens' factored circuits.
    """

    def __init__(self, d: int, heads: int, d_head: int, init: Init, with_bias: bool = True) -> None:
        super().__init__()
        self.with_bias = with_bias
        for name in ("Q", "K", "V"):
            setattr(self, f"W_{name}", init.normal([heads, d, d_head]))
            if with_bias:
                setattr(self, f"b_{name}", init.const([heads, d_head], 0.0))
        self.hook_q, self.hook_k, self.hook_v, self.hook_z = HookPoint(), HookPoint(), HookPoint(), HookPoint()

    def add_output(self, d: int, heads: int, d_head: int, init: Init, out_std: float) -> None:
        self.W_O = init.normal([heads, d_head, d], out_std)
        if self.with_bias:
            self.b_O = init.const([d], 0.0)

    def project(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """x [R, B, n, d] -> [R, B, heads, n, d_head] for ``name`` in Q, K, V (bias added)."""
        out = torch.einsum("rbnd,rhde->rbhne", x, getattr(self, f"W_{name}"))
        return out + getattr(self, f"b_{name}")[:, None, :, None] if self.with_bias else out

    def qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v [R, B, heads, n, d_head], each through its hook."""
        return tuple(through_head_hook(hook, self.project(x, name))  # type: ignore[return-value]
                     for name, hook in (("Q", self.hook_q), ("K", self.hook_k), ("V", self.hook_v)))

    @property
    def hooked(self) -> bool:
        """Whether a hook asks for q, k, v or z (or a subclass's own points): then the generic path runs."""
        return hooked(self)

    def fused_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as [R·B, heads, n, d_head] views of one product: x [R, B, n, d] times W_Q, W_K, W_V side by
        side (and their biases), what attention kernels take; no hook sees them."""
        biases = (self.b_Q, self.b_K, self.b_V) if self.with_bias else (None, None, None)
        if not torch.is_autocast_enabled(x.device.type):  # one autograd node (models.fused_nodes)
            return HeadsProjection.apply(x, self.W_Q, self.W_K, self.W_V, *biases)
        # autocast casts the products' operands, which autograd's nodes record
        runs, batch, n, d = x.shape
        heads, d_head = self.W_Q.shape[1], self.W_Q.shape[-1]
        rows, w = x.reshape(runs, batch * n, d), side_by_side(self.W_Q, self.W_K, self.W_V)
        qkv = torch.baddbmm(side_by_side_bias(*biases), rows, w) if self.with_bias else torch.bmm(rows, w)
        return qkv.view(runs * batch, n, heads, 3 * d_head).transpose(1, 2).split(d_head, dim=-1)

    def fused_output(self, z: torch.Tensor, like: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """z [R·B, heads, n, d_head] -> Σ_h z_h W_O,h (+ b_O) shaped like ``like`` [R, B, n, d], in one product;
        ``residual`` + that when given."""
        if self.with_bias and not torch.is_autocast_enabled(z.device.type):  # one autograd node (models.fused_nodes)
            return HeadsOutput.apply(z, self.W_O, self.b_O, residual, like.shape)
        runs, heads, d_head = self.W_O.shape[0], self.W_O.shape[1], self.W_O.shape[2]
        rows = z.transpose(1, 2).reshape(runs, -1, heads * d_head)
        w = self.W_O.reshape(runs, heads * d_head, -1)
        out = (torch.baddbmm(self.b_O.unsqueeze(1), rows, w) if self.with_bias else torch.bmm(rows, w)).view(like.shape)
        return out if residual is None else residual + out

    def output(self, z: torch.Tensor) -> torch.Tensor:
        """z [R, B, heads, n, d_head] (through ``hook_z``) -> Σ_h z_h W_O,h (+ b_O): [R, B, n, d_model]."""
        out = torch.einsum("rbhne,rhed->rbnd", through_head_hook(self.hook_z, z), self.W_O)
        return out + self.b_O[:, None, None] if self.with_bias else out


def residual_out_std(std: float, layers: int) -> float:
    """GPT-2's scaling of the projections that write into the residual stream: std / √(2·layers)."""
    return std / math.sqrt(2 * layers)
