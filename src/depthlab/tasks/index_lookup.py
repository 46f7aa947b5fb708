"""Index lookup (seed 003 §3, Appendix H.1).

Seed 003 §3: "a model receives a sequence of tokens s_1, …, s_N (possibly with repetitions) followed by an
index p where p ∈ [N] and the goal of the model is to output the token s_p." Appendix H.1: "the size of the
set of symbols is |Σ| = 64 […] we first sample a length k uniformly between 10 and N […] and then sample
[k] symbols independently from Σ uniformly at random. Lastly, we sample a position between 1 and k uniformly
at random and append it to the sequence […]. During evaluation, the model is tested on sequences of length
exactly N."

Token ids: symbols 0..|Σ|-1 (written a, b, …), index tokens |Σ|..|Σ|+N-1 (written @1 … @N: the index p is its
own token, as the paper's "positional token in [N]"), and one padding token |Σ|+N (written ·). Every input
has N + 1 tokens; the read-out is the last one, the index token. Labels are the |Σ| symbols; chance is 1/|Σ|.

Shorter training strings (k < N) are padded to N symbols with the padding token. ``padding="before_index"``
(default) puts the pads between the string and the index token: s_i stays at position i for every training
length, as it is at evaluation, so absolute position embeddings learnt on short strings are the ones the
length-N evaluation needs, and the index token stays last. ``padding="left"`` puts them first (the usual left
padding): then s_p sits at position N − k + p, which a 1-layer transformer can only find by counting pads.
Models mask nothing: a pad is an ordinary token. Evaluation strings have k = N, hence no pads.

The evaluation split is a fixed set of ``eval_size`` strings drawn from a fixed seed (the paper evaluates on
5000 fresh examples), so every run of a study is scored on the same examples (see ``tasks.eval_sets``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, model_validator

from depthlab.tasks.base import Batch, check_split, letter_names, register
from depthlab.tasks.eval_sets import SPLITS, FixedEvalSet

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter


@register
class IndexLookup(FixedEvalSet):
    name = "index_lookup"
    title = "index lookup"
    section = "seed 003 §3, App. H.1"
    summary = "index lookup: output the symbol at the position named by the last token"
    eval_protocol = "eval_size fresh strings of length exactly N (training lengths uniform in [min_length, N])"

    N: int = Field(20, ge=1, description="evaluation length (number of symbols)")
    alphabet: int = Field(64, ge=2, description="|Σ|")
    min_length: int = Field(10, ge=1, description="shortest training string")
    padding: Literal["before_index", "left"] = "before_index"
    eval_size: int = Field(5000, ge=1, description="evaluation examples (the paper: 5000 fresh examples)")

    @model_validator(mode="after")
    def _check(self) -> IndexLookup:
        if self.min_length > self.N:
            raise ValueError(f"min_length ({self.min_length}) must be at most N ({self.N})")
        return self

    @property
    def index_offset(self) -> int:
        return self.alphabet

    @property
    def pad_id(self) -> int:
        return self.alphabet + self.N

    @property
    def vocab(self) -> list[str]:
        return [*letter_names(self.alphabet), *(f"@{p}" for p in range(1, self.N + 1)), "·"]

    @property
    def vocab_size(self) -> int:
        return self.alphabet + self.N + 1

    @property
    def labels(self) -> list[str]:
        return letter_names(self.alphabet)

    @property
    def n_outputs(self) -> int:
        return self.alphabet

    @property
    def seq_len(self) -> int:
        return self.N + 1

    @property
    def chance(self) -> float:
        return 1.0 / self.alphabet

    @property
    def n_inputs(self) -> int:
        return self.N * self.alphabet**self.N

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        big_n = self.N
        symbols = rng.integers(0, self.alphabet, (n, big_n))
        k = rng.integers(self.min_length, big_n + 1, n) if split == "train" else np.full(n, big_n)
        p = (rng.random(n) * k).astype(np.int64) + 1  # uniform in 1..k
        targets = symbols[np.arange(n), p - 1]
        inputs = np.empty((n, big_n + 1), dtype=np.int64)
        inputs[:, -1] = self.index_offset + p - 1
        if self.padding == "before_index":
            inputs[:, :big_n] = np.where(np.arange(big_n)[None] < k[:, None], symbols, self.pad_id)
        else:  # left: the k symbols end right before the index token
            shift = (np.arange(big_n)[None] - (big_n - k)[:, None])  # position of each column in the string
            inputs[:, :big_n] = np.where(shift >= 0, np.take_along_axis(symbols, np.clip(shift, 0, None), 1),
                                         self.pad_id)
        return Batch(inputs, targets.astype(np.int64), {"k": k.astype(np.int64), "p": p})

    counter_sampling = True

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s training distribution from the counter stream: k uniform in [min_length, N], N symbols
        uniform in Σ (the first k used), p uniform in 1..k; padded as ``padding`` says, the index token last."""
        import torch

        big_n = self.N
        symbols = counter.below(self.alphabet, draw=0, width=big_n)  # [R, B, N]
        k = self.min_length + counter.below(big_n - self.min_length + 1, draw=1)  # [R, B, 1]
        p = counter.below(k, draw=2) + 1
        columns = torch.arange(big_n, device=symbols.device)
        if self.padding == "before_index":
            string = torch.where(columns < k, symbols, self.pad_id)
        else:  # left: the k symbols end right before the index token
            shift = columns - (big_n - k)
            string = torch.where(shift >= 0, symbols.gather(-1, shift.clamp(min=0)), self.pad_id)
        inputs = torch.cat([string, self.index_offset + p - 1], -1)
        return inputs, symbols.gather(-1, p - 1)[..., 0]
