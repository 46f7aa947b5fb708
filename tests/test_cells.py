"""A cell is the runs whose configs differ only in the seed (issue 31): every table, heat map, curve band and
summary pools a cell's runs and never two cells, and the fields in which cells of one place differ are shown.

Each surface is checked on a store of two learning rates written through the store API (no training): IC-QA at 1
and 2 layers, lr 0.003 (seeds 0, 1: accuracies 0.9, 0.8) and lr 0.01 (seeds 0, 1: 0.2, 0.4). Pooled as seeds, the
cell would read 0.575 ± 0.31 over 4 seeds; apart, 0.850 ± 0.071 and 0.300 ± 0.141.
"""

from __future__ import annotations

import io
import json
import os

import pytest
from rich.console import Console

from depthlab.analysis import capability, heads, layers, lengths
from depthlab.api.tables import runs_frame
from depthlab.cells import cell_id, cell_key, flat_fields, list_fields, varying_fields
from depthlab.cli.common import rich_table
from depthlab.config import parse_run
from depthlab.draw.depth import depth_figure
from depthlab.store import Store

LRS = {0.003: (0.9, 0.8), 0.01: (0.2, 0.4)}  # accuracies of seeds 0 and 1
ICQA = {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4}


def write_run(store: Store, raw: dict, accuracy: float, final: dict | None = None) -> str:
    """A finished run of the resolved config ``raw`` with an eval curve ending at ``accuracy``."""
    config = parse_run(raw).to_dict()
    run_id = store.create_run(config, config["task"]["name"], config["model"]["name"])
    store.log_metrics_many([(run_id, step, "eval", {"accuracy": accuracy * step / 20, "loss": 2.0 - step / 20})
                            for step in (10, 20)])
    store.finish_run(run_id, {"accuracy": accuracy, "loss": 1.0 - accuracy, "steps": 20, "chance": 0.5,
                              "eval_protocol": "held-out examples", "eval_examples": 100, **(final or {})}, step=20)
    return run_id


def two_lrs(store: Store, task: dict, model: dict, depths: tuple[int, ...] = (1, 2),
            final: dict | None = None) -> list[str]:
    return [write_run(store, {"task": task, "model": {**model, "layers": depth},
                              "train": {"optimizer": "adamw", "lr": lr, "steps": 20}, "seed": seed},
                      accuracy, final)
            for depth in depths for lr, accs in LRS.items() for seed, accuracy in enumerate(accs)]


@pytest.fixture(scope="module")
def icqa_store(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("cells") / "store")
    ids = two_lrs(store, ICQA, {"name": "attention_only"})
    return store, ids


def rendered(table, width: int = 80) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(rich_table(table))
    return out.getvalue()


# ------------------------------------------------------------------------------------------- the helper


def test_a_cell_is_the_config_less_its_seed():
    a = {"task": ICQA, "model": {"name": "m", "layers": 1}, "train": {"lr": 0.01}, "seed": 0}
    assert cell_key(a) == cell_key({**a, "seed": 7}) and cell_id(a) == cell_id({**a, "seed": 7})
    assert cell_key(a) != cell_key({**a, "train": {"lr": 0.003}})
    assert flat_fields(a)["train.lr"] == 0.01 and "seed" not in json.loads(cell_key(a))


def test_varying_fields_name_what_differs_within_a_slot_and_never_the_seed():
    configs = [{"task": {"name": t}, "model": {"layers": d}, "train": {"lr": lr, "steps": 10 * d}, "seed": s}
               for t in ("a", "b") for d in (1, 2) for lr in (0.1, 0.2) for s in (0, 1)]
    assert varying_fields(configs) == ["task.name", "model.layers", "train.lr", "train.steps"]
    by_task_and_depth = varying_fields(configs, lambda c: (c["task"]["name"], c["model"]["layers"]))
    assert by_task_and_depth == ["train.lr"]  # steps go with depth: not a difference within a slot
    assert varying_fields(configs, ignore=("task", "model.layers")) == ["train.lr", "train.steps"]
    assert varying_fields([{"task": {"name": "a", "k": 2}}, {"task": {"name": "a"}}]) == ["task.k"]  # absent differs
    assert list_fields(configs) == ["train.lr"]


# ---------------------------------------------------------------------------------------- the surfaces


def test_capability_rows_and_table_keep_the_two_learning_rates_apart(icqa_store):
    store, ids = icqa_store
    rows = capability.capability_rows(store, ids)
    assert len(rows) == 4 and {r["seeds"] for r in rows} == {2}
    by = {(r["label"], r["layers"]): r for r in rows}
    assert by[("icqa lr=0.003", 1)]["accuracy"] == pytest.approx(0.85)
    assert by[("icqa lr=0.01", 2)]["accuracy"] == pytest.approx(0.3)
    assert by[("icqa lr=0.01", 2)]["settings"] == {"train.lr": 0.01}
    text = rendered(capability.capability_table(rows, "two learning rates"))
    assert "0.850 ± 0.071" in text and "0.300 ± 0.141" in text and "0.575" not in text
    assert text.count("mean ± sd over 2 seeds") == 1 and "icqa lr=0.003" in text and "icqa lr=0.01" in text


def test_capability_grids_split_rows_by_learning_rate(icqa_store):
    store, ids = icqa_store
    (grid,) = capability.capability_grids(store, ids)
    assert [t["label"] for t in grid["tasks"]] == ["icqa lr=0.003", "icqa lr=0.01"]
    assert len(grid["cells"]) == 4 and all(len(c["runs"]) == 2 for c in grid["cells"])


def test_curve_bands_pool_one_cell_only(icqa_store):
    store, ids = icqa_store
    rows = capability.capability_rows(store, ids)
    curves = capability.curves(store, rows)
    assert set(curves) == {(label, d) for label in ("icqa lr=0.003", "icqa lr=0.01") for d in (1, 2)}
    assert all(len(runs) == 2 for runs in curves.values())
    fig = depth_figure(curves, ["icqa lr=0.003", "icqa lr=0.01"], {}, capability.panel_titles(rows))
    assert [ax.get_title() for ax in fig.axes[:2]] == ["IC-QA lr=0.003", "IC-QA lr=0.01"]


def test_head_rows_keep_the_two_learning_rates_apart(icqa_store):
    store, ids = icqa_store
    rows = heads.head_rows(store, ids)
    assert sorted(r["heads"] for r in rows) == ["[1, 1] lr=0.003", "[1, 1] lr=0.01", "[1] lr=0.003", "[1] lr=0.01"]
    assert {r["panel"] for r in rows} == {"Figure 5: IC-QA"} and all(len(r["curves"]) == 2 for r in rows)


def test_layers_rows_keep_the_two_learning_rates_apart(tmp_path):
    store = Store(tmp_path / "store")
    task = {"name": "retrieval_vec", "N": 2, "D": 2, "K": 2, "target": "ic"}
    ids = two_lrs(store, task, {"name": "transformer", "width": 8, "heads": 2}, depths=(1,),
                  final={"partial_losses": {"x1": 0.5, "x2": 0.6}})
    rows = layers.layers_rows(store, ids)
    assert [r["variant"] for r in rows] == ["lr=0.003", "lr=0.01"] and [r["seeds"] for r in rows] == [2, 2]
    assert "lr=0.01" in rendered(layers.layers_table(rows, "two learning rates"), 120)


def test_length_rows_report_the_best_cell_with_its_settings(tmp_path):
    store = Store(tmp_path / "store")
    ids = two_lrs(store, {"name": "index_lookup", "N": 4, "alphabet": 4, "min_length": 4},
                  {"name": "transformer", "width": 8}, depths=(1,))
    (row,) = lengths.length_rows(store, ids)
    assert row["accuracy"] == pytest.approx(0.85) and row["seeds"] == 2  # the best cell, never the pool
    assert row["settings"] == {"train.lr": 0.003} and row["tried"] == 2 and row["lr"] == 0.003
    assert "0.850 (lr 3e-03)" in rendered(lengths.length_table([row], "search"), 120)


def test_the_runs_frame_names_each_run_s_cell(icqa_store):
    store, ids = icqa_store
    frame = runs_frame(store.find_runs(ids=ids))
    assert frame["cell"].nunique() == 4
    means = frame.groupby("cell")["accuracy"].mean().round(3)
    assert sorted(means.tolist()) == [0.3, 0.3, 0.85, 0.85]


def test_depthlab_runs_shows_the_learning_rate_and_ids_that_name_their_runs(icqa_store, depthlab_main, monkeypatch):
    store, ids = icqa_store
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = depthlab_main("runs", "--store", str(store.root))
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    header = next(line for line in out.splitlines() if " id " in line)
    assert " lr " in header and " seed " in header
    lines = [line for line in out.splitlines() if "icqa" in line]
    assert len(lines) == 8
    for line in lines:  # each row's id whole on its line, a prefix naming exactly its run
        prefix = line.split()[0]
        assert len(prefix) >= 8 and store.resolve(prefix) in ids
        assert " attention_only " in line  # names whole too ("attentio" over "n_only" before)
    code, out, _ = depthlab_main("runs", "--store", str(store.root), "--json")
    rows = json.loads(out)["runs"]
    assert {r["settings"]["train.lr"] for r in rows} == {0.003, 0.01} and len({r["cell"] for r in rows}) == 4


def test_depthlab_runs_shows_a_regression_runs_final_loss_where_it_has_no_accuracy(tmp_path, depthlab_main,
                                                                                   monkeypatch):
    """seed002-layers' store (retrieval_vec: a loss, no accuracy) listed an "accuracy" column of "—" only."""
    store = Store(tmp_path / "store")
    monkeypatch.setenv("COLUMNS", "80")
    raw = {"task": {"name": "retrieval_vec", "N": 2, "D": 3, "K": 2, "target": "ic"},
           "model": {"name": "transformer", "width": 8, "heads": 2, "layers": 1}, "train": {"steps": 20}}
    done = store.create_run(parse_run(raw).to_dict(), "retrieval_vec", "transformer")
    store.finish_run(done, {"loss": 0.0261, "steps": 20}, step=20)
    stopped = store.create_run(parse_run({**raw, "seed": 1}).to_dict(), "retrieval_vec", "transformer")
    store.set_status(stopped, "interrupted", step=12)

    def listing() -> tuple[str, dict[str, str]]:
        code, out, _ = depthlab_main("runs", "--store", str(store.root))
        assert code == 0 and max(len(line) for line in out.splitlines()) <= int(os.environ["COLUMNS"])
        header = next(line for line in out.splitlines() if " id " in line)
        return header, {i: next(line for line in out.splitlines() if line.split()[:1] == [i[:8]])
                        for i in (done, stopped)}

    header, lines = listing()
    assert header.split()[-1] == "loss" and "accuracy" not in header
    assert lines[done].split()[-1] == "0.0261" and lines[stopped].split()[-2:] == ["12", "—"]
    write_run(store, {"task": ICQA, "model": {"name": "attention_only", "layers": 1}}, 0.9)  # with an accuracy
    monkeypatch.setenv("COLUMNS", "100")  # at 80, "layers" and "accuracy" fold onto two lines
    header, lines = listing()
    assert header.split()[-2:] == ["accuracy", "loss"]
    assert lines[done].split()[-2:] == ["—", "0.0261"]


def test_the_report_shows_the_learning_rate_and_splits_the_heat_map(icqa_store, tmp_path):
    from depthlab.report.html import build_report

    store, _ = icqa_store
    page = (tmp_path / "r.html")
    build_report(store, page, examples=1)
    text = page.read_text()
    runs_table = text.split('id="all-runs"')[1]
    assert "<th class='num' title='train.lr'>lr</th>" in runs_table
    assert runs_table.count('<td class="num">0.003</td>') == 4 and runs_table.count('<td class="num">0.01</td>') == 4
    data = json.loads(text.split('id="depthlab-data">')[1].split("</script>")[0])
    assert len(data["cells"]) == 4 and all(len(c["runs"]) == 2 for c in data["cells"].values())
    assert "icqa lr=0.003" in text and "icqa lr=0.01" in text


def test_the_seed001_depth_table_fits_80_columns_with_every_number_whole(tmp_path):
    """``depthlab reproduce seed001-depth --scale quick | cat``: rich renders at 80 columns when piped. The
    preset's 36 runs written with accuracies of the README's width (no training): no line over 80 characters,
    no cell split over two lines, the protocol and "mean ± sd over 3 seeds" said once, below."""
    from depthlab.api.reproduce import preset_title
    from depthlab.sweeps.presets import load_preset

    preset = load_preset("seed001-depth", "quick")
    store = Store(tmp_path / "store")
    ids = []
    for i, run in enumerate(preset.runs):
        config = run.to_dict()
        run_id = store.create_run(config, run.task.name, run.model.name)
        store.finish_run(run_id, {"accuracy": 0.987654 - 0.1 * (i % 3), "loss": 0.1, "steps": run.train.steps,
                                  "chance": run.task.chance, "eval_protocol": run.task.eval_protocol,
                                  "eval_examples": 338688}, step=run.train.steps)
        ids.append(run_id)
    table = capability.capability_table(capability.capability_rows(store, ids), preset_title(preset))
    text = rendered(table)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    for row in table.rows:  # every cell whole on the line of its task
        line = next(line for line in lines if f" {row[0]} " in line)
        assert all(cell in line for cell in row), (row, line)
    assert text.count("mean ± sd over 3 seeds") == 1 and text.count("evaluated on") == 1
    assert "seed 001 Figure 2" in text


def test_cells_whose_steps_change_with_depth_are_named_apart_and_every_accuracy_says_its_seeds(tmp_path):
    """Issue 46: IC-QA at lr 0.003 with 800 steps at 1 layer and 2,000 at 2 (one seed each) beside lr 0.01 appeared
    twice as ``icqa lr=0.003`` (heat map rows, curves, captions), and a one-seed cell showed a bare 1.000."""
    from depthlab.report.html import build_report

    store = Store(tmp_path / "store")
    ids = [write_run(store, {"task": ICQA, "model": {"name": "attention_only", "layers": depth},
                             "train": {"optimizer": "adamw", "lr": lr, "steps": steps}, "seed": 0}, accuracy)
           for depth, lr, steps, accuracy in ((1, 0.003, 800, 0.5), (2, 0.003, 2000, 1.0), (1, 0.01, 800, 0.25))]
    labels = {r["label"] for r in capability.capability_rows(store, ids)}
    assert labels == {"icqa lr=0.003, steps=800", "icqa lr=0.003, steps=2000", "icqa lr=0.01, steps=800"}
    (grid,) = capability.capability_grids(store, ids)
    assert {t["label"] for t in grid["tasks"]} == labels
    page = (tmp_path / "report.html")
    build_report(store, page, examples=0)
    heat_map = page.read_text().split('id="selection-hint"')[0]
    assert heat_map.count(">icqa lr=0.003, steps=2000<") == 1 and ">icqa lr=0.003<" not in heat_map
    assert ">1.000 n=1<" in heat_map and ">0.500 n=1<" in heat_map
    assert ">2 layers n=1<" in page.read_text()  # the curves' legend: the mean of one seed

