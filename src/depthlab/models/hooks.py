"""Hook points: named places in the forward pass where an activation can be read or replaced.

Every intermediate a researcher looks at passes through a :class:`HookPoint`, named as TransformerLens names it
(``hook_embed``, ``blocks.0.hook_resid_pre``, ``blocks.0.attn.hook_q``, ``blocks.0.attn.hook_pattern``,
``blocks.0.hook_resid_post``, …; the recurrent families add ``blocks.{l}.hook_state``). A hook is a function
``fn(activation, hook) -> tensor | None``, as in TransformerLens: returning a tensor replaces the activation,
returning None leaves it. Activations carry the run axis first (``[runs, batch, …]``), except on a one-run
model (:class:`depthlab.models.single.SingleRunModel`), whose hooks see ``[batch, …]`` as TransformerLens' do.

A hook point with nothing attached returns its input at once; it is a plain Python call, not an
``nn.Module`` call, so a model without hooks pays nothing measurable for them (the throughput benchmark checks).
Where a family computes an activation only when someone asks for it (the per-head values of seed 001's
attention, the recurrent state), it asks :attr:`HookPoint.active` first. Such "read-only" points (the state of a
recurrent layer, computed beside the parallel form) refuse replacement with a clear error.

:class:`HookedModule` gives a model the TransformerLens calls::

    logits, cache = model.run_with_cache(tokens, names=["blocks.0.attn.hook_pattern"])
    logits = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_pattern", ablate)])
    with model.hooks([(lambda name: name.endswith("hook_z"), record)]):
        model(tokens)
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

HookFn = Callable[[torch.Tensor, "HookPoint"], "torch.Tensor | None"]
NameFilter = str | Sequence[str] | Callable[[str], bool] | None
ALIASES = {"attn": "pattern", "scores": "attn_scores"}  # TransformerLens' short names that differ from the hook's


class ActivationCache(dict):
    """Hook name -> activation, also indexed as TransformerLens' ``ActivationCache`` is: ``cache["pattern", 1]``
    is ``cache["blocks.1.attn.hook_pattern"]``, ``cache["resid_post", 0]`` is ``blocks.0.hook_resid_post``, and
    ``cache["embed"]`` is ``cache["hook_embed"]``."""

    def __getitem__(self, key: str | tuple[str, int]) -> torch.Tensor:
        if isinstance(key, tuple):
            short, layer = key
            suffix = f"hook_{ALIASES.get(short, short)}"
            found = [name for name in self if name.startswith(f"blocks.{layer}.") and name.endswith(suffix)]
            if len(found) != 1:
                raise KeyError(f"{key!r}: {'no' if not found else len(found)} cached hooks of layer {layer} end in "
                               f"{suffix} (cached: {', '.join(self)})")
            key = found[0]
        elif key not in self and f"hook_{key}" in self:
            key = f"hook_{key}"
        return super().__getitem__(key)


class HookPoint(torch.nn.Module):
    """An identity in the forward pass that runs the hooks attached to it, in the order they were attached."""

    def __init__(self, read_only: bool = False) -> None:
        super().__init__()
        self.name = ""  # the full dotted name, set by the model (HookedModule.setup_hooks)
        self.read_only = read_only
        self.fns: list[HookFn] = []

    @property
    def active(self) -> bool:
        return bool(self.fns)

    def layer(self) -> int | None:
        """The block this point belongs to (``blocks.2.attn.hook_q`` -> 2), or None outside the blocks."""
        parts = self.name.split(".")
        return int(parts[1]) if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() else None

    def add_hook(self, fn: HookFn) -> None:
        self.fns.append(fn)

    def remove_hooks(self) -> None:
        self.fns.clear()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # not nn.Module.__call__: nothing to pay when unused
        for fn in self.fns:
            out = fn(x, self)
            if out is not None:
                if self.read_only:
                    raise ValueError(f"{self.name} is computed beside the model's own computation: it can be read "
                                     "(run_with_cache), not replaced")
                x = out
        return x

    def extra_repr(self) -> str:
        return self.name


class HookedModule(torch.nn.Module):
    """Base of a model with hook points: call :meth:`setup_hooks` at the end of ``__init__``."""

    hook_dict: dict[str, HookPoint]

    def setup_hooks(self) -> None:
        """Name every hook point by its place in the module tree and index them."""
        self.hook_dict = {}
        for name, module in self.named_modules():
            if isinstance(module, HookPoint):
                module.name = name
                self.hook_dict[name] = module

    @property
    def hook_names(self) -> list[str]:
        return list(self.hook_dict)

    def hook_points(self, names: NameFilter = None) -> list[HookPoint]:
        """The hook points ``names`` selects: None (all), one name, a list of names, or a filter ``fn(name)``.

        An unknown name raises ValueError naming the closest existing ones (a typo never passes silently).
        """
        if names is None:
            return list(self.hook_dict.values())
        if callable(names):
            return [point for name, point in self.hook_dict.items() if names(name)]
        wanted = [names] if isinstance(names, str) else list(names)
        for name in wanted:
            if name not in self.hook_dict:
                close = difflib.get_close_matches(name, self.hook_dict, n=3)
                hint = f"; did you mean {', '.join(close)}?" if close else ""
                raise ValueError(f"unknown hook point {name!r}{hint} (model.hook_names lists every one)")
        return [self.hook_dict[name] for name in wanted]

    @contextlib.contextmanager
    def hooks(self, fwd_hooks: Sequence[tuple[NameFilter, HookFn]] = ()) -> Iterator[HookedModule]:
        """Attach ``fwd_hooks`` ((names or filter, fn) pairs) for the duration of the block, then remove them."""
        attached: list[tuple[HookPoint, HookFn]] = []
        try:
            for names, fn in fwd_hooks:
                adapted = self.adapt_hook(fn)
                for point in self.hook_points(names):
                    point.add_hook(adapted)
                    attached.append((point, adapted))
            yield self
        finally:
            for point, fn in attached:
                point.fns.remove(fn)

    def adapt_hook(self, fn: HookFn) -> HookFn:
        """The function attached for ``fn`` (itself here; a one-run view of a model drops the run axis)."""
        return fn

    def logits_for(self, inputs: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """The logits of the forward pass (what run_with_hooks and run_with_cache return)."""
        return self(inputs, **kwargs).outputs

    def run_with_hooks(self, inputs: torch.Tensor, fwd_hooks: Sequence[tuple[NameFilter, HookFn]] = (),
                       **kwargs: Any) -> torch.Tensor:
        """The forward pass with ``fwd_hooks`` attached; returns the logits."""
        with self.hooks(fwd_hooks):
            return self.logits_for(inputs, **kwargs)

    def run_with_cache(self, inputs: torch.Tensor, names: NameFilter = None, detach: bool = True,
                       **kwargs: Any) -> tuple[torch.Tensor, ActivationCache]:
        """The forward pass, recording every activation ``names`` selects (default: all); returns (logits, cache).

        The cache maps hook names to tensors (detached unless ``detach=False``), in the order they were computed
        (:class:`ActivationCache`: ``cache["pattern", 0]`` works too). Asking for a point that a family computes
        only on demand (per-head values, recurrent states) computes it.
        """
        cache = ActivationCache()

        def record(x: torch.Tensor, hook: HookPoint) -> None:
            cache[hook.name] = x.detach() if detach else x

        with self.hooks([(names, record)]):
            logits = self.logits_for(inputs, **kwargs)
        return logits, cache
