"""Figures for papers, in one consistent style (PNG, SVG or PDF by the file's suffix)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np


# parse_math off: labels from configs (task names, tokens) are drawn as written, never as mathtext
def save_figure(fig: plt.Figure, path: Path) -> Path:
    """Lay out, write (format by suffix: PNG, SVG, PDF; folders created) and release a figure."""
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


STYLE = {"text.parse_math": False, "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
         "figure.dpi": 120}


def depth_figure(curves: dict[tuple[str, int], list[dict[str, list[float]]]], tasks: list[str],
                 chance: dict[str, float], path: Path) -> Path:
    """Seed 001 Figure 2: accuracy (top) and loss (bottom) against steps, a column per task, a line per depth.

    Lines are the mean over seeds, shaded between the lowest and highest seed; chance dashed.
    """
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(2, len(tasks), figsize=(3.2 * len(tasks), 5.2), squeeze=False)
        depths = sorted({layers for (_, layers) in curves})
        colors = plt.cm.viridis(np.linspace(0.1, 0.85, max(len(depths), 1)))
        for col, task in enumerate(tasks):
            for depth, color in zip(depths, colors, strict=True):
                runs = curves.get((task, depth))
                if not runs:
                    continue
                for row, metric in enumerate(("accuracy", "loss")):
                    length = min(len(r["step"]) for r in runs)
                    steps = np.asarray(runs[0]["step"][:length])
                    values = np.array([r[metric][:length] for r in runs], dtype=float)
                    ax = axes[row, col]
                    ax.plot(steps, values.mean(0), color=color, label=f"{depth} layer{'s' if depth > 1 else ''}")
                    if len(runs) > 1:
                        ax.fill_between(steps, values.min(0), values.max(0), color=color, alpha=0.2, lw=0)
            axes[0, col].set_title(task)
            if task in chance:
                axes[0, col].axhline(chance[task], color="grey", ls="--", lw=0.8)
            axes[0, col].set_ylim(-0.02, 1.02)
            axes[1, col].set_yscale("log")
            axes[1, col].set_xlabel("step")
        axes[0, 0].set_ylabel("accuracy (eval)")
        axes[1, 0].set_ylabel("loss (eval)")
        axes[0, -1].legend(loc="lower right", frameon=False)
        save_figure(fig, path)
    return path


def attention_figure(examples: list[dict], path: Path, title: str | None = None, cmap: str = "Blues",
                     annotate: bool = False) -> Path:
    """Seed 001 Figure 3: attention maps of a trained model, a row per example, a column per layer and head.

    ``examples`` as ``depthlab.analysis.runs.attention_maps`` returns them: each with ``tokens`` (the axes:
    queries down, keys across) and ``layers`` (per layer an array [heads, query, key]); ``text``,
    ``prediction`` and ``target`` label the row when present. Each map is coloured from 0 to its own maximum
    (ReLU attention is not normalised), written in its title; ``annotate`` writes every value in its square.
    The format follows the suffix of ``path`` (.png, .svg, .pdf).
    """
    if not examples:
        raise ValueError("attention_figure: no examples to draw")
    panels = [(layer, head) for layer, maps in enumerate(examples[0]["layers"]) for head in range(len(maps))]
    n = max(len(ex["tokens"]) for ex in examples)
    side = min(max(0.26 * n + 0.9, 2.0), 5.0)
    with plt.rc_context(STYLE):
        fig = plt.figure(figsize=(side * len(panels) + 0.4, (side + 0.9) * len(examples) + (0.3 if title else 0)),
                         layout="constrained")
        rows = fig.subfigures(len(examples), 1, squeeze=False)[:, 0]
        for row, (sub, ex) in enumerate(zip(rows, examples, strict=True)):
            tokens = list(ex["tokens"])
            axes = sub.subplots(1, len(panels), squeeze=False)[0]
            for col, (layer, head) in enumerate(panels):
                ax = axes[col]
                m = np.asarray(ex["layers"][layer][head], dtype=float)
                vmax = float(m.max()) if m.size and m.max() > 0 else 1.0
                ax.imshow(m, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
                ax.set_xticks(range(len(tokens)), tokens, fontsize=8)
                ax.set_yticks(range(len(tokens)), tokens, fontsize=8)
                ax.tick_params(length=0)
                for spine in ax.spines.values():
                    spine.set_visible(False)
                heads = len(ex["layers"][layer])
                name = f"layer {layer}" + (f", head {head}" if heads > 1 else "")
                ax.set_title(f"{name} (max {m.max():.3g})" if m.size else name, fontsize=9)
                if annotate:
                    for (q, k), v in np.ndenumerate(m):
                        ax.text(k, q, f"{v:.2f}", ha="center", va="center", fontsize=6,
                                color="white" if v > 0.6 * vmax else "black")
                if col == 0:
                    ax.set_ylabel("query")
                if row == len(examples) - 1:
                    ax.set_xlabel("key")
            label = ex.get("text") or " ".join(tokens)
            if ex.get("prediction") is not None:
                label += f"   (predicted {ex['prediction']})"
            sub.suptitle(label, fontsize=9, x=0.02, ha="left")
        if title:
            fig.suptitle(title, fontsize=10)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, bbox_inches="tight", pad_inches=0.05)
        plt.close(fig)
    return path
