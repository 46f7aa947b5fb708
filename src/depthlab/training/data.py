"""A run's training data and the evaluation data every run of a task is scored on.

Training data comes from the run's own seeded generator, a chunk of steps at a time, the next chunk sampled on a
background thread while the model trains (one thread per process, re-created after a fork; chunks over
``PREFETCH_BYTES`` are sampled in line). Chunks come in the same order from the same generator either way, so a
run's batches do not depend on prefetching, and a checkpoint's stream state resumes them exactly.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..tasks import Batch, Task

EXHAUSTIVE_EVAL_LIMIT = 400_000  # evaluate on the whole dataset when it has at most this many examples
SAMPLED_EVAL_EXAMPLES = 20_000  # otherwise on this many held-out examples, the same for every run
EVAL_SEED = 20240229  # the fixed evaluation sample does not depend on any run's seed
CHUNK_EXAMPLES = 8192  # examples generated per call to task.sample (one call covers many steps)
PREFETCH_BYTES = 64 * 2**20  # sample the next chunk ahead only when a chunk is at most this big: prefetching
# holds two chunks per run, and Eq-ncp's multi-label targets make a chunk hundreds of MB


_PREFETCH: tuple[int, ThreadPoolExecutor] | None = None


def _prefetcher() -> ThreadPoolExecutor:
    """One background thread per process that samples the next chunk of every stream while the model trains
    (numpy releases the GIL in its bulk work, and small torch ops leave a core free). Created per process:
    a thread pool does not survive a fork."""
    global _PREFETCH
    if _PREFETCH is None or _PREFETCH[0] != os.getpid():
        _PREFETCH = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="depthlab-data"))
    return _PREFETCH[1]


class DataStream:
    """One run's training data: its own seeded generator, sampled a chunk of steps at a time.

    The next chunk is sampled in the background while the current one is used (only if the run's
    ``batches`` need it); chunks come in the same order from the same generator, so the batches do not depend
    on the prefetching. The state (generator state at the start of the current chunk, and the position in it)
    goes into checkpoints, so a resumed run sees exactly the batches it would have seen.
    """

    def __init__(self, task: Task, seed: int, batch_size: int, batches: int | None = None) -> None:
        self.task, self.batch_size, self.batches = task, batch_size, batches
        self.steps_per_chunk = max(1, CHUNK_EXAMPLES // batch_size)
        self.rng = np.random.default_rng([seed, 0xDA7A])
        self.chunk_state: dict[str, Any] = self.rng.bit_generator.state
        self.buffer: Batch | None = None
        self.pos = self.steps_per_chunk
        self.drawn = 0
        self.pending: Future | None = None

    def _sample_chunk(self) -> tuple[dict[str, Any], Batch]:
        state = self.rng.bit_generator.state
        return state, self.task.sample(self.batch_size * self.steps_per_chunk, self.rng, "train")

    def _refill(self) -> None:
        chunk = self.pending.result() if self.pending is not None else self._sample_chunk()
        self.chunk_state, self.buffer = chunk
        self.pos = 0
        needed = self.batches is None or self.batches - self.drawn > self.steps_per_chunk
        small = self.buffer.inputs.nbytes + self.buffer.targets.nbytes <= PREFETCH_BYTES
        self.pending = _prefetcher().submit(self._sample_chunk) if needed and small else None

    def next(self) -> Batch:
        if self.pos >= self.steps_per_chunk:
            self._refill()
        start = self.pos * self.batch_size
        self.pos += 1
        self.drawn += 1
        return self.buffer.take(slice(start, start + self.batch_size))

    def state(self) -> dict[str, Any]:
        return {"rng": self.chunk_state, "pos": self.pos}

    def restore(self, state: dict[str, Any], drawn: int) -> None:
        """Continue from a checkpoint's ``state()``, taken after ``drawn`` batches."""
        self.close()
        self.rng.bit_generator.state = state["rng"]
        self.drawn = drawn - state["pos"]
        self._refill()
        self.pos, self.drawn = state["pos"], drawn

    def close(self) -> None:
        """Wait for (or cancel) the chunk being sampled: the generator is the background thread's until then."""
        if self.pending is not None and not self.pending.cancel():
            self.pending.result()
        self.pending = None


def eval_examples(task: Task) -> int:
    """How many examples :func:`eval_set` scores a run of ``task`` on, without building them."""
    size = task.dataset_size("eval")
    return size if size <= EXHAUSTIVE_EVAL_LIMIT else SAMPLED_EVAL_EXAMPLES


def eval_set(task: Task) -> tuple[Batch, bool]:
    """The evaluation data every run of this task is scored on, and whether it is the whole dataset."""
    if task.dataset_size("eval") <= EXHAUSTIVE_EVAL_LIMIT:
        full = task.enumerate("eval")
        if full is not None:
            return full, True
    return task.sample(SAMPLED_EVAL_EXAMPLES, np.random.default_rng(EVAL_SEED), "eval"), False


class FixedDataStream(DataStream):
    """A fixed training set of ``examples`` examples, cycled (``train.train_examples``; seed 002 §7.1: "2^20
    randomly generated training examples", §8.1 and §9.1: "262k").

    The set is the run's own: chunk c of it is ``task.sample`` of one chunk's examples from a generator seeded
    with (run seed, c), so it is the same chunk every epoch and the set is never all in memory (2^20 retrieval
    examples are about a gigabyte). Epoch e visits the chunks in an order drawn from (run seed, e) and each
    chunk's examples in an order drawn from (run seed, e, c): every example exactly once per epoch, shuffled
    across and within chunks (not one uniform permutation of the whole set). The state is the chunk counter and
    the position in the chunk, so a resumed run sees exactly the batches it would have seen.
    """

    def __init__(self, task: Task, seed: int, batch_size: int, examples: int, batches: int | None = None) -> None:
        super().__init__(task, seed, batch_size, batches)
        per_set = examples // batch_size  # batches in the set (train_examples is a multiple of the batch size)
        most = max(1, CHUNK_EXAMPLES // batch_size)
        self.steps_per_chunk = max(d for d in range(1, min(most, per_set) + 1) if per_set % d == 0)
        self.chunks = per_set // self.steps_per_chunk
        self.seed, self.counter = seed, 0
        self.chunk_state = 0
        self.pos = self.steps_per_chunk

    def _sample_chunk(self) -> tuple[Any, Batch]:
        counter, self.counter = self.counter, self.counter + 1
        epoch, slot = divmod(counter, self.chunks)
        chunk = int(np.random.default_rng([self.seed, 0xE0C, epoch]).permutation(self.chunks)[slot])
        n = self.batch_size * self.steps_per_chunk
        batch = self.task.sample(n, np.random.default_rng([self.seed, 0xF1CED, chunk]), "train")
        return counter, batch.take(np.random.default_rng([self.seed, 0xE0C, epoch, chunk]).permutation(n))

    def state(self) -> dict[str, Any]:
        return {"chunk": self.chunk_state, "pos": self.pos}

    def restore(self, state: dict[str, Any], drawn: int) -> None:
        self.close()
        self.counter = int(state["chunk"])
        self.drawn = drawn - state["pos"]
        self._refill()
        self.pos, self.drawn = state["pos"], drawn


def data_stream(task: Task, seed: int, batch_size: int, batches: int | None = None,
                examples: int | None = None) -> DataStream:
    """A run's training data: fresh examples every step, or a fixed set of ``examples`` cycled."""
    if examples is None:
        return DataStream(task, seed, batch_size, batches)
    return FixedDataStream(task, seed, batch_size, examples, batches)
