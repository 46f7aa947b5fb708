"""Memory and time of Mamba's selective scan in a training step, on the CPU (issue 45: an H200 ran out of memory).

For the mixer's forward and backward at one shape, three ways: the whole-sequence chunked scan (what an accelerator
ran before: ``SelectiveSSM.scan``), the whole-sequence loop (what a CPU ran before: ``sequential_scan``), and the
blocked scan that trains now (``forward``: checkpointed blocks, each by the chunked scan where ``--chunked``, else
by the loop). Peak bytes are measured by accounting tensor storages (``training.tensor_meter``); time is the best
of ``--repeats``. Then the footprint (``training.footprint``) of every Mamba and DSS case of ``depthlab bench`` on a
GPU at 1 and 64 runs, the estimate ``bench`` now checks before it allocates.

    PYTHONPATH=src python benchmarks/scan_memory.py --n 101 --width 64 --batch 16 --json
"""

from __future__ import annotations

import argparse
import json
import time
from unittest import mock

import torch

from depthlab.memory import format_bytes
from depthlab.models import MODELS, TaskShapes, build_model, mamba
from depthlab.training.footprint import ON_DEVICE, footprint
from depthlab.training.tensor_meter import peak_bytes
from depthlab.training.throughput import bench_configs, chosen_cases


def measure(args: argparse.Namespace) -> dict:
    spec = MODELS["mamba"](name="mamba", width=args.width, layers=1, d_state=args.d_state)
    net = build_model(spec, TaskShapes(vocab_size=7, seq_len=args.n, n_classes=3), list(range(args.runs)))
    mixer = net.blocks[0].mixer
    x = torch.randn(args.runs, args.batch, args.n, args.width, generator=torch.Generator().manual_seed(0))
    ways = {"whole-sequence chunked scan": lambda: mixer.finish(*_whole(mixer, x, chunked=True)),
            "whole-sequence loop": lambda: mixer.finish(*_whole(mixer, x, chunked=False)),
            "blocked (now)": lambda: mixer(x)}
    state = args.runs * args.batch * spec.d_inner * spec.d_state * 4  # bytes of one position's states
    rows = {}
    with mock.patch.object(mamba, "chunks_pay", lambda _: args.chunked):
        for name, forward in ways.items():
            def step(forward=forward) -> None:
                forward().sum().backward()
            peak = peak_bytes(step)
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
            rows[name] = {"peak_bytes": peak, "peak_in_position_states": round(peak / state, 1),
                          "seconds": round(min(times), 3)}
    return rows


def _whole(mixer: mamba.SelectiveSSM, x: torch.Tensor, chunked: bool) -> tuple[torch.Tensor, ...]:
    xs, z, delta, b, c, a = mixer.prepare(x)
    y = mixer.scan(xs, delta, b, c, a)[0] if chunked else mixer.sequential_scan(xs, delta, b, c, a)[0]
    return xs, z, y


def bench_footprints() -> dict:
    out = {}
    for case in chosen_cases(["families"]):
        if case.name.startswith(("mamba", "dss")):
            fp = footprint(bench_configs(case, 1, "fp32", "cuda")[0])
            out[case.name] = {f"{runs} runs": format_bytes(fp.only(ON_DEVICE).total(runs)) for runs in (1, 64)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=101)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--d-state", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunked", action="store_true", help="blocks by the chunked scan (an accelerator's path)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = {"shape": vars(args), "mixer": measure(args), "bench_footprints_on_a_gpu": bench_footprints()}
    print(json.dumps(result, indent=None if args.json else 1))


if __name__ == "__main__":
    main()
