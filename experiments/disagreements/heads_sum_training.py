"""Seed 001 Fig. 4, the hypothesis trained: do more heads memorize faster when the heads are *summed*?

    PYTHONPATH=src python experiments/disagreements/heads_sum_training.py [--json]

The README's explanation of Fig. 4 is that eq. 2 averages the m heads, H + (1/m) Σ_i V_i σ(Q_iᵀ K_i), while a sum
over heads, H + Σ_i V_i σ(Q_iᵀ K_i) (what multi-head attention's output projection gives), would move the output m
times as far per step. This trains both readings side by side. The summed model is depthlab's model called with
W_V replaced by m·V (``torch.func.functional_call``), V the trained parameter: the same function as a sum over
heads with value weights V, and V's gradient is the sum model's.

Settings, fixed on 2026-11-28 at 15:37 UTC before any of these runs: the seed001-heads quick memorization task (256
sequences over 8 words, length 3), 1 layer, m = 1, 2, 4, 8 heads, §9.1's initialisation (W_QK uniform [0, 1), W_V = I,
W_U uniform [0, 1)), §9.1's SGD at lr 0.05 without clipping (clipping would undo the sum's larger gradient), batch 64,
1,500 steps, accuracy on all 256 sequences every 50 steps, seeds 0, 1, 2. Criterion, per seed: "more heads memorize
faster" holds if the first evaluation at ≥ 0.95 comes no later with more heads (m = 1 → 2 → 4 → 8) and strictly
sooner at m = 8 than at m = 1 (a run that never reaches 0.95 counts as later than any that does).
"""
from __future__ import annotations

import itertools
import json
import sys

import numpy as np
import torch
from torch.func import functional_call

import depthlab
from depthlab.models import TaskShapes, build_model
from depthlab.models.attention_only import AttentionOnlySpec

SEEDS, HEADS, STEPS, EVAL_EVERY, BATCH, LR, TARGET = (0, 1, 2), (1, 2, 4, 8), 1500, 50, 64, 0.05, 0.95
task = depthlab.task("memorization", n_words=8, length=3, n_examples=256)
shapes = TaskShapes.of(task)
everything = task.enumerate()
eval_x = torch.as_tensor(everything.inputs)[None].expand(len(SEEDS), -1, -1)
eval_y = torch.as_tensor(everything.targets)


def train(m: int, combine: str) -> dict[str, list]:
    """Seeds stacked on the run axis; returns each seed's accuracy curve and first step at TARGET."""
    torch.manual_seed(0)
    model = build_model(AttentionOnlySpec(layers=1, heads=[m], init="paper", qk_scale=1.0), shapes,
                        [torch.Generator().manual_seed(s) for s in SEEDS])
    params = dict(model.named_parameters())
    value_name = next(name for name in params if name.endswith("W_V"))
    scale = float(m) if combine == "sum" else 1.0
    optimizer = torch.optim.SGD(params.values(), lr=LR)
    rngs = [np.random.default_rng(1000 + s) for s in SEEDS]

    def logits(x: torch.Tensor) -> torch.Tensor:
        return functional_call(model, {**params, value_name: scale * params[value_name]}, (x,)).outputs

    curves: list[list[float]] = [[] for _ in SEEDS]
    for step in range(1, STEPS + 1):
        batches = [task.sample(BATCH, rng, "train") for rng in rngs]
        x = torch.stack([torch.as_tensor(b.inputs) for b in batches])
        y = torch.stack([torch.as_tensor(b.targets) for b in batches])
        out = logits(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)) * len(SEEDS)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % EVAL_EVERY == 0:
            with torch.no_grad():
                correct = (logits(eval_x).argmax(-1) == eval_y).float().mean(1)
            for run, value in enumerate(correct.tolist()):
                curves[run].append(value)
    steps = list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    first = [next((s for s, a in zip(steps, c, strict=True) if a >= TARGET), None) for c in curves]
    return {"final": [c[-1] for c in curves], "first_at_target": first, "curve": curves}


def holds(firsts: list[int | None]) -> bool:
    """More heads no later at each doubling, and strictly sooner at m = 8 than at m = 1."""
    late = [f if f is not None else STEPS + 1 for f in firsts]
    return all(a >= b for a, b in itertools.pairwise(late)) and late[-1] < late[0]


if __name__ == "__main__":
    results = {combine: {m: train(m, combine) for m in HEADS} for combine in ("mean", "sum")}
    verdict = {combine: [holds([results[combine][m]["first_at_target"][i] for m in HEADS]) for i in range(len(SEEDS))]
               for combine in results}
    if "--json" in sys.argv:
        print(json.dumps({"seeds": SEEDS, "results": results, "holds_per_seed": verdict}))
    else:
        for combine, by_m in results.items():
            for m, r in by_m.items():
                print(f"{combine} m={m}: final {[round(a, 3) for a in r['final']]} first >= {TARGET}: "
                      f"{r['first_at_target']}")
            print(f"{combine}: 'more heads memorize faster' holds per seed: {verdict[combine]}")
