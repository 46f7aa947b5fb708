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


def test_tasks_piped_at_80_columns_keeps_summaries_readable():
    """Piped (80 columns), every task's summary shows its first 30 characters on one line (issue 46: a summary
    column squeezed to 15 characters beside the parameters)."""
    import textwrap

    from depthlab.tasks import TASKS

    result = runner.invoke(app, ["tasks"])
    assert result.exit_code == 0, result.output
    lines = [" ".join(line.replace("│", " ").split()) for line in result.stdout.splitlines()]
    for name, cls in TASKS.items():
        head = textwrap.wrap(cls.summary, 30)[0]
        assert any(head in line for line in lines), (name, head)
    assert max(map(len, result.stdout.splitlines())) <= 80


def test_attention_help_says_how_the_patterns_are_indexed():
    """Rich read "[layer][head][query][key]" as markup and dropped it: the help ended "prints the patterns, ."."""
    result = runner.invoke(app, ["attention", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "patterns as nested lists indexed by layer, head, query and key." in text, text[-400:]


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
def test_user_errors_are_one_line_exit_2(args, needle, depthlab_main):
    """Through the real entry point in this process (a subprocess per case cost 4 s of start-up each); the test
    below runs the same boundary as a user's process."""
    code, _, err = depthlab_main(*args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert needle in lines[0]


def test_a_user_error_in_a_real_process_is_one_line_exit_2():
    result = cli("sample", "icqa", "--set", "k=9")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "Traceback" not in result.stderr
    assert "task: k must be at most n_q" in result.stderr and result.stdout == ""


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
def test_bad_config_files(tmp_path, content, needle, depthlab_main):
    """Through the real entry point in this process (its error boundary included; a subprocess per case cost 4 s
    of start-up each): `test_a_user_error_in_a_real_process_is_one_line_exit_2` runs it in a subprocess."""
    path = tmp_path / "bad.yaml"
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    code, _, err = depthlab_main("train", str(path), "--store", str(tmp_path / "s"))
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert needle in err


def test_missing_config_file_and_bad_set(tmp_path, depthlab_main):
    assert "cannot read" in depthlab_main("train", str(tmp_path / "missing.yaml"))[2]
    code, _, err = depthlab_main("sample", "icqa", "--set", "k")
    assert code == 2 and "expected field=value" in err


# --- issue 21: one error boundary for every command -------------------------------------------------------------

def one_line_error(code: int, out: str, err: str, expected: int = 2) -> str:
    """The single stderr line of a failed command (nothing on stdout, no traceback)."""
    assert code == expected, err
    assert out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("args,needle", [
    (["sample", "icqa", "-n", "abc"], "Invalid value for '-n': Input should be a valid integer"),
    (["sample", "icqa", "-n", "0", "--json"], "Invalid value for '-n'"),
    (["runs", "--zzzz"], "No such option: --zzzz (see `depthlab runs --help`)"),
    (["sample"], "Missing argument 'task'"),
    (["sample", "icqa", "-n"], "Option '-n' requires an argument"),
    (["bogus"], "No such command 'bogus'; allowed: llm-prompts, llm-bench, construct"),
    (["analyze", "bogus"], "No such command 'bogus'; allowed: attention, ablate, circuit, emergence"),
    (["--memory", "lots", "tasks"], "--memory: must be a size such as 16GiB, 512M or 1.5T, or off (got 'lots')"),
])
def test_usage_errors_are_one_line_exit_2(depthlab_main, args, needle):
    assert needle in one_line_error(*depthlab_main(*args))


def test_no_command_shows_the_help_and_exits_2(depthlab_main):
    code, out, err = depthlab_main()
    assert code == 2 and "Usage: depthlab" in out and "Traceback" not in err


@pytest.fixture
def broken_tasks_table(monkeypatch, tmp_path):
    """`depthlab tasks` whose table raises what its test puts in ``raise_`` (an error depthlab did not expect)."""
    import tempfile

    import depthlab.cli.runs as runs_module

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    error: list[BaseException] = []

    def show(*tables):
        raise error[0]

    monkeypatch.setattr(runs_module, "show", show)
    return error


def test_an_internal_error_is_one_line_exit_1_and_its_traceback_is_in_a_file(depthlab_main, broken_tasks_table,
                                                                            tmp_path):
    broken_tasks_table.append(RuntimeError("the table broke\non two lines"))
    line = one_line_error(*depthlab_main("tasks"), expected=1)
    assert line.startswith("error: internal error: RuntimeError: the table broke on two lines (the traceback is in ")
    (path,) = tmp_path.glob("depthlab-error-*.txt")
    assert str(path) in line
    text = path.read_text()
    assert text.startswith("depthlab tasks\n") and "Traceback" in text and "RuntimeError: the table broke" in text


def test_running_out_of_memory_is_one_line_exit_2(depthlab_main, broken_tasks_table):
    broken_tasks_table.append(MemoryError("Unable to allocate 59.6 GiB for an array"))
    line = one_line_error(*depthlab_main("tasks"))
    assert line == ("error: out of memory: Unable to allocate 59.6 GiB for an array; ask for smaller sizes, "
                    "or free memory")


def test_a_json_command_that_fails_prints_nothing_on_stdout(depthlab_main, tmp_path):
    for args in (["sample", "nope", "--json"], ["runs", "--store", str(tmp_path / "none"), "--json"],
                 ["tasks", "--json", "--bogus"]):
        one_line_error(*depthlab_main(*args))


# --- issue 21: sizes that cannot fit are refused before anything is allocated ------------------------------------

def test_sampling_more_than_fits_is_refused_with_the_estimate(depthlab_main, monkeypatch):
    monkeypatch.delenv("DEPTHLAB_MEMORY", raising=False)
    line = one_line_error(*depthlab_main("sample", "icqa", "-n", "1000000000", "--json"))
    assert line.startswith("error: -n: sampling 1,000,000,000 examples of icqa needs about ")
    assert "TiB, more than the " in line and "lower -n, or set DEPTHLAB_MEMORY to override" in line
    line = one_line_error(*depthlab_main("--memory", "64K", "sample", "icqa", "-n", "1000"))
    assert "more than the 64.0 KiB allowed by $DEPTHLAB_MEMORY (or --memory)" in line
    code, out, _err = depthlab_main("--memory", "off", "sample", "icqa", "-n", "3")
    assert code == 0 and len(out.splitlines()) == 3


@pytest.mark.parametrize("task,needle", [
    ("{name: icqa, k: 2, n_q: 1000000000, n_a: 4}",
     "task: n_q=1,000,000,000 gives a vocabulary of 1,000,000,005, more than the 1,048,576 allowed"),
    ("{name: induction, length: 10000000}",
     "task: length=10,000,000 gives sequences of 10,000,000 positions, more than the 65,536 allowed"),
])
def test_a_task_no_model_could_take_is_refused_at_once(tmp_path, depthlab_main, task, needle):
    path = tmp_path / "huge.yaml"
    path.write_text(f"task: {task}\n")
    line = one_line_error(*depthlab_main("train", str(path), "--store", str(tmp_path / "s")))
    assert needle in line
    assert not (tmp_path / "s").exists()


def test_a_run_that_cannot_fit_is_refused_before_it_is_built(tmp_path, depthlab_main, monkeypatch):
    monkeypatch.setenv("DEPTHLAB_MEMORY", "8GiB")
    path = tmp_path / "big.yaml"
    path.write_text("task: {name: icqa, k: 2, n_q: 100000, n_a: 4}\ntrain: {steps: 1}\n")
    line = one_line_error(*depthlab_main("train", str(path), "--store", str(tmp_path / "s")))
    assert line.startswith("error: memory: a run of icqa with attention_only needs about ")
    assert "parameters and optimizer" in line and "evaluation set" in line
    assert "more than the 8.0 GiB allowed by $DEPTHLAB_MEMORY" in line


# --- issue 21: commands that read a store never create one; filters say what exists ----------------------------

@pytest.mark.parametrize("args", [
    ["runs"], ["report"], ["export", "abc"], ["analyze", "attention", "abc"], ["attention", "abc"],
    ["induction", "--run", "abc"],
])
def test_reading_commands_refuse_a_missing_store_and_create_nothing(tmp_path, depthlab_main, args):
    where = tmp_path / "typo"
    line = one_line_error(*depthlab_main(*args, "--store", str(where)))
    assert f"--store: no depthlab store at {where}" in line
    assert not where.exists()


def test_run_filters_and_prefixes_name_what_is_allowed(tmp_path, depthlab_main):
    from depthlab.store import Store

    Store(tmp_path / "s").close()
    store = ["--store", str(tmp_path / "s")]
    line = one_line_error(*depthlab_main("runs", "--status", "bogus", *store))
    assert "--status: unknown status 'bogus'; allowed: pending, running, done, failed, diverged, interrupted" in line
    line = one_line_error(*depthlab_main("runs", "--task", "bogus", *store))
    assert "--task: unknown task 'bogus'; allowed: conditional_retrieval, dyck" in line
    code, out, _ = depthlab_main("runs", "--task", "icqa", "--status", "done", "--json", *store)
    assert code == 0 and json.loads(out) == {"runs": [], "shows": "final"}  # a known task without runs: none
    for prefix in ("", " "):
        line = one_line_error(*depthlab_main("export", prefix, *store))
        assert "run: give a run id or a unique prefix of one" in line
