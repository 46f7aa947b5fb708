"""RetNet (Sun et al., 2023; seed 003 §6: "its variant RetNet [56]"), for a group of runs.

Multi-scale retention, head h with decay γ_h = 1 − 2^(−5−h) (RetNet's choice), queries and keys rotated by
their position (θ_j = 10000^(−2j/d_head), the xPos/rotary rotation without its scaling), so the product
q_n·k_m depends on n − m:

    S_n = γ S_{n-1} + k_nᵀ v_n,   o_n = q_n S_n / √d_head                                   (recurrent)
    O = ((Q Kᵀ / √d_head) ⊙ D) V,   D_nm = γ^(n−m) for n ≥ m, else 0                        (parallel)

then a normalisation per head (RMS, no gain: RetNet's GroupNorm), the swish gate and W_O:
``out = (swish(x W_G) ⊙ norm(O)) W_O``, in a pre-LayerNorm block with a GELU MLP. RetNet's extra rescalings of D
and of the scores only change each head's scale, which the per-head normalisation removes (up to its ε), so
they are left out and the two forms agree exactly. Training uses the parallel form; ``recurrent_mix`` is the
recurrence step by step, and the tests check the two agree. Written here (the paper used "our own custom
implementation" too): ``torchscale``'s RetNet is a whole language-model stack without a run axis.
State size: layers · heads · d_head².
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from .base import TaskShapes, register
from .recurrent import RecurrentSpec, SequenceStack


@register
class RetNetSpec(RecurrentSpec):
    """Parameters of RetNet."""

    name: Literal["retnet"] = "retnet"
    heads: int = Field(4, ge=1)
    mlp: bool = True

    family: ClassVar[type]

    @model_validator(mode="after")
    def _sizes(self) -> RetNetSpec:
        if self.width % self.heads or (self.width // self.heads) % 2:
            raise ValueError(f"width ({self.width}) / heads ({self.heads}) must be an even whole number")
        return self

    @property
    def d_head(self) -> int:
        return self.width // self.heads

    @property
    def state_size(self) -> int:
        return self.layers * self.heads * self.d_head**2


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class RetNet(SequenceStack):
    """R runs of a RetNet."""

    def __init__(self, spec: RetNetSpec, shapes: TaskShapes, n_runs: int, generators: list[torch.Generator]) -> None:
        super().__init__(spec, shapes, n_runs, generators, mlp=spec.mlp)
        n, dh = shapes.seq_len, spec.d_head
        angles = torch.arange(n)[:, None] * (10000.0 ** (-torch.arange(0, dh, 2) / dh))[None]
        self.register_buffer("rot_cos", angles.cos(), persistent=False)
        self.register_buffer("rot_sin", angles.sin(), persistent=False)
        self.register_buffer("gamma", 1.0 - 2.0 ** (-5.0 - torch.arange(spec.heads, dtype=torch.float64)),
                             persistent=False)
        self.register_buffer("gap", torch.arange(n)[:, None] - torch.arange(n)[None], persistent=False)  # n − m

    def decay(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        """D [heads, n, n]: γ^(n−m) below the diagonal, 0 above (computed in float64)."""
        gap = self.gap[:n, :n].double()
        log_gamma = self.gamma.double().log()[:, None, None]
        return torch.where(gap >= 0, torch.exp(gap.clamp(min=0) * log_gamma), 0.0).to(dtype)

    def _init_mixer(self, layer: int) -> None:
        d, h, dh = self.spec.width, self.spec.heads, self.spec.d_head
        p = f"blocks.{layer}.ret"
        for s in ("Q", "K", "V"):
            self.add(f"{p}.W_{s}", self.normal([h, d, dh]))
        self.add(f"{p}.W_G", self.normal([d, d]))
        self.add(f"{p}.W_O", self.normal([h, dh, d], self.spec.std / math.sqrt(2 * self.spec.layers)))

    def qkv(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        p = f"blocks.{layer}.ret"
        n = x.shape[2]
        q, k, v = (torch.einsum("rbnd,rhde->rbhne", x, self.param(f"{p}.W_{s}")) for s in ("Q", "K", "V"))
        cos, sin = self.rot_cos[:n], self.rot_sin[:n]
        return rotate(q, cos, sin) / math.sqrt(q.shape[-1]), rotate(k, cos, sin), v

    def out(self, layer: int, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """Per-head RMS normalisation, swish gate, W_O; o is [R, B, heads, n, d_head]."""
        p = f"blocks.{layer}.ret"
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-6)
        gate = F.silu(torch.einsum("rbnd,rde->rbne", x, self.param(f"{p}.W_G")))
        heads, dh = self.spec.heads, self.spec.d_head
        gated = gate.view(*gate.shape[:3], heads, dh).permute(0, 1, 3, 2, 4) * o
        return torch.einsum("rbhne,rhed->rbnd", gated, self.param(f"{p}.W_O"))

    def mix(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(layer, x)
        n = x.shape[2]
        scores = (q @ k.transpose(-1, -2)) * self.decay(n, q.dtype)
        return self.out(layer, x, scores @ v)

    def recurrent_mix(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The same layer as the recurrence S_n = γ S_{n-1} + k_nᵀ v_n, o_n = q_n S_n: slow, for tests."""
        q, k, v = self.qkv(layer, x)
        gamma = self.gamma.double().to(q.dtype)[None, None, :, None, None]
        state = q.new_zeros(*q.shape[:3], q.shape[-1], v.shape[-1])
        outs = []
        for t in range(x.shape[2]):
            state = gamma * state + k[..., t, :, None] * v[..., t, None, :]
            outs.append((q[..., t, :, None] * state).sum(-2))
        return self.out(layer, x, torch.stack(outs, dim=3))


RetNetSpec.family = RetNet
