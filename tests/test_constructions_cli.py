"""``depthlab construct``: listing, running, JSON output, and one-line errors naming the field."""

import json

import pytest
from typer.testing import CliRunner

from depthlab.constructions.registry import CONSTRUCTIONS
from depthlab.errors import UserError


@pytest.fixture
def app():
    from depthlab.cli import app

    return app


def invoke(app, *args):
    return CliRunner().invoke(app, ["construct", *args])


def test_list_json(app):
    result = invoke(app, "--list", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"constructions"}
    names = [c["name"] for c in data["constructions"]]
    assert names == list(CONSTRUCTIONS)
    for c in data["constructions"]:
        assert set(c) == {"name", "theorem", "parameters"}
    params = {c["name"]: c["parameters"] for c in data["constructions"]}
    assert params["seed001-icqa"]["k"] == 3 and "l" in params["seed001-template"]
    assert params["seed001-ictm"]["k"] == 2 and params["seed002-information-flow"]["D"] == 10


def test_list_table(app):
    result = invoke(app, "--list")
    assert result.exit_code == 0 and "seed001-icqa" in result.stdout


@pytest.mark.parametrize("name,sets", [
    ("seed001-memorization", []),
    ("seed001-icqa", ["--set", "k=2", "--set", "n_q=3", "--set", "n_a=3"]),
    ("seed001-template", ["--set", "l=3", "--set", "n_symbols=4"]),
    ("seed001-ictm", ["--set", "k=2", "--set", "l=2", "--set", "n_symbols=3", "--set", "n_a=2"]),
    ("seed001-nested-icqa", ["--set", "k=2", "--set", "hops=2", "--set", "n_symbols=6", "--set", "shuffle=true"]),
    ("seed001-nested-icqa", ["--set", "hops=2", "--set", "n_symbols=6", "--set", "depth=compact"]),
])
def test_construct_json(app, name, sets):
    result = invoke(app, name, *sets, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # exactly one JSON object
    assert {"construction", "theorem", "layers", "heads", "width", "examples", "exhaustive", "accuracy"} <= set(data)
    assert data["construction"] == name
    assert data["accuracy"] == 1.0 and data["exhaustive"] is True
    assert len(data["heads"]) == data["layers"]


def test_sampled_when_large(app):
    result = invoke(app, "seed001-icqa", "--set", "k=6", "--set", "n_q=20", "--set", "n_a=20",
                    "--set", "examples=500", "--json")
    data = json.loads(result.stdout)
    assert data["exhaustive"] is False and data["examples"] == 500 and data["accuracy"] == 1.0


def test_one_layer_bound_json(app):
    result = invoke(app, "seed001-one-layer-bound", "--set", "task=icqa", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["dependent_set"] == ["a → 0 b → 1 a → _0", "a → 1 b → 0 b → _0", "a → 1 b → 0 a → _1",
                                     "a → 0 b → 1 b → _1"]
    assert data["coefficients"] == [1, 1, -1, -1]
    assert data["models_tried"] >= 9 and data["max_deviation"] < 1e-12 and data["accuracy_bound"] == 0.75


def test_information_flow_json(app):
    result = invoke(app, "seed002-information-flow", "--set", "D_max=30", "--set", "N=2", "--json")
    data = json.loads(result.stdout)
    assert len(data["rows"]) == 30 and data["layers_any_equals_closed_form"]
    assert data["layers_last_at_least_closed_form"]


@pytest.mark.parametrize("args,field", [
    (["nope"], "construction"),
    (["seed001-icqa", "--set", "kk=2"], "kk"),
    (["seed001-icqa", "--set", "k=two"], "k"),
    (["seed001-icqa", "--set", "k"], "--set k"),
    (["seed001-icqa", "--set", "k=9"], "k must be at most n_q"),
    (["seed001-one-layer-bound", "--set", "task=ictm"], "task"),
    (["seed001-template", "--set", "l=0"], "l must be at least 1"),
    (["seed001-nested-icqa", "--set", "depth=deep"], "depth: must be one of paper, compact"),
    (["seed001-nested-icqa", "--set", "hops=4"], "k*(hops+1) must be at most n_symbols"),
    ([], "construction"),
])
def test_errors_name_the_field(app, args, field):
    result = invoke(app, *args)
    assert isinstance(result.exception, UserError)
    assert field in str(result.exception)
    assert "\n" not in str(result.exception)


def test_wired_into_depthlab():
    """depthlab's CLI registers the command, and ``depthlab construct --list --json`` works end to end."""
    from depthlab import cli

    names = {c.name or c.callback.__name__ for c in cli.app.registered_commands}
    assert "construct" in names, f"depthlab.cli does not register `construct` (it has {sorted(names)})"
    result = CliRunner().invoke(cli.app, ["construct", "--list", "--json"])
    assert result.exit_code == 0 and "constructions" in json.loads(result.stdout)
