"""Seed 004's measurements on any ``LogitModel``: induction strength, A and B power, bleeding.

- Induction strength (seed 004, Setup): "the difference of log odd-ratios before and after shuffling"; for a
  sequence, log odds of B at the last position of the induction sequence minus those of its shuffled control.
- A power and B power (Result 1): "For a given token, I measure it's average induction strength across 256
  sequences where it is token A ("A power"), and it's average induction strength across 256 sequences where it
  is token B ("B power")", for every token of a range ("the first 10000 tokens"), here with standard errors.
- Bleeding (Result 2): the same strength "where B* is a token near to B in the unembedding space (according to
  the cosine similarity)", and for random tokens R ("new random tokens for each experiment"), by neighbour rank.
  Neighbours are searched among the token range, by cosine between normalised unembedding columns, B excluded;
  each sequence draws its own k random tokens.

Everything is batched: a measurement builds all its sequences at once, runs them through the model in chunks
of ``batch_size`` and gathers every token it scores from one log-softmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .model import LogitModel
from .sequences import SEED, Protocol, TokenRange, induction_tokens, log_odds, model_input, shuffle_context


@dataclass
class LogOddsPair:
    """Log odds of the scored tokens on induction sequences and on their shuffled controls ([N] or [N, K])."""

    induction: np.ndarray
    shuffled: np.ndarray

    @property
    def strength(self) -> np.ndarray:
        return self.induction - self.shuffled


@dataclass
class Powers:
    """A power and B power of each token id in ``ids``: means over ``per_token`` sequences, standard errors."""

    ids: np.ndarray
    a_mean: np.ndarray
    a_se: np.ndarray
    b_mean: np.ndarray
    b_se: np.ndarray
    per_token: int


@dataclass
class Bleeding:
    """Strength of B (rank 0), of B's k nearest tokens (rank 1 … k) and of k random tokens, per sequence."""

    b: np.ndarray  # [N]
    near: np.ndarray  # [N, k], column r-1 = the r-th nearest token
    random: np.ndarray  # [N, k]


@torch.no_grad()
def target_log_odds(model: LogitModel, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int) -> np.ndarray:
    """Log odds at the last position of the tokens ``targets`` [N, K] given ``inputs`` [N, n]: float64 [N, K]."""
    out = []
    for start in range(0, inputs.shape[0], batch_size):
        logits = model.logits(inputs[start : start + batch_size]).double()
        log_p = torch.log_softmax(logits, dim=-1).gather(1, targets[start : start + batch_size])
        out.append(log_odds(log_p))
    return torch.cat(out).numpy()


def compare(model: LogitModel, seq: torch.Tensor, targets: torch.Tensor, gen: torch.Generator,
            protocol: Protocol, batch_size: int) -> LogOddsPair:
    """Log odds of ``targets`` [N, K] after the induction rows ``seq`` and after their shuffled controls."""
    controls = shuffle_context(seq, gen)
    return LogOddsPair(target_log_odds(model, model_input(seq, protocol), targets, batch_size),
                       target_log_odds(model, model_input(controls, protocol), targets, batch_size))


def strengths(model: LogitModel, n: int, tokens: TokenRange, gen: torch.Generator, protocol: Protocol = SEED,
              a: int | None = None, b: int | None = None, batch_size: int = 512) -> LogOddsPair:
    """Log odds of B before and after shuffling on ``n`` fresh sequences ([N]); ``a`` / ``b`` fix A / B."""
    seq = induction_tokens(n, tokens, gen, protocol, None if a is None else torch.tensor(a),
                           None if b is None else torch.tensor(b))
    pair = compare(model, seq, seq[:, -1:], gen, protocol, batch_size)
    return LogOddsPair(pair.induction[:, 0], pair.shuffled[:, 0])


def powers(model: LogitModel, tokens: TokenRange, gen: torch.Generator, per_token: int = 256,
           protocol: Protocol = SEED, batch_size: int = 512, block: int = 65536) -> Powers:
    """A power and B power of every token of ``tokens``, ``per_token`` sequences each (``block`` rows at a time)."""
    ids = tokens.ids()
    means = {"a": [], "b": []}
    ses = {"a": [], "b": []}
    step = max(1, block // per_token)
    for start in range(0, len(ids), step):
        fixed = ids[start : start + step].repeat_interleave(per_token)
        for role in ("a", "b"):
            seq = induction_tokens(len(fixed), tokens, gen, protocol, **{role: fixed})
            s = compare(model, seq, seq[:, -1:], gen, protocol, batch_size).strength.reshape(-1, per_token)
            means[role].append(s.mean(1))
            ses[role].append(s.std(1, ddof=1) / np.sqrt(per_token) if per_token > 1 else np.full(len(s), np.nan))
    return Powers(ids.numpy(), np.concatenate(means["a"]), np.concatenate(ses["a"]), np.concatenate(means["b"]),
                  np.concatenate(ses["b"]), per_token)


def nearest_tokens(unembed: torch.Tensor, b: torch.Tensor, tokens: TokenRange, k: int,
                   chunk: int = 1024) -> torch.Tensor:
    """The ``k`` tokens of ``tokens`` nearest to each B ([N]) by cosine of unembedding columns, B excluded: [N, k]."""
    if k > tokens.size - 1:
        raise ValueError(f"k must be at most {tokens.size - 1} (the token range without B), got {k}")
    columns = torch.nn.functional.normalize(unembed.float().cpu(), dim=0)
    candidates = columns[:, tokens.lo : tokens.hi + 1]
    unique, inverse = b.unique(return_inverse=True)
    found = []
    for start in range(0, len(unique), chunk):
        rows = unique[start : start + chunk]
        sims = columns[:, rows].T @ candidates  # [rows, range]
        inside = (rows >= tokens.lo) & (rows <= tokens.hi)
        sims[inside.nonzero().flatten(), rows[inside] - tokens.lo] = float("-inf")  # B itself
        found.append(sims.topk(k, dim=1).indices + tokens.lo)
    return torch.cat(found)[inverse]


def bleeding(model: LogitModel, n: int, tokens: TokenRange, gen: torch.Generator, k: int = 15,
             protocol: Protocol = SEED, batch_size: int = 512) -> Bleeding:
    """Strength of B, of its ``k`` nearest tokens and of ``k`` random tokens on ``n`` fresh sequences."""
    seq = induction_tokens(n, tokens, gen, protocol)
    b = seq[:, -1]
    near = nearest_tokens(model.unembed(), b, tokens, k)
    targets = torch.cat([b[:, None], near, tokens.draw((n, k), gen)], dim=1)
    s = compare(model, seq, targets, gen, protocol, batch_size).strength
    return Bleeding(s[:, 0], s[:, 1 : k + 1], s[:, k + 1 :])


def log_odds_conditions(model: LogitModel, n: int, tokens: TokenRange, gen: torch.Generator, fix_a: int, fix_b: int,
                        protocol: Protocol = SEED, batch_size: int = 512) -> dict[str, LogOddsPair]:
    """Seed 004's 2-D histogram data: log odds of B before and after shuffling with neither, A, B or both fixed."""
    fixed = {"A and B random": (None, None), f"A = {fix_a}": (fix_a, None), f"B = {fix_b}": (None, fix_b),
             f"A = {fix_a}, B = {fix_b}": (fix_a, fix_b)}
    return {name: strengths(model, n, tokens, gen, protocol, a, b, batch_size) for name, (a, b) in fixed.items()}
