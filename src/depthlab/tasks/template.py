"""Template matching, the generalization task (seed 001 §4.3).

Seed 001 §4.3: "A template is a string t ∈ W^l […]. A substitution map is an injection function s : W → X
[…]. We write sub(t, s) ∈ X^l for the sequence where each wildcard is substituted with the corresponding
token […]. A template labeling mapping is a mapping from a template to the class index f […]. We write the
dataset as D_tm = {(sub(t_i, s_j), y_i)}. […] Similar to the sequence classification task, we also append a
CLS token". §5.3: "each template has a distinct label". §9.1: d_1 = 210 words, n = l + 1.

Token ids: symbols 0..n_symbols-1 (written a, b, …), the CLS token n_symbols (→). Labels: classes 0..C-1.

Choices (the text leaves them open):

- Templates are distinct up to renaming of wildcards and stored in restricted-growth form (see
  ``templates_common``); ``templates=None`` means all templates of length l with at most ``n_wildcards``
  (default l) distinct wildcards. ``n_classes=None`` gives template i the label i (the theorems' setting);
  an int gives a random labelling f drawn with ``data_seed`` in which every class is used.
- Sampling: template uniform, then a uniformly random injection (= a uniform sequence of that template).
- The generalisation question is asked with held-out substitution maps: a sequence is held out (eval) iff
  ``split_mask(encode_rows(sequence, n_symbols), eval_fraction, split_seed)``; train draws only sequences
  that are not held out, eval only held-out ones, uniformly within the template. Every template is checked
  at construction to have a sequence in each split. ``split="all"`` ignores the split; ``eval_fraction=0``
  means no held-out split (train is everything, eval is empty and cannot be sampled).
- ``dataset_size`` counts distinct sequences of the split: Σ_t A(n_symbols, j_t) for "all" (exact); for
  train / eval exact when the templates have at most ``templates_common.COUNT_BUDGET`` sequences together,
  else the expected count (``split_counts_exact`` says which).
- Chance: the largest fraction of templates sharing a label (1 / number of templates with distinct labels),
  as templates are sampled uniformly.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
from pydantic import model_validator

from depthlab.tasks.base import ENUMERATE_LIMIT, Batch, SignedVocabulary, check_split, number_names, register
from depthlab.tasks.templates_common import SPLITS, TemplateTask

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter, DeviceTables


@register
class TemplateMatching(SignedVocabulary, TemplateTask):
    name = "template"
    title = "template matching"
    section = "seed 001 §4.3"
    summary = "template matching: classify a sequence by the template (equality pattern) it follows"
    eval_protocol = "held-out substitution maps: evaluation sequences never occur in training"
    held_out = True

    l: int = 3
    n_symbols: int = 16
    n_wildcards: int | None = None
    templates: list[str] | None = None
    n_classes: int | None = None
    eval_fraction: float = 0.25
    split_seed: int = 0
    data_seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> TemplateMatching:
        self.check_template_fields()
        n_templates = self.template_rows.shape[0]
        if self.n_classes is not None and not 1 <= self.n_classes <= n_templates:
            raise ValueError(
                f"n_classes must be between 1 and the number of templates ({n_templates}) so that every "
                f"class is used, got {self.n_classes}"
            )
        self.space.check_splits(min_per_split=1)
        return self

    # --- templates ----------------------------------------------------------------------------------
    @cached_property
    def template_labels(self) -> np.ndarray:
        """f: the class of each template [T]."""
        n_t = self.template_rows.shape[0]
        if self.n_classes is None:
            return np.arange(n_t, dtype=np.int64)
        rng = np.random.default_rng(self.data_seed)
        f = np.concatenate([np.arange(self.n_classes), rng.integers(0, self.n_classes, n_t - self.n_classes)])
        return rng.permutation(f).astype(np.int64)

    # --- shapes -------------------------------------------------------------------------------------
    @property
    def n_symbol_tokens(self) -> int:
        return self.n_symbols

    @property
    def labels(self) -> list[str]:
        n_classes = self.n_classes if self.n_classes is not None else self.template_rows.shape[0]
        return number_names(n_classes)

    @property
    def seq_len(self) -> int:
        return self.l + 1

    @property
    def chance(self) -> float:
        return float(np.bincount(self.template_labels).max() / self.template_labels.shape[0])

    # --- data ---------------------------------------------------------------------------------------
    def _build(self, seqs: np.ndarray, tmpl: np.ndarray) -> Batch:
        inputs = np.concatenate([seqs, np.full((seqs.shape[0], 1), self.sign_id, dtype=np.int64)], axis=1)
        return Batch(inputs, self.template_labels[tmpl], {"template": tmpl.astype(np.int64)})

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        tmpl = rng.integers(0, self.template_rows.shape[0], n)
        return self._build(self.space.sample(rng, tmpl, split), tmpl)

    counter_sampling = True

    @cached_property
    def device_tables(self) -> DeviceTables:
        from depthlab.tasks.counter import DeviceTables

        return DeviceTables(labels=self.template_labels)

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s training distribution from the counter stream: a uniform template, a uniform training
        sequence of it (``template_counter.sample_sequences``), the CLS token; the target the template's class f(t)."""
        import torch

        from depthlab.tasks.template_counter import sample_sequences

        tmpl = counter.below(self.template_rows.shape[0], draw=0)[..., 0]  # [R, B]
        seqs = sample_sequences(self.space, counter, tmpl, draw=1)
        inputs = torch.cat([seqs, torch.full_like(seqs[..., :1], self.sign_id)], -1)
        return inputs, self.device_tables.get("labels", counter.device)[tmpl]

    def dataset_size(self, split: str = "eval") -> int:
        return sum(self.space.split_counts(check_split(split, SPLITS))[0])

    def enumerate(self, split: str = "eval") -> Batch | None:
        """Every sequence of the split, by template then injection (lexicographic)."""
        if self.dataset_size(split) > ENUMERATE_LIMIT:
            return None
        seqs, tmpl = self.space.enumerate(split)
        return self._build(seqs, tmpl)
