"""Seed 004's fine-grained hypotheses as measurements: induction against the capacity of the model.

The essay's question: "there isn't enough capacity to copy "A" to the second position and "B" to the last
position without very lossy compression". Its two hypotheses (quoted in :data:`HYPOTHESES`) name the places
where capacity runs out: the residual stream that must hold B and a compressed A at position 2, and the OV
circuits of the induction heads, "nb_induction_heads*embedding_size/nb_heads dimensions". The knobs
(:data:`KNOBS`) are those quantities: ``model.width`` (the residual stream), ``model.d_head`` (one head's OV
channel), ``model.heads`` (heads per layer; with d_head, the OV dimensions of a layer) and ``task.n_tokens`` (the
words that must be told apart). Every run is measured with seed 004's measurements (``depthlab.induction.study``);
the essay's own reading of its Result 1 is the prediction checked: "hypothesis 1 would predict that the B powers
would have a bigger spread" — the spread (sd) of B power against that of A power, per run.

Runs are grouped by knob: for each knob, the runs that agree on every other knob (the largest such group with two
or more values of it), so a preset of one sweep per knob around a base model gives one curve per knob.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..analysis.runs import load_run
from ..analysis.tables import Column, Table
from .model import RunModel
from .sequences import default_token_range
from .study import Settings, run_study, summary

KNOBS: dict[str, str] = {"width": "d_model (residual stream)", "d_head": "head size (OV channel of a head)",
                         "heads": "heads per layer", "n_tokens": "words in the vocabulary"}
HYPOTHESES: dict[str, str] = {
    "Hypothesis 1": "“When A is copied over to position 2, it does not overlap with B […] only a compressed version "
                    "of A is copied over to position 2 in the remaining subspace B does not use”; the OV circuits "
                    "“temporarily store the vectors in nb_induction_heads*embedding_size/nb_heads dimensions […] "
                    "Therefore, only a low-rank approximation of B is copied over to the last position.” Its "
                    "prediction: “hypothesis 1 would predict that the B powers would have a bigger spread”.",
    "Hypothesis 2": "“Token A is just added to B with a flipped sign […] B - A is used both as key and value […] The "
                    "network outputs B because B=(B - A) + A”; it needs “Token A […] copied to position 2 and then "
                    "to the last position without too much loss” and “Token B […] copied through the second "
                    "layer’s OV circuit without too much loss”.",
}


@dataclass
class CapacityRow:
    """One run: its capacity, accuracy and seed 004's numbers."""

    run: str
    width: int
    d_head: int
    heads: int
    n_tokens: int
    row: dict[str, Any]  # accuracy, strength and power statistics, bleeding (see :func:`capacity_rows`)

    def knob(self, name: str) -> int:
        return int(getattr(self, name))


def capacity_rows(store: Any, run_ids: list[str], per_token: int = 256, sequences: int = 4096) -> list[CapacityRow]:
    """Seed 004's measurements on every run (``per_token`` sequences per token for A and B power, ``sequences``
    for strengths and bleeding), with the run's capacity knobs."""
    out = []
    for run_id in run_ids:
        run = load_run(store, run_id)
        lm = RunModel(run)
        result = summary(run_study(lm, Settings(default_token_range(lm.d_vocab), sequences=sequences,
                                                per_token=per_token, protocol=lm.protocol)))
        spec = run.config.model
        d_head = spec.d_head or spec.width // spec.heads
        final = (store.get_run(run_id) or {}).get("final") or {}
        a, b, bleed = result["a_power"], result["b_power"], result["bleeding"]
        out.append(CapacityRow(run_id, spec.width, d_head, spec.heads, run.task.n_tokens, {
            "accuracy": final.get("accuracy"), "mean_strength": result["strength"]["mean"],
            "median_strength": result["strength"]["median"], "a_power_mean": a["mean"], "a_power_sd": a["sd"],
            "b_power_mean": b["mean"], "b_power_sd": b["sd"], "power_correlation": result["power_correlation"],
            "strength_b": bleed["b"]["mean"], "neighbour_1": bleed["by_rank"][0]["mean"],
            "neighbour_last": bleed["by_rank"][-1]["mean"], "random": bleed["random"]["mean"],
            "ov_dimensions": spec.heads * d_head}))
    return out


def knob_groups(rows: list[CapacityRow]) -> dict[str, list[CapacityRow]]:
    """Per knob, the largest group of runs that agree on every other knob and take two or more values of it,
    sorted by the knob's value."""
    groups: dict[str, list[CapacityRow]] = {}
    for knob in KNOBS:
        others = [k for k in KNOBS if k != knob]
        by_rest: dict[tuple[int, ...], list[CapacityRow]] = {}
        for r in rows:
            by_rest.setdefault(tuple(r.knob(k) for k in others), []).append(r)
        best = max(by_rest.values(), key=lambda g: len({r.knob(knob) for r in g}), default=[])
        if len({r.knob(knob) for r in best}) >= 2:
            groups[knob] = sorted(best, key=lambda r: r.knob(knob))
    return groups


def capacity_table(rows: list[CapacityRow], title: str) -> Table:
    """A row per run: its knobs, accuracy, strengths, the spreads of A and B power, and bleeding. Short headers,
    said in full below, so that the twelve columns fit 80 when piped."""
    key = ("h: heads; acc: accuracy; med: median induction strength; sd A, sd B: the spread (sd) of A and B power; "
           "B/A: their ratio; B, nb 1, rand: mean strength of B, of its nearest token and of random tokens "
           "(bleeding). ")
    table = Table([Column(c, "right") for c in ("d_model", "h", "d_head", "words", "acc", "med", "sd A", "sd B",
                                                "B/A", "B", "nb 1", "rand")],
                  title=title, caption=key + " ".join(f"{name}: {text}" for name, text in HYPOTHESES.items()),
                  compact=True)
    for r in sorted(rows, key=lambda r: (r.width, r.heads, r.d_head, r.n_tokens)):
        x = r.row
        acc = "—" if x["accuracy"] is None else f"{x['accuracy']:.3f}"
        table.add_row(str(r.width), str(r.heads), str(r.d_head), str(r.n_tokens), acc,
                      f"{x['median_strength']:.2f}", f"{x['a_power_sd']:.2f}", f"{x['b_power_sd']:.2f}",
                      f"{x['b_power_sd'] / x['a_power_sd']:.2f}", f"{x['strength_b']:.2f}",
                      f"{x['neighbour_1']:.2f}", f"{x['random']:.2f}")
    return table


def capacity_json(rows: list[CapacityRow]) -> list[dict[str, Any]]:
    return [{"run": r.run, "width": r.width, "heads": r.heads, "d_head": r.d_head, "n_tokens": r.n_tokens, **r.row}
            for r in rows]
