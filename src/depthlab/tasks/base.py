"""The task interface, the registry, and helpers shared by every task.

A task is a pydantic model: its fields are the task's parameters (named as in the seed that defines it),
validated on construction, and its methods generate data. Every task exposes:

- ``sample(n, rng, split="train") -> Batch``: ``n`` examples drawn with the numpy generator ``rng``;
  ``split="eval"`` draws from the held-out part where the task has one (see ``eval_protocol``).
- ``enumerate(split="eval") -> Batch | None``: the whole finite dataset (or its held-out part), or ``None``
  when it is larger than ``ENUMERATE_LIMIT`` examples; ``dataset_size(split)`` gives its size without
  building it.
- ``decode(batch, i) -> str``: example ``i`` in the notation of seed 001 Table 1 (``a → 1 b → 2 a → _1``).
- ``chance``: the accuracy of the guess the seed compares against (documented per task).
- ``vocab`` (input token strings; token id ``t`` is ``vocab[t]``), ``labels`` (output class strings),
  ``seq_len`` (input length n).

Generation is vectorised with numpy: no Python loop per example or per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

if TYPE_CHECKING:
    import torch

    from depthlab.tasks.counter import Counter

ENUMERATE_LIMIT = 2_000_000
MAX_VOCABULARY = 1 << 20  # input tokens (or input width), and labels: GPT-2 has 50,257; beyond this a task is a mistake
MAX_SEQ_LEN = 1 << 16  # input positions (the seeds' longest: 801)

SIGN = "→"  # the response sign r / the CLS token, as written in seed 001 Table 1


@dataclass
class Batch:
    """A batch of examples.

    inputs: int64 [B, n] token ids (or float [B, n, d] vectors for vector tasks).
    targets: int64 [B] class / token index read at the last position (or float targets for regression).
    meta: per-example arrays, e.g. the index c of the queried pair.
    """

    inputs: np.ndarray
    targets: np.ndarray
    meta: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def take(self, index: np.ndarray | slice) -> Batch:
        return Batch(self.inputs[index], self.targets[index], {k: v[index] for k, v in self.meta.items()})

    @staticmethod
    def concat(batches: list[Batch]) -> Batch:
        keys = batches[0].meta.keys()
        return Batch(
            np.concatenate([b.inputs for b in batches]),
            np.concatenate([b.targets for b in batches]),
            {k: np.concatenate([b.meta[k] for b in batches]) for k in keys},
        )


class Task(BaseModel):
    """Base class of every task. Subclasses declare fields (the parameters) and implement the methods."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ClassVar[str]
    title: ClassVar[str] = ""  # the seed's name for it, as figures and tables title it (default: ``name``)
    section: ClassVar[str]  # where the seed defines it, e.g. "seed 001 §4.2"
    summary: ClassVar[str]
    # How evaluation data relates to training data, said in every table that shows this task.
    eval_protocol: ClassVar[str] = "the task's dataset"
    # Whether the evaluation split is kept out of training (what a sampled evaluation's label says: held-out).
    held_out: ClassVar[bool] = False
    # The objective: "cross_entropy" (targets are class indices), "mse" (float targets, no accuracy) or
    # "bce" (multi-label 0/1 targets, a label counts as predicted when its logit is positive) or "bce_balanced"
    # (the same targets, positives and negatives of each label set weighed equally: training/objectives.py).
    loss: ClassVar[str] = "cross_entropy"
    # With several read-out positions: an example is correct only if every position is ("example"), or
    # accuracy is the mean over positions ("position").
    accuracy_over: ClassVar[str] = "example"

    @property
    def eval_split_is_sample(self) -> bool:
        """Whether the evaluation split is itself a fixed sample of the task's inputs (seed 003's ``eval_size``
        strings): scoring all of it is then a sample, not every input (``training.eval_label``)."""
        return False

    @property
    def read_positions(self) -> list[int] | None:
        """Positions whose outputs are scored; None = the last position only (targets then have no P axis)."""
        return None

    @property
    def input_dim(self) -> int | None:
        """Width of vector inputs (float [B, n, d]); None when inputs are token ids."""
        return None

    @property
    def n_outputs(self) -> int:
        """Width of the model's output at each read position (the number of classes for cross-entropy):
        ``len(labels)``; tasks with many labels give it without building the list (every config check asks)."""
        return len(self.labels)

    @model_validator(mode="after")
    def _check_shapes(self) -> Task:
        """A vocabulary, input width or length no model could take is refused before anything is built.

        Runs before a task's own checks, so it reads only sizes the built-in tasks compute from their fields."""
        try:
            self.vocab_size, self.seq_len  # noqa: B018
        except Exception:  # a plugin whose vocab needs its own validator first: that one reports the mistake
            return self
        check_shapes(self)
        return self

    # --- shapes -------------------------------------------------------------------------------------
    @property
    def vocab(self) -> list[str]:
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        """``len(vocab)``; tasks whose vocabulary follows from their fields give it without building the list."""
        return len(self.vocab)

    @property
    def labels(self) -> list[str]:
        raise NotImplementedError

    @property
    def seq_len(self) -> int:
        raise NotImplementedError

    @property
    def chance(self) -> float:
        raise NotImplementedError

    # --- data ---------------------------------------------------------------------------------------
    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        raise NotImplementedError

    # Training data of stream version 2 (``train.stream: 2``), made with tensor operations on the run's device from
    # a counter-based generator: the tasks that implement ``sample_counter`` say so here.
    counter_sampling: ClassVar[bool] = False

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """One step's training examples of R runs from ``counter`` (``tasks.counter``): inputs [R, B, …] and
        targets [R, B, …], on the counter's device; the same distribution as ``sample(…, "train")``."""
        raise NotImplementedError

    def dataset_size(self, split: str = "eval") -> int:
        raise NotImplementedError

    def enumerate(self, split: str = "eval") -> Batch | None:
        raise NotImplementedError

    def decode(self, batch: Batch, i: int) -> str:
        tokens = [self.vocab[t] for t in batch.inputs[i]]
        return " ".join(tokens) + " _" + self.labels[int(batch.targets[i])]

    def example_tokens(self, batch: Batch, i: int) -> tuple[list[str], str]:
        """Input token strings and target string of example ``i`` (for JSON output)."""
        return [self.vocab[t] for t in batch.inputs[i]], self.labels[int(batch.targets[i])]


class SignedVocabulary(Task):
    """A task written as in seed 001 Table 1: symbols a, b, … (ids 0..n-1), then the sign → (id n).

    A subclass says how many symbols precede the sign (``n_symbol_tokens``).
    """

    @property
    def n_symbol_tokens(self) -> int:
        raise NotImplementedError

    @property
    def sign_id(self) -> int:
        return self.n_symbol_tokens

    @property
    def vocab(self) -> list[str]:
        return [*letter_names(self.n_symbol_tokens), SIGN]

    @property
    def vocab_size(self) -> int:
        return self.n_symbol_tokens + 1


TASKS: dict[str, type[Task]] = {}


def register(cls: type[Task]) -> type[Task]:
    """Class decorator: make a task available by its ``name`` everywhere (CLI, configs, sweeps)."""
    TASKS[cls.name] = cls
    return cls


def task_title(name: str) -> str:
    """The seed's name of the registered task ``name`` (its ``title``), as figures title it; ``name`` itself for a
    task without one or not registered (a plugin's, read back from a store)."""
    cls = TASKS.get(name)
    return (cls.title if cls is not None else "") or name


# --- helpers shared by tasks ----------------------------------------------------------------------------

def check_shapes(task: Task) -> None:
    """ValueError naming the limit when the task's vocabulary (or input width), its labels or its sequence length
    are beyond ``MAX_VOCABULARY`` / ``MAX_SEQ_LEN``: names, one-hot rows, embeddings and logits of that many would
    not fit."""
    width, what = (task.input_dim, "an input width") if task.input_dim else (task.vocab_size, "a vocabulary")
    for size, limit, said in ((width, MAX_VOCABULARY, f"{what} of {width:,}"),
                              (task.seq_len, MAX_SEQ_LEN, f"sequences of {task.seq_len:,} positions")):
        if size > limit:
            raise ValueError(f"{largest_field(task)} gives {said}, more than the {limit:,} allowed")
        if size < 1:  # a plugin's vocab, labels or seq_len that no model can take either
            raise ValueError(f"{task.name} has {said}: no model can take it")
    if task.n_outputs < 1:
        raise ValueError(f"{task.name} has no labels (outputs): no model can be trained on it")
    if task.n_outputs > MAX_VOCABULARY:  # the output layer, and each evaluated example's logits, grow with them
        raise ValueError(f"{largest_field(task)} gives {task.n_outputs:,} labels (outputs), more than the "
                         f"{MAX_VOCABULARY:,} allowed")


def largest_field(task: Task) -> str:
    """The task's largest integer field (seeds aside) as ``name=value``: what a size limit message points at."""
    ints = {k: v for k, v in task.__dict__.items()
            if isinstance(v, int) and not isinstance(v, bool) and not k.endswith("seed")}
    name = max(ints, key=ints.get, default=None)
    return f"{name}={ints[name]:,}" if name else "the task's parameters"


def falling_factorial(n: int, k: int) -> int:
    """A(n, k) = n! / (n - k)!: ordered selections of k distinct elements from n (seed 001 §4.2)."""
    return math.perm(n, k) if 0 <= k <= n else 0


def sample_distinct(rng: np.random.Generator, n_rows: int, population: int, k: int) -> np.ndarray:
    """``n_rows`` ordered selections of ``k`` distinct integers from ``range(population)``, vectorised.

    Row i is the indices of the k smallest of ``population`` uniform draws, in increasing order of the draws
    (a uniformly random permutation per row, truncated to k columns). Three equal ways to find them, the
    fastest for the shape (measured on 8,192 rows): a full sort for small populations, k passes of argmin for
    small k, a partition otherwise; they differ only on tied draws, which float64 noise does not produce.
    """
    if k == 0:
        return np.zeros((n_rows, 0), dtype=np.int64)
    noise = rng.random((n_rows, population))
    if population <= 64 or k == population:
        return np.argsort(noise, axis=1)[:, :k].astype(np.int64)
    if k <= 4:
        out, rows = np.empty((n_rows, k), dtype=np.int64), np.arange(n_rows)
        for i in range(k):
            out[:, i] = noise.argmin(axis=1)
            noise[rows, out[:, i]] = 2.0  # above every draw: never the minimum again
        return out
    part = np.argpartition(noise, k - 1, axis=1)[:, :k]
    order = np.argsort(np.take_along_axis(noise, part, axis=1), axis=1)
    return np.take_along_axis(part, order, axis=1).astype(np.int64)


def all_distinct_tuples(population: int, k: int) -> np.ndarray:
    """Every ordered selection of k distinct integers from range(population), shape [A(population, k), k]."""
    rows = np.zeros((1, 0), dtype=np.int64)
    for _ in range(k):
        cand = np.arange(population, dtype=np.int64)
        grid = np.repeat(rows, population, axis=0)
        nxt = np.tile(cand, rows.shape[0])[:, None]
        keep = ~(grid == nxt).any(axis=1)
        rows = np.concatenate([grid, nxt], axis=1)[keep]
    return rows


def product_indices(*sizes: int) -> tuple[np.ndarray, ...]:
    """Index arrays of every combination of ``range(size)`` for each size, the last index fastest."""
    return tuple(np.indices(sizes, dtype=np.int64).reshape(len(sizes), -1))


def split_mask(codes: np.ndarray, eval_fraction: float, split_seed: int) -> np.ndarray:
    """True where an item (an int64 code identifying it, e.g. a sequence) belongs to the held-out split.

    A seeded splitmix64 hash of the code, so membership is a pure function of the item: the same sequence
    is held out wherever it is generated, without enumerating the dataset.
    """
    with np.errstate(over="ignore"):
        z = codes.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15) * np.uint64(split_seed + 1)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53) < eval_fraction


def encode_rows(rows: np.ndarray, base: int) -> np.ndarray:
    """Each row of small non-negative ints as one int64 (base-``base`` digits); must fit in 63 bits."""
    code = np.zeros(rows.shape[0], dtype=np.int64)
    for j in range(rows.shape[1]):
        code = code * base + rows[:, j]
    return code


def letter_names(n: int) -> list[str]:
    """a, b, …, z, then a1, b1, …: names for question / word symbols as seed 001 Table 1 writes them."""
    return [chr(ord("a") + i % 26) + (str(i // 26) if i >= 26 else "") for i in range(n)]


def number_names(n: int) -> list[str]:
    """0, 1, 2, …: names for answers and class labels as seed 001 Table 1 writes them."""
    return [str(i) for i in range(n)]


def check_split(split: str, allowed: tuple[str, ...] = ("train", "eval")) -> str:
    """Return ``split`` if it is one of ``allowed``, else raise ValueError saying what is allowed."""
    if split not in allowed:
        raise ValueError(f"split must be one of {', '.join(map(repr, allowed))}, got {split!r}")
    return split
