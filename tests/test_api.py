"""depthlab from Python: every API function from a fresh interpreter, the store as pandas tables (columns, dtypes,
the values the store holds), the same tables from the CLI, and reproduce returning what the CLI prints."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import depthlab
from depthlab.cli import app
from depthlab.errors import UserError
from depthlab.store import StoreError

TINY = {
    "task": {"name": "memorization", "n_words": 4, "length": 2, "n_examples": 8},
    "model": {"name": "attention_only", "layers": 1},
    "train": {"optimizer": "adamw", "lr": 0.01, "steps": 40, "eval_every": 20, "batch_size": 8},
    "sweep": {"model.layers": [1, 2], "seed": [0, 1]},
}
RUN = {section: value for section, value in TINY.items() if section != "sweep"}
runner = CliRunner()


@pytest.fixture(scope="module")
def store_root(tmp_path_factory) -> Path:
    """A store with the four runs of TINY (two groups of two)."""
    root = tmp_path_factory.mktemp("api") / "store"
    results = depthlab.sweep(TINY, store=root)
    assert [r.status for r in results] == ["done"] * 4
    return root


def fresh(code: str, cwd: Path) -> object:
    """Run ``code`` in a new interpreter (only depthlab imported before it); return what it prints as JSON."""
    script = "import json, depthlab\n" + textwrap.dedent(code)
    # the depthlab this test imported, wherever the interpreter runs
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(Path(depthlab.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_depthlab_imports_nothing_heavy(tmp_path):
    loaded = fresh("""
        import sys
        heavy = ("torch", "pandas", "numpy", "typing", "depthlab.api", "depthlab.models")
        before = sorted(m for m in heavy if m in sys.modules)
        import depthlab.cli
        print(json.dumps([before, sorted(m for m in ("torch", "pandas", "depthlab.api") if m in sys.modules)]))
    """, tmp_path)
    assert loaded == [[], []]  # not by `import depthlab`, nor by the CLI's start-up


def test_train_and_sweep_are_the_api_functions_and_the_engine_packages_have_their_own_names():
    import inspect

    import depthlab.sweeps.local  # importing the packages leaves the functions in place
    import depthlab.training.engine
    from depthlab.api import training

    assert depthlab.train is training.train and depthlab.sweep is training.sweep
    assert inspect.signature(depthlab.train) == inspect.signature(training.train)
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        depthlab.nothing_here  # noqa: B018


API_CALLS = {
    "__version__": ("print(json.dumps([depthlab.__version__, __import__('importlib.metadata').metadata.version("
                    "'depthlab')]))", lambda out, root: out[0] == out[1]),
    "list_tasks": ("print(json.dumps(depthlab.list_tasks()))",
                   lambda out, root: {"memorization", "icqa", "template", "ictm", "retrieval"} <= set(out)),
    "list_models": ("print(json.dumps(depthlab.list_models()))",
                    lambda out, root: {"attention_only", "transformer", "lstm", "mamba"} <= set(out)),
    "task": ("""
        import numpy as np
        t = depthlab.task("icqa", k=2)
        batch = t.sample(3, np.random.default_rng(0), "eval")
        print(json.dumps([t.k, t.n_q, t.chance, batch.inputs.shape[0], t.decode(batch, 0)]))
    """, lambda out, root: out[:4] == [2, 8, 0.5, 3] and out[4].count("→") == 3),
    "train": (f"""
        r = depthlab.train({RUN!r}, store="fresh", model__layers=2, seed=3)
        print(json.dumps(r.to_dict()))
    """, lambda out, root: out["status"] == "done" and 0 <= out["metrics"]["accuracy"] <= 1),
    "sweep": (f"""
        rs = depthlab.sweep({TINY!r}, store="fresh", train={{"steps": 20}})
        print(json.dumps([[r.status, r.metrics["steps"]] for r in rs]))
    """, lambda out, root: out == [["done", 20]] * 4),
    "Store.runs": ("""
        import sys
        df = depthlab.Store(STORE).runs()  # a pandas call: neither the store nor the table imports torch
        print(json.dumps([len(df), sorted(set(df["model.layers"].tolist())), str(df["accuracy"].dtype),
                          "torch" in sys.modules]))
    """, lambda out, root: out == [4, [1, 2], "float64", False]),
    "Store.metrics": ("""
        df = depthlab.Store(STORE).metrics()
        print(json.dumps([list(df.columns), sorted(set(df["split"]))]))
    """, lambda out, root: out == [["run_id", "step", "split", "metric", "value"], ["eval", "train"]]),
    "Store.load_model": ("""
        import torch
        store = depthlab.Store(STORE)
        model = store.load_model(store.runs()["id"].iloc[0])
        logits = model(torch.zeros(5, model.shapes.seq_len, dtype=torch.long))
        print(json.dumps([list(logits.shape), sorted(model.state_dict())]))
    """, lambda out, root: out == [[5, 8], ["blocks.0.attn.W_QK", "blocks.0.attn.W_V", "unembed.W_U"]]),
}


@pytest.mark.parametrize("name", list(API_CALLS))
def test_each_api_function_from_a_fresh_interpreter(name, store_root, tmp_path):
    code, check = API_CALLS[name]
    out = fresh(code.replace("STORE", repr(str(store_root))), tmp_path)
    assert check(out, store_root), out


def test_train_refuses_a_sweep_and_names_a_wrong_override(tmp_path):
    with pytest.raises(UserError, match=r"use depthlab\.sweep"):
        depthlab.train(TINY, store=tmp_path / "s")
    with pytest.raises(UserError, match=r"model\.layers"):
        depthlab.train(RUN, store=tmp_path / "s", model__layers=0)
    with pytest.raises(StoreError, match="no depthlab store"):
        depthlab.Store(tmp_path / "missing")


def test_store_runs_columns_and_dtypes(store_root):
    store = depthlab.Store(store_root)
    pending = store.create_run({"task": TINY["task"], "note": "never trained"}, "memorization", "attention_only")
    try:
        df = store.runs()
    finally:
        store.delete_run(pending)
    assert list(df.columns[:8]) == ["id", "status", "task", "model", "step", "created", "updated", "error"]
    assert {"task.n_words", "model.layers", "model.heads", "train.lr", "train.betas", "seed"} <= set(df.columns)
    assert list(df.columns).index("seed") < list(df.columns).index("accuracy")  # config fields, then final metrics
    assert {"accuracy", "loss", "steps", "chance", "eval_protocol", "exhaustive"} <= set(df.columns)
    dtypes = df.dtypes.astype(str).to_dict()
    assert dtypes["id"] == dtypes["status"] == dtypes["eval_protocol"] == "str"
    assert dtypes["step"] == "int64" and dtypes["created"] == "datetime64[ns, UTC]"
    assert dtypes["train.lr"] == dtypes["accuracy"] == "float64"
    assert dtypes["model.layers"] == dtypes["seed"] == "Int64"  # the pending run's config has no model or seed
    assert dtypes["steps"] == "Int64" and dtypes["exhaustive"] == "boolean"  # … and no final metrics
    assert dtypes["train.betas"] == "object" and df["train.betas"].iloc[0] == [0.9, 0.999]
    done = df[df["status"] == "done"].reset_index(drop=True)
    assert len(done) == 4 and done["accuracy"].notna().all() and math.isnan(df["accuracy"].iloc[-1])
    records = {r["id"]: r for r in store.find_runs()}
    for _, row in done.iterrows():
        record = records[row["id"]]
        assert row["accuracy"] == record["final"]["accuracy"] and row["steps"] == record["final"]["steps"]
        assert row["model.layers"] == record["config"]["model"]["layers"] and row["seed"] == record["config"]["seed"]
        assert row["train.lr"] == record["config"]["train"]["lr"] and row["step"] == record["step"]
    complete = store.runs(status="done")  # every run has every field: numpy's own dtypes
    assert complete["model.layers"].dtype == "int64" and complete["steps"].dtype == "int64"
    assert complete["exhaustive"].dtype == bool and "note" not in complete.columns


def test_metrics_equal_what_the_store_holds(store_root):
    store = depthlab.Store(store_root)
    ids = store.runs()["id"].tolist()
    long = store.metrics()
    assert list(long.columns) == ["run_id", "step", "split", "metric", "value"]
    assert long.dtypes.astype(str).tolist() == ["str", "int64", "str", "str", "float64"]
    assert list(dict.fromkeys(long["run_id"])) == ids  # runs in creation order
    for run_id in ids:
        held = store.metric_columns(run_id)
        got = long[long["run_id"] == run_id]
        assert len(got) == sum(len(cols["step"]) * (len(cols) - 1) for cols in held.values())
        for split, columns in held.items():
            for name, values in columns.items():
                if name == "step":
                    continue
                rows = got[(got["split"] == split) & (got["metric"] == name)]
                assert rows["step"].tolist() == columns["step"] and rows["value"].tolist() == values
    one = store.metrics(ids[2][:6])  # a prefix names one run
    assert set(one["run_id"]) == {ids[2]} and len(one) == (long["run_id"] == ids[2]).sum()
    assert list(dict.fromkeys(store.metrics([ids[3], ids[0]])["run_id"])) == [ids[3], ids[0]]
    with pytest.raises(UserError, match="no such run"):
        store.metrics(["feedface"])


def test_the_cli_writes_the_same_tables(store_root, tmp_path):
    store = depthlab.Store(store_root)
    runs, metrics = store.runs(), store.metrics()

    csv = runner.invoke(app, ["runs", "--store", str(store_root), "--format", "csv"])  # lists as JSON text
    assert csv.exit_code == 0, csv.output
    back = pd.read_csv(io.StringIO(csv.stdout))
    assert list(back.columns) == list(runs.columns) and back["id"].tolist() == runs["id"].tolist()
    assert back["accuracy"].tolist() == runs["accuracy"].tolist()
    assert back["train.betas"].map(json.loads).tolist() == runs["train.betas"].tolist()

    out = tmp_path / "runs.parquet"
    written = runner.invoke(app, ["runs", "--store", str(store_root), "--format", "parquet", "--out", str(out)])
    assert written.exit_code == 0, written.output
    parquet = pd.read_parquet(out)
    assert parquet["id"].tolist() == runs["id"].tolist()
    assert parquet["model.layers"].tolist() == runs["model.layers"].tolist()
    assert str(parquet["created"].dtype).startswith("datetime64") and parquet["step"].dtype == "int64"

    as_json = json.loads(runner.invoke(app, ["runs", "--store", str(store_root), "--format", "json"]).stdout)
    assert [r["id"] for r in as_json] == runs["id"].tolist() and as_json[0]["train.betas"] == [0.9, 0.999]

    first = runs["id"].iloc[0]
    result = runner.invoke(app, ["metrics", first[:8], "--store", str(store_root)])
    assert result.exit_code == 0, result.output
    pd.testing.assert_frame_equal(pd.read_csv(io.StringIO(result.stdout)).astype({"run_id": "str", "split": "str",
                                                                                  "metric": "str"}),
                                  metrics[metrics["run_id"] == first].reset_index(drop=True), check_dtype=False)
    out = tmp_path / "metrics.parquet"
    assert runner.invoke(app, ["metrics", "--store", str(store_root), "--format", "parquet", "--out",
                               str(out)]).exit_code == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), metrics, check_dtype=False)


def test_a_missing_parquet_engine_is_one_line(store_root, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    result = runner.invoke(app, ["runs", "--store", str(store_root), "--format", "parquet"])
    assert isinstance(result.exception, UserError)
    assert str(result.exception) == "--format parquet: needs pyarrow; pip install 'depthlab[parquet]'"
    bad = runner.invoke(app, ["metrics", "--store", str(store_root), "--format", "xlsx"])
    assert isinstance(bad.exception, UserError) and "--format" in str(bad.exception)


def test_reproduce_returns_what_the_cli_prints(tmp_path, small_evaluation):
    """The API trains the preset; the CLI (same store, same overrides) reuses the runs and prints the same object.
    (Also what tests/test_cli.py checked of ``reproduce --json``: the rows and the figure.)"""
    root = tmp_path / "store"
    small = {"train.steps": 20, "train.eval_every": 10, "sweep.seed": [0], "sweep.model.layers": [1]}
    result = depthlab.reproduce("seed001-depth", "quick", store=root, **small)
    cli = runner.invoke(app, ["reproduce", "seed001-depth", "--scale", "quick", "--store", str(root), "--json",
                              *[arg for k, v in small.items() for arg in ("--set", f"{k}={json.dumps(v)}")]])
    assert cli.exit_code == 0, cli.output
    printed = json.loads(cli.stdout)
    for key in ("seconds", "threads"):
        assert isinstance(result.pop(key), int | float) and printed.pop(key) is not None
    assert result == printed
    assert {r["task"] for r in printed["rows"]} == {"memorization", "icqa", "template", "ictm"}
    for row in printed["rows"]:
        assert set(row) >= {"task", "layers", "accuracy", "accuracy_sd", "seeds", "chance", "steps"}
    assert printed["figure"].endswith(".png") and Path(printed["figure"]).is_file()
