"""What ``depthlab reproduce seed004-induction`` measures: seed 004's measurements on every trained run.

Seed 004 runs its measurements on "Neel Nanda's 2-layer attention only model"; the preset trains 1- and 2-layer
attention-only models on the ``induction`` task and measures each the same way, over every ordinary token of its
vocabulary. Expected direction: the 2-layer model (which can compose a previous-token head with an
induction head) shows strongly positive induction strength, the 1-layer model does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from depthlab.analysis.runs import load_run

from .model import RunModel
from .sequences import default_token_range
from .study import Settings, Study, run_study, summary


@dataclass
class MeasuredRun:
    label: str  # the model family and its depth, as figures' legends name it
    name: str  # ``transformer-2layer``: what the run's own figures are named after
    study: Study
    result: dict[str, Any]  # :func:`depthlab.induction.study.summary`
    row: dict[str, Any]  # the run's row of the preset's table


def _family(spec: Any) -> str:
    """What distinguishes a model family in the table: seed 001's one-hot model or a GPT-style one."""
    if spec.name == "attention_only":
        return f"seed 001 one-hot ({spec.attention})"
    return f"GPT-style{'' if spec.mlp else ' attention-only'}, d_model {spec.width}, {spec.heads} heads"


def measure_runs(store: Any, run_ids: list[str]) -> list[MeasuredRun]:
    """Every seed 004 measurement on each run, with the defaults of ``depthlab induction``."""
    measured = []
    for run_id in run_ids:
        run = load_run(store, run_id)
        lm = RunModel(run)
        study = run_study(lm, Settings(default_token_range(lm.d_vocab), protocol=lm.protocol))
        result = summary(study)
        record = store.get_run(run_id)
        family = _family(run.config.model)
        row = {"model": family, "run": run_id, "layers": lm.layers,
               "mean_strength": result["strength"]["mean"], "median_strength": result["strength"]["median"],
               "sd_strength": result["strength"]["sd"], "a_power_mean": result["a_power"]["mean"],
               "b_power_mean": result["b_power"]["mean"], "power_correlation": result["power_correlation"],
               "bleeding_rank1": result["bleeding"]["by_rank"][0]["mean"],
               "bleeding_random": result["bleeding"]["random"]["mean"],
               "accuracy": (record["final"] or {}).get("accuracy")}
        measured.append(MeasuredRun(f"{family}, {lm.layers} layer{'s' if lm.layers > 1 else ''}",
                                    f"{run.config.model.name}-{lm.layers}layer", study, result, row))
    return measured
