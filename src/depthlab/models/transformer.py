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
a TransformerLens state dict up to the run index. So are its hook points: ``hook_embed``, ``hook_pos_embed``,
``blocks.{l}.hook_resid_pre``, ``attn.hook_q/k/v`` ([R, B, pos, heads, d_head]; ``hook_rot_q/k`` after the
rotation), ``attn.hook_attn_scores`` (scaled and masked), ``attn.hook_pattern``, ``attn.hook_z``,
``hook_attn_out``, ``hook_resid_mid``, ``mlp.hook_pre``, ``mlp.hook_post``, ``hook_mlp_out``, ``hook_resid_post``.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator

from .base import ModelSpec, RunModule, TaskShapes, init_std_for, register
from .components import (
    MLP,
    Embed,
    HeadProjections,
    Init,
    LayerNorm,
    PosEmbed,
    Unembed,
    causal_mask,
    fixed_table,
    residual_out_std,
    through_head_hook,
)
from .hooks import HookPoint, hooked


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
    positional: Literal["learned", "sinusoidal", "rotary", "onehot", "none"] = Field(
        "learned", description="positions: learned, sinusoidal, rotary, onehot (concatenated) or none (only what the "
                               "inputs carry, e.g. seed 002's rotary features concatenated by the task)")
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


def sinusoidal_positions(n: int, width: int) -> torch.Tensor:
    position = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(n, width)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq)[:, : width // 2]
    return table


def rotary_tables(n: int, d_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of θ_j·i for position i and pair j (θ_j = 10000^(−2j/d_head)): two [n, d_head / 2]."""
    def angles() -> torch.Tensor:
        return torch.arange(n)[:, None] * (10000.0 ** (-torch.arange(0, d_head, 2) / d_head))[None]

    shape = [n, d_head // 2]
    return fixed_table(shape, lambda: angles().cos()), fixed_table(shape, lambda: angles().sin())


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding on the last axis (pairs of halves, as GPT-NeoX)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Attention(HeadProjections):
    """Multi-head softmax attention, causal or not, with rotary positions when asked."""

    def __init__(self, spec: TransformerSpec, n: int, init: Init) -> None:
        d, h, dh = spec.width, spec.heads, spec.head_size
        super().__init__(d, h, dh, init)
        self.add_output(d, h, dh, init, residual_out_std(spec.std, spec.layers))
        self.causal, self.rotary = spec.causal, spec.positional == "rotary"
        self.hook_attn_scores, self.hook_pattern = HookPoint(), HookPoint()
        if self.rotary:
            self.hook_rot_q, self.hook_rot_k = HookPoint(), HookPoint()
            cos, sin = rotary_tables(n, dh)
            self.register_buffer("rot_cos", cos, persistent=False)
            self.register_buffer("rot_sin", sin, persistent=False)
        self.register_buffer("causal_mask", causal_mask(n), persistent=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """x [R, B, n, d] (normalised) -> the layer's output [R, B, n, d], added to ``residual`` when given (only
        where no hook is attached)."""
        if not self.hooked:  # no hook asks for q, k, v, scores, pattern or z: a product, the SDPA kernel, a product
            q, k, v = self.fused_qkv(x)
            if self.rotary:
                n = x.shape[2]
                q, k = (rotate(t, self.rot_cos[:n], self.rot_sin[:n]) for t in (q, k))
            z = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
            return self.fused_output(z, x, residual)
        q, k, v = self.qkv(x)
        n = x.shape[2]
        if self.rotary:
            cos, sin = self.rot_cos[:n], self.rot_sin[:n]
            q = through_head_hook(self.hook_rot_q, rotate(q, cos, sin))
            k = through_head_hook(self.hook_rot_k, rotate(k, cos, sin))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if self.causal:
            scores = scores.masked_fill(self.causal_mask[:n, :n], float("-inf"))
        pattern = self.hook_pattern(self.hook_attn_scores(scores).softmax(dim=-1))
        return self.output(pattern @ v)


class TransformerBlock(torch.nn.Module):
    """x ← x + attn(LN(x)); x ← x + MLP(LN(x)) (pre-norm, GPT-2)."""

    def __init__(self, spec: TransformerSpec, n: int, init: Init) -> None:
        super().__init__()
        d = spec.width
        self.hook_resid_pre = HookPoint()
        self.ln1 = LayerNorm(d, init)
        self.attn = Attention(spec, n, init)
        self.hook_attn_out, self.hook_resid_post = HookPoint(), HookPoint()
        if spec.mlp:
            self.hook_resid_mid, self.hook_mlp_out = HookPoint(), HookPoint()
            self.ln2 = LayerNorm(d, init)
            self.mlp = MLP(d, spec.d_mlp or 4 * d, init, residual_out_std(spec.std, spec.layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hooked(self):  # each sublayer with its residual add in as few autograd nodes as the same kernels allow
            x = self.attn(self.ln1(x), residual=x)
            return self.mlp.residual(x, self.ln2) if hasattr(self, "mlp") else x
        x = self.hook_resid_pre(x)
        x = x + self.hook_attn_out(self.attn(self.ln1(x)))
        if hasattr(self, "mlp"):
            x = self.hook_resid_mid(x)
            x = x + self.hook_mlp_out(self.mlp(self.ln2(x)))
        return self.hook_resid_post(x)


class Transformer(RunModule):
    """R runs of the same GPT-2-style transformer, parameters stacked on a leading run axis."""

    def __init__(self, spec: TransformerSpec, shapes: TaskShapes, generators: list[torch.Generator]) -> None:
        super().__init__(spec, shapes, len(generators))
        d, n = spec.width, shapes.seq_len
        self.d_tok = d - n if spec.positional == "onehot" else d
        if self.d_tok < 1:
            raise ValueError(f"model.width must exceed the sequence length ({n}) with one-hot positions")
        self.causal = spec.causal
        init = Init(generators, spec.std)
        self.embed = Embed(shapes.vocab_size, self.d_tok, init)
        if spec.positional == "learned":
            self.pos_embed = PosEmbed(n, d, init)
        self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()
        self.blocks = torch.nn.ModuleList(TransformerBlock(spec, n, init) for _ in range(spec.layers))
        self.ln_final = LayerNorm(d, init)
        self.unembed = Unembed(init.normal([d, shapes.n_classes]), init.const([shapes.n_classes], 0.0))
        if spec.positional == "sinusoidal":
            self.register_buffer("sinusoidal", sinusoidal_positions(n, d), persistent=False)
        if spec.positional == "onehot":
            self.register_buffer("onehot", torch.eye(n), persistent=False)
        self.setup_hooks()

    @property
    def heads_per_layer(self) -> list[int]:
        return [self.spec.heads] * self.spec.layers

    @property
    def W_pos(self) -> torch.Tensor:
        """The positions added to the tokens: learned ``pos_embed.W_pos``, or the fixed sinusoidal table."""
        if self.spec.positional not in ("learned", "sinusoidal"):
            raise AttributeError(f"W_pos: {self.spec.positional} positions are not added to the tokens")
        return self.pos_embed.W_pos if self.spec.positional == "learned" else self.sinusoidal

    def config_fields(self) -> dict:
        spec = self.spec
        positions = {"learned": "standard"}.get(spec.positional, spec.positional)
        return {**super().config_fields(), "d_head": spec.head_size, "d_mlp": (spec.d_mlp or 4 * spec.width)
                if spec.mlp else None, "act_fn": "gelu" if spec.mlp else None, "attn_only": not spec.mlp,
                "attention": "softmax", "attn_scale": math.sqrt(spec.head_size), "normalization_type": "LN",
                "positional_embedding_type": positions}

    def residual_stream(self, inputs: torch.Tensor) -> torch.Tensor:
        """The stream before block 0: [R, B, n, d_model] from token ids [R, B, n] or vectors [R, B, n, d_in]."""
        x = self.hook_embed(self.embed(inputs))
        n = inputs.shape[2]
        positional = self.spec.positional
        if positional == "learned" and not self.hook_pos_embed.active:  # broadcast: no expand (a node) to undo
            x = x + self.pos_embed(n)
        elif positional == "learned":
            x = x + self.hook_pos_embed(self.pos_embed(n).expand_as(x))
        elif positional == "sinusoidal":
            x = x + self.hook_pos_embed(self.sinusoidal[:n].expand_as(x))
        elif positional == "onehot":
            onehot = self.onehot[:n, : self.shapes.seq_len].expand(*x.shape[:2], n, -1)
            x = torch.cat([x, self.hook_pos_embed(onehot)], dim=-1)
        return x

    def logits(self, inputs: torch.Tensor, read: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [R, B, C] at the last position, or [R, B, P, C] at the positions ``read``."""
        x = self.residual_stream(inputs)
        for block in self.blocks:
            x = block(x)
        # the last position copied once here: the LayerNorm would copy it in its forward and again in its backward
        return self.unembed(self.ln_final(x[:, :, -1].contiguous() if read is None else x[:, :, read]))


TransformerSpec.family = Transformer
