"""A task of your own: associative recall. `depthlab --plugin examples/kv_recall.py capability kv_recall`."""

import math

import numpy as np
from pydantic import Field

from depthlab.tasks.base import Batch, Task, letter_names, number_names, register, sample_distinct


@register
class KeyValueRecall(Task):
    name = "kv_recall"
    section = "examples/kv_recall.py"
    summary = "k1 v1 k2 v2 … kP vP q → the value of key q (P distinct keys out of 2P, values may repeat)"
    eval_protocol = "fresh sample"

    pairs: int = Field(3, ge=1, le=13, description="key-value pairs P in a sequence")
    n_values: int = Field(8, ge=2, description="value alphabet")

    vocab = property(lambda self: letter_names(2 * self.pairs) + number_names(self.n_values))
    labels = property(lambda self: number_names(self.n_values))
    seq_len = property(lambda self: 2 * self.pairs + 1)
    chance = property(lambda self: 1 / self.n_values)

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        keys = sample_distinct(rng, n, 2 * self.pairs, self.pairs)
        values = rng.integers(0, self.n_values, (n, self.pairs))
        asked = rng.integers(0, self.pairs, n)
        pairs = np.stack([keys, 2 * self.pairs + values], axis=2).reshape(n, 2 * self.pairs)
        return Batch(np.concatenate([pairs, keys[np.arange(n), asked, None]], axis=1), values[np.arange(n), asked])

    def dataset_size(self, split: str = "eval") -> int:
        return math.perm(2 * self.pairs, self.pairs) * self.n_values**self.pairs * self.pairs

    def enumerate(self, split: str = "eval") -> Batch | None:
        return None  # evaluated on a fresh sample: examples almost surely unseen in training
