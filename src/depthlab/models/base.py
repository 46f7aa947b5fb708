"""What every model family shares: the output type, the registry, and the attention override.

Models are built for a *group* of R runs at once: every parameter has a leading run axis, and
``forward`` takes inputs of shape [R, B, …]. A single run is simply R = 1. This is the batched engine's
lever on a CPU (many small models train as one program) and it never mixes runs: every operation is
independent along the run axis.

``forward(inputs, capture=False, override=None) -> ModelOutput``:
- ``capture=True`` returns every layer's attention pattern, shape [R, B, heads, query, key]
  (TransformerLens' ``hook_pattern`` with a run axis in front).
- ``override`` maps ``(layer, head)`` to a replacement pattern: a tensor broadcastable to
  [R, B, query, key], or one of the strings ``"uniform"``, ``"identity"``, ``"previous"`` (see
  ``override_pattern``) — the seeds' head ablations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from pydantic import BaseModel, ConfigDict


@dataclass
class ModelOutput:
    outputs: torch.Tensor  # [R, B, C] logits at the read-out position
    attentions: list[torch.Tensor] = field(default_factory=list)  # per layer [R, B, heads, q, k]


@dataclass(frozen=True)
class TaskShapes:
    """What a model needs to know about a task: vocabulary size d, sequence length n, classes C."""

    vocab_size: int
    seq_len: int
    n_classes: int


class ModelSpec(BaseModel):
    """Base of every model family's parameters (a pydantic model; ``name`` picks the family)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str

    family: ClassVar[type]  # the nn.Module class, set by ``register``


MODELS: dict[str, type[ModelSpec]] = {}


def register(spec_cls: type[ModelSpec]):
    """Decorator for a model family's spec class; the family's module class is ``spec_cls.family``."""
    MODELS[spec_cls.model_fields["name"].default] = spec_cls
    return spec_cls


Override = dict[tuple[int, int], "torch.Tensor | str"]


def init_std_for(width: int, init_std: float | None) -> float:
    """The normal initialisation's standard deviation: ``init_std``, or 0.8/√width when it is None.

    0.8/√d_model is TransformerLens' default (``initializer_range``). GPT-2's fixed 0.02 suits d_model = 768;
    at width 64 it left a 1-layer transformer at chance on Dyck-(2, 2) with N = 12 after 3,000 steps where
    0.8/√64 = 0.1 solved it within 500 (measured), so the width-scaled value is the default.
    """
    return init_std if init_std is not None else 0.8 / math.sqrt(width)


def override_pattern(kind: torch.Tensor | str, like: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """The replacement pattern for one head, shaped like ``like`` ([R, B, q, k]).

    uniform: every key the query may see weighted equally (with ``causal``, query i weights keys 0 … i by
    1/(i + 1), so an ablation never lets a position see the future); identity: each query attends to itself;
    previous: to the position before it (position 0 to itself); a tensor: used as given (broadcast).
    """
    n_q, n_k = like.shape[-2:]
    if isinstance(kind, torch.Tensor):
        return kind.to(like.dtype).expand_as(like)
    if kind == "uniform":
        if not causal:
            return torch.full_like(like, 1.0 / n_k)
        visible = torch.ones(n_q, n_k, dtype=like.dtype).tril(n_k - n_q)
        return (visible / visible.sum(-1, keepdim=True)).expand_as(like)
    if kind == "identity":
        return torch.eye(n_q, n_k, dtype=like.dtype).expand_as(like)
    if kind == "previous":
        prev = torch.zeros(n_q, n_k, dtype=like.dtype)
        idx = torch.arange(n_q)
        prev[idx, (idx - 1).clamp(min=0)] = 1.0
        return prev.expand_as(like)
    raise ValueError(f"override: unknown pattern {kind!r}; allowed: uniform, identity, previous or a tensor")


def build_model(spec: ModelSpec, shapes: TaskShapes, generators: list[torch.Generator], **options: Any) -> Any:
    """Build the family's module for ``len(generators)`` runs, run r initialised from ``generators[r]``."""
    return spec.family(spec, shapes, len(generators), generators, **options)


class RunStacked(torch.nn.Module):
    """Base module for a group of runs: parameters carry a leading run axis and TransformerLens-style names.

    Subclasses call ``add(tl_name, tensor)`` for each parameter (``blocks.0.attn.W_QK``, ``unembed.W_U``…);
    this class gives them per-run state dicts (for checkpoints and export) and run selection (a run that
    finishes leaves the group).
    """

    def __init__(self, n_runs: int) -> None:
        super().__init__()
        self.n_runs = n_runs
        self.tl_names: dict[str, str] = {}

    def add(self, tl_name: str, value: torch.Tensor) -> torch.nn.Parameter:
        key = tl_name.replace(".", "__")
        param = torch.nn.Parameter(value)
        self.register_parameter(key, param)
        self.tl_names[key] = tl_name
        return param

    def param(self, tl_name: str) -> torch.nn.Parameter:
        return getattr(self, tl_name.replace(".", "__"))

    def run_state_dict(self, run: int) -> dict[str, torch.Tensor]:
        """Run ``run``'s weights under TransformerLens-style names, without the run axis."""
        return {tl: getattr(self, key).detach()[run].contiguous() for key, tl in self.tl_names.items()}

    def load_run_state_dict(self, run: int, state: dict[str, torch.Tensor]) -> None:
        expected = {tl: tuple(getattr(self, key).shape[1:]) for key, tl in self.tl_names.items()}
        got = {name: tuple(t.shape) for name, t in state.items()}
        if expected != got:
            diff = sorted(set(expected.items()) ^ set(got.items()))
            raise ValueError(f"checkpoint does not fit the model config: {diff[:4]}")
        with torch.no_grad():
            for key, tl in self.tl_names.items():
                getattr(self, key)[run] = state[tl]

    def select_runs(self, keep: torch.Tensor) -> None:
        """Keep only the runs at indices ``keep`` (in that order)."""
        for key in self.tl_names:
            # A new Parameter (not a reshaped .data): autograd remembers the shape of the old one.
            self.register_parameter(key, torch.nn.Parameter(getattr(self, key).detach()[keep].contiguous()))
        self.n_runs = int(keep.numel())
