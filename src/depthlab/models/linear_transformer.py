"""Linear transformer (Katharopoulos et al., 2020; seed 003 §2, §6: "linear Transformers [31]"), for a group of runs.

Softmax attention is replaced by a kernel feature map φ(x) = elu(x) + 1, which makes causal attention a
recurrence over a d_head × d_head state per head:

    S_t = S_{t-1} + φ(k_t) v_tᵀ,   z_t = z_{t-1} + φ(k_t),   out_t = S_tᵀ φ(q_t) / (z_tᵀ φ(q_t))      (recurrent)
    out = (mask ⊙ φ(Q) φ(K)ᵀ) V / rowsum(mask ⊙ φ(Q) φ(K)ᵀ)                                         (parallel)

Training uses the parallel form up to 64 positions (quadratic in n, one batched product per run and head) and the
chunkwise form beyond (``scans.chunkwise_attention``: the quadratic form within chunks of 64, the running state
across them; at n = 400, batch 64, 4 heads of 16, one thread, the attention's forward and backward took 0.34 s
against 2.7 s); ``recurrent`` is the recurrence transcribed step by step, and the tests check that the two agree.
Blocks are GPT-2 style (pre-LayerNorm, the attention above with W_Q, W_K, W_V, W_O, then a GELU MLP), with learned
absolute positions: without them the causal prefix sum is a bag of tokens and no order-dependent task (index lookup,
equality) could be represented. The paper's version is its "own custom implementation"; this one is written here
because no maintained library runs it without CUDA kernels (the ``flash-linear-attention`` kernels need Triton and a
GPU). State size: layers · heads · d_head · (d_head + 1).
Hooks: ``attn.hook_q``/``hook_k`` before the feature map, ``hook_v``, ``hook_z`` (out above, per head), and
``hook_state``: [S_t | z_t] per head, [R, B, n, heads, d_head, d_head + 1].
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
import torch.nn.functional as F

from .base import TaskShapes, register
from .components import Init, fixed_table
from .headed import HeadedMixer, HeadedSpec
from .recurrent import ResidualBlock, SequenceStack
from .scans import CHUNK, chunkwise_attention

EPS = 1e-6


@register
class LinearTransformerSpec(HeadedSpec):
    """Parameters of the linear transformer."""

    name: Literal["linear_transformer"] = "linear_transformer"
    positional: Literal["learned", "none"] = "learned"

    family: ClassVar[type]

    @property
    def state_size(self) -> int:
        return self.layers * self.heads * self.d_head * (self.d_head + 1)


def feature_map(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1.0


class LinearAttention(HeadedMixer):
    """Causal linear attention with the φ = elu + 1 feature map."""

    def __init__(self, spec: LinearTransformerSpec, n: int, init: Init) -> None:
        super().__init__(spec, init)
        self.add_output_map(init)
        self.register_buffer("causal", fixed_table([n, n], lambda: torch.ones(n, n).tril()), persistent=False)

    def queries_keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """φ(q), φ(k), v: [R, B, heads, n, d_head]."""
        q, k, v = self.qkv(x)
        return feature_map(q), feature_map(k), v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.queries_keys_values(x)
        n = x.shape[2]
        if n > CHUNK:  # chunkwise: C × C scores within chunks, a running Σ φ(k) vᵀ across them
            num, norm = chunkwise_attention(q, k, v)
            return self.finish(x, num / (norm[..., None] + EPS))
        scores = (q @ k.transpose(-1, -2)) * self.causal[:n, :n]
        return self.finish(x, (scores @ v) / (scores.sum(-1, keepdim=True) + EPS))

    def scan(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[list[torch.Tensor], list]:
        state = q.new_zeros(*q.shape[:3], q.shape[-1], v.shape[-1])
        norm = q.new_zeros(*q.shape[:3], q.shape[-1])
        states, outs = [], []
        for t in range(q.shape[3]):
            state = state + k[..., t, :, None] * v[..., t, None, :]
            norm = norm + k[..., t, :]
            num = (q[..., t, :, None] * state).sum(-2)
            outs.append(num / ((q[..., t, :] * norm).sum(-1, keepdim=True) + EPS))
            states.append(torch.cat([state, norm[..., None]], dim=-1))
        return states, outs


class LinearTransformer(SequenceStack):
    """R runs of a causal linear-attention transformer."""

    attention = "linear"

    def __init__(self, spec: LinearTransformerSpec, shapes: TaskShapes, generators: list[torch.Generator]) -> None:
        super().__init__(spec, shapes, generators, learned_positions=spec.positional == "learned")

    def build_layers(self, init: Init) -> None:
        spec, n = self.spec, self.shapes.seq_len
        self.blocks = torch.nn.ModuleList(
            ResidualBlock("attn", LinearAttention(spec, n, init), spec, init, mlp=spec.mlp)
            for _ in range(spec.layers))


LinearTransformerSpec.family = LinearTransformer
