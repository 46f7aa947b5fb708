"""Attention maps: one example's patterns from a cache in one call (:func:`attention`, as
``depthlab.draw.attention(cache, tokens)``), and trained runs' maps (seed 001 Figure 3): a block per example, a panel
per layer and head (:func:`attention_figure`), beside the construction (:func:`comparison_figure`)."""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from .style import caption, literal, new_figure

MAX_COLUMNS = 6  # one-head models with more layers wrap into rows of this many panels (seed 002: 12, 24 layers)
MAX_LABEL = 160  # characters of an example's text shown above its maps
PATTERN = re.compile(r"blocks\.(\d+)\.attn\.hook_pattern")


def _font(n: int) -> int:
    """Tick labels' size for n tokens on an axis."""
    return 8 if n <= 20 else 5 if n <= 40 else 3


def cache_patterns(cache: Mapping[str, Any], batch: int = 0) -> list[np.ndarray]:
    """Example ``batch``'s attention patterns in a cache (depthlab's ``run_with_cache`` or TransformerLens'): per
    layer a float array [heads, query, key], in layer order."""
    found = sorted((int(m.group(1)), name) for name in cache if (m := PATTERN.fullmatch(name)))
    if not found:
        raise ValueError("attention: the cache holds no blocks.{l}.attn.hook_pattern (run_with_cache with them)")
    out = []
    for _, name in found:
        value = cache[name]
        array = np.asarray(value.detach().float().cpu() if hasattr(value, "detach") else value, dtype=float)
        if array.ndim == 5:
            raise ValueError(f"attention: {name} has a run axis {list(array.shape)}; draw a one-run model's cache "
                             "(Store.load_model)")
        out.append(array[batch] if array.ndim == 4 else array)
    return out


def _token_labels(cache: Any, tokens: Any, batch: int, n: int) -> list[str]:
    """The axis labels: ``tokens`` as strings (a list), text or token ids read by the cache's model where it has
    ``to_str_tokens``, or the positions when none are given."""
    if tokens is None:
        return [str(i) for i in range(n)]
    if isinstance(tokens, list) and all(isinstance(t, str) for t in tokens):
        labels = tokens
    else:
        model = getattr(cache, "model", None)
        if not isinstance(tokens, str):
            ids = np.asarray(tokens.detach().cpu() if hasattr(tokens, "detach") else tokens)
            tokens = ids[batch] if ids.ndim == 2 else ids
        reader = getattr(model, "to_str_tokens", None)
        try:
            labels = list(reader(tokens)) if reader is not None else None
        except (ValueError, AssertionError, AttributeError):  # a TransformerLens model without a tokenizer
            labels = None
        if labels is None:
            labels = tokens.split() if isinstance(tokens, str) else [str(int(t)) for t in tokens]
    if len(labels) != n:
        raise ValueError(f"attention: {len(labels)} tokens for patterns over {n} positions")
    return [literal(t) for t in labels]


def attention(cache: Mapping[str, Any], tokens: Any = None, batch: int = 0, title: str | None = None,
              shared_scale: bool = True, cmap: str = "Blues", kind: str | None = None) -> Figure:
    """One example's attention, every layer (rows) by every head (columns), in one figure with a colour bar.

    ``cache``: what ``run_with_cache`` returned (depthlab's one-run model, ``Store.load_model``, or a
    TransformerLens model); ``tokens``: the example's tokens as strings (``model.to_str_tokens(x)``), its text or
    token ids (read by the cache's model), or None for positions; ``batch``: which example of the batch. Queries
    down, keys across, both labelled with the tokens. ``shared_scale``: one colour scale from 0 to the largest
    weight of every panel (ReLU attention is not normalised: layers compare as they are); False: each panel
    scaled to its own largest weight, written in its title. ``kind``: the attention's kind (relu, softmax) for the
    colour bar's label, by default the cache's model's ``cfg.attention``. Any mapping of
    ``blocks.{l}.attn.hook_pattern`` to arrays [batch, heads, q, k] (or [heads, q, k]) draws as a cache.
    """
    patterns = cache_patterns(cache, batch)
    n = patterns[0].shape[-1]
    labels = _token_labels(cache, tokens, batch, n)
    rows, cols = len(patterns), max(p.shape[0] for p in patterns)
    largest = max(float(p.max()) for p in patterns)
    vmin = min(0.0, min(float(p.min()) for p in patterns)) if shared_scale else 0.0
    vmax = (largest if largest > vmin else vmin + 1.0) if shared_scale else 1.0
    kind = kind or getattr(getattr(getattr(cache, "model", None), "cfg", None), "attention", None)
    side = min(max(0.22 * n + 0.9, 2.4), 4.5)
    upright_too_wide = n > 24 or max(len(t) for t in labels) > 2
    with new_figure(figsize=(side * cols + 1.3, side * rows + 0.7)) as fig:
        axes = fig.subplots(rows, cols, squeeze=False)
        for (layer, head), ax in np.ndenumerate(axes):
            if head >= patterns[layer].shape[0]:  # a layer with fewer heads (seed 001's per-layer head lists)
                ax.set_visible(False)
                continue
            m = patterns[layer][head]
            peak = float(m.max())
            shown = m if shared_scale else m / (peak if peak > 0 else 1.0)
            image = ax.imshow(shown, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
            # upright when short: a rotated → would read as ↑
            ax.set_xticks(range(n), labels, fontsize=_font(n), rotation=90 if upright_too_wide else 0)
            ax.set_yticks(range(n), labels, fontsize=_font(n))
            ax.tick_params(length=0)
            for spine in ax.spines.values():
                spine.set_visible(False)
            ax.set_title(f"L{layer}H{head}" + ("" if shared_scale else f" (max {peak:.3g})"), fontsize=9)
        for ax in axes[:, 0]:
            ax.set_ylabel("query")
        for ax in axes[-1]:
            ax.set_xlabel("key")
        label = "attention weight" if shared_scale else "weight / panel's largest"
        fig.colorbar(image, ax=axes, shrink=min(1.0, 0.9 / rows + 0.5),
                     label=label + (f" ({kind})" if kind else ""))
        text = literal(title) if title is not None else " ".join(labels)
        text = text if len(text) <= MAX_LABEL else text[:MAX_LABEL] + "…"
        fig.suptitle(textwrap.fill(text, max(30, int(11 * (side * cols + 1.3)))), fontsize=10)
    return fig


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
    font = _font(n)
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
