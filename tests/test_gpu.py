"""Issue 18 on a CUDA GPU: every test here is marked ``gpu`` and skipped where PyTorch sees none (conftest)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from depthlab.config import parse_run
from depthlab.store import Store
from depthlab.sweeps.devices import train_on_devices
from depthlab.sweeps.local import plan_groups, run_local
from depthlab.training import engine
from depthlab.training.checkpoint import WEIGHTS, load_checkpoint
from depthlab.training.device import COMPILED_WARMUP_STEPS, GRAPH_WARMUP_STEPS, gpus_for
from depthlab.training.opcount import count_case
from depthlab.training.throughput import CASES, bench_configs

pytestmark = pytest.mark.gpu

RUN = {"task": {"name": "icqa", "k": 3, "n_q": 8, "n_a": 8},
       "model": {"name": "transformer", "layers": 2, "heads": 2, "width": 32},
       "train": {"optimizer": "adamw", "lr": 0.003, "steps": 60, "eval_every": 20, "batch_size": 32,
                 "device": "cuda"}}


def runs(seeds=range(4), **train):
    return [parse_run({**RUN, "train": {**RUN["train"], **train}, "seed": s}) for s in seeds]


def test_a_run_alone_and_in_a_group_agree_on_the_gpu(tmp_path):
    grouped = run_local(runs(), Store(tmp_path / "grouped"), group_size=4)
    alone = run_local(runs(), Store(tmp_path / "alone"), group_size=1)
    for run_id, result in alone.items():
        assert grouped[run_id]["device"] == "cuda:0" and grouped[run_id]["precision"] == "tf32"
        assert grouped[run_id]["loss"] == pytest.approx(result["loss"], rel=1e-3, abs=1e-5)


def test_a_training_step_lives_on_the_gpu_and_never_waits_for_it(tmp_path):
    """Parameters, optimizer state and metric sums on the device; a step makes no host synchronisation
    (``torch.cuda.set_sync_debug_mode("error")`` raises on any)."""
    configs = runs(steps=5)
    store = Store(tmp_path)
    ids = [store.create_run(c.to_dict(), c.task.name, c.model.name) for c in configs]
    group = engine.Group(list(zip(configs, ids, strict=True)), store, len(configs))
    group.step()  # the optimizer's state is made on the first step
    assert all(p.is_cuda for p in group.model.parameters()) and group.sums.is_cuda
    assert all(t.is_cuda for state in group.opt.state for t in state.values())
    torch.cuda.set_sync_debug_mode("error")
    try:
        group.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.parametrize("model", [{"name": "attention_only", "layers": 2}, {"name": "mamba", "layers": 1},
                                   {"name": "dss", "layers": 1}, {"name": "lstm", "layers": 1}])
def test_every_family_trains_in_bf16_on_the_gpu(tmp_path, model):
    configs = [parse_run({**RUN, "model": model, "train": {**RUN["train"], "precision": "bf16"}, "seed": s})
               for s in (0, 1)]
    results = run_local(configs, Store(tmp_path))
    assert {r["precision"] for r in results.values()} == {"bf16"} and len(results) == 2


def test_a_compiled_step_trains_as_the_eager_one_on_the_gpu(tmp_path):
    eager = run_local(runs((0, 1)), Store(tmp_path / "eager"))
    compiled = run_local(runs((0, 1), compile=True), Store(tmp_path / "compiled"))
    for run_id, result in eager.items():
        assert compiled[run_id]["loss"] == pytest.approx(result["loss"], rel=1e-2, abs=1e-4)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_groups_spread_over_every_gpu(tmp_path):
    configs = runs(range(4))
    got = train_on_devices(plan_groups(configs, group_size=1), Store(tmp_path), gpus_for("cuda"))
    assert {r["device"] for r in got.values()} == {f"cuda:{i}" for i in range(torch.cuda.device_count())}


def _group(tmp_path, configs):
    store = Store(tmp_path)
    ids = [store.create_run(c.to_dict(), c.task.name, c.model.name) for c in configs]
    return engine.Group(list(zip(configs, ids, strict=True)), store, len(configs))


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
@pytest.mark.parametrize("model", [RUN["model"], {"name": "attention_only", "layers": 2, "init": "random"}])
def test_a_cuda_graph_step_trains_as_the_eager_step_over_50_steps(tmp_path, model, schedule):
    """Issue 29: the whole step captured once (after its warm-up steps) and replayed gives the eager step's
    weights and train sums within 1e-5, with clipping, warm-up and weight decay in the step; a cosine schedule's
    rate (issue 43) is device state the replayed graph updates, as the eager step does."""
    groups = _off_and_on(tmp_path, model, "cuda_graph", schedule=schedule)
    assert groups["on"].step_mode() == "cuda graph (captured 1 time)"
    assert groups["off"].step_mode() == "eager (train.cuda_graph: off)"
    for a, b in zip(groups["off"].model.parameters(), groups["on"].model.parameters(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(groups["on"].sums, groups["off"].sums, rtol=1e-5, atol=1e-5)


def _off_and_on(tmp_path, model: dict, field: str, **train) -> dict[str, engine.Group]:
    """Two groups of three runs trained 50 steps, ``train.<field>`` off and on, with clipping, warm-up and weight
    decay in the step."""
    extra = {"steps": 100, "grad_clip": 1.0, "warmup_steps": 10, "weight_decay": 0.1, **train}
    groups = {}
    for mode in ("off", "on"):
        configs = [parse_run({**RUN, "model": model, "train": {**RUN["train"], **extra, field: mode}, "seed": s})
                   for s in range(3)]
        groups[mode] = group = _group(tmp_path / mode, configs)
        for _ in range(50):
            group.step()
    return groups


def _replays_never_wait(group: engine.Group, warmup: int) -> None:
    """After ``warmup`` warm-up steps, the capture and a replay, three more replays make no host synchronisation."""
    for _ in range(warmup + 2):
        group.step()
    assert group.graphed is not None and group.graphed.captures == 1
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            group.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_cuda_graph_replays_never_wait_for_the_gpu(tmp_path):
    _replays_never_wait(_group(tmp_path, runs(steps=20, cuda_graph="on")), GRAPH_WARMUP_STEPS)


def test_a_dropped_graphed_group_gives_its_gpu_memory_back_at_once(tmp_path):
    """The H100's throughput benchmark ran out of memory in the case after 256 retrieval runs: each finished group
    (a reference cycle through its captured step) kept its tensors until the garbage collector ran. Now the
    group is freed (and with it its tensors) when it is dropped, with the collector off."""
    gc.collect()
    group = _group(tmp_path, runs(steps=20, cuda_graph="on"))
    for _ in range(5):  # three warm-up steps, the capture, a replay
        group.step()
    assert group.graphed is not None and group.graphed.captures == 1
    alive = weakref.ref(group)
    gc.disable()
    try:
        del group
        assert alive() is None, "a dropped graphed group is still alive: something in it refers back to it"
    finally:
        gc.enable()


def test_under_cuda_graphs_a_run_alone_and_in_a_group_agree_and_leaving_runs_recapture(tmp_path):
    """A run that diverges at the first log point leaves the group: the others capture again and finish as
    they do alone."""
    configs = runs(range(3), cuda_graph="on")
    diverging = parse_run({**RUN, "train": {**RUN["train"], "cuda_graph": "on", "lr": 1e30}, "seed": 9})
    grouped = run_local([*configs, diverging], Store(tmp_path / "grouped"), group_size=4)
    alone = run_local(configs, Store(tmp_path / "alone"), group_size=1)
    for run_id, result in alone.items():
        assert grouped[run_id]["step_mode"] == "cuda graph (captured 2 times)"
        assert result["step_mode"] == "cuda graph (captured 1 time)"
        assert grouped[run_id]["loss"] == pytest.approx(result["loss"], rel=1e-3, abs=1e-5)


def test_counting_a_steps_operations_fits_in_the_gpu_memory_training_needs(tmp_path):
    """`bench --ops` at 256 retrieval runs ran out of memory on the H100 where training them fits: it profiled
    eager steps beside the captured graph, whose memory pool stays reserved for its replays. Now the eager parts
    are counted first, and counting fits under a memory cap of 1.5 times training's own peak."""
    case = next(c for c in CASES if c.name == "retrieval")
    configs = bench_configs(case, 16, "fp32", "cuda")
    group = _group(tmp_path, configs)
    torch.cuda.reset_peak_memory_stats()
    for _ in range(6):  # three warm-up steps, the capture, replays
        group.step()
    assert group.graphed is not None and group.graphed.captures == 1
    training = torch.cuda.max_memory_allocated()
    del group
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(1.5 * training / torch.cuda.get_device_properties(0).total_memory)
    try:
        row = count_case(case, 16, "cuda")
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert row["step_mode"] == "cuda graph (captured 1 time)" and row["ops"] < row["kernels"]


# Issue 45 item 2: the compiled step (Inductor) inside the captured CUDA graph, and train.compile: auto

def _close_but_the_key_bias(eager: engine.Group, compiled: engine.Group, rtol: float, atol: float) -> None:
    """Every weight within the tolerance but the key bias: softmax is shift-invariant, so its gradient is zero up to
    rounding, which AdamW normalises into steps of ±lr (tests/test_compiled_step.py)."""
    weights = dict(eager.model.named_parameters())
    for name, weight in compiled.model.named_parameters():
        if not name.endswith("attn.b_K"):
            torch.testing.assert_close(weight, weights[name], rtol=rtol, atol=atol, msg=name)


@pytest.mark.parametrize("model", [RUN["model"], {"name": "attention_only", "layers": 2, "init": "random"}])
def test_a_compiled_and_captured_step_trains_as_the_captured_eager_step_over_50_steps(tmp_path, model):
    """Compile, then capture: the forward, loss and backward compiled by Inductor (default mode) and the optimizer's
    update compiled over its flat buffers, all in one CUDA graph replayed from step 6 on. 50 steps give the captured
    eager step's weights within 1e-3 (relative; 1e-4 absolute: Inductor's fused kernels round in other orders, TF32
    products in both) and its train sums within 1e-4."""
    groups = _off_and_on(tmp_path, model, "compile", cuda_graph="on")
    assert groups["on"].step_mode() == "cuda graph + compiled (inductor; captured 1 time)"
    assert groups["off"].step_mode() == "cuda graph (captured 1 time)"
    _close_but_the_key_bias(groups["off"], groups["on"], 1e-3, 1e-4)
    torch.testing.assert_close(groups["on"].sums, groups["off"].sums, rtol=1e-4, atol=1e-4)


def test_compiled_replays_never_wait_for_the_gpu(tmp_path):
    group = _group(tmp_path, runs(steps=20, cuda_graph="on", compile="on"))
    _replays_never_wait(group, COMPILED_WARMUP_STEPS)  # the compile is in the first warm-up step
    assert group.compiling


def test_a_compiled_group_whose_runs_leave_recompiles_in_its_warm_up_and_captures_again(tmp_path):
    """Runs leaving change the run axis: the next warm-up recompiles (the run axis dynamic from then on), the
    step is captured again (a recompile during the capture would have failed it), and the runs left train as the
    captured eager step trains them."""
    groups = {}
    for mode in ("off", "on"):
        groups[mode] = group = _group(tmp_path / mode, runs(range(4), cuda_graph="on", compile=mode))
        for _ in range(10):
            group.step()
        group.leave([1, 3])
        for _ in range(30):
            group.step()
    assert groups["on"].step_mode() == "cuda graph + compiled (inductor; captured 2 times)"
    assert groups["on"].graphed.failure is None and groups["on"].compile_note is None
    _close_but_the_key_bias(groups["off"], groups["on"], 1e-3, 1e-4)


def test_auto_times_both_captured_steps_keeps_the_faster_and_records_it(tmp_path):
    """``auto``: the captured eager step timed over 20 replays, then the compiled one (warm-up, capture, 20
    replays); the faster kept. Both timings are in the final metrics and ``step_mode``, and the checkpoint records
    the mode kept (a resumed run continues in it)."""
    results = run_local(runs((0, 1), steps=100, compile="auto", cuda_graph="on"), Store(tmp_path))
    for result in results.values():
        eager_ms, compiled_ms = result["step_ms_eager"], result["step_ms_compiled"]
        assert eager_ms > 0 and compiled_ms > 0
        chose = "compiled" if compiled_ms < eager_ms else "eager"
        assert f"train.compile auto chose {chose} (eager " in result["step_mode"], result["step_mode"]
        assert result["step_mode"].startswith("cuda graph + compiled (inductor; captured 2 times)" if chose ==
                                              "compiled" else "cuda graph (captured 3 times)")
    for run_id in results:
        _, meta = load_checkpoint(Store(tmp_path).artifact_path(run_id, "checkpoint", WEIGHTS).parent)
        assert meta["compiled"] is (chose == "compiled")
