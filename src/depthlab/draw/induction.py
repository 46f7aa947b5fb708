"""Seed 004's figures: strength histogram, 2-D histograms of log odds, A/B powers, bleeding by neighbour rank; from
the measurements of ``depthlab.induction``."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from ..induction.hypotheses import KNOBS, CapacityRow
from ..induction.measure import Bleeding, LogOddsPair, Powers
from ..induction.study import Study
from .style import caption, figure_legend, literal, new_figure, save


def strength_figure(strengths: dict[str, np.ndarray], title: str = "") -> Figure:
    """Histogram of induction strengths, one outline per model on bins shared by every model (bar heights compare
    across models, and no model's histogram hides another's: each outline is thinner than the one drawn before it,
    so two that coincide, as two models that learned nothing do at zero, both show), medians dashed; the legend
    below."""
    with new_figure(figsize=(5.5, 3.6 + 0.16 * len(strengths))) as fig:
        ax = fig.subplots()
        colours = [f"C{i % 10}" for i in range(len(strengths))]
        widths = np.linspace(1.2 + 0.6 * (len(strengths) - 1), 1.2, len(strengths))
        bins = shared_bins(list(strengths.values()))
        for (name, s), colour, width in zip(strengths.items(), colours, widths, strict=True):
            ax.hist(s, bins=bins, histtype="step", lw=width, color=colour,
                    label=f"{literal(name)} (median {np.median(s):.2f})")
            ax.axvline(np.median(s), color=colour, ls="--", lw=1)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xlabel("induction strength: log odds of B, induction − shuffled")
        ax.set_ylabel("sequences")
        legend = figure_legend(fig, [ax], loc="outside lower center", fontsize=7)
        if title:
            fig.suptitle(literal(title), fontsize=9)
        caption(fig, "One outline per model on shared bins, each thinner than the one before (where two coincide, "
                     "both show); dashed: each model's median; grey: zero strength (induction no better than "
                     "shuffled).", legend=legend)
    return fig


def shared_bins(values: list[np.ndarray], bins: int = 60) -> np.ndarray:
    """One set of bin edges for every array of ``values``, so histograms drawn on them compare bar for bar."""
    every = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values]) if values else np.zeros(1)
    every = every[np.isfinite(every)]
    return np.histogram_bin_edges(every if every.size else np.zeros(1), bins=bins)


def log_odds_figure(conditions: dict[str, LogOddsPair], title: str = "") -> Figure:
    """Seed 004 Result 1: 2-D histograms of log odds of B after shuffling (x) and before (y), one panel per
    condition (A and B random, A fixed, B fixed, both fixed), one colour scale; the diagonal is zero strength."""
    with new_figure(figsize=(2.5 * len(conditions) + 0.9, 3.2), layout="compressed") as fig:  # square panels
        axes = fig.subplots(1, len(conditions), squeeze=False, sharex=True, sharey=True)[0]
        every = np.concatenate([np.concatenate([p.induction, p.shuffled]) for p in conditions.values()])
        lo, hi = np.percentile(every, [0.5, 99.5])
        bins = np.linspace(lo, hi, 51)
        counts = {name: np.histogram2d(pair.shuffled, pair.induction, bins=[bins, bins])[0]
                  for name, pair in conditions.items()}
        norm = LogNorm(1, max(max(c.max() for c in counts.values()), 1))
        for ax, (name, pair) in zip(axes, conditions.items(), strict=True):
            image = ax.pcolormesh(bins, bins, np.ma.masked_less(counts[name].T, 1), cmap="viridis", norm=norm)
            ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--")
            ax.set_aspect("equal")
            ax.set_title(f"{literal(name)}\nmedian strength {np.median(pair.strength):.2f}", fontsize=8)
            ax.set_xlabel("log odds of B, shuffled")
        axes[0].set_ylabel("log odds of B, induction")
        fig.colorbar(image, ax=list(axes), label="sequences", shrink=0.85, pad=0.015)
        if title:
            fig.suptitle(literal(title), fontsize=9)
    return fig


def powers_figure(p: Powers, title: str = "") -> Figure:
    """Seed 004 Result 1: histograms of A power and B power over the token range, and B power against A power;
    panels of one size, one legend below."""
    with new_figure(figsize=(7.2, 3.5)) as fig:
        left, right = fig.subplots(1, 2)
        bins = shared_bins([p.a_mean, p.b_mean], 50)
        for role, values, colour in (("A", p.a_mean, "C0"), ("B", p.b_mean, "C1")):
            label = f"{role} power (mean {values.mean():.2f}, sd {values.std():.2f})"
            left.hist(values, bins=bins, histtype="step", lw=1.4, color=colour, label=label)
        left.set_xlabel(f"mean induction strength over {p.per_token} sequences")
        left.set_ylabel("tokens")
        r = np.corrcoef(p.a_mean, p.b_mean)[0, 1] if len(p.ids) > 1 else float("nan")
        right.errorbar(p.a_mean, p.b_mean, xerr=p.a_se, yerr=p.b_se, fmt="o", ms=2, lw=0.4, alpha=0.6, color="0.2")
        right.set_xlabel("A power")
        right.set_ylabel("B power")
        right.set_title(f"{len(p.ids)} tokens, correlation {r:.2f}", fontsize=8)
        legend = figure_legend(fig, (left, right), loc="outside lower center", ncols=2, fontsize=7)
        if title:
            fig.suptitle(literal(title), fontsize=9)
        caption(fig, "A power of a token: its mean induction strength where it is token A; B power: where it is "
                     "token B (seed 004 Result 1). Left: outlines on shared bins; right: each token, bars ± one "
                     "standard error.", legend=legend)
    return fig


def bleeding_figure(results: dict[str, Bleeding], title: str = "") -> Figure:
    """Seed 004 Result 2: mean strength (± standard error) of B's r-th nearest token against r, with B itself
    (rank 0) and random tokens (dashed), one line per model; the legend below."""
    with new_figure(figsize=(5.5, 3.4 + 0.16 * len(results))) as fig:
        ax = fig.subplots()
        for name, bl in results.items():
            ranks = np.arange(bl.near.shape[1] + 1)
            values = np.concatenate([bl.b[:, None], bl.near], axis=1)
            se = values.std(0, ddof=1) / np.sqrt(len(values))
            line = ax.errorbar(ranks, values.mean(0), yerr=se, marker="o", ms=3, label=literal(name))[0]
            ax.axhline(bl.random.mean(), color=line.get_color(), ls="--", lw=1)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xlabel("neighbour rank of the scored token (0 = B itself)")
        ax.set_ylabel("mean induction strength")
        legend = figure_legend(fig, [ax], loc="outside lower center", fontsize=7)
        if title:
            fig.suptitle(literal(title), fontsize=9)
        caption(fig, "Points: mean strength of the token scored, bars ± one standard error; dashed, in the "
                     "model's colour: random tokens; grey: zero.", legend=legend)
    return fig


def write_figures(study: Study, folder: Path, prefix: str, vector: str | None = None,
                  title: str | None = None) -> list[Path]:
    """The four figures of one model under ``folder`` (``PREFIX-strength.png`` …; with ``vector``, each also as
    PDF or SVG), titled ``title`` (default: the study's name)."""
    title = study.name if title is None else title
    return [
        save(strength_figure({study.name: study.strength.strength}, title), folder / f"{prefix}-strength.png",
             vector),
        save(log_odds_figure(study.conditions, title), folder / f"{prefix}-log-odds.png", vector),
        save(powers_figure(study.powers, title), folder / f"{prefix}-powers.png", vector),
        save(bleeding_figure({study.name: study.bleeding}, title), folder / f"{prefix}-bleeding.png", vector),
    ]


CAPACITY_ROWS = (  # (what a row of panels shows, [(key of CapacityRow.row, label, line style)])
    ("induction strength", [("median_strength", "median strength", "o-"), ("mean_strength", "mean strength", "o--")]),
    ("spread over tokens (sd)", [("a_power_sd", "sd of A power", "s-"), ("b_power_sd", "sd of B power", "s--")]),
    ("bleeding: mean strength", [("strength_b", "B itself", "^-"), ("neighbour_1", "B's nearest token", "^--"),
                                 ("random", "random tokens", "^:")]),
)


def capacity_figure(groups: dict[str, list[CapacityRow]], hypotheses: dict[str, str], title: str) -> Figure:
    """Seed 004's hypotheses against capacity: a column per knob (its runs from
    ``depthlab.induction.hypotheses.knob_groups``), rows: induction strength, the spreads of A and B power
    (Hypothesis 1 predicts B's is bigger), bleeding to B's nearest token; runs below 0.5 accuracy crossed; the
    hypotheses quoted below."""
    knobs = list(groups) or ["width"]
    with new_figure(figsize=(2.6 * len(knobs) + 1.8, 7.6)) as fig:
        axes = fig.subplots(len(CAPACITY_ROWS), len(knobs), squeeze=False, sharey="row")
        for j, knob in enumerate(knobs):
            rows = groups.get(knob, [])
            xs = [r.knob(knob) for r in rows]
            for i, (ylabel, series) in enumerate(CAPACITY_ROWS):
                ax = axes[i, j]
                for c, (key, label, style) in enumerate(series):
                    ax.plot(xs, [r.row[key] for r in rows], style, color=f"C{c + 2 * i}", label=label)
                ax.axhline(0, color="grey", lw=0.6)
                failed = [r for r in rows if (r.row.get("accuracy") or 0.0) < 0.5]
                if i == 0 and failed:
                    ax.plot([r.knob(knob) for r in failed], [r.row["median_strength"] for r in failed], "x",
                            color="black", ms=9, label="did not learn the task (accuracy < 0.5)")
                if xs:
                    ax.set_xscale("log", base=2)
                    ax.set_xticks(xs, [str(x) for x in xs])
                if j == 0:
                    ax.set_ylabel(ylabel)
            fixed = ", ".join(f"{k} {rows[0].knob(k)}" for k in KNOBS if k != knob) if rows else ""
            axes[0, j].set_title(f"{KNOBS[knob]}\n({fixed})", fontsize=7)
            axes[-1, j].set_xlabel(knob)
        figure_legend(fig, axes.ravel(), fontsize=7)
        text = "\n".join(textwrap.fill(f"{name}: {quote}", 150) for name, quote in hypotheses.items())
        fig.text(0.0, -0.01, literal(text), fontsize=6, va="top", ha="left", wrap=False)
        fig.suptitle(literal(title), fontsize=9)
    return fig
