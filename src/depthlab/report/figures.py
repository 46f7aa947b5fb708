"""Figures for papers, in one consistent style (PNG, SVG or PDF by the file's suffix)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

STYLE = {"font.size": 9, "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 120}


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
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        plt.close(fig)
    return path
