"""``depthlab reproduce NAME --plan``: a projection of a scale's wall time from a few timed steps of each group shape,
checked against the time the same steps take in the same test; nothing is recorded in the store."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from typer.testing import CliRunner

from depthlab.api.reproduce import plan_for
from depthlab.api.training import train_configs
from depthlab.cli import app
from depthlab.store import Store
from depthlab.sweeps import presets
from depthlab.sweeps.plan import group_seconds, measure

runner = CliRunner()

TINY = {
    "title": "tiny", "reproduces": "seed 001 Figure 2 (§6.1)", "figures": ["seed 001 Figure 2"],
    "scales": {"quick": {"note": "two shapes, two groups", "sweeps": [
        {"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4},
         "model": {"name": "attention_only", "init": "random", "qk_scale": 0.1},
         "train": {"optimizer": "adamw", "lr": 0.003, "steps": 150, "eval_every": 50, "eval_examples": 256},
         "sweep": {"model.layers": [1, 2], "seed": [0, 1, 2, 3]}}]},
        "paper": {"note": "the same", "sweeps": []}},
}


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    folder = tmp_path / "presets"
    folder.mkdir()
    (folder / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    monkeypatch.setattr(presets, "preset_dir", lambda: folder)
    return presets.load_preset("tiny", "quick")


def test_projection_is_within_a_factor_of_two_of_the_same_steps(tiny, tmp_path, monkeypatch):
    """The plan before and after training against the training itself: the real time must fall within a factor of
    2 of the range the two projections span. Both are timed in this process's CPU time (the plan's clock patched to
    it; one thread), which the other processes of a loaded machine do not inflate as they do wall time. Four runs
    train as one group: a plan that counted them one after another would be about 4x off."""
    monkeypatch.setattr(time, "perf_counter", time.process_time)
    before = plan_for(tiny)
    started = time.process_time()
    train_configs(tiny.runs, Store(tmp_path / "store"), "tiny")
    took = time.process_time() - started
    after = plan_for(tiny)
    low, high = sorted((before["projected_seconds"], after["projected_seconds"]))
    assert before["runs"] == 8 and before["groups"] == before["shapes"] == 2  # one group per depth, 4 seeds each
    assert before["steps"] == 300 and before["run_steps"] == 1200 and before["upper_bound"] is True
    print(f"projected {low:.2f}-{high:.2f} s, took {took:.2f} s (CPU)")
    assert low / 2 <= took <= 2 * high, (low, high, took)


def test_plan_leaves_out_done_runs_and_records_nothing(tiny, tmp_path):
    store = Store(tmp_path / "store")
    train_configs(tiny.runs[:4], store, "tiny")  # the 1-layer group
    before = {r["id"] for r in store.find_runs()}
    out = plan_for(tiny, store)
    assert out["done"] == 4 and out["runs"] == 4 and out["groups"] == 1
    assert {r["id"] for r in store.find_runs()} == before  # the plan trained in a scratch store
    assert plan_for(tiny, tmp_path / "nowhere")["runs"] == 8  # a path with no store: nothing is done


def test_a_group_costs_its_steps_log_points_and_final_evaluation(tiny):
    config = tiny.runs[0]
    timing = measure(tiny.runs[:4])
    assert timing.measured and timing.steps_timed >= 3 and timing.step > 0 and timing.probe_examples == 256
    seconds = group_seconds(config, timing)
    assert seconds["steps"] == pytest.approx(150 * timing.step)
    assert config.task.dataset_size("eval") == 288  # icqa k = 2 over 4+4: A(4,2)² · 2, evaluated exhaustively
    final = timing.probe * 288 / 256
    assert seconds["evaluation"] == pytest.approx(3 * timing.probe + final)


def test_cli_plan_prints_one_json_object(tiny, tmp_path):
    result = runner.invoke(app, ["reproduce", "tiny", "--plan", "--json", "--store", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["preset"] == "tiny" and out["scale"] == "quick" and out["projected_seconds"] > 0
    assert [d["runs_per_group"] for d in out["shapes_detail"]] == [4, 4]
    assert not (tmp_path / "s").exists()
    shown = runner.invoke(app, ["reproduce", "tiny", "--plan"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "tiny --scale quick: plan on cpu (1 thread)" in shown.stdout
    assert "icqa" in shown.stdout and "150" in shown.stdout


def test_a_capability_study_is_planned_at_every_depth(tmp_path, monkeypatch):
    """A study's runs are found by climbing: the plan counts every depth (an upper bound: climbing stops once a
    cell settles)."""
    study = {"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4}, "model": {"name": "attention_only"},
             "train": {"steps": 20, "eval_every": 10, "eval_examples": 64}, "layers": [1, 2, 3], "seeds": 2}
    folder = tmp_path / "presets"
    folder.mkdir()
    (folder / "climb.yaml").write_text(yaml.safe_dump({**TINY, "scales": {"quick": {"note": "", "studies": [study]},
                                                                          "paper": {"note": "", "studies": []}}}))
    monkeypatch.setattr(presets, "preset_dir", lambda: folder)
    out = plan_for(presets.load_preset("climb", "quick"))
    assert out["runs"] == 6 and out["groups"] == 3 and out["steps"] == 60


def test_a_shape_estimated_past_the_measuring_time_steps_no_faster_than_the_fastest_measured(tiny):
    """With ``max_seconds=0`` the 2-layer shape is measured and the 1-layer one estimated from multiply-adds; a
    small model is bound by launches (on a GPU) or by per-operation overhead (here), so the estimate is floored at
    the fastest measured step: seed 001's paper-scale plan on an H200 estimated shapes 10x faster than any it
    measured."""
    from depthlab.sweeps.plan import plan_runs

    deep_first = sorted(tiny.runs, key=lambda run: -run.model.layers)  # the 2-layer shape measured, 1 estimated
    detail = plan_runs(deep_first, max_seconds=0)["shapes_detail"]
    measured = [d["seconds_per_step"] for d in detail if d["measured"]]
    estimated = [d["seconds_per_step"] for d in detail if not d["measured"]]
    assert len(measured) == 1 and len(estimated) == 1
    assert estimated[0] >= measured[0]


class _Replays:
    """A stand-in for ``device.GraphedStep`` on the CPU: the step runs eagerly, and the graph "replays" from the
    ``captured_at``-th call on (a compiled step is captured after more warm-up calls than an eager one)."""

    def __init__(self, captured_at: int) -> None:
        self.captured_at, self.calls, self.failure = captured_at, 0, None

    @property
    def replaying(self) -> bool:
        return self.calls >= self.captured_at

    def __call__(self, step, *inputs) -> None:
        step(*inputs)
        self.calls += 1

    def reset(self) -> None:
        self.calls = 0

    def mode(self) -> str:
        return "replays (test)"


@pytest.mark.parametrize("captured_at", [4, 6], ids=["eager-capture", "compiled-capture"])
def test_the_timed_steps_start_once_the_graph_replays(tiny, monkeypatch, captured_at):
    """The steps are timed from the first replay on: a compiled step's capture (after 5 eager warm-up calls, not 3)
    and its compile fall in the warm-up, counted with the build, never in the seconds a step."""
    from depthlab.sweeps import plan

    calls: list[int] = []

    class Recorded(plan.Group):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.graphed = _Replays(captured_at)

        def step(self) -> None:
            super().step()
            calls.append(self.graphed.calls)

    monkeypatch.setattr(plan, "Group", Recorded)
    timing = measure(tiny.runs[:2])
    warm_up = len(calls) - timing.steps_timed
    assert warm_up == captured_at and calls[warm_up - 1] == captured_at  # the first timed step is a replay


def test_auto_compile_is_planned_as_the_eager_step(tiny, monkeypatch):
    """``train.compile: auto`` keeps the faster of two steps: the plan times the eager one (an upper bound), so
    auto's trial never compiles in the middle of the timed steps; ``on`` is planned compiled."""
    from depthlab.sweeps import plan

    planned: list[str] = []

    class Recorded(plan.Group):
        def __init__(self, configs, *args, **kwargs) -> None:
            planned.append(configs[0][0].train.compile)
            super().__init__(configs, *args, **kwargs)

    monkeypatch.setattr(plan, "Group", Recorded)
    monkeypatch.setattr(plan.Group, "set_compiling", lambda self, on: setattr(self, "compiling", on))  # no compile
    for mode in ("auto", "on"):
        runs = [c.model_copy(update={"train": c.train.model_copy(update={"compile": mode})}) for c in tiny.runs[:2]]
        measure(runs)
    assert planned == ["off", "on"]
