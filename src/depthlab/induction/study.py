"""Every seed 004 measurement on one model and its summary statistics (the JSON of ``depthlab induction``); its
figures are ``depthlab.draw.induction``.

Defaults follow the essay: 4096 sequences for strengths and bleeding ("I measure induction strengths on 4096
sequences"), 256 sequences per token for A and B power, neighbours up to rank 15 ("between the 1st neighbor and
the 15th"). The 2-D histograms fix A and B to the tokens of median A power and median B power unless given
(the essay fixed " Fab" and "ien").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..analysis.spread import spread
from .measure import Bleeding, LogOddsPair, Powers, bleeding, log_odds_conditions, powers
from .model import LogitModel
from .sequences import SEED, Protocol, TokenRange


@dataclass(frozen=True)
class Settings:
    tokens: TokenRange
    sequences: int = 4096
    per_token: int = 256
    neighbours: int = 15
    seed: int = 0
    batch_size: int = 512
    fix_a: int | None = None
    fix_b: int | None = None
    protocol: Protocol = SEED


@dataclass
class Study:
    name: str
    settings: Settings
    strength: LogOddsPair
    powers: Powers
    bleeding: Bleeding
    conditions: dict[str, LogOddsPair]


def _median_token(ids: np.ndarray, values: np.ndarray) -> int:
    return int(ids[np.argsort(values)[len(values) // 2]])


def run_study(model: LogitModel, s: Settings) -> Study:
    """Strength distribution, A/B powers, bleeding and the fixed-A/B log odds of ``model`` (seeded by ``s.seed``)."""
    if model.n_ctx is not None and s.protocol.length > model.n_ctx:
        raise ValueError(f"the protocol's {s.protocol.length} positions exceed the model's n_ctx = {model.n_ctx}")
    gen = torch.Generator().manual_seed(s.seed)
    p = powers(model, s.tokens, gen, s.per_token, s.protocol, s.batch_size)
    fix_a = s.fix_a if s.fix_a is not None else _median_token(p.ids, p.a_mean)
    fix_b = s.fix_b if s.fix_b is not None else _median_token(p.ids, p.b_mean)
    conditions = log_odds_conditions(model, s.sequences, s.tokens, gen, fix_a, fix_b, s.protocol, s.batch_size)
    bl = bleeding(model, s.sequences, s.tokens, gen, s.neighbours, s.protocol, s.batch_size)
    return Study(model.name, s, next(iter(conditions.values())), p, bl, conditions)


def describe(x: np.ndarray) -> dict[str, float]:
    """mean, median, sd, standard error and count of a sample."""
    x = np.asarray(x, dtype=float)
    sd = float(x.std(ddof=1)) if len(x) > 1 else float("nan")
    return {"mean": float(x.mean()), "median": float(np.median(x)), "sd": sd, "se": sd / np.sqrt(len(x)),
            "n": len(x)}


def _token_spread(means: np.ndarray, se: np.ndarray) -> dict[str, float] | None:
    """How different the power is from one token to the next (the essay's Result 1): CV with its bootstrap
    interval, and the spread net of each token's sampling noise (analysis.spread)."""
    return spread(means, se) if len(means) > 1 else None


def summary(study: Study) -> dict[str, Any]:
    """The JSON of one model: strengths, powers, their correlation, bleeding by rank, log odds per condition."""
    p, bl, s = study.powers, study.bleeding, study.settings
    correlation = float(np.corrcoef(p.a_mean, p.b_mean)[0, 1]) if len(p.ids) > 1 else None
    return {
        "model": study.name,
        "tokens": f"{s.tokens.lo}-{s.tokens.hi}",
        "sequences": s.sequences,
        "per_token": s.per_token,
        "seed": s.seed,
        "strength": describe(study.strength.strength),
        "log_odds": {name: {"induction": describe(c.induction), "shuffled": describe(c.shuffled),
                            "strength": describe(c.strength)} for name, c in study.conditions.items()},
        "a_power": {**describe(p.a_mean), "fraction_below_zero": float((p.a_mean < 0).mean()),
                    "mean_se": float(np.nanmean(p.a_se)), "spread": _token_spread(p.a_mean, p.a_se)},
        "b_power": {**describe(p.b_mean), "fraction_below_zero": float((p.b_mean < 0).mean()),
                    "mean_se": float(np.nanmean(p.b_se)), "spread": _token_spread(p.b_mean, p.b_se)},
        "power_correlation": correlation,
        "bleeding": {
            "b": describe(bl.b),
            "by_rank": [{"rank": r + 1, **describe(bl.near[:, r])} for r in range(bl.near.shape[1])],
            "random": describe(bl.random.reshape(-1)),
        },
    }
