"""Multi-query associative recall, MQAR (Arora et al., 2023; seed 003 Appendix G relates it to NstNb).

Seed 003 App. G: "the model is first provided with the prompt (x_1, y_1, …, x_{N/2}, y_{N/2}) and the
subsequent N/2 input vectors are a permutation of the first N/2 vectors […] the model has to find the exact
match of x_k in the first N/2 vectors and output the corresponding label." With tokens: ``pairs`` key-value
pairs k_1 v_1 … k_D v_D (distinct keys), then ``queries`` of those keys in random order (a permutation when
queries = pairs); the model is read at every query and must output its value. This is Zoology's MQAR with the
queries gathered after the context (Zoology spreads them with filler tokens and scores next-token prediction).

Token ids: keys 0..n_keys−1 (k0, k1, …), values n_keys..n_keys+n_values−1 (v0, v1, …). Labels are the values;
targets [examples, queries]; accuracy is the mean over queries; chance 1/n_values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field, model_validator

from depthlab.tasks.base import Batch, Task, check_split, register, sample_distinct

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter


@register
class MQAR(Task):
    name = "mqar"
    title = "multi-query associative recall"
    section = "seed 003 App. G (Arora et al. 2023)"
    summary = "multi-query associative recall: after key-value pairs, output the value of each queried key"
    eval_protocol = "fresh random sequences"
    accuracy_over = "position"

    pairs: int = Field(8, ge=1, description="D: key-value pairs in the context")
    queries: int | None = Field(None, ge=1, description="queried keys (distinct); None = pairs (a permutation)")
    n_keys: int = Field(64, ge=1)
    n_values: int = Field(64, ge=2)

    @model_validator(mode="after")
    def _check(self) -> MQAR:
        if self.pairs > self.n_keys:
            raise ValueError(f"pairs ({self.pairs}) must be at most n_keys ({self.n_keys}): keys are distinct")
        if self.n_queries > self.pairs:
            raise ValueError(f"queries ({self.n_queries}) must be at most pairs ({self.pairs})")
        return self

    @property
    def n_queries(self) -> int:
        return self.queries or self.pairs

    @property
    def vocab(self) -> list[str]:
        return [*(f"k{i}" for i in range(self.n_keys)), *(f"v{i}" for i in range(self.n_values))]

    @property
    def vocab_size(self) -> int:
        return self.n_keys + self.n_values

    @property
    def labels(self) -> list[str]:
        return [f"v{i}" for i in range(self.n_values)]

    @property
    def seq_len(self) -> int:
        return 2 * self.pairs + self.n_queries

    @property
    def read_positions(self) -> list[int]:
        return list(range(2 * self.pairs, self.seq_len))

    @property
    def chance(self) -> float:
        return 1.0 / self.n_values

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, ("train", "eval"))
        keys = sample_distinct(rng, n, self.n_keys, self.pairs)
        values = rng.integers(0, self.n_values, (n, self.pairs))
        which = sample_distinct(rng, n, self.pairs, self.n_queries)
        inputs = np.empty((n, self.seq_len), dtype=np.int64)
        inputs[:, 0 : 2 * self.pairs : 2] = keys
        inputs[:, 1 : 2 * self.pairs : 2] = values + self.n_keys
        inputs[:, 2 * self.pairs :] = np.take_along_axis(keys, which, 1)
        targets = np.take_along_axis(values, which, 1)
        return Batch(inputs, targets, {"which": which})

    counter_sampling = True

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s distribution from the counter stream: distinct keys, uniform values, distinct queried
        pairs; targets [R, B, queries]."""
        import torch

        keys = counter.distinct(self.n_keys, self.pairs, draw=0)  # [R, B, pairs]
        values = counter.below(self.n_values, draw=1, width=self.pairs)
        which = counter.distinct(self.pairs, self.n_queries, draw=2)
        context = torch.stack([keys, values + self.n_keys], -1).flatten(-2)
        return torch.cat([context, keys.gather(-1, which)], -1), values.gather(-1, which)

    def dataset_size(self, split: str = "eval") -> int:
        return 2**62

    def enumerate(self, split: str = "eval") -> Batch | None:
        return None

    def decode(self, batch: Batch, i: int) -> str:
        return " ".join(self.vocab[t] for t in batch.inputs[i]) + " _" + " ".join(
            self.labels[t] for t in batch.targets[i])

    def example_tokens(self, batch: Batch, i: int) -> tuple[list[str], str]:
        return [self.vocab[t] for t in batch.inputs[i]], " ".join(self.labels[t] for t in batch.targets[i])
