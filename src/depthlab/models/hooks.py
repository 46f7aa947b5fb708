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

A backward hook (``dir="bwd"``) is ``fn(grad, hook) -> tensor | None``: ``grad`` is the gradient of whatever is
differentiated with respect to the hook point's output, and a returned tensor replaces it (TransformerLens passes
the same gradient; there a returned value is ignored). It is attached to the activation when the forward pass
computes it (a tensor hook), so it fires in any later ``backward()`` of that forward pass, even one that runs after
``run_with_hooks`` has removed its hooks; an activation that depends on no parameter (seed 001's one-hot
embedding) is made to take a gradient for it.

:class:`HookedModule` gives a model the TransformerLens calls::

    logits, cache = model.run_with_cache(tokens, names_filter=["blocks.0.attn.hook_pattern"])
    logits = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_pattern", ablate)])
    with model.hooks([(lambda name: name.endswith("hook_z"), record)], bwd_hooks=[("hook_embed", see_grad)]):
        model(tokens).sum().backward()
    model.add_hook("blocks.0.attn.hook_pattern", ablate)  # until model.reset_hooks()
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from .cache import ActivationCache

HookFn = Callable[[torch.Tensor, "HookPoint"], "torch.Tensor | None"]
NameFilter = str | Sequence[str] | Callable[[str], bool] | None
DIRECTIONS = ("fwd", "bwd")


class HookPoint(torch.nn.Module):
    """An identity in the forward pass that runs the hooks attached to it, in the order they were attached.

    ``fns`` is what runs in the forward pass: the forward hooks, then, while backward hooks (``bwd_fns``) are
    attached, the one function that attaches them to the activation (so an unused point still costs one loop over
    an empty list)."""

    def __init__(self, read_only: bool = False) -> None:
        super().__init__()
        self.name = ""  # the full dotted name, set by the model (HookedModule.setup_hooks)
        self.read_only = read_only
        self.fns: list[HookFn] = []
        self.bwd_fns: list[HookFn] = []
        self.permanent: list[HookFn] = []  # hooks that reset_hooks() keeps (is_permanent=True)
        self.attacher: HookFn = self._attach_backward_hooks

    @property
    def active(self) -> bool:
        return bool(self.fns)

    @property
    def fwd_fns(self) -> list[HookFn]:
        return [fn for fn in self.fns if fn is not self.attacher]

    def _arrange(self, fwd: list[HookFn]) -> None:
        self.fns[:] = fwd + ([self.attacher] if self.bwd_fns else [])

    def layer(self) -> int | None:
        """The block this point belongs to (``blocks.2.attn.hook_q`` -> 2), or None outside the blocks."""
        parts = self.name.split(".")
        return int(parts[1]) if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() else None

    def add_hook(self, fn: HookFn, dir: str = "fwd", is_permanent: bool = False, prepend: bool = False) -> None:
        """Attach ``fn`` (``dir``: fwd or bwd); ``prepend`` runs it before the hooks already attached."""
        if dir not in DIRECTIONS:
            raise ValueError(f"dir must be fwd or bwd (got {dir!r})")
        if dir == "bwd" and self.read_only:
            raise ValueError(f"{self.name} is computed beside the model's own computation: no gradient reaches it")
        fwd = self.fwd_fns
        fns = fwd if dir == "fwd" else self.bwd_fns
        fns.insert(0, fn) if prepend else fns.append(fn)
        if is_permanent:
            self.permanent.append(fn)
        self._arrange(fwd)

    def remove_hook(self, fn: HookFn) -> None:
        fwd = self.fwd_fns
        for fns in (fwd, self.bwd_fns, self.permanent):
            if fn in fns:
                fns.remove(fn)
        self._arrange(fwd)

    def remove_hooks(self, dir: str = "both", including_permanent: bool = False) -> None:
        """Detach the hooks of direction ``dir`` (fwd, bwd or both), the permanent ones only when asked."""
        fwd = self.fwd_fns
        for direction, fns in (("fwd", fwd), ("bwd", self.bwd_fns)):
            if dir in (direction, "both"):
                fns[:] = [fn for fn in fns if fn in self.permanent and not including_permanent]
        self.permanent = [fn for fn in self.permanent if fn in fwd or fn in self.bwd_fns]
        self._arrange(fwd)

    def _attach_backward_hooks(self, x: torch.Tensor, hook: HookPoint) -> torch.Tensor:
        """Attach the backward hooks to ``x``, the point's output (the gradient they see is with respect to it)."""
        if not torch.is_grad_enabled():
            return x
        if not x.requires_grad:  # a constant (seed 001's one-hot embedding): its gradient is computed for the hooks
            x = x.detach().requires_grad_()
        for fn in self.bwd_fns:
            x.register_hook(lambda grad, fn=fn: fn(grad, self))
        return x

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


def hooked(module: torch.nn.Module) -> bool:
    """Whether a hook is attached to any hook point inside ``module`` (then its parts show every intermediate; else
    they may compute several as one). The points are fixed once a module is built: listed at the first call."""
    if "_points" not in module.__dict__:
        module.__dict__["_points"] = [m for m in module.modules() if isinstance(m, HookPoint)]
    return any(point.fns for point in module.__dict__["_points"])


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

    def add_hook(self, name: NameFilter, hook: HookFn, dir: str = "fwd", is_permanent: bool = False,
                 prepend: bool = False) -> None:
        """Attach ``hook`` to the points ``name`` selects (a name, a list or a filter) until :meth:`reset_hooks`
        (``is_permanent``: until ``reset_hooks(including_permanent=True)``); ``dir="bwd"`` for a backward hook."""
        adapted = self.adapt_hook(hook, dir)
        for point in self.hook_points(name):
            point.add_hook(adapted, dir, is_permanent, prepend)

    def reset_hooks(self, clear_contexts: bool = True, direction: str = "both", including_permanent: bool = False
                    ) -> None:
        """Detach every hook of ``direction`` (fwd, bwd or both) from every point; permanent ones only when
        ``including_permanent``. (``clear_contexts`` is TransformerLens'; depthlab's hooks keep no context.)"""
        if direction not in ("fwd", "bwd", "both"):
            raise ValueError(f"direction must be fwd, bwd or both (got {direction!r})")
        for point in self.hook_dict.values():
            point.remove_hooks(direction, including_permanent)

    @contextlib.contextmanager
    def hooks(self, fwd_hooks: Sequence[tuple[NameFilter, HookFn]] = (),
              bwd_hooks: Sequence[tuple[NameFilter, HookFn]] = (), reset_hooks_end: bool = True
              ) -> Iterator[HookedModule]:
        """Attach ``fwd_hooks`` and ``bwd_hooks`` ((names or filter, fn) pairs) for the duration of the block, then
        remove them (unless ``reset_hooks_end`` is False). Backward hooks already attached to a forward pass's
        activations still fire in its backward pass after the block."""
        attached: list[tuple[HookPoint, HookFn]] = []
        try:
            for direction, pairs in (("fwd", fwd_hooks), ("bwd", bwd_hooks)):
                for names, fn in pairs:
                    adapted = self.adapt_hook(fn, direction)
                    for point in self.hook_points(names):
                        point.add_hook(adapted, direction)
                        attached.append((point, adapted))
            yield self
        finally:
            if reset_hooks_end:
                for point, fn in attached:
                    point.remove_hook(fn)

    def adapt_hook(self, fn: HookFn, dir: str = "fwd") -> HookFn:
        """The function attached for ``fn`` (itself here; a one-run view of a model drops the run axis)."""
        return fn

    def logits_for(self, inputs: Any, **kwargs: Any) -> torch.Tensor:
        """The logits of the forward pass (what run_with_hooks and run_with_cache return)."""
        return self(inputs, **kwargs).outputs

    def run_with_hooks(self, inputs: Any, fwd_hooks: Sequence[tuple[NameFilter, HookFn]] = (),
                       bwd_hooks: Sequence[tuple[NameFilter, HookFn]] = (), reset_hooks_end: bool = True,
                       **kwargs: Any) -> torch.Tensor:
        """The forward pass with ``fwd_hooks`` (and ``bwd_hooks``, for a later ``backward()``) attached; returns
        the logits. ``reset_hooks_end=False`` leaves them attached (:meth:`reset_hooks` removes them)."""
        with self.hooks(fwd_hooks, bwd_hooks, reset_hooks_end):
            return self.logits_for(inputs, **kwargs)

    def run_with_cache(self, inputs: Any, names_filter: NameFilter = None, detach: bool = True,
                       names: NameFilter = None, **kwargs: Any) -> tuple[torch.Tensor, ActivationCache]:
        """The forward pass, recording every activation ``names_filter`` selects (default: all; ``names`` is the
        same argument under depthlab's older name); returns (logits, cache).

        The cache maps hook names to tensors (detached unless ``detach=False``: then a loss of them has gradients,
        and ``torch.autograd.grad(loss, cache[name])`` works at every point a gradient reaches), in the order they
        were computed (:class:`~depthlab.models.cache.ActivationCache`: ``cache["pattern", 0]`` and TransformerLens'
        helpers). Asking for a point that a family computes only on demand (per-head values, recurrent states)
        computes it.

        With ``detach=False`` an activation that depends on no parameter that takes a gradient (seed 001's one-hot
        embeddings and positions, the first layer's keys, which are its input; any activation of a model loaded
        with ``requires_grad=False``) is kept as a tensor that requires a gradient, and the model goes on from it:
        in TransformerLens the same points depend on ``W_E`` and ``W_pos``, so its gradients reach all of them.
        """
        cache = ActivationCache(model=self)

        def record(x: torch.Tensor, hook: HookPoint) -> torch.Tensor | None:
            if detach:
                cache[hook.name] = x.detach()
                return None
            if torch.is_grad_enabled() and x.is_floating_point() and not x.requires_grad and not hook.read_only:
                x = x.detach().requires_grad_()  # a leaf on the gradients' path: the forward pass continues from it
                cache[hook.name] = x
                return x
            cache[hook.name] = x
            return None

        with self.hooks([(names_filter if names is None else names, record)]):
            logits = self.logits_for(inputs, **kwargs)
        return logits, cache
