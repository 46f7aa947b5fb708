"""Seed 004's tables: one model's summary, as ``depthlab induction`` and the seed004-induction preset show it."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def summary_tables(result: dict[str, Any]) -> list[Table]:
    """Rich tables of one model's summary: strengths and powers, then bleeding by neighbour rank."""
    stats = Table("", "mean", "median", "sd", "n", title=f"{result['model']}: tokens {result['tokens']}")
    for label, key in (("induction strength", "strength"), ("A power", "a_power"), ("B power", "b_power")):
        s = result[key]
        stats.add_row(label, f"{s['mean']:.3f}", f"{s['median']:.3f}", f"{s['sd']:.3f}", str(s["n"]))
    corr = result["power_correlation"]
    below = {role: result[f"{role}_power"]["fraction_below_zero"] for role in ("a", "b")}
    stats.caption = (f"correlation of A and B power {'—' if corr is None else f'{corr:.3f}'}; powers below zero: "
                     f"A {below['a']:.1%}, B {below['b']:.1%}")
    bleed = Table("scored token", "mean strength", "± se", title="bleeding: strength of B's nearest tokens")
    rows = [("B", result["bleeding"]["b"])]
    rows += [(f"neighbour {r['rank']}", r) for r in result["bleeding"]["by_rank"]]
    rows += [("random tokens", result["bleeding"]["random"])]
    for label, s in rows:
        bleed.add_row(label, f"{s['mean']:.3f}", f"{s['se']:.3f}")
    return [stats, bleed]
