"""Seed 002 Appendix E: the loss of a circuit without each of its paths; from
``depthlab.analysis.circuit.validate``'s result."""

from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure

from .style import caption, figure_legend, literal, new_figure


def circuit_figure(result: dict[str, Any], run_id: str) -> Figure:
    """A bar per path (the circuit's loss without it) against the circuit's and the intact model's loss; the legend
    below."""
    paths = result["paths"]
    with new_figure(figsize=(6, 0.3 * len(paths) + 1.6)) as fig:
        ax = fig.subplots()
        ax.barh(range(len(paths)), [p["loss_without"] for p in paths], color="tab:red", alpha=0.7,
                label="circuit without this path")
        ax.axvline(result["circuit"]["loss"], color="black", lw=1, label="circuit only")
        ax.axvline(result["intact"]["loss"], color="grey", ls="--", lw=1, label="intact model")
        ax.set_yticks(range(len(paths)), [literal(p["path"]) for p in paths], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("validation loss")
        ax.set_title(f"run {literal(run_id)}: circuit validation (seed 002 Appendix E)", fontsize=8)
        figure_legend(fig, [ax], loc="outside lower center", ncols=3, fontsize=7)
    return fig


def _chain_order(roles: list[str]) -> list[str]:
    """One chain's roles in input order (seed 002 §6: pairs from step D down to step 1, then the query)."""
    pairs = sorted({int(r.rsplit(" ", 1)[1]) for r in roles if r != "query"}, reverse=True)
    return [f"{side} of pair {k}" for k in pairs for side in ("first", "second")] + ["query"]


def _token(role: str) -> str:
    """The token a role holds: the pair (x_{k-1}, x_k) is pair k; the query holds x_0."""
    if role == "query":
        return "$x_0$\nquery"
    side, k = role.split(" of pair ")
    return f"$x_{{{int(k) - 1 if side == 'first' else int(k)}}}$"


def circuit_panel(ax: Any, row: dict[str, Any]) -> None:
    """One transformer's circuit as seed 002 Figure 5 draws it: one chain's positions across, the residual stream
    after each layer up, an arrow per attention path from the attended position (the head's input) to the
    attending one (its output)."""
    order = _chain_order(row["roles"])
    x = {role: i for i, role in enumerate(order)}
    layers = row["layers"]
    for i in range(len(order)):
        ax.plot([i, i], [0, layers], color="lightgrey", lw=0.8, zorder=0)
    colors = [f"C{i % 10}" for i in range(layers)]
    for p in row["paths"]:
        ax.annotate("", xy=(x[p["from"]], p["layer"] + 1), xytext=(x[p["to"]], p["layer"]),
                    arrowprops={"arrowstyle": "-|>", "color": colors[p["layer"]], "lw": 1.4, "shrinkA": 2,
                                "shrinkB": 2})
    for layer in sorted({p["layer"] for p in row["paths"]}):
        ax.text(len(order) - 0.4, layer + 0.5, f"L{layer}", color=colors[layer], fontsize=7, va="center")
    ax.set_xticks(range(len(order)), [_token(r) for r in order], fontsize=8)
    ax.set_yticks(range(layers + 1), ["embed"] + [f"after L{i}" for i in range(layers)], fontsize=7)
    ax.set_xlim(-0.6, len(order) - 0.1)
    ax.set_ylim(-0.3, layers + 0.3)
    loss = "no circuit found" if row["circuit_loss"] is None else f"circuit only {row['circuit_loss']:.3f}"
    ax.set_title(f"Transformer {literal(row['name'])} (seed {row['seed']})\nMSE {row['intact_loss']:.3f}, {loss}, "
                 f"{row['heads_used']} heads", fontsize=8)


def circuits_figure(rows: list[dict[str, Any]], title: str) -> Figure:
    """Seed 002 Figure 5: a panel per transformer (A, B, C, …), each its circuit (:func:`circuit_panel`); from
    ``depthlab.analysis.circuits.circuit_rows``."""
    n = max(len(rows), 1)
    layers = max((r["layers"] for r in rows), default=1)
    with new_figure(figsize=(3.3 * n, 0.32 * layers + 2.2)) as fig:
        axes = fig.subplots(1, n, squeeze=False, sharey=True)[0]
        for ax, row in zip(axes, rows, strict=False):
            circuit_panel(ax, row)
        axes[0].set_ylabel("residual stream")
        fig.suptitle(literal(title), fontsize=9)
        caption(fig, "An arrow: a circuit head of layer L (its colour) moving information from the position at its "
                     "tail to the position at its head; MSE: the model's validation loss; circuit only: the loss with "
                     "every other head replaced and each circuit head attending one-hot along its paths.")
    return fig
