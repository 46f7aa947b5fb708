"""Attention maps of a trained run, one panel per layer and head, axes labelled with the decoded tokens.

In the style of seed 001 Figure 3 (§6.2: "we analyze the attention maps for some typical examples"): rows are
the attending positions (queries), columns the attended ones (keys), both labelled with the example's tokens;
one figure per example, a grid of layers × heads (layers wrap into several rows of panels when there are many
layers with one head each, as in seed 002's 12- and 24-layer models).

The maps come from :func:`depthlab.analysis.runs.attention_maps` (the run rebuilt by ``load_run``); the vector task
of seed 002 labels each position with its symbol (A2 is x_0 of chain 2).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from ..report.figures import STYLE
from ..tasks.base import Batch, Task
from .ablation import read_tensor
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


def attention_figure(example: dict[str, Any], path: Path, title: str = "") -> Path:
    """One example's attention maps: a panel per (layer, head), queries as rows, keys as columns."""
    layers = example["layers"]
    tokens = example["tokens"]
    n_layers, n_heads = len(layers), layers[0].shape[0]
    panels = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    cols = n_heads if n_heads > 1 else min(n_layers, 6)
    rows = math.ceil(len(panels) / cols)
    size = max(2.2, 0.11 * len(tokens) + 0.8)
    font = 7 if len(tokens) <= 20 else 5 if len(tokens) <= 40 else 3
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(rows, cols, figsize=(size * cols, size * rows + 0.4), squeeze=False)
        for ax in axes.flat:
            ax.set_visible(False)
        image = None
        for (layer, head), ax in zip(panels, axes.flat, strict=False):
            ax.set_visible(True)
            image = ax.imshow(layers[layer][head], cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
            ax.set_title(f"layer {layer} head {head}", fontsize=8)
            ticks = np.arange(len(tokens))
            ax.set_xticks(ticks, tokens, rotation=90, fontsize=font)
            ax.set_yticks(ticks, tokens, fontsize=font)
            ax.tick_params(length=0)
        target = example.get("target")
        prediction = example.get("prediction")
        status = ""
        if "loss" in example:
            status = f"  (MSE {example['loss']:.3f})"
        elif prediction is not None:
            status = f"  → predicted {prediction}" + (f", target {target}" if target is not None else "")
        fig.suptitle((title + "\n" if title else "") + example["text"][:160] + status, fontsize=8)
        if image is not None:
            fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6, label="attention")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, bbox_inches="tight")
        plt.close(fig)
    return path
