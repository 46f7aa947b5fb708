"""The attention-only transformer of seed 001 §3.1, for a group of runs.

    "H^(l+1) = H^(l) + (1/m) Σ_i V_i σ((Q_i)^T K_i)  …  σ(z) = max{0, z}"   (seed 001, eq. 2)
    "H^(0) = [x_0 … x_{n-1}; p_0 … p_{n-1}; 0 … 0]"  one-hot tokens, one-hot positions concatenated,
    zero padding to d'  (eq. 3); "o = W_O h^(L)_{n-1}", the classifier reads the last column.

Layout of the d' = ``width`` coordinates: token one-hot in [0, d), position one-hot in [d, d + n), zeros after.

Weights follow TransformerLens' row-vector convention (a position's representation is a row x):
``blocks.{l}.attn.W_QK`` [heads, d', d'] with score(query q, key k) = x_q W_QK x_kᵀ, so the paper's
W_QK (score = x_kᵀ W x_q, eq. 2 with columns) is its transpose; ``blocks.{l}.attn.W_V`` [heads, d', d'] with
value = x W_V (the paper's W_V transposed); ``unembed.W_U`` [d', C] with logits = h_{n-1} W_U (W_O transposed).
There is no causal mask (the paper's attention is bidirectional: every position attends to every other, before
and after it) and no MLP, LayerNorm or bias. Initialisations (``init``: paper, paper-first, random, and the last two
with a bounded stream: paper-first-stream, random-stream) and the constructed first layers are in ``models.init``.

TransformerLens' views of these weights (computed, not parameters; ``model.cfg``: ``d_head`` = d', ``attn_scale``
= 1, ``attention_dir`` = bidirectional): ``attn.W_Q`` = W_QK and ``attn.W_K`` = I [heads, d', d'], so that
``hook_q`` = x W_Q, ``hook_k`` = x W_K and the score is q · k with no 1/√d_head; ``attn.QK`` = W_Q W_Kᵀ is W_QK
itself, the model's bilinear form (score = x_q QK x_kᵀ). ``attn.W_O`` = I/m, eq. 2's average over the layer's m
heads, so ``attn.OV`` = W_V/m is what a head adds to the residual stream per unit of attention, and a head's
result z W_O sums over heads to ``hook_attn_out``. ``model.W_E`` is the one-hot token table [d, d'] and
``model.W_pos`` the one-hot positions [n, d'] (adding them is eq. 3's concatenation).

Hook points (activations [R, B, …], per-head ones in TransformerLens' layout [R, B, pos, heads, …]):
``hook_embed`` (token one-hots, or the padded input vectors, in d' coordinates), ``hook_pos_embed`` (position
one-hots), and per layer ``blocks.{l}.hook_resid_pre``, ``attn.hook_q`` (x W_QK, so that score = q · k),
``attn.hook_k`` (x), ``attn.hook_v`` (x W_V), ``attn.hook_attn_scores``, ``attn.hook_pattern`` (σ of the scores),
``attn.hook_z`` (Σ_k pattern[q, k] v_k), ``hook_attn_out`` ((1/m) Σ_i z_i) and ``hook_resid_post``. The exported
TransformerLens model (``depthlab export``) has the same values at the same names, except ``hook_q``, which
is √d' times larger there (TransformerLens divides scores by √d_head).

The intermediates are computed only when a hook of the block is attached: without one a layer is four batched
products on views (``models.attention_kernels.full_layer``); with hooks on the pattern only, it adds
Σ_i (pattern_i H) W_V,i to H in one product; the per-head values, z and the attention output only when their
hooks ask. The last layer computes only the classifier's query, with a hand-written backward.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field, field_validator, model_validator

from .attention_kernels import LastQueryAttention, attention_pattern, full_layer
from .base import ModelSpec, RunModule, TaskShapes, register
from .components import Unembed, fixed_table, shapes_only, through_head_hook
from .factored import Circuits
from .hooks import HookPoint
from .init import STREAM, attention_only_weight, bound_stream, drawn_as, paper_first_layer


def one_hot_positions(n: int, d: int, width: int) -> torch.Tensor:
    """[n, width]: position i one-hot in column d + i (§3.1's concatenated positions)."""
    positions = torch.zeros(n, width)
    positions[torch.arange(n), d + torch.arange(n)] = 1.0
    return positions


@register
class AttentionOnlySpec(ModelSpec):
    """Parameters of the seed 001 attention-only transformer."""

    name: Literal["attention_only"] = "attention_only"
    layers: int = Field(2, ge=1, le=64, description="number of attention layers L")
    heads: int | list[int] = Field(1, description="heads per layer: one number, or the paper's list [h1, h2, …]")
    width: int | None = Field(None, ge=1, description="hidden size d'; None = d + n (+ what the init needs)")
    attention: Literal["relu", "softmax"] = "relu"
    init: Literal["paper", "paper-first", "random", "paper-first-stream", "random-stream"] = Field(
        "paper", description="paper (§9.1), paper-first (the constructed first layer, random weights after it), "
                             "random; *-stream: those draws with each random layer's W_QK rescaled so that the "
                             "residual stream stays O(1) at initialisation at any depth (ReLU attention)")
    qk_scale: float = Field(1.0, gt=0, description="scale of W_QK at init: uniform in [0, qk_scale) (paper; "
                                                  "paper-first's first layer), N(0, 1/width)·qk_scale (random; "
                                                  "paper-first's later layers N(0, 1/width); no effect on the "
                                                  "layers a *-stream init rescales)")

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
        if self.init.endswith(STREAM) and self.attention != "relu":
            raise ValueError(f"init {self.init} bounds ReLU attention's stream; softmax attention is bounded "
                             "without it (use paper-first or random)")
        return self

    @property
    def heads_per_layer(self) -> list[int]:
        return list(self.heads) if isinstance(self.heads, list) else [self.heads] * self.layers


class BilinearAttention(Circuits, torch.nn.Module):
    """One layer's heads: ``W_QK`` and ``W_V`` [R, heads, d', d'], σ the ReLU (or softmax) of x_q W_QK x_kᵀ;
    TransformerLens' ``W_Q`` = W_QK, ``W_K`` = I, ``W_O`` = I/m, ``QK`` and ``OV`` as views (module docstring)."""

    def __init__(self, w_qk: torch.nn.Parameter, w_v: torch.nn.Parameter, softmax: bool) -> None:
        super().__init__()
        self.W_QK, self.W_V, self.softmax = w_qk, w_v, softmax
        for name in ("q", "k", "v", "attn_scores", "pattern", "z"):
            setattr(self, f"hook_{name}", HookPoint())

    @property
    def W_Q(self) -> torch.Tensor:
        return self.W_QK

    @property
    def W_K(self) -> torch.Tensor:
        width = self.W_QK.shape[-1]
        return torch.eye(width, dtype=self.W_QK.dtype, device=self.W_QK.device).expand_as(self.W_QK)

    @property
    def W_O(self) -> torch.Tensor:
        return self.W_K / self.W_QK.shape[-3]

    def value_weights(self) -> torch.Tensor:
        """W_V with eq. 2's 1/m average in it (on the small tensor, not the activations)."""
        return self.W_V / self.W_V.shape[1]

    def pattern(self, h: torch.Tensor) -> torch.Tensor:
        """σ(scores) for every query, [R, B, heads, q, k], through ``hook_q``, ``hook_k``, ``hook_attn_scores``
        and ``hook_pattern``."""
        # keys before queries: the order autograd sums H's gradient in (kept as it was, bit for bit)
        keys = h.unsqueeze(2).transpose(-1, -2)  # [R, B, 1, d', n]: every head reads the same keys
        queries = through_head_hook(self.hook_q, torch.einsum("rbqd,rhde->rbhqe", h, self.W_QK))
        if self.hook_k.active:
            keys = through_head_hook(self.hook_k, h.unsqueeze(2).expand_as(queries)).transpose(-1, -2)
        scores = self.hook_attn_scores(queries @ keys)
        return self.hook_pattern(attention_pattern(scores, self.softmax))

    @property
    def per_head_hooked(self) -> bool:
        return self.hook_v.active or self.hook_z.active

    def residual(self, h: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
        """H + (1/m) Σ_i (pattern_i H) W_V,i in one product over (head, coordinate), in one pass over memory."""
        mixed = pattern @ h.unsqueeze(2)  # [R, B, heads, q, d']: Σ_k pattern[q, k] x_k, before W_V
        runs, batch, heads, n, width = mixed.shape
        mixed = mixed.transpose(2, 3).reshape(runs, batch * n, -1)
        w_v = self.value_weights().reshape(runs, heads * width, width)
        if torch.is_autocast_enabled(h.device.type):  # … except in bf16, where the residual stream stays fp32
            return h + (mixed @ w_v).view(h.shape)
        return torch.baddbmm(h.reshape(runs, batch * n, width), mixed, w_v).view(h.shape)

    def output(self, h: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
        """(1/m) Σ_i z_i with z_i = pattern_i (H W_V,i), through ``hook_v`` and ``hook_z``: [R, B, n, d']."""
        values = through_head_hook(self.hook_v, torch.einsum("rbnd,rhde->rbhne", h, self.W_V))
        z = through_head_hook(self.hook_z, pattern @ values)
        return z.sum(2) / z.shape[2]

    def last_query(self, h: torch.Tensor) -> torch.Tensor:
        """H^(l+1) at the last position only, [R, B, d'] (the classifier's column; hand-written backward)."""
        return LastQueryAttention.apply(h, self.W_QK, self.W_V, self.softmax)


class AttentionOnlyBlock(torch.nn.Module):
    """H^(l+1) = H^(l) + (1/m) Σ_i V_i σ(Q_iᵀ K_i) (eq. 2), with its hook points."""

    def __init__(self, attn: BilinearAttention) -> None:
        super().__init__()
        self.hook_resid_pre = HookPoint()
        self.attn = attn
        self.hook_attn_out, self.hook_resid_post = HookPoint(), HookPoint()
        self.points = [m for m in self.modules() if isinstance(m, HookPoint)]  # a list: not submodules again

    @property
    def hooked(self) -> bool:
        return any(point.active for point in self.points)

    def forward(self, h: torch.Tensor, last_query: bool = False) -> torch.Tensor:
        """H^(l+1) [R, B, n, d'], or [R, B, d'] at the last position with ``last_query`` (no hook attached)."""
        h = self.hook_resid_pre(h)
        if last_query:
            return self.attn.last_query(h)
        if not self.hooked:  # nothing asks for the intermediates: the layer in four products
            return full_layer(h, self.attn.W_QK, self.attn.W_V, self.attn.softmax)
        pattern = self.attn.pattern(h)
        if self.attn.per_head_hooked or self.hook_attn_out.active:
            out = self.hook_attn_out(self.attn.output(h, pattern))
            return self.hook_resid_post(h + out)
        return self.hook_resid_post(self.attn.residual(h, pattern))


class AttentionOnly(RunModule):
    """R runs of the same attention-only transformer, parameters stacked on a leading run axis."""

    def __init__(self, spec: AttentionOnlySpec, shapes: TaskShapes, generators: list[torch.Generator]) -> None:
        super().__init__(spec, shapes, len(generators))
        self.d, self.n, self.n_classes = shapes.vocab_size, shapes.seq_len, shapes.n_classes
        first = paper_first_layer(shapes.task, shapes.task_params, spec.init)
        minimal = self.d + self.n + (first.extra_width if first else 0)
        self.width = width = spec.width if spec.width is not None else minimal
        if width < self.d + self.n:
            raise ValueError(f"model.width must be at least d + n = {self.d + self.n} for this task")
        self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()

        def weight(kind: str, shape: list[int], first_layer: bool = False) -> torch.nn.Parameter:
            return attention_only_weight(kind, spec.init, shape, generators, width, spec.qk_scale, first_layer)

        self.blocks = torch.nn.ModuleList(
            AttentionOnlyBlock(BilinearAttention(weight("qk", [heads, width, width], layer == 0),
                                                 weight("v", [heads, width, width]), spec.attention == "softmax"))
            for layer, heads in enumerate(spec.heads_per_layer))
        self.unembed = Unembed(weight("u", [width, self.n_classes]))
        positions = fixed_table([self.n, width], lambda: one_hot_positions(self.n, self.d, width))
        self.register_buffer("positions", positions, persistent=False)
        # a lookup in the identity is the one-hot encoding, 4x faster than ``one_hot`` (a scatter) on a CPU …
        one_hot = fixed_table([self.d, width], lambda: torch.eye(self.d, width))
        self.register_buffer("one_hot", one_hot, persistent=False)
        # … and a lookup in a table of every (token, position) row is H^(0) in one pass over memory
        table = None if self.d * self.n * width > 2**22 else fixed_table(
            [self.d * self.n, width], lambda: (one_hot[:, None] + positions).reshape(-1, width))
        self.register_buffer("token_positions", table, persistent=False)
        self.register_buffer("token_offsets", fixed_table([self.n], lambda: torch.arange(self.n), torch.long),
                             persistent=False)
        if first:
            first.apply(self)
        if spec.init.endswith(STREAM) and not shapes_only():
            bound_stream(self, first_random=0 if drawn_as(spec.init) == "random" else 1)
        self.setup_hooks()

    fixed_length = True  # one-hot positions for exactly n positions (eq. 3)

    @property
    def heads_per_layer(self) -> list[int]:
        return self.spec.heads_per_layer

    @property
    def W_E(self) -> torch.Tensor:
        """The one-hot token table [d, d'] (token t -> coordinate t), shared by every run."""
        return self.one_hot

    @property
    def W_pos(self) -> torch.Tensor:
        """The one-hot positions [n, d'] (position i -> coordinate d + i), shared by every run."""
        return self.positions

    def config_fields(self) -> dict:
        return {**super().config_fields(), "d_head": self.width, "attn_only": True,
                "attention": self.spec.attention, "use_attn_scale": False, "attn_scale": 1.0,
                "positional_embedding_type": "onehot"}

    def residual_stream(self, inputs: torch.Tensor) -> torch.Tensor:
        """H^(0) as rows: [R, B, n, d'] from token ids [R, B, n] (eq. 3), or from vectors [R, B, n, d]
        (seed 002 §6: "positional features concatenated to each vector")."""
        if inputs.is_floating_point():
            pad = self.width - inputs.shape[-1]
            tokens = torch.nn.functional.pad(inputs.to(self.positions.dtype), (0, pad))
        elif self.hook_embed.active or self.hook_pos_embed.active or self.token_positions is None:
            tokens = torch.nn.functional.embedding(inputs, self.one_hot)
        else:
            rows = torch.add(self.token_offsets, inputs, alpha=self.n)  # (token, position) -> token · n + position
            return self.token_positions[rows]  # an index, not F.embedding: the same rows in 4 operations, not 10
        return self.hook_embed(tokens) + self.hook_pos_embed(self.positions.expand_as(tokens))

    def logits(self, inputs: torch.Tensor, read: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [R, B, C] at the last position, or [R, B, P, C] at the positions ``read``."""
        h = self.residual_stream(inputs)
        last = len(self.blocks) - 1
        for layer, block in enumerate(self.blocks):
            # The classifier reads only the last position, so the last layer computes only that query — unless a
            # hook asks for what it would skip, or other positions are read. Its hand-written backward was measured
            # and tested on the CPU (and its autocast handling is the CPU's): other devices take the generic path.
            last_query = layer == last and read is None and not block.hooked and h.device.type == "cpu"
            h = block(h, last_query=last_query)
        if last_query:  # h is already the last position's [R, B, d']
            return self.unembed(h)
        return self.unembed(h[:, :, -1] if read is None else h[:, :, read])


AttentionOnlySpec.family = AttentionOnly
