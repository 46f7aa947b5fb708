"""The throughput benchmark runs and reports what it promises (a smoke test: no timing is asserted)."""

import json

from typer.testing import CliRunner

from depthlab.cli import app
from depthlab.config import parse_run
from depthlab.training.throughput import CASES, forward_flops


def test_flop_count_of_the_attention_only_model():
    config = parse_run(CASES[1].raw)  # icqa-paper: n = 11, d' = 212, 2 layers, 1 head, C = 201
    n, w, c = 11, 212, 201
    full = 2 * n * w * w + 4 * n * n * w + 2 * n * w * w
    last = 2 * w * w + 4 * n * w + 2 * w * w
    assert forward_flops(config) == full + last + 2 * w * c


def test_bench_json_shape():
    args = ["bench", "--runs", "1,2", "--case", "icqa-quick", "--seconds", "0.1", "--rounds", "2", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["peak_gflops"] > 0 and out["peak_gflops_bf16"] > 0 and out["threads"] >= 1 and out["rounds"] == 2
    assert [(r["name"], r["precision"], r["runs"]) for r in out["cases"]] == [
        ("icqa-quick", "fp32", 1), ("icqa-quick", "fp32", 2)]
    for row in out["cases"]:
        assert row["plain_examples_per_s"] > 0 and row["engine_examples_per_s"] > 0
        assert 0 <= row["data_fraction"] < 1


def test_bench_ops_counts_a_step_whatever_the_group_size_and_its_parts_inside_it():
    """`bench --ops` on the CPU: a step's ATen operations do not grow with the runs in its group (the engine's
    promise), and the optimizer's and the data's operations are parts of it."""
    args = ["bench", "--ops", "--runs", "1,3", "--case", "icqa-quick", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    one, three = json.loads(result.stdout)["cases"]
    assert (one["runs"], three["runs"]) == (1, 3) and one["step_mode"] == "eager (cpu)"
    assert one["ops"] == three["ops"] and one["optimizer_ops"] == three["optimizer_ops"]
    assert one["optimizer_ops"] > 0 and one["data_ops"] > 0 and one["optimizer_ops"] + one["data_ops"] < one["ops"]
    assert "kernels" not in one
