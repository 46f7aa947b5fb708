"""Induction sequences, their shuffled controls, and stable log odds (seed 004, Experiments: Setup).

Seed 004: "I use sequences of the form …AB…A, where A and B are random tokens and "…" are sequences of 10 random
tokens. I compare the logprobs at the last position of those "induction sequences" with the logprobs of the same
sequences but where the all tokens expect the last one have been shuffled (such that B is almost never right
after A)."

As the essay's public code does: 24 tokens t_0 … t_23 drawn uniformly from a token range (ids 4 and up), the
earlier A at t_10 and B right after it at t_11, the final A at t_22 and B at t_23; the model reads
``<bos> t_0 … t_22`` (token id 1 first, every token but the last) and is scored on B at the last position. The
shuffled control permutes t_0 … t_21 within each row and keeps the final A and B. Tokens are not made distinct
(A may equal B, and either may occur again), exactly as uniform draws give them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from depthlab.tasks.induction import BOS, FIRST_TOKEN


@dataclass(frozen=True)
class Protocol:
    """Where the tokens go: ``length`` tokens, the earlier A at ``first`` (B after it), beginning token ``bos``."""

    length: int = 24
    first: int = 10
    bos: int = BOS

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.length - 4:
            raise ValueError(f"first must be in [0, length − 4 = {self.length - 4}], got {self.first}")


SEED = Protocol()  # the essay's: 24 tokens, the earlier A at index 10, <bos> = 1


@dataclass(frozen=True)
class TokenRange:
    """Token ids ``lo`` … ``hi`` inclusive (the seed: 4 … 10003, "the first 10000 tokens")."""

    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1

    def ids(self) -> torch.Tensor:
        return torch.arange(self.lo, self.hi + 1)

    def draw(self, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
        return torch.randint(self.lo, self.hi + 1, shape, generator=gen)


def parse_token_range(text: str, d_vocab: int) -> TokenRange:
    """``"4-10003"`` as a TokenRange within a vocabulary of ``d_vocab`` ids (ValueError naming what is allowed)."""
    lo_text, sep, hi_text = text.partition("-")
    try:
        lo, hi = int(lo_text), int(hi_text)
    except ValueError:
        raise ValueError(f"expected LO-HI token ids such as {FIRST_TOKEN}-{d_vocab - 1}, got {text!r}") from None
    if not sep or not 0 <= lo < hi < d_vocab:
        raise ValueError(f"need 0 ≤ LO < HI < d_vocab = {d_vocab} (e.g. {FIRST_TOKEN}-{d_vocab - 1}), got {text!r}")
    return TokenRange(lo, hi)


def default_token_range(d_vocab: int, limit: int = 10_000) -> TokenRange:
    """The seed's range, ids 4 … 10003, cut to the model's vocabulary."""
    return TokenRange(FIRST_TOKEN, min(FIRST_TOKEN + limit - 1, d_vocab - 1))


def induction_tokens(n: int, tokens: TokenRange, gen: torch.Generator, protocol: Protocol = SEED,
                     a: torch.Tensor | None = None, b: torch.Tensor | None = None) -> torch.Tensor:
    """``n`` rows t_0 … t_{length-1} of ``… A B … A B``: [n, length]. ``a`` / ``b`` ([n] or scalar) fix A / B."""
    seq = tokens.draw((n, protocol.length), gen)
    a = seq[:, protocol.first] if a is None else torch.as_tensor(a).expand(n)
    b = seq[:, protocol.first + 1] if b is None else torch.as_tensor(b).expand(n)
    seq[:, protocol.first], seq[:, protocol.length - 2] = a, a
    seq[:, protocol.first + 1], seq[:, protocol.length - 1] = b, b
    return seq


def shuffle_context(seq: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Each row's tokens but the final A and B, permuted (one independent permutation per row)."""
    context = seq.shape[1] - 2
    order = torch.rand(seq.shape[0], context, generator=gen).argsort(dim=1)
    return torch.cat([seq[:, :context].gather(1, order), seq[:, context:]], dim=1)


def model_input(seq: torch.Tensor, protocol: Protocol = SEED) -> torch.Tensor:
    """What the model reads: the beginning token, then every token but the last ([n, length])."""
    return torch.cat([torch.full_like(seq[:, :1], protocol.bos), seq[:, :-1]], dim=1)


def log_odds(log_p: torch.Tensor) -> torch.Tensor:
    """log(p / (1 − p)) from log p, the seed's ``lp - log(1 - exp(lp))``, stable near p = 0 and p = 1.

    log(1 − e^lp) is ``log(-expm1(lp))`` for lp > −log 2 (p near 1, where 1 − e^lp cancels) and
    ``log1p(-exp(lp))`` below (p near 0). Computed in float64; lp is clamped just below 0 so p = 1 in floating
    point gives a large finite value (about 745) instead of infinity.
    """
    lp = log_p.double().clamp(max=-torch.finfo(torch.float64).tiny)
    log_not_p = torch.where(lp > -0.6931471805599453, torch.log(-torch.expm1(lp)), torch.log1p(-torch.exp(lp)))
    return lp - log_not_p
