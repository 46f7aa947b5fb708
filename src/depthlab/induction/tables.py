"""Seed 004's tables: one model's summary (``depthlab induction``) and the runs of ``reproduce seed004-induction``."""

from __future__ import annotations

from typing import Any

from ..analysis.tables import Table


def summary_tables(result: dict[str, Any]) -> list[Table]:
    """One model's summary (:func:`depthlab.induction.study.summary`): strengths and powers, then bleeding by
    neighbour rank."""
    below = {role: result[f"{role}_power"]["fraction_below_zero"] for role in ("a", "b")}
    corr = result["power_correlation"]
    stats = Table.of("", "mean", "median", "sd", "n", title=f"{result['model']}: tokens {result['tokens']}",
                     caption=f"correlation of A and B power {'—' if corr is None else f'{corr:.3f}'}; powers below "
                             f"zero: A {below['a']:.1%}, B {below['b']:.1%}",
                     title_justify="center", caption_justify="center")
    for label, key in (("induction strength", "strength"), ("A power", "a_power"), ("B power", "b_power")):
        s = result[key]
        stats.add_row(label, f"{s['mean']:.3f}", f"{s['median']:.3f}", f"{s['sd']:.3f}", str(s["n"]))
    bleed = Table.of("scored token", "mean strength", "± se", title="bleeding: strength of B's nearest tokens",
                     title_justify="center")
    rows = [("B", result["bleeding"]["b"])]
    rows += [(f"neighbour {r['rank']}", r) for r in result["bleeding"]["by_rank"]]
    rows += [("random tokens", result["bleeding"]["random"])]
    for label, s in rows:
        bleed.add_row(label, f"{s['mean']:.3f}", f"{s['se']:.3f}")
    return [stats, bleed]


def runs_table(rows: list[dict[str, Any]], title: str) -> Table:
    """A row per measured run (:func:`depthlab.induction.reproduce.measure_runs`): accuracy, strengths, powers and
    bleeding."""
    table = Table.of("model", "layers", "accuracy", "mean strength", "median strength", "A power", "B power",
                     "corr(A, B)", "neighbour 1", "random", title=title, title_justify="center")
    for r in rows:
        table.add_row(r["model"], str(r["layers"]), "—" if r["accuracy"] is None else f"{r['accuracy']:.3f}",
                      f"{r['mean_strength']:.2f}", f"{r['median_strength']:.2f}", f"{r['a_power_mean']:.2f}",
                      f"{r['b_power_mean']:.2f}", f"{r['power_correlation']:.2f}", f"{r['bleeding_rank1']:.2f}",
                      f"{r['bleeding_random']:.2f}")
    return table
