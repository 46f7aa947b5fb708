"""What sampling a task costs in memory, measured on small samples so that no size is ever guessed.

``sample_cost(task, split)`` samples twice under ``tracemalloc`` (numpy reports its buffers to it), a few
examples and then up to a few hundred: from the two peaks, the bytes per example at the peak of a call (the
examples and every temporary, e.g. ``sample_distinct``'s ``rows × population`` float64 draws), and the bytes per
example of the batch that is kept. Sampling is linear in the number of examples, so ``cost.bytes(n)`` is the
peak of ``task.sample(n)`` before it is asked for (within 20 % on every built-in task). The shape bounds
(``base.check_shapes``) come first, so the probes stay small. Results are kept per task and split.
"""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass

import numpy as np

from depthlab.tasks.base import Batch, Task, check_shapes

PROBE_EXAMPLES = (4, 512)  # the first probe's size; the most examples of the second …
PROBE_BYTES = 32 << 20  # … which also stays near this size (at tiny sizes fixed costs blur the cost per example)
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
        small, most = PROBE_EXAMPLES
        tracing = tracemalloc.is_tracing()
        try:
            task.sample(1, np.random.default_rng(0), split)  # fills the task's caches (its fixed dataset, tables)
            if not tracing:
                tracemalloc.start()
            low, _ = _peak(task, small, split)
            large = max(2 * small, min(most, PROBE_BYTES * small // max(low, 1)))
            high, batch = _peak(task, large, split)
        except Exception:  # a split this task does not sample: its own error comes when it is used
            _COSTS[key] = None
        else:
            peak = -(-max(high - low, 0) // (large - small))  # rounded up
            _COSTS[key] = SampleCost(max(low - small * peak, 0), peak, -(-batch_bytes(batch) // large))
        finally:
            if not tracing:
                tracemalloc.stop()
    return _COSTS[key]
