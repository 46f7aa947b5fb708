"""One run as a model of its own: inputs ``[batch, n]``, logits ``[batch, C]``, no run axis anywhere.

The families are written for a group of runs (every parameter ``[R, …]``, inputs ``[R, B, n]``; see
:mod:`depthlab.models.base`). :class:`SingleRunModel` takes a one-run :class:`~depthlab.models.base.RunModule`
and shows it the way TransformerLens shows a model:

- its parameters are the run's own, without the run axis, under the same names (``embed.W_E``,
  ``blocks.0.attn.W_Q`` [heads, d_model, d_head], ``unembed.W_U``), so ``state_dict()`` is a TransformerLens
  state dict and ``model.blocks[0].attn.W_Q`` is a tensor of TransformerLens' shape;
- ``model(tokens)`` takes ``[batch, n]`` token ids (``[batch, n, d_in]`` vectors for vector tasks) and returns the
  logits at the read-out position, ``[batch, C]``;
- ``run_with_cache`` and ``run_with_hooks`` see every activation without the run axis (``hook_pattern``
  ``[batch, heads, query, key]``, ``hook_q`` ``[batch, pos, heads, d_head]``), and a hook's replacement is given
  its run axis back before the model goes on.

The forward pass is the family's own code (``torch.func.functional_call`` with each parameter given its run
axis back as a view), so the logits are the stacked model's for that run, and gradients reach the parameters.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.func import functional_call

from .base import RunModule
from .hooks import HookedModule, HookFn, HookPoint


class SingleRunModel(HookedModule):
    """One run of a family, without the run axis (see the module's docstring). ``spec`` and ``shapes`` are the
    run's model spec and task shapes; ``hook_names`` lists every hook point."""

    def __init__(self, stacked: RunModule) -> None:
        super().__init__()
        if stacked.n_runs != 1:
            raise ValueError(f"SingleRunModel takes a model of one run (got {stacked.n_runs} runs)")
        self.spec, self.shapes = stacked.spec, stacked.shapes
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

    def forward(self, tokens: torch.Tensor | np.ndarray, read: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``[batch, C]`` for ``tokens`` ``[batch, n]`` (``[batch, P, C]`` at the positions ``read``)."""
        tokens = torch.as_tensor(tokens)
        vectors = tokens.is_floating_point()
        if tokens.dim() != (3 if vectors else 2):
            shape = "[batch, n, d_in] vectors" if vectors else "[batch, n] token ids"
            raise ValueError(f"inputs: expected {shape}, got shape {list(tokens.shape)}")
        with_run_axis: dict[str, Any] = {name: p.unsqueeze(0) for name, p in self.named_parameters()}
        with_run_axis.update(self.named_buffers())
        out = functional_call(self._stacked[0], with_run_axis, (tokens.unsqueeze(0),), {"read": read})
        return out.outputs[0]

    def logits_for(self, inputs: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return self(inputs, **kwargs)

    def adapt_hook(self, fn: HookFn) -> HookFn:
        """``fn`` as the stacked model calls it: it sees the activation of this run, its result gets the run axis."""

        def one_run(activation: torch.Tensor, hook: HookPoint) -> torch.Tensor | None:
            out = fn(activation[0], hook)
            return None if out is None else out.unsqueeze(0)

        return one_run
