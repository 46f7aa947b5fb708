"""The batched engine: a tiny memorization run reaches 100 %, grouped runs equal solo runs, runs leave groups."""

import gc
import weakref

import numpy as np
import pytest

from conftest import crash_at_step
from depthlab.config import parse_run
from depthlab.store import Store
from depthlab.sweeps.local import plan_groups, run_local
from depthlab.training import engine
from depthlab.training.data import DataStream
from depthlab.training.engine import Group, train_group


def config(seed=0, lr=0.05, **train):
    raw = {
        "task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4},
        "model": {"name": "attention_only", "layers": 2, "heads": 1, "attention": "softmax", "init": "random"},
        "train": {"optimizer": "adamw", "lr": lr, "steps": 60, "batch_size": 32, "eval_every": 20, **train},
        "seed": seed,
    }
    return parse_run(raw)


def test_tiny_memorization_reaches_100_percent(tmp_path):
    run = parse_run({
        "task": {"name": "memorization", "n_words": 6, "length": 3, "n_examples": 24},
        "model": {"name": "attention_only", "layers": 1, "heads": 2},
        "train": {"optimizer": "adamw", "lr": 0.02, "steps": 600, "batch_size": 24, "eval_every": 50,
                  "target_accuracy": 1.0},
    })
    store = Store(tmp_path)
    final = train_group([run], store)[Store.run_id(run.to_dict())]
    assert final["accuracy"] == 1.0
    assert final["exhaustive"] and final["eval_examples"] == 24


def test_run_alone_equals_run_in_group_of_16(tmp_path):
    configs = [config(seed=s, lr=0.01 * (1 + s % 3)) for s in range(16)]
    grouped = train_group(configs, Store(tmp_path / "grouped"))
    alone_store = Store(tmp_path / "alone")
    for c in (configs[0], configs[7], configs[15]):
        run_id = Store.run_id(c.to_dict())
        alone = train_group([c], alone_store)[run_id]
        assert alone["accuracy"] == pytest.approx(grouped[run_id]["accuracy"], abs=1e-6)
        assert alone["loss"] == pytest.approx(grouped[run_id]["loss"], rel=1e-4)
        a = alone_store.metric_columns(run_id)["train"]["loss"]
        g = Store(tmp_path / "grouped").metric_columns(run_id)["train"]["loss"]
        np.testing.assert_allclose(a, g, rtol=1e-4)


def test_diverged_run_is_marked_and_sweep_goes_on(tmp_path):
    store = Store(tmp_path)
    bad, good = config(seed=0, lr=1e30), config(seed=1)
    train_group([bad, good], store)
    bad_run = store.get_run(Store.run_id(bad.to_dict()))
    assert bad_run["status"] == "diverged" and "step" in bad_run["error"]
    assert store.get_run(Store.run_id(good.to_dict()))["status"] == "done"


def test_finished_runs_are_skipped(tmp_path, metric_writes):
    store = Store(tmp_path)
    writes = metric_writes(store.root)
    configs = [config(seed=s) for s in range(2)]
    first = run_local(configs, store)
    logged = len(writes())
    assert logged == 2 * 3 * 2 * 2  # runs × log points (20, 40, 60) × splits × (loss, accuracy), each once
    again = run_local(configs, store)
    assert again == first
    assert len(writes()) == logged  # nothing trained or written again


def test_resume_from_checkpoint_continues_exactly(tmp_path):
    whole = config(seed=3, steps=60, checkpoint_every=20)
    full = train_group([whole], Store(tmp_path / "a"))[Store.run_id(whole.to_dict())]
    # Stop the same run in step 41 (after its checkpoint at 40), then resume it to 60. (A checkpoint of another
    # run, even one with the same stream, is refused: it belongs to that run.)
    store = Store(tmp_path / "b")
    with pytest.raises(RuntimeError, match="crash"):
        train_group([whole], store, progress=crash_at_step(41))
    assert store.get_run(Store.run_id(whole.to_dict()))["step"] == 41
    resumed = train_group([whole], store)[Store.run_id(whole.to_dict())]
    assert resumed["loss"] == pytest.approx(full["loss"], rel=1e-5)
    assert resumed["accuracy"] == pytest.approx(full["accuracy"], abs=1e-9)


def test_groups_form_by_shape():
    configs = [config(seed=s) for s in range(5)] + [config(seed=0, batch_size=16)]
    groups = plan_groups(configs, group_size=2)
    assert [len(g) for g in groups] == [2, 2, 1, 1]


def _register_test_tasks():
    """Two small tasks with other objectives: per-position labels, and vector inputs with MSE."""
    from depthlab.tasks.base import TASKS, Batch, Task, register

    if "test_copy_all" in TASKS:
        return

    @register
    class CopyAll(Task):
        name = "test_copy_all"
        section = "test"
        summary = "each position's token, read at every position"
        n: int = 4

        vocab = property(lambda self: ["a", "b", "c"])
        labels = property(lambda self: ["a", "b", "c"])
        seq_len = property(lambda self: self.n)
        chance = property(lambda self: (1 / 3) ** self.n)
        read_positions = property(lambda self: list(range(self.n)))

        def sample(self, n, rng, split="train"):
            tokens = rng.integers(0, 3, (n, self.n))
            return Batch(tokens, tokens.copy())

        def dataset_size(self, split="eval"):
            return 3**self.n

        def enumerate(self, split="eval"):
            return None

    @register
    class Regress(Task):
        name = "test_regress"
        section = "test"
        summary = "the sum of the input vectors"
        loss = "mse"

        vocab = property(lambda self: [])
        labels = property(lambda self: ["y0", "y1"])
        seq_len = property(lambda self: 3)
        chance = property(lambda self: 0.0)
        input_dim = property(lambda self: 2)

        def sample(self, n, rng, split="train"):
            x = rng.standard_normal((n, 3, 2)).astype(np.float32)
            return Batch(x, x.sum(1))

        def dataset_size(self, split="eval"):
            return 10**9

        def enumerate(self, split="eval"):
            return None


@pytest.mark.parametrize("model", [{"name": "attention_only", "layers": 1, "init": "random"},
                                   {"name": "transformer", "layers": 1, "width": 16, "heads": 2}])
def test_other_objectives_train(tmp_path, model):
    _register_test_tasks()
    store = Store(tmp_path)
    train = {"optimizer": "adamw", "lr": 0.01, "steps": 300, "batch_size": 32, "eval_every": 100}
    copy = parse_run({"task": {"name": "test_copy_all"}, "model": model, "train": train})
    final = train_group([copy], store)[Store.run_id(copy.to_dict())]
    assert final["accuracy"] > 0.9  # every position right in most examples
    regress = parse_run({"task": {"name": "test_regress"}, "model": model, "train": train})
    final = train_group([regress], store)[Store.run_id(regress.to_dict())]
    assert final["accuracy"] is None and final["loss"] < 1.0  # predicting 0 costs 3 (the targets' variance)


def test_bf16_training_follows_fp32(tmp_path):
    """bf16 autocast (train.precision=bf16) trains small models to the same loss as fp32, within 5 %."""
    runs = {p: [config(seed=s, precision=p) for s in range(2)] for p in ("fp32", "bf16")}
    finals = {p: list(train_group(c, Store(tmp_path / p)).values()) for p, c in runs.items()}
    for fp32, bf16 in zip(finals["fp32"], finals["bf16"], strict=True):
        assert np.isfinite(bf16["loss"]) and abs(bf16["loss"] - fp32["loss"]) < 0.05 * fp32["loss"]


def test_auto_group_size_stacks_small_models_and_leaves_wide_ones_alone():
    """Group sizes follow the measured rule: tiny models stack (≥ 16 runs), a wide MLP model trains alone."""
    from depthlab.sweeps.local import auto_group_size

    small = config()
    wide = parse_run({"task": {"name": "icqa", "k": 3, "n_q": 8, "n_a": 8},
                      "model": {"name": "transformer", "layers": 2, "width": 256, "heads": 4, "mlp": True},
                      "train": {"optimizer": "adamw", "lr": 1e-3, "steps": 10, "batch_size": 256}})
    assert auto_group_size(small) >= 16 and auto_group_size(wide) == 1


@pytest.mark.parametrize("family", [
    {"name": "transformer", "layers": 2, "width": 16, "heads": 2},
    {"name": "lstm", "layers": 1, "width": 16},
    {"name": "linear_transformer", "layers": 1, "width": 16, "heads": 2},
    {"name": "retnet", "layers": 1, "width": 16, "heads": 2},
    {"name": "dss", "layers": 1, "width": 16},
    {"name": "mamba", "layers": 1, "width": 16},
])
def test_every_family_gives_the_same_run_alone_and_in_a_group(tmp_path, family):
    """A run's metrics do not depend on the group it trained in, for every model family the engine groups."""
    configs = [parse_run({"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4}, "model": family,
                          "train": {"optimizer": "adamw", "lr": 0.01 * (1 + s), "steps": 30, "batch_size": 16,
                                    "eval_every": 10}, "seed": s}) for s in range(4)]
    grouped = train_group(configs, Store(tmp_path / "grouped"))
    run_id = Store.run_id(configs[2].to_dict())
    alone = train_group([configs[2]], Store(tmp_path / "alone"))[run_id]
    assert alone["loss"] == pytest.approx(grouped[run_id]["loss"], rel=1e-4, abs=1e-6)
    assert alone["accuracy"] == pytest.approx(grouped[run_id]["accuracy"], abs=1e-6)


def test_data_stream_is_the_same_with_prefetching_and_after_a_restore():
    """The background sampling changes when chunks are made, never what they hold; a stream restored mid-run
    continues with exactly the batches the uninterrupted one draws."""
    task = parse_run({"task": {"name": "icqa", "k": 3, "n_q": 8, "n_a": 8}, "model": {"name": "attention_only"}}).task
    steps = 3 * DataStream(task, 0, 64).steps_per_chunk + 5
    reference = np.random.default_rng([4, 0xDA7A])
    chunks = [task.sample(8192, reference, "train") for _ in range(4)]
    expected = np.concatenate([c.inputs for c in chunks]).reshape(-1, 64, task.seq_len)[:steps]
    stream = DataStream(task, 4, 64, batches=steps)
    drawn = [stream.next().inputs for _ in range(steps)]
    assert np.array_equal(np.stack(drawn), expected)
    assert stream.pending is None  # the last chunk was not followed by one nobody needs
    middle = DataStream(task, 4, 64, batches=steps)
    for _ in range(150):
        middle.next()
    resumed = DataStream(task, 4, 64, batches=steps)
    resumed.restore(middle.state(), 150)
    assert np.array_equal(np.stack([resumed.next().inputs for _ in range(steps - 150)]), expected[150:])


def test_big_chunks_are_not_sampled_ahead():
    """Eq-ncp's targets make a chunk about 144 MB at N = 16: prefetching would hold two per run."""
    task = parse_run({"task": {"name": "eq_ncp", "N": 16}, "model": {"name": "lstm"}}).task
    stream = DataStream(task, 0, 64)
    stream.next()
    assert stream.buffer.targets.nbytes > 64 * 2**20 and stream.pending is None


def test_a_group_that_cannot_fit_is_refused_before_it_is_built(tmp_path, monkeypatch):
    """Issue 21: the group's memory (parameters and optimizer, activations, data, evaluation set) is estimated
    before anything is allocated; above the budget the group is refused, saying how many runs would fit."""
    from depthlab.errors import ResourceError
    from depthlab.models import model_size
    from depthlab.training import engine
    from depthlab.training.footprint import footprint

    configs = [config(seed=s, steps=4, eval_every=2) for s in range(4)]
    fp = footprint(configs[0])
    assert set(fp.per_run) == {"parameters and optimizer", "activations", "training data"}
    assert set(fp.shared) == {"model buffers", "sampling", "evaluation set"}
    size = model_size(configs[0].model, engine.TaskShapes.of(configs[0].task))
    # AdamW: weights, gradients twice (autograd's, and the buffer the optimizer gathers them into), 2 states
    assert fp.per_run["parameters and optimizer"] == size.parameters * 4 * 5
    monkeypatch.setenv("DEPTHLAB_MEMORY", str(fp.total(2) + 1))  # room for two runs, not four
    built = []
    monkeypatch.setattr(engine, "Group", lambda *a, **k: built.append(a))
    store = Store(tmp_path)
    with pytest.raises(ResourceError, match=r"^memory: a group of 4 runs of icqa with attention_only needs about "
                                            r".* or train at most 2 runs at once \(--group-size 2\), or set "
                                            r"DEPTHLAB_MEMORY to override"):
        train_group(configs, store)
    assert not built and {r["status"] for r in store.find_runs()} == {"pending"}
    monkeypatch.undo()
    monkeypatch.setenv("DEPTHLAB_MEMORY", str(fp.total(2) + 1))
    results = run_local(configs, store, group_size=2)  # two at a time fit
    assert len(results) == 4 and {r["status"] for r in store.find_runs()} == {"done"}


def test_the_evaluation_pass_counts_in_a_groups_memory(monkeypatch):
    """Evaluation scores 8,192 examples at a time against every label: a task of 500,000 labels holds 30 GiB of
    logits there. The footprint counts that pass and names the labels; before, such a run passed the check and
    the allocator refused it mid-run."""
    from depthlab.config import parse_run
    from depthlab.errors import ResourceError
    from depthlab.training.footprint import EVAL_PASS, check_runs, footprint

    run = parse_run({"task": {"name": "index_lookup", "alphabet": 500_000, "N": 10},
                     "model": {"name": "transformer", "layers": 1, "width": 8}})
    fp = footprint(run)
    assert fp.parts(1)[EVAL_PASS] == 8192 * (11 * 8 + 2 * 500_000) * 4
    assert fp.parts(4)[EVAL_PASS] == 4 * fp.parts(1)[EVAL_PASS]  # the chunk shrinks only for long sequences
    monkeypatch.setenv("DEPTHLAB_MEMORY", "4GiB")
    with pytest.raises(ResourceError, match=r"evaluation pass 30\.5 GiB; the evaluation pass scores 8,192 examples "
                                            r"at a time against 500,000 outputs of index_lookup"):
        check_runs(run, 1)
    monkeypatch.setenv("DEPTHLAB_MEMORY", str(fp.total(3) + 1))
    assert fp.runs_that_fit(fp.total(3) + 1) == 3


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_dropped_group_is_freed_at_once_not_by_the_garbage_collector(tmp_path, monkeypatch, compiled):
    """A group's memory (on a GPU its model, optimizer state and CUDA graph pool) is given back when the last
    reference to it goes: nothing in the group refers back to it. On the H100 a cycle (the group holding its own
    bound methods) kept each finished group until the collector ran, and the throughput benchmark ran out of
    memory in its next case. The CUDA graph's side of this is tests/test_gpu.py's."""
    monkeypatch.setattr(engine, "COMPILE_BACKEND", "aot_eager")
    configs = [config(seed=s, compile=compiled) for s in (0, 1)]
    store = Store(tmp_path)
    ids = [store.create_run(c.to_dict(), c.task.name, c.model.name) for c in configs]
    group = Group(list(zip(configs, ids, strict=True)), store, len(configs))
    for _ in range(3):
        group.step()
    alive = weakref.ref(group)
    gc.collect()
    gc.disable()  # only reference counting from here: a cycle would keep the group
    try:
        del group
        assert alive() is None, "a dropped group is still alive: something in it refers back to it"
    finally:
        gc.enable()
