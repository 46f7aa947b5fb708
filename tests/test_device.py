"""Issue 18 on any machine: train.device and train.compile, carried from the command line to every tensor.

What needs a GPU is in tests/test_gpu.py (marked ``gpu``, skipped without one); here the plumbing is checked on
the CPU as far as it goes: names refused before any work, run ids independent of where a run trains, the step's
metrics summed on the device with the same values, several devices with one worker process each, and a compiled
step tracing the model's real forward and backward.
"""

from __future__ import annotations

import pytest
import torch

from conftest import run_depthlab
from depthlab.cli.common import with_device
from depthlab.config import parse_run
from depthlab.errors import UserError
from depthlab.store import Store
from depthlab.sweeps.devices import train_on_devices
from depthlab.sweeps.local import longest_first, plan_groups, run_local
from depthlab.training import engine
from depthlab.training.device import gpus_for, resolve_device

RUN = {"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4},
       "model": {"name": "attention_only", "layers": 2, "init": "random"},
       "train": {"optimizer": "adamw", "lr": 0.01, "steps": 30, "eval_every": 10, "batch_size": 16,
                 "eval_examples": 64}}


def runs(seeds=(0, 1, 2, 3), **train):
    return [parse_run({**RUN, "train": {**RUN["train"], **train}, "seed": s}) for s in seeds]


def rows(store: Store) -> list:
    return sorted(store.metric_rows(), key=str)


def test_where_a_run_trains_is_not_part_of_its_id():
    base = parse_run(RUN)
    for train in ({"device": "cpu"}, {"device": "cuda:3"}, {"compile": True}):
        other = parse_run({**RUN, "train": {**RUN["train"], **train}})
        assert Store.run_id(other.to_dict()) == Store.run_id(base.to_dict())
        assert engine.group_key(other) != engine.group_key(base)  # but runs on two devices never share a group


@pytest.mark.parametrize("value", ["gpu", "cuda:", "cuda:x", "CPU", "mps"])
def test_a_device_name_that_is_not_one_is_refused_naming_the_field(value):
    with pytest.raises(UserError, match=r"^train\.device: not a device; allowed: auto, cpu, cuda or cuda:N"):
        parse_run({**RUN, "train": {"device": value}})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
@pytest.mark.parametrize("command", [["train", "RUN"], ["sweep", "RUN"], ["reproduce", "seed001-depth"],
                                     ["capability", "icqa", "--layers", "1"]])
def test_asking_for_cuda_without_it_is_one_line_and_exit_2_before_any_work(tmp_path, command):
    path = tmp_path / "run.yaml"
    path.write_text(f"task: {RUN['task']}\nmodel: {RUN['model']}\n")
    args = [str(path) if a == "RUN" else a for a in command]
    store = tmp_path / "store"
    code, out, err = run_depthlab(*args, "--device", "cuda", "--store", str(store))
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.strip().splitlines() == [
        f"error: --device: cuda asked for, but PyTorch sees no CUDA GPU here (torch {torch.__version__}, a CPU-only "
        "build); use --device cpu (or auto), or install a CUDA build of torch (docs/how-to/gpus.md)"]
    assert not store.exists()  # nothing created


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_a_config_asking_for_cuda_is_refused_before_any_run_trains(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(UserError, match=r"train\.device: cuda:1 asked for, but PyTorch sees no CUDA GPU"):
        run_local(runs((0,)) + runs((1,), device="cuda:1"), store)
    assert store.find_runs() == []


def test_auto_is_the_cpu_here_and_the_results_say_where_and_in_what_precision(tmp_path):
    assert str(resolve_device("auto")) == (f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available()
                                           else "cpu")
    assert gpus_for("cpu") == ["cpu"]
    store = Store(tmp_path)
    results = run_local(runs((0,), device="cpu", precision="bf16"), store)
    (final,) = results.values()
    assert final["device"] == "cpu" and final["precision"] == "bf16"


def test_metrics_summed_on_the_device_are_the_per_step_sums(tmp_path, monkeypatch):
    """The train rows come from sums kept on the device (one read per log point); they equal the mean of the
    per-step losses the model gives, step by step."""
    seen: list[torch.Tensor] = []
    original = engine.Group.batch_losses

    def recording(self, x, y):
        losses, outputs = original(self, x, y)
        seen.append(losses.detach().double() * y.shape[1])
        return losses, outputs

    monkeypatch.setattr(engine.Group, "batch_losses", recording)
    store = Store(tmp_path)
    (run,) = runs((0,), steps=20, eval_every=10)
    run_local([run], store)
    run_id = store.run_id(run.to_dict())
    train_rows = {step: value for _, step, split, name, value in store.metric_rows([run_id])
                  if split == "train" and name == "loss"}
    per_step = torch.stack(seen)[:, 0]
    expected = {10: float(per_step[:10].sum()) / (10 * 16), 20: float(per_step[10:].sum()) / (10 * 16)}
    assert train_rows == pytest.approx(expected, rel=1e-12, abs=0)


def test_groups_spread_over_devices_give_what_one_process_gives(tmp_path):
    """Two worker processes (here two CPU 'devices'), each taking whole groups: the same rows and results as
    training every group in this process."""
    configs = runs(range(2))
    groups = plan_groups(configs, group_size=1)
    alone = Store(tmp_path / "alone")
    expected = run_local(configs, alone, group_size=1)
    spread = Store(tmp_path / "spread")
    steps: list[int] = []
    got = train_on_devices(groups, spread, ["cpu", "cpu"], progress=steps.append)
    timing = ("seconds", "threads")  # how long and on how many threads: the workers start with torch's default

    def outcome(results):
        return {k: {f: v for f, v in r.items() if f not in timing} for k, r in results.items()}

    assert outcome(got) == outcome(expected)
    assert rows(spread) == rows(alone) and sum(steps) == 2 * 30


def test_a_compiled_step_traces_the_real_forward_and_backward_and_trains_the_same(tmp_path, monkeypatch):
    """train.compile wraps the step's forward and loss in torch.compile; traced here with AOT autograd's eager
    backend (the graphs inductor would compile, without its minutes of C++ codegen on a CPU; inductor runs in the
    benchmark and the GPU tests)."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(engine, "COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()
    counters.clear()
    eager, compiled = Store(tmp_path / "eager"), Store(tmp_path / "compiled")
    a = run_local(runs((0, 1)), eager)
    assert counters["frames"]["ok"] == 0  # the eager run compiled nothing
    b = run_local(runs((0, 1), compile=True), compiled)
    # TorchDynamo captured the step's forward as a graph and AOT autograd traced its backward: it really compiled
    assert counters["frames"]["ok"] >= 1, f"train.compile: TorchDynamo compiled no frame ({dict(counters['frames'])})"
    assert counters["stats"]["calls_captured"] > 0 and counters["aot_autograd"]["ok"] >= 1
    for run_id in a:
        assert b[run_id]["loss"] == pytest.approx(a[run_id]["loss"], rel=1e-5)
        assert b[run_id]["accuracy"] == pytest.approx(a[run_id]["accuracy"], abs=1 / 64)


def test_cuda_stands_for_the_gpu_it_uses(monkeypatch):
    """Issue 29: ``cuda`` (and ``auto`` with GPUs) resolves to the current GPU by index, so a run's final metrics
    record ``cuda:0``, the device it really used; ``cuda`` still spreads groups over every GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert [str(resolve_device(name)) for name in ("cuda", "auto", "cuda:1", "cpu")] == [
        "cuda:0", "cuda:0", "cuda:1", "cpu"]
    assert gpus_for("cuda") == gpus_for("auto") == ["cuda:0", "cuda:1"] and gpus_for("cuda:1") == ["cuda:1"]
    with pytest.raises(UserError, match="only 2 GPUs are visible"):
        resolve_device("cuda:2")


def test_two_workers_sharing_one_device_give_what_one_worker_gives(tmp_path):
    """``train.workers_per_device: 2`` on the CPU: two worker processes share it, each taking whole groups; the
    rows and results are those of one worker (this process)."""
    configs = runs(range(2))
    one = Store(tmp_path / "one")
    expected = run_local(configs, one, group_size=1)
    two = Store(tmp_path / "two")
    got = run_local(runs(range(2), workers_per_device=2), two, group_size=1)
    timing = ("seconds", "threads")

    def outcome(results):
        return {k: {f: v for f, v in r.items() if f not in timing} for k, r in results.items()}

    assert outcome(got) == outcome(expected) and rows(two) == rows(one)
    assert {r["threads"] for r in got.values()} == {max(1, torch.get_num_threads() // 2)}


def test_workers_start_the_longest_groups_first():
    """Several workers on a device take groups in decreasing steps × size: a long group started last would train
    alone at the end (seed 001's paper scale: the 30,000-step IC-TM groups before the 5,000-step ones)."""
    short = [parse_run({**RUN, "train": {**RUN["train"], "steps": 10}, "seed": 0})]
    long = [parse_run({**RUN, "train": {**RUN["train"], "steps": 100}, "seed": 1})]
    deep = [parse_run({**RUN, "model": {**RUN["model"], "layers": 3}, "train": {**RUN["train"], "steps": 100},
                       "seed": 2})]
    assert longest_first([short, long, deep]) == [deep, long, short]


@pytest.mark.parametrize("value", ["0", "-1", "two", "65"])
def test_workers_per_device_outside_its_range_is_one_line(value):
    with pytest.raises(UserError, match=r"^--workers-per-device: .* is not auto or a whole number from 1 to 64$"):
        with_device(None, None, workers=value)
