"""Nearest neighbour, NstNb (seed 003 §5.2, Appendix G).

Seed 003 §5.2: "a model is provided with a sequence of vectors and labels (x_1, y_1, …, x_{k−1}, y_{k−1}, x_k)
where N/2 < k ≤ N, the input unit vectors x_i ∈ R^d and labels y_i ∈ {0, 1}. For each x_k where k > N/2, the
output is the label corresponding to the nearest neighbor in (x_1, …, x_{k−1})". Assumptions: unit norm, and
a margin γ: x_kᵀx_{j*} ≥ x_kᵀx_i + γ for every i ≠ j* among the k − 1 earlier vectors.

One example is the whole sequence x_1, y_1, …, x_N, y_N (2N tokens) and the model is read at every x_k with
k > N/2 (before it sees y_k): multi-query, as Appendix G relates it to MQAR. The first N/2 labels are uniform
bits; each later label is the label of x_k's nearest neighbour among x_1 … x_{k−1} (earlier queries included).
Vectors are uniform on the unit sphere; a query that would violate the margin γ is drawn again (a loop over
the N/2 query positions, vectorised over examples). An example whose earlier vectors leave no query direction with
the margin (two of them nearly equal, say) is drawn again whole; where that keeps happening the margin is out of
reach for these N and d, and sampling stops with an error naming ``task.gamma``.

Inputs are vectors (``input_dim`` = d + 2): an x token is [x, 0, 0], a y token [0…0, 1{y = 0}, 1{y = 1}].
Targets [examples, N/2] (labels 0/1); accuracy is the mean over queries. Read-outs are causal: use causal
models (the ``attention_only`` model attends both ways and would see y_k).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field, model_validator

from depthlab.errors import UserError
from depthlab.tasks.base import Batch, Task, check_split, register

MAX_TRIES = 200  # queries drawn for one position before its examples are drawn again whole (a query misses
# the margin rarely unless the earlier vectors rule it out: then more tries only cost time)
MAX_REDRAWS = 20  # examples drawn again whole, in a row, before the margin is called out of reach


def unit_vectors(rng: np.random.Generator, shape: tuple[int, ...], d: int) -> np.ndarray:
    v = rng.standard_normal((*shape, d))
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@register
class NearestNeighbor(Task):
    name = "nearest_neighbor"
    title = "nearest neighbour"
    section = "seed 003 §5.2, App. G"
    summary = "nearest neighbour: label each later query with the label of its closest earlier vector"
    eval_protocol = "fresh random sequences (unit vectors, margin γ)"
    accuracy_over = "position"

    N: int = Field(16, ge=2, description="number of (x, y) pairs; queries are x_k for k > N/2")
    d: int = Field(8, ge=2, description="dimension of the unit vectors")
    gamma: float = Field(0.05, ge=0, lt=1, description="margin γ of the nearest neighbour")

    @model_validator(mode="after")
    def _check(self) -> NearestNeighbor:
        if self.N % 2:
            raise ValueError(f"N must be even, got {self.N}")
        return self

    @property
    def input_dim(self) -> int:
        return self.d + 2

    @property
    def vocab(self) -> list[str]:
        return [f"e{i}" for i in range(self.d)] + ["y=0", "y=1"]

    @property
    def vocab_size(self) -> int:
        return self.d + 2

    @property
    def labels(self) -> list[str]:
        return ["0", "1"]

    @property
    def seq_len(self) -> int:
        return 2 * self.N

    @property
    def read_positions(self) -> list[int]:
        return [2 * k for k in range(self.N // 2, self.N)]

    @property
    def chance(self) -> float:
        return 0.5

    def vectors_and_labels(self, n: int, rng: np.random.Generator,
                           redraws: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x [n, N, d], y [n, N] and the nearest neighbour's index j* [n, N/2] of each query (``redraws``: how
        many times in a row these examples were drawn again whole)."""
        half = self.N // 2
        x = np.empty((n, self.N, self.d))
        x[:, :half] = unit_vectors(rng, (n, half), self.d)
        y = np.empty((n, self.N), dtype=np.int64)
        y[:, :half] = rng.integers(0, 2, (n, half))
        nearest = np.empty((n, half), dtype=np.int64)
        for k in range(half, self.N):
            todo = np.arange(n)
            for _ in range(MAX_TRIES):
                q = unit_vectors(rng, (len(todo),), self.d)
                dots = np.einsum("bkd,bd->bk", x[todo, :k], q)
                top2 = np.partition(dots, k - 2, axis=1)[:, -2:] if k >= 2 else dots
                ok = top2[:, -1] - top2[:, 0] >= self.gamma
                good = todo[ok]
                x[good, k] = q[ok]
                nearest[good, k - half] = dots[ok].argmax(1)
                todo = todo[~ok]
                if not len(todo):
                    break
            else:  # no direction has the margin after these examples' earlier vectors: draw them again whole
                if redraws == MAX_REDRAWS:
                    raise UserError(f"task.gamma: a margin of {self.gamma:g} is out of reach for N = {self.N} unit "
                                    f"vectors in d = {self.d} (no query direction had it in {MAX_TRIES:,} tries, "
                                    f"{MAX_REDRAWS} sequences in a row); lower gamma or raise d")
                x[todo], y[todo], nearest[todo] = self.vectors_and_labels(len(todo), rng, redraws + 1)
            y[:, k] = y[np.arange(n), nearest[:, k - half]]
        return x, y, nearest

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, ("train", "eval"))
        x, y, nearest = self.vectors_and_labels(n, rng)
        inputs = np.zeros((n, 2 * self.N, self.d + 2), dtype=np.float32)
        inputs[:, 0::2, : self.d] = x
        inputs[:, 1::2, self.d] = y == 0
        inputs[:, 1::2, self.d + 1] = y == 1
        return Batch(inputs, y[:, self.N // 2 :].copy(), {"nearest": nearest})

    def dataset_size(self, split: str = "eval") -> int:
        return 2**62  # continuous inputs: never enumerated

    def enumerate(self, split: str = "eval") -> Batch | None:
        return None

    def decode(self, batch: Batch, i: int) -> str:
        half = self.N // 2
        labels = batch.inputs[i, 1::2, self.d + 1].astype(int)
        return (f"{self.N} vectors in R^{self.d}; labels {''.join(map(str, labels[:half]))} | "
                f"queries → {''.join(map(str, batch.targets[i]))}")

    def example_tokens(self, batch: Batch, i: int) -> tuple[list[str], str]:
        return [self.decode(batch, i)], "".join(map(str, batch.targets[i]))
