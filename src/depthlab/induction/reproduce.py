"""The summary of ``depthlab reproduce seed004-induction``: seed 004's measurements on every trained run.

Seed 004 runs its measurements on "Neel Nanda's 2-layer attention only model"; the preset trains 1- and 2-layer
attention-only models on the ``induction`` task and measures each the same way, over every ordinary token of its
vocabulary. Expected direction: the 2-layer model (which can compose a previous-token head with an
induction head) shows strongly positive induction strength, the 1-layer model does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table

from depthlab.analysis.runs import load_run

from .figures import bleeding_figure, strength_figure
from .model import RunModel
from .sequences import default_token_range
from .study import Settings, run_study, summary, write_figures
from .tables import summary_tables


def _label(spec: Any) -> str:
    """What distinguishes a model family in the table: seed 001's one-hot model or a GPT-style one."""
    if spec.name == "attention_only":
        return f"seed 001 one-hot ({spec.attention})"
    return f"GPT-style{'' if spec.mlp else ' attention-only'}, d_model {spec.width}, {spec.heads} heads"


def induction_summary(store: Any, run_ids: list[str], figure: Path, title: str) -> tuple[dict[str, Any], Any]:
    """Measure every run; rows of mean/median strength per model, a combined figure and four figures per run."""
    studies, rows, figures = [], [], []
    for run_id in run_ids:
        run = load_run(store, run_id)
        lm = RunModel(run)
        study = run_study(lm, Settings(default_token_range(lm.d_vocab), protocol=lm.protocol))
        result = summary(study)
        record = store.get_run(run_id)
        label = f"{_label(run.config.model)}, {lm.layers} layer{'s' if lm.layers > 1 else ''}"
        figures += write_figures(study, figure.parent, f"{figure.stem}-{run.config.model.name}-{lm.layers}layer")
        studies.append((label, study, result))
        rows.append({"model": _label(run.config.model), "run": run_id, "layers": lm.layers,
                     "mean_strength": result["strength"]["mean"], "median_strength": result["strength"]["median"],
                     "sd_strength": result["strength"]["sd"], "a_power_mean": result["a_power"]["mean"],
                     "b_power_mean": result["b_power"]["mean"], "power_correlation": result["power_correlation"],
                     "bleeding_rank1": result["bleeding"]["by_rank"][0]["mean"],
                     "bleeding_random": result["bleeding"]["random"]["mean"],
                     "accuracy": (record["final"] or {}).get("accuracy")})
    combined = strength_figure({label: s.strength.strength for label, s, _ in studies}, figure)
    bleed = bleeding_figure({label: s.bleeding for label, s, _ in studies},
                            figure.with_name(f"{figure.stem}-bleeding{figure.suffix}"))
    figures = [combined, bleed, *figures]
    table = Table("model", "layers", "accuracy", "mean strength", "median strength", "A power", "B power",
                  "corr(A, B)", "neighbour 1", "random", title=title)
    for r in rows:
        table.add_row(r["model"], str(r["layers"]), "—" if r["accuracy"] is None else f"{r['accuracy']:.3f}",
                      f"{r['mean_strength']:.2f}", f"{r['median_strength']:.2f}", f"{r['a_power_mean']:.2f}",
                      f"{r['b_power_mean']:.2f}", f"{r['power_correlation']:.2f}", f"{r['bleeding_rank1']:.2f}",
                      f"{r['bleeding_random']:.2f}")
    details = [t for _, _, result in studies for t in summary_tables(result)]
    out = {"rows": rows, "figure": str(combined), "figures": [str(f) for f in figures],
           "models": [result for _, _, result in studies]}
    return out, Group(table, *details)
