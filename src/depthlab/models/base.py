"""What every model family shares: the spec registry, the task's shapes, the run axis, and the forward contract.

Models are built for a *group* of R runs at once: every parameter has a leading run axis, and ``forward`` takes
inputs of shape [R, B, …]. A single run is simply R = 1. This is the batched engine's lever on a CPU (many
small models train as one program) and it never mixes runs: every operation is independent along the run axis.

A family is a tree of small modules (``models.components``: embedding, attention, MLP or mixer, block,
unembedding), so its parameters are named as TransformerLens names them (``embed.W_E``, ``blocks.0.attn.W_Q``,
``unembed.W_U``), and every intermediate passes through a named hook point (``models.hooks``).

``forward(inputs, capture=False, override=None, read=None) -> ModelOutput``:
- ``capture=True`` returns every layer's attention pattern, shape [R, B, heads, query, key]
  (TransformerLens' ``hook_pattern`` with a run axis in front): hooks on every ``hook_pattern``;
- ``override`` maps ``(layer, head)`` to a replacement pattern: a tensor broadcastable to [R, B, query, key], or
  one of ``"uniform"``, ``"identity"``, ``"previous"`` (see :func:`override_pattern`) — the seeds' head
  ablations, as hooks on ``blocks.{layer}.attn.hook_pattern``;
- ``read``: positions whose logits are returned ([R, B, P, C]) instead of the last position's ([R, B, C]);
  ``"all"`` for every position (TransformerLens' logits, [R, B, n, C]).

``model.cfg`` describes a family in TransformerLens' config names (:class:`depthlab.models.cfg.ModelConfig`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from pydantic import BaseModel, ConfigDict

from .cfg import ModelConfig
from .hooks import HookedModule, HookPoint


@dataclass
class ModelOutput:
    outputs: torch.Tensor  # [R, B, C] logits at the read-out position ([R, B, P, C] at ``read``)
    attentions: list[torch.Tensor] = field(default_factory=list)  # per layer [R, B, heads, q, k]


@dataclass(frozen=True)
class TaskShapes:
    """What a model needs to know about a task: vocabulary size d (or input width), length n, classes C.

    ``task`` and ``task_params`` (the task's name and fields) let an initialisation that the seeds define per task
    (seed 001 §9.1's constructed first layer, ``models.init``) find its construction; other models ignore them.
    """

    vocab_size: int
    seq_len: int
    n_classes: int
    task: str = ""
    task_params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, task: Any) -> TaskShapes:
        """A task's shapes (vector tasks give their input width as the vocabulary)."""
        return cls(task.input_dim or task.vocab_size, task.seq_len, task.n_outputs, task.name, task.model_dump())


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
        visible = torch.ones(n_q, n_k, dtype=like.dtype, device=like.device).tril(n_k - n_q)
        return (visible / visible.sum(-1, keepdim=True)).expand_as(like)
    if kind == "identity":
        return torch.eye(n_q, n_k, dtype=like.dtype, device=like.device).expand_as(like)
    if kind == "previous":
        prev = torch.zeros(n_q, n_k, dtype=like.dtype, device=like.device)
        idx = torch.arange(n_q, device=like.device)
        prev[idx, (idx - 1).clamp(min=0)] = 1.0
        return prev.expand_as(like)
    raise ValueError(f"override: unknown pattern {kind!r}; allowed: uniform, identity, previous or a tensor")


def generators_for(runs: Sequence[int | torch.Generator]) -> list[torch.Generator]:
    """One generator per run: a seed becomes ``torch.Generator().manual_seed(seed)``; a generator is used as is."""
    return [r if isinstance(r, torch.Generator) else torch.Generator().manual_seed(int(r)) for r in runs]


def build_model(spec: ModelSpec, shapes: TaskShapes, runs: Sequence[int | torch.Generator]) -> RunModule:
    """The family's module for ``len(runs)`` runs, run r initialised from ``runs[r]`` (a seed or a generator),
    as ``spec.init`` says where the family has initialisations of its own (``models.init``).

    The one way a model is built: the engine, the analyses and the exporters all call it, so a run rebuilt
    from its config is the run that trained.
    """
    return spec.family(spec, shapes, generators_for(runs))


@dataclass(frozen=True)
class ModelSize:
    """One run's parameters, the buffers every run shares (elements each), and the residual width."""

    parameters: int
    buffers: int
    width: int


def model_size(spec: ModelSpec, shapes: TaskShapes) -> ModelSize:
    """The sizes of ``build_model(spec, shapes, ...)``, read from a one-run model built on PyTorch's meta device:
    shapes without storage, so a model that cannot fit is known before anything is allocated."""
    with torch.device("meta"):
        model = build_model(spec, shapes, [0])
    width = getattr(model, "width", None) or getattr(spec, "width", None) or shapes.vocab_size + shapes.seq_len
    return ModelSize(sum(p.numel() for p in model.parameters()), sum(b.numel() for b in model.buffers()), int(width))


class RunModule(HookedModule):
    """Root module of a family: R runs stacked on the leading axis of every parameter, hook points, forward.

    Subclasses build their parts, call :meth:`setup_hooks`, and implement :meth:`logits`. Families with attention
    list their heads per layer in ``heads_per_layer`` (capture and override act on those patterns).
    """

    causal: bool = False  # whether attention is causal (an ablation's uniform pattern then respects the mask)
    fixed_length: bool = False  # whether inputs must have exactly the task's length (else at most)

    def __init__(self, spec: ModelSpec, shapes: TaskShapes, n_runs: int) -> None:
        super().__init__()
        self.spec, self.shapes, self.n_runs = spec, shapes, n_runs

    @property
    def heads_per_layer(self) -> list[int]:
        return []

    @property
    def layers(self) -> int:
        return int(self.spec.layers)

    @property
    def cfg(self) -> ModelConfig:
        """This model in TransformerLens' config names (:class:`~depthlab.models.cfg.ModelConfig`)."""
        return ModelConfig(**self.config_fields())

    def config_fields(self) -> dict[str, Any]:
        """The fields of :attr:`cfg`; a family adds its own (attention kind, MLP, norms, positions)."""
        heads = self.heads_per_layer
        return {"model_name": self.spec.name, "n_layers": self.layers,
                "d_model": int(getattr(self, "width", None) or self.spec.width), "n_ctx": self.shapes.seq_len,
                "d_vocab": self.shapes.vocab_size, "d_vocab_out": self.shapes.n_classes,
                "n_heads": max(heads, default=-1), "heads_per_layer": tuple(heads),
                "attention_dir": "causal" if self.causal else "bidirectional", "task": self.shapes.task}

    def param(self, name: str) -> torch.nn.Parameter:
        """The parameter by its dotted name (``blocks.0.attn.W_QK``), all runs."""
        return self.get_parameter(name)

    def logits(self, inputs: torch.Tensor, read: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, inputs: torch.Tensor, capture: bool = False, override: Override | None = None,
                read: torch.Tensor | str | None = None) -> ModelOutput:
        if isinstance(read, str):
            if read != "all":
                raise ValueError(f"read: positions as a tensor, or \"all\" (got {read!r})")
            read = torch.arange(inputs.shape[2], device=inputs.device)
        if not capture and not override:
            return ModelOutput(self.logits(inputs, read))
        if not self.heads_per_layer:
            if override:
                raise ValueError(f"{self.spec.name} has no attention heads to override")
            return ModelOutput(self.logits(inputs, read))
        patterns: list[torch.Tensor] = []
        hooks = [(f"blocks.{layer}.attn.hook_pattern", self._override_hook(heads))
                 for layer, heads in _by_layer(override or {}).items()]
        if capture:
            hooks.append((lambda name: name.endswith("attn.hook_pattern"), lambda x, hook: patterns.append(x)))
        with self.hooks(hooks):
            return ModelOutput(self.logits(inputs, read), patterns)

    def _override_hook(self, heads: dict[int, torch.Tensor | str]):
        def replace(pattern: torch.Tensor, hook: HookPoint) -> torch.Tensor:
            pattern = pattern.clone()
            for head, kind in heads.items():
                pattern[:, :, head] = override_pattern(kind, pattern[:, :, head], self.causal)
            return pattern

        return replace

    # --- the run axis ---------------------------------------------------------------------------------
    def run_state_dict(self, run: int) -> dict[str, torch.Tensor]:
        """Run ``run``'s weights under TransformerLens-style names, without the run axis."""
        return {name: p.detach()[run].contiguous() for name, p in self.named_parameters()}

    def load_run_state_dict(self, run: int, state: dict[str, torch.Tensor]) -> None:
        expected = {name: tuple(p.shape[1:]) for name, p in self.named_parameters()}
        got = {name: tuple(t.shape) for name, t in state.items()}
        if expected != got:
            diff = sorted(set(expected.items()) ^ set(got.items()))
            raise ValueError(f"checkpoint does not fit the model config: {diff[:4]}")
        with torch.no_grad():
            for name, p in self.named_parameters():
                p[run] = state[name]

    def select_runs(self, keep: torch.Tensor) -> None:
        """Keep only the runs at indices ``keep`` (in that order)."""
        for name, p in list(self.named_parameters()):
            owner, _, attr = name.rpartition(".")
            # A new Parameter (not a reshaped .data): autograd remembers the shape of the old one.
            self.get_submodule(owner).register_parameter(attr, torch.nn.Parameter(p.detach()[keep].contiguous()))
        for module in self.modules():  # buffers laid out by run (the embedding's run index) follow
            if hasattr(module, "select_run_buffers"):
                module.select_run_buffers(keep)
        self.n_runs = int(keep.numel())


def _by_layer(override: Override) -> dict[int, dict[int, torch.Tensor | str]]:
    out: dict[int, dict[int, torch.Tensor | str]] = {}
    for (layer, head), kind in override.items():
        out.setdefault(layer, {})[head] = kind
    return out
