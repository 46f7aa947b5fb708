"""Attention maps of a trained run, ready to draw: the axes labelled with the tokens as the task writes them.

In the style of seed 001 Figure 3 (§6.2: "we analyze the attention maps for some typical examples"): rows are
the attending positions (queries), columns the attended ones (keys), both labelled with the example's tokens.
The maps come from :func:`depthlab.analysis.runs.attention_maps` (the run rebuilt by ``load_run``); the vector task
of seed 002 labels each position with its symbol (A2 is x_0 of chain 2). ``depthlab.draw.attention_maps`` draws them.
"""

from __future__ import annotations

from typing import Any

import torch

from ..tasks.base import Batch, Task
from ..training.evaluate import read_tensor
from .runs import LoadedRun, attention_maps


@torch.no_grad()
def examples_with_attention(run: LoadedRun, batch: Batch) -> list[dict[str, Any]]:
    """:func:`depthlab.analysis.runs.attention_maps`, with the axes of vector-input tasks labelled by the task's own
    ``example_tokens`` where it defines them (``retrieval_vec``: A2 is x_0 of chain 2) and, for regression, each
    example's MSE under ``loss``."""
    task = run.task
    examples = attention_maps(run, batch)
    if task.input_dim and type(task).example_tokens is not Task.example_tokens:
        for i, item in enumerate(examples):
            item["tokens"] = task.example_tokens(batch, i)[0]
    if task.loss == "mse":
        outputs = run.model(torch.from_numpy(batch.inputs)[None], read=read_tensor(task)).outputs[0].float()
        errors = ((outputs - torch.from_numpy(batch.targets).float()) ** 2).flatten(1).mean(1)
        for item, error in zip(examples, errors.tolist(), strict=True):
            item["loss"] = error
            item["prediction"] = None
    return examples
