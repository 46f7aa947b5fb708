"""In-context template matching, the contextual generalization task (seed 001 §4.4).

Seed 001 §4.4: "We first randomly choose k templates from T and k answers from the answer token set A […].
Then we can consider k different substitution mapping function s_{π''_0}, …, s_{π''_{k-1}} […] X_{π_i} =
sub(t_{π_i}, s_{π''_i}). Then, the context block is defined as B = (X_0, r, a_{π'_0}, …, X_{π_{k-1}}, r,
a_{π'_{k-1}}). Then we randomly choose a query template t_{π_c} with c ∈ {0, …, k-1} and use a new mapping
function s_{π''_k} to get the sequence of real-world symbols X_{π_c}. […] the desired answer should be
a_{π'_c}." Theorem 6: n = k(l+2) + l + 1; §9.1: l = 5, n = 7k + 6, d_1 = d_2 = 100.

Token ids (a contract the construction modules rely on): symbols 0..n_symbols-1 (written a, b, …), the
response sign n_symbols (→), answers n_symbols+1..n_symbols+n_a (written 0, 1, …). The classifier predicts a
vocabulary token, so ``labels == vocab`` and targets are answer token ids.

Choices (the text leaves them open):

- π is an ordered selection of k distinct templates and π' of k distinct answers (as in §4.2); c is uniform
  in [k]; every context question has its own uniformly random injection.
- The query's map is a *new* one: the query sequence is redrawn until it differs from context question c's
  sequence, so the task cannot be solved by exact token matching (it reduces to §4.2 otherwise).
- Templates, their canonical form and the held-out split are those of the template task
  (``templates_common``): every question sequence (the k context ones and the query) of a train example is a
  train sequence, every one of an eval example is held out. Each template must have at least 2 sequences in
  each split (checked). ``split="all"`` ignores the split; ``eval_fraction=0`` means no held-out split
  (train is everything, eval is empty and cannot be sampled).
- Dataset size (distinct sequences; the sequence determines templates, maps, answers and c): with s_t the
  sequences of template t in the split, A(n_a, k) · Σ_{π ordered distinct} Σ_c (s_{π_c} - 1) · Π_i s_{π_i},
  computed exactly with elementary symmetric polynomials (exact when the split counts are, see template.py).
- Chance is 1/k: a uniform guess among the k answers in the context.
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
from depthlab.tasks.templates_common import SPLITS, TemplateTask, expand, ordered_product_sum

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter


@register
class InContextTemplateMatching(ContextQA, TemplateTask):
    name = "ictm"
    title = "IC-TM"
    section = "seed 001 §4.4"
    summary = "in-context template matching: the answer whose question has the query's template"
    eval_protocol = "held-out substitution maps: no evaluation question sequence occurs in training"
    held_out = True

    k: int = 2
    l: int = 3
    n_symbols: int = 16
    n_a: int = 8
    n_wildcards: int | None = None
    templates: list[str] | None = None
    eval_fraction: float = 0.25
    split_seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> InContextTemplateMatching:
        self.check_context_size()
        self.check_template_fields()
        self.check_enough_answers()
        n_templates = self.template_rows.shape[0]
        if self.k > n_templates:
            raise ValueError(
                f"k must be at most the number of templates ({n_templates}): the k context questions follow "
                f"distinct templates"
            )
        self.space.check_splits(min_per_split=2)
        return self

    # --- shapes -------------------------------------------------------------------------------------
    @property
    def n_symbol_tokens(self) -> int:
        return self.n_symbols

    @property
    def seq_len(self) -> int:
        return self.k * (self.l + 2) + self.l + 1

    # --- data ---------------------------------------------------------------------------------------
    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        tmpl = sample_distinct(rng, n, self.template_rows.shape[0], self.k)
        answers = sample_distinct(rng, n, self.n_a, self.k)
        c = rng.integers(0, self.k, n)
        questions = np.stack([self.space.sample(rng, tmpl[:, i], split) for i in range(self.k)], axis=1)
        rows = np.arange(n)
        query = self.space.sample(rng, tmpl[rows, c], split, exclude=questions[rows, c])
        return self.qa_batch(questions, answers, query, c, templates=tmpl)

    counter_sampling = True

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s training distribution from the counter stream: π, π' ordered selections of k distinct
        templates and answers, c uniform in [k], a uniform training sequence of each context template, and for the
        query a training sequence of template π_c other than context question c's
        (``template_counter.sample_sequences``); the target a_{π'_c}'s token."""
        from depthlab.tasks.template_counter import sample_sequences

        tmpl = counter.distinct(self.template_rows.shape[0], self.k, draw=0)  # [R, B, k]
        answers = counter.distinct(self.n_a, self.k, draw=1) + self.answer_offset
        c = counter.below(self.k, draw=2)  # [R, B, 1]
        questions = sample_sequences(self.space, counter, tmpl, draw=3)  # [R, B, k, l]
        asked = questions.gather(-2, c[..., None].expand(-1, -1, -1, self.l))[..., 0, :]
        query = sample_sequences(self.space, counter, tmpl.gather(-1, c)[..., 0], draw=5, exclude=asked)
        return qa_tokens(questions, answers, query, self.sign_id), answers.gather(-1, c)[..., 0]

    def dataset_size(self, split: str = "eval") -> int:
        counts = self.space.split_counts(check_split(split, SPLITS))[0]
        pairs = ordered_product_sum(counts, [s * (s - 1) for s in counts], self.k)
        return falling_factorial(self.n_a, self.k) * pairs

    def enumerate(self, split: str = "eval") -> Batch | None:
        """Every example of the split (tiny settings only), ordered by templates, context sequences, c, query
        sequence, answers."""
        if self.dataset_size(split) > ENUMERATE_LIMIT:
            return None
        seqs, seq_tmpl = self.space.enumerate(split)  # sorted by template
        n_t, k = self.template_rows.shape[0], self.k
        s = np.bincount(seq_tmpl, minlength=n_t).astype(np.int64)
        start = np.concatenate([[0], np.cumsum(s)[:-1]]).astype(np.int64)
        perms = all_distinct_tuples(n_t, k)
        # context sequences: the product of the k templates' sequence lists (mixed radix, last fastest)
        pi, local = expand(np.prod(s[perms], axis=1))
        ctx = np.empty((pi.shape[0], k), dtype=np.int64)
        for i in range(k - 1, -1, -1):
            radix = s[perms[pi, i]]
            ctx[:, i] = start[perms[pi, i]] + local % radix
            local = local // radix
        # queried pair c, then a query sequence of the same template other than context question c's
        qi, c = product_indices(pi.shape[0], k)
        tc = perms[pi[qi], c]
        parent, m = expand(s[tc] - 1)
        excluded = ctx[qi[parent], c[parent]] - start[tc[parent]]
        query = start[tc[parent]] + m + (m >= excluded)
        row = qi[parent]
        c = c[parent]
        # answers: every ordered selection, fastest
        ans = all_distinct_tuples(self.n_a, k)
        ri, ai = product_indices(row.shape[0], ans.shape[0])
        questions = seqs[ctx[row[ri]]]
        return self.qa_batch(questions, ans[ai], seqs[query[ri]], c[ri], templates=perms[pi[row[ri]]])
