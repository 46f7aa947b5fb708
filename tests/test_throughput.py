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
    promise), and the forward's, the backward's, the optimizer's and the data's operations are parts of it."""
    args = ["bench", "--ops", "--runs", "1,3", "--case", "icqa-quick", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    one, three = json.loads(result.stdout)["cases"]
    assert (one["runs"], three["runs"]) == (1, 3) and one["step_mode"] == "eager (cpu)"
    assert one["ops"] == three["ops"] and one["optimizer_ops"] == three["optimizer_ops"]
    parts = ("forward_ops", "backward_ops", "optimizer_ops", "data_ops")
    assert all(one[part] > 0 for part in parts) and sum(one[part] for part in parts) < one["ops"]
    assert one["backward_ops"] > one["forward_ops"]  # the backward makes two products for each of the forward's
    assert "kernels" not in one


def test_family_cases_cover_every_family_at_seed_003s_shapes_and_stay_out_of_the_default():
    from depthlab.training.bench_cases import FAMILY_MODELS, chosen_cases

    families = chosen_cases(["families"])
    shapes = {(parse_run(c.raw).model.name, parse_run(c.raw).task.N, parse_run(c.raw).model.width) for c in families}
    assert shapes == {(f, n, w) for f in FAMILY_MODELS for n in (100, 400) for w in (64, 256)}
    assert len(families) == 24 and {c.name for c in chosen_cases(None)} == {"icqa-quick", "icqa-paper", "retrieval"}
    assert [c.name for c in chosen_cases(["mamba-n400-w64"])] == ["mamba-n400-w64"]


def test_cases_are_measured_in_the_order_named_and_once():
    """A bench stopped at its time limit has measured the cases named first (gpu_check.sh names first the family
    cases no GPU has measured yet), and a case named again, alone or inside ``families``, is not measured twice."""
    from depthlab.training.bench_cases import chosen_cases

    named = [c.name for c in chosen_cases(["retnet-n400-w64", "icqa-quick", "families", "retnet-n400-w64"])]
    assert named[:3] == ["retnet-n400-w64", "icqa-quick", "transformer-n100-w64"]
    assert len(named) == len(set(named)) == 25
    assert [c.name for c in chosen_cases(["retrieval", "icqa-quick"])] == ["retrieval", "icqa-quick"]


def test_the_lstm_plain_loop_is_the_same_function_as_the_engine_s_lstm():
    """The LSTM case's plain loop (torch.nn.LSTM between nn.Embedding and nn.Linear) computes what the engine's
    run-axis LSTM does, given the same weights: the ratio compares the same model."""
    import torch

    from depthlab.models import TaskShapes, build_model
    from depthlab.training.bench_cases import TorchLSTM

    config = parse_run({"task": {"name": "index_lookup", "N": 12}, "model": {"name": "lstm", "width": 8, "layers": 2}})
    shapes = TaskShapes.of(config.task)
    ours = build_model(config.model, shapes, [3])
    plain = TorchLSTM(shapes.vocab_size, 8, 2, shapes.n_classes)
    with torch.no_grad():
        plain.embed.weight.copy_(ours.param("embed.W_E")[0])
        for name, p in plain.lstm.named_parameters():
            p.copy_(ours.param(f"lstm.{name}")[0])
        plain.ln_final.weight.copy_(ours.param("ln_final.w")[0])
        plain.ln_final.bias.copy_(ours.param("ln_final.b")[0])
        plain.unembed.weight.copy_(ours.param("unembed.W_U")[0].T)
        plain.unembed.bias.copy_(ours.param("unembed.b_U")[0])
    tokens = torch.randint(0, shapes.vocab_size, (1, 5, shapes.seq_len), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(plain(tokens), ours(tokens).outputs)


def test_bench_names_an_unknown_case_and_the_allowed_ones():
    from depthlab.errors import UserError

    result = CliRunner().invoke(app, ["bench", "--case", "mamba-n999-w64", "--json"])
    assert isinstance(result.exception, UserError)  # the error boundary's one line, exit code 2
    message = str(result.exception)
    assert message.startswith("--case: unknown case 'mamba-n999-w64'") and "mamba-n400-w64" in message
    assert message.endswith("families")


def test_bench_measures_the_compiled_step_beside_the_eager_one(monkeypatch):
    """``bench --compile both``: every size measured with the engine's step as it is and compiled (``train.compile:
    on``; traced here with AOT autograd's eager backend, Inductor's C++ codegen takes minutes on this CPU), each row
    saying which; ``--ops`` counts the compiled step's operations too. (The peak's measurement is left out: it is
    test_bench_json_shape's.)"""
    import torch

    from depthlab.training import engine, throughput

    monkeypatch.setattr(engine, "COMPILE_BACKEND", "aot_eager")
    monkeypatch.setattr(throughput, "peak_gflops", lambda dtype, device: 1.0)
    torch._dynamo.reset()
    try:
        ops = CliRunner().invoke(app, ["bench", "--ops", "--runs", "2", "--case", "icqa-quick", "--compile", "both",
                                       "--json"])
        rates = CliRunner().invoke(app, ["bench", "--runs", "2", "--case", "icqa-quick", "--compile", "both",
                                         "--seconds", "0.1", "--rounds", "1", "--json"])
    finally:
        torch._dynamo.reset()
    assert ops.exit_code == 0 and rates.exit_code == 0, ops.output + rates.output
    eager, compiled = json.loads(ops.stdout)["cases"]
    assert (eager["compile"], eager["step_mode"]) == ("off", "eager (cpu)")
    assert (compiled["compile"], compiled["step_mode"]) == ("on", "eager (cpu) + compiled (aot_eager)")
    assert compiled["ops"] > 0 and compiled["optimizer_ops"] > 0
    rows = json.loads(rates.stdout)["cases"]
    assert [(r["runs"], r["compile"]) for r in rows] == [(2, "off"), (2, "on")]
    assert all(r["engine_examples_per_s"] > 0 for r in rows)
