"""Why models carry a run axis: a group of R runs written with a leading run dimension, against the same
one-run model stacked with ``torch.func.stack_module_state`` and ``vmap``.

    python benchmarks/vmap_vs_run_axis.py [--runs 16] [--threads 1] [--json]

Both train seed 001 IC-QA at the quick preset's sizes (forward, backward, SGD step on stacked tensors);
prints examples per second of each, measured in one process.
"""

import argparse
import copy
import json
import time

import numpy as np
import torch
from torch.func import functional_call, grad, stack_module_state, vmap

from depthlab.config import parse_run
from depthlab.models import TaskShapes, build_model
from depthlab.training.objectives import per_run_loss

RAW = {"task": {"name": "icqa", "k": 3, "n_q": 8, "n_a": 8},
       "model": {"name": "attention_only", "layers": 2, "heads": 1, "init": "random"}}


def rate(step, examples: int, seconds: float = 2.0) -> float:
    step()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        count += 1
    return count * examples / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = parse_run(RAW)
    task, runs, batch = config.task, args.runs, 64
    shapes = TaskShapes.of(task)
    data = task.sample(batch * runs, np.random.default_rng(0))
    # one-hot vectors rather than token ids: vmap cannot trace one_hot's data-dependent width check
    x = torch.nn.functional.one_hot(torch.from_numpy(data.inputs), shapes.vocab_size).float().view(runs, batch, -1,
                                                                                               shapes.vocab_size)
    y = torch.from_numpy(data.targets).view(runs, batch)

    stacked = build_model(config.model, shapes, range(runs))

    def run_axis_step() -> None:
        loss = per_run_loss(stacked(x).outputs, y, "cross_entropy").sum()
        grads = torch.autograd.grad(loss, list(stacked.parameters()))
        with torch.no_grad():
            for p, g in zip(stacked.parameters(), grads, strict=True):
                p.sub_(0.01 * g)

    singles = [build_model(config.model, shapes, [r]) for r in range(runs)]
    params, buffers = stack_module_state(singles)
    base = copy.deepcopy(singles[0]).to("meta")

    def one_loss(p, b, xs, ys):
        out = functional_call(base, (p, b), (xs[None],)).outputs
        return per_run_loss(out, ys[None], "cross_entropy").sum()

    grad_fn = vmap(grad(one_loss), in_dims=(0, 0, 0, 0))

    def vmap_step() -> None:
        grads = grad_fn(params, buffers, x, y)
        with torch.no_grad():
            for name in params:
                params[name].sub_(0.01 * grads[name])

    result = {"runs": runs, "threads": args.threads,
              "run_axis_examples_per_s": round(rate(run_axis_step, runs * batch)),
              "vmap_examples_per_s": round(rate(vmap_step, runs * batch))}
    result["run_axis_over_vmap"] = round(result["run_axis_examples_per_s"] / result["vmap_examples_per_s"], 2)
    print(json.dumps(result) if args.json else result)


if __name__ == "__main__":
    main()
