"""The fixed evaluation sets of seed 003's tasks (index lookup, Dyck, equality).

Seed 003 §6: "The models are evaluated on 5000 examples for each task." These tasks have astronomically many
strings, so their evaluation split is a fixed sample: ``eval_size`` strings of length exactly N drawn from a
generator seeded by ``EVAL_SEED``. ``dataset_size("eval")`` is that size and ``enumerate("eval")`` returns the
sample, so the engine scores every run of a study on the same examples (and chunks them as a whole dataset).
Training strings come from each run's own stream and are not excluded from it: with 64^N (or 2^N) strings a
repeat is negligible except for tiny N, which the eval protocol line of each task says.
"""

from __future__ import annotations

import numpy as np

from depthlab.tasks.base import Batch, Task, check_split

EVAL_SEED = 3003
SPLITS = ("train", "eval")


class FixedEvalSet(Task):
    """A task whose evaluation split is the fixed sample above.

    A subclass declares the field ``eval_size`` and says how many distinct inputs it has (``n_inputs``).
    """

    @property
    def n_inputs(self) -> int:
        """The number of distinct inputs (the training split's size; the evaluation split takes at most this)."""
        raise NotImplementedError

    @property
    def eval_split_is_sample(self) -> bool:
        return self.eval_size < self.n_inputs

    def dataset_size(self, split: str = "eval") -> int:
        check_split(split, SPLITS)
        return min(self.eval_size, self.n_inputs) if split == "eval" else self.n_inputs

    def enumerate(self, split: str = "eval") -> Batch | None:
        """The fixed evaluation sample (None for the training split: it is never enumerated)."""
        if split != "eval":
            return None
        return self.sample(self.dataset_size("eval"), np.random.default_rng(EVAL_SEED), "eval")
