"""SGD and AdamW over parameters stacked on a run axis, each run with its own learning rate and step count.

``torch.optim`` takes one learning rate per tensor; a group of runs shares tensors, so the update is written
here with the learning rate (and the step count for Adam's bias correction) as a tensor over runs. The
arithmetic is torch's own (``torch.optim.SGD`` with dampening 0, ``torch.optim.AdamW``, clipping as
``torch.nn.utils.clip_grad_norm_``) up to the rounding of a product or two, elementwise, so a run's update never
depends on the other runs in its group; tests check it against ``torch.optim`` run by run, in float64. The
learning-rate schedule (``train.schedule``: constant, or cosine or linear decay to ``lr_min`` after the warm-up)
is ``torch.optim.lr_scheduler``'s, computed from the step count held on the device, so a captured CUDA graph
replays it.

The whole model is one update, whatever its number of parameter tensors. The optimizer owns the parameters'
memory: the parameters of each dtype become views of one ``[runs, N]`` buffer (a run's row holds all its weights,
each tensor in its own columns), and so do the optimizer's states. The gradients (``torch.autograd.grad``'s, handed
to ``step``, or the ``.grad`` that ``backward`` leaves) are gathered into a buffer of the same layout by one
``cat``, which the update then uses as scratch: autograd adds no gradient into a ``.grad`` (an operation and, on a
GPU, a kernel per parameter tensor that zeroing a buffer and accumulating into its views cost). What depends on
the step count is computed once per step for all runs, in float64 (warm-up factor and schedule, bias
corrections, clipping scale: vectors over runs, cast once to the parameters' dtype), and every weight is updated
by a handful of operations on the buffers: a step is the same few dozen ATen operations whatever the number of
parameter tensors, plus one view for the gather of each with more axes than [runs, size] (48 for AdamW with
clipping and warm-up and two such tensors, nested ones included; ``tests/test_optim.py``), where the per-tensor
loop made about 60 per tensor. Build the optimizer once the model is on its device and in its dtype (``Module.to``
after it would give the parameters memory the optimizer does not see); ``select_runs`` rebuilds the buffers when
runs leave.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

STATES = {"sgd": ("momentum_buffer",), "adamw": ("exp_avg", "exp_avg_sq")}
SCHEDULES = ("constant", "cosine", "linear")


class _Flat:
    """The parameters of one dtype as views of one [runs, N] buffer, with their gradients and states alike."""

    def __init__(self, params: list[torch.nn.Parameter], states: tuple[str, ...]) -> None:
        self.params = params
        runs = params[0].shape[0]
        self.dtype, self.device = params[0].dtype, params[0].device
        self.sizes = [math.prod(p.shape[1:]) for p in params]
        with torch.no_grad():
            self.data = torch.cat([p.detach().reshape(runs, size) for p, size in zip(params, self.sizes, strict=True)],
                                  dim=1)
        for p, view in zip(params, self.views(self.data), strict=True):
            p.data = view  # the parameter now lives in the buffer (same values)
        self.grad = torch.zeros_like(self.data)  # the gathered gradients, then the update's scratch
        self.buffers = {name: torch.zeros_like(self.data) for name in states}
        per_state = [self.views(b) for b in self.buffers.values()]
        self.state_views = [dict(zip(self.buffers, each, strict=True)) for each in zip(*per_state, strict=True)]
        if not states:
            self.state_views = [{} for _ in params]

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Each parameter's [runs, *shape] view of ``flat`` (its columns, in order)."""
        return [part.view(p.shape) for part, p in zip(flat.split(self.sizes, dim=1), self.params, strict=True)]

    def gather(self, grads: list[torch.Tensor | None]) -> None:
        """The parameters' gradients (in their order) into their columns of the buffer, in one ``cat``; a missing
        one counts as zeros (every family's parameters all get one in training)."""
        runs = self.grad.shape[0]
        parts = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, self.params, strict=True)]
        # [runs, size] already (a bias, a gain): as it is; else a view where the gradient is contiguous (one
        # operation; reshape would be two), a copy where it is not
        rows = [g if g.dim() == 2 else g.view(runs, size) if g.is_contiguous() else g.reshape(runs, size)
                for g, size in zip(parts, self.sizes, strict=True)]
        torch.cat(rows, dim=1, out=self.grad)


class GroupOptimizer:
    def __init__(self, params: list[torch.nn.Parameter], lrs: list[float], kind: str, momentum: float = 0.0,
                 weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 grad_clip: float | None = None, warmup_steps: int = 0, schedule: str = "constant",
                 total_steps: int = 0, lr_min: float = 0.0) -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule {schedule!r}: allowed {', '.join(SCHEDULES)}")
        self.grad_clip = grad_clip
        self.warmup_steps, self.schedule, self.lr_min = warmup_steps, schedule, lr_min
        self.decay_steps = max(total_steps - warmup_steps, 1)  # steps after the warm-up (the decay's length)
        self.kind = kind
        self.momentum, self.weight_decay, self.betas, self.eps = momentum, weight_decay, betas, eps
        device = params[0].device if params else None  # the per-run rates and step counts live with the weights
        self.lr = torch.tensor(lrs, dtype=torch.float64, device=device)
        self.span = self.lr - lr_min  # what a decaying schedule takes away from each run's rate
        self.steps = torch.zeros(len(lrs), dtype=torch.float64, device=device)  # bias corrections need float64
        self.compiled: tuple[Callable[[GroupOptimizer], None], ...] | None = None
        self._build(params)

    def _build(self, params: list[torch.nn.Parameter]) -> None:
        """Buffers for ``params`` (grouped by dtype), and the per-run vectors a step computes into."""
        self.params = params
        by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
        for p in params:
            by_dtype.setdefault(p.dtype, []).append(p)
        states = STATES[self.kind] if self.kind == "adamw" or self.momentum else ()
        self.flats = [_Flat(group, states) for group in by_dtype.values()]
        position = {id(p): i for i, p in enumerate(params)}
        self.orders = [[position[id(p)] for p in flat.params] for flat in self.flats]  # each buffer's, in params
        views = {id(p): v for flat in self.flats for p, v in zip(flat.params, flat.state_views, strict=True)}
        self.state: list[dict[str, torch.Tensor]] = [views[id(p)] for p in params]
        runs, device = len(self.lr), self.lr.device
        # this step's per-run factors in float64 (rows: lr, then the kind's own), and as each dtype ([runs, 1])
        self.coef64 = torch.zeros(4, runs, dtype=torch.float64, device=device)
        self.one = torch.ones((), dtype=torch.float64, device=device)
        self.rows64 = self.coef64.unbind(0)
        self.coef = {f.dtype: torch.zeros(4, runs, 1, dtype=f.dtype, device=device) for f in self.flats}
        self.rows = {dtype: c.unbind(0) for dtype, c in self.coef.items()}
        self.coef_rows = [c.view(4, runs) for c in self.coef.values()]  # what each step copies coef64 into
        # the update's constants as 0-d tensors of each dtype: a Python float there is wrapped into a float64 tensor
        # and cast at every use (four operations); the same value, rounded once to the dtype here. Not for half
        # dtypes: they compute with a Python number in float32, and rounding β₂ = 0.99 to bfloat16 would change it
        numbers = (self.betas[1], self.eps, self.momentum)
        self.constants = {f.dtype: torch.tensor(numbers, dtype=f.dtype, device=device).unbind(0)
                          if f.dtype in (torch.float32, torch.float64) else numbers for f in self.flats}
        self.zero_grad()

    def clip(self) -> None:
        """Scale each run's gradient so that its global norm (over all its parameters) is at most grad_clip,
        as ``torch.nn.utils.clip_grad_norm_`` computes it: min(clip / (norm + 1e-6), 1) (called by :meth:`step`)."""
        norms = [torch.linalg.vector_norm(flat.grad, dim=1) for flat in self.flats]
        if len(norms) > 1:  # parameters of several dtypes: the norm of the per-dtype norms
            norms = [torch.linalg.vector_norm(torch.stack([n.to(self.lr.dtype) for n in norms]), dim=0)]
        norm = norms[0]
        scale = norm.add_(1e-6).reciprocal_().mul_(self.grad_clip).clamp_(max=1.0).unsqueeze(1)
        for flat in self.flats:
            flat.grad.mul_(scale if scale.dtype == flat.dtype else scale.to(flat.dtype))

    @torch.no_grad()
    def _scheduled(self, lr: torch.Tensor, scratch: torch.Tensor) -> None:
        """Step t's learning rate into ``lr`` (t = ``steps``, counted from 1), for all runs at once, from tensors
        only (a CUDA graph replays it with the step count it finds): the warm-up factor min(t / W, 1) times, for a
        decaying schedule, ``lr_min + (lr - lr_min) · d(p)`` with p = clamp((t - 1 - W) / (T - W), 0, 1) and
        d = (1 + cos πp) / 2 (cosine) or 1 - p (linear): ``torch.optim.lr_scheduler``'s ``CosineAnnealingLR`` /
        ``LinearLR`` over T - W steps, started after W warm-up steps (``SequentialLR``)."""
        if self.schedule == "constant":
            lr.copy_(self.lr)
        else:
            # floats, not ints: an int is wrapped into an int64 tensor and cast to float64 at every step
            torch.sub(self.steps, float(1 + self.warmup_steps), out=lr).div_(float(self.decay_steps)).clamp_(0.0, 1.0)
            if self.schedule == "cosine":
                lr.mul_(math.pi).cos_().add_(1.0).mul_(0.5)
            else:
                lr.neg_().add_(1.0)
            lr.mul_(self.span).add_(self.lr_min)
        if self.warmup_steps:  # linear warm-up from lr / warmup_steps to lr
            lr.mul_(torch.div(self.steps, float(self.warmup_steps), out=scratch).clamp_(max=1.0))

    @torch.no_grad()
    def _coefficients(self) -> None:
        """This step's per-run learning rate (after warm-up) and the kind's per-run factors, once for all."""
        self.steps.add_(self.one)  # a tensor: a Python number would be wrapped into one at every step
        lr, a, b, c = self.rows64
        self._scheduled(lr, a)
        if self.kind == "sgd":
            torch.neg(lr, out=a)  # -lr
        else:
            b1, b2 = self.betas
            torch.pow(b1, self.steps, out=a).neg_().add_(self.one)  # 1 - b1^t (a tensor 1: no int to cast)
            torch.div(lr, a, out=a).neg_()  # -lr / (1 - b1^t): the step size, negated
            torch.pow(b2, self.steps, out=b).neg_().add_(self.one).sqrt_()  # sqrt(1 - b2^t)
            torch.mul(lr, -self.weight_decay, out=c).add_(self.one)  # 1 - lr * weight_decay
        for coef in self.coef_rows:
            coef.copy_(self.coef64)  # one cast per dtype

    def compile(self, backend: str | None) -> None:
        """Compile the update (clipping, then the per-run factors and every buffer's arithmetic) with
        ``torch.compile`` and this ``backend`` (``train.compile``), or go back to the eager update (None).

        The fused optimizer: Inductor fuses each buffer's handful of element-wise operations into a kernel or two.
        The per-run rates and step counts are tensors on the device (inputs of the compiled graph, not constants),
        so a new step needs no recompile and a CUDA graph replays it. Shapes: static at first (the group's full
        size, the one most steps see, gets specialised kernels); when runs leave, TorchDynamo's automatic dynamic
        shapes recompile once with the run axis symbolic, which serves every later group size (but 1) without
        another recompile. The class's functions, not bound methods: no reference cycle through ``self``. Clipping
        is compiled on its own: Inductor's C++ backend (the CPU's) fails to compile a row reduction (the clipping
        norm) fused with the buffers' in-place updates after it (``KeyError: 'bufN'``, seen with torch 2.13.0's CPU
        build); on a GPU both graphs are inside the step's one CUDA graph anyway."""
        self.compiled = None if backend is None else tuple(
            torch.compile(fn, backend=backend, dynamic=None) for fn in (GroupOptimizer.clip, GroupOptimizer.update))

    @torch.no_grad()
    def step(self, grads: Sequence[torch.Tensor | None] | None = None) -> None:
        """One update from ``grads``, the parameters' gradients in their order (what ``torch.autograd.grad``
        returns; None for a parameter without one), or, without them, from each parameter's ``.grad`` (set by
        ``backward`` or by hand), which is then cleared."""
        if grads is None:
            grads = [p.grad for p in self.params]
            self.zero_grad()
        for flat, order in zip(self.flats, self.orders, strict=True):
            flat.gather([grads[i] for i in order])
        clip, update = self.compiled or (GroupOptimizer.clip, GroupOptimizer.update)
        if self.grad_clip is not None:
            clip(self)
        update(self)

    def update(self) -> None:
        """This step's update of every buffer, from the (clipped) gradients in them (compiled by :meth:`compile`).
        Like :meth:`clip`, called by :meth:`step` only, under its ``no_grad``: not decorated with it themselves,
        for the decorator's wrapper would be the one code object TorchDynamo compiles for both, and their cache
        entries (two per group size) would fill its recompile limit, after which it runs them uncompiled."""
        self._coefficients()
        for flat in self.flats:
            _, a, b, c = self.rows[flat.dtype]
            beta2, eps, momentum = self.constants[flat.dtype]
            p, g = flat.data, flat.grad
            if self.kind == "sgd":
                if self.weight_decay:
                    g.add_(p, alpha=self.weight_decay)
                if self.momentum:
                    g = flat.buffers["momentum_buffer"].mul_(momentum).add_(g)
                p.addcmul_(g, a)  # p - lr · g
            else:
                b1, b2 = self.betas
                m, v = flat.buffers["exp_avg"], flat.buffers["exp_avg_sq"]
                if self.weight_decay:
                    p.mul_(c)
                m.lerp_(g, 1 - b1)
                v.mul_(beta2).addcmul_(g, g, value=1 - b2)
                # p - step_size · m / (sqrt(v) / sqrt(1 - b2^t) + eps), the step size folded into the
                # denominator, which is written over the gradient (read for the last time above)
                p.addcdiv_(m, torch.sqrt(v, out=g).div_(b).add_(eps).div_(a))

    def zero_grad(self) -> None:
        """Clear every ``.grad`` (no operation: :meth:`step` gathers the gradients into the buffers itself)."""
        for p in self.params:
            p.grad = None

    def select_runs(self, keep: torch.Tensor, params: list[torch.nn.Parameter]) -> None:
        """Keep only the runs at ``keep``; ``params`` are the model's parameters after the same selection."""
        kept = [{name: t[keep] for name, t in flat.buffers.items()} for flat in self.flats]
        self.lr, self.span, self.steps = self.lr[keep], self.span[keep], self.steps[keep]
        self._build(params)
        for flat, buffers in zip(self.flats, kept, strict=True):
            for name, t in buffers.items():
                flat.buffers[name].copy_(t)

    def run_state_dict(self, run: int, names: list[str]) -> dict[str, torch.Tensor]:
        """Run ``run``'s optimizer state, keyed ``optimizer.<param name>.<state>`` (for safetensors)."""
        out = {"optimizer.steps": self.steps[run : run + 1].clone()}
        for name, state in zip(names, self.state, strict=True):
            for key, t in state.items():
                out[f"optimizer.{name}.{key}"] = t[run].contiguous()
        return out

    def load_run_state_dict(self, run: int, names: list[str], tensors: dict[str, torch.Tensor]) -> None:
        """Run ``run``'s state from ``run_state_dict``'s tensors; a state the checkpoint lacks starts at zero
        (SGD's momentum buffer at zero is what its first step makes of it)."""
        self.steps[run] = tensors["optimizer.steps"][0]
        for name, state in zip(names, self.state, strict=True):
            for key, t in state.items():
                saved = tensors.get(f"optimizer.{name}.{key}")
                t[run] = 0.0 if saved is None else saved
