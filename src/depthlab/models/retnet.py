"""RetNet (Sun et al., 2023; seed 003 §6: "its variant RetNet [56]"), for a group of runs.

Multi-scale retention, head h with decay γ_h = 1 − 2^(−5−h) (RetNet's choice), queries and keys rotated by
their position (θ_j = 10000^(−2j/d_head), the xPos/rotary rotation without its scaling), so the product
q_n·k_m depends on n − m:

    S_n = γ S_{n-1} + k_nᵀ v_n,   o_n = q_n S_n / √d_head                                   (recurrent)
    O = ((Q Kᵀ / √d_head) ⊙ D) V,   D_nm = γ^(n−m) for n ≥ m, else 0                        (parallel)

then a normalisation per head (RMS, no gain: RetNet's GroupNorm), the swish gate and W_O:
``out = (swish(x W_G) ⊙ norm(O)) W_O``, in a pre-LayerNorm block with a GELU MLP. RetNet's extra rescalings of D
and of the scores only change each head's scale, which the per-head normalisation removes (up to its ε), so
they are left out and the two forms agree exactly. Training uses the parallel form up to 64 positions and RetNet's
chunkwise recurrent form beyond (``scans.chunkwise_attention``); ``recurrent`` is the recurrence step by step, and
the tests check the two agree. Written here (the paper used "our own custom implementation" too): ``torchscale``'s
RetNet is a whole language-model stack without a run axis.
State size: layers · heads · d_head². Hooks: ``ret.hook_q/k/v`` (before the rotation), ``ret.hook_z`` (the gated,
normalised heads before W_O) and ``hook_state``: S_n per head, [R, B, n, heads, d_head, d_head].
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F

from .base import register
from .components import Init, fixed_table
from .headed import HeadedMixer, HeadedSpec
from .recurrent import ResidualBlock, SequenceStack
from .scans import CHUNK, chunkwise_attention
from .transformer import rotary_tables, rotate


@register
class RetNetSpec(HeadedSpec):
    """Parameters of RetNet."""

    name: Literal["retnet"] = "retnet"
    even_head_size: ClassVar[bool] = True

    family: ClassVar[type]

    @property
    def state_size(self) -> int:
        return self.layers * self.heads * self.d_head**2


class Retention(HeadedMixer):
    """Multi-scale retention with a swish gate (``W_Q``, ``W_K``, ``W_V``, ``W_G``, ``W_O``; no biases)."""

    def __init__(self, spec: RetNetSpec, n: int, init: Init) -> None:
        super().__init__(spec, init, with_bias=False)
        self.W_G = init.normal([spec.width, spec.width])
        self.add_output_map(init)
        cos, sin = rotary_tables(n, spec.d_head)
        self.register_buffer("rot_cos", cos, persistent=False)
        self.register_buffer("rot_sin", sin, persistent=False)
        self.register_buffer("gamma", fixed_table([spec.heads], lambda: 1.0 - 2.0 ** (-5.0 - torch.arange(
            spec.heads, dtype=torch.float64)), torch.float64),
                             persistent=False)
        gap = fixed_table([n, n], lambda: torch.arange(n)[:, None] - torch.arange(n)[None], torch.int64)  # n − m
        self.register_buffer("gap", gap, persistent=False)

    def decay(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        """D [heads, n, n]: γ^(n−m) below the diagonal, 0 above (computed in float64)."""
        gap = self.gap[:n, :n].double()
        log_gamma = self.gamma.double().log()[:, None, None]
        return torch.where(gap >= 0, torch.exp(gap.clamp(min=0) * log_gamma), 0.0).to(dtype)

    def queries_keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rotated q / √d_head, rotated k, and v: [R, B, heads, n, d_head]."""
        q, k, v = self.qkv(x)
        n = x.shape[2]
        cos, sin = self.rot_cos[:n], self.rot_sin[:n]
        return rotate(q, cos, sin) / math.sqrt(q.shape[-1]), rotate(k, cos, sin), v

    def finish(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Per-head RMS normalisation, swish gate, W_O; z is [R, B, heads, n, d_head]."""
        z = z * torch.rsqrt(z.pow(2).mean(-1, keepdim=True) + 1e-6)
        gate = F.silu(torch.einsum("rbnd,rde->rbne", x, self.W_G))
        heads, dh = self.spec.heads, self.spec.d_head
        return self.output(gate.view(*gate.shape[:3], heads, dh).permute(0, 1, 3, 2, 4) * z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.queries_keys_values(x)
        if x.shape[2] > CHUNK:  # chunkwise: decayed C × C scores within chunks, γ^C-decayed states across them
            return self.finish(x, chunkwise_attention(q, k, v, self.gamma)[0])
        scores = (q @ k.transpose(-1, -2)) * self.decay(x.shape[2], q.dtype)
        return self.finish(x, scores @ v)

    def scan(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[list[torch.Tensor], list]:
        gamma = self.gamma.double().to(q.dtype)[None, None, :, None, None]
        state = q.new_zeros(*q.shape[:3], q.shape[-1], v.shape[-1])
        states, outs = [], []
        for t in range(q.shape[3]):
            state = gamma * state + k[..., t, :, None] * v[..., t, None, :]
            states.append(state)
            outs.append((q[..., t, :, None] * state).sum(-2))
        return states, outs


class RetNet(SequenceStack):
    """R runs of a RetNet."""

    attention = "retention"

    def build_layers(self, init: Init) -> None:
        spec, n = self.spec, self.shapes.seq_len
        self.blocks = torch.nn.ModuleList(ResidualBlock("ret", Retention(spec, n, init), spec, init, mlp=spec.mlp)
                                          for _ in range(spec.layers))


RetNetSpec.family = RetNet
