"""Issue 45, item 1: stream version 2, training data made on the device from a counter-based generator.

The hash is lowbias32 exactly; a run's batches depend on its seed and step only (not on its group); different seeds
and steps give different streams; the examples follow each task's definition (uniform draws, labels as the task's
own builder makes them); stream 2 is a run-id change only where asked for, and trains and resumes."""

import numpy as np
import pytest
import torch

from conftest import Killed, killed_after_step
from depthlab.config import parse_run
from depthlab.errors import UserError
from depthlab.store import Store
from depthlab.tasks import TASKS
from depthlab.tasks.counter import (
    Counter,
    PackedRows,
    hash32_,
    hash32_host_,
    hash32_tensor_,
    seed_keys,
    unsigned,
)
from depthlab.training.data import CounterBatches, CounterStream


def lowbias32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def hash32_int64(x: torch.Tensor) -> torch.Tensor:
    """The 64-bit reference formula (stream 2's first form): lowbias32 on values in [0, 2³²) held in int64, each
    32 × 32-bit product split into 16-bit halves so that no intermediate leaves int64's range."""
    def mul32(v, m):
        return ((v * (m & 0xFFFF)) + ((v & 0xFFFF) * (m >> 16) << 16)) & 0xFFFFFFFF
    x = mul32(x ^ (x >> 16), 0x7FEB352D)
    x = mul32(x ^ (x >> 15), 0x846CA68B)
    return x ^ (x >> 16)


EDGES = [0, 1, 2, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0x80000001, 0xFFFFFFFE, 0xFFFFFFFF, 123456789, 3141592653]


def test_hash32_is_lowbias32_on_every_range_of_32_bit_values():
    values = EDGES + np.random.default_rng(0).integers(0, 2**32, 200).tolist()
    ours = unsigned(hash32_(torch.tensor(values, dtype=torch.int64).to(torch.int32))).tolist()
    assert ours == [lowbias32(v) for v in values]


def test_hash32_in_place_on_int32_with_wrapping_products_is_the_int64_formula():
    values = torch.tensor(EDGES + np.random.default_rng(1).integers(0, 2**32, 100_000).tolist(), dtype=torch.int64)
    words = values.to(torch.int32)  # the low 32 bits, two's complement: 2³¹ … 2³² − 1 become negative
    assert words[EDGES.index(0x80000000)] == -(2**31) and words[EDGES.index(0xFFFFFFFF)] == -1
    ours = hash32_(words)
    assert ours is words and ours.dtype == torch.int32 and torch.equal(unsigned(ours), hash32_int64(values))


def test_the_hash_by_numpy_on_a_cpu_is_the_hash_by_torch_operations():
    values = torch.tensor(EDGES + np.random.default_rng(2).integers(0, 2**32, 10_000).tolist()).to(torch.int32)
    by_torch, by_numpy = hash32_tensor_(values.clone()), hash32_host_(values.clone())
    assert torch.equal(by_numpy, by_torch) and torch.equal(hash32_(values.clone()), by_torch)
    strided = values.clone()[::3]  # numpy works on the tensor's own memory, any strides
    assert torch.equal(hash32_host_(strided), hash32_tensor_(values[::3].clone()))


def test_values_from_a_lane_onwards_are_those_of_a_wider_call():
    counter = Counter(seed_keys(torch.tensor([3, 2**40 + 5])), torch.tensor([0, 11]), 16, capturable=False)
    assert torch.equal(counter.words(5, 7, first=9), counter.words(5, 16)[..., 9:])
    for first, width in ((0, 5), (2, 6), (3, 6), (7, 1), (8, 24)):  # a normal pair split at either end or not
        assert torch.equal(counter.normal(5, width, first), counter.normal(5, 40)[..., first : first + width])
    with pytest.raises(ValueError, match="within its first 65,536"):
        counter.words(5, 8, first=2**16 - 4)


def test_packed_rows_are_the_table_s_rows_where_they_fill_a_word_and_absent_elsewhere():
    rng = np.random.default_rng(3)
    index = torch.as_tensor(rng.integers(0, 50, (3, 7)))
    for width, high, lane in ((8, 128, np.int8), (4, 500, np.int16), (2, 2**31, np.int32), (4, 2**15 + 1, None),
                              (3, 10, None), (1, 10, None)):
        table = rng.integers(0, high, (50, width))
        table[0, 0] = high - 1  # the largest value decides the lane
        packed = PackedRows(table)
        assert packed.lane is lane, (width, high)
        if lane is not None:
            taken = packed.take(torch.as_tensor(packed.words), index)
            assert taken.dtype == torch.int64 and torch.equal(taken, torch.as_tensor(table)[index])


def batch(task, seeds, steps, size=64):
    return task.sample_counter(Counter(seed_keys(torch.tensor(seeds)), torch.tensor(steps), size))


def test_a_run_s_batch_depends_on_its_seed_and_step_only_and_differs_across_both():
    task = TASKS["icqa"](k=3, n_q=8, n_a=8)
    x_group, y_group = batch(task, [3, 5, 2**40 + 5], [7, 7, 7])
    x_alone, y_alone = batch(task, [5], [7])
    assert torch.equal(x_group[1], x_alone[0]) and torch.equal(y_group[1], y_alone[0])
    assert not torch.equal(x_group[0], x_group[1])  # other seed
    assert not torch.equal(x_group[1], x_group[2])  # seeds equal in their low 32 bits
    assert not torch.equal(batch(task, [5], [8])[0], x_alone)  # next step
    assert torch.equal(batch(task, [5], [7])[0], x_alone)  # and the same again


def test_icqa_counter_examples_are_the_task_s_own_examples_with_uniform_draws():
    task = TASKS["icqa"](k=3, n_q=8, n_a=8)
    x, y = batch(task, [0, 1], [0, 0], size=8000)
    x, y = x.flatten(0, 1).numpy(), y.flatten(0, 1).numpy()
    questions, answers = x[:, 0:9:3], x[:, 2:9:3] - task.answer_offset
    c = (questions == x[:, [9]]).argmax(1)
    assert (np.sort(questions, 1)[:, 1:] != np.sort(questions, 1)[:, :-1]).all()  # distinct in every example
    assert (np.sort(answers, 1)[:, 1:] != np.sort(answers, 1)[:, :-1]).all()
    built = task.qa_batch(questions[:, :, None], answers, questions[np.arange(len(c)), c][:, None], c)
    assert np.array_equal(built.inputs, x) and np.array_equal(built.targets, y)
    n = len(x)
    for counts, expected in ((np.bincount(questions.ravel(), minlength=8), 3 * n / 8),
                             (np.bincount(answers[:, 0], minlength=8), n / 8), (np.bincount(c, minlength=3), n / 3)):
        assert np.abs(counts - expected).max() < 5 * np.sqrt(expected)  # five standard deviations


@pytest.mark.parametrize("padding", ["before_index", "left"])
def test_index_lookup_counter_examples_follow_the_definition(padding):
    task = TASKS["index_lookup"](N=30, min_length=10, padding=padding)
    x, y = batch(task, [4], [9], size=6000)
    x, y = x[0].numpy(), y[0].numpy()
    pads = x[:, :-1] == task.pad_id
    k = 30 - pads.sum(1)
    p = x[:, -1] - task.index_offset + 1
    assert k.min() == 10 and k.max() == 30 and (p >= 1).all() and (p <= k).all()
    start = 0 if padding == "before_index" else 30 - k  # where the string begins
    assert np.array_equal(y, x[np.arange(len(x)), start + p - 1])  # the target is s_p
    assert (pads.argmax(1)[k < 30] == k[k < 30]).all() if padding == "before_index" else (~pads[:, -1]).all()
    symbols = x[:, :-1][~pads]
    counts = np.bincount(symbols, minlength=64)
    assert len(counts) == 64 and np.abs(counts - len(symbols) / 64).max() < 5 * np.sqrt(len(symbols) / 64)
    assert np.abs(np.bincount(k - 10) - len(k) / 21).max() < 5 * np.sqrt(len(k) / 21)


def test_mqar_counter_examples_follow_the_definition():
    task = TASKS["mqar"](pairs=6, queries=4, n_keys=20, n_values=10)
    x, y = batch(task, [2], [3], size=5000)
    x, y = x[0].numpy(), y[0].numpy()
    keys, values, queries = x[:, 0:12:2], x[:, 1:12:2] - 20, x[:, 12:]
    assert (np.sort(keys, 1)[:, 1:] != np.sort(keys, 1)[:, :-1]).all()
    assert (np.sort(queries, 1)[:, 1:] != np.sort(queries, 1)[:, :-1]).all() and np.isin(queries, keys).all()
    where = (queries[:, :, None] == keys[:, None, :]).argmax(-1)  # which pair each query asks for
    assert np.array_equal(y, np.take_along_axis(values, where, 1))  # the target is the queried key's value
    for counts, expected in ((np.bincount(keys.ravel(), minlength=20), 6 * 5000 / 20),
                             (np.bincount(values.ravel(), minlength=10), 6 * 5000 / 10)):
        assert np.abs(counts - expected).max() < 5 * np.sqrt(expected)


def test_counter_batches_advance_each_run_and_resume_where_a_checkpoint_says():
    task = TASKS["index_lookup"](N=12)
    streams = [CounterStream(seed, 16) for seed in (1, 2)]
    batches = CounterBatches(streams, task, torch.device("cpu"))
    first, second = batches.next(), batches.next()
    assert torch.equal(first[0], batch(task, [1, 2], [0, 0], 16)[0])
    assert torch.equal(second[0], batch(task, [1, 2], [1, 1], 16)[0]) and streams[0].drawn == 2
    streams[1].restore(streams[1].state(), 40)
    batches.reload(1)
    assert torch.equal(batches.next()[0], batch(task, [1, 2], [2, 40], 16)[0])
    batches.select_runs([1])
    assert torch.equal(batches.next()[0], batch(task, [2], [41], 16)[0])


RAW = {"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4},
       "model": {"name": "attention_only", "layers": 1, "heads": 1},
       "train": {"optimizer": "sgd", "lr": 0.05, "steps": 6, "eval_every": 3, "batch_size": 8}}


def test_stream_two_is_a_new_run_id_and_leaving_it_unset_keeps_today_s():
    old = parse_run(RAW)
    assert "stream" not in old.to_dict()["train"]
    new = parse_run({**RAW, "train": {**RAW["train"], "stream": 2}})
    assert Store.run_id(new.to_dict()) != Store.run_id(old.to_dict())
    assert Store.run_id(parse_run({**RAW, "train": {**RAW["train"], "stream": None}}).to_dict()) == \
        Store.run_id(old.to_dict())


class HostOnly(TASKS["memorization"]):
    """A plugin's task that samples on the host only (every built-in task has stream 2)."""

    name = "host_only"
    counter_sampling = False


def test_stream_two_on_a_task_without_it_or_with_a_fixed_set_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(TASKS, "host_only", HostOnly)
    with pytest.raises(UserError, match=r"train.stream: 2 is made on the device for the tasks .*; task host_only"):
        parse_run({**RAW, "task": {"name": "host_only"}, "train": {**RAW["train"], "stream": 2}})
    with pytest.raises(UserError, match="leave train_examples unset"):
        parse_run({**RAW, "train": {**RAW["train"], "stream": 2, "train_examples": 64}})


def test_a_run_of_stream_two_killed_and_resumed_ends_with_the_uninterrupted_run_s_weights(tmp_path):
    from depthlab.training.checkpoint import load_checkpoint
    from depthlab.training.engine import train_group

    config = parse_run({**RAW, "train": {**RAW["train"], "stream": 2, "checkpoint_every": 3}})
    whole, store = Store(tmp_path / "whole"), Store(tmp_path / "s")
    train_group([config], whole)
    with pytest.raises(Killed):
        train_group([config], store, progress=killed_after_step(4))  # the checkpoint of step 3 is the last one
    trained = []
    train_group([config], store, progress=trained.append)
    assert sum(trained) == 3
    run = Store.run_id(config.to_dict())
    got, want = (load_checkpoint(s.artifacts_root / run)[0] for s in (store, whole))
    assert got.keys() == want.keys() and all(torch.equal(got[name], want[name]) for name in want)
    other = parse_run({**RAW, "train": {**RAW["train"], "checkpoint_every": 3}})  # stream 1: other batches
    train_group([other], whole)
    assert not torch.equal(load_checkpoint(whole.artifacts_root / Store.run_id(other.to_dict()))[0]["unembed.W_U"],
                           want["unembed.W_U"])


@pytest.mark.parametrize("capturable", [True, False])  # distinct's kernels on a graph, its fastest methods off one
def test_draws_from_int32_words_are_their_64_bit_definitions(capturable):
    counter = Counter(seed_keys(torch.tensor([3, 2**40 + 5])), torch.tensor([0, 11]), 64, capturable=capturable)
    h = counter.bits(7, 40)
    assert h.dtype == torch.int64 and h.min() >= 0 and h.max() < 2**32 and (h >= 2**31).any()
    for m in (1, 2, 3, 4, 7, 2**10, 2**30, 2**30 + 1, 2**31 - 1):
        assert torch.equal(counter.below(m, 7, 40), (h * m) >> 32), m
    m = torch.arange(1, 41)
    assert torch.equal(counter.below(m, 7, 40), (h * m) >> 32)
    assert torch.equal(counter.uniform(7, 40), (h.double() + 0.5) * 2.0**-32)
    # argmin passes, float64 passes (by lanes up to 16 members), topk, a sort
    for population, k in ((40, 3), (40, 12), (40, 25), (10, 10), (12, 7), (8, 4), (16, 8), (2, 2)):
        keys = counter.bits(7, population) * population + torch.arange(population)
        want = keys.topk(k, largest=False, sorted=True).indices
        assert torch.equal(counter.distinct(population, k, 7), want), (population, k)
        rows = counter.bits(7, 3 * population).unflatten(-1, (3, population)) * population + torch.arange(population)
        want = rows.topk(k, largest=False, sorted=True).indices
        assert torch.equal(counter.distinct(population, k, 7, rows=3), want), (population, k)
    population = 2**21 + 3  # int64 keys
    small = Counter(seed_keys(torch.tensor([3])), torch.tensor([0]), 2, capturable=capturable)
    keys = small.bits(7, population) * population + torch.arange(population)
    assert torch.equal(small.distinct(population, 3, 7), keys.topk(3, largest=False, sorted=True).indices)
