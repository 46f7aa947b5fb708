"""Sequence classification, the memorization task (seed 001 §4.1).

Seed 001 §4.1: "we define the dataset D_SC as a collection of N sequence-label examples, each with a
different class type. […] X ∈ R^{d×n} is a sequence consisting of n discrete tokens from a word alphabet X,
and the corresponding labels y^(0), …, y^(N-1) are distinct integer. Before input into the model, we first
append a CLS token c at the end of each sequence". §9.1: "We randomly choose e examples and assign them with
random permuted e distinct labels" (d_1 = 500 words, sequence length 6).

Token ids: words 0..n_words-1 (written a, b, …), the CLS token n_words (written →, the sign of Table 1).
Labels are the N classes 0..N-1.

Choices: the N sequences are distinct (a sequence cannot carry two different labels) and drawn uniformly
without replacement from the n_words**length possible ones with ``np.random.default_rng(data_seed)``; they
are stored in lexicographic order and labelled by a random permutation of 0..N-1 drawn from the same
generator. There is no held-out part: the question is whether the N sequences are stored, so both splits
sample the N examples.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
from pydantic import model_validator

from depthlab.tasks.base import ENUMERATE_LIMIT, Batch, SignedVocabulary, check_split, number_names, register

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter, DeviceTables, PackedRows

SPLITS = ("train", "eval", "all")


@register
class Memorization(SignedVocabulary):
    name = "memorization"
    title = "memorization"
    section = "seed 001 §4.1"
    summary = "sequence classification: N distinct random sequences, each with its own label"
    eval_protocol = "the training set (the question is whether the N sequences are stored)"

    n_words: int = 8
    length: int = 3
    n_examples: int = 64
    data_seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> Memorization:
        if self.n_words < 1:
            raise ValueError(f"n_words must be at least 1 (a non-empty word alphabet), got {self.n_words}")
        if self.length < 1:
            raise ValueError(f"length must be at least 1 (one word before the CLS), got {self.length}")
        if self.n_examples < 1:
            raise ValueError(f"n_examples must be at least 1, got {self.n_examples}")
        total = self.n_words**self.length
        if self.n_examples > total:
            raise ValueError(
                f"n_examples must be at most n_words**length ({self.n_words}**{self.length} = {total}): "
                f"there are only that many distinct sequences"
            )
        if self.n_examples > ENUMERATE_LIMIT:
            raise ValueError(f"n_examples must be at most {ENUMERATE_LIMIT} (the dataset is stored whole)")
        if self.data_seed < 0:
            raise ValueError(f"data_seed must be non-negative, got {self.data_seed}")
        return self

    # --- shapes -------------------------------------------------------------------------------------
    @property
    def n_symbol_tokens(self) -> int:
        return self.n_words

    @property
    def labels(self) -> list[str]:
        return number_names(self.n_examples)

    @property
    def seq_len(self) -> int:
        return self.length + 1

    @property
    def chance(self) -> float:
        return 1.0 / self.n_examples

    # --- data ---------------------------------------------------------------------------------------
    @cached_property
    def dataset(self) -> Batch:
        """The fixed N examples, sequences in lexicographic order; meta["index"] is the example's index."""
        rng = np.random.default_rng(self.data_seed)
        n, total = self.n_examples, self.n_words**self.length
        if total < 2**62:
            codes = np.sort(rng.choice(total, size=n, replace=False)).astype(np.int64)
            words = np.empty((n, self.length), dtype=np.int64)
            for j in range(self.length - 1, -1, -1):
                codes, words[:, j] = np.divmod(codes, self.n_words)
        else:  # astronomically many sequences: draw rows, redraw the (rare) duplicates
            words = rng.integers(0, self.n_words, (n, self.length))
            for _ in range(64):
                _, first = np.unique(words, axis=0, return_index=True)
                dup = np.setdiff1d(np.arange(n), first)
                if dup.size == 0:
                    break
                words[dup] = rng.integers(0, self.n_words, (dup.size, self.length))
            else:
                raise ValueError("could not draw n_examples distinct sequences")
            words = np.unique(words, axis=0)
        labels = rng.permutation(n).astype(np.int64)
        inputs = np.concatenate([words, np.full((n, 1), self.sign_id, dtype=np.int64)], axis=1)
        return Batch(inputs, labels, {"index": np.arange(n, dtype=np.int64)})

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        return self.dataset.take(rng.integers(0, self.n_examples, n))

    counter_sampling = True

    @cached_property
    def device_tables(self) -> DeviceTables:
        from depthlab.tasks.counter import DeviceTables

        words = {} if self.packed_inputs.lane is None else {"packed": self.packed_inputs.words}
        return DeviceTables(inputs=self.dataset.inputs, targets=self.dataset.targets, **words)

    @cached_property
    def packed_inputs(self) -> PackedRows:
        """The stored examples' tokens, one int64 per example where they fill one (:class:`PackedRows`)."""
        from depthlab.tasks.counter import PackedRows

        return PackedRows(self.dataset.inputs)

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s distribution from the counter stream: each example one of the N stored examples, uniformly
        (with replacement), read from the dataset's copy on the counter's device."""
        from depthlab.tasks.counter import take_rows

        index = counter.below(self.n_examples, draw=0)[..., 0]  # [R, B]
        tables, packed = self.device_tables, self.packed_inputs
        inputs = (take_rows(tables.get("inputs", counter.device), index) if packed.lane is None
                  else packed.take(tables.get("packed", counter.device), index))
        return inputs, take_rows(tables.get("targets", counter.device), index)

    def dataset_size(self, split: str = "eval") -> int:
        check_split(split, SPLITS)
        return self.n_examples

    def enumerate(self, split: str = "eval") -> Batch | None:
        check_split(split, SPLITS)
        return self.dataset.take(np.arange(self.n_examples))
