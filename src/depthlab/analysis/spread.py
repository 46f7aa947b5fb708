"""How different a per-item quantity is from one item to the next: seed 004's "Induction strength is very different
from one token to the next" (Result 1), measured on the A and B powers, one mean per token.

The spread is read relative to the level, as the coefficient of variation CV = sd / |mean| (an sd of 0.9 means little
on a mean of 24 and much on a mean of 2), with a percentile bootstrap interval over the items. Each item's value is
itself a mean over a few hundred sequences, so part of the sd across items is that sampling noise; given each item's
standard error, ``between_sd`` is the spread with the noise taken out, sqrt(max(var − mean(se²), 0)) (the method
of moments for a random-effects model), and ``between_cv`` its CV.
"""

from __future__ import annotations

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
LEVEL = 0.95


def coefficient_of_variation(values: np.ndarray) -> np.ndarray:
    """sd (ddof = 1) over |mean| along the last axis; NaN where the mean is 0."""
    values = np.asarray(values, dtype=float)
    mean = np.abs(values.mean(-1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(mean > 0, values.std(-1, ddof=1) / mean, np.nan)


def spread(values: np.ndarray, se: np.ndarray | None = None, resamples: int = BOOTSTRAP_RESAMPLES,
           level: float = LEVEL, seed: int = 0) -> dict[str, float]:
    """The spread of ``values`` (one number per item): mean, sd, CV with its bootstrap interval (``level``,
    ``resamples`` resamples of the items, seeded), and with ``se`` (each item's standard error) the between-item sd
    and CV net of sampling noise."""
    values = np.asarray(values, dtype=float)
    if values.ndim != 1 or len(values) < 2:
        raise ValueError("spread needs at least two items, one value each")
    rng = np.random.default_rng(seed)
    draws = coefficient_of_variation(values[rng.integers(0, len(values), (resamples, len(values)))])
    tail = (1 - level) / 2
    low, high = np.nanquantile(draws, [tail, 1 - tail])
    out = {"n": len(values), "mean": float(values.mean()), "sd": float(values.std(ddof=1)),
           "cv": float(coefficient_of_variation(values)), "cv_low": float(low), "cv_high": float(high),
           "level": level}
    if se is not None:
        noise = float(np.nanmean(np.square(np.asarray(se, dtype=float))))
        between = float(np.sqrt(max(values.var(ddof=1) - noise, 0.0)))
        out |= {"between_sd": between, "between_cv": between / abs(out["mean"]) if out["mean"] else float("nan")}
    return out
