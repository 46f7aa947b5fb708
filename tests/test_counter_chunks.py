"""Issue 45, item 1 on a CPU: stream 2 made ahead, a chunk of steps per ``sample_counter`` call on the data thread
(``CounterChunks``), is bit for bit the stream made one step at a time in the step (``CounterBatches``): for every
task, across chunk boundaries, for runs at different positions, runs leaving and runs restored from checkpoints."""

import pytest
import torch

from depthlab.tasks import TASKS
from depthlab.tasks.counter import Counter, seed_keys
from depthlab.training.data import CounterBatches, CounterChunks, CounterStream, group_batches
from depthlab.training.device import samples_ahead, samples_on_data_thread
from test_counter_tasks import COUNTED, SETTINGS

CPU = torch.device("cpu")


def streams(seeds, drawn=None, batches=None):
    made = [CounterStream(seed, 8, batches) for seed in seeds]
    for stream, position in zip(made, drawn or [0] * len(made), strict=True):
        stream.drawn = position
    return made


def equal(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("name", COUNTED)
def test_chunks_of_steps_are_the_one_step_batches_bit_for_bit(name):
    task = TASKS[name](**SETTINGS[name])
    seeds, drawn = [3, 2**40 + 5, 11], [0, 17, 4]  # runs at different positions (resumed at different steps)
    ahead, in_step = CounterChunks(streams(seeds, drawn), task, CPU), CounterBatches(streams(seeds, drawn), task, CPU)
    ahead.steps_per_chunk, ahead.steps_per_call = 5, 2  # chunks of 5 steps in calls of 2, 2 and 1, sampled ahead
    for _ in range(12):
        assert equal(ahead.next(), in_step.next())
    assert ahead.pending is not None  # the next chunk was asked for ahead


def test_with_more_than_one_torch_thread_chunks_are_made_in_line_and_the_same():
    """Stream 2's chunks go to the data thread only with one intra-op thread (``device.samples_on_data_thread``:
    with more, its parallel regions and the step's share the cores, which slowed a 2-thread IC-QA group 1.4×); in
    line, they are the same batches, and nothing is pending between them."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert not samples_on_data_thread()
        task = TASKS["icqa"](**SETTINGS["icqa"])
        inline, in_step = CounterChunks(streams([3, 4]), task, CPU), CounterBatches(streams([3, 4]), task, CPU)
        inline.steps_per_chunk, inline.steps_per_call = 5, 2
        for _ in range(12):
            assert equal(inline.next(), in_step.next())
            assert inline.pending is None
    finally:
        torch.set_num_threads(threads)
    assert samples_on_data_thread() == (threads == 1)


def test_runs_leaving_and_restored_keep_their_own_batches():
    task = TASKS["index_lookup"](N=12)
    ahead, in_step = CounterChunks(streams([1, 2, 3, 4]), task, CPU), CounterBatches(streams([1, 2, 3, 4]), task, CPU)
    ahead.steps_per_chunk = 4
    for _ in range(2):
        assert equal(ahead.next(), in_step.next())
    for batches in (ahead, in_step):  # run 2 left mid-chunk, with the next chunk already asked for
        batches.select_runs([0, 1, 3])
    for _ in range(4):  # the rest of the chunk in use, then the one sampled ahead, without run 2
        assert equal(ahead.next(), in_step.next())
    for batches in (ahead, in_step):
        batches.streams[1].restore(batches.streams[1].state(), 40)
        batches.reload(1)
        batches.select_runs([1, 2])
    for _ in range(5):
        assert equal(ahead.next(), in_step.next())
    assert [s.drawn for s in ahead.streams] == [45, 11] and ahead.steps.tolist() == [45, 11]
    ahead.select_runs([])
    assert ahead.pending is None  # the last run left: nothing is sampled for no one


def test_chunks_stop_at_the_steps_the_runs_need():
    ahead = CounterChunks(streams([1, 2], drawn=[0, 3], batches=9), TASKS["icqa"](), CPU)
    assert ahead.steps_per_chunk == 1024 and ahead.steps_per_call == 512  # 8,192 examples a run; a call, the group
    ahead.next()
    assert len(ahead.chunk[0]) == 9 and ahead.pending is None  # run 0 needs 9 steps; run 1 six


def test_stream_two_is_made_ahead_on_a_cpu_and_in_the_step_elsewhere():
    assert samples_ahead(CPU) and not samples_ahead(torch.device("cuda"))
    assert isinstance(group_batches(streams([1]), TASKS["icqa"](), CPU), CounterChunks)


@pytest.mark.parametrize(("name", "setting"), [
    ("dyck", {}), ("dyck", {"N": 20, "n_types": 1}), ("dyck", {"N": 40, "n_types": 3, "depth": 4}),
    ("ictm", {}), ("ictm", {"k": 3, "l": 5, "n_symbols": 60, "n_a": 6}), ("template", {"l": 5, "n_symbols": 60}),
    ("nearest_neighbor", {}), ("nearest_neighbor", {"N": 8, "d": 6}),
    ("nearest_neighbor", {"N": 10, "d": 3, "gamma": 0.2}), ("nearest_neighbor", {"N": 12, "d": 5, "gamma": 0.1})])
def test_off_a_graph_redraws_only_where_needed_and_gives_the_same_values(name, setting):
    """Off a graph Dyck corrupts the negatives once, and again only where the first corruption stays in the language
    (about half of them with one bracket type); the template tasks draw one candidate sequence, and the whole budget
    only where it is rejected (held out, an invalid injection, the excluded sequence): the values of the fixed
    budget, bit for bit."""
    task, keys, steps = TASKS[name](**setting), seed_keys(torch.tensor([5, 9])), torch.tensor([0, 3])
    in_graph = task.sample_counter(Counter(keys, steps, 400))
    assert equal(task.sample_counter(Counter(keys, steps, 400, capturable=False)), in_graph)
    with pytest.raises(RuntimeError, match="capturable"):
        Counter(keys, steps, 4).rows(torch.ones(2, 4, dtype=torch.bool))


def test_nearest_neighbour_s_undecided_queries_take_the_whole_budget_for_the_same_values(monkeypatch):
    """Off a graph a query is decided from a first candidate's dot products by any kernel only where its gap is
    surely on one side of γ; a margin widened to 0.02 sends many examples on, to later stages and to the whole budget
    (which they reach at 0.3 % otherwise), and the values stay those of the graph's kernels."""
    from depthlab.tasks.nearest_neighbor import NearestNeighbor

    task, keys, steps = TASKS["nearest_neighbor"](), seed_keys(torch.tensor([5, 9])), torch.tensor([0, 3])
    in_graph = task.sample_counter(Counter(keys, steps, 300))
    monkeypatch.setattr(NearestNeighbor, "sure_margin", 0.02)
    taken = []
    whole_budget = NearestNeighbor.first_with_margin
    monkeypatch.setattr(NearestNeighbor, "first_with_margin",
                        lambda self, counter, *rest: taken.append(counter.batch) or whole_budget(self, counter, *rest))
    assert equal(task.sample_counter(Counter(keys, steps, 300, capturable=False)), in_graph)
    assert sum(taken) > 0.1 * 600 * task.N / 2  # over a tenth of the queries (903 of 4,800), not 0.3 %


def test_a_chunk_stays_within_the_prefetch_bound_and_a_step_over_it_is_made_in_line(monkeypatch):
    from depthlab.training import data

    task = TASKS["icqa"]()  # 96 bytes an example: a step of 2 runs × 8 takes 1,536
    monkeypatch.setattr(data, "PREFETCH_BYTES", 5000)
    ahead, in_step = CounterChunks(streams([1, 2]), task, CPU), CounterBatches(streams([1, 2]), task, CPU)
    ahead.steps_per_call = 2  # the first chunk: one call of 2 steps; then 3 steps a chunk
    for _ in range(4):
        assert equal(ahead.next(), in_step.next())
    assert ahead.step_bytes == 1536 and len(ahead.chunk[0]) == 3 and ahead.pending is not None  # 3 steps in 5,000
    monkeypatch.setattr(data, "PREFETCH_BYTES", 1000)
    ahead, in_step = CounterChunks(streams([1, 2]), task, CPU), CounterBatches(streams([1, 2]), task, CPU)
    ahead.steps_per_call = 2  # the first chunk: one call of 2 steps; then one step at a time, in line
    for _ in range(3):
        assert equal(ahead.next(), in_step.next())
    assert len(ahead.chunk[0]) == 1 and ahead.pending is None
