"""What the linear transformer and RetNet share: multi-head spec fields and the headed mixer.

Both replace softmax attention by a recurrence over a d_head × d_head state per head (seed 003 §6: "linear
Transformers [31] and its variant RetNet [56]"): per-head projections q, k, v of the normalised stream, a
parallel form that is a masked product (Q Kᵀ ⊙ M) V, a recurrence S_t = g(S_{t-1}) + k_tᵀ v_t, and an
output map W_O. The families differ in the mask, the normalisation and what surrounds the heads.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field, model_validator

from .components import HeadProjections, Init, heads_last, residual_out_std
from .recurrent import Mixer, RecurrentSpec


class HeadedSpec(RecurrentSpec):
    """Heads (width divisible by them) and the optional GELU MLP of each block."""

    heads: int = Field(4, ge=1)
    mlp: bool = True
    even_head_size: ClassVar[bool] = False  # RetNet rotates pairs of coordinates

    @model_validator(mode="after")
    def _sizes(self) -> HeadedSpec:
        if self.even_head_size and (self.width % self.heads or (self.width // self.heads) % 2):
            raise ValueError(f"width ({self.width}) / heads ({self.heads}) must be an even whole number")
        if self.width % self.heads:
            raise ValueError(f"width ({self.width}) must be divisible by heads ({self.heads})")
        return self

    @property
    def d_head(self) -> int:
        return self.width // self.heads


class HeadedMixer(HeadProjections, Mixer):
    """Per-head projections (``W_Q``, ``W_K``, ``W_V`` [R, heads, d, d_head]) and ``W_O``, for a recurrent block.

    Subclasses give ``queries_keys_values(x)`` (what the recurrence reads, after feature maps or rotations),
    the parallel ``forward``, and ``scan(q, k, v)``: the states S_t and outputs of the recurrence, step by step.
    """

    def __init__(self, spec: HeadedSpec, init: Init, with_bias: bool = True) -> None:
        super().__init__(spec.width, spec.heads, spec.d_head, init, with_bias)
        self.spec = spec

    def add_output_map(self, init: Init) -> None:
        s = self.spec
        self.add_output(s.width, s.heads, s.d_head, init, residual_out_std(s.std, s.layers))

    def queries_keys_values(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def scan(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[list[torch.Tensor], list]:
        """The recurrence over positions: (states after each position, per-position outputs [R, B, heads, e])."""
        raise NotImplementedError

    def finish(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The heads' outputs z [R, B, heads, n, d_head] to the layer's output [R, B, n, d]."""
        return self.output(z)

    def recurrent(self, x: torch.Tensor) -> torch.Tensor:
        _, outs = self.scan(*self.queries_keys_values(x))
        return self.finish(x, torch.stack(outs, dim=3))

    def states(self, x: torch.Tensor) -> torch.Tensor:
        states, _ = self.scan(*self.queries_keys_values(x))
        return heads_last(torch.stack(states, dim=3))  # [R, B, n, heads, …]
