"""Issue 45's out-of-memory on an H200 (``bench --case families --runs 1,64``, mamba-n100-w256): the chunked selective
scan materialised [runs, batch, n, d_inner, d_state] tensors for the whole sequence, about eleven of them per layer,
and nothing sized the group before it allocated. Here, on the CPU: the scan in checkpointed blocks stays equal to
the loop in float64; the footprint counts what a training step's scan really allocates (measured by accounting
tensor storages, the chunked path forced); ``bench`` leaves out what a GPU's free memory cannot hold, in one line;
and CUDA's out-of-memory message reaches the user as whole sentences."""

import numpy as np
import pytest
import torch

from conftest import one_line_exit_2, run_depthlab
from depthlab.config import parse_run
from depthlab.models import MODELS, TaskShapes, build_model, mamba, scans
from depthlab.training import footprint as footprint_module
from depthlab.training import throughput
from depthlab.training.footprint import footprint
from depthlab.training.objectives import per_run_loss
from depthlab.training.tensor_meter import peak_bytes
from test_scans import grads_of

GIB = 1 << 30


def test_the_scan_from_a_given_state_equals_the_loop_in_float64():
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(2, 23, 3, dtype=torch.float64, generator=gen) * 1.2
    b, h0 = torch.randn(2, 23, 3, dtype=torch.float64, generator=gen), torch.randn(2, 3, dtype=torch.float64)
    chunked, chunked_grads = grads_of(lambda a, b, h: scans.chunked_scan(a, b, 1, h), a, b, h0)
    loop, loop_grads = grads_of(lambda a, b, h: scans.sequential_scan(a, b, 1, h), a, b, h0)
    torch.testing.assert_close(chunked, loop, rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(chunked_grads, loop_grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_the_block_length_is_the_longest_within_twice_the_least_memory():
    """Against the search over every block length (the function stops early: it must not miss the answer)."""
    for n in [*range(1, 130), 401, 3000]:
        for kept, transient in ((1.25, 13.0), (2.5, 13.0), (40.0, 1.0)):
            memory = [scans.scan_memory(n, length, kept, transient) for length in range(1, n + 1)]
            want = max(length for length, used in enumerate(memory, start=1) if used <= scans.SLACK * min(memory))
            assert scans.block_length(n, kept, transient) == want, (n, kept, transient)


def test_mamba_in_blocks_equals_its_recurrence_values_and_gradients(monkeypatch):
    """The mixer as it trains on an accelerator (the chunked scan in blocks of ``block_length`` positions under
    checkpointing) against the plain position-by-position recurrence, over several blocks, in float64."""
    monkeypatch.setattr(mamba, "chunks_pay", lambda x: True)
    shapes = TaskShapes(vocab_size=7, seq_len=90, n_classes=3)
    net = build_model(MODELS["mamba"](name="mamba", width=8, layers=1, d_state=4), shapes, [3, 4]).double()
    mixer = net.blocks[0].mixer
    x = net.residual_stream(torch.randint(0, 7, (2, 2, 90), generator=torch.Generator().manual_seed(2))).detach()
    assert 1 < scans.block_length(90, mamba.KEPT, mamba.CHUNKED_TRANSIENT) < 45  # several blocks
    params = list(mixer.parameters())
    fast, fast_grads = grads_of(lambda x, *p: mixer(x), x, *params)
    slow, slow_grads = grads_of(lambda x, *p: mixer.recurrent(x), x, *params)
    torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-12)
    for ours, theirs in zip(fast_grads, slow_grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize(("family", "device"), [("mamba", "cuda"), ("mamba", "cpu"), ("dss", "cuda")])
def test_the_footprint_counts_what_a_training_step_allocates(monkeypatch, family, device):
    """A group's footprint on the device (activations, scan, gradients) against the peak bytes of tensors its
    training step holds, measured on the CPU with the path the device would take (``cuda``: the chunked scan)."""
    monkeypatch.setattr(mamba, "chunks_pay", lambda x: device != "cpu")
    config = parse_run({"task": {"name": "index_lookup", "N": 60}, "model": {"name": family, "width": 32, "layers": 2},
                        "train": {"batch_size": 8, "device": device}})
    runs = 2
    model = build_model(config.model, TaskShapes.of(config.task), list(range(runs)))
    data = config.task.sample(8, np.random.default_rng(0), "train")
    x, y = (torch.as_tensor(a).expand(runs, *a.shape) for a in (data.inputs, data.targets))
    measured = peak_bytes(lambda: per_run_loss(model(x).outputs, y, config.task.loss).sum().backward())
    fp = footprint(config).per_run
    gradients = fp["parameters and optimizer"] // 5  # weights, gradients twice, AdamW's two states: one gradient
    estimate = runs * (fp["activations"] + fp["scan"] + gradients)
    assert measured <= estimate <= 1.3 * measured, (measured, estimate)
    assert runs * fp["activations"] < measured / 5  # the generic lower bound alone missed most of it


def test_bench_leaves_out_what_the_gpu_s_free_memory_cannot_hold(monkeypatch):
    """The H200 had 6.38 GiB free when mamba-n100-w256 asked for 13.75 GiB more: with that much free, one run
    fits and 64 are left out with the reason; with the whole 139.8 GiB free, 64 runs of the blocked scan fit
    (the whole-sequence chunked scan needed about 11 tensors of 13.75 GiB per layer)."""
    monkeypatch.setattr(footprint_module, "gpu_free_for", lambda name: (torch.device("cuda", 0), int(6.38 * GIB)))
    monkeypatch.setenv("DEPTHLAB_MEMORY", "1TiB")
    left_out = throughput.check_sizes([1, 64], ["mamba-n100-w256"], "cuda")
    assert [(e["name"], e["runs"]) for e in left_out] == [("mamba-n100-w256", 64)]
    reason = left_out[0]["reason"]
    assert reason.startswith("memory: a group of 64 runs of index_lookup with mamba needs about ")
    assert "\n" not in reason
    assert "on cuda:0 (" in reason and "scan " in reason and "free there; lower --runs (at most " in reason
    monkeypatch.setattr(footprint_module, "gpu_free_for", lambda name: (torch.device("cuda", 0), int(139.8 * GIB)))
    assert throughput.check_sizes([1, 64], ["mamba-n100-w256"], "cuda") == []
    config = throughput.bench_configs(throughput.chosen_cases(["mamba-n100-w256"])[0], 1, "fp32", "cuda")[0]
    one_tensor = 64 * 64 * 110 * 512 * 16 * 4  # [runs, batch, padded n, d_inner, d_state] floats: the 13.75 GiB
    assert one_tensor == 13.75 * GIB
    assert footprint(config).only(footprint_module.ON_DEVICE).total(64) < 4 * one_tensor < 139.8 * GIB


def test_bench_refuses_when_nothing_fits(monkeypatch):
    monkeypatch.setattr(footprint_module, "gpu_free_for", lambda name: (torch.device("cuda", 0), 100 << 20))
    monkeypatch.setenv("DEPTHLAB_MEMORY", "1TiB")
    with pytest.raises(footprint_module.ResourceError, match=r"^memory: a run of index_lookup with mamba needs"):
        throughput.check_sizes([1, 64], ["mamba-n100-w256"], "cuda")


H200_MESSAGE = ("CUDA out of memory. Tried to allocate 13.75 GiB. GPU 0 has a total capacity of 139.80 GiB of which "
                "6.38 GiB is free. Including non-PyTorch memory, this process has 133.41 GiB memory in use. Of the "
                "allocated memory 130.90 GiB is allocated by PyTorch, and 1.87 GiB is reserved by PyTorch but "
                "unallocated. If reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
                "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def test_the_out_of_gpu_memory_line_is_whole(monkeypatch):
    """It was cut at 200 characters, mid-sentence ("Of the all;"): now every sentence with a number, whole."""
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError(H200_MESSAGE)

    monkeypatch.setattr(throughput, "run_benchmark", out_of_memory)
    line = one_line_exit_2(run_depthlab("bench", "--case", "icqa-quick", "--runs", "1", "--json"))
    assert line == ("error: out of GPU memory: CUDA out of memory. Tried to allocate 13.75 GiB. GPU 0 has a total "
                    "capacity of 139.80 GiB of which 6.38 GiB is free. Including non-PyTorch memory, this process "
                    "has 133.41 GiB memory in use. Of the allocated memory 130.90 GiB is allocated by PyTorch, and "
                    "1.87 GiB is reserved by PyTorch but unallocated; ask for smaller sizes or fewer runs at once "
                    "(--group-size; bench: --runs)")
