"""Diagonal state space model, DSS (Gupta et al., 2022; seed 003 §6: "state space models such as DSS [22]"),
for a group of runs.

Each of the ``width`` channels is a linear time-invariant system with a diagonal complex state of size N
(``d_state``), zero-order-hold discretised with the channel's step Δ_h (the "DSS-exp" parameterisation):

    x_l = exp(ΛΔ_h) ⊙ x_{l-1} + ((exp(ΛΔ_h) − 1) / Λ) u_l,    y_l = Re(W_h · x_l) + D_h u_l        (recurrent)
    K̄_l = Re(Σ_n W_hn (exp(Λ_nΔ_h) − 1)/Λ_n · exp(Λ_nΔ_h l)),   y = K̄ ∗ u + D u  (FFT)         (convolution)

with Λ_n = −exp(Λ_re,n) + iΛ_im,n shared by the channels of a layer (as DSS), W complex per channel, Δ_h =
exp(log_dt_h). Initialisation: Λ_n = −1/2 + iπn (S4D-Lin, the diagonal approximation of HiPPO DSS starts from),
log Δ uniform in [log 0.001, log 0.1], W complex normal with variance 1/2 per part, D = 1. A block is
pre-LayerNorm, the SSM, GELU, a linear output map and the residual (the S4/DSS block), with an optional GELU
MLP. Training uses the FFT convolution; ``recurrent_mix`` runs the recurrence step by step and the tests
check that they agree. Written here because the authors' implementation (``state-spaces``) is a research
repository, not an installable library, and has no run axis. State size: layers · width · N complex numbers
(2 reals each).
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
class DSSSpec(RecurrentSpec):
    """Parameters of the DSS model."""

    name: Literal["dss"] = "dss"
    d_state: int = Field(32, ge=1, description="N: complex state size per channel")
    mlp: bool = False
    dt_min: float = Field(0.001, gt=0)
    dt_max: float = Field(0.1, gt=0)

    family: ClassVar[type]

    @property
    def state_size(self) -> int:
        return self.layers * self.width * self.d_state * 2


class DSS(SequenceStack):
    """R runs of a stack of DSS layers."""

    def __init__(self, spec: DSSSpec, shapes: TaskShapes, n_runs: int, generators: list[torch.Generator]) -> None:
        super().__init__(spec, shapes, n_runs, generators, mlp=spec.mlp)

    def _init_mixer(self, layer: int) -> None:
        d, n = self.spec.width, self.spec.d_state
        p = f"blocks.{layer}.ssm"
        self.add(f"{p}.Lambda_re_log", self.const([n], math.log(0.5)))
        self.add(f"{p}.Lambda_im", (math.pi * torch.arange(n, dtype=torch.float32)).expand(self.n_runs, n).clone())
        self.add(f"{p}.W_re", self.normal([d, n], math.sqrt(0.5)))
        self.add(f"{p}.W_im", self.normal([d, n], math.sqrt(0.5)))
        self.add(f"{p}.log_dt", self.uniform([d], math.log(self.spec.dt_min), math.log(self.spec.dt_max)))
        self.add(f"{p}.D", self.const([d], 1.0))
        self.add(f"{p}.W_out", self.normal([d, d], 1.0 / math.sqrt(d)))
        self.add(f"{p}.b_out", self.const([d], 0.0))

    def discretised(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """exp(ΛΔ) [R, d, N], the input map (exp(ΛΔ) − 1)/Λ · W folded into W, and W: complex."""
        p = f"blocks.{layer}.ssm"
        lam = torch.complex(-self.param(f"{p}.Lambda_re_log").exp(), self.param(f"{p}.Lambda_im"))  # [R, N]
        dt_lam = lam[:, None, :] * self.param(f"{p}.log_dt").exp()[:, :, None]  # [R, d, N]
        step = dt_lam.exp()
        w = torch.complex(self.param(f"{p}.W_re"), self.param(f"{p}.W_im"))
        return step, (step - 1) / lam[:, None, :], w

    def kernel(self, layer: int, length: int) -> torch.Tensor:
        """K̄ [R, d, length]: the SSM's impulse response."""
        step, b_bar, w = self.discretised(layer)
        powers = torch.exp(step.log()[..., None] * torch.arange(length, dtype=step.real.dtype))  # [R, d, N, L]
        return torch.einsum("rdn,rdnl->rdl", w * b_bar, powers).real

    def finish(self, layer: int, u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """D skip, GELU, output map; u and y are [R, B, n, d]."""
        p = f"blocks.{layer}.ssm"
        y = F.gelu(y + u * bias(self.param(f"{p}.D"), u))
        return per_run(y, self.param(f"{p}.W_out")) + bias(self.param(f"{p}.b_out"), y)

    def mix(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[2]
        k = self.kernel(layer, n)  # [R, d, n]
        u = x.transpose(2, 3)  # [R, B, d, n]
        size = 2 * n
        y = torch.fft.irfft(torch.fft.rfft(u, size) * torch.fft.rfft(k, size)[:, None], size)[..., :n]
        return self.finish(layer, x, y.transpose(2, 3))

    def recurrent_mix(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The same layer as the recurrence x_l = exp(ΛΔ) x_{l-1} + B̄ u_l, y_l = Re(W x_l): slow, for tests."""
        step, b_bar, w = self.discretised(layer)
        state = torch.zeros(*x.shape[:2], *step.shape[1:], dtype=step.dtype)
        outs = []
        for t in range(x.shape[2]):
            state = step[:, None] * state + b_bar[:, None] * x[:, :, t, :, None]
            outs.append((w[:, None] * state).sum(-1).real)
        return self.finish(layer, x, torch.stack(outs, dim=2))


DSSSpec.family = DSS
