"""Conditional retrieval (seed 002 §3.1): retrieval steps that depend on several earlier values, forming a DAG.

Seed 002 §3.1: "a more general variant of the retrieval problem, which I term the conditional retrieval problem,
where each retrieval step could depend on multiple previously retrieved values, not just the last one. For
example, given the input sequence … x y z … a y … a x … a, predicting the token z would constitute a
conditional retrieval problem. The retrieval steps in the retrieval problem are perfectly linear, while in the
conditional retrieval, they form a directed acyclic graph."

The seed gives only the example; the rest is our definition. Each chain has values v_0 (the query) … v_D (the
answer). Value v_s (s ≥ 1) is stored in a *fact*: a key of the values of its parents P(s) followed by v_s. Every
step depends on min(s, ``parents``) earlier values, always including v_{s-1} (so the DAG is connected and each
key is unique); the others are the most recent ones (``dag="recent"``) or drawn uniformly from v_0 … v_{s-2}
for every chain of every example (``dag="random"``). ``parents=1`` is the retrieval problem.

A fact is written as ``parents + 1`` tokens: the key values in increasing step order, left-padded with the blank
``·`` when the step has fewer parents, then the value. Facts are ordered by step from D down to 1 (as in the
retrieval problem); within a step, the facts of the N chains (and their decoys) are shuffled. The last token is
the query v_0 of one uniformly chosen chain c; the target is v_D of chain c.

Decoys (``decoys=True``) make the extra parents necessary: for every step with at least two parents, a decoy fact
has the same key with one earlier (not the latest) parent replaced — by the same-step value of another chain, or
by an unused symbol when N = 1 — and an unused symbol as value. A model that matches only the latest parent is
right at most half the time on such steps. Chance is 1/(facts in step D).

Token ids: symbols 0 … n_symbols-1 (a, b, …), then the blank ``·``. ``labels == vocab``.
Dataset size: ``dataset_size`` counts symbol assignments × queried chain only (a lower bound on the distinct
sequences); the dataset is never enumerated, evaluation draws a fresh sample.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, model_validator

from depthlab.tasks.base import Batch, Task, check_split, falling_factorial, letter_names, register, sample_distinct

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter

SPLITS = ("train", "eval", "all")
BLANK = "·"


@register
class ConditionalRetrieval(Task):
    name = "conditional_retrieval"
    title = "conditional retrieval"
    section = "seed 002 §3.1"
    summary = "conditional retrieval: each step's fact is keyed by up to `parents` earlier values (a DAG)"
    eval_protocol = "fresh sample"

    N: int = Field(2, ge=1, description="chains (the queried one and N-1 distractors)")
    D: int = Field(3, ge=1, description="retrieval steps")
    parents: int = Field(2, ge=1, description="how many earlier values a step depends on (1 = retrieval)")
    dag: Literal["recent", "random"] = Field("recent", description="which earlier values besides v_{s-1}")
    decoys: bool = Field(True, description="decoy facts that share all but one parent with a real fact")
    n_symbols: int = Field(32, ge=2, description="alphabet size")

    @model_validator(mode="after")
    def _check(self) -> ConditionalRetrieval:
        if self.n_needed > self.n_symbols:
            raise ValueError(f"n_symbols must be at least {self.n_needed} for N={self.N}, D={self.D}, "
                             f"parents={self.parents}, decoys={self.decoys} (got {self.n_symbols})")
        return self

    # --- structure ----------------------------------------------------------------------------------
    def n_parents(self, s: int) -> int:
        return min(s, self.parents)

    @property
    def decoy_steps(self) -> list[int]:
        return [s for s in range(1, self.D + 1) if self.decoys and self.n_parents(s) >= 2]

    @property
    def n_decoy_steps(self) -> int:
        """``len(decoy_steps)`` without the list: every step from 2 on has two parents when parents >= 2."""
        return self.D - 1 if self.decoys and self.parents >= 2 else 0

    @property
    def n_needed(self) -> int:
        fresh = self.n_decoy_steps * self.N * (2 if self.N == 1 else 1)
        return self.N * (self.D + 1) + fresh

    def facts_in_step(self, s: int) -> int:
        return self.N * (2 if s in self.decoy_steps else 1)

    @property
    def width(self) -> int:
        """Tokens per fact: ``parents`` key slots and the value."""
        return self.parents + 1

    @property
    def blank_id(self) -> int:
        return self.n_symbols

    # --- shapes -------------------------------------------------------------------------------------
    @property
    def vocab(self) -> list[str]:
        return [*letter_names(self.n_symbols), BLANK]

    @property
    def vocab_size(self) -> int:
        return self.n_symbols + 1

    @property
    def labels(self) -> list[str]:
        return self.vocab

    @property
    def seq_len(self) -> int:
        return self.width * self.N * (self.D + self.n_decoy_steps) + 1  # facts: N per step, 2N with decoys

    @property
    def chance(self) -> float:
        """A uniform guess among the values of the last step's facts."""
        return 1.0 / self.facts_in_step(self.D)

    # --- data ---------------------------------------------------------------------------------------
    def _parent_sets(self, rng: np.random.Generator, n: int) -> list[np.ndarray]:
        """For s = 1 … D: parent steps [n, N, n_parents(s)], increasing, the last one s - 1."""
        sets = []
        for s in range(1, self.D + 1):
            m = self.n_parents(s)
            if self.dag == "recent" or m == 1 or s - 1 == m - 1:
                base = np.arange(s - m, s)
                sets.append(np.broadcast_to(base, (n, self.N, m)).copy())
                continue
            noise = rng.random((n * self.N, s - 1))
            others = np.sort(np.argsort(noise, axis=1)[:, : m - 1], axis=1).reshape(n, self.N, m - 1)
            sets.append(np.concatenate([others, np.full((n, self.N, 1), s - 1)], axis=2))
        return sets

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        N, D, W = self.N, self.D, self.width
        drawn = sample_distinct(rng, n, self.n_symbols, self.n_needed)
        values = drawn[:, : N * (D + 1)].reshape(n, N, D + 1)
        fresh = drawn[:, N * (D + 1) :]
        used_fresh = 0
        rows = np.arange(n)[:, None]
        chain_idx = np.arange(N)[None, :]
        parent_sets = self._parent_sets(rng, n)
        blocks, fact_steps, fact_chains, fact_decoy = [], [], [], []
        for s in range(D, 0, -1):
            ps = parent_sets[s - 1]  # [n, N, m]
            m = ps.shape[2]
            keys = np.full((n, N, self.parents), self.blank_id, dtype=np.int64)
            keys[:, :, self.parents - m :] = values[rows[:, :, None], chain_idx[:, :, None], ps]
            facts = np.concatenate([keys, values[:, :, s][:, :, None]], axis=2)  # [n, N, W]
            is_decoy = np.zeros((n, N), dtype=bool)
            if s in self.decoy_steps:
                decoy = facts.copy()
                slot = self.parents - m + rng.integers(0, m - 1, (n, N))  # an earlier parent's slot
                if N > 1:
                    other = (chain_idx + rng.integers(1, N, (n, N))) % N  # another chain
                    replaced = values[rows, other, ps[rows, chain_idx, slot - (self.parents - m)]]
                else:
                    replaced = fresh[:, used_fresh : used_fresh + N]
                    used_fresh += N
                decoy[rows, chain_idx, slot] = replaced
                decoy[:, :, -1] = fresh[:, used_fresh : used_fresh + N]
                used_fresh += N
                facts = np.concatenate([facts, decoy], axis=1)
                is_decoy = np.concatenate([is_decoy, np.ones((n, N), dtype=bool)], axis=1)
            k = facts.shape[1]
            perm = sample_distinct(rng, n, k, k)
            blocks.append(np.take_along_axis(facts, perm[:, :, None], axis=1).reshape(n, k * W))
            chains_here = np.tile(np.arange(N), k // N)[None].repeat(n, axis=0)
            fact_steps.append(np.full((n, k), s))
            fact_chains.append(np.take_along_axis(chains_here, perm, axis=1))
            fact_decoy.append(np.take_along_axis(is_decoy, perm, axis=1))
        c = rng.integers(0, N, n)
        inputs = np.concatenate([*blocks, values[np.arange(n), c, 0][:, None]], axis=1).astype(np.int64)
        meta = {
            "c": c.astype(np.int64),
            "fact_step": np.concatenate(fact_steps, axis=1).astype(np.int64),
            "fact_chain": np.concatenate(fact_chains, axis=1).astype(np.int64),
            "fact_decoy": np.concatenate(fact_decoy, axis=1),
        }
        return Batch(inputs, values[np.arange(n), c, D].astype(np.int64), meta)

    counter_sampling = True

    def counter_parents(self, counter: Counter, s: int) -> torch.Tensor:
        """Step s's parent steps [R, B, N, n_parents(s)] from the counter stream (``_parent_sets``' law): the
        m − 1 most recent before s − 1, or (``dag="random"``) a uniform (m − 1)-subset of 0 … s − 2, increasing;
        then s − 1."""
        import torch

        m = self.n_parents(s)
        if self.dag == "recent" or m == 1 or s == m:
            return torch.arange(s - m, s, device=counter.device).expand(*counter.keys.shape[:2], self.N, m)
        earlier = counter.distinct(s - 1, m - 1, draw=10 + 4 * s, rows=self.N).sort(-1).values
        return torch.cat([earlier, torch.full_like(earlier[..., :1], s - 1)], -1)

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s distribution from the counter stream: n_needed distinct symbols (the chains' values, then
        fresh ones for decoys), parents as ``_parent_sets`` draws them, decoys as ``sample`` makes them, the facts
        of each step (decoys included) in a uniformly random order, steps D … 1; the query v_0 of a uniform chain c,
        the target its v_D."""
        import torch

        N, D, W = self.N, self.D, self.width
        drawn = counter.distinct(self.n_symbols, self.n_needed, draw=0)
        values = drawn[..., : N * (D + 1)].unflatten(-1, (N, D + 1))  # [R, B, N, D+1]
        fresh = drawn[..., N * (D + 1) :]
        used_fresh, blocks = 0, []
        chains = torch.arange(N, device=counter.device)[:, None]
        for s in range(D, 0, -1):
            ps = self.counter_parents(counter, s)  # [R, B, N, m]
            m = ps.shape[-1]
            blank = torch.full_like(values[..., : self.parents - m], self.blank_id)
            facts = torch.cat([blank, values.gather(-1, ps), values[..., s : s + 1]], -1)  # [R, B, N, W]
            if s in self.decoy_steps:
                slot = counter.below(m - 1, draw=11 + 4 * s, width=N)[..., None]  # an earlier parent: [R, B, N, 1]
                if N > 1:
                    other = (chains + 1 + counter.below(N - 1, draw=12 + 4 * s, width=N)[..., None]) % N
                    replaced = values.gather(-2, other.expand(-1, -1, -1, D + 1)).gather(-1, ps.gather(-1, slot))
                else:
                    replaced = fresh[..., used_fresh : used_fresh + N, None]
                    used_fresh += N
                decoy = facts.scatter(-1, self.parents - m + slot, replaced)
                decoy = torch.cat([decoy[..., :-1], fresh[..., used_fresh : used_fresh + N, None]], -1)
                used_fresh += N
                facts = torch.cat([facts, decoy], -2)
            order = counter.distinct(facts.shape[-2], facts.shape[-2], draw=13 + 4 * s)
            blocks.append(facts.gather(-2, order[..., None].expand(-1, -1, -1, W)).flatten(-2))
        c = counter.below(N, draw=1)[..., None].expand(-1, -1, -1, D + 1)  # [R, B, 1, D+1]
        chain = values.gather(-2, c)[..., 0, :]
        return torch.cat([*blocks, chain[..., :1]], -1), chain[..., D]

    def dataset_size(self, split: str = "eval") -> int:
        check_split(split, SPLITS)
        return falling_factorial(self.n_symbols, self.N * (self.D + 1)) * self.N

    def enumerate(self, split: str = "eval") -> Batch | None:
        return None

    # --- roles --------------------------------------------------------------------------------------
    @property
    def role_names(self) -> list[str]:
        names = ["query"]
        for s in range(1, self.D + 1):
            names += [f"key {j} of fact {s}" for j in range(1, self.parents + 1)] + [f"value of fact {s}"]
        return names

    def roles(self, batch: Batch) -> dict[str, np.ndarray]:
        """Positions [B, 1] of the queried chain's facts (key slots 1 … parents, value) and of the query."""
        c = batch.meta["c"]
        target = (batch.meta["fact_chain"] == c[:, None]) & ~batch.meta["fact_decoy"]
        out = {"query": np.full((len(c), 1), self.seq_len - 1, dtype=np.int64)}
        for s in range(1, self.D + 1):
            fact = np.argmax(target & (batch.meta["fact_step"] == s), axis=1)  # index of the real fact
            start = fact * self.width
            for j in range(1, self.parents + 1):
                out[f"key {j} of fact {s}"] = (start + j - 1)[:, None]
            out[f"value of fact {s}"] = (start + self.parents)[:, None]
        return out

    def decode(self, batch: Batch, i: int) -> str:
        tokens = [self.vocab[t] for t in batch.inputs[i]]
        glue = "" if self.n_symbols <= 26 else "."  # names past z have two characters (a1, b1, …)
        facts = [glue.join(tokens[j : j + self.width]) for j in range(0, len(tokens) - 1, self.width)]
        return " ".join(facts) + " " + tokens[-1] + " _" + self.labels[int(batch.targets[i])]
