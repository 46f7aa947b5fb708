"""The CLI: one JSON object under --json, one-line errors with exit code 2, end to end on a tiny sweep."""

import json
import subprocess
import sys

import pytest
import yaml
from typer.testing import CliRunner

from depthlab.cli import app

runner = CliRunner()


def cli(*args: str) -> subprocess.CompletedProcess:
    """The real entry point in a subprocess, so exit codes and stderr are what a user sees."""
    return subprocess.run([sys.executable, "-m", "depthlab.cli", *args], capture_output=True, text=True, timeout=300)


def as_json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_tasks_json_lists_every_task_with_parameters():
    out = as_json(runner.invoke(app, ["tasks", "--json"]))
    names = {t["name"] for t in out["tasks"]}
    assert {"memorization", "icqa", "template", "ictm", "nested_icqa"} <= names
    icqa = next(t for t in out["tasks"] if t["name"] == "icqa")
    assert icqa["section"] == "seed 001 §4.2"
    assert icqa["parameters"]["k"]["default"] == 3


def test_sample_json_shape_and_reproducible():
    args = ["sample", "icqa", "--set", "k=2", "-n", "4", "--seed", "7", "--json"]
    first, second = as_json(runner.invoke(app, args)), as_json(runner.invoke(app, args))
    assert first == second and first["task"] == "icqa"
    assert len(first["examples"]) == 4
    ex = first["examples"][0]
    assert len(ex["input"]) == 3 * 2 + 2
    assert ex["target"] in ex["input"]  # the answer is in the context
    assert ex["text"].endswith("_" + ex["target"])


@pytest.fixture
def sweep_file(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({
        "task": {"name": "memorization", "n_words": 4, "length": 2, "n_examples": 8},
        "model": {"name": "attention_only", "layers": 1},
        "train": {"optimizer": "adamw", "lr": 0.01, "steps": 40, "eval_every": 20, "batch_size": 8},
        "sweep": {"model.layers": [1, 2], "seed": [0, 1]},
    }))
    return path


def test_sweep_then_runs_json_and_rerun_skips(tmp_path, sweep_file):
    store = str(tmp_path / "store")
    out = as_json(runner.invoke(app, ["sweep", str(sweep_file), "--store", store, "--json"]))
    assert len(out["runs"]) == 4 and all(r["status"] == "done" for r in out["runs"])
    listed = as_json(runner.invoke(app, ["runs", "--store", store, "--json"]))
    assert {r["id"] for r in listed["runs"]} == {r["id"] for r in out["runs"]}
    assert all(set(r) >= {"id", "task", "model", "status", "metrics"} for r in listed["runs"])
    again = as_json(runner.invoke(app, ["sweep", str(sweep_file), "--store", store, "--json"]))
    assert [r["metrics"] for r in again["runs"]] == [r["metrics"] for r in out["runs"]]


def test_train_json_with_set_override(tmp_path, sweep_file):
    run_file = tmp_path / "run.yaml"
    raw = yaml.safe_load(sweep_file.read_text())
    raw.pop("sweep")
    run_file.write_text(yaml.safe_dump(raw))
    out = as_json(runner.invoke(app, ["train", str(run_file), "--set", "model.layers=2", "--store",
                                      str(tmp_path / "s"), "--json"]))
    assert out["status"] == "done" and 0 <= out["metrics"]["accuracy"] <= 1


@pytest.mark.parametrize("args,needle", [
    (["sample", "nope"], "task.name: unknown task 'nope'; allowed:"),
    (["sample", "icqa", "--set", "k=9"], "task: k must be at most n_q"),
    (["sample", "icqa", "--set", "bogus=1"], "task.bogus: unknown field; allowed: k, n_q, n_a"),
    (["sample", "template", "--set", "l=0"], "task"),
    (["sample", "icqa", "--split", "test"], "--split"),
    (["reproduce", "nope"], "reproduce: unknown preset"),
    (["reproduce", "seed001-depth", "--scale", "huge"], "--scale"),
])
def test_user_errors_are_one_line_exit_2(args, needle):
    result = cli(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert needle in lines[0]


@pytest.mark.parametrize("content,needle", [
    ("task: [unclosed", "is not valid YAML at line"),
    ("- just a list", "must hold a mapping"),
    ("task: {name: icqa}\nmodel: {name: attention_only, layers: 0}", "model.layers:"),
    ("task: {name: icqa}\nmodel: {name: attention_only, heads: [1, 2], layers: 3}", "heads lists one number per layer"),
    ("task: {name: icqa}\ntrain: {optimizer: adam}", "train.optimizer:"),
    ("task: {name: icqa}\nmodel: {name: mlp}", "model.name: unknown model 'mlp'"),
    ("task: {name: icqa}\nextra: 1", "extra: unknown section"),
    ("task: {name: icqa, n_q: 2}", "k must be at most n_q"),
    ("task: {name: icqa}\nseed: -1", "seed: must be a non-negative integer"),
    # issue 21: true/false for a number, a key given twice, bytes that are not text
    ("task: {name: icqa}\ntrain: {steps: true}", "train.steps: must be a number, not true"),
    ("task: {name: icqa, k: false}", "task.k: must be a number, not false"),
    ("task: {name: icqa}\ntrain:\n  steps: 10\n  steps: 20", "line 4, column 3: duplicate key 'steps'"),
    (b"\xff\xfe\x00\x01task", "is not a text file (not UTF-8 at byte 0)"),
])
def test_bad_config_files(tmp_path, content, needle):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    result = cli("train", str(path), "--store", str(tmp_path / "s"))
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert needle in result.stderr


def test_missing_config_file_and_bad_set(tmp_path):
    assert "cannot read" in cli("train", str(tmp_path / "missing.yaml")).stderr
    result = cli("sample", "icqa", "--set", "k")
    assert result.returncode == 2 and "expected field=value" in result.stderr
