"""SGD and AdamW over parameters stacked on a run axis, each run with its own learning rate and step count.

``torch.optim`` takes one learning rate per tensor; a group of runs shares tensors, so the update is written
here with the learning rate (and the step count for Adam's bias correction) as a tensor over runs. The
arithmetic is torch's own (``torch.optim.SGD`` with dampening 0, ``torch.optim.AdamW``), elementwise, so a
run's update never depends on the other runs in its group; a test checks it against ``torch.optim``.
"""

from __future__ import annotations

import torch


class GroupOptimizer:
    def __init__(self, params: list[torch.nn.Parameter], lrs: list[float], kind: str, momentum: float = 0.0,
                 weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 grad_clip: float | None = None, warmup_steps: int = 0) -> None:
        self.params = params
        self.grad_clip = grad_clip
        self.warmup_steps = warmup_steps
        self.kind = kind
        self.momentum, self.weight_decay, self.betas, self.eps = momentum, weight_decay, betas, eps
        device = params[0].device if params else None  # the per-run rates and step counts live with the weights
        self.lr = torch.tensor(lrs, dtype=torch.float32, device=device)
        self.steps = torch.zeros(len(lrs), dtype=torch.float64, device=device)  # bias corrections need float64
        self.state: list[dict[str, torch.Tensor]] = [{} for _ in params]

    def _per_run(self, values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return values.to(like.dtype).view(-1, *([1] * (like.dim() - 1)))

    @torch.no_grad()
    def clip(self) -> None:
        """Scale each run's gradient so that its global norm (over all its parameters) is at most grad_clip."""
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = torch.stack([g.pow(2).flatten(1).sum(1) for g in grads]).sum(0).sqrt()
        scale = (self.grad_clip / (norm + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(self._per_run(scale, g))

    @torch.no_grad()
    def step(self) -> None:
        if self.grad_clip is not None:
            self.clip()
        self.steps += 1
        lrs = self.lr
        if self.warmup_steps:  # linear warm-up from lr / warmup_steps to lr
            lrs = lrs * (self.steps / self.warmup_steps).clamp(max=1.0).float()
        for p, state in zip(self.params, self.state, strict=True):
            if p.grad is None:
                continue
            lr = self._per_run(lrs, p)
            if self.kind == "sgd":
                grad = p.grad if self.weight_decay == 0 else p.grad + self.weight_decay * p
                if self.momentum:
                    buf = state.get("momentum_buffer")
                    buf = grad.clone() if buf is None else buf.mul_(self.momentum).add_(grad)
                    state["momentum_buffer"] = buf
                    grad = buf
                p.sub_(lr * grad)
            else:
                b1, b2 = self.betas
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                p.mul_(1 - lr * self.weight_decay)
                m.lerp_(p.grad, 1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                t = self.steps.view(-1, *([1] * (p.dim() - 1)))
                step_size = (lr.double() / (1 - b1**t)).to(p.dtype)
                denom = (v.sqrt() / (1 - b2**t).sqrt().to(p.dtype)).add_(self.eps)
                p.sub_(step_size * m / denom)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def select_runs(self, keep: torch.Tensor, params: list[torch.nn.Parameter]) -> None:
        """Keep only the runs at ``keep``; ``params`` are the model's parameters after the same selection."""
        self.params = params
        self.lr, self.steps = self.lr[keep], self.steps[keep]
        for state in self.state:
            for name, t in state.items():
                state[name] = t[keep].contiguous()

    def run_state_dict(self, run: int, names: list[str]) -> dict[str, torch.Tensor]:
        """Run ``run``'s optimizer state, keyed ``optimizer.<param name>.<state>`` (for safetensors)."""
        out = {"optimizer.steps": self.steps[run : run + 1].clone()}
        for name, state in zip(names, self.state, strict=True):
            for key, t in state.items():
                out[f"optimizer.{name}.{key}"] = t[run].contiguous()
        return out

    def load_run_state_dict(self, run: int, names: list[str], tensors: dict[str, torch.Tensor]) -> None:
        self.steps[run] = tensors["optimizer.steps"][0]
        for name, p, state in zip(names, self.params, self.state, strict=True):
            for key in ("momentum_buffer", "exp_avg", "exp_avg_sq"):
                saved = tensors.get(f"optimizer.{name}.{key}")
                if saved is None:
                    continue
                if key not in state:
                    state[key] = torch.zeros_like(p)
                state[key][run] = saved
