"""The attention-only transformer of seed 001 §3.1, for a group of runs.

    "H^(l+1) = H^(l) + (1/m) Σ_i V_i σ((Q_i)^T K_i)  …  σ(z) = max{0, z}"   (seed 001, eq. 2)
    "H^(0) = [x_0 … x_{n-1}; p_0 … p_{n-1}; 0 … 0]"  one-hot tokens, one-hot positions concatenated,
    zero padding to d'  (eq. 3); "o = W_O h^(L)_{n-1}", the classifier reads the last column.

Layout of the d' = ``width`` coordinates: token one-hot in [0, d), position one-hot in [d, d + n), zeros after.

Weights follow TransformerLens' row-vector convention (a position's representation is a row x):
``blocks.{l}.attn.W_QK`` [heads, d', d'] with score(query q, key k) = x_q W_QK x_kᵀ, so the paper's
W_QK (score = x_kᵀ W x_q, eq. 2 with columns) is its transpose; ``blocks.{l}.attn.W_V`` [heads, d', d'] with
value = x W_V (the paper's W_V transposed); ``unembed.W_U`` [d', C] with logits = h_{n-1} W_U (W_O transposed).
There is no causal mask (the paper's attention is bidirectional) and no MLP, LayerNorm or bias.

Initialisations (``init``):
- ``paper`` (§9.1): W_QK uniform in [0, ``qk_scale``) (the paper: [0, 1)); W_V "initialised with a value of 1",
  read as the identity (a matrix of ones would copy every coordinate into every other); W_U uniform in [0, 1).
  For reasoning and generalisation tasks the first layer is then set to the seed's construction
  (§13.2, §14.2, §15) by ``depthlab.constructions.seed001.paper_first_layer``, which the trainer applies.
- ``paper-first``: the paper's constructed first layer (on W_QK uniform in [0, qk_scale)), every other weight
  random as below. With §9.1's W_V = I and W_U uniform [0, 1) after the constructed layer, 3-layer models stay
  at chance on IC-TM (measured); with random weights after it they learn it.
- ``random``: W_QK, W_V and W_U normal with standard deviation 1/√d'.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field, field_validator, model_validator

from .attention_kernels import LastQueryAttention, attention_pattern
from .base import (
    ModelOutput,
    ModelSpec,
    Override,
    RunStacked,
    TaskShapes,
    override_pattern,
    register,
)


@register
class AttentionOnlySpec(ModelSpec):
    """Parameters of the seed 001 attention-only transformer."""

    name: Literal["attention_only"] = "attention_only"
    layers: int = Field(2, ge=1, le=64, description="number of attention layers L")
    heads: int | list[int] = Field(1, description="heads per layer: one number, or the paper's list [h1, h2, …]")
    width: int | None = Field(None, ge=1, description="hidden size d'; None = d + n (+ what the init needs)")
    attention: Literal["relu", "softmax"] = "relu"
    init: Literal["paper", "paper-first", "random"] = "paper"
    qk_scale: float = Field(1.0, gt=0, description="paper init: W_QK uniform in [0, qk_scale)")

    family: ClassVar[type]

    @field_validator("heads")
    @classmethod
    def _heads_positive(cls, v: int | list[int]) -> int | list[int]:
        values = v if isinstance(v, list) else [v]
        if not values or any(h < 1 for h in values):
            raise ValueError("heads must be a positive number or a non-empty list of positive numbers")
        return v

    @model_validator(mode="after")
    def _heads_match_layers(self) -> AttentionOnlySpec:
        if isinstance(self.heads, list) and len(self.heads) != self.layers:
            raise ValueError(f"heads lists one number per layer: got {len(self.heads)} for {self.layers} layers")
        return self

    @property
    def heads_per_layer(self) -> list[int]:
        return list(self.heads) if isinstance(self.heads, list) else [self.heads] * self.layers


class AttentionOnly(RunStacked):
    """R runs of the same attention-only transformer, parameters stacked on a leading run axis."""

    def __init__(self, spec: AttentionOnlySpec, shapes: TaskShapes, n_runs: int,
                 generators: list[torch.Generator], extra_width: int = 0) -> None:
        super().__init__(n_runs)
        self.spec = spec
        self.d, self.n, self.n_classes = shapes.vocab_size, shapes.seq_len, shapes.n_classes
        minimal = self.d + self.n + extra_width
        self.width = spec.width if spec.width is not None else minimal
        if self.width < self.d + self.n:
            raise ValueError(f"model.width must be at least d + n = {self.d + self.n} for this task")
        width = self.width
        for layer, heads in enumerate(spec.heads_per_layer):
            # paper-first: the constructed layer 0 starts from the paper's small uniform W_QK, the rest random
            qk_kind = "qk_paper" if spec.init == "paper-first" and layer == 0 else "qk"
            self.add(f"blocks.{layer}.attn.W_QK", self._init([heads, width, width], generators, qk_kind))
            self.add(f"blocks.{layer}.attn.W_V", self._init([heads, width, width], generators, "v"))
        self.add("unembed.W_U", self._init([width, self.n_classes], generators, "u"))
        positions = torch.zeros(self.n, width)
        positions[torch.arange(self.n), self.d + torch.arange(self.n)] = 1.0
        self.register_buffer("positions", positions, persistent=False)
        # a lookup in the identity is the one-hot encoding, 4x faster than ``one_hot`` (a scatter) on a CPU …
        self.register_buffer("one_hot", torch.eye(self.d, width), persistent=False)
        # … and a lookup in a table of every (token, position) row is H^(0) in one pass over memory
        table = (self.one_hot[:, None] + positions).reshape(-1, width) if self.d * self.n * width <= 2**22 else None
        self.register_buffer("token_positions", table, persistent=False)

    def _init(self, shape: list[int], generators: list[torch.Generator], kind: str) -> torch.Tensor:
        out = torch.empty([len(generators), *shape])
        width = self.width if hasattr(self, "width") else shape[-1]
        for r, gen in enumerate(generators):
            if self.spec.init != "paper" and kind != "qk_paper":
                out[r] = torch.randn(shape, generator=gen) / width**0.5
            elif kind in ("qk", "qk_paper"):
                out[r] = torch.rand(shape, generator=gen) * self.spec.qk_scale
            elif kind == "v":
                out[r] = torch.eye(shape[-1]).expand(shape)
            else:
                out[r] = torch.rand(shape, generator=gen)
        return out

    @property
    def layers(self) -> int:
        return self.spec.layers

    def embed(self, inputs: torch.Tensor) -> torch.Tensor:
        """H^(0) as rows: [R, B, n, d'] from token ids [R, B, n] (eq. 3), or from vectors [R, B, n, d]
        (seed 002 §6: "positional features concatenated to each vector")."""
        if inputs.is_floating_point():
            pad = self.width - inputs.shape[-1]
            return torch.nn.functional.pad(inputs.to(self.positions.dtype), (0, pad)) + self.positions
        if self.token_positions is not None:
            return torch.nn.functional.embedding(inputs * self.n + torch.arange(self.n), self.token_positions)
        return torch.nn.functional.embedding(inputs, self.one_hot) + self.positions

    def forward(self, inputs: torch.Tensor, capture: bool = False, override: Override | None = None,
                read: torch.Tensor | None = None) -> ModelOutput:
        """Logits [R, B, C] at the last position, or [R, B, P, C] at the positions ``read``."""
        h = self.embed(inputs)
        patterns = []
        for layer in range(self.layers):
            # The classifier reads only the last position, so the last layer computes only that query (not when
            # patterns are overridden: those are written for every query).
            last_only = layer == self.layers - 1 and not capture and read is None and not override
            if last_only:  # the classifier's column only, with a hand-written backward (``attention_kernels``)
                h = self.last_query(layer, h).unsqueeze(2)
                continue
            h, pattern = self.attend(layer, h, override)
            if capture:
                patterns.append(pattern)
        if read is None:
            return ModelOutput(h[:, :, -1] @ self.param("unembed.W_U"), patterns)
        chosen = h[:, :, read]
        logits = (chosen.reshape(chosen.shape[0], -1, self.width) @ self.param("unembed.W_U")).view(
            *chosen.shape[:-1], -1)
        return ModelOutput(logits, patterns)

    def weights(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """W_QK and W_V of one layer, the 1/m head average on W_V (the small tensor, not the activations)."""
        w_v = self.param(f"blocks.{layer}.attn.W_V")
        return self.param(f"blocks.{layer}.attn.W_QK"), w_v / w_v.shape[1]

    def last_query(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """The layer's output at the last position only: [R, B, d']."""
        return LastQueryAttention.apply(h, *self.weights(layer), self.spec.attention == "softmax")

    def attend(self, layer: int, h: torch.Tensor, override: Override | None):
        """H^(l+1) = H + (1/m) Σ_i σ(scores_i) (H W_V,i) for every query, and the pattern."""
        w_qk, w_v = self.weights(layer)
        keys = h.unsqueeze(2).transpose(-1, -2)  # [R, B, 1, d', n]
        scores = torch.einsum("rbqd,rhde->rbhqe", h, w_qk) @ keys
        pattern = attention_pattern(scores, self.spec.attention == "softmax")
        if override:
            pattern = pattern.clone()
            for (o_layer, head), kind in override.items():
                if o_layer == layer:
                    pattern[:, :, head] = override_pattern(kind, pattern[:, :, head])
        mixed = pattern @ h.unsqueeze(2)  # [R, B, heads, q, d']: Σ_k pattern[q, k] x_k, before W_V
        runs, batch, heads, n, width = mixed.shape
        # Σ_i mixed_i W_V,i as one product over (head, coordinate), added to H in the same pass over memory …
        mixed, w_v = mixed.transpose(2, 3).reshape(runs, batch * n, -1), w_v.reshape(runs, heads * width, width)
        if torch.is_autocast_enabled("cpu"):  # … except in bf16, where the residual stream stays in fp32
            return h + (mixed @ w_v).view(h.shape), pattern
        return torch.baddbmm(h.reshape(runs, batch * n, width), mixed, w_v).view(h.shape), pattern


AttentionOnlySpec.family = AttentionOnly
