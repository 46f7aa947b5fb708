"""Linear transformer (Katharopoulos et al., 2020; seed 003 §2, §6: "linear Transformers [31]"), for a group of runs.

Softmax attention is replaced by a kernel feature map φ(x) = elu(x) + 1, which makes causal attention a
recurrence over a d_head × d_head state per head:

    S_t = S_{t-1} + φ(k_t) v_tᵀ,   z_t = z_{t-1} + φ(k_t),   out_t = S_tᵀ φ(q_t) / (z_tᵀ φ(q_t))      (recurrent)
    out = (mask ⊙ φ(Q) φ(K)ᵀ) V / rowsum(mask ⊙ φ(Q) φ(K)ᵀ)                                         (parallel)

Training uses the parallel form (quadratic in n, one batched product per run and head, fast on a CPU at the
lengths of seed 003); ``recurrent_mix`` is the recurrence transcribed step by step, and the tests check that
the two agree. Blocks are GPT-2 style (pre-LayerNorm, the attention above with W_Q, W_K, W_V, W_O, then a GELU
MLP), with learned absolute positions: without them the causal prefix sum is a bag of tokens and no
order-dependent task (index lookup, equality) could be represented. The paper's version is its "own custom
implementation"; this one is written here because no maintained library runs it without CUDA kernels (the
``flash-linear-attention`` kernels need Triton and a GPU). State size: layers · heads · d_head · (d_head + 1).
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from .base import TaskShapes, register
from .recurrent import RecurrentSpec, SequenceStack

EPS = 1e-6


@register
class LinearTransformerSpec(RecurrentSpec):
    """Parameters of the linear transformer."""

    name: Literal["linear_transformer"] = "linear_transformer"
    heads: int = Field(4, ge=1)
    mlp: bool = True
    positional: Literal["learned", "none"] = "learned"

    family: ClassVar[type]

    @model_validator(mode="after")
    def _sizes(self) -> LinearTransformerSpec:
        if self.width % self.heads:
            raise ValueError(f"width ({self.width}) must be divisible by heads ({self.heads})")
        return self

    @property
    def d_head(self) -> int:
        return self.width // self.heads

    @property
    def state_size(self) -> int:
        return self.layers * self.heads * self.d_head * (self.d_head + 1)


def feature_map(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1.0


class LinearTransformer(SequenceStack):
    """R runs of a causal linear-attention transformer."""

    def __init__(self, spec: LinearTransformerSpec, shapes: TaskShapes, n_runs: int,
                 generators: list[torch.Generator]) -> None:
        self.learned_positions = spec.positional == "learned"
        super().__init__(spec, shapes, n_runs, generators, mlp=spec.mlp)
        self.register_buffer("causal", torch.ones(shapes.seq_len, shapes.seq_len).tril(), persistent=False)

    def _init_mixer(self, layer: int) -> None:
        d, h, dh = self.spec.width, self.spec.heads, self.spec.d_head
        p = f"blocks.{layer}.attn"
        for s in ("Q", "K", "V"):
            self.add(f"{p}.W_{s}", self.normal([h, d, dh]))
            self.add(f"{p}.b_{s}", self.const([h, dh], 0.0))
        self.add(f"{p}.W_O", self.normal([h, dh, d], self.spec.std / math.sqrt(2 * self.spec.layers)))
        self.add(f"{p}.b_O", self.const([d], 0.0))

    def qkv(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """φ(q), φ(k), v: [R, B, heads, n, d_head]."""
        p = f"blocks.{layer}.attn"
        q, k, v = (torch.einsum("rbnd,rhde->rbhne", x, self.param(f"{p}.W_{s}"))
                   + self.param(f"{p}.b_{s}")[:, None, :, None] for s in ("Q", "K", "V"))
        return feature_map(q), feature_map(k), v

    def out(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        p = f"blocks.{layer}.attn"
        return torch.einsum("rbhne,rhed->rbnd", z, self.param(f"{p}.W_O")) + self.param(f"{p}.b_O")[:, None, None]

    def mix(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(layer, x)
        n = x.shape[2]
        scores = (q @ k.transpose(-1, -2)) * self.causal[:n, :n]
        z = (scores @ v) / (scores.sum(-1, keepdim=True) + EPS)
        return self.out(layer, z)

    def recurrent_mix(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The same layer as a recurrence over positions (S_t, z_t above): slow, for tests."""
        q, k, v = self.qkv(layer, x)
        state = q.new_zeros(*q.shape[:3], q.shape[-1], v.shape[-1])
        norm = q.new_zeros(*q.shape[:3], q.shape[-1])
        outs = []
        for t in range(x.shape[2]):
            state = state + k[..., t, :, None] * v[..., t, None, :]
            norm = norm + k[..., t, :]
            num = (q[..., t, :, None] * state).sum(-2)
            outs.append(num / ((q[..., t, :] * norm).sum(-1, keepdim=True) + EPS))
        return self.out(layer, torch.stack(outs, dim=3))


LinearTransformerSpec.family = LinearTransformer
