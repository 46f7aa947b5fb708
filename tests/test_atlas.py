"""The depth atlas: its plan (studies, runs shared with presets, what is left out), the theory column against the
registry (the numbers of `depthlab construct --json`), the marks from a hand-made store, and the command."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from depthlab import plugins
from depthlab.analysis.atlas import depth_bounds, min_widths
from depthlab.api.atlas import run_atlas
from depthlab.cli import app
from depthlab.config import TrainSpec
from depthlab.constructions.bounds import theory
from depthlab.errors import UserError
from depthlab.report.html import build_report
from depthlab.store import Store, atlases
from depthlab.sweeps.atlas import load_atlas
from depthlab.sweeps.climb import plan, stop_accuracy
from depthlab.sweeps.presets import load_preset
from depthlab.tasks import TASKS

TINY = """
families:
  attention_only: {recipe: seed001-depth}
  transformer:
    model: {name: transformer, width: 16, heads: 2}
    train: {optimizer: adamw, lr: 0.003, batch_size: 16, eval_every: 10, eval_examples: 64}
scales:
  quick:
    layers: [1, 2]
    seeds: 2
    target: 0.9
    families: [attention_only]
    tasks:
      - {preset: seed001-min-depth, study: icqa, vary: {task.k: [2, 3]}}
      - task: {name: retrieval, N: 2, n_symbols: 6}
        vary: {task.D: [1, 2]}
        families: [attention_only, transformer]
        train: {steps: 5}
      - task: {name: icqa, k: 2, n_q: 3, n_a: 3}
        families: [transformer]
        train: {steps: 5}
    left_out: {nested_icqa: "too slow for a test"}
"""


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "atlas.yaml"
    path.write_text(TINY)
    return path


def ids(study):
    """The run ids of every cell and depth of a study, in order."""
    return [[Store.run_id(c.to_dict()) for c in by_depth[d]] for _, by_depth in plan(study) for d in sorted(by_depth)]


def test_the_plan_of_a_tiny_atlas(tiny):
    atlas = load_atlas("quick", tasks="icqa,retrieval,nested_icqa,retrieval_vec", path=tiny)
    studies = {(s.task, s.family): s for s in atlas.studies}
    assert list(studies) == [("icqa", "attention_only"), ("retrieval", "attention_only"),
                             ("retrieval", "transformer"), ("icqa", "transformer")]
    assert atlas.left_out == [{"task": "nested_icqa", "why": "too slow for a test"},
                              {"task": "retrieval_vec", "why": "scored by mean squared error: no accuracy to reach"}]
    # the preset's own study, its axis extended: the k = 3 cell's runs are the preset's runs (same ids)
    icqa = studies["icqa", "attention_only"]
    assert icqa.source == "preset seed001-min-depth" and icqa.study.vary == ("task.k", [2, 3])
    preset = next(s for s in load_preset("seed001-min-depth", "quick").studies if s.base["task"]["name"] == "icqa")
    assert ids(icqa.study)[len(preset.layers):] == ids(preset)
    # a family's own training under an entry: the recipe, the entry's steps, the climb's stop accuracy
    transformer = plan(studies["retrieval", "transformer"].study)
    assert [cell.value for cell, _ in transformer] == [1, 2]
    run = transformer[1][1][2][1]  # D = 2, two layers, seed 1
    assert (run.task.D, run.model.name, run.model.width, run.model.layers, run.seed) == (2, "transformer", 16, 2, 1)
    assert (run.train.steps, run.train.target_accuracy) == (5, stop_accuracy(0.9))
    assert atlas.most_runs == 2 * 2 * 2 * 3 + 2 * 2 * 2 * 2 + 2 * 2
    assert [s.family for s in load_atlas("quick", families="transformer", path=tiny).studies] == ["transformer"] * 2


def test_the_plan_names_the_bounds_of_each_cell():
    calls = []

    def fake(name, params):
        calls.append((name, params))
        if name == "seed002-information-flow":
            return {"rows": [{"closed_form": 2, "layers_last": 2, "layers_any": 2}]}
        return {"layers": 2, "width": 15, "heads": [1, 1], "accuracy": 1.0}

    icqa = {"name": "icqa", "k": 2, "n_q": 3, "n_a": 3}
    relu = {"name": "attention_only", "attention": "relu", "heads": 1}
    lower, upper = depth_bounds(theory(icqa, relu, fake))
    assert (lower.layers, lower.construction, upper.layers, upper.construction) == (
        2, "seed001-one-layer-bound", 2, "seed001-icqa")
    assert calls == [("seed001-icqa", {"k": 2, "n_q": 3, "n_a": 3}),
                     ("seed001-one-layer-bound", {"task": "icqa", "k": 2, "n_q": 3, "n_a": 3})]
    # softmax with two heads: §16 extends Theorem 2 to one softmax head only, and the construction is ReLU's
    assert theory(icqa, {**relu, "attention": "softmax", "heads": 2}, fake) == []
    # seed 002's bound speaks of both transformer families; seed 003's recurrent bounds are of sizes, not depth
    retrieval = {"name": "retrieval", "D": 4, "N": 2}
    assert [b.layers for b in theory(retrieval, {"name": "transformer"}, fake)] == [2]
    lstm = theory({"name": "index_lookup", "N": 64, "alphabet": 4}, {"name": "lstm"}, fake)
    assert [(b.kind, b.theorem, b.value) for b in lstm] == [("width", "Theorem 3", 2.0)]
    assert theory({"name": "induction"}, {"name": "transformer"}, fake) == []  # seed 004 states no bound


def construct(*args):
    result = CliRunner().invoke(app, ["construct", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_the_theory_column_has_the_numbers_of_construct_json():
    icqa = {"name": "icqa", "k": 2, "n_q": 3, "n_a": 3}
    bounds = {b.construction: b for b in theory(icqa, {"name": "attention_only", "attention": "relu", "heads": 1})}
    built = construct("seed001-icqa", "--set", "k=2", "--set", "n_q=3", "--set", "n_a=3")
    upper = bounds["seed001-icqa"]
    assert (upper.layers, upper.width, upper.heads) == (built["layers"], built["width"], built["heads"])
    assert (upper.layers, upper.width, upper.heads) == (2, 15, [1, 1])
    assert upper.check["accuracy"] == built["accuracy"] == 1.0 and upper.check["exhaustive"] is True
    certificate = construct("seed001-one-layer-bound", "--set", "k=2", "--set", "n_q=3", "--set", "n_a=3")
    assert bounds["seed001-one-layer-bound"].check["accuracy_bound"] == certificate["accuracy_bound"] == 0.75
    flow = construct("seed002-information-flow", "--set", "D=5", "--set", "N=2")["rows"][0]
    (bound,) = theory({"name": "retrieval", "D": 5, "N": 2}, {"name": "attention_only"})
    assert bound.layers == flow["closed_form"] == 3 and bound.check["simulated_layers_last"] == flow["layers_last"]
    lookup = construct("seed003-index-lookup", "--set", "N=8", "--set", "n_symbols=4")
    (bound,) = theory({"name": "index_lookup", "N": 8, "alphabet": 4}, {"name": "transformer"})
    assert (bound.layers, bound.width, bound.check["certified_all_inputs"]) == (1, lookup["width"], True)
    equality = construct("seed003-equality", "--set", "N=8")
    bounds = theory({"name": "eq_random", "N": 8}, {"name": "transformer"})
    assert [(b.kind, b.layers, b.width) for b in bounds] == [("upper", 2, equality["width"]), ("width", 1, None)]
    template = construct("seed001-template", "--set", "l=2", "--set", "n_symbols=3")
    relu = {"name": "attention_only", "attention": "relu", "heads": 1}
    upper, lower = theory({"name": "template", "l": 2, "n_symbols": 3}, relu)
    assert (upper.layers, upper.width, upper.check["accuracy"]) == (template["layers"], template["width"], 1.0)
    assert (lower.layers, lower.construction) == (2, "seed001-one-layer-bound")


def write_runs(store, study, accuracies):
    """Hand-made finished runs: ``accuracies[value][depth]`` lists each seed's final accuracy."""
    for cell, by_depth in plan(study):
        for depth, runs in by_depth.items():
            for run, accuracy in zip(runs, accuracies.get(cell.value, {}).get(depth, []), strict=False):
                run_id = store.create_run(run.to_dict(), run.task.name, run.model.name)
                store.finish_run(run_id, {"accuracy": accuracy, "steps": 5, "chance": 0.33,
                                          "eval_protocol": "exhaustive"})


def test_a_cell_below_the_lower_bound_is_marked_from_a_hand_made_store(tiny, tmp_path):
    atlas = load_atlas("quick", tasks="icqa", families="transformer", path=tiny)
    atlas.studies[0].study.base["model"] = {"name": "attention_only", "attention": "relu", "heads": 1}
    atlas.studies[0].study.vary = ("task.n_q", [3, 4])
    store = Store(tmp_path / "store")
    # n_q = 3: one layer exact on both seeds (Theorem 2 says no one-layer model is); n_q = 4: depth 2 not trained
    write_runs(store, atlas.studies[0].study, {3: {1: [1.0, 1.0]}, 4: {1: [0.5, 0.4]}})
    result, (table,) = run_atlas(atlas, store, None, tmp_path / "figures")
    below, unfinished = result["cells"]
    assert (below["min_layers"], below["lower"], below["upper"]) == (1, 2, 2)
    assert [m["mark"] for m in below["marks"]] == ["below_lower"]
    assert "exact" in below["marks"][0]["detail"] and "Theorem" in below["marks"][0]["detail"]
    assert unfinished["status"] == "unfinished" and unfinished["accuracies"] == {"1": [0.5, 0.4]}
    assert result["marks"]["below_lower"] == ["icqa n_q=3 (attention_only)"]
    assert [row[2] for row in table.rows] == ["1", "… at 2"]
    assert (tmp_path / "figures" / "atlas-quick-attention_only.png").stat().st_size > 0
    assert atlases(store.root)[0]["cells"][0]["marks"] == below["marks"]  # kept for the report
    assert (store.root / "atlas" / "theory.json").is_file()
    report = build_report(store, tmp_path / "report.html")
    assert "atlas" in report["sections"]
    page = (tmp_path / "report.html").read_text()
    assert 'id="atlas-quick"' in page and ">below lower</span>" in page and "data:image/png;base64," in page


@pytest.fixture
def kv_recall(monkeypatch):
    """The example plugin task (examples/kv_recall.py) registered; the registries restored afterwards."""
    monkeypatch.setenv(plugins.ENV, "")
    tasks, loaded = dict(TASKS), dict(plugins.LOADED)
    plugins.load_plugin_file(Path(__file__).resolve().parents[1] / "examples" / "kv_recall.py")
    yield
    for registry, before in ((TASKS, tasks), (plugins.LOADED, loaded)):
        registry.clear()
        registry.update(before)


def test_a_plugin_task_is_climbed_at_its_defaults_with_no_bound(kv_recall):
    result = CliRunner().invoke(app, ["atlas", "--plan", "--json", "--tasks", "kv_recall"])
    assert result.exit_code == 0, result.output
    (study,) = json.loads(result.output)["studies"]
    # the scale's families, the family's recipe (its steps, not a missing value), named as defaults
    assert (study["task"], study["family"], study["source"]) == ("kv_recall", "attention_only",
                                                                "task kv_recall at its defaults")
    assert study["steps"] == TrainSpec().steps  # the recipe names none: the config's default
    assert study["most_group_steps"] == study["most_runs"] // study["seeds"] * study["steps"] > 0
    assert theory({"name": "kv_recall"}, {"name": "attention_only", "attention": "relu", "heads": 1}) == []


def test_a_plugin_tasks_atlas_says_nothing_of_the_scales_own_tasks(kv_recall):
    """Issue 46: the atlas of a plugin task printed the quick scale's whole note (seed 001's depths, seed 003's
    lengths, …) and two left-out lines about families on other tasks; a listed task keeps them."""
    plugin = json.loads(CliRunner().invoke(app, ["atlas", "--plan", "--json", "--tasks", "kv_recall"]).output)
    assert plugin["note"] == "" and plugin["left_out"] == []
    listed = json.loads(CliRunner().invoke(app, ["atlas", "--plan", "--json", "--tasks", "icqa"]).output)
    assert "seed 001" in listed["note"] and any("family" in item for item in listed["left_out"])


def test_the_heat_map_draws_depths_bounds_and_frames():
    import matplotlib.colors as mcolors

    from depthlab.draw.atlas import atlas_figure

    def cell(size, min_layers, marks=(), lower=2, upper=3):
        return {"task": "icqa", "width": None, "axis": "task.k", "size": size, "min_layers": min_layers,
                "max_layers": 4, "status": "settled" if min_layers else "not reached", "lower": lower,
                "upper": upper, "marks": [{"mark": m, "detail": ""} for m in marks]}

    fig = atlas_figure([cell(2, 1, ["below_lower"]), cell(3, 2), cell(4, None, ["not_reached", "above_upper"])],
                       "attention_only")
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("≥2") == texts.count("≤3") == 3 and {"1", "2", ">4", "k=4"} <= set(texts)
    frames = [p for p in ax.patches if not p.get_fill()]
    red, orange = mcolors.to_rgba("tab:red"), mcolors.to_rgba("tab:orange")
    assert [(p.get_x() + p.get_width() / 2, p.get_edgecolor()) for p in frames] == [(0, red), (2, orange)]
    squares = [p for p in ax.patches if p.get_fill()]
    assert [bool(p.get_hatch()) for p in squares] == [False, False, True]  # hatched: none learned
    assert squares[0].get_facecolor() != squares[1].get_facecolor()  # coloured by depth


def test_a_plugin_tasks_heat_map_says_no_size_and_its_title_clears_the_colour_bar():
    """A task at its defaults (a plugin's) has one column and no size axis: no "size 1" under it; the title and
    legend (three lines) fit the figure and stay clear of the colour bar and its label (issue 46)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    from depthlab.draw.atlas import atlas_figure

    cell = {"task": "kv_recall", "width": None, "axis": None, "size": None, "min_layers": None, "max_layers": 4,
            "status": "not reached", "lower": None, "upper": None, "marks": [{"mark": "not_reached", "detail": ""}]}
    fig = atlas_figure([cell], "attention_only", "depth atlas, quick scale: attention_only")
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # laid out and drawn
    renderer = canvas.get_renderer()
    ax, bar = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == []
    (title,) = fig.findobj(lambda a: isinstance(a, Text) and a.get_text().startswith("depth atlas, quick scale"))
    box, bar_box = title.get_window_extent(renderer), bar.get_tightbbox(renderer)
    assert not box.overlaps(bar_box) and box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height
    assert bar_box.y0 >= 0 and bar_box.y1 <= fig.bbox.height  # the bar's label is not cut


def test_min_widths_per_depth():
    cells = [{"min_layers": 2, "width": 16}, {"min_layers": 1, "width": 64}, {"min_layers": None, "width": 8}]
    assert min_widths(cells) == {"1": 64, "2": 16}


def test_the_command_plans_and_refuses_unknown_names(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["atlas", "--plan", "--json", "--tasks", "icqa,retrieval"])
    assert result.exit_code == 0, result.output
    planned = json.loads(result.output)
    assert {(s["task"], s["family"]) for s in planned["studies"]} >= {("icqa", "attention_only")}
    assert planned["most_runs"] == sum(s["most_runs"] for s in planned["studies"])
    for args, message in ((["--families", "gru"], "--families: unknown name 'gru'"),
                          (["--tasks", "parity"], "--tasks: unknown name 'parity'"),
                          (["--scale", "huge"], "--scale: unknown scale 'huge'"),
                          (["--workers-per-device", "0"], "--workers-per-device: '0' is not auto")):
        result = runner.invoke(app, ["atlas", "--plan", *args])
        assert isinstance(result.exception, UserError) and str(result.exception).startswith(message), result
    with pytest.raises(UserError, match="no study"):
        load_atlas("quick", tasks="retrieval_vec")


def test_an_atlas_trains_once_and_redraws_the_same_from_the_store(tiny, tmp_path):
    from depthlab.api.training import train_configs

    atlas = load_atlas("quick", tasks="retrieval", families="attention_only", path=tiny)
    store = Store(tmp_path / "store")
    trained = []

    def train(configs, label):
        trained.append(len(configs))
        train_configs(configs, store, label)

    first, _ = run_atlas(atlas, store, train, tmp_path / "figures")
    assert trained and sum(trained) == first["runs"]
    again, _ = run_atlas(atlas, store, None, tmp_path / "figures")  # --finished-only: nothing trained, same cells
    key = lambda result: [(c["label"], c["family"], c["min_layers"], c["accuracies"]) for c in result["cells"]]  # noqa: E731
    assert key(again) == key(first) and again["finished_only"] and not any(
        c["status"] == "unfinished" for c in again["cells"])
    n_runs = len(store.find_runs())
    run_atlas(atlas, store, lambda configs, label: train_configs(configs, store, label), tmp_path / "figures")
    assert len(store.find_runs()) == n_runs  # a second atlas trains no run again


@pytest.mark.parametrize("scale", ["quick", "medium", "paper"])
def test_every_scale_of_the_atlas_is_valid(scale):
    atlas = load_atlas(scale)
    assert atlas.studies and {s.family for s in atlas.studies} >= {"attention_only", "transformer", "lstm"}
    assert {s.task for s in atlas.studies} >= {"icqa", "retrieval", "index_lookup", "induction"}


def test_the_plan_projects_its_wall_time_leaving_out_finished_runs(tiny, tmp_path):
    from depthlab.api.atlas import plan_time
    from depthlab.api.reproduce import existing_store

    atlas = load_atlas("quick", tasks="icqa", families="transformer", path=tiny)
    runs = atlas.every_run
    assert len(runs) == atlas.most_runs == 4  # one cell, depths 1-2, two seeds
    store = Store(tmp_path / "store")
    finished = store.create_run(runs[0].to_dict(), "icqa", "transformer")
    store.finish_run(finished, {"accuracy": 1.0})
    timing = plan_time(atlas, store, None, 0.01)  # one shape measured, the other estimated from it
    assert (timing["runs"], timing["done"], timing["groups"]) == (3, 1, 2)
    assert [d["measured"] for d in timing["shapes_detail"]] == [True, False]
    assert timing["steps"] == 5 * 2 and timing["projected_seconds"] > 0 and timing["upper_bound"]
    assert existing_store(tmp_path / "none") is None and not (tmp_path / "none").exists()  # a plan creates nothing
    result = CliRunner().invoke(app, ["atlas", "--plan-seconds", "5"])
    assert isinstance(result.exception, UserError) and "only with --plan" in str(result.exception)
