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
needs CUDA. State size: layers · d_inner · (d_state + d_conv − 1).
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from .base import TaskShapes, register
from .recurrent import RecurrentSpec, SequenceStack, bias, per_run


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


class Mamba(SequenceStack):
    """R runs of a stack of Mamba blocks."""

    norm = "rms"

    def __init__(self, spec: MambaSpec, shapes: TaskShapes, n_runs: int, generators: list[torch.Generator]) -> None:
        super().__init__(spec, shapes, n_runs, generators)

    def _linear(self, fan_in: int, shape: list[int]) -> torch.Tensor:
        bound = 1.0 / math.sqrt(fan_in)
        return self.uniform(shape, -bound, bound)

    def _init_mixer(self, layer: int) -> None:
        s = self.spec
        d, e, n, k, rank = s.width, s.d_inner, s.d_state, s.d_conv, s.rank
        p = f"blocks.{layer}.mixer"
        self.add(f"{p}.W_in", self._linear(d, [d, 2 * e]))
        self.add(f"{p}.conv_w", self._linear(k, [e, k]))
        self.add(f"{p}.conv_b", self._linear(k, [e]))
        self.add(f"{p}.W_x", self._linear(e, [e, rank + 2 * n]))
        self.add(f"{p}.W_dt", self.uniform([rank, e], -(rank**-0.5), rank**-0.5))
        dt = torch.exp(self.uniform([e], math.log(s.dt_min), math.log(s.dt_max))).clamp(min=1e-4)
        self.add(f"{p}.b_dt", dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        self.add(f"{p}.A_log", torch.log(torch.arange(1, n + 1, dtype=torch.float32)).repeat(self.n_runs, e, 1))
        self.add(f"{p}.D", self.const([e], 1.0))
        self.add(f"{p}.W_out", self._linear(e, [e, d]))

    def prepare(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Everything before the scan: x (after conv and SiLU), z, Δ, B, C, A."""
        s, p = self.spec, f"blocks.{layer}.mixer"
        n = x.shape[2]
        xs, z = per_run(x, self.param(f"{p}.W_in")).chunk(2, dim=-1)  # [R, B, n, e]
        padded = F.pad(xs, (0, 0, s.d_conv - 1, 0))
        w = self.param(f"{p}.conv_w")
        conv = sum(padded[:, :, j : j + n] * w[:, None, None, :, j] for j in range(s.d_conv))
        xs = F.silu(conv + bias(self.param(f"{p}.conv_b"), conv))
        delta, b, c = per_run(xs, self.param(f"{p}.W_x")).split([s.rank, s.d_state, s.d_state], dim=-1)
        delta = F.softplus(per_run(delta, self.param(f"{p}.W_dt")) + bias(self.param(f"{p}.b_dt"), xs))
        return xs, z, delta, b, c, -torch.exp(self.param(f"{p}.A_log"))

    def finish(self, layer: int, xs: torch.Tensor, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        p = f"blocks.{layer}.mixer"
        y = y + xs * bias(self.param(f"{p}.D"), xs)
        return per_run(y * F.silu(z), self.param(f"{p}.W_out"))

    def mix(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        xs, z, delta, b, c, a = self.prepare(layer, x)
        a = a[:, None]  # [R, 1, e, N]
        h = xs.new_zeros(*xs.shape[:2], *a.shape[2:])
        ys = []
        for dt, dx, bt, ct in zip(delta.unbind(2), (delta * xs).unbind(2), b.unbind(2), c.unbind(2), strict=True):
            h = torch.exp(dt[..., None] * a) * h + dx[..., None] * bt[:, :, None, :]
            ys.append((h * ct[:, :, None, :]).sum(-1))
        return self.finish(layer, xs, z, torch.stack(ys, dim=2))


MambaSpec.family = Mamba
