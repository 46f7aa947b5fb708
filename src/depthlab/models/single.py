"""One run as a model of its own: inputs ``[batch, n]``, logits ``[batch, C]``, no run axis anywhere.

The families are written for a group of runs (every parameter ``[R, …]``, inputs ``[R, B, n]``; see
:mod:`depthlab.models.base`). :class:`SingleRunModel` takes a one-run :class:`~depthlab.models.base.RunModule`
and shows it the way TransformerLens shows a model:

- its parameters are the run's own, without the run axis, under the same names (``embed.W_E``,
  ``blocks.0.attn.W_Q`` [heads, d_model, d_head], ``unembed.W_U``), so ``state_dict()`` is a TransformerLens
  state dict and ``model.blocks[0].attn.W_Q`` is a tensor of TransformerLens' shape; ``model.W_Q`` … ``model.W_O``
  stack them over layers ([n_layers, n_heads, …]; layers with fewer heads padded with zero heads), ``model.QK`` and
  ``model.OV`` are the circuits as factored matrices ([n_layers, n_heads, d_model, d_model]), ``model.W_E``,
  ``model.W_pos``, ``model.W_U`` the embeddings;
- ``model.cfg`` is the model in TransformerLens' config names (:class:`~depthlab.models.cfg.ModelConfig`);
- ``model(tokens)`` takes ``[batch, n]`` token ids (``[batch, n, d_in]`` vectors for vector tasks), or text in the
  task's vocabulary, and returns the logits at the read-out position, ``[batch, C]``; ``read="all"`` returns them
  at every position, ``[batch, n, C]``, as TransformerLens does (a tensor of positions picks some). Seed 001's
  attention-only model is not causal: there the logits at position i depend on every token, after i as well;
- ``to_tokens``, ``to_str_tokens``, ``to_string``, ``to_single_token`` read and write the task's vocabulary
  (:class:`~depthlab.models.tokens.Vocabulary`) when the model knows its task (``Store.load_model`` gives it);
- ``run_with_cache`` and ``run_with_hooks`` see every activation without the run axis (``hook_pattern``
  ``[batch, heads, query, key]``, ``hook_q`` ``[batch, pos, heads, d_head]``), and a hook's replacement is given
  its run axis back before the model goes on; backward hooks see gradients of the same shapes.

The forward pass is the family's own code (``torch.func.functional_call`` with each parameter given its run
axis back as a view), so the logits are the stacked model's for that run, and gradients reach the parameters
(when they require them: ``Store.load_model(requires_grad=False)`` gives a model that takes none).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.func import functional_call

from .base import RunModule
from .cfg import ModelConfig
from .factored import Circuits
from .hooks import HookedModule, HookFn, HookPoint
from .tokens import Vocabulary

RETURN_TYPES = ("logits", "loss", "both", None)  # TransformerLens' forward(return_type=…)


def _per_layer_view(name: str) -> property:
    """``model.<name>``: ``blocks.{l}.attn.<name>`` of every layer, stacked ([n_layers, n_heads, …])."""
    return property(lambda self: self._per_layer(name), doc=f"blocks.{{l}}.attn.{name} stacked over layers")


class SingleRunModel(Circuits, HookedModule):
    """One run of a family, without the run axis (see the module's docstring). ``spec`` and ``shapes`` are the
    run's model spec and task shapes, ``task`` its task where known; ``hook_names`` lists every hook point."""

    def __init__(self, stacked: RunModule, task: Any = None) -> None:
        super().__init__()
        if stacked.n_runs != 1:
            raise ValueError(f"SingleRunModel takes a model of one run (got {stacked.n_runs} runs)")
        self.spec, self.shapes, self.task = stacked.spec, stacked.shapes, task
        has_vocab = task is not None and not getattr(task, "input_dim", None)
        self.vocabulary = Vocabulary(task.vocab, task.labels, task.name) if has_vocab else None
        self._stacked = (stacked,)  # in a tuple: the family's root module runs the forward pass but is no child
        # The family's parts become this module's parts (the same objects): TransformerLens' names, same hooks.
        for name, child in stacked.named_children():
            self.add_module(name, child)
        for name, buffer in stacked.named_buffers(recurse=False):
            self.register_buffer(name, buffer, persistent=name not in stacked._non_persistent_buffers_set)
        for name, p in list(stacked.named_parameters()):
            owner, _, attr = name.rpartition(".")
            squeezed = torch.nn.Parameter(p.detach()[0], requires_grad=p.requires_grad)
            stacked.get_submodule(owner).register_parameter(attr, squeezed)
        self.setup_hooks()

    @property
    def cfg(self) -> ModelConfig:
        return self._stacked[0].cfg

    def forward(self, tokens: torch.Tensor | np.ndarray | str | list[str], read: torch.Tensor | str | None = None,
                return_type: str | None = "logits", labels: Any = None
                ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None:
        """Logits ``[batch, C]`` for ``tokens`` ``[batch, n]`` or text (``[batch, P, C]`` at the positions ``read``;
        ``read="all"``: every position).

        ``return_type`` as TransformerLens': ``"logits"``, ``"loss"`` (a scalar that takes gradients), ``"both"``
        (logits, loss) or None. A task model predicts its task's labels, not the next token, so the loss is the
        task's training loss (``task.loss``: cross-entropy for class labels) of the logits against ``labels``,
        the task's targets (``task.sample(n, rng).targets``: ``[batch]`` class ids, or what the task's objective
        reads), averaged over the batch and read positions."""
        if return_type not in RETURN_TYPES:
            raise ValueError(f"return_type: must be one of {', '.join(map(str, RETURN_TYPES))} (got {return_type!r})")
        logits = self._logits(tokens, read)
        if return_type in ("loss", "both"):
            loss = self._loss(logits, labels)
            return loss if return_type == "loss" else (logits, loss)
        return logits if return_type == "logits" else None

    def _loss(self, logits: torch.Tensor, labels: Any) -> torch.Tensor:
        """The task's loss (``task.loss``) of ``logits`` against ``labels``, averaged."""
        if labels is None:
            raise ValueError("return_type='loss': give labels=, the task's targets for these inputs (a task model "
                             "predicts its labels, not the next token)")
        kind = getattr(self.task, "loss", "cross_entropy")
        labels = torch.as_tensor(labels, device=logits.device)
        if kind == "cross_entropy":
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        if kind == "mse":
            return torch.nn.functional.mse_loss(logits, labels.to(logits.dtype))
        if kind == "bce":
            return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        raise ValueError(f"return_type='loss': the task's loss {kind!r} is computed by "
                         "depthlab.training.objectives.per_run_loss(logits[None], labels[None], task.loss)")

    def _logits(self, tokens: torch.Tensor | np.ndarray | str | list[str],
                read: torch.Tensor | str | None) -> torch.Tensor:
        if isinstance(tokens, str) or (isinstance(tokens, list) and tokens and isinstance(tokens[0], str)):
            tokens = self.to_tokens(tokens)
        tokens = torch.as_tensor(tokens)
        vectors = tokens.is_floating_point()
        if tokens.dim() != (3 if vectors else 2):
            shape = "[batch, n, d_in] vectors" if vectors else "[batch, n] token ids"
            raise ValueError(f"inputs: expected {shape}, got shape {list(tokens.shape)}")
        n, n_ctx = tokens.shape[1], self.shapes.seq_len
        if n > n_ctx or (n != n_ctx and self._stacked[0].fixed_length):
            allowed = f"exactly {n_ctx}" if self._stacked[0].fixed_length else f"at most {n_ctx}"
            raise ValueError(f"inputs: {n} positions; this {self.spec.name} model takes {allowed} "
                             f"(cfg.n_ctx, the length of its task)")
        with_run_axis: dict[str, Any] = {name: p.unsqueeze(0) for name, p in self.named_parameters()}
        with_run_axis.update(self.named_buffers())
        out = functional_call(self._stacked[0], with_run_axis, (tokens.unsqueeze(0),), {"read": read})
        return out.outputs[0]

    def logits_for(self, inputs: Any, **kwargs: Any) -> torch.Tensor:
        return self(inputs, **kwargs)

    def adapt_hook(self, fn: HookFn, dir: str = "fwd") -> HookFn:
        """``fn`` as the stacked model calls it: it sees the activation (or gradient) of this run, and its result
        gets the run axis back. A forward hook's activation is a view the model then goes on from, so what a hook
        keeps of it (``retain_grad``, ``run_with_cache(detach=False)``) is on the path of the gradients."""

        def one_run(activation: torch.Tensor, hook: HookPoint) -> torch.Tensor | None:
            view = activation[0]
            out = fn(view, hook)
            if dir == "bwd" or hook.read_only:  # a gradient is only replaced when asked; a read-only point refuses
                return None if out is None else out.unsqueeze(0)
            return (view if out is None else out).unsqueeze(0)

        return one_run

    # --- the task's vocabulary ---------------------------------------------------------------------------
    def _vocabulary(self, call: str) -> Vocabulary:
        if self.vocabulary is None:
            why = "takes vector inputs" if self.task is not None else "was built without its task"
            raise ValueError(f"{call}: this model {why}; Store.load_model gives a token task's model its vocabulary")
        return self.vocabulary

    def to_tokens(self, text: str | list[str], prepend_bos: bool | None = None) -> torch.Tensor:
        """Token ids [batch, n] of text in the task's vocabulary (:meth:`Vocabulary.to_tokens`)."""
        return self._vocabulary("to_tokens").to_tokens(text, prepend_bos)

    def to_str_tokens(self, tokens: Any, prepend_bos: bool | None = None) -> list[str] | list[list[str]]:
        """The tokens of text or of token ids as strings (:meth:`Vocabulary.to_str_tokens`)."""
        return self._vocabulary("to_str_tokens").to_str_tokens(tokens, prepend_bos)

    def to_string(self, tokens: Any) -> str | list[str]:
        """Token ids as text, tokens separated by spaces (:meth:`Vocabulary.to_string`)."""
        return self._vocabulary("to_string").to_string(tokens)

    def to_single_token(self, string: str) -> int:
        return self._vocabulary("to_single_token").to_single_token(string)

    def tokens_to_residual_directions(self, tokens: Any) -> torch.Tensor:
        """The unembedding columns of labels ([…, d_model]): ids, a tensor of ids, or one label as a string."""
        if isinstance(tokens, str):
            tokens = self._vocabulary("tokens_to_residual_directions").label_id(tokens)
        return self.W_U[:, torch.as_tensor(tokens, device=self.W_U.device)].movedim(0, -1)

    # --- TransformerLens' weight views -------------------------------------------------------------------
    @property
    def W_E(self) -> torch.Tensor:
        """Token embedding [d_vocab, d_model] (seed 001's attention-only model: the fixed one-hot table)."""
        return self.embed.W_E if hasattr(self, "embed") else self._stacked[0].W_E

    @property
    def W_pos(self) -> torch.Tensor:
        """Positions added to the tokens [n_ctx, d_model] (seed 001: the one-hot positions it concatenates)."""
        return self._stacked[0].W_pos

    @property
    def W_U(self) -> torch.Tensor:
        return self.unembed.W_U

    @property
    def b_U(self) -> torch.Tensor:
        return self.unembed.b_U if hasattr(self.unembed, "b_U") else self.W_U.new_zeros(self.W_U.shape[-1])

    def _per_layer(self, name: str) -> torch.Tensor:
        """``blocks.{l}.attn.<name>`` stacked over layers, layers with fewer heads padded with zero heads."""
        weights = [getattr(getattr(block, "attn", None), name, None) for block in getattr(self, "blocks", [])]
        if not weights or any(w is None for w in weights):
            raise AttributeError(f"{name}: a {self.spec.name} model has no attention weights {name}")
        heads = max(w.shape[0] for w in weights)
        return torch.stack([torch.cat([w, w.new_zeros(heads - w.shape[0], *w.shape[1:])]) for w in weights])

    W_Q = _per_layer_view("W_Q")
    W_K = _per_layer_view("W_K")
    W_V = _per_layer_view("W_V")
    W_O = _per_layer_view("W_O")
