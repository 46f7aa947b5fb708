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
MLP. Training uses the FFT convolution (the parallel form, O(n log n), on every device: a chunked scan would
materialise the [R, B, n, width, N] complex states that the convolution never forms); ``recurrent`` runs the
recurrence step by step, ``chunked_states`` as the chunked parallel scan (``hook_state`` on an accelerator), and
the tests check that all three agree. Written here because the authors' implementation (``state-spaces``) is a research
repository, not an installable library, and has no run axis. State size: layers · width · N complex numbers
(2 reals each); ``hook_state`` gives x_l, complex, [R, B, n, width, N].
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
from .scans import chunked_scan, chunks_pay

# A training step's memory, in numbers (see DSSSpec.training_floats; measured at n = 200, width 16, N = 4 and 64,
# 1 to 3 layers: 9.6, 2.05, 3.25 and 4.8, rounded up)
KEPT_PER_EXAMPLE, KEPT_PER_RUN = 10.0, 2.1
TRANSIENT_PER_EXAMPLE, TRANSIENT_PER_RUN = 3.5, 5.0


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

    def training_floats(self, seq_len: int, batch: int, accelerated: bool) -> int:
        """Numbers one run's blocks hold at the peak of a training step (forward and backward; the FFT convolution on
        every device, so ``accelerated`` changes nothing), measured on the CPU with ``training.tensor_meter``: per
        layer, kept for the backward pass, KEPT_PER_EXAMPLE numbers per position and channel of each example (the
        FFTs of the input and the product, the block's other activations) and KEPT_PER_RUN per position, channel
        and state of the run's kernel K̄ (the powers exp(ΛΔ l)); and while one layer is computed, TRANSIENT_* more."""
        per_example, per_run = batch * seq_len * self.width, seq_len * self.width * self.d_state
        return math.ceil(self.layers * (KEPT_PER_EXAMPLE * per_example + KEPT_PER_RUN * per_run)
                         + TRANSIENT_PER_EXAMPLE * per_example + TRANSIENT_PER_RUN * per_run)


class DiagonalSSM(Mixer):
    """One DSS layer: the diagonal SSM per channel, D skip, GELU and the output map."""

    def __init__(self, spec: DSSSpec, init: Init) -> None:
        super().__init__()
        d, n = spec.width, spec.d_state
        self.Lambda_re_log = init.const([n], math.log(0.5))
        self.Lambda_im = torch.nn.Parameter(fixed_table(
            [init.runs, n], lambda: (math.pi * torch.arange(n, dtype=torch.float32)).expand(init.runs, n).clone()))
        self.W_re = init.normal([d, n], math.sqrt(0.5))
        self.W_im = init.normal([d, n], math.sqrt(0.5))
        self.log_dt = init.uniform([d], math.log(spec.dt_min), math.log(spec.dt_max))
        self.D = init.const([d], 1.0)
        self.W_out = init.normal([d, d], 1.0 / math.sqrt(d))
        self.b_out = init.const([d], 0.0)

    def discretised(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """exp(ΛΔ) [R, d, N], the input map (exp(ΛΔ) − 1)/Λ, and W: complex."""
        lam = torch.complex(-self.Lambda_re_log.exp(), self.Lambda_im)  # [R, N]
        dt_lam = lam[:, None, :] * self.log_dt.exp()[:, :, None]  # [R, d, N]
        step = dt_lam.exp()
        return step, (step - 1) / lam[:, None, :], torch.complex(self.W_re, self.W_im)

    def kernel(self, length: int) -> torch.Tensor:
        """K̄ [R, d, length]: the SSM's impulse response."""
        step, b_bar, w = self.discretised()
        exponents = torch.arange(length, dtype=step.real.dtype, device=step.device)
        powers = torch.exp(step.log()[..., None] * exponents)  # [R, d, N, L]
        return torch.einsum("rdn,rdnl->rdl", w * b_bar, powers).real

    def finish(self, u: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """D skip, GELU, output map; u and y are [R, B, n, d]."""
        y = F.gelu(y + u * bias(self.D, u))
        return per_run(y, self.W_out) + bias(self.b_out, y)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[2]
        k = self.kernel(n)  # [R, d, n]
        u = x.transpose(2, 3)  # [R, B, d, n]
        size = 2 * n
        y = torch.fft.irfft(torch.fft.rfft(u, size) * torch.fft.rfft(k, size)[:, None], size)[..., :n]
        return self.finish(x, y.transpose(2, 3))

    def scan(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """x_l = exp(ΛΔ) x_{l-1} + B̄ u_l at every position, and y_l = Re(W x_l): (states, y [R, B, n, d])."""
        step, b_bar, w = self.discretised()
        state = torch.zeros(*x.shape[:2], *step.shape[1:], dtype=step.dtype, device=step.device)
        states, outs = [], []
        for t in range(x.shape[2]):
            state = step[:, None] * state + b_bar[:, None] * x[:, :, t, :, None]
            states.append(state)
            outs.append((w[:, None] * state).sum(-1).real)
        return states, torch.stack(outs, dim=2)

    def recurrent(self, x: torch.Tensor) -> torch.Tensor:
        return self.finish(x, self.scan(x)[1])

    def chunked_states(self, x: torch.Tensor) -> torch.Tensor:
        """The states x_l [R, B, n, d, N] by the chunked parallel scan (``scans.chunked_scan``)."""
        step, b_bar, _ = self.discretised()
        return chunked_scan(step[:, None, None], b_bar[:, None, None] * x[..., None])

    def states(self, x: torch.Tensor) -> torch.Tensor:
        return self.chunked_states(x) if chunks_pay(x) else torch.stack(self.scan(x)[0], dim=2)


class DSS(SequenceStack):
    """R runs of a stack of DSS layers."""

    def build_layers(self, init: Init) -> None:
        spec = self.spec
        self.blocks = torch.nn.ModuleList(ResidualBlock("ssm", DiagonalSSM(spec, init), spec, init, mlp=spec.mlp)
                                          for _ in range(spec.layers))


DSSSpec.family = DSS
