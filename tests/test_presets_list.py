"""``depthlab reproduce --list`` and the seed figures of each preset: every preset file appears with the figures it
draws and the size of its scales; a preset file without ``figures:`` gets them from ``reproduces``; a wrong
``figures:`` is a one-line error; ``reproduce`` records which preset drew which figure (the report's gallery)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from depthlab.captions import CAPTIONS, figures_in
from depthlab.cli import app
from depthlab.errors import UserError
from depthlab.store import Store, reproductions
from depthlab.sweeps import presets

runner = CliRunner()


def listed(*extra: str) -> dict:
    result = runner.invoke(app, ["reproduce", "--list", "--json", *extra])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.strip().splitlines()) == 1  # one JSON object
    return json.loads(result.stdout)


def test_list_json_has_every_preset_with_its_figures_and_scales():
    out = listed()
    assert [p["name"] for p in out["presets"]] == presets.preset_names()
    by_name = {p["name"]: p for p in out["presets"]}
    assert by_name["seed001-depth"]["figures"] == ["seed 001 Figure 2"]
    assert by_name["seed002-emergence"]["figures"] == ["seed 002 Figure 6", "seed 002 Figure 7"]
    assert by_name["seed003-widths"]["scales"]["quick"] == {
        "size": "no training (constructions)", "runs": 0, "note": by_name["seed003-widths"]["scales"]["quick"]["note"]}
    for p in out["presets"]:
        assert p["figures"] and all(f in CAPTIONS for f in p["figures"]), p["name"]
        assert set(p["scales"]) >= {"quick", "paper"}, p["name"]
        for scale in p["scales"].values():
            assert isinstance(scale["runs"], int) and scale["size"]
    quick = presets.load_preset("seed001-depth", "quick")
    assert by_name["seed001-depth"]["scales"]["quick"]["runs"] == len(quick.runs) == 36
    assert by_name["seed001-depth"]["scales"]["quick"]["size"] == "36 runs"


def test_list_table_names_every_preset_and_figure():
    result = runner.invoke(app, ["reproduce", "--list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in presets.preset_names():
        assert name in result.stdout
    assert "seed 002 Figure 4" in result.stdout and "quick: 24 runs" in result.stdout


def test_a_new_preset_file_appears_in_the_list(tmp_path, monkeypatch):
    """A preset added by dropping a file (no ``figures:``): its figures come from ``reproduces``."""
    folder = tmp_path / "presets"
    shutil.copytree(presets.preset_dir(), folder)
    raw = yaml.safe_load((folder / "seed001-depth.yaml").read_text())
    raw.pop("figures")
    raw["reproduces"] = "seed 001 Figures 4-6 (§9.2)"
    (folder / "seed001-new.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(presets, "preset_dir", lambda: folder)
    new = {p["name"]: p for p in listed()["presets"]}["seed001-new"]
    assert new["figures"] == ["seed 001 Figure 4", "seed 001 Figure 5", "seed 001 Figure 6"]
    assert new["scales"]["quick"]["runs"] == 36


@pytest.mark.parametrize("figures,needle", [
    ("seed 001 Figure 2", "must be a non-empty list"),
    ([], "must be a non-empty list"),
    (["seed 001 Figure 99"], "unknown seed figure 'seed 001 Figure 99'; allowed: seed 001 Figure 2"),
])
def test_a_wrong_figures_list_is_a_one_line_error(tmp_path, monkeypatch, figures, needle):
    folder = tmp_path / "presets"
    folder.mkdir()
    raw = yaml.safe_load((presets.preset_dir() / "seed001-depth.yaml").read_text())
    raw["figures"] = figures
    (folder / "bad.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(presets, "preset_dir", lambda: folder)
    with pytest.raises(UserError, match=r"^bad\.figures: ") as e:
        presets.load_preset("bad", "quick")
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_figures_read_from_reproduces_text():
    assert figures_in("seed 003 Figures 2 and 4: x") == ["seed 003 Figure 2", "seed 003 Figure 4"]
    assert figures_in("seed 003 Theorems 1 and 6 (width O(log N), Lemma 2)") == [
        "seed 003 Theorem 1", "seed 003 Theorem 6", "seed 003 Lemma 2"]
    assert figures_in("seed 001 §6.1 (Figure 2): memorization") == ["seed 001 Figure 2"]
    assert figures_in("seed 001 §7: nested in-context QA") == ["seed 001 §7"]
    assert figures_in("seed 002 Figure 3 and seed 001 Figure 3") == ["seed 002 Figure 3", "seed 001 Figure 3"]
    assert figures_in("seed 009 Figure 1") == []


def test_reproduce_without_a_name_is_exit_2_one_line(depthlab_main):
    code, _, err = depthlab_main("reproduce")
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: NAME: ") and "--list" in lines[0]


def test_reproduce_records_which_preset_drew_which_figure(tmp_path):
    root = tmp_path / "store"
    args = ["reproduce", "seed001-depth", "--store", str(root), "--json", "--set", "train.steps=10",
            "--set", "train.eval_every=5", "--set", "sweep.seed=[0]", "--set", "sweep.model.layers=[1]"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    [entry] = reproductions(root)
    assert entry["preset"] == "seed001-depth" and entry["scale"] == "quick"
    assert entry["figures"] == ["seed 001 Figure 2"]
    assert entry["files"] == [printed["figure"]] and Path(entry["files"][0]).is_file()
    assert entry["overrides"] == ["train.steps=10", "train.eval_every=5", "sweep.seed=[0]", "sweep.model.layers=[1]"]
    assert entry["command"].startswith("depthlab reproduce seed001-depth --scale quick --set train.steps=10")
    with Store(root) as store:
        assert sorted(entry["run_ids"]) == sorted(r["id"] for r in store.find_runs())
    assert len(entry["run_ids"]) == 4  # the four tasks at one depth and one seed



def test_every_preset_title_names_the_seed_figures_it_draws():
    """Issue 31: the seed's figure number in every figure's and table's title (``preset_title``, which
    ``reproduce`` passes to every summary), each seed and kind said once: "… (seed 001 Figures 4-7)"."""
    from depthlab.api.reproduce import preset_title
    from depthlab.captions import figures_text

    for name in presets.preset_names():
        preset = presets.load_preset(name, "quick")
        said = figures_text(preset.figures)
        assert preset.figures and preset_title(preset) == f"{preset.title} ({said})", name
        for key in preset.figures:
            seed, kind = key.split()[1:3]
            assert f"seed {seed} " in said and kind.strip("§0123456789.")[:6] in said, (name, said)  # Hypothes(is|es)
    titles = {name: preset_title(presets.load_preset(name, "quick")).rsplit(" (", 1)[1]
              for name in ("seed001-heads", "seed002-information-flow", "seed001-nested", "seed004-induction")}
    assert titles == {"seed001-heads": "seed 001 Figures 4-7)",
                      "seed002-information-flow": "seed 002 Figures 3 and 8, Theorem 1)",
                      "seed001-nested": "seed 001 §7)", "seed004-induction": "seed 004 Results 1 and 2)"}
