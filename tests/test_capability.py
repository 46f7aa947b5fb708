"""`depthlab capability` and tasks of the user's own (--plugin): a plugin task through sample, train and
capability; the climb in depth stops once settled; a task no depth solves reports "not reached"; the README's
example plugin works; plugin mistakes are one line with exit code 2."""

import json
import os
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import depthlab.cli as cli_module
from depthlab import plugins
from depthlab.cli import app
from depthlab.constructions.information_flow import closed_form as log3_bound
from depthlab.errors import UserError
from depthlab.models import MODELS
from depthlab.store import Store
from depthlab.sweeps.climb import parse_layers, parse_vary, solves
from depthlab.sweeps.presets import load_preset
from depthlab.tasks import TASKS

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kv_recall.py"

PLUGIN = '''
import numpy as np
from pydantic import Field

from depthlab.tasks.base import Batch, Task, number_names, register


class _Bits(Task):
    section = "tests/test_capability.py"
    eval_protocol = "fresh sample"
    n: int = Field(4, ge=2, le=12)
    vocab = property(lambda self: ["0", "1"])
    labels = property(lambda self: number_names(2))
    seq_len = property(lambda self: self.n)
    chance = property(lambda self: 0.5)

    def dataset_size(self, split="eval"):
        return 2**self.n

    def enumerate(self, split="eval"):
        return None


@register
class FirstBit(_Bits):
    name = "first_bit"
    summary = "the first of n random bits (one layer attends to position 0)"

    def sample(self, n, rng, split="train"):
        x = rng.integers(0, 2, (n, self.n))
        return Batch(x, x[:, 0].copy())


@register
class NoiseBits(_Bits):
    name = "noise_bits"
    summary = "labels drawn independently of the input: nothing can be learned"

    def sample(self, n, rng, split="train"):
        return Batch(rng.integers(0, 2, (n, self.n)), rng.integers(0, 2, n))
'''

# softmax attention: with ReLU attention a third of the seeds stayed at 0.5 on first_bit in 150-300 steps
FAST = ["--set", "train.steps=150", "--set", "train.eval_every=50", "--set", "train.warmup_steps=20",
        "--set", "train.lr=0.03", "--set", "train.eval_examples=512", "--set", "model.attention=softmax"]


@pytest.fixture
def plugin_file(tmp_path, monkeypatch):
    """The plugin above as a file; the registries and $DEPTHLAB_PLUGINS are restored afterwards."""
    path = tmp_path / "my_tasks.py"
    path.write_text(PLUGIN)
    monkeypatch.setenv(plugins.ENV, "")
    tasks, models, loaded = dict(TASKS), dict(MODELS), dict(plugins.LOADED)
    yield path
    for registry, before in ((TASKS, tasks), (MODELS, models), (plugins.LOADED, loaded)):
        registry.clear()
        registry.update(before)


def invoke(*args: str) -> dict:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


def main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """The real entry point (``depthlab.cli.main``) in this process: its exit code and stderr."""
    monkeypatch.setattr(sys, "argv", ["depthlab", *args])
    with pytest.raises(SystemExit) as exit_:
        cli_module.main()
    return exit_.value.code, capsys.readouterr().err


def test_plugin_task_runs_through_sample_train_and_capability_and_the_climb_stops(plugin_file, tmp_path):
    store = str(tmp_path / "store")
    sampled = invoke("--plugin", str(plugin_file), "sample", "first_bit", "--set", "n=5", "-n", "3", "--json")
    assert sampled["task"] == "first_bit" and len(sampled["examples"]) == 3
    assert all(ex["target"] == ex["input"][0] for ex in sampled["examples"])

    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump({"task": {"name": "first_bit", "n": 5},
                                        "model": {"name": "attention_only", "layers": 1},
                                        "train": {"optimizer": "adamw", "lr": 0.03, "steps": 60, "eval_every": 30}}))
    trained = invoke("--plugin", str(plugin_file), "train", str(run_file), "--store", store, "--json")
    assert trained["status"] == "done" and trained["metrics"]["accuracy"] is not None

    args = ["--plugin", str(plugin_file), "capability", "first_bit", "--set", "n=5", *FAST, "--layers", "1-3",
            "--seeds", "3", "--store", store, "--json"]
    out = invoke(*args)
    (row,) = out["rows"]
    assert out["task"] == "first_bit" and row["min_layers"] == 1
    assert list(row["accuracies"]) == ["1"] and len(row["accuracies"]["1"]) == 3
    assert all(a >= 0.95 for a in row["accuracies"]["1"]) and row["reached"] == {"1": 3}
    assert Path(out["figure"]).is_file()
    # settled at depth 1: no deeper run was trained (nor even created)
    runs = Store(store).find_runs(task="first_bit")
    assert {r["config"]["model"]["layers"] for r in runs} == {1}
    assert len(runs) == 4  # the train command's run and the three seeds at depth 1
    # asked again, nothing is trained: the same runs answer from the store
    again = invoke(*args)
    assert again["rows"] == out["rows"] and len(Store(store).find_runs(task="first_bit")) == 4


def test_pure_noise_labels_are_not_reached_and_every_depth_is_tried(plugin_file, tmp_path):
    store = str(tmp_path / "store")
    out = invoke("--plugin", str(plugin_file), "capability", "noise_bits", *FAST, "--layers", "1,2", "--seeds", "2",
                 "--store", store, "--json")
    (row,) = out["rows"]
    assert row["min_layers"] is None and row["max_layers"] == 2
    assert list(row["accuracies"]) == ["1", "2"]
    assert all(a < 0.8 for accs in row["accuracies"].values() for a in accs)
    text = runner.invoke(app, ["--plugin", str(plugin_file), "capability", "noise_bits", *FAST, "--layers", "1,2",
                               "--seeds", "2", "--store", store], env={"COLUMNS": "200"})
    assert text.exit_code == 0 and "(>L: no depth up to L reached the target)" in " ".join(text.output.split())
    assert any(line.split()[:2] == ["noise_bits", ">2"] for line in text.output.splitlines())


def test_vary_gives_a_row_per_value_and_width(plugin_file, tmp_path):
    out = invoke("--plugin", str(plugin_file), "capability", "first_bit", *FAST, "--vary", "n=3,6",
                 "--widths", "12,16", "--layers", "1-2", "--seeds", "1", "--store", str(tmp_path / "s"), "--json")
    assert out["vary"] == "task.n"
    assert [(r["task.n"], r["width"]) for r in out["rows"]] == [(3, 12), (3, 16), (6, 12), (6, 16)]
    assert all(set(r) >= {"width", "task.n", "min_layers", "accuracies"} for r in out["rows"])
    assert Path(out["figure"]).name == "capability-first_bit-task.n.png" and Path(out["figure"]).is_file()


def test_a_capability_climb_on_ray_starts_ray_once(plugin_file, tmp_path, monkeypatch):
    """Every depth is a sweep of its own; they share one local Ray instance, shut down at the end. The task is the
    plugin's: Ray workers never load the plugin file, its classes travel by value with each group of runs (a
    separate sweep on Ray started a second instance for the same path: `run_ray` under both commands)."""
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    starts, real_init = [], ray.init
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: starts.append(1) or real_init(*args, **kwargs))
    out = invoke("--plugin", str(plugin_file), "capability", "noise_bits", *FAST, "--layers", "1,2", "--seeds", "1",
                 "--executor", "ray", "--store", str(tmp_path / "s"), "--json")
    assert out["rows"][0]["min_layers"] is None and sorted(out["rows"][0]["accuracies"]) == ["1", "2"]
    assert starts == [1] and not ray.is_initialized()


def test_readme_example_plugin(monkeypatch, tmp_path):
    monkeypatch.setenv(plugins.ENV, "")
    before = dict(TASKS)
    try:
        sampled = invoke("--plugin", str(EXAMPLE), "sample", "kv_recall", "-n", "4", "--json")
        for ex in sampled["examples"]:
            keys, query = ex["input"][0:-1:2], ex["input"][-1]
            assert ex["target"] == ex["input"][2 * keys.index(query) + 1]
        out = invoke("--plugin", str(EXAMPLE), "capability", "kv_recall", "--set", "pairs=2", *FAST, "--layers", "1",
                     "--seeds", "1", "--store", str(tmp_path / "s"), "--json")
        assert out["rows"][0]["accuracies"]["1"][0] is not None
    finally:
        TASKS.clear()
        TASKS.update(before)


def test_plugin_mistakes_are_one_line_errors(tmp_path, plugin_file, monkeypatch, capsys):
    bad_syntax = tmp_path / "bad.py"
    bad_syntax.write_text("x = 1\ndef broken(:\n")
    raises = tmp_path / "raises.py"
    raises.write_text("import numpy\n\nraise RuntimeError('no data here')\n")
    taken = tmp_path / "taken.py"
    taken.write_text(PLUGIN.replace('name = "first_bit"', 'name = "icqa"'))
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    incomplete = tmp_path / "incomplete.py"
    incomplete.write_text(PLUGIN.replace("    def dataset_size", "    def _unused"))
    cases = [(tmp_path / "missing.py", "no such file"), (bad_syntax, "line 2: SyntaxError"),
             (raises, "line 3: RuntimeError: no data here"), (taken, "'icqa' is already taken by depthlab.tasks.icqa"),
             (empty, "defines no task"), (incomplete, "task 'first_bit' (FirstBit) does not define dataset_size")]
    for path, message in cases:
        with pytest.raises(UserError) as error:
            plugins.load_plugin_file(path)
        text = str(error.value)
        assert "\n" not in text and text.startswith(f"--plugin {path}: ") and message in text, text
        assert TASKS["icqa"].__module__ == "depthlab.tasks.icqa" and "noise_bits" not in TASKS  # nothing registered
    # as a user sees it: one line on stderr, exit code 2, no traceback
    code, err = main(monkeypatch, capsys, "--plugin", str(raises), "tasks")
    assert code == 2 and err == f"error: --plugin {raises}: line 3: RuntimeError: no data here\n"


def test_entry_point_tasks_are_loaded_at_start_up(tmp_path, plugin_file, monkeypatch):
    package = tmp_path / "site" / "my_package"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(PLUGIN.replace('"first_bit"', '"installed_bit"').replace('"noise_bits"', '"n2"'))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    point = EntryPoint(name="mine", value="my_package.tasks", group=plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(plugins, "entry_points", lambda group: [point] if group == plugins.ENTRY_POINT_GROUP else [])
    assert invoke("sample", "installed_bit", "-n", "1", "--json")["task"] == "installed_bit"
    monkeypatch.setattr(plugins, "entry_points", lambda group: [
        EntryPoint(name="broken", value="no_such_package.tasks", group=plugins.ENTRY_POINT_GROUP)])
    with pytest.raises(UserError, match=r"^entry point broken = no_such_package.tasks: ModuleNotFoundError"):
        plugins.load_entry_points()


def test_loaded_plugins_are_recorded_for_processes_started_later(plugin_file, monkeypatch):
    invoke("--plugin", str(plugin_file), "tasks", "--json")
    assert os.environ[plugins.ENV] == str(plugin_file.resolve())  # what a subprocess inherits
    TASKS.pop("first_bit")
    plugins.LOADED.clear()  # as in a new process: only the environment says which plugins to load
    assert invoke("sample", "first_bit", "-n", "2", "--json")["task"] == "first_bit"


def test_capability_mistakes_name_the_option(tmp_path, monkeypatch, capsys):
    store = tmp_path / "store"
    for args, message in [(["--layers", "0-2"], "--layers: depths must be integers from 1 to 64"),
                          (["--layers", "two"], "--layers: expected depths such as 1-6"),
                          (["--target", "1.5"], "--target: the target accuracy must be in (0, 1]"),
                          (["--vary", "model.layers=1,2"], "--vary model.layers: that is an axis of its own"),
                          (["--vary", "k"], "--vary: expected field=v1,v2"),
                          (["--vary", "k=2,99"], "--vary task.k=99: task: k must be at most n_q"),
                          (["--widths", "0"], "--widths: positive integers"),
                          (["--set", "task.kk=2"], "task.kk: unknown field"),
                          (["--set", "model.layers=2"], "--set model.layers: that is an axis of the capability study; "
                                                        "use --layers")]:
        result = runner.invoke(app, ["capability", "icqa", *args, "--store", str(store)])
        assert isinstance(result.exception, UserError) and str(result.exception).startswith(message), (args, result)
    result = runner.invoke(app, ["capability", "retrieval_vec", "--store", str(store)])
    assert isinstance(result.exception, UserError) and "has no accuracy" in str(result.exception)
    assert not store.exists()  # refused before any work
    code, err = main(monkeypatch, capsys, "capability", "icqa", "--layers", "0-2", "--store", str(store))
    assert code == 2 and err.startswith("error: --layers: depths must be") and err.count("\n") == 1


def test_helpers_and_the_min_depth_presets_load():
    assert parse_layers("1-3,5") == [1, 2, 3, 5]
    assert parse_vary("N=20,50") == ("task.N", [20, 50])
    assert solves([0.96, 0.97, 0.2], 0.95) and not solves([0.96, 0.2], 0.95) and not solves([0.96, None, 0.1], 0.95)
    assert [log3_bound(d) for d in range(1, 7)] == [1, 2, 2, 2, 3, 3]  # ⌈log3(2D)⌉, seed 002 §5
    for scale in ("quick", "paper"):
        seed001 = load_preset("seed001-min-depth", scale)
        assert [s.expected for s in seed001.studies] == [1, 2, 2, 3]
        assert [s.base["task"]["name"] for s in seed001.studies] == ["memorization", "icqa", "template", "ictm"]
        seed002 = load_preset("seed002-min-depth", scale)
        assert seed002.studies[0].vary[0] == "task.D" and seed002.studies[0].vary[1] == [1, 2, 3, 4, 5, 6]


def test_a_relative_plugin_path_that_is_not_there_says_where_it_was_looked_for(tmp_path, monkeypatch):
    """Issue 21 item 8: `--plugin examples/kv_recall.py` from another folder said only "no such file"."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as error:
        plugins.load_plugin_file("examples/kv_recall.py")
    assert f"no such file {tmp_path / 'examples' / 'kv_recall.py'}" in str(error.value)
    assert f"relative to the current folder {tmp_path}" in str(error.value)
