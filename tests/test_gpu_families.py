"""Issue 45 on a CUDA GPU (marked ``gpu``: skipped where PyTorch sees none): stream version 2 is the CPU's bit for
bit and never waits for the host; the chunked scans an accelerator runs equal the loops in float64; every seed 003
family's step, the LSTM's loop included, is captured as one CUDA graph."""

from __future__ import annotations

import pytest
import torch

from depthlab.config import parse_run
from depthlab.models import MODELS, TaskShapes, build_model
from depthlab.store import Store
from depthlab.tasks import TASKS
from depthlab.tasks.counter import Counter, seed_keys
from depthlab.training import engine
from depthlab.training.bench_cases import FAMILY_MODELS
from test_counter_tasks import SETTINGS  # every task's small setting

pytestmark = pytest.mark.gpu

TASKS_WITH_COUNTERS = [TASKS["icqa"](k=3, n_q=100, n_a=100), TASKS["index_lookup"](N=400, padding="left"),
                       TASKS["ictm"](k=3, l=5, n_symbols=100, n_a=100),
                       *(TASKS[name](**SETTINGS[name]) for name in sorted(SETTINGS) if name != "icqa")]


def counter_batch(task, device):
    seeds = torch.tensor([0, 7, 2**40 + 3], device=device)
    return task.sample_counter(Counter(seed_keys(seeds), torch.tensor([0, 11, 250_000], device=device), 512))


@pytest.mark.parametrize("task", TASKS_WITH_COUNTERS, ids=lambda t: t.name)
def test_stream_two_is_bit_identical_on_the_gpu_and_the_cpu(task):
    """Integers bit for bit; the real-valued inputs of the vector tasks (Box–Muller's log and cos, float64 dot
    products) to float32's last bits, and their targets exactly (nearest neighbour: the labels)."""
    cpu = counter_batch(task, torch.device("cpu"))
    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    for device in devices:
        gpu = counter_batch(task, torch.device(device))
        assert gpu[0].device.type == "cuda"
        if task.input_dim:
            torch.testing.assert_close(gpu[0].cpu(), cpu[0], rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(gpu[1].cpu(), cpu[1], rtol=1e-6, atol=1e-6)
        else:
            assert all(torch.equal(a.cpu(), b) for a, b in zip(gpu, cpu, strict=True)), device


@pytest.mark.parametrize("task", [{"name": "index_lookup", "N": 100}, *({"name": name, **SETTINGS[name]} for name in
                                  ("dyck", "ictm", "template", "memorization", "nearest_neighbor", "eq_ncp",
                                   "conditional_retrieval", "retrieval_vec"))], ids=lambda t: t["name"])
def test_stream_two_steps_never_wait_for_the_host(tmp_path, task):
    raw = {"task": task, "model": {"name": "transformer", "layers": 1, "width": 32},
           "train": {"optimizer": "adamw", "lr": 0.001, "steps": 20, "batch_size": 64, "device": "cuda",
                     "stream": 2}}
    configs = [parse_run({**raw, "seed": s}) for s in range(3)]
    store = Store(tmp_path)
    ids = [store.create_run(c.to_dict(), c.task.name, c.model.name) for c in configs]
    group = engine.Group(list(zip(configs, ids, strict=True)), store, len(configs))
    for _ in range(6):  # warm-up and capture
        group.step()
    torch.cuda.set_sync_debug_mode("error")
    try:
        group.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert group.step_mode().startswith("cuda graph")


LONG = TaskShapes(vocab_size=7, seq_len=150, n_classes=3)


@pytest.mark.parametrize("name", ["mamba", "linear_transformer", "retnet", "dss"])
def test_the_gpu_s_chunked_scans_equal_the_loop_in_float64(name):
    kw = {"heads": 2} if name in ("linear_transformer", "retnet") else {"d_state": 4}
    net = build_model(MODELS[name](name=name, width=16, **kw), LONG,
                      [torch.Generator().manual_seed(3)]).double().to("cuda")
    x = net.residual_stream(torch.randint(0, 7, (1, 2, 150), device="cuda")).detach()
    mixer = net.blocks[0].token_mixer
    if name == "dss":
        torch.testing.assert_close(mixer.states(x), torch.stack(mixer.scan(x)[0], dim=2), rtol=1e-10, atol=1e-12)
    else:
        torch.testing.assert_close(mixer(x), mixer.recurrent(x), rtol=1e-9, atol=1e-10)


def family_configs(family: str, width: int, runs: int) -> list:
    """``runs`` runs of a family at seed 003's index-lookup shape (N = 100, batch 64), as ``bench`` trains them."""
    raw = {"task": {"name": "index_lookup", "N": 100, "eval_size": 64},
           "model": {"name": family, "width": width, **FAMILY_MODELS[family]},
           "train": {"optimizer": "adamw", "lr": 0.001, "steps": 20, "batch_size": 64, "device": "cuda"}}
    return [parse_run({**raw, "seed": s}) for s in range(runs)]


def six_steps(configs: list, folder) -> engine.Group:
    """A group of ``configs`` after six steps: warm-up, a CUDA graph's capture, replays."""
    store = Store(folder)
    ids = [store.create_run(c.to_dict(), c.task.name, c.model.name) for c in configs]
    group = engine.Group(list(zip(configs, ids, strict=True)), store, len(configs))
    for _ in range(6):
        group.step()
    return group


@pytest.mark.parametrize("family", list(FAMILY_MODELS))
def test_every_family_s_step_is_one_cuda_graph(tmp_path, family):
    group = six_steps(family_configs(family, 64, 2), tmp_path)
    assert group.step_mode().startswith("cuda graph"), group.step_mode()


def test_stream_two_inside_the_graph_trains_as_eager_stream_two(tmp_path):
    """The batch made inside the captured step advances each run's counter on every replay: 50 graphed steps end
    where 50 eager ones do."""
    from depthlab.sweeps.local import run_local

    raw = {"task": {"name": "icqa", "k": 3, "n_q": 8, "n_a": 8}, "model": {"name": "transformer", "layers": 1,
                                                                           "width": 32},
           "train": {"optimizer": "adamw", "lr": 0.003, "steps": 50, "eval_every": 25, "batch_size": 32,
                     "device": "cuda", "stream": 2}}
    graphed = run_local([parse_run({**raw, "seed": s}) for s in (0, 1)], Store(tmp_path / "graphed"))
    eager = run_local([parse_run({**raw, "train": {**raw["train"], "cuda_graph": "off"}, "seed": s}) for s in (0, 1)],
                      Store(tmp_path / "eager"))
    for run_id, result in eager.items():
        assert graphed[run_id]["step_mode"].startswith("cuda graph")
        assert graphed[run_id]["loss"] == pytest.approx(result["loss"], rel=1e-3, abs=1e-5)


@pytest.mark.parametrize("family", ["mamba", "dss"])
def test_a_groups_gpu_memory_stays_within_its_footprint(tmp_path, family):
    """The H200 ran out of memory at 64 runs of mamba-n100-w256: at 16 runs of that shape (and DSS's), the peak that
    PyTorch's allocator reports over warm-up, capture and replays stays within the footprint's estimate of the parts
    that live on the GPU (``training.footprint``), and above half of it (the estimate counts what the step holds)."""
    from depthlab.training.footprint import ON_DEVICE, footprint

    configs = family_configs(family, 256, 16)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    six_steps(configs, tmp_path)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    estimate = footprint(configs[0]).only(ON_DEVICE).total(len(configs))
    assert estimate / 2 < peak <= estimate, (peak, estimate)
