"""Nested in-context question answering (seed 001 §7, "Discussion").

Seed 001 §7: "we can expand our in-context QA as 'nested in-context QA' task, where the model must perform a
chain-of-thought process to arrive at the final answer. This could involve a sequence like
'a → b b → c c → d a → _d', where we can design a transformer with 6 layers that performs 'copy-matching' 3
times".

The seed gives only this example; the rest is our definition. The context holds k chains of ``hops`` links
each, x_0 → x_1, x_1 → x_2, …, x_{hops-1} → x_hops, every link written as the triple (x r y); all k·(hops+1)
symbols are distinct. The other k-1 chains are distractors, so the answer is not the only candidate. The
query is the first symbol of chain c (c uniform in [k]) followed by r; the target is the last symbol of
chain c, reached by following ``hops`` links. n = 3·k·hops + 2. The seed's example is k=1, hops=3,
shuffle=False.

Link order: ``shuffle=True`` puts the k·hops links in a uniformly random order; ``shuffle=False``
interleaves the chains hop by hop in chain order (hop 0 of chains 0..k-1, then hop 1, …), the example's
order for k=1.

Token ids: symbols 0..n_symbols-1 (written a, b, …), the sign n_symbols (→). The classifier predicts a
vocabulary token, so ``labels == vocab`` and targets are symbol ids. Chance is 1/k: a uniform guess among
the k chain ends.

Dataset size (distinct sequences): relabelling the chains gives the same sequence, so with ``shuffle=True``
a sequence is an unordered set of k chains (A(n_symbols, k(hops+1)) / k!), an order of its k·hops links
((k·hops)!) and the queried chain (k): A(n_symbols, k(hops+1)) · (k·hops)! / (k-1)!. With ``shuffle=False``
the chain order is visible in the sequence: A(n_symbols, k(hops+1)) · k. Sampling is uniform over these
sequences. Train and eval draw from the same dataset.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from pydantic import model_validator

from depthlab.tasks.base import (
    ENUMERATE_LIMIT,
    Batch,
    SignedVocabulary,
    all_distinct_tuples,
    check_split,
    falling_factorial,
    product_indices,
    register,
    sample_distinct,
)
from depthlab.tasks.context_qa import qa_sequence, qa_tokens

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter

SPLITS = ("train", "eval", "all")


@register
class NestedICQA(SignedVocabulary):
    name = "nested_icqa"
    title = "nested IC-QA"
    section = "seed 001 §7"
    summary = "nested in-context QA: follow `hops` links from the query symbol to the end of its chain"
    eval_protocol = "the task's dataset"

    k: int = 2
    hops: int = 2
    n_symbols: int = 12
    shuffle: bool = True

    @model_validator(mode="after")
    def _check(self) -> NestedICQA:
        if self.k < 1:
            raise ValueError(f"k must be at least 1 (one chain in the context), got {self.k}")
        if self.hops < 1:
            raise ValueError(f"hops must be at least 1 (a chain has at least one link), got {self.hops}")
        need = self.k * (self.hops + 1)
        if need > self.n_symbols:
            raise ValueError(
                f"k*(hops+1) must be at most n_symbols ({self.n_symbols}): {self.k} chains of "
                f"{self.hops + 1} distinct symbols need {need} distinct symbols"
            )
        return self

    # --- shapes -------------------------------------------------------------------------------------
    @property
    def n_symbol_tokens(self) -> int:
        return self.n_symbols

    @property
    def n_links(self) -> int:
        return self.k * self.hops

    @property
    def labels(self) -> list[str]:
        return self.vocab

    @property
    def seq_len(self) -> int:
        return 3 * self.n_links + 2

    @property
    def chance(self) -> float:
        return 1.0 / self.k

    # --- data ---------------------------------------------------------------------------------------
    def _fixed_order(self) -> np.ndarray:
        """Link ids (chain i, hop j) -> i*hops + j, interleaved hop by hop in chain order."""
        return (np.arange(self.k)[None, :] * self.hops + np.arange(self.hops)[:, None]).reshape(-1)

    def _build(self, chains: np.ndarray, order: np.ndarray, c: np.ndarray) -> Batch:
        """chains [B, k, hops+1] symbols, order [B, k*hops] link ids (i*hops + j) by position, c [B]."""
        b = chains.shape[0]
        src = chains[:, :, :-1].reshape(b, -1)  # link i*hops + j: chains[i, j] -> chains[i, j+1]
        dst = chains[:, :, 1:].reshape(b, -1)
        rows = np.arange(b)
        link_from, link_to = np.take_along_axis(src, order, axis=1), np.take_along_axis(dst, order, axis=1)
        inputs = qa_sequence(link_from[:, :, None], link_to, chains[rows, c, 0][:, None], self.sign_id)
        return Batch(inputs, chains[rows, c, -1].astype(np.int64), {"c": c.astype(np.int64)})

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        chains = sample_distinct(rng, n, self.n_symbols, self.k * (self.hops + 1)).reshape(n, self.k, -1)
        if self.shuffle:
            order = sample_distinct(rng, n, self.n_links, self.n_links)
        else:
            order = np.broadcast_to(self._fixed_order(), (n, self.n_links))
        c = rng.integers(0, self.k, n)
        return self._build(chains, order, c)

    counter_sampling = True

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s distribution from the counter stream: k(hops+1) distinct symbols as k chains, the links in a
        uniformly random order (``shuffle``) or interleaved hop by hop, c uniform in [k]; the target the end of
        chain c."""
        import torch

        chains = counter.distinct(self.n_symbols, self.k * (self.hops + 1), draw=0).unflatten(-1, (self.k, -1))
        if self.shuffle:
            order = counter.distinct(self.n_links, self.n_links, draw=1)
        else:
            position = torch.arange(self.n_links, device=counter.device)  # hop p // k of chain p % k
            order = ((position % self.k) * self.hops + position // self.k).expand(*chains.shape[:2], -1)
        c = counter.below(self.k, draw=2)[..., None]  # [R, B, 1, 1]
        link_from = chains[..., :-1].flatten(-2).gather(-1, order)
        link_to = chains[..., 1:].flatten(-2).gather(-1, order)
        query = chains.gather(-2, c.expand(-1, -1, -1, self.hops + 1))[..., 0, :]  # [R, B, hops+1]: chain c
        return qa_tokens(link_from[..., None], link_to, query[..., :1], self.sign_id), query[..., -1]

    def dataset_size(self, split: str = "eval") -> int:
        check_split(split, SPLITS)
        chains = falling_factorial(self.n_symbols, self.k * (self.hops + 1))
        if self.shuffle:
            return chains * math.factorial(self.n_links) // math.factorial(self.k - 1)
        return chains * self.k

    def enumerate(self, split: str = "eval") -> Batch | None:
        """Every distinct sequence: chain sets, then link orders, then c. With ``shuffle`` the chains of a set
        are listed with increasing first symbols (one representative per relabelling)."""
        if self.dataset_size(split) > ENUMERATE_LIMIT:
            return None
        chains = all_distinct_tuples(self.n_symbols, self.k * (self.hops + 1))
        chains = chains.reshape(-1, self.k, self.hops + 1)
        if self.shuffle:
            chains = chains[(np.diff(chains[:, :, 0], axis=1) > 0).all(axis=1)]
            orders = all_distinct_tuples(self.n_links, self.n_links)
        else:
            orders = self._fixed_order()[None, :]
        ci, oi, c = product_indices(chains.shape[0], orders.shape[0], self.k)
        return self._build(chains[ci], orders[oi], c)
