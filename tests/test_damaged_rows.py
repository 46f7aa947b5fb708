"""A store edited by hand: every column of a damaged row is checked on read, the row is left out and named (one
warning line naming the store and the row), and the rest of the store is still listed, exported and reported
(README, Reliability). Issue 47, item 5: each case here was an internal error (exit 1) before."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import run_depthlab
from depthlab.config import parse_run
from depthlab.store import Store

RUN = {"task": {"name": "memorization", "n_words": 4, "length": 2, "n_examples": 8},
       "model": {"name": "attention_only", "layers": 1}, "train": {"steps": 4, "eval_every": 2, "batch_size": 8}}


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str, str]:
    """A store of two finished runs (seeds 0 and 1) with their curves, written through the store's own API (no
    training): the root and the two ids."""
    root = tmp_path / "store"
    db = Store(root)
    ids = []
    for seed in (0, 1):
        config = parse_run({**RUN, "seed": seed})
        run_id = db.create_run(config.to_dict(), config.task.name, config.model.name)
        for step in (2, 4):
            db.log_metrics(run_id, step, "eval", {"loss": 1.0 / step, "accuracy": step / 4})
        db.finish_run(run_id, {"accuracy": 1.0, "loss": 0.1, "steps": 4, "chance": 0.25}, step=4)
        ids.append(run_id)
    db.close()
    return root, ids[0], ids[1]


def damage(root: Path, sql: str) -> None:
    with sqlite3.connect(root / "depthlab.sqlite") as conn:
        conn.execute(sql)


CASES = {
    "runs.id NULL": ("UPDATE runs SET id = NULL WHERE id = '{a}'", "a run whose id is 'None' (task 'memorization',",
                     "id is 'None', not text"),
    "final accuracy text": ("UPDATE runs SET final = json_set(final, '$.accuracy', 'high') WHERE id = '{a}'",
                            "run {a}", "final accuracy is 'high', not a number"),
    "config task 5": ("UPDATE runs SET config = json_set(config, '$.task', 5) WHERE id = '{a}'", "run {a}",
                      "config task is '5', not an object"),
    "layers abc": ("UPDATE runs SET config = json_set(config, '$.model.layers', 'abc') WHERE id = '{a}'",
                   "run {a}", "config model.layers is 'abc', not a number"),
    "final chance text": ("UPDATE runs SET final = json_set(final, '$.chance', 'a quarter') WHERE id = '{a}'",
                          "run {a}", "final chance is 'a quarter', not a number"),
    "task NULL": ("UPDATE runs SET task = NULL WHERE id = '{a}'", "run {a}", "task is 'None', not text"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_runs_row_is_left_out_and_named_and_the_rest_is_listed(store, case):
    root, a, b = store
    sql, row, problem = (text.replace("{a}", a) for text in CASES[case])
    damage(root, sql)
    warning = f"warning: store {root}: {row}"
    code, out, err = run_depthlab("runs", "--json", "--store", str(root))
    assert code == 0 and [r["id"] for r in json.loads(out)["runs"]] == [b], err
    assert warning in err and f"{problem}; left out" in err and "Traceback" not in err, err
    code, out, err = run_depthlab("runs", "--store", str(root))
    assert code == 0 and b[:8] in out and a[:8] not in out and warning in err, err
    code, out, err = run_depthlab("metrics", b[:6], "--json", "--store", str(root))
    assert code == 0 and {m["run_id"] for m in json.loads(out)["metrics"]} == {b}, err
    code, out, err = run_depthlab("report", "--examples", "0", "--json", "--out", str(root.parent / "r.html"),
                                  "--store", str(root))
    assert code == 0 and json.loads(out)["runs"] == 1 and warning in err, err


def test_a_metrics_row_without_a_name_is_left_out_and_named(store):
    root, a, _ = store
    damage(root, f"UPDATE metrics SET name = NULL WHERE run_id = '{a}' AND step = 2 AND name = 'loss'")
    code, out, err = run_depthlab("report", "--examples", "0", "--json", "--out", str(root.parent / "r.html"),
                                  "--store", str(root))
    assert code == 0 and json.loads(out)["runs"] == 2, err
    assert f"run {a}: metrics row (step 2, eval, None): name is 'None', not a name; left out" in err, err
    code, out, err = run_depthlab("metrics", "--json", "--store", str(root))
    rows = json.loads(out)["metrics"]
    assert code == 0 and len(rows) == 7 and all(isinstance(m["metric"], str) for m in rows), err


def test_a_store_whose_trigger_deletes_runs_is_named_and_nothing_is_trained(store, tmp_path):
    root, _, _ = store
    damage(root, "CREATE TRIGGER gone AFTER INSERT ON runs BEGIN DELETE FROM runs WHERE id = NEW.id; END")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(json.dumps({**RUN, "sweep": {"seed": [5, 6]}}))
    code, out, err = run_depthlab("sweep", str(sweep), "--store", str(root), "--json")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"error: store {root}: run " in err and "a trigger or another program deletes runs" in err, err
