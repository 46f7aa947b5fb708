"""The HTML report and its pieces, without a browser: runs loaded back from the store, attention maps, the
--runs filter, the section registry, escaping, self-containment, the CLI's JSON, and the paper figures.
(tests/test_report_browser.py opens the page in Chromium.)"""

from __future__ import annotations

import json
import re
from contextlib import nullcontext

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from depthlab.analysis.runs import attention_maps, encode_example, load_run, sample_examples, select_runs
from depthlab.config import expand_sweep
from depthlab.draw.svg import Cell, heatmap_svg, nice_ticks
from depthlab.errors import UserError
from depthlab.report import html as report_html
from depthlab.report.html import build_report, section
from depthlab.store import Store
from depthlab.sweeps.local import run_local
from depthlab.training.data import eval_set
from depthlab.training.evaluate import evaluate

EVIL = "<script>window.__pwned=1</script>"


def tiny_sweep(root, steps: int = 40) -> Store:
    """A small real sweep: memorization and IC-QA at 1 and 2 layers, 2 seeds each (8 runs, about a second)."""
    store = Store(root)
    runs = []
    for task in ({"name": "memorization", "n_words": 4, "length": 2, "n_examples": 8},
                 {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4}):
        runs += expand_sweep({
            "task": task, "model": {"name": "attention_only", "layers": 1, "qk_scale": 0.01},
            "train": {"optimizer": "adamw", "lr": 0.01, "steps": steps, "eval_every": 10, "batch_size": 32,
                      "eval_examples": 256},
            "sweep": {"model.layers": [1, 2], "seed": [0, 1]},
        })
    run_local(runs, store)
    return store


def add_foreign_run(store: Store, task_name: str = EVIL) -> str:
    """A finished run of a task this depthlab does not know (say, from a plugin), with metrics but no checkpoint."""
    config = {"task": {"name": task_name, "label": EVIL}, "model": {"name": "attention_only", "layers": 1},
              "train": {"steps": 20}, "seed": 0}
    run_id = store.create_run(config, task_name, "attention_only")
    store.log_metrics_many([(run_id, s, "eval", {"accuracy": 0.1 * s / 10, "loss": 2.0 - s / 20}) for s in (10, 20)])
    store.finish_run(run_id, {"accuracy": 0.2, "loss": 1.0, "steps": 20, "chance": 0.5,
                              "eval_protocol": f"held out {EVIL}", "eval_examples": 10}, step=20)
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    torch.set_num_threads(1)
    return tiny_sweep(tmp_path_factory.mktemp("report") / "store")


def test_load_run_gives_back_the_trained_model(store):
    """The model rebuilt from config + checkpoint scores exactly the stored final accuracy and loss."""
    for record in store.find_runs():
        run = load_run(store, record["id"])
        assert run.model.n_runs == 1 and run.step == record["final"]["steps"]
        batch, _ = eval_set(run.task)
        loss, acc = evaluate(run.model, run.task, batch, nullcontext())
        assert float(acc[0]) == pytest.approx(record["final"]["accuracy"], abs=1e-6)
        assert float(loss[0]) == pytest.approx(record["final"]["loss"], rel=1e-5)


def test_load_run_errors_are_user_errors(store, tmp_path):
    with pytest.raises(UserError, match="no such run"):
        load_run(store, "0123456789abcdef")
    foreign = add_foreign_run(Store(tmp_path / "other"), "not_a_task")
    with pytest.raises(UserError, match="does not load"):
        load_run(Store(tmp_path / "other"), foreign)


def test_attention_maps_every_layer_and_head_with_tokens(store):
    record = next(r for r in store.find_runs(task="icqa") if r["config"]["model"]["layers"] == 2)
    run = load_run(store, record["id"])
    batch = sample_examples(run.task, 3, seed=0)
    examples = attention_maps(run, batch)
    assert len(examples) == 3
    n = run.task.seq_len
    with torch.no_grad():
        out = run.model(torch.from_numpy(batch.inputs)[None], capture=True)
    for i, ex in enumerate(examples):
        assert ex["tokens"] == [run.task.vocab[t] for t in batch.inputs[i]]
        assert ex["target"] == run.task.labels[int(batch.targets[i])]
        assert ex["prediction"] == run.task.labels[int(out.outputs[0, i].argmax())]
        assert ex["text"] == run.task.decode(batch, i)
        assert [layer.shape for layer in ex["layers"]] == [(1, n, n), (1, n, n)]
        for layer, pattern in enumerate(out.attentions):
            np.testing.assert_allclose(ex["layers"][layer], pattern[0, i].numpy())
    # the same examples for every run of a task (a fixed seed)
    again = sample_examples(run.task, 3, seed=0)
    assert (again.inputs == batch.inputs).all()


def test_encode_example_reads_the_sample_notation(store):
    record = next(iter(store.find_runs(task="icqa")))
    task = load_run(store, record["id"]).task
    batch = sample_examples(task, 1, seed=3)
    text = task.decode(batch, 0)
    encoded = encode_example(task, text)
    assert (encoded.inputs == batch.inputs).all() and (encoded.targets == batch.targets).all()
    assert encode_example(task, text.rsplit(" _", 1)[0].replace("→", "->")).targets.tolist() == [-1]
    with pytest.raises(UserError, match="unknown token 'zz'"):
        encode_example(task, "zz " + text)
    with pytest.raises(UserError, match="tokens"):
        encode_example(task, "a → 0")


def test_runs_filter(store):
    every = store.find_runs()
    assert len(select_runs(store, None)) == len(every) == 8
    assert {r["task"] for r in select_runs(store, "task=icqa")} == {"icqa"}
    two = select_runs(store, "task=icqa,layers=2")
    assert len(two) == 2 and all(r["config"]["model"]["layers"] == 2 for r in two)
    assert len(select_runs(store, "layers=1|2,seed=0")) == 4
    assert len(select_runs(store, "task.k=2")) == 4
    assert len(select_runs(store, "train.lr=0.01,status=done")) == 8
    assert [r["id"] for r in select_runs(store, every[3]["id"][:8])] == [every[3]["id"]]
    with pytest.raises(UserError, match="unknown field 'colour'"):
        select_runs(store, "colour=red")
    with pytest.raises(UserError, match="no run"):
        build_report(store, store.root / "x.html", runs="task=template")


def test_report_is_self_contained_and_names_every_run(store, tmp_path):
    out = tmp_path / "report.html"
    result = build_report(store, out, examples=2)
    assert result == {"report": str(out), "runs": 8, "sections": ["capability", "curves", "attention", "runs"]}
    page = out.read_text()
    # nothing to fetch: no external URL (the SVG namespace is a name, not a request), no src/href to a file
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls
    assert not re.search(r"<(link|img|iframe|object|embed)\b", page)
    assert not re.search(r"\bsrc\s*=", page.split('id="depthlab-data"')[0])
    assert "Content-Security-Policy" in page
    for record in store.find_runs():
        assert record["id"] in page
    # the page's data carries attention maps for every run: 2 examples, every layer
    data = json.loads(re.search(r'id="depthlab-data">(.*?)</script>', page, re.S).group(1))
    for record in store.find_runs():
        attention = data["runs"][record["id"]]["attention"]
        assert len(attention["examples"]) == 2
        assert len(attention["examples"][0]["layers"]) == record["config"]["model"]["layers"]
    assert len(data["cells"]) == 4


def test_the_report_says_why_a_plugin_tasks_attention_maps_are_missing(tmp_path):
    """A run of a task this process does not know (a plugin's, the report made without --plugin) has no maps: the
    attention section says so and how to get them, where before it left the section out without a word."""
    store = Store(tmp_path / "store")
    add_foreign_run(store, "kv_recall")
    result = build_report(store, tmp_path / "report.html", examples=2)
    assert "attention" in result["sections"]
    page = (tmp_path / "report.html").read_text()
    section = page.split('id="sec-attention"')[1].split("<section")[0]
    assert "kv_recall&#x27; is not loaded in this depthlab" in section and "depthlab --plugin FILE report" in section


def test_config_text_is_escaped(store, tmp_path):
    """A task name, label or protocol holding markup is text in the page, in SVG and in the page's data."""
    evil_store = Store(tmp_path / "evil")
    run_id = add_foreign_run(evil_store)
    out = tmp_path / "evil.html"
    result = build_report(evil_store, out)
    page = out.read_text()
    assert "<script>window.__pwned" not in page
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page
    assert page.count("<script") == 2  # the page's data and its script, nothing else
    data = json.loads(re.search(r'id="depthlab-data">(.*?)</script>', page, re.S).group(1))
    assert data["runs"][run_id]["task"] == EVIL  # intact once parsed
    assert "is not loaded in this depthlab" in data["runs"][run_id]["attention"]["note"]  # said, not fatal
    assert result["runs"] == 1
    svg = heatmap_svg([EVIL], ["1 layer"], [Cell(0, 0, 0.5, EVIL, EVIL, "#x", "k")], EVIL)
    assert "<script" not in svg.replace("<svg", "")


def test_section_registry_takes_new_sections(store, tmp_path, monkeypatch):
    monkeypatch.setattr(report_html, "_SECTIONS", dict(report_html._SECTIONS))

    @section("extra-check", "An analysis from another issue", order=40)
    def _extra(ctx):
        return f"<p id='extra'>{len(ctx.runs)} runs seen</p>"

    @section("skipped", "Nothing to show", order=41)
    def _skipped(ctx):
        return None

    out = tmp_path / "extra.html"
    result = build_report(store, out, runs="task=memorization", examples=0)
    assert result["sections"] == ["capability", "curves", "extra-check", "runs"]  # no attention with 0 examples
    page = out.read_text()
    assert "<p id='extra'>4 runs seen</p>" in page and 'href="#sec-extra-check"' in page
    assert "Nothing to show" not in page


def test_report_command_json_and_errors(store, tmp_path):
    from depthlab.cli import app

    runner = CliRunner()
    out = tmp_path / "cli.html"
    result = runner.invoke(app, ["report", "--store", str(store.root), "--out", str(out), "--runs", "layers=2",
                                 "--json"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0]) == {"report": str(out), "runs": 4,
                                    "sections": ["capability", "curves", "attention", "runs"]}
    missing = runner.invoke(app, ["report", "--store", str(tmp_path / "nothing"), "--json"])
    assert isinstance(missing.exception, UserError) and "no depthlab store" in str(missing.exception)
    assert not (tmp_path / "nothing").exists()  # looking did not create a store
    bad = runner.invoke(app, ["report", "--store", str(store.root), "--runs", "depth=2", "--json"])
    assert isinstance(bad.exception, UserError) and "--runs" in str(bad.exception)


def test_attention_figure_files(store, tmp_path):
    from depthlab.draw import save
    from depthlab.draw.attention_maps import attention_figure

    record = next(r for r in store.find_runs(task="icqa") if r["config"]["model"]["layers"] == 2)
    run = load_run(store, record["id"])
    examples = attention_maps(run, sample_examples(run.task, 2))
    for suffix, magic in ((".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")):
        path = save(attention_figure(examples, title=f"run {run.id}"), tmp_path / f"attention{suffix}")
        assert path.read_bytes().startswith(magic)
    svg = (tmp_path / "attention.svg").read_text()
    assert "layer 1" in svg and "query" in svg


def test_nice_ticks():
    assert nice_ticks(0, 1, 5) == [0, 0.25, 0.5, 0.75, 1.0]
    assert nice_ticks(0, 2000, 5) == [0, 500, 1000, 1500, 2000]
    assert nice_ticks(3, 3) == [3]


def add_llm_bench_run(store: Store) -> str:
    """A finished ``depthlab llm-bench`` run (its config has no task or model section), asked of a fake model."""
    from depthlab.llm.bench import BenchConfig, run_bench
    from depthlab.llm.runners import Reply

    class Fake:
        parallelism = 1

        def describe(self):
            return {"type": "fake", "model": "fake-lm"}

        def generate(self, requests):
            return [Reply("3") for _ in requests]

    return run_bench(Fake(), store, BenchConfig(formulations=["equations"], depths=[1], n=2))["run_id"]


def test_a_store_with_an_llm_bench_run_still_reports_and_lists_it(tmp_path):
    """Issue 21: `depthlab report` crashed with KeyError: 'task' once the store held an llm-bench run."""
    from depthlab.cli import app

    store = tiny_sweep(tmp_path / "store", steps=10)
    llm = add_llm_bench_run(store)
    out = tmp_path / "report.html"
    result = build_report(store, out)
    assert result["runs"] == 9 and "capability" in result["sections"] and "runs" in result["sections"]
    page = out.read_text()
    assert f'data-run="{llm}"' in page and "llm-bench" in page  # listed with the others …
    grid_runs = {r for g in json.loads(re.search(r'id="depthlab-data">(.*?)</script>', page)[1])["runs"].values()
                 for r in ([g["id"]] if g["cell"] else [])}
    assert llm not in grid_runs and len(grid_runs) == 8  # … and in no capability cell
    listed = CliRunner().invoke(app, ["runs", "--store", str(store.root), "--json"])
    assert listed.exit_code == 0, listed.output
    row = next(r for r in json.loads(listed.stdout)["runs"] if r["id"] == llm)
    assert row["task"] == "llm-bench" and row["layers"] is None
    human = CliRunner().invoke(app, ["runs", "--store", str(store.root)])
    assert human.exit_code == 0 and "llm-bench" in human.stdout
