"""Issue 45, item 1: every task's stream-2 values pinned. A change to a ``sample_counter`` (or to ``tasks.counter``)
that is meant to be faster only must leave these digests as they are: the stream is part of every stream-2 run's
identity, so a value that moves is a different run under the same id.

The digests were taken from main at 4919258 (before any of the speed-ups): two runs (seeds 3 and 2⁴⁰ + 5, steps 0 and
11), 16 examples each, at the small settings of ``test_counter_tasks``, at each task's defaults and at a few wider
settings. Integer tensors are pinned by a SHA-256 of their bytes; real ones (which go through the device's
``log``/``cos``, equal to the last bits on one machine but not promised across machines) by their sum and sum of
squares in float64, to 10⁻⁹."""

import hashlib

import pytest
import torch

from depthlab.tasks import TASKS
from depthlab.tasks.counter import Counter, seed_keys
from test_counter_tasks import SETTINGS

PINNED = {
    "small/conditional_retrieval": ("f77ac383db9865bb", "2a89f782aad45a8b"),
    "small/dyck": ("7f2244fe8c636f74", "191d9670184a08ad"),
    "small/eq_ncp": ("83afbea7fb3b67b8", "31a453d99da6267b"),
    "small/eq_one": ("9ebbdd732fe6e9a0", "704a380ab3490985"),
    "small/eq_random": ("300069d8e6d6548b", "0ca92111c3458b41"),
    "small/icqa": ("4b810cda6c23d9ff", "c2a500804181d75d"),
    "small/ictm": ("1b15f9df2d74caf7", "3224d1e1b5baa8af"),
    "small/index_lookup": ("bd0e066890895c8f", "f7c31c6d1be12c33"),
    "small/induction": ("af995e483e6654f2", "518891c6db2eb012"),
    "small/memorization": ("ff08ab63f94e5274", "5aa7b8647e4aaf3d"),
    "small/mqar": ("7e693c51fd49ea0e", "4c08fe689c7725ee"),
    "small/nearest_neighbor": ((286.91831597593045, 512.0000003718935), "8a2a85a78080644e"),
    "small/nested_icqa": ("3f36298266153834", "abd3ba7249523c92"),
    "small/retrieval": ("991c1025d0117624", "5d717b67d69be434"),
    "small/retrieval_vec": ((709.8281517650175, 2911.4747757395926), (53.88289452868048, 793.1456223080999)),
    "small/template": ("7ba98a35829d755b", "dc0bfce826a0bbee"),
    "default/conditional_retrieval": ("31ba411a1d5a4c97", "2a89f782aad45a8b"),
    "default/dyck": ("071d80e5ef2e7596", "191d9670184a08ad"),
    "default/eq_ncp": ("4f46983ce1072edf", "2a1f36fd942ccc32"),
    "default/eq_one": ("95f322a5871f3ea9", "704a380ab3490985"),
    "default/eq_random": ("7e28bbaf1547a3a9", "704a380ab3490985"),
    "default/icqa": ("4b810cda6c23d9ff", "c2a500804181d75d"),
    "default/ictm": ("f87b4602fe06e4bc", "44708d5d955231af"),
    "default/index_lookup": ("fca8fa9421e91f87", "625355a012986dac"),
    "default/induction": ("7077db58977cd0d0", "c3f2a55f9cb2473e"),
    "default/memorization": ("7561fb1e86438129", "1084bb95758266f7"),
    "default/mqar": ("9307ba3cf1c28fd0", "39185d2bd4690ace"),
    "default/nearest_neighbor": ((520.0413938059319, 1023.999999696904), "e03458c861c4ceca"),
    "default/nested_icqa": ("f1ce25a2143e4745", "3ad2e40bbd8564e7"),
    "default/retrieval": ("0755ac80afaaa805", "56ef067a30375c55"),
    "default/retrieval_vec": ((1294.196666021453, 5333.001266369691), (106.80196689465083, 1541.159345063728)),
    "default/template": ("bd98fed94fa9d67b", "dc0bfce826a0bbee"),
    "wider/template": ("e354a73e834d1719", "c5cd738ef8c653d1"),
    "wider/ictm": ("4b8ab4b395a65fc0", "6d71c9715b98b0e8"),
    "wider/dyck": ("62af4f9462484a95", "191d9670184a08ad"),
    "wider/icqa": ("08a7a884a6ba35ef", "03e53e0cdcf3f925"),
}
# wider settings than the two above, where other code paths run: templates with no table of sequences (drawn
# injections), a deeper Dyck with three bracket types, a selection of more distinct values than argmin passes take
WIDER = {"template": {"l": 5, "n_symbols": 60, "n_classes": 7}, "ictm": {"k": 3, "l": 5, "n_symbols": 60, "n_a": 6},
         "dyck": {"N": 40, "n_types": 3, "depth": 4}, "icqa": {"k": 5, "n_q": 30, "n_a": 30}}


def digest(values: torch.Tensor) -> str | tuple[float, float]:
    if values.is_floating_point():
        double = values.double()
        return float(double.sum()), float((double * double).sum())
    return hashlib.sha256(values.contiguous().numpy().tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("case", sorted(PINNED))
def test_every_task_s_stream_two_values_are_the_pinned_ones(case):
    kind, name = case.split("/")
    task = TASKS[name](**{"small": SETTINGS, "wider": WIDER}.get(kind, {}).get(name, {}))
    counter = Counter(seed_keys(torch.tensor([3, 2**40 + 5])), torch.tensor([0, 11]), 16)
    for got, want in zip(map(digest, task.sample_counter(counter)), PINNED[case], strict=True):
        assert got == pytest.approx(want, rel=1e-9) if isinstance(want, tuple) else got == want


@pytest.mark.parametrize("case", sorted(PINNED))
def test_the_device_s_torch_operations_give_the_pinned_values_on_a_cpu_too(case, monkeypatch):
    """On a CPU the counter's keys, words and hash are numpy's; on a device torch operations make them (the path a
    CUDA graph captures). Forced here on the CPU, they give the same values."""
    from depthlab.tasks import counter

    monkeypatch.setattr(counter, "on_host", lambda x: False)
    test_every_task_s_stream_two_values_are_the_pinned_ones(case)
