"""A GPT-2-style transformer (seed 002 §7.1) for a group of runs.

Seed 002 §7.1 trains "GPT-2 style" decoders: softmax attention, LayerNorm, an optional MLP, heads, width and
head size as parameters. Each block is pre-norm, as in GPT-2:

    x ← x + Σ_h softmax(q_h k_hᵀ / √d_head + mask) v_h W_O,h      (q = LN(x) W_Q + b_Q, …)
    x ← x + GELU(LN(x) W_in + b_in) W_out + b_out                  (when ``mlp``)

then a final LayerNorm and ``unembed.W_U``; the read-out is the last position. Positions: ``learned``
(``pos_embed.W_pos`` added), ``sinusoidal`` (fixed, added), ``rotary`` (rotating q and k), or ``onehot``
(concatenated one-hot positions, as in seed 001 eq. 3: the token embedding takes d_model − n coordinates).

Parameters carry a leading run axis and TransformerLens' names and shapes (``embed.W_E`` [d_vocab, d_model],
``blocks.{l}.attn.W_Q`` [heads, d_model, d_head], ``blocks.{l}.attn.W_O`` [heads, d_head, d_model],
``blocks.{l}.ln1.w``, ``blocks.{l}.mlp.W_in``, ``ln_final.w``, ``unembed.W_U`` …), so a run's state dict is
a TransformerLens state dict up to the run index.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from .base import (
    ModelOutput,
    ModelSpec,
    Override,
    RunStacked,
    TaskShapes,
    init_std_for,
    override_pattern,
    register,
)


@register
class TransformerSpec(ModelSpec):
    """Parameters of the GPT-2-style transformer."""

    name: Literal["transformer"] = "transformer"
    layers: int = Field(2, ge=1, le=64)
    heads: int = Field(1, ge=1)
    width: int = Field(64, ge=1, description="d_model")
    d_head: int | None = Field(None, ge=1, description="head size; None = width / heads")
    mlp: bool = True
    d_mlp: int | None = Field(None, ge=1, description="MLP hidden size; None = 4 × width")
    positional: Literal["learned", "sinusoidal", "rotary", "onehot"] = "learned"
    causal: bool = True
    init_std: float | None = Field(None, gt=0, description="normal init std; None = 0.8/√width (TransformerLens)")

    family: ClassVar[type]

    @model_validator(mode="after")
    def _sizes(self) -> TransformerSpec:
        if self.d_head is None and self.width % self.heads:
            raise ValueError(f"width ({self.width}) must be divisible by heads ({self.heads}), or set d_head")
        if self.positional == "rotary" and self.head_size % 2:
            raise ValueError("rotary positions need an even head size (d_head)")
        return self

    @property
    def std(self) -> float:
        return init_std_for(self.width, self.init_std)

    @property
    def head_size(self) -> int:
        return self.d_head or self.width // self.heads


def _sinusoidal(n: int, width: int) -> torch.Tensor:
    position = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(n, width)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq)[:, : width // 2]
    return table


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding on the last axis (pairs of halves, as GPT-NeoX)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _per_run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [R, …, d] @ w [R, d, e] as one matrix product per run (not one per batch element)."""
    return (x.reshape(x.shape[0], -1, x.shape[-1]) @ w).view(*x.shape[:-1], w.shape[-1])


class Transformer(RunStacked):
    """R runs of the same GPT-2-style transformer, parameters stacked on a leading run axis."""

    def __init__(self, spec: TransformerSpec, shapes: TaskShapes, n_runs: int,
                 generators: list[torch.Generator]) -> None:
        super().__init__(n_runs)
        self.spec, self.shapes = spec, shapes
        d, n, h, dh = spec.width, shapes.seq_len, spec.heads, spec.head_size
        d_mlp = spec.d_mlp or 4 * d
        d_tok = d - n if spec.positional == "onehot" else d
        if d_tok < 1:
            raise ValueError(f"model.width must exceed the sequence length ({n}) with one-hot positions")
        self.d_tok = d_tok
        self._generators = generators
        out_std = spec.std / math.sqrt(2 * spec.layers)  # GPT-2's scaling of residual projections
        self.add("embed.W_E", self._normal([shapes.vocab_size, d_tok]))
        if spec.positional == "learned":
            self.add("pos_embed.W_pos", self._normal([n, d]))
        for layer in range(spec.layers):
            p = f"blocks.{layer}"
            self.add(f"{p}.ln1.w", self._const([d], 1.0))
            self.add(f"{p}.ln1.b", self._const([d], 0.0))
            for name in ("Q", "K", "V"):
                self.add(f"{p}.attn.W_{name}", self._normal([h, d, dh]))
                self.add(f"{p}.attn.b_{name}", self._const([h, dh], 0.0))
            self.add(f"{p}.attn.W_O", self._normal([h, dh, d], out_std))
            self.add(f"{p}.attn.b_O", self._const([d], 0.0))
            if spec.mlp:
                self.add(f"{p}.ln2.w", self._const([d], 1.0))
                self.add(f"{p}.ln2.b", self._const([d], 0.0))
                self.add(f"{p}.mlp.W_in", self._normal([d, d_mlp]))
                self.add(f"{p}.mlp.b_in", self._const([d_mlp], 0.0))
                self.add(f"{p}.mlp.W_out", self._normal([d_mlp, d], out_std))
                self.add(f"{p}.mlp.b_out", self._const([d], 0.0))
        self.add("ln_final.w", self._const([d], 1.0))
        self.add("ln_final.b", self._const([d], 0.0))
        self.add("unembed.W_U", self._normal([d, shapes.n_classes]))
        self.add("unembed.b_U", self._const([shapes.n_classes], 0.0))
        del self._generators
        if spec.positional == "sinusoidal":
            self.register_buffer("sinusoidal", _sinusoidal(n, d), persistent=False)
        if spec.positional == "onehot":
            self.register_buffer("onehot", torch.eye(n), persistent=False)
        if spec.positional == "rotary":
            angles = torch.arange(n)[:, None] * (10000.0 ** (-torch.arange(0, dh, 2) / dh))[None]
            self.register_buffer("rot_cos", angles.cos(), persistent=False)
            self.register_buffer("rot_sin", angles.sin(), persistent=False)
        self.register_buffer("causal_mask", torch.ones(n, n).triu(1).bool(), persistent=False)

    def _normal(self, shape: list[int], std: float | None = None) -> torch.Tensor:
        std = self.spec.std if std is None else std
        return torch.stack([torch.randn(shape, generator=g) * std for g in self._generators])

    def _const(self, shape: list[int], value: float) -> torch.Tensor:
        return torch.full([len(self._generators), *shape], value)

    @property
    def layers(self) -> int:
        return self.spec.layers

    def _ln(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """LayerNorm with each run's own gain and bias (x is [R, …, d])."""
        shape = (-1, *([1] * (x.dim() - 2)), x.shape[-1])
        w, b = self.param(f"{name}.w").view(shape), self.param(f"{name}.b").view(shape)
        return F.layer_norm(x, x.shape[-1:]) * w + b

    def embed(self, inputs: torch.Tensor) -> torch.Tensor:
        """Residual stream at layer 0: [R, B, n, d_model] from token ids [R, B, n] or vectors [R, B, n, d_in]."""
        w_e = self.param("embed.W_E")
        if inputs.is_floating_point():
            x = _per_run(inputs.to(w_e.dtype), w_e)  # vector inputs: W_E is a projection [d_in, d_model]
        else:
            x = w_e[torch.arange(inputs.shape[0])[:, None, None], inputs]  # a gather per run
        n = inputs.shape[2]
        if self.spec.positional == "learned":
            x = x + self.param("pos_embed.W_pos")[:, None, :n]
        elif self.spec.positional == "sinusoidal":
            x = x + self.sinusoidal[:n]
        elif self.spec.positional == "onehot":
            x = torch.cat([x, self.onehot[:n, : self.shapes.seq_len].expand(*x.shape[:2], n, -1)], dim=-1)
        return x

    def forward(self, inputs: torch.Tensor, capture: bool = False, override: Override | None = None,
                read: torch.Tensor | None = None) -> ModelOutput:
        """Logits [R, B, C] at the last position, or [R, B, P, C] at the positions ``read``."""
        x = self.embed(inputs)
        patterns = []
        for layer in range(self.layers):
            p = f"blocks.{layer}"
            out, pattern = self.attend(layer, self._ln(x, f"{p}.ln1"), override)
            if capture:
                patterns.append(pattern)
            x = x + out
            if self.spec.mlp:
                hidden = F.gelu(_per_run(self._ln(x, f"{p}.ln2"), self.param(f"{p}.mlp.W_in"))
                                + self.param(f"{p}.mlp.b_in")[:, None, None])
                x = x + _per_run(hidden, self.param(f"{p}.mlp.W_out")) + self.param(f"{p}.mlp.b_out")[:, None, None]
        chosen = self._ln(x[:, :, -1] if read is None else x[:, :, read], "ln_final")
        bias = self.param("unembed.b_U").view(-1, *([1] * (chosen.dim() - 2)), self.shapes.n_classes)
        return ModelOutput(_per_run(chosen, self.param("unembed.W_U")) + bias, patterns)

    def attend(self, layer: int, x: torch.Tensor, override: Override | None):
        """Multi-head softmax attention of one layer: its output [R, B, n, d] and pattern [R, B, h, q, k]."""
        p = f"blocks.{layer}.attn"
        q, k, v = (torch.einsum("rbnd,rhde->rbhne", x, self.param(f"{p}.W_{s}"))
                   + self.param(f"{p}.b_{s}")[:, None, :, None] for s in ("Q", "K", "V"))
        n = x.shape[2]
        if self.spec.positional == "rotary":
            q, k = _rotate(q, self.rot_cos[:n], self.rot_sin[:n]), _rotate(k, self.rot_cos[:n], self.rot_sin[:n])
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if self.spec.causal:
            scores = scores.masked_fill(self.causal_mask[:n, :n], float("-inf"))
        pattern = scores.softmax(dim=-1)
        if override:
            pattern = pattern.clone()
            for (o_layer, head), kind in override.items():
                if o_layer == layer:
                    pattern[:, :, head] = override_pattern(kind, pattern[:, :, head], self.spec.causal)
        z = pattern @ v  # [R, B, h, n, d_head]
        out = torch.einsum("rbhne,rhed->rbnd", z, self.param(f"{p}.W_O")) + self.param(f"{p}.b_O")[:, None, None]
        return out, pattern


TransformerSpec.family = Transformer
