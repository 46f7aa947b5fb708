"""Induction sequences ``… A B … A → B`` for training small attention-only language models (seed 004).

Seed 004: "I use sequences of the form …AB…A, where A and B are random tokens and "…" are sequences of 10
random tokens." Its public code draws tokens uniformly from ids 4 and up, starts the model's input with token
id 1 (beginning of sequence) and reads the prediction at the final A. This task trains on exactly that read-out:

    input  = <bos> t_0 … t_{n-2}          (n = ``seq_len`` positions, the BOS included)
    target = t_{n-1} = B,  with t_{n-2} = A, t_p = A, t_{p+1} = B for one earlier position p

Token ids: 0 ``<pad>``, 1 ``<bos>``, 2 and 3 unused (kept so ids match the seed's code), words 4 … 4 + n_tokens − 1
(written ``t4``, ``t5``, …). The classifier predicts a vocabulary token (``labels == vocab``), as a language
model's unembedding does, so a trained run's ``unembed.W_U`` is [d_model, d_vocab].

Choices, each to rule out a shortcut that is not induction:
- p is uniform over every position that leaves at least one token between B and the final A (``first=None``), so
  no positional rule finds B; ``first`` fixes it (the seed's measurement uses t_10).
- A and B are distinct and A occurs nowhere else (other draws of A are redrawn among the other words), so the
  repeated bigram A B is the only evidence for the answer. The other tokens stay uniform: B may occur again.
The models in depthlab read one position (the attention-only model of seed 001 is not causal), so the loss is
next-token prediction at the final A only. Chance is 1/n_tokens; a model that copies a uniformly chosen context
token gets about 1/(n − 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field, model_validator

from depthlab.tasks.base import Batch, Task, check_split, register, sample_distinct

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter

BOS = 1  # the seed's beginning-of-sequence token id
FIRST_TOKEN = 4  # the seed's first ordinary token id
SPECIALS = ["<pad>", "<bos>", "<2>", "<3>"]


@register
class Induction(Task):
    name = "induction"
    title = "induction"
    section = "seed 004 (Experiments, Setup)"
    summary = "induction: … A B … A → B, a random bigram repeated; predict B at the final A"
    eval_protocol = "fresh random sequences"

    n_tokens: int = Field(64, ge=3, description="ordinary tokens (ids 4 … 4 + n_tokens − 1)")
    length: int = Field(24, ge=5, description="n: input positions, the <bos> included (the seed: 24)")
    first: int | None = Field(None, ge=0, description="index of the first A among t_0 …; None = uniform")

    @model_validator(mode="after")
    def _check(self) -> Induction:
        if self.first is not None and self.first > self.length - 4:
            raise ValueError(f"first must be at most length − 4 = {self.length - 4}: B must come before the final A")
        return self

    @property
    def vocab(self) -> list[str]:
        return [*SPECIALS, *(f"t{i}" for i in range(FIRST_TOKEN, FIRST_TOKEN + self.n_tokens))]

    @property
    def vocab_size(self) -> int:
        return len(SPECIALS) + self.n_tokens

    @property
    def labels(self) -> list[str]:
        return self.vocab

    @property
    def seq_len(self) -> int:
        return self.length

    @property
    def chance(self) -> float:
        return 1.0 / self.n_tokens

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, ("train", "eval"))
        m = self.length  # tokens t_0 … t_{m-1}; the input drops the last and starts with <bos>
        tokens = rng.integers(0, self.n_tokens, (n, m))
        ab = sample_distinct(rng, n, self.n_tokens, 2)
        first = (np.full(n, self.first) if self.first is not None else rng.integers(0, m - 3, n)).astype(np.int64)
        rows = np.arange(n)
        others = tokens == ab[:, :1]  # redraw A elsewhere: shift by 1 … n_tokens − 1 (never back to A)
        tokens[others] = (tokens[others] + rng.integers(1, self.n_tokens, int(others.sum()))) % self.n_tokens
        tokens[rows, first], tokens[rows, first + 1] = ab[:, 0], ab[:, 1]
        tokens[:, m - 2], tokens[:, m - 1] = ab[:, 0], ab[:, 1]
        tokens += FIRST_TOKEN
        inputs = np.concatenate([np.full((n, 1), BOS, dtype=np.int64), tokens[:, :-1]], axis=1)
        return Batch(inputs, tokens[:, -1].copy(), {"first": first})

    counter_sampling = True

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s distribution from the counter stream: uniform tokens, A ≠ B distinct, A's other draws
        shifted by 1 … n_tokens − 1 (uniform among the other words), A B written at ``first`` (uniform in
        0 … n − 4 when None) and at the end."""
        import torch

        m = self.length
        tokens = counter.below(self.n_tokens, draw=0, width=m)  # [R, B, m]
        ab = counter.distinct(self.n_tokens, 2, draw=1)  # [R, B, 2]
        a, b = ab[..., :1], ab[..., 1:]
        shift = 1 + counter.below(self.n_tokens - 1, draw=2, width=m)
        tokens = torch.where(tokens == a, (tokens + shift) % self.n_tokens, tokens)
        first = counter.below(m - 3, draw=3) if self.first is None else torch.full_like(a, self.first)
        tokens = tokens.scatter(-1, first, a).scatter(-1, first + 1, b)
        tokens = torch.cat([tokens[..., : m - 2], ab], -1) + FIRST_TOKEN
        return torch.cat([torch.full_like(a, BOS), tokens[..., :-1]], -1), tokens[..., -1]

    def dataset_size(self, split: str = "eval") -> int:
        return 2**62

    def enumerate(self, split: str = "eval") -> Batch | None:
        return None
