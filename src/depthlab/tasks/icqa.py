"""In-context question answering (seed 001 §4.2, "Reasoning").

Seed 001 §4.2: "we sample k questions from Q, denoted as (q_{π_0}, …, q_{π_{k-1}}) and k answers (a_{π'_0},
…, a_{π'_{k-1}}) from A. We then add the response sign r between each q_{π_i} and a_{π'_i} […]. Next, we
randomly choose the question q_{π_c} (where c ∈ [k]) from the context block, and concatenate it with the
final response sign […] a sequence length n = 3k+2. […] we can construct a dataset with A_{n_q}^k ·
A_{n_a}^k · k examples."

Token ids (a contract the construction modules rely on): questions 0..n_q-1 (written a, b, …), the response
sign n_q (→), answers n_q+1..n_q+n_a (written 0, 1, …). The classifier predicts a vocabulary token (§3.1: "C
[…] the vocabulary size for the token prediction task"), so ``labels == vocab`` and targets are answer token
ids.

Choices: π and π' are ordered selections of k *distinct* questions / answers (the count A·A·k says so), c is
uniform in [k]. Train and eval draw from the same finite dataset: the question is reasoning, not
generalisation. Chance is 1/k: a uniform guess among the k answers in the context, what a bag-of-tokens
model can do and what 1-layer models reach.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pydantic import model_validator

from depthlab.tasks.base import (
    ENUMERATE_LIMIT,
    Batch,
    all_distinct_tuples,
    check_split,
    falling_factorial,
    product_indices,
    register,
    sample_distinct,
)
from depthlab.tasks.context_qa import ContextQA, qa_tokens

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter

SPLITS = ("train", "eval", "all")


@register
class InContextQA(ContextQA):
    name = "icqa"
    title = "IC-QA"
    section = "seed 001 §4.2"
    summary = "in-context question answering: retrieve the answer paired with the query question"
    eval_protocol = "the task's dataset"

    k: int = 3
    n_q: int = 8
    n_a: int = 8

    @model_validator(mode="after")
    def _check(self) -> InContextQA:
        self.check_context_size()
        if self.n_q < 1 or self.n_a < 1:
            raise ValueError(f"n_q and n_a must be at least 1, got n_q={self.n_q}, n_a={self.n_a}")
        if self.k > self.n_q:
            raise ValueError(f"k must be at most n_q ({self.n_q}): there are only n_q distinct questions")
        self.check_enough_answers()
        return self

    # --- shapes -------------------------------------------------------------------------------------
    @property
    def n_symbol_tokens(self) -> int:
        return self.n_q

    @property
    def seq_len(self) -> int:
        return 3 * self.k + 2

    # --- data ---------------------------------------------------------------------------------------
    def _build(self, questions: np.ndarray, answers: np.ndarray, c: np.ndarray) -> Batch:
        """questions [B, k] question ids, answers [B, k] answer indices, c [B] the queried pair."""
        query = questions[np.arange(len(c)), c]
        return self.qa_batch(questions[:, :, None], answers, query[:, None], c)

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        questions = sample_distinct(rng, n, self.n_q, self.k)
        answers = sample_distinct(rng, n, self.n_a, self.k)
        c = rng.integers(0, self.k, n)
        return self._build(questions, answers, c)

    counter_sampling = True

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s distribution from the counter stream: π, π' ordered selections of k distinct questions and
        answers, c uniform in [k]; q_0 r a_0 … q_{k-1} r a_{k-1} q_c r, the target a_c's token."""
        questions = counter.distinct(self.n_q, self.k, draw=0)  # [R, B, k]
        answers = counter.distinct(self.n_a, self.k, draw=1) + self.answer_offset
        c = counter.below(self.k, draw=2)  # [R, B, 1]
        inputs = qa_tokens(questions[..., None], answers, questions.gather(-1, c), self.sign_id)
        return inputs, answers.gather(-1, c)[..., 0]

    def dataset_size(self, split: str = "eval") -> int:
        check_split(split, SPLITS)
        return falling_factorial(self.n_q, self.k) * falling_factorial(self.n_a, self.k) * self.k

    def enumerate(self, split: str = "eval") -> Batch | None:
        """All A(n_q,k)·A(n_a,k)·k examples, ordered by questions, then answers, then c."""
        if self.dataset_size(split) > ENUMERATE_LIMIT:
            return None
        qs = all_distinct_tuples(self.n_q, self.k)
        ans = all_distinct_tuples(self.n_a, self.k)
        qi, ai, c = product_indices(qs.shape[0], ans.shape[0], self.k)
        return self._build(qs[qi], ans[ai], c)
