"""``model.cfg``: a model's shape under TransformerLens' config names, plus what TransformerLens has no name for.

TransformerLens' ``HookedTransformerConfig`` / ``TransformerBridgeConfig`` fields keep their names and meanings
(``n_layers``, ``d_model``, ``n_heads``, ``d_head``, ``d_mlp``, ``n_ctx``, ``d_vocab``, ``d_vocab_out``,
``act_fn``, ``attn_only``, ``normalization_type``, ``eps``, ``positional_embedding_type``, ``attention_dir``,
``use_attn_scale``, ``attn_scale``, ``default_prepend_bos``, ``model_name``). depthlab adds ``attention`` (how
scores become the pattern: seed 001's ``relu``, ``softmax``, or a recurrent family's ``linear`` / ``retention``;
None without attention), ``heads_per_layer`` (seed 001's models may have a different number per layer:
``n_heads`` is then the largest), ``read_out`` (the positions the logits are read at by default) and ``task``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelConfig:
    """A depthlab model's configuration in TransformerLens' terms (see the module's docstring)."""

    model_name: str  # the family: attention_only, transformer, lstm, …
    n_layers: int
    d_model: int
    n_ctx: int  # the task's length n: the longest input the model takes
    d_vocab: int  # the task's vocabulary (input width for vector inputs)
    d_vocab_out: int  # the task's classes: logits are over ``task.labels``, not the vocabulary
    n_heads: int = -1  # -1 without attention heads (TransformerLens' default)
    d_head: int = -1
    heads_per_layer: tuple[int, ...] = field(default_factory=tuple)
    d_mlp: int | None = None
    act_fn: str | None = None  # the MLP's activation (None without an MLP)
    attn_only: bool = False
    attention: str | None = None  # relu | softmax | linear | retention | None
    attention_dir: str = "causal"  # causal | bidirectional
    use_attn_scale: bool = True
    attn_scale: float = 1.0  # scores are q·k / attn_scale
    normalization_type: str | None = None  # LN | RMS | None
    eps: float = 1e-5
    positional_embedding_type: str = "standard"  # standard (learned, added) | sinusoidal | rotary | onehot | none
    read_out: str = "last"  # logits at the last position unless ``read=`` asks for others ("all": every one)
    default_prepend_bos: bool = False  # depthlab's tasks have no beginning-of-sequence token to add
    task: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
