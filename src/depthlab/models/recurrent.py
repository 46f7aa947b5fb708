"""What the recurrent families of seed 003 share: embedding, residual blocks around a mixer, read-out, state.

Seed 003 §2 calls "recurrent models" every architecture whose output at position t depends on the prefix only
through a fixed-size hidden state h_t (LSTMs, state-space models, linear transformers); its lower bounds are
in terms of that state's size m·p bits. Every family here therefore exposes ``state_size`` (on its spec):
the number of real numbers it carries from one position to the next, summed over layers (a complex number
counts as two). The transformers' "state" is their key-value cache, 2·layers·width per position, so it grows
with the length: ``kv_cache_size`` gives it for tables that put both side by side.

``SequenceStack`` is the shared skeleton for a group of R runs (parameters with a leading run axis):

    x ← embed(inputs) (+ learned positions, where the family asks)
    for each layer:  x ← x + mixer(norm(x));  x ← x + MLP(norm(x))   (the MLP where the family has one)
    logits ← norm(x at the read-out positions) W_U + b_U

A family gives its :class:`Mixer` (``blocks.{l}.<name>``: ``attn``, ``ret``, ``ssm``, ``mixer``). A mixer computes
the layer in its parallel (training) form, transcribes the recurrence step by step (``recurrent``, for tests),
and gives its state at every position (``states``). Hook points: ``hook_embed`` (and ``hook_pos_embed`` with learned
positions), ``blocks.{l}.hook_resid_pre``, ``blocks.{l}.hook_<name>_out``, ``hook_resid_mid`` and ``hook_mlp_out``
(with an MLP), ``hook_resid_post``, and ``blocks.{l}.hook_state``: the state after every position, [R, B, n, …] with
``state_size / layers`` numbers per position (complex ones for DSS), computed only when that hook is attached,
read-only. Nothing is masked: padding tokens (index lookup, equality) are ordinary tokens that the model reads and
learns to ignore.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from .base import ModelSpec, RunModule, TaskShapes, init_std_for
from .components import MLP, Embed, Init, LayerNorm, PosEmbed, Unembed, residual_out_std
from .hooks import HookPoint, hooked


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


class Mixer(torch.nn.Module):
    """A recurrent layer's token mixing: [R, B, n, d] -> [R, B, n, d]."""

    def recurrent(self, x: torch.Tensor) -> torch.Tensor:
        """The same layer as its recurrence, position by position (slow; tests compare it with ``forward``)."""
        raise NotImplementedError

    def states(self, x: torch.Tensor) -> torch.Tensor:
        """The state carried after each position: [R, B, n, …]."""
        raise NotImplementedError


class ResidualBlock(torch.nn.Module):
    """x ← x + mixer(norm(x)); x ← x + MLP(norm(x)) (pre-norm), the mixer registered as ``name``."""

    def __init__(self, name: str, mixer: Mixer, spec: Any, init: Init, rms: bool = False, mlp: bool = False,
                 d_mlp: int | None = None) -> None:
        super().__init__()
        d = spec.width
        self.mixer_name = name
        self.hook_resid_pre = HookPoint()
        self.ln1 = LayerNorm(d, init, rms)
        self.add_module(name, mixer)
        self.add_module(f"hook_{name}_out", HookPoint())
        self.hook_state = HookPoint(read_only=True)
        if mlp:
            self.hook_resid_mid, self.hook_mlp_out = HookPoint(), HookPoint()
            self.ln2 = LayerNorm(d, init, rms)
            self.mlp = MLP(d, d_mlp or 4 * d, init, residual_out_std(spec.std, spec.layers))
        self.hook_resid_post = HookPoint()

    @property
    def token_mixer(self) -> Mixer:
        return getattr(self, self.mixer_name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.hook_resid_pre(x)
        normed = self.ln1(x)
        if self.hook_state.active:
            self.hook_state(self.token_mixer.states(normed))
        x = x + getattr(self, f"hook_{self.mixer_name}_out")(self.token_mixer(normed))
        if hasattr(self, "mlp") and not hooked(self):  # x + MLP(LN(x)) in one autograd node where it can be
            return self.mlp.residual(x, self.ln2)
        if hasattr(self, "mlp"):
            x = self.hook_resid_mid(x)
            x = x + self.hook_mlp_out(self.mlp(self.ln2(x)))
        return self.hook_resid_post(x)


class SequenceStack(RunModule):
    """Embedding, a stack of blocks, final norm and read-out, for R runs (see the module docstring)."""

    rms = False  # RMSNorm instead of LayerNorm (Mamba)

    def __init__(self, spec: Any, shapes: TaskShapes, generators: list[torch.Generator],
                 learned_positions: bool = False) -> None:
        super().__init__(spec, shapes, len(generators))
        init = Init(generators, spec.std)
        d = spec.width
        self.embed = Embed(shapes.vocab_size, d, init)
        if learned_positions:
            self.pos_embed = PosEmbed(shapes.seq_len, d, init)
        self.hook_embed = HookPoint()
        if learned_positions:
            self.hook_pos_embed = HookPoint()
        self.build_layers(init)
        self.ln_final = LayerNorm(d, init, self.rms)
        self.unembed = Unembed(init.normal([d, shapes.n_classes]), init.const([shapes.n_classes], 0.0))
        self.setup_hooks()

    attention: str | None = None  # cfg.attention: how the mixer weighs positions (linear, retention), if it does

    def config_fields(self) -> dict[str, Any]:
        mlp = getattr(self.blocks[0], "mlp", None)
        heads = getattr(self.spec, "heads", None)
        return {**super().config_fields(), "n_heads": heads or -1, "d_head": self.spec.width // heads if heads else -1,
                "d_mlp": None if mlp is None else int(mlp.W_in.shape[-1]), "act_fn": None if mlp is None else "gelu",
                "attention": self.attention, "attention_dir": "causal", "normalization_type": "RMS" if self.rms
                else "LN", "positional_embedding_type": "standard" if hasattr(self, "pos_embed") else "none"}

    def build_layers(self, init: Init) -> None:
        """Register ``self.blocks`` (and whatever else the layers hold), drawing in layer order from ``init``."""
        raise NotImplementedError

    def residual_stream(self, inputs: torch.Tensor) -> torch.Tensor:
        """[R, B, n, d] from token ids [R, B, n] or vectors [R, B, n, d_in] (W_E then projects)."""
        x = self.hook_embed(self.embed(inputs))
        if hasattr(self, "pos_embed"):
            positions = self.pos_embed(inputs.shape[2])  # [R, 1, n, d]: broadcast, unless a hook asks for [R, B, n, d]
            x = x + (self.hook_pos_embed(positions.expand_as(x)) if self.hook_pos_embed.active else positions)
        return x

    def body(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x

    def logits(self, inputs: torch.Tensor, read: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [R, B, C] at the last position, or [R, B, P, C] at the positions ``read``."""
        x = self.body(self.residual_stream(inputs))
        return self.unembed(self.ln_final(x[:, :, -1] if read is None else x[:, :, read]))
