"""What the recurrent families of seed 003 share: embedding, residual blocks, read-out, state size.

Seed 003 §2 calls "recurrent models" every architecture whose output at position t depends on the prefix only
through a fixed-size hidden state h_t (LSTMs, state-space models, linear transformers); its lower bounds are
in terms of that state's size m·p bits. Every family here therefore exposes ``state_size`` (on its spec):
the number of real numbers it carries from one position to the next, summed over layers (a complex number
counts as two). The transformers' "state" is their key-value cache, 2·layers·width per position, so it grows
with the length: ``kv_cache_size`` gives it for tables that put both side by side.

``SequenceStack`` is the shared skeleton for a group of R runs (parameters with a leading run axis, as
``models.base.RunStacked``):

    x ← embed(inputs) (+ learned positions, where the family asks)
    for each layer:  x ← x + mixer(norm(x));  x ← x + MLP(norm(x))   (the MLP where the family has one)
    logits ← norm(x at the read-out positions) W_U + b_U

Families implement ``_init_mixer(layer)`` and ``mix(layer, x)`` ([R, B, n, d] → [R, B, n, d]). Nothing is
masked: padding tokens (index lookup, equality) are ordinary tokens that the model reads and learns to ignore.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field

from .base import ModelOutput, ModelSpec, RunStacked, TaskShapes, init_std_for


def per_run(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [R, …, d] @ w [R, d, e] as one matrix product per run."""
    return (x.reshape(x.shape[0], -1, x.shape[-1]) @ w).view(*x.shape[:-1], w.shape[-1])


def bias(b: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A per-run bias [R, e] shaped to broadcast against ``like`` [R, …, e]."""
    return b.view(b.shape[0], *([1] * (like.dim() - 2)), b.shape[-1])


def kv_cache_size(layers: int, width: int, length: int) -> int:
    """Numbers a causal transformer carries at position ``length``: keys and values of every layer."""
    return 2 * layers * width * length


class RecurrentSpec(ModelSpec):
    """Fields shared by the recurrent families (each adds its own)."""

    layers: int = Field(1, ge=1, le=64)
    width: int = Field(64, ge=1, description="d_model: embedding and residual width")
    init_std: float | None = Field(None, gt=0, description="std of embeddings and projections; None = 0.8/√width")

    @property
    def std(self) -> float:
        return init_std_for(self.width, self.init_std)

    @property
    def state_size(self) -> int:  # pragma: no cover - every family overrides it
        raise NotImplementedError


class SequenceStack(RunStacked):
    """Embedding, residual pre-norm blocks around a family's mixer, final norm and read-out, for R runs."""

    norm: Literal["layer", "rms"] = "layer"
    learned_positions = False
    residual_blocks = True  # False: the family's mixers are stacked as they are (the LSTM), no norms around them

    def __init__(self, spec: Any, shapes: TaskShapes, n_runs: int, generators: list[torch.Generator],
                 mlp: bool = False, d_mlp: int | None = None) -> None:
        super().__init__(n_runs)
        self.spec, self.shapes, self.has_mlp = spec, shapes, mlp
        self._generators = generators
        d = spec.width
        self.add("embed.W_E", self.normal([shapes.vocab_size, d]))
        if self.learned_positions:
            self.add("pos_embed.W_pos", self.normal([shapes.seq_len, d]))
        for layer in range(spec.layers):
            p = f"blocks.{layer}"
            if self.residual_blocks:
                self.add_norm(f"{p}.ln1", d)
            self._init_mixer(layer)
            if mlp:
                width = d_mlp or 4 * d
                self.add_norm(f"{p}.ln2", d)
                self.add(f"{p}.mlp.W_in", self.normal([d, width]))
                self.add(f"{p}.mlp.b_in", self.const([width], 0.0))
                self.add(f"{p}.mlp.W_out", self.normal([width, d], spec.std / math.sqrt(2 * spec.layers)))
                self.add(f"{p}.mlp.b_out", self.const([d], 0.0))
        self.add_norm("ln_final", d)
        self.add("unembed.W_U", self.normal([d, shapes.n_classes]))
        self.add("unembed.b_U", self.const([shapes.n_classes], 0.0))
        del self._generators

    # --- initialisation helpers (run r from generators[r]) ------------------------------------------
    def normal(self, shape: list[int], std: float | None = None) -> torch.Tensor:
        std = self.spec.std if std is None else std
        return torch.stack([torch.randn(shape, generator=g) * std for g in self._generators])

    def uniform(self, shape: list[int], low: float, high: float) -> torch.Tensor:
        return torch.stack([torch.rand(shape, generator=g) * (high - low) + low for g in self._generators])

    def const(self, shape: list[int], value: float) -> torch.Tensor:
        return torch.full([len(self._generators), *shape], float(value))

    def add_norm(self, name: str, d: int) -> None:
        self.add(f"{name}.w", self.const([d], 1.0))
        if self.norm == "layer":
            self.add(f"{name}.b", self.const([d], 0.0))

    # --- pieces ---------------------------------------------------------------------------------------
    def _init_mixer(self, layer: int) -> None:
        raise NotImplementedError

    def mix(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def normed(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """LayerNorm (or RMSNorm) with each run's own gain (and bias); x is [R, …, d]."""
        w = bias(self.param(f"{name}.w"), x)
        if self.norm == "rms":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w
        return F.layer_norm(x, x.shape[-1:]) * w + bias(self.param(f"{name}.b"), x)

    def embed(self, inputs: torch.Tensor) -> torch.Tensor:
        """[R, B, n, d] from token ids [R, B, n] or vectors [R, B, n, d_in] (W_E then projects)."""
        w_e = self.param("embed.W_E")
        if inputs.is_floating_point():
            x = per_run(inputs.to(w_e.dtype), w_e)
        else:
            x = w_e[torch.arange(inputs.shape[0])[:, None, None], inputs]
        if self.learned_positions:
            x = x + self.param("pos_embed.W_pos")[:, None, : inputs.shape[2]]
        return x

    def mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        p = f"blocks.{layer}.mlp"
        hidden = F.gelu(per_run(x, self.param(f"{p}.W_in")) + bias(self.param(f"{p}.b_in"), x))
        return per_run(hidden, self.param(f"{p}.W_out")) + bias(self.param(f"{p}.b_out"), x)

    def body(self, x: torch.Tensor) -> torch.Tensor:
        for layer in range(self.spec.layers):
            x = x + self.mix(layer, self.normed(x, f"blocks.{layer}.ln1"))
            if self.has_mlp:
                x = x + self.mlp(layer, self.normed(x, f"blocks.{layer}.ln2"))
        return x

    def readout(self, x: torch.Tensor, read: torch.Tensor | None) -> ModelOutput:
        chosen = self.normed(x[:, :, -1] if read is None else x[:, :, read], "ln_final")
        logits = per_run(chosen, self.param("unembed.W_U")) + bias(self.param("unembed.b_U"), chosen)
        return ModelOutput(logits, [])

    def forward(self, inputs: torch.Tensor, capture: bool = False, override: Any = None,
                read: torch.Tensor | None = None) -> ModelOutput:
        """Logits [R, B, C] at the last position, or [R, B, P, C] at positions ``read``.

        ``capture`` returns no attention patterns (there are none); ``override`` is refused.
        """
        if override:
            raise ValueError(f"{self.spec.name} has no attention heads to override")
        return self.readout(self.body(self.embed(inputs)), read)
