"""Seed 004's tables: one model's summary (``depthlab induction``) and the runs of ``reproduce seed004-induction``."""

from __future__ import annotations

from typing import Any

from ..analysis.tables import Column, Table


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


RUN_MEASURES = (("accuracy", "accuracy", 3), ("mean strength", "mean_strength", 2),
                ("median strength", "median_strength", 2), ("A power", "a_power_mean", 2),
                ("B power", "b_power_mean", 2), ("corr(A, B)", "power_correlation", 2),
                ("neighbour 1", "bleeding_rank1", 2), ("random tokens", "bleeding_random", 2))


def runs_table(rows: list[dict[str, Any]], title: str) -> Table:
    """A column per measured run (:func:`depthlab.induction.reproduce.measure_runs`), a row per measure: accuracy,
    strengths, powers and bleeding. Runs are columns because their names are long: as the first cell of a row they
    wrapped every row over several lines at 80 columns, while a header may wrap; what each measure is, said below."""
    table = Table([Column("", no_wrap=True),
                   *(Column(f"{r['model']}, {r['layers']} layer{'s' if r['layers'] != 1 else ''}", "right")
                     for r in rows)],
                  title=title, title_justify="center",
                  caption="strength: log odds of B, induction − shuffled, over sequences; A (B) power: a token's mean "
                          "strength where it is A (B), averaged over tokens; corr(A, B): their correlation over "
                          "tokens; neighbour 1, random tokens: mean strength of B's nearest token in unembedding "
                          "space and of random tokens (bleeding)")
    for name, key, digits in RUN_MEASURES:
        table.add_row(name, *("—" if r[key] is None else f"{r[key]:.{digits}f}" for r in rows))
    return table
