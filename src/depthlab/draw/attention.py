"""Attention maps of a trained model (seed 001 Figure 3): a block per example, a panel per layer and head."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from .style import caption, literal, new_figure

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


def comparison_figure(sources: Sequence[tuple[str, Sequence[dict[str, Any]]]], title: str) -> Figure:
    """Seed 001 Figure 3 beside the construction: a row per example, a panel per source and layer.

    ``sources`` is a list of (label, maps), ``maps`` one dict per example as ``attention_maps`` returns them (the
    same examples in every source, e.g. trained runs then the constructed model). Each panel is a layer's
    attention summed over its heads, queries down and keys across labelled with the tokens, coloured from 0 to
    its own maximum (written in its title: ReLU attention is not normalised).
    """
    if not sources or not sources[0][1]:
        raise ValueError("comparison_figure: nothing to draw")
    examples = sources[0][1]
    panels = [(label, layer) for label, maps in sources for layer in range(len(maps[0]["layers"]))]
    n = max(len(ex["tokens"]) for ex in examples)
    side = min(max(0.2 * n + 0.8, 1.9), 4.0)
    font = 8 if n <= 20 else 5
    with new_figure(figsize=(side * len(panels) + 0.4, (side + 0.7) * len(examples) + 0.4)) as fig:
        blocks = fig.subfigures(len(examples), 1, squeeze=False)[:, 0]
        for i, sub in enumerate(blocks):
            tokens = [literal(t) for t in examples[i]["tokens"]]
            axes = sub.subplots(1, len(panels), squeeze=False)[0]
            for ax, (label, layer) in zip(axes, panels, strict=True):
                maps = dict(sources)[label]
                m = np.asarray(maps[i]["layers"][layer], dtype=float).sum(0)
                ax.imshow(m, cmap="Blues", vmin=0.0, vmax=float(m.max()) if m.max() > 0 else 1.0,
                          interpolation="nearest")
                ax.set_xticks(range(len(tokens)), tokens, fontsize=font)
                ax.set_yticks(range(len(tokens)), tokens, fontsize=font)
                ax.tick_params(length=0)
                answer = f", answers {maps[i]['prediction']}" if layer == len(maps[i]["layers"]) - 1 else ""
                ax.set_title(f"{literal(label)}\nlayer {layer} (max {m.max():.3g}{literal(answer)})", fontsize=8)
                if i == len(examples) - 1:
                    ax.set_xlabel("key")
            axes[0].set_ylabel("query")
            sub.suptitle(literal(examples[i].get("text") or " ".join(examples[i]["tokens"])), fontsize=9, x=0.02,
                         ha="left")
        fig.suptitle(literal(title), fontsize=10)
        caption(fig, "Each panel: one layer's attention summed over its heads, a row per query position and a column "
                     "per key, white at 0 and darkest at the panel's own maximum (in its title: ReLU attention is not "
                     "normalised); the answer the model gives under the last layer.")
    return fig
