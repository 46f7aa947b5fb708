"""What the in-context QA tasks share (seed 001 §4.2, §4.4, §7): the sequence layout, the vocabulary, the checks.

A context block is k question-answer pairs, each written q r a with the response sign r between them, then the
query question and r (seed 001 §4.2: "We then add the response sign r between each q_{π_i} and a_{π'_i} […]
and concatenate it with the final response sign"). A question is one token (§4.2) or l tokens (§4.4).

Token ids (a contract the construction modules rely on): question symbols 0..n-1 (written a, b, …), the
response sign n (→), answers n+1..n+n_a (written 0, 1, …). The classifier predicts a vocabulary token (§3.1:
"C […] the vocabulary size for the token prediction task"), so ``labels == vocab`` and targets are answer token
ids. Chance is 1/k: a uniform guess among the k answers in the context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from depthlab.tasks.base import Batch, SignedVocabulary, number_names

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch


def qa_sequence(
    questions: np.ndarray, answers: np.ndarray, query: np.ndarray, sign_id: int, answer_offset: int = 0
) -> np.ndarray:
    """Inputs q_0 r a_0 … q_{m-1} r a_{m-1} q r [B, m(l+2) + l + 1]: questions [B, m, l] and query [B, l] token
    ids, answers [B, m] written as tokens ``answer_offset + answer``."""
    b, m, l = questions.shape
    end = m * (l + 2)  # where the query starts
    inputs = np.empty((b, end + l + 1), dtype=np.int64)
    for j in range(l):
        inputs[:, j:end : l + 2] = questions[:, :, j]
    inputs[:, l:end : l + 2] = sign_id
    np.add(answers, answer_offset, out=inputs[:, l + 1 : end : l + 2])
    inputs[:, end:-1] = query
    inputs[:, -1] = sign_id
    return inputs


def qa_tokens(questions: torch.Tensor, answers: torch.Tensor, query: torch.Tensor, sign_id: int) -> torch.Tensor:
    """:func:`qa_sequence` on the device: questions [R, B, m, l] and answers [R, B, m] token ids, query [R, B, l];
    q_0 r a_0 … q_{m-1} r a_{m-1} q r, [R, B, m(l+2) + l + 1]."""
    import torch

    sign = torch.full_like(answers[..., None], sign_id)
    pairs = torch.cat([questions, sign, answers[..., None]], -1).flatten(-2)
    return torch.cat([pairs, query, sign[..., 0, :]], -1)


class ContextQA(SignedVocabulary):
    """Base of the tasks whose context holds k question-answer pairs with answers drawn from n_a (icqa, ictm).

    A subclass declares the fields ``k`` and ``n_a`` and says how many question symbols precede the sign
    (``n_symbol_tokens``).
    """

    def check_context_size(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be at least 1 (one question-answer pair in the context), got {self.k}")

    def check_enough_answers(self) -> None:
        if self.k > self.n_a:
            raise ValueError(f"k must be at most n_a ({self.n_a}): there are only n_a distinct answers")

    # --- shapes -------------------------------------------------------------------------------------
    @property
    def answer_offset(self) -> int:
        return self.sign_id + 1

    @property
    def vocab(self) -> list[str]:
        return [*super().vocab, *number_names(self.n_a)]

    @property
    def vocab_size(self) -> int:
        return super().vocab_size + self.n_a

    @property
    def labels(self) -> list[str]:
        return self.vocab

    @property
    def chance(self) -> float:
        return 1.0 / self.k

    # --- data ---------------------------------------------------------------------------------------
    def qa_batch(
        self, questions: np.ndarray, answers: np.ndarray, query: np.ndarray, c: np.ndarray, **meta: np.ndarray
    ) -> Batch:
        """The examples whose target is answer c: questions [B, k, l] symbol ids, answers [B, k] answer indices,
        query [B, l], c [B]; ``meta`` beside c."""
        inputs = qa_sequence(questions, answers, query, self.sign_id, self.answer_offset)
        targets = answers[np.arange(len(c)), c] + self.answer_offset
        extra = {key: value.astype(np.int64) for key, value in meta.items()}
        return Batch(inputs, targets.astype(np.int64), {"c": c.astype(np.int64), **extra})
