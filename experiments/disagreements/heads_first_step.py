"""Seed 001 Fig. 4: how fast can m heads move the 1-layer memorizer at initialisation (eq. 2's 1/m average)?

    PYTHONPATH=src python experiments/disagreements/heads_first_step.py

The quick memorization task (256 sequences over 8 words, length 3), §9.1's initialisation (W_QK uniform [0, 1),
W_V = I, W_U uniform [0, 1)), seeds 0-3. A first SGD step of rate η lowers the loss by η‖∇‖² and a first Adam
step (η·sign ∇) by η‖∇‖₁: printed per weight, mean over the four seeds.
"""

import numpy as np
import torch

import depthlab
from depthlab.models import TaskShapes, build_model
from depthlab.models.attention_only import AttentionOnlySpec

RUNS = 4
task = depthlab.task("memorization", n_words=8, length=3, n_examples=256)
shapes = TaskShapes.of(task)
batch = task.sample(256, np.random.default_rng(0), "train")
x, y = torch.as_tensor(batch.inputs)[None].expand(RUNS, -1, -1), torch.as_tensor(batch.targets).repeat(RUNS)
for m in (1, 2, 4, 8):
    gens = [torch.Generator().manual_seed(s) for s in range(RUNS)]
    model = build_model(AttentionOnlySpec(layers=1, heads=[m], init="paper", qk_scale=1.0), shapes, gens)
    logits = model(x).outputs
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y, reduction="sum") / len(batch)
    names = [name.split(".")[-1] for name, _ in model.named_parameters()]
    grads = torch.autograd.grad(loss, list(model.parameters()))
    sgd = "  ".join(f"{n} {g.pow(2).sum().item() / RUNS:.3g}" for n, g in zip(names, grads, strict=True))
    adam = "  ".join(f"{n} {g.abs().sum().item() / RUNS:.3g}" for n, g in zip(names, grads, strict=True))
    print(f"m = {m}: loss {loss.item() / RUNS:.3f} | SGD ‖∇‖²: {sgd} | Adam ‖∇‖₁: {adam}")
