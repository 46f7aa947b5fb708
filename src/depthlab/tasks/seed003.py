"""Helpers shared by the seed 003 tasks (index lookup, Dyck, equality): their fixed evaluation sets.

Seed 003 §6: "The models are evaluated on 5000 examples for each task." These tasks have astronomically many
strings, so their evaluation split is a fixed sample: ``eval_size`` strings of length exactly N drawn from a
generator seeded by ``EVAL_SEED``. ``dataset_size("eval")`` is that size and ``enumerate("eval")`` returns the
sample, so the engine scores every run of a study on the same examples (and chunks them as a whole dataset).
Training strings come from each run's own stream and are not excluded from it: with 64^N (or 2^N) strings a
repeat is negligible except for tiny N, which the eval protocol line of each task says.
"""

from __future__ import annotations

from typing import Any

import numpy as np

EVAL_SEED = 3003


def eval_size_or(eval_size: int, total: int, split: str) -> int:
    """The evaluation split's size, or the number of distinct training inputs."""
    return min(eval_size, total) if split == "eval" else total


def fixed_eval_set(task: Any, split: str) -> Any:
    """The task's fixed evaluation sample (None for the training split: it is never enumerated)."""
    if split != "eval":
        return None
    return task.sample(task.dataset_size("eval"), np.random.default_rng(EVAL_SEED), "eval")
