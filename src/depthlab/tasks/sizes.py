"""What sampling a task costs in memory, measured on tiny samples so that no size is ever guessed.

``sample_cost(task, split)`` samples a few examples under ``tracemalloc`` (numpy reports its buffers to it):
the peak bytes per example (the examples and every temporary, e.g. ``sample_distinct``'s ``rows × population``
float64 draws) and the bytes per example of the batch that is kept. Sampling is linear in the number of
examples, so ``cost.bytes(n)`` is the peak of ``task.sample(n)`` before it is asked for. The shape bounds
(``base.check_shapes``) come first, so the probe itself is small. Results are kept per task and split.
"""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass

import numpy as np

from depthlab.tasks.base import Batch, Task, check_shapes

PROBE = (2, 6)  # the two tiny sample sizes whose difference gives the cost of one example
_COSTS: dict[tuple[type, str, str], SampleCost | None] = {}


@dataclass(frozen=True)
class SampleCost:
    """Bytes of one ``task.sample(n)`` call: ``fixed + n * peak`` at its peak, ``n * kept`` afterwards."""

    fixed: int
    peak: int
    kept: int

    def bytes(self, n: int) -> int:
        """Peak bytes of sampling ``n`` examples."""
        return self.fixed + n * self.peak


def batch_bytes(batch: Batch) -> int:
    """Bytes of a batch's arrays (inputs, targets, meta)."""
    return batch.inputs.nbytes + batch.targets.nbytes + sum(v.nbytes for v in batch.meta.values())


def _peak(task: Task, n: int, split: str) -> tuple[int, Batch]:
    """Peak traced bytes while sampling ``n`` examples (above what was traced before), and the batch."""
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    batch = task.sample(n, np.random.default_rng(0), split)
    return tracemalloc.get_traced_memory()[1] - before, batch


def sample_cost(task: Task, split: str = "train") -> SampleCost | None:
    """The memory cost of sampling ``task``'s ``split``; None when the split cannot be sampled (its own error
    comes when it is used). ValueError when the task's shapes are beyond the bounds (``check_shapes``)."""
    check_shapes(task)
    key = (type(task), task.model_dump_json(), split)
    if key not in _COSTS:
        small, large = PROBE
        tracing = tracemalloc.is_tracing()
        try:
            task.sample(1, np.random.default_rng(0), split)  # fills the task's caches (its fixed dataset, tables)
            if not tracing:
                tracemalloc.start()
            low, _ = _peak(task, small, split)
            high, batch = _peak(task, large, split)
        except Exception:  # a split this task does not sample: its own error comes when it is used
            _COSTS[key] = None
        else:
            peak = max(high - low, 0) // (large - small) + 1
            _COSTS[key] = SampleCost(max(low - small * peak, 0), peak, batch_bytes(batch) // large + 1)
        finally:
            if not tracing:
                tracemalloc.stop()
    return _COSTS[key]
