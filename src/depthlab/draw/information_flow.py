"""Seed 002 Figures 3 and 8 (§5, Appendix B): the positions of one retrieval chain and the information they share
before any layer, then the pieces each position holds after every layer; from
``depthlab.constructions.information_flow.flow``."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Arc, Rectangle

from .style import caption, new_figure

TOKEN_COLOR, PAIR_COLOR = "tab:blue", "tab:orange"


def _piece(j: int) -> str:
    """e_j as the seed names it (Definition 3): e_{2k} = x_k, e_{2k-1} = p_k."""
    return f"$x_{{{j // 2}}}$" if j % 2 == 0 else f"$p_{{{(j + 1) // 2}}}$"


def shared_panel(ax: Any, flow: dict[str, Any]) -> None:
    """Figure 3: the positions in input order, top arcs joining shared token embeddings, bottom arcs shared
    positional encodings (the two tokens of a pair)."""
    n = len(flow["tokens"])
    for edges, color, up in ((flow["token_edges"], TOKEN_COLOR, True), (flow["pair_edges"], PAIR_COLOR, False)):
        for i, j in edges:
            width = j - i
            ax.add_patch(Arc(((i + j) / 2, 0), width, 0.5 * width if up else 1.2,
                             theta1=0 if up else 180, theta2=180 if up else 360, color=color, lw=1.4))
    ax.scatter(range(n), np.zeros(n), s=260, color="white", edgecolor="black", zorder=3)
    for i, (k, s) in enumerate(zip(flow["tokens"], flow["s"], strict=True)):
        ax.text(i, 0, f"$x_{{{k}}}$", ha="center", va="center", fontsize=9, zorder=4)
        ax.text(i, -0.75, f"$s_{{{s}}}$", ha="center", va="top", fontsize=8, color="dimgrey")
    top = 0.25 * max((j - i for i, j in flow["token_edges"]), default=1)
    ax.set_xlim(-0.7, n - 0.3)
    ax.set_ylim(-1.2, top + 0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.plot([], [], color=TOKEN_COLOR, label="shared token embedding (top edges)")
    ax.plot([], [], color=PAIR_COLOR, label="shared positional encoding (bottom edges)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=7)


def held_panel(ax: Any, flow: dict[str, Any], t: int) -> None:
    """Which pieces e_0 … e_2D (columns) each position s_0 … s_2D (rows) holds after ``t`` layers; the target
    x_D at the last position s_0 outlined."""
    order = np.argsort(flow["s"])
    held = np.array(flow["held"][t])[order]
    m = held.shape[1]
    ax.imshow(held, cmap=ListedColormap(["white", "tab:green"]), vmin=0, vmax=1, aspect="equal")
    ax.add_patch(Rectangle((m - 1.5, -0.5), 1, 1, fill=False, edgecolor="red", lw=1.5))
    ax.set_xticks(range(m), [_piece(j) for j in range(m)], fontsize=6)
    ax.set_yticks(range(m), [f"$s_{{{i}}}$" for i in range(m)], fontsize=6)
    ax.set_xticks(np.arange(-0.5, m), minor=True)
    ax.set_yticks(np.arange(-0.5, m), minor=True)
    ax.grid(which="minor", color="lightgrey", lw=0.4)
    ax.tick_params(which="minor", length=0)
    ax.set_title("before any layer" if t == 0 else f"after {t} layer{'s' if t > 1 else ''}", fontsize=8)
    ax.set_xlabel("piece of information")


def information_flow_figure(flow: dict[str, Any], title: str) -> Figure:
    """Top: Figure 3 (shared information before any layer) for ``flow``'s D; below, a panel per layer of the
    pieces every position holds (Appendix B, Lemmas 2-3: a contiguous run growing by at most 3^(t-1) a side)."""
    layers = len(flow["held"])
    with new_figure(figsize=(max(2.2 * layers + 0.8, 7.5), 5.6)) as fig:
        upper, lower = fig.subfigures(2, 1, height_ratios=[1.0, 1.5])
        shared_panel(upper.subplots(), flow)
        upper.suptitle(f"positions that contain shared information before any layer (D = {flow['D']})", fontsize=8)
        axes = lower.subplots(1, layers, sharey=True)
        for t, ax in enumerate(np.atleast_1d(axes)):
            held_panel(ax, flow, t)
        np.atleast_1d(axes)[0].set_ylabel("position")
        lower.suptitle(f"pieces held after each layer (outlined: the target $x_{{{flow['D']}}}$ at the last "
                       f"position $s_0$, held from layer {flow['layers_last']}; Theorem 1: "
                       f"⌈log₃(2D)⌉ = {flow['closed_form']})", fontsize=8)
        fig.suptitle(title, fontsize=9)
        caption(fig, "Below: a filled square where the position (row) holds the piece of information (column) "
                     "after that many layers: one layer gives each position the union of the pieces of every position "
                     "sharing a piece with it (seed 002 App. B). Pieces: x_k a token's embedding, p_k the positional "
                     "encoding shared by the k-th pair.")
    return fig
