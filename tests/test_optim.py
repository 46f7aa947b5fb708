"""The group optimizer (one update over every parameter tensor, issue 29) against ``torch.optim``, run by run.

In float64, so that the only differences are the order of a product or two: each run of a group trains a few
parameter tensors of different shapes with its own learning rate, and must follow ``torch.optim.SGD`` /
``torch.optim.AdamW`` with ``clip_grad_norm_`` and a linear warm-up (``LambdaLR``) on its own copy, including
after other runs have left the group.
"""

import pytest
import torch

from depthlab.training.optim import GroupOptimizer
from lr_schedules import torch_schedule

SHAPES = [(4, 5), (5,), (2, 3, 3)]
LRS = [0.1, 0.03, 0.01, 0.003]


def stacked_params(runs: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(runs, *s, generator=g, dtype=torch.float64)) for s in SHAPES]


def reference(params, lrs, kind, extra, clip, warmup, schedule="constant", total=0, lr_min=0.0):
    """One torch.optim optimizer (and its torch.optim.lr_scheduler) per run, on copies of the run's rows."""
    runs = []
    for r, lr in enumerate(lrs):
        own = [torch.nn.Parameter(p.detach()[r].clone()) for p in params]
        cls = torch.optim.SGD if kind == "sgd" else torch.optim.AdamW
        opt = cls(own, lr=lr, foreach=False, **extra)
        runs.append((own, opt, torch_schedule(opt, warmup, schedule, total, lr_min)))
    return runs


def step_reference(run, grads, clip):
    own, opt, sched = run
    for p, g in zip(own, grads, strict=True):
        p.grad = g.clone()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(own, clip)
    opt.step()
    if sched is not None:
        sched.step()


CASES = [
    ("sgd", {}, None, 0),
    ("sgd", {"momentum": 0.9, "weight_decay": 0.01}, None, 0),
    ("sgd", {"momentum": 0.5}, 0.5, 3),
    ("adamw", {"weight_decay": 0.1}, None, 0),
    ("adamw", {"weight_decay": 0.0, "betas": (0.8, 0.99)}, 0.3, 4),
]


@pytest.mark.parametrize("kind,extra,clip,warmup", CASES)
def test_each_run_follows_torch_optim_even_after_others_leave(kind, extra, clip, warmup):
    params = stacked_params(len(LRS))
    refs = reference(params, LRS, kind, extra, clip, warmup)
    opt = GroupOptimizer(params, LRS, kind, grad_clip=clip, warmup_steps=warmup, **extra)
    live = list(range(len(LRS)))
    g = torch.Generator().manual_seed(1)
    for step in range(8):
        if step == 5:  # runs 1 and 3 leave; the others continue with their own state
            live = [0, 2]
            keep = torch.tensor(live)
            params = [torch.nn.Parameter(p.detach()[keep].clone()) for p in params]
            opt.select_runs(keep, params)
        grads = [torch.randn(len(live), *s, generator=g, dtype=torch.float64) * 3 for s in SHAPES]
        opt.step(grads)  # what the engine does: the gradients autograd.grad returns
        for row, r in enumerate(live):
            step_reference(refs[r], [grad[row] for grad in grads], clip)
    for row, r in enumerate(live):
        for p, ref in zip(params, refs[r][0], strict=True):
            torch.testing.assert_close(p.detach()[row], ref.detach(), rtol=1e-12, atol=1e-14)


SCHEDULE_CASES = [
    ("sgd", {"momentum": 0.9}, None, 0, "cosine", 0.0),
    ("sgd", {}, 0.5, 3, "linear", 0.002),
    ("adamw", {"weight_decay": 0.1}, 0.3, 2, "cosine", 0.001),
    ("adamw", {"weight_decay": 0.0}, None, 0, "linear", 0.0),
]


@pytest.mark.parametrize("kind,extra,clip,warmup,schedule,lr_min", SCHEDULE_CASES)
def test_each_run_follows_its_torch_lr_scheduler_even_after_others_leave(kind, extra, clip, warmup, schedule, lr_min):
    """Cosine and linear decay to lr_min after the warm-up, each run from its own rate: torch.optim with
    CosineAnnealingLR / LinearLR (after the warm-up, through SequentialLR) on its own copy, over 12 steps, the
    last of which the decay reaches; runs 1 and 3 leave after 7."""
    total = 12
    params = stacked_params(len(LRS))
    refs = reference(params, LRS, kind, extra, clip, warmup, schedule, total, lr_min)
    opt = GroupOptimizer(params, LRS, kind, grad_clip=clip, warmup_steps=warmup, schedule=schedule,
                         total_steps=total, lr_min=lr_min, **extra)
    live = list(range(len(LRS)))
    g = torch.Generator().manual_seed(2)
    for step in range(total):
        if step == 7:
            live = [0, 2]
            keep = torch.tensor(live)
            params = [torch.nn.Parameter(p.detach()[keep].clone()) for p in params]
            opt.select_runs(keep, params)
        grads = [torch.randn(len(live), *s, generator=g, dtype=torch.float64) for s in SHAPES]
        opt.step(grads)
        for row, r in enumerate(live):
            step_reference(refs[r], [grad[row] for grad in grads], clip)
    for row, r in enumerate(live):
        assert refs[r][1].param_groups[0]["lr"] == pytest.approx(lr_min, abs=1e-12)  # the decay ended at lr_min
        for p, ref in zip(params, refs[r][0], strict=True):
            torch.testing.assert_close(p.detach()[row], ref.detach(), rtol=1e-12, atol=1e-14)


def test_clipping_acts_per_run_and_gradients_set_by_hand_are_used():
    """Run 0's gradient is far over the clip, run 1's under it: only run 0 is scaled (SGD, lr 1: the update is
    the clipped gradient). Gradients assigned to ``.grad`` (not accumulated) are read as well."""
    params = [torch.nn.Parameter(torch.zeros(2, 3, dtype=torch.float64))]
    opt = GroupOptimizer(params, [1.0, 1.0], "sgd", grad_clip=1.0)
    params[0].grad = torch.tensor([[30.0, 40.0, 0.0], [0.3, 0.4, 0.0]], dtype=torch.float64)
    opt.step()
    torch.testing.assert_close(params[0].detach(), -torch.tensor([[0.6, 0.8, 0.0], [0.3, 0.4, 0.0]],
                                                                  dtype=torch.float64), rtol=1e-5, atol=0)
    assert params[0].grad is None  # the buffer served as scratch: no stale gradient left behind


def test_state_round_trips_through_a_run_state_dict():
    """A run's state saved and loaded into another group's row continues as the original (the checkpoint path)."""
    params = stacked_params(2)
    opt = GroupOptimizer(params, [0.01, 0.02], "adamw", weight_decay=0.1)
    names = [f"p{i}" for i in range(len(SHAPES))]
    g = torch.Generator().manual_seed(2)
    grads = [[torch.randn(2, *s, generator=g, dtype=torch.float64) for s in SHAPES] for _ in range(4)]

    for gr in grads[:2]:
        opt.step(gr)
    saved = opt.run_state_dict(1, names)
    weights = [p.detach()[1].clone() for p in params]
    other = stacked_params(2)
    resumed = GroupOptimizer(other, [0.03, 0.02], "adamw", weight_decay=0.1)
    with torch.no_grad():
        for p, w in zip(other, weights, strict=True):
            p[1] = w
    resumed.load_run_state_dict(1, names, saved)
    for gr in grads[2:]:
        opt.step(gr)
        resumed.step(gr)
    for p, q in zip(params, other, strict=True):
        assert torch.equal(p.detach()[1], q.detach()[1])


def test_a_step_costs_one_view_more_per_parameter_tensor_and_no_other_operation():
    """The update is over the buffers, not per tensor: a step's ATen operations (torch.profiler, nested ones
    included) grow with the number of parameter tensors by one ``view`` each (the gradients gathered into the
    buffer by one ``cat``), no kernel (the per-tensor loop made about 60 operations each)."""
    from torch.profiler import ProfilerActivity, profile

    counts, views = [], []
    for n in (2, 40):
        params = [torch.nn.Parameter(torch.randn(3, 4, 2)) for _ in range(n)]
        opt = GroupOptimizer(params, [0.1, 0.2, 0.3], "adamw", weight_decay=0.1, grad_clip=1.0, warmup_steps=2)
        grads = [torch.ones_like(p) for p in params]
        opt.step(grads)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            opt.step(grads)
        names = [e.name for e in prof.events() if e.name.startswith("aten::")]
        counts.append(len(names))
        views.append(names.count("aten::view"))
    assert views[1] - views[0] == 38 and counts[1] - counts[0] == 38, (counts, views)
    assert counts[0] <= 50, counts  # 48 with torch 2.13 (73 at 4da01bb, which cast Python numbers at each step)


def test_gradients_left_by_backward_are_read_and_cleared():
    """Without gradients handed to it, a step reads each parameter's ``.grad`` (what ``backward`` leaves, or a
    hand-set one) and clears it, as :meth:`GroupOptimizer.step` gathers them: the same update as handing them over."""
    params, others = stacked_params(2), stacked_params(2)
    opt = GroupOptimizer(params, [0.01, 0.02], "adamw", weight_decay=0.1)
    handed = GroupOptimizer(others, [0.01, 0.02], "adamw", weight_decay=0.1)
    g = torch.Generator().manual_seed(3)
    for _ in range(3):
        grads = [torch.randn(2, *s, generator=g, dtype=torch.float64) for s in SHAPES]
        sum((p * grad).sum() for p, grad in zip(params, grads, strict=True)).backward()
        opt.step()
        handed.step(grads)
        assert all(p.grad is None for p in params)
    for p, q in zip(params, others, strict=True):
        assert torch.equal(p.detach(), q.detach())


def test_parameters_of_two_dtypes_are_clipped_by_their_joint_norm():
    """Each run's norm is taken over all its parameters whatever their dtype, as ``clip_grad_norm_`` takes it:
    run 0's gradient (norm 50 over a float32 and a float64 tensor) is scaled to norm 1, run 1's (norm 0.5) is not."""
    params = [torch.nn.Parameter(torch.zeros(2, 2, dtype=torch.float32)),
              torch.nn.Parameter(torch.zeros(2, 1, dtype=torch.float64))]
    opt = GroupOptimizer(params, [1.0, 1.0], "sgd", grad_clip=1.0)
    params[0].grad = torch.tensor([[30.0, 0.0], [0.3, 0.0]])
    params[1].grad = torch.tensor([[40.0], [0.4]], dtype=torch.float64)
    opt.step()
    torch.testing.assert_close(params[0].detach(), -torch.tensor([[0.6, 0.0], [0.3, 0.0]]), rtol=1e-6, atol=0)
    torch.testing.assert_close(params[1].detach(), -torch.tensor([[0.8], [0.4]], dtype=torch.float64), rtol=1e-6,
                               atol=0)


def test_a_state_the_checkpoint_lacks_starts_at_zero_and_the_step_count_is_loaded():
    """SGD with momentum resumed from a checkpoint without a momentum buffer (one written by a run without
    momentum): that run's buffer is zero (what torch's first step makes of it), the other run's is kept."""
    params = stacked_params(2)
    opt = GroupOptimizer(params, [0.1, 0.1], "sgd", momentum=0.9)
    opt.step([torch.ones_like(p) for p in params])
    names = [f"p{i}" for i in range(len(SHAPES))]
    kept = opt.run_state_dict(0, names)
    assert kept["optimizer.steps"].tolist() == [1.0]  # run 0's count alone, not its neighbour's too
    opt.load_run_state_dict(1, names, {"optimizer.steps": torch.tensor([7.0], dtype=torch.float64)})
    assert opt.steps.tolist() == [1.0, 7.0]
    for name, state in zip(names, opt.state, strict=True):
        assert torch.equal(state["momentum_buffer"][0], kept[f"optimizer.{name}.momentum_buffer"])
        assert state["momentum_buffer"][0].abs().min() > 0 and torch.count_nonzero(state["momentum_buffer"][1]) == 0


def test_a_bfloat16_buffer_keeps_its_constants_as_python_numbers():
    """The update's constants are 0-d tensors for fp32/fp64 buffers only: a bfloat16 one computes with β₂ in
    float32 (its opmath), as a Python number gives it; β₂ = 0.99 rounded to bfloat16 would be 0.988."""
    w = torch.nn.Parameter(torch.zeros(2, 64, dtype=torch.bfloat16))
    opt = GroupOptimizer([w], [0.01, 0.01], "adamw", betas=(0.9, 0.99))
    g = torch.Generator().manual_seed(3)
    expected = torch.zeros(2, 64, dtype=torch.bfloat16)
    for _ in range(4):
        grad = (torch.randn(2, 64, generator=g) * 10).to(torch.bfloat16)
        opt.step([grad])
        expected.mul_(0.99).addcmul_(grad, grad, value=1 - 0.99)
    assert torch.equal(opt.state[0]["exp_avg_sq"], expected)
