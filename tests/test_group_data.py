"""A group's batches come from its runs' chunks on the device (issue 29, ``data.GroupBatches``): the same batches,
bit for bit, as each run's stream gives alone, across chunks, after a restore and after runs leave."""

import numpy as np
import pytest
import torch

from depthlab.config import parse_run
from depthlab.training import data
from depthlab.training.data import DataStream, GroupBatches

TASK = parse_run({"task": {"name": "icqa", "k": 3, "n_q": 8, "n_a": 8}, "model": {"name": "attention_only"}}).task
BATCH = 1024  # 8 steps per chunk


def expected(seed: int, steps: int) -> list:
    stream = DataStream(TASK, seed, BATCH)
    return [stream.next() for _ in range(steps)]


@pytest.mark.parametrize("chunked", [True, False])
def test_group_batches_are_each_stream_s_own(monkeypatch, chunked):
    if not chunked:
        monkeypatch.setattr(data, "DEVICE_CHUNK_BYTES", 0)
    seeds, steps = [3, 5, 7], 20
    want = {s: expected(s, steps) for s in seeds}
    streams = [DataStream(TASK, s, BATCH) for s in seeds]
    group = GroupBatches(streams, torch.device("cpu"))
    # run 5 starts mid-chunk, restored from a checkpoint taken after 3 batches: the gather path until runs leave
    ahead = DataStream(TASK, 5, BATCH)
    for _ in range(3):
        ahead.next()
    streams[1].restore(ahead.state(), 3)
    group.reload(1)
    live, drawn = list(seeds), {3: 0, 5: 3, 7: 0}
    for step in range(14):
        if step == 9:  # run 3 leaves the group
            group.select_runs([1, 2])
            live = [5, 7]
        x, y = group.next()
        assert (group.chunked is True) == chunked
        for row, seed in enumerate(live):
            batch = want[seed][drawn[seed]]
            assert np.array_equal(x[row].numpy(), batch.inputs) and np.array_equal(y[row].numpy(), batch.targets)
            drawn[seed] += 1


def test_aligned_runs_read_a_view_of_the_chunks():
    """Runs at the same place in their chunks: a step's batches are a contiguous view, no copy per step."""
    group = GroupBatches([DataStream(TASK, s, BATCH) for s in (0, 1)], torch.device("cpu"))
    x, _ = group.next()
    assert x.is_contiguous() and x.data_ptr() == group.inputs.data_ptr()
    x2, _ = group.next()
    assert x2.data_ptr() == group.inputs[1].data_ptr()
