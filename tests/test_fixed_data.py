"""A fixed training set (``train.train_examples``, seed 002 §7.1's 2^20 examples): every example once per epoch,
the same set every epoch in a new order, resumed exactly from a checkpoint's state, trained by the engine; run ids
of configs without it are unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import crash_at_step
from depthlab.config import parse_run
from depthlab.errors import UserError
from depthlab.store import Store
from depthlab.tasks import TASKS
from depthlab.training import data
from depthlab.training.data import DataStream, FixedDataStream, data_stream
from depthlab.training.engine import train_group

TASK = TASKS["index_lookup"](N=20)  # 64^20 strings: rows identify themselves


def rows(batches) -> list[tuple[int, ...]]:
    return [tuple(r) for b in batches for r in b.inputs.tolist()]


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(data, "CHUNK_EXAMPLES", 16)  # 2 batches of 8 per chunk, so the set has 4 chunks


def test_every_example_once_per_epoch_in_a_new_order(small_chunks):
    stream = FixedDataStream(TASK, seed=3, batch_size=8, examples=64)
    assert (stream.steps_per_chunk, stream.chunks) == (2, 4)
    first, second = rows(stream.next() for _ in range(8)), rows(stream.next() for _ in range(8))
    assert sorted(first) == sorted(second) and first != second
    assert len(set(first)) == len(first)  # each once
    other = rows(FixedDataStream(TASK, seed=4, batch_size=8, examples=64).next() for _ in range(8))
    assert sorted(other) != sorted(first)  # the set is the run's own
    stream.close()


def test_resumes_exactly_from_its_state(small_chunks):
    stream = FixedDataStream(TASK, seed=0, batch_size=8, examples=64)
    for _ in range(5):  # into the third chunk, mid-chunk
        stream.next()
    state = stream.state()
    expected = rows(stream.next() for _ in range(11))  # on into the second epoch
    resumed = FixedDataStream(TASK, seed=0, batch_size=8, examples=64)
    resumed.restore(state, 5)
    assert rows(resumed.next() for _ in range(11)) == expected
    stream.close()
    resumed.close()


def test_fresh_data_is_the_default_and_unchanged():
    assert type(data_stream(TASK, 0, 8)) is DataStream
    fresh = data_stream(TASK, 0, 8, 10)
    again = DataStream(TASK, 0, 8, 10)
    assert rows([fresh.next()]) == rows([again.next()])


def test_config_field_and_run_ids():
    base = {"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4}, "train": {"batch_size": 8}}
    plain = parse_run(base).to_dict()
    assert "train_examples" not in plain["train"]  # stored runs keep their ids
    fixed = parse_run({**base, "train": {"batch_size": 8, "train_examples": 64}}).to_dict()
    assert fixed["train"]["train_examples"] == 64 and Store.run_id(fixed) != Store.run_id(plain)
    with pytest.raises(UserError, match=r"train_examples \(60\) must be a multiple of batch_size \(8\)"):
        parse_run({**base, "train": {"batch_size": 8, "train_examples": 60}})


def test_the_engine_trains_on_a_fixed_set(tmp_path):
    config = parse_run({"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4},
                        "model": {"name": "attention_only", "layers": 2},
                        "train": {"optimizer": "adamw", "lr": 0.003, "steps": 12, "batch_size": 8,
                                  "train_examples": 32, "eval_every": 6, "eval_examples": 64}})
    (final,) = train_group([config], Store(tmp_path / "store")).values()
    assert final["steps"] == 12 and np.isfinite(final["loss"])


def test_a_run_resumed_from_its_checkpoint_ends_as_the_uninterrupted_one(tmp_path, small_chunks):
    whole = parse_run({"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4},
                       "model": {"name": "attention_only", "layers": 2},
                       "train": {"optimizer": "adamw", "lr": 0.003, "steps": 15, "batch_size": 8,
                                 "train_examples": 48, "eval_every": 5, "eval_examples": 64,
                                 "checkpoint_every": 7}, "seed": 1})
    # 15 batches of a 6-batch set in chunks of 2 (into the third epoch); the run crashes in step 9 and resumes
    # from its checkpoint at step 7: mid-chunk and mid-epoch (a checkpoint is bound to its run: no other run's)
    run_id = Store.run_id(whole.to_dict())
    full = train_group([whole], Store(tmp_path / "a"))[run_id]
    store = Store(tmp_path / "b")

    with pytest.raises(RuntimeError, match="crash"):
        train_group([whole], store, progress=crash_at_step(9))
    assert train_group([whole], store)[run_id]["loss"] == pytest.approx(full["loss"], rel=1e-6)
