"""Every preset's paper scale against its seed (``settings:`` in each preset, ``depthlab.sweeps.settings``): each
field a paper scale sets holds the seed's value or the one the documented table lists with a reason; each listed
``--set`` gives the seed's own; the table in docs/how-to/presets.md is the generated one; ``--explain`` and
``--list --json`` show the same data; a preset that drifts from its settings is caught."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from depthlab.cli import app
from depthlab.errors import UserError
from depthlab.sweeps import presets, settings

runner = CliRunner()


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.stdout

SETTINGS_PAGE = Path(__file__).parent.parent / "docs" / "how-to" / "presets.md"  # "Seed settings against ours"
TABLE = re.compile(r"<!-- settings-table:[^\n]*-->\n(.*?)<!-- /settings-table -->", re.S)


def trained(name: str) -> bool:
    return bool(presets.read_preset(name)["scales"]["paper"].get("sweeps") or
                presets.read_preset(name)["scales"]["paper"].get("studies"))


@pytest.mark.parametrize("name", [n for n in presets.preset_names() if trained(n)])
def test_every_paper_scale_holds_its_seed_settings(name):
    assert settings.settings(name), f"{name}: a preset that trains needs settings"
    assert settings.check(name) == []


def test_the_documented_table_is_the_generated_one():
    found = TABLE.search(SETTINGS_PAGE.read_text(encoding="utf-8"))
    assert found, f"{SETTINGS_PAGE}: the settings table's markers are missing"
    assert found.group(1) == settings.markdown(presets.preset_names())


def test_the_table_lists_every_difference_with_its_reason_and_seed_set():
    table = settings.markdown(presets.preset_names())
    assert "| seed001-depth, seed001-heads, seed001-min-depth, seed001-template-attention | optimizer " \
           "(task=[memorization, template]) | sgd (seed 001 §9.1) | adamw |" in table  # IC-QA, IC-TM: SGD (issue 43)
    assert "`--set train.optimizer=sgd` `--set train.lr=0.05` `--set train.grad_clip=1.0`" in table
    assert "| seed001-depth, seed001-min-depth | initialisation (task=ictm) |" in table
    assert "| seed001-heads | initialisation (task=ictm, layers=4) |" in table  # paper-first-stream at 4 layers
    assert "`--set model.init=paper`" in table
    assert "| sequences to memorize | e (no number) (seed 001 §9.1) | 1000 |" in table
    for line in table.splitlines()[2:]:
        assert line.split(" | ")[4].strip(), line  # every row has its why


def seed_runs(name: str, overrides: list[str]) -> list:
    return presets.load_preset(name, "paper", overrides).every_run


def test_the_seeds_own_runs_from_the_listed_set_changes():
    sgd = seed_runs("seed001-depth", ["train.optimizer=sgd", "train.lr=0.05", "train.grad_clip=1.0",
                                      "train.warmup_steps=0"])
    assert {(r.train.optimizer, r.train.warmup_steps) for r in sgd} == {("sgd", 0)}
    memorization = [r for r in seed_runs("seed001-depth", ["model.qk_scale=1.0"]) if r.task.name == "memorization"]
    assert {r.model.qk_scale for r in memorization} == {1.0}


def test_changed_paper_scales_are_the_seeds():
    """The settings this issue made the seed's own (seed 002 §6, §7.1, §8.1, §9.1; seed 003 App. H; seed 004)."""
    for name, examples in (("seed002-layers", 1 << 20), ("seed002-circuits", 262144), ("seed002-emergence", 262144)):
        runs = presets.load_preset(name, "paper").runs
        assert {(r.model.positional, r.train.train_examples) for r in runs} == {("none", examples)}, name
    assert presets.load_preset("seed002-circuits", "paper").options == {"accept": "below"}
    dyck = presets.load_preset("seed003-dyck", "paper").runs
    assert {r.model.heads for r in dyck if r.model.name == "transformer"} == {4, 8}
    assert {r.model.layers for r in dyck if r.model.name == "mamba"} == {1, 2, 4, 6}
    assert {r.model.layers for r in presets.load_preset("seed003-dyck", "quick").runs if r.model.name == "mamba"} \
        == {1}  # quick and medium: one point of the paper grid
    equality = presets.load_preset("seed003-equality", "paper").runs
    ncp = [r for r in equality if r.task.name == "eq_ncp"]
    assert {r.task.eval_size for r in ncp} == {5000}
    assert {r.model.name for r in ncp} == {"transformer", "lstm", "dss", "mamba", "linear_transformer", "retnet"}
    assert len({r.train.lr for r in presets.load_preset("seed003-mamba-width", "paper").runs}) == 7
    (essay,) = {(r.model.width, r.model.heads, r.model.d_head) for r in presets.load_preset(
        "seed004-induction", "paper").runs}
    assert essay == (256, 8, 32)


def test_explain_json_and_table():
    out = json.loads(cli("reproduce", "seed001-depth", "--scale", "paper", "--explain", "--json"))
    assert out["preset"] == "seed001-depth" and out["scale"] == "paper"
    sgd, optimizer = (s for s in out["settings"] if s["setting"] == "optimizer")
    assert (sgd["where"], sgd["ours"], sgd["differs"]) == ({"task.name": ["icqa", "ictm"]}, "sgd", False)  # issue 43
    assert optimizer | {"why": None} == {
        "setting": "optimizer", "field": "train.optimizer", "where": {"task.name": ["memorization", "template"]},
        "seed": "sgd", "section": "seed 001 §9.1", "quote": optimizer["quote"], "ours": "adamw", "differs": True,
        "why": None, "from": "seed001-depth",
        "seed_set": ["train.optimizer=sgd", "train.lr=0.05", "train.grad_clip=1.0", "train.warmup_steps=0"]}
    assert optimizer["why"].startswith("memorization: AdamW agrees")
    same = next(s for s in out["settings"] if s["setting"] == "words (memorization)")
    assert same["differs"] is False and same["seed"] == same["ours"] == "500"
    shown = cli("reproduce", "seed002-emergence", "--explain")
    assert "seed002-emergence --scale paper against its seed" in shown and "§9.1" in shown and "= the seed" in shown
    listed = json.loads(cli("reproduce", "--list", "--json"))
    by_name = {p["name"]: p for p in listed["presets"]}
    assert by_name["seed001-depth"]["settings"] == out["settings"]
    markdown = cli("reproduce", "--explain", "--markdown")
    assert markdown == settings.markdown(presets.preset_names())


def test_a_preset_that_drifts_from_its_settings_is_caught(tmp_path, monkeypatch):
    folder = tmp_path / "presets"
    shutil.copytree(presets.preset_dir(), folder)
    monkeypatch.setattr(presets, "preset_dir", lambda: folder)
    path = folder / "seed002-circuits.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["scales"]["paper"]["sweeps"][0]["train"]["lr"] = 0.003  # §7.1 says 1e-3
    raw["scales"]["paper"]["sweeps"][0]["model"]["d_mlp"] = 256  # a field no setting covers
    raw["scales"]["paper"]["options"] = {"accept": "within"}
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    problems = settings.check("seed002-circuits")
    assert any("'learning rate' (train.lr): runs hold ['0.003']" in p for p in problems)
    assert any("field model.d_mlp is set by the paper scale but no setting covers it" in p for p in problems)
    assert any("options.accept" in p and "within" in p for p in problems)
    raw["settings"].append({"name": "optimizer", "field": "train.optimizer", "seed": "sgd", "section": "§ x",
                            "quote": "q", "ours": "adamw"})
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    with pytest.raises(UserError, match=r"seed002-circuits.settings\[\d+\].why: required"):
        settings.settings("seed002-circuits")
    raw["settings"][-1].update(why="because")
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    with pytest.raises(UserError, match="seed_set: required"):
        settings.settings("seed002-circuits")
    raw["settings"][-1].update(seed_set=["train.lr=0.5"])  # a --set that does not give the seed's optimizer
    path.write_text(yaml.safe_dump(raw, allow_unicode=True))
    problems = settings.check("seed002-circuits")
    assert any("--set train.lr=0.5 gives" in p and "not the seed's sgd" in p for p in problems)
