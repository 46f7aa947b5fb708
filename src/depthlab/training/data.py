"""A run's training data and the evaluation data every run of a task is scored on.

Training data comes from the run's own seeded generator, a chunk of steps at a time, the next chunk sampled on a
background thread while the model trains (one thread per process, re-created after a fork; chunks over
``PREFETCH_BYTES`` are sampled in line). Chunks come in the same order from the same generator either way, so a
run's batches do not depend on prefetching, and a checkpoint's stream state resumes them exactly. A group moves
each chunk to its device once (``GroupBatches``), and a step indexes into the chunks there. That is stream
version 1, the default. Stream version 2 (``train.stream: 2``) makes every batch on the group's device from a
counter-based generator keyed by (run seed, step, example) (``CounterStream``): in the step on an accelerator
(``CounterBatches``), a chunk of steps ahead on the same background thread on a CPU (``CounterChunks``).
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from ..tasks import Batch, Task
from ..tasks.counter import Counter, seed_keys
from .device import copy_to, samples_ahead, samples_on_data_thread, to_device

EXHAUSTIVE_EVAL_LIMIT = 400_000  # evaluate on the whole dataset when it has at most this many examples
SAMPLED_EVAL_EXAMPLES = 20_000  # otherwise on this many held-out examples, the same for every run
EVAL_SEED = 20240229  # the fixed evaluation sample does not depend on any run's seed
CHUNK_EXAMPLES = 8192  # examples generated per call to task.sample (one call covers many steps)
PREFETCH_BYTES = 64 * 2**20  # sample the next chunk ahead only when a chunk is at most this big: prefetching
# holds two chunks per run, and Eq-ncp's multi-label targets make a chunk hundreds of MB
DEVICE_CHUNK_BYTES = 256 * 2**20  # a group's current chunks are kept on its device while they take at most this


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

    def advance(self) -> tuple[Batch | None, int]:
        """Move on by one batch: (the chunk it is in if that chunk is new, else None; its index in the chunk)."""
        fresh = None
        if self.pos >= self.steps_per_chunk:
            self._refill()
            fresh = self.buffer
        self.pos += 1
        self.drawn += 1
        return fresh, self.pos - 1

    def next(self) -> Batch:
        _, index = self.advance()
        start = index * self.batch_size
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


class CounterStream:
    """A run's training data of stream version 2 (``train.stream: 2``): its place in the counter-based stream
    (``tasks.counter``). The examples themselves are made on the device, every run of a group at once
    (:class:`CounterBatches`); what a run carries is its seed and how many batches it has drawn, and a checkpoint
    records that count (``pos`` stays 0: there are no chunks)."""

    steps_per_chunk = 1  # what a checkpoint's stream position is checked against

    def __init__(self, seed: int, batch_size: int, batches: int | None = None) -> None:
        self.seed, self.batch_size, self.batches, self.drawn = seed, batch_size, batches, 0

    def state(self) -> dict[str, Any]:
        return {"drawn": self.drawn, "pos": 0}

    def restore(self, state: dict[str, Any], drawn: int) -> None:
        self.drawn = drawn

    def close(self) -> None:
        """Nothing runs in the background."""


def data_stream(task: Task, seed: int, batch_size: int, batches: int | None = None,
                examples: int | None = None, version: int = 1) -> DataStream | CounterStream:
    """A run's training data: fresh examples every step, or a fixed set of ``examples`` cycled; from the host's
    numpy generator (stream version 1) or the counter-based one on the device (version 2)."""
    if version == 2:
        return CounterStream(seed, batch_size, batches)
    if examples is None:
        return DataStream(task, seed, batch_size, batches)
    return FixedDataStream(task, seed, batch_size, examples, batches)


class CounterBatches:
    """A group's batches of stream version 2: ``task.sample_counter`` for every run at once, on the device, from
    the runs' seeds and step counters (int64 tensors there, advanced in place: no host round-trip per step)."""

    def __init__(self, streams: list[CounterStream], task: Task, device: torch.device) -> None:
        self.streams, self.task, self.device = streams, task, device
        self.keys = seed_keys(torch.tensor([s.seed for s in streams], dtype=torch.int64, device=device))
        self.steps = torch.tensor([s.drawn for s in streams], dtype=torch.int64, device=device)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every run's next batch: inputs [runs, batch, …] and targets [runs, batch] on the device."""
        batch = self.sample()
        self.count()
        return batch

    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch, the step counters advanced on the device: device work only, so a CUDA graph can hold
        it (the engine captures it with the training step); :meth:`count` then does the host's book-keeping."""
        batch = self.task.sample_counter(Counter(self.keys, self.steps, self.streams[0].batch_size))
        self.steps += 1
        return batch

    def count(self) -> None:
        """One more batch drawn by every run (what checkpoints record)."""
        for stream in self.streams:
            stream.drawn += 1

    def reload(self, r: int) -> None:
        """Run r's stream was restored (from a checkpoint): its counter continues from there."""
        self.steps[r] = self.streams[r].drawn

    def select_runs(self, keep: list[int]) -> None:
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.streams = [self.streams[r] for r in keep]
        self.keys, self.steps = self.keys[index], self.steps[index]


def counter_call_steps(runs: int, batch_size: int) -> int:
    """Steps per ``sample_counter`` call of stream 2 made ahead: about ``CHUNK_EXAMPLES`` examples of the whole group
    (a larger call is no faster per example on a CPU, and its intermediates leave the caches)."""
    return max(1, CHUNK_EXAMPLES // max(1, runs * batch_size))


def counter_chunk(task: Task, keys: torch.Tensor, starts: torch.Tensor, steps: int, batch_size: int,
                  per_call: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Stream 2's batches of steps starts[r] … starts[r] + steps − 1 for every run r (``keys``: :func:`seed_keys`
    of the runs' seeds): inputs and targets [steps, R, batch, …], in ``sample_counter`` calls of ``per_call`` steps
    (all at once by default), step c of run r in row c·R + r of its call. Made off any graph (``capturable=False``):
    a sampler may redraw only where it needs to."""
    per_call = per_call or steps
    parts = []
    for first in range(0, steps, per_call):
        count = min(per_call, steps - first)
        ahead = (starts + torch.arange(first, first + count, dtype=torch.int64, device=starts.device)[:, None])
        inputs, targets = task.sample_counter(Counter(keys.expand(count, -1).flatten(), ahead.flatten(), batch_size,
                                                      capturable=False))
        parts.append((inputs.unflatten(0, (count, -1)), targets.unflatten(0, (count, -1))))
    if len(parts) == 1:
        return parts[0]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


class CounterChunks:
    """A group's batches of stream version 2 on a CPU, made ahead: a chunk of steps for every run at once
    (:func:`counter_chunk`), the next chunk on the data thread while the model trains (as stream 1 does) when torch
    runs one thread, in line when the chunk in use runs out otherwise (``device.samples_on_data_thread``).

    Every value is a function of (run seed, step, example, draw, lane), so C steps are one ``sample_counter`` call
    over the R × C (key, step) pairs, step c of run r in row c·R + r, reshaped to [C, R, batch, …]: bit for bit the
    C one-step calls of :class:`CounterBatches` (``tests/test_counter_chunks.py``). The first chunk is one call of
    about ``CHUNK_EXAMPLES`` examples (:func:`counter_call_steps`), made in line; each later one holds as many steps
    as a run's chunk of stream 1 (``CHUNK_EXAMPLES`` examples per run: a long horizon for the data thread; 8 steps at
    16 runs left the step waiting 3 % of the time, 64 steps under 1 %) within ``PREFETCH_BYTES`` for the whole
    group (a step's size known from the first chunk), made in such calls, and never more steps than the runs still
    need; a single step over ``PREFETCH_BYTES`` is made in line, one step a chunk. Each run's chunk starts at its
    own step, so runs at different positions (resumed from different checkpoints) are exact; a run restored or
    leaving drops the chunk sampled ahead, and the next one starts where each run now is."""

    def __init__(self, streams: list[CounterStream], task: Task, device: torch.device) -> None:
        self.streams, self.task, self.device = streams, task, device
        self.keys = seed_keys(torch.tensor([s.seed for s in streams], dtype=torch.int64, device=device))
        # each run's step at the start of the chunk in use (its next step while there is none): no tensor op a step
        self.starts = torch.tensor([s.drawn for s in streams], dtype=torch.int64, device=device)
        self.batch_size = streams[0].batch_size if streams else 1
        self.steps_per_chunk = max(1, CHUNK_EXAMPLES // self.batch_size)  # at most: a run's chunk of stream 1
        self.steps_per_call = counter_call_steps(len(streams), self.batch_size)
        self.step_bytes: int | None = None  # one step's batches for the group, known from the first chunk
        self.chunk: tuple[torch.Tensor, torch.Tensor] | None = None
        self.pos = 0
        self.pending: Future | None = None
        self.ahead_rows: torch.Tensor | None = None  # the runs kept since the chunk ahead was asked for

    @property
    def steps(self) -> torch.Tensor:
        """Each run's next step [R]."""
        return self.starts + self.pos

    def _chunk_steps(self) -> int:
        """Steps of the next chunk: one call's first, then as many as a run's chunk of stream 1 within
        ``PREFETCH_BYTES`` for the group's chunk (at least one)."""
        if self.step_bytes is None:
            return min(self.steps_per_call, self.steps_per_chunk)
        return max(1, min(self.steps_per_chunk, PREFETCH_BYTES // self.step_bytes))

    def _left(self, starts: torch.Tensor) -> int:
        """Steps the group still needs from ``starts`` (the most any run needs; a chunk's worth if unknown)."""
        if any(s.batches is None for s in self.streams):
            return self.steps_per_chunk
        return max(s.batches for s in self.streams) - int(starts.min())

    def _refill(self) -> None:
        starts = self.steps
        if self.pending is not None:
            inputs, targets = self.pending.result()
            rows, self.pending, self.ahead_rows = self.ahead_rows, None, None
            self.chunk = (inputs, targets) if rows is None else (inputs[:, rows], targets[:, rows])
        else:
            steps = max(1, min(self._chunk_steps(), self._left(starts)))
            self.chunk = counter_chunk(self.task, self.keys, starts, steps, self.batch_size, self.steps_per_call)
            self.step_bytes = self.step_bytes or max(1, sum(t.nbytes for t in self.chunk) // steps)
        self.starts, self.pos = starts, 0
        ahead = starts + len(self.chunk[0])
        steps = min(self._chunk_steps(), self._left(ahead))
        if steps > 0 and steps * self.step_bytes <= PREFETCH_BYTES and samples_on_data_thread():
            self.pending = _prefetcher().submit(counter_chunk, self.task, self.keys, ahead, steps, self.batch_size,
                                                self.steps_per_call)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every run's next batch: inputs [runs, batch, …] and targets [runs, batch] (views into the chunk)."""
        if self.chunk is None or self.pos == len(self.chunk[0]):
            self._refill()
        inputs, targets = self.chunk[0][self.pos], self.chunk[1][self.pos]
        self.pos += 1
        for stream in self.streams:
            stream.drawn += 1
        return inputs, targets

    def close(self) -> None:
        """Drop the chunks: the next batch is sampled from where each run now is (the one sampled ahead is waited
        for, or cancelled: the task is the data thread's until then)."""
        if self.pending is not None and not self.pending.cancel():
            self.pending.result()
        self.starts, self.pos = self.steps, 0
        self.chunk, self.pending, self.ahead_rows = None, None, None

    def reload(self, r: int) -> None:
        """Run r's stream was restored (from a checkpoint): its counter continues from there."""
        self.close()
        self.starts[r] = self.streams[r].drawn

    def select_runs(self, keep: list[int]) -> None:
        """Keep the runs at ``keep``: their columns of the chunk in use, and of the one sampled ahead when it comes."""
        if not keep:
            self.close()
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.streams = [self.streams[r] for r in keep]
        self.keys, self.starts = self.keys[index], self.starts[index]
        if self.chunk is not None:
            self.chunk = (self.chunk[0][:, index], self.chunk[1][:, index])
        if self.pending is not None:
            self.ahead_rows = index if self.ahead_rows is None else self.ahead_rows[index]


def group_batches(streams: list, task: Task, device: torch.device) -> GroupBatches | CounterBatches | CounterChunks:
    """A group's batches for its runs' streams (all of one version: the version is part of the group key)."""
    if streams and isinstance(streams[0], CounterStream):
        return (CounterChunks if samples_ahead(device) else CounterBatches)(streams, task, device)
    return GroupBatches(streams, device)


class GroupBatches:
    """A group's batches, each run's chunk of steps moved to the device once per chunk, not once per step.

    Column r of ``inputs`` and ``targets`` ([steps per chunk, runs, batch, …], on the group's device) holds run r's
    current chunk, copied there when the run's stream starts it (without blocking, from pinned memory on a GPU).
    A step's batches are then one index into them: a contiguous view when every run is at the same place in its
    chunk (the usual case: runs of a group start and step together), a gather when they are not (runs resumed
    from checkpoints taken at different steps). The streams are read as ``DataStream.next`` reads them, so the batches
    are the same, bit for bit. A group whose chunks would take more than ``DEVICE_CHUNK_BYTES`` sends each step's
    batches instead (stacked on the host), as before.
    """

    def __init__(self, streams: list[DataStream], device: torch.device) -> None:
        self.streams, self.device = streams, device
        self.positions = [0] * len(streams)
        self.inputs: torch.Tensor | None = None
        self.targets: torch.Tensor | None = None
        self.chunked: bool | None = None  # decided at the first chunk, from its size
        self.rows = torch.arange(len(streams), device=device)

    def _decide(self, chunk: Batch) -> None:
        if self.chunked is None:
            size = chunk.inputs.nbytes + chunk.targets.nbytes
            self.chunked = len(self.streams) * size <= DEVICE_CHUNK_BYTES

    def _load(self, r: int, chunk: Batch) -> None:
        """Copy run r's chunk into its column (the buffers are made at the first chunk)."""
        self._decide(chunk)
        if not self.chunked:
            return
        steps, batch = self.streams[r].steps_per_chunk, self.streams[r].batch_size
        if self.inputs is None or self.targets is None:
            self.inputs, self.targets = (
                torch.empty(steps, len(self.streams), batch, *a.shape[1:], dtype=torch.from_numpy(a[:0]).dtype,
                            device=self.device) for a in (chunk.inputs, chunk.targets))
        copy_to(self.inputs[:, r], chunk.inputs)
        copy_to(self.targets[:, r], chunk.targets)

    def reload(self, r: int) -> None:
        """Run r's stream was restored (from a checkpoint): its column takes the stream's current chunk."""
        stream = self.streams[r]
        if stream.buffer is not None:
            self._load(r, stream.buffer)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every run's next batch: inputs [runs, batch, …] and targets [runs, batch, …] on the device."""
        for r, stream in enumerate(self.streams):
            fresh, self.positions[r] = stream.advance()
            if fresh is not None:
                self._load(r, fresh)
        if not self.chunked or self.inputs is None or self.targets is None:
            batch = self.streams[0].batch_size
            taken = [s.buffer.take(slice(p * batch, (p + 1) * batch))
                     for s, p in zip(self.streams, self.positions, strict=True)]
            return (to_device(np.stack([b.inputs for b in taken]), self.device),
                    to_device(np.stack([b.targets for b in taken]), self.device))
        first = self.positions[0]
        if all(p == first for p in self.positions):
            return self.inputs[first], self.targets[first]
        index = to_device(np.asarray(self.positions), self.device)
        return self.inputs[index, self.rows], self.targets[index, self.rows]

    def select_runs(self, keep: list[int]) -> None:
        """Keep the runs at ``keep`` (the others left the group; their streams are closed by the group)."""
        self.streams = [self.streams[r] for r in keep]
        self.positions = [self.positions[r] for r in keep]
        self.rows = torch.arange(len(keep), device=self.device)
        if self.inputs is not None and self.targets is not None:
            index = torch.tensor(keep, dtype=torch.long, device=self.device)
            self.inputs, self.targets = self.inputs[:, index], self.targets[:, index]
