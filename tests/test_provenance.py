"""Where every example the engine trains and evaluates on comes from, for every registered task (issue 44).

Read from the engine itself, on real groups: ``Group.train_step`` and ``engine.evaluate`` are wrapped to record the
batches they are given, so the tests hold whatever stream a config selects. For each task in the registry (a task
registered later is covered by the same tests, at its defaults unless ``SMALL`` makes it smaller):

- each run of a group trains on the stream of its own seed: the batches ``data_stream`` gives that seed alone, the
  same batches as the run trained alone, and batches no other seed of the group sees;
- the engine evaluates every run on the same data, whatever the runs' seeds: the whole evaluation split when the
  task's is small enough to score exhaustively (seed 001 §5: "evaluated on the full dataset"), else a sample drawn
  apart from every run's stream;
- where the task holds part of its data out (both splits enumerable and disjoint: the template tasks' held-out
  substitution maps, seed 001 §4.3–§4.4), nothing the engine evaluates on can come out of the training stream, and
  everything the runs trained on is in the training split.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from conftest import Killed, killed_after_step
from depthlab.config import parse_run
from depthlab.store import Store
from depthlab.tasks import TASKS, Batch
from depthlab.training import data, engine
from depthlab.training.data import data_stream

# settings that keep a task's evaluation set and enumerations small (a task not named here runs at its defaults)
SMALL: dict[str, dict] = {
    "icqa": {"k": 2, "n_q": 4, "n_a": 4},
    "ictm": {"k": 2, "l": 2, "n_symbols": 10, "n_a": 2},
    "nested_icqa": {"k": 2, "hops": 1, "n_symbols": 4},
    "retrieval": {"N": 2, "D": 1, "n_symbols": 6},
    "conditional_retrieval": {"n_symbols": 12},
    "index_lookup": {"N": 12, "eval_size": 300},
    "dyck": {"N": 12, "eval_size": 300},
    "eq_random": {"N": 12, "eval_size": 300},
    "eq_one": {"N": 12, "alphabet": 64, "eval_size": 300},
    "eq_ncp": {"N": 12, "alphabet": 64, "eval_size": 300},
    "induction": {"length": 12},
    "mqar": {"pairs": 4, "n_keys": 16, "n_values": 16},
    "nearest_neighbor": {"N": 8, "d": 4},
    "retrieval_vec": {"N": 3, "D": 2},
}
SEEDS = (0, 1, 2)  # run 0's seed among them: a stream handed to every run is one of theirs
BATCH, STEPS, CHUNK = 64, 6, 256  # 4 steps a chunk: the runs cross into their second chunk
LONE = 1  # the seed also trained alone
SAMPLED = 512  # a sampled evaluation set's size here (the engine's 20,000 cost time and test nothing more)


def config(task: str, seed: int, **train):
    return parse_run({
        "task": {"name": task, **SMALL.get(task, {})},
        "model": {"name": "transformer", "layers": 1, "heads": 1, "width": 8},
        "train": {"optimizer": "sgd", "lr": 0.01, "steps": STEPS, "batch_size": BATCH, "eval_every": 3,
                  "eval_examples": 256, **train},
        "seed": seed,
    })


class Recorder:
    """What the engine trained and evaluated on, by run id: every step's inputs and targets, every evaluation."""

    def __init__(self) -> None:
        self.trained: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.evaluated: list[Batch] = []

    def wrap(self, monkeypatch: pytest.MonkeyPatch) -> None:
        train_step, evaluate = engine.Group.train_step, engine.evaluate

        def recording_step(group: engine.Group, x: torch.Tensor, y: torch.Tensor) -> None:
            for r, run in enumerate(group.runs):
                self.trained.setdefault(run.id, []).append((x[r].cpu().numpy().copy(), y[r].cpu().numpy().copy()))
            train_step(group, x, y)

        def recording_evaluate(model, task, batch, *args, **kwargs):
            self.evaluated.append(batch)
            return evaluate(model, task, batch, *args, **kwargs)

        monkeypatch.setattr(engine.Group, "train_step", recording_step)
        monkeypatch.setattr(engine, "evaluate", recording_evaluate)


def train(configs: list, root, progress=None) -> Recorder:
    recorder = Recorder()
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(data, "SAMPLED_EVAL_EXAMPLES", SAMPLED)
        monkeypatch.setattr(data, "CHUNK_EXAMPLES", CHUNK)
        recorder.wrap(monkeypatch)
        engine.train_group(configs, Store(root), progress=progress)
    return recorder


def rows(inputs: np.ndarray) -> set[bytes]:
    """Each example's inputs as bytes: equal examples, equal keys (token ids or float vectors alike)."""
    flat = np.ascontiguousarray(inputs).reshape(len(inputs), -1)
    return {row.tobytes() for row in flat}


def run_id(c) -> str:
    return Store.run_id(c.to_dict())


@pytest.fixture(scope="module", params=sorted(TASKS))
def trained(request, tmp_path_factory):
    """One task: a group of three runs (seeds 0, 1, 2) and seed 1 alone, as the engine trained and evaluated them."""
    name = request.param
    group = [config(name, s) for s in SEEDS]
    root = tmp_path_factory.mktemp(name)
    return name, group, train(group, root / "group"), train([group[LONE]], root / "alone")


def test_each_run_trains_on_the_stream_of_its_own_seed(trained, monkeypatch):
    name, group, together, alone = trained
    monkeypatch.setattr(data, "CHUNK_EXAMPLES", CHUNK)
    for c in group:
        stream = data_stream(c.task, c.seed, BATCH, STEPS, c.train.train_examples)
        steps = together.trained[run_id(c)]
        assert len(steps) == STEPS, f"{name}: run of seed {c.seed} trained {len(steps)} steps"
        for step, (x, y) in enumerate(steps):
            want = stream.next()
            same = np.array_equal(x, want.inputs) and np.array_equal(y, want.targets)
            assert same, (
                f"{name}: the run of seed {c.seed} trained on other data than its seed's stream at step {step}")
        stream.close()
    # alone and in the group, the same batches
    lone = group[LONE]
    for (x, y), (xa, ya) in zip(together.trained[run_id(lone)], alone.trained[run_id(lone)], strict=True):
        same = np.array_equal(x, xa) and np.array_equal(y, ya)
        assert same, f"{name}: seed {lone.seed} alone saw other batches"


def test_runs_of_different_seeds_see_different_batches(trained):
    name, group, together, _ = trained
    first = {c.seed: together.trained[run_id(c)][0][0] for c in group}
    for a in SEEDS:
        for b in SEEDS:
            if a < b:
                same = np.array_equal(first[a], first[b])
                assert not same, f"{name}: seeds {a} and {b} got the same first batch"


def test_every_run_is_evaluated_on_the_same_data_whatever_its_seed(trained):
    name, _, together, alone = trained
    finals = [together.evaluated[-1], alone.evaluated[-1]]  # the final evaluation: the whole evaluation set
    probes = [together.evaluated[0], alone.evaluated[0]]
    for a, b in (finals, probes):
        same = np.array_equal(a.inputs, b.inputs) and np.array_equal(a.targets, b.targets)
        assert same, (
            f"{name}: a group of seeds {SEEDS} and seed {LONE} alone are evaluated on different data")


def test_the_evaluation_set_is_the_task_s_evaluation_split(trained):
    """Exhaustive where the split is small enough: every example of the split, each once."""
    name, group, together, _ = trained
    task, final = group[0].task, together.evaluated[-1]
    size = task.dataset_size("eval")
    if size > data.EXHAUSTIVE_EVAL_LIMIT or task.enumerate("eval") is None:
        assert len(final) == SAMPLED, f"{name}: a sampled evaluation of {len(final)} examples"
        return
    split = task.enumerate("eval")
    assert len(final) == size, f"{name}: evaluated on {len(final)} examples, the evaluation split has {size}"
    got = np.ascontiguousarray(final.inputs).reshape(len(final), -1)
    want = np.ascontiguousarray(split.inputs).reshape(len(split), -1)
    same = np.array_equal(np.unique(got, axis=0), np.unique(want, axis=0))
    assert same, (
        f"{name}: the examples evaluated on are not the task's evaluation split")


@functools.cache
def held_out_split(name: str) -> tuple[set[bytes], set[bytes]] | None:
    """Task ``name``'s training and evaluation splits (at its ``SMALL`` settings) as sets of inputs, when the task
    holds examples out: both splits enumerable, and disjoint."""
    task = config(name, 0).task
    try:
        train_split, eval_split = task.enumerate("train"), task.enumerate("eval")
    except ValueError:  # a task with one split only
        return None
    if train_split is None or eval_split is None:
        return None
    train_rows, eval_rows = rows(train_split.inputs), rows(eval_split.inputs)
    return (train_rows, eval_rows) if not train_rows & eval_rows else None


def test_nothing_evaluated_can_come_from_what_the_runs_train_on(trained):
    """Where the task holds data out, nothing the engine evaluates on can come out of the training stream, and
    everything the runs trained on is in the training split. Elsewhere, where the evaluation set is a sample of a
    space far larger than what the runs drew, no evaluated example is among the examples the runs trained on (a
    collision is expected less than once in 100 such checks); a small space without a held-out split repeats its
    examples in training by design (its evaluation is the whole split, checked above)."""
    name, group, together, _ = trained
    task = group[0].task
    trained_rows = {run: set().union(*(rows(x) for x, _ in steps)) for run, steps in together.trained.items()}
    splits = held_out_split(name)
    if splits is not None:
        train_rows, eval_rows = splits
        for batch in together.evaluated:
            evaluated = rows(batch.inputs)
            held_out = evaluated <= eval_rows and not evaluated & train_rows
            assert held_out, (
                f"{name}: {len(evaluated & train_rows)} of {len(evaluated)} evaluated examples are in the training "
                "split")
        for run, seen in trained_rows.items():
            assert seen <= train_rows, f"{name}: run {run[:8]} trained on examples outside the training split"
        return
    final = together.evaluated[-1]
    drawn = sum(len(x) for steps in together.trained.values() for x, _ in steps)
    if len(final) * drawn / task.dataset_size("train") <= 0.01:
        shared = rows(final.inputs) & set().union(*trained_rows.values())
        assert not shared, f"{name}: {len(shared)} of {len(final)} evaluated examples were trained on"


def test_the_template_tasks_hold_data_out_and_the_large_spaces_are_checked_for_repeats():
    """The branches of the test above are all taken: the template tasks by the held-out one, every task whose
    space is astronomically large by the repeats one."""
    held = {n for n in TASKS if held_out_split(n) is not None}
    assert {"template", "ictm"} <= held, held
    large = {n for n in TASKS if config(n, 0).task.dataset_size("train") > 1e12}
    assert {"induction", "mqar", "nearest_neighbor", "index_lookup"} <= large, large


@pytest.mark.parametrize("examples", [None, 4 * BATCH], ids=["fresh", "fixed-set"])
def test_a_resumed_run_trains_on_the_batches_after_its_checkpoint_and_no_others(tmp_path, examples):
    """Killed after step 4 (its checkpoint: step 3, mid-chunk), the run resumed trains steps 4 to 6 on exactly the
    batches the uninterrupted run trained them on: not from step 0 again, none skipped, none repeated."""
    c = config("icqa", 3, checkpoint_every=3, train_examples=examples)
    whole = train([c], tmp_path / "whole").trained[run_id(c)]
    with pytest.raises(Killed):
        train([c], tmp_path / "s", progress=killed_after_step(4))
    resumed = train([c], tmp_path / "s").trained[run_id(c)]
    assert len(resumed) == STEPS - 3, f"the resumed run trained {len(resumed)} steps, not the {STEPS - 3} after step 3"
    for step, ((x, y), (xw, yw)) in enumerate(zip(resumed, whole[3:], strict=True), start=4):
        same = np.array_equal(x, xw) and np.array_equal(y, yw)
        assert same, f"step {step} after the resume had other batches"


def test_a_split_of_exactly_the_limit_is_scored_whole_and_one_more_is_sampled(monkeypatch):
    """``EXHAUSTIVE_EVAL_LIMIT`` is inclusive, and ``eval_examples`` (what the memory check counts) says how many
    examples ``eval_set`` gives, on either side of it."""
    task = config("icqa", 0).task
    size = task.dataset_size("eval")
    monkeypatch.setattr(data, "SAMPLED_EVAL_EXAMPLES", SAMPLED)
    for limit, exhaustive, count in ((size, True, size), (size - 1, False, SAMPLED)):
        monkeypatch.setattr(data, "EXHAUSTIVE_EVAL_LIMIT", limit)
        batch, whole = data.eval_set(task)
        assert (whole, len(batch), data.eval_examples(task)) == (exhaustive, count, count), f"limit {limit}"
