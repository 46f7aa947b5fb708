"""Mamba (Gu & Dao, 2023; seed 003 §6: "Mamba [21]"), for a group of runs.

The block of ``mamba_simple.py`` (as ``mambapy``, the pure-PyTorch port, transcribes it): from x [n, d],
``x, z = x W_in`` (each d_inner = expand·d wide), a causal depthwise convolution of width d_conv and SiLU on x,
then the selective SSM with input-dependent Δ, B, C (``x W_x`` → Δ (dt_rank), B, C (d_state each);
Δ = softplus(Δ W_dt + b_dt)) and A = −exp(A_log) [d_inner, d_state]:

    h_t = exp(Δ_t A) ⊙ h_{t-1} + (Δ_t x_t) Bᵀ_t,    y_t = h_t C_t + D ⊙ x_t,    out = (y ⊙ SiLU(z)) W_out

in a residual block with RMSNorm, no MLP. Parameters are named and initialised as ``mambapy``'s (A_log = log
1…N, D = 1, Δ log-uniform in [0.001, 0.1] through the inverse softplus of ``b_dt``, linear maps uniform in
±1/√fan_in), with a leading run axis; the tests load a run's weights into ``mambapy`` and compare outputs.

Why not call ``mambapy`` itself: its modules have no run axis, its parallel scan has no ``vmap`` rule, and on
this CPU the scan below (a loop over positions, state [R, B, d_inner, d_state], computed step by step without
materialising the [R, B, n, d_inner, d_state] tensors) measured 0.64 s against 3.2 s for ``mambapy``'s
``pscan`` (forward and backward, batch 64, length 200, d_inner 128, d_state 16, one thread). ``mamba-ssm``
needs CUDA. State size: layers · d_inner · (d_state + d_conv − 1); ``hook_state`` gives h_t next to the
convolution's window of the last d_conv − 1 inputs, [R, B, n, d_inner, d_state + d_conv − 1].
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from .base import register
from .components import Init, bias, fixed_table, per_run
from .recurrent import Mixer, RecurrentSpec, ResidualBlock, SequenceStack
from .scans import block_length, chunked_scan, chunks_pay, in_blocks, scan_memory

# The selective scan's memory in training, in states of one position ([R, B, d_inner, d_state] numbers), measured on
# the CPU with training.tensor_meter (forward and backward, benchmarks/scan_memory.py). The blocked chunked scan (an
# accelerator's path): KEPT per layer at every block boundary until the backward pass, and CHUNKED_TRANSIENT per
# position of the block being computed (its decays, inputs, local states and products). The loop (a CPU's path, not
# blocked: recomputing blocks in the backward pass made it 1.4 times slower there): LOOP_KEPT per position and layer.
KEPT = 1.25
CHUNKED_TRANSIENT = 13.0
LOOP_KEPT = 2.5
LAYER_FLOATS = 12.0  # the rest of a layer's activations, per position and d_inner channel (measured alike)


def inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    """y with softplus(y) = x (x > 0)."""
    return x + torch.log(-torch.expm1(-x))


@register
class MambaSpec(RecurrentSpec):
    """Parameters of Mamba (names as ``mambapy.mamba.MambaConfig``)."""

    name: Literal["mamba"] = "mamba"
    layers: int = Field(2, ge=1, le=64)
    d_state: int = Field(16, ge=1)
    expand: int = Field(2, ge=1)
    d_conv: int = Field(4, ge=1)
    dt_rank: int | None = Field(None, ge=1, description="None = ceil(width / 16)")
    dt_min: float = Field(0.001, gt=0)
    dt_max: float = Field(0.1, gt=0)

    family: ClassVar[type]

    @property
    def d_inner(self) -> int:
        return self.expand * self.width

    @property
    def rank(self) -> int:
        return self.dt_rank or math.ceil(self.width / 16)

    @property
    def state_size(self) -> int:
        return self.layers * self.d_inner * (self.d_state + self.d_conv - 1)

    def training_floats(self, seq_len: int, batch: int, accelerated: bool) -> int:
        """Numbers one run's blocks hold at the peak of a training step (forward and backward): LAYER_FLOATS per
        position and d_inner channel in every layer (projections, convolution, Δ, B, C, gate), and the states of
        batch × d_inner × d_state numbers the scan holds: on an accelerator the blocked chunked scan's
        (``scans.scan_memory``), on a CPU the loop's, every position's."""
        kept = KEPT * self.layers
        states = (scan_memory(seq_len, block_length(seq_len, kept, CHUNKED_TRANSIENT), kept, CHUNKED_TRANSIENT)
                  if accelerated else LOOP_KEPT * self.layers * seq_len)
        return math.ceil(self.layers * LAYER_FLOATS * batch * seq_len * self.d_inner
                         + states * batch * self.d_inner * self.d_state)


class SelectiveSSM(Mixer):
    """One Mamba mixer: input map, causal convolution, selective scan, gate, output map."""

    def __init__(self, spec: MambaSpec, init: Init) -> None:
        super().__init__()
        self.spec = s = spec
        d, e, n, k, rank = s.width, s.d_inner, s.d_state, s.d_conv, s.rank

        def linear(fan_in: int, shape: list[int]) -> torch.nn.Parameter:
            bound = 1.0 / math.sqrt(fan_in)
            return init.uniform(shape, -bound, bound)

        self.W_in = linear(d, [d, 2 * e])
        self.conv_w = linear(k, [e, k])
        self.conv_b = linear(k, [e])
        self.W_x = linear(e, [e, rank + 2 * n])
        self.W_dt = init.uniform([rank, e], -(rank**-0.5), rank**-0.5)
        log_dt = init.uniform([e], math.log(s.dt_min), math.log(s.dt_max)).detach()
        self.b_dt = torch.nn.Parameter(fixed_table([init.runs, e], lambda: inverse_softplus(
            torch.exp(log_dt).clamp(min=1e-4))))
        self.A_log = torch.nn.Parameter(fixed_table(
            [init.runs, e, n], lambda: torch.log(torch.arange(1, n + 1, dtype=torch.float32)).repeat(init.runs, e, 1)))
        self.D = init.const([e], 1.0)
        self.W_out = linear(e, [e, d])

    def conv_input(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The convolution's input, padded with d_conv − 1 zeros in front, and z: [R, B, …, e]."""
        xs, z = per_run(x, self.W_in).chunk(2, dim=-1)  # [R, B, n, e]
        return F.pad(xs, (0, 0, self.spec.d_conv - 1, 0)), z

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Everything before the scan: x (after conv and SiLU), z, Δ, B, C, A."""
        s, n = self.spec, x.shape[2]
        padded, z = self.conv_input(x)
        conv = sum(padded[:, :, j : j + n] * self.conv_w[:, None, None, :, j] for j in range(s.d_conv))
        xs = F.silu(conv + bias(self.conv_b, conv))
        delta, b, c = per_run(xs, self.W_x).split([s.rank, s.d_state, s.d_state], dim=-1)
        delta = F.softplus(per_run(delta, self.W_dt) + bias(self.b_dt, xs))
        return xs, z, delta, b, c, -torch.exp(self.A_log)

    def finish(self, xs: torch.Tensor, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        y = y + xs * bias(self.D, xs)
        return per_run(y * F.silu(z), self.W_out)

    def scan(self, xs: torch.Tensor, delta: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
             a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """y [R, B, n, e] of the selective recurrence and h_t after every position [R, B, n, e, N], by the chunked
        parallel scan (``scans.chunked_scan``: about 2√n whole-sequence steps instead of n)."""
        h = chunked_scan(torch.exp(delta[..., None] * a[:, None, None]), (delta * xs)[..., None] * b[:, :, :, None, :])
        return (h * c[:, :, :, None, :]).sum(-1), h

    def sequential_scan(self, xs: torch.Tensor, delta: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                        a: torch.Tensor, keep: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The same, position by position, never materialising [R, B, n, e, N] (h_t kept only when ``keep``)."""
        a = a[:, None]  # [R, 1, e, N]
        h = xs.new_zeros(*xs.shape[:2], *a.shape[2:])
        ys, hs = [], []
        for dt, dx, bt, ct in zip(delta.unbind(2), (delta * xs).unbind(2), b.unbind(2), c.unbind(2), strict=True):
            h = torch.exp(dt[..., None] * a) * h + dx[..., None] * bt[:, :, None, :]
            ys.append((h * ct[:, :, None, :]).sum(-1))
            if keep:
                hs.append(h)
        return torch.stack(ys, dim=2), hs

    def block(self, h: torch.Tensor, xs: torch.Tensor, delta: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
              a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One block of positions by the chunked scan, from the state h [R, B, e, N] before it: its y [R, B, L, e]
        and the state after it."""
        hs = chunked_scan(torch.exp(delta[..., None] * a[:, None, None]), (delta * xs)[..., None] * b[:, :, :, None, :],
                          initial=h)
        return (hs * c[:, :, :, None, :]).sum(-1), hs.select(2, -1).clone()  # not a view: hs is freed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """On an accelerator the chunked scan in checkpointed blocks (``scans.in_blocks``): the whole-sequence
        chunked scan held about eleven [R, B, n, e, N] tensors per layer, and ran an H200 out of memory at 64 runs
        of width 256. On a CPU the loop (``scans.chunks_pay``)."""
        xs, z, delta, b, c, a = self.prepare(x)
        if not chunks_pay(x):
            return self.finish(xs, z, self.sequential_scan(xs, delta, b, c, a)[0])
        size = block_length(x.shape[2], self.spec.layers * KEPT, CHUNKED_TRANSIENT)
        h = xs.new_zeros(*xs.shape[:2], *a.shape[1:])
        return self.finish(xs, z, in_blocks(self.block, h, (xs, delta, b, c), (a,), size)[0])

    def recurrent(self, x: torch.Tensor) -> torch.Tensor:
        xs, z, delta, b, c, a = self.prepare(x)
        return self.finish(xs, z, self.sequential_scan(xs, delta, b, c, a)[0])

    def states(self, x: torch.Tensor) -> torch.Tensor:
        xs, _, delta, b, c, a = self.prepare(x)
        if chunks_pay(x):
            hs = self.scan(xs, delta, b, c, a)[1]
        else:
            hs = torch.stack(self.sequential_scan(xs, delta, b, c, a, keep=True)[1], dim=2)  # [R, B, n, e, N]
        if self.spec.d_conv == 1:
            return hs
        window = self.conv_input(x)[0].unfold(2, self.spec.d_conv - 1, 1)[:, :, 1:]  # inputs t−k+2 … t
        return torch.cat([hs, window], dim=-1)


class Mamba(SequenceStack):
    """R runs of a stack of Mamba blocks."""

    rms = True

    def build_layers(self, init: Init) -> None:
        spec = self.spec
        self.blocks = torch.nn.ModuleList(ResidualBlock("mixer", SelectiveSSM(spec, init), spec, init, rms=True)
                                          for _ in range(spec.layers))


MambaSpec.family = Mamba
