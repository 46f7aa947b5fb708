"""Attention maps of a trained model (seed 001 Figure 3): a block per example, a panel per layer and head."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from .style import literal, new_figure

MAX_COLUMNS = 6  # one-head models with more layers wrap into rows of this many panels (seed 002: 12, 24 layers)
MAX_LABEL = 160  # characters of an example's text shown above its maps


def _label(example: dict[str, Any]) -> str:
    """The example's text (or its tokens), then what the model answered: its MSE for regression, else the
    prediction and, where known, the target."""
    label = (example.get("text") or " ".join(example["tokens"]))[:MAX_LABEL]
    if "loss" in example:
        return f"{label}   (MSE {example['loss']:.3f})"
    if example.get("prediction") is not None:
        target = example.get("target")
        return f"{label}   (predicted {example['prediction']}" + (f", target {target})" if target is not None
                                                                   else ")")
    return label


def attention_figure(examples: Sequence[dict[str, Any]], title: str | None = None, cmap: str = "Blues",
                     annotate: bool = False) -> Figure:
    """Every layer and head of each example, queries down and keys across, labelled with the example's tokens.

    ``examples`` as ``depthlab.analysis.runs.attention_maps`` returns them: each with ``tokens`` (the axes) and
    ``layers`` (per layer an array [heads, query, key]); ``text``, ``prediction``, ``target`` and ``loss`` label
    its block when present. Each map is coloured from 0 to its own maximum (ReLU attention is not normalised),
    written in its title; ``annotate`` writes every value in its square. A model with several heads has a row of
    panels per layer; one with one head puts its layers side by side, wrapping after six.
    """
    if not examples:
        raise ValueError("attention_figure: no examples to draw")
    n_layers, n_heads = len(examples[0]["layers"]), len(examples[0]["layers"][0])
    panels = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    cols = n_heads if n_heads > 1 else min(n_layers, MAX_COLUMNS)
    rows = math.ceil(len(panels) / cols)
    n = max(len(ex["tokens"]) for ex in examples)
    side = min(max(0.26 * n + 0.9, 2.0), 5.0)
    font = 8 if n <= 20 else 5 if n <= 40 else 3
    with new_figure(figsize=(side * cols + 0.4, (side * rows + 0.9) * len(examples) + (0.3 if title else 0))) as fig:
        blocks = fig.subfigures(len(examples), 1, squeeze=False)[:, 0]
        for block, (sub, ex) in enumerate(zip(blocks, examples, strict=True)):
            tokens = [literal(t) for t in ex["tokens"]]
            axes = sub.subplots(rows, cols, squeeze=False)
            for ax in axes.flat[len(panels):]:
                ax.set_visible(False)
            for (layer, head), ax in zip(panels, axes.flat, strict=False):
                m = np.asarray(ex["layers"][layer][head], dtype=float)
                vmax = float(m.max()) if m.size and m.max() > 0 else 1.0
                ax.imshow(m, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
                ax.set_xticks(range(len(tokens)), tokens, fontsize=font, rotation=90 if n > 20 else 0)
                ax.set_yticks(range(len(tokens)), tokens, fontsize=font)
                ax.tick_params(length=0)
                for spine in ax.spines.values():
                    spine.set_visible(False)
                name = f"layer {layer}" + (f", head {head}" if n_heads > 1 else "")
                ax.set_title(f"{name} (max {m.max():.3g})" if m.size else name, fontsize=9)
                if annotate:
                    for (q, k), v in np.ndenumerate(m):
                        ax.text(k, q, f"{v:.2f}", ha="center", va="center", fontsize=6,
                                color="white" if v > 0.6 * vmax else "black")
            for ax in axes[:, 0]:
                ax.set_ylabel("query")
            if block == len(examples) - 1:
                for ax in axes[-1]:
                    if ax.get_visible():
                        ax.set_xlabel("key")
            sub.suptitle(literal(_label(ex)), fontsize=9, x=0.02, ha="left")
        if title:
            fig.suptitle(literal(title), fontsize=10)
    return fig
