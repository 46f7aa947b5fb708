"""Seed 003's lower bounds for recurrent models as certificates (``depthlab construct seed003-recurrent-bounds``):
each bound as its theorem states it, the exact one-way communication complexity (Theorem 2) where N is small enough
to enumerate equal to it, Lemma 1's fooling set for Dyck-(2, 2), and trained models of a store beside the bound."""

from __future__ import annotations

import math

import pytest

from depthlab.config import parse_run
from depthlab.constructions.registry import run
from depthlab.constructions.state_bounds import bound, fooling_set, one_way_bits
from depthlab.errors import UserError
from depthlab.store import Store
from depthlab.sweeps.local import run_local


@pytest.mark.parametrize("n", [4, 8, 12])
def test_index_lookup_needs_n_bits_and_the_enumeration_agrees(n):
    """Theorem 3: mp ≥ N. Alice's 2^N binary strings give 2^N distinct rows against Bob's positions (Fact 3)."""
    assert bound("index_lookup", n) == n
    assert one_way_bits("index_lookup", n) == {"split": n, "distinct_rows": 2**n, "bits": n}


@pytest.mark.parametrize("n", [4, 8, 12])
def test_equality_needs_half_n_bits_at_the_middle_split(n):
    """Theorem 11: mp ≥ N/2 — and N/2 is the exact one-way complexity, reached at the split K = N/2 only."""
    assert bound("eq_one", n) == bound("eq_ncp", n) == n / 2
    assert one_way_bits("eq_random", n) == {"split": n // 2, "distinct_rows": 2 ** (n // 2), "bits": n // 2}


@pytest.mark.parametrize("n", [4, 6, 8])
def test_dyck_has_no_growing_recurrent_bound_but_lemma_1_holds(n):
    """App. E: a recurrent model of constant size suffices (a 7-state DFA): the exact one-way complexity stays at
    3 bits at every contiguous split. Lemma 1: the odd/even partition has a fooling set of size 2^(N-1)."""
    assert one_way_bits("dyck", n)["bits"] == 3 <= math.ceil(math.log2(7))
    assert fooling_set(n) == {"size": 2 ** (n - 1), "fools": True, "bits": n - 1, "lemma_1_bits": n - 1}
    assert fooling_set(7) is None and one_way_bits("dyck", 20) is None  # odd, or too many to enumerate


def test_theorem_5_is_stated_with_its_constants():
    assert bound("dyck", 400, p=32) == pytest.approx(399 / (3 * (32 + math.log2(400))))
    # §6: "even for one-layer recurrent models with hidden states of size 128 with 64 bits of precision, our lower
    # bound applies at lengths over 8k": Theorem 3's mp ≥ N passes 128 · 64 bits at N = 8,192
    assert bound("index_lookup", 8192) == 128 * 64 < bound("index_lookup", 8193)


def test_certificate_puts_trained_models_beside_the_bound(tmp_path):
    store = Store(tmp_path / "store")
    base = {"task": {"name": "index_lookup", "N": 8, "min_length": 4, "eval_size": 32},
            "train": {"optimizer": "adamw", "lr": 0.003, "steps": 3, "eval_every": 3, "eval_examples": 16,
                      "batch_size": 8}}
    configs = [parse_run({**base, "model": {"name": "lstm", "layers": 1, "width": 2}}),
               parse_run({**base, "model": {"name": "transformer", "layers": 1, "width": 16, "heads": 2}})]
    run_local(configs, store)
    out = run("seed003-recurrent-bounds", {"task": "index_lookup", "lengths": [8, 20], "store": str(store.root)})
    assert out["theorem"] == "Theorem 3" and out["bound"] == "mp ≥ N" and "m ≥ N/p" in out["statement"]
    at8, at20 = out["rows"]
    assert at8["N"] == 8 and at8["bound"] == 8 and at8["exact_one_way"]["bits"] == 8 and at20["models"] == []
    (lstm,) = at8["models"]  # the transformer has no recurrent state: not listed
    assert lstm["model"] == "lstm" and lstm["state_bits"] == 2 * 2 * 32 and lstm["above_bound"] is True
    assert lstm["held"] is (lstm["accuracy"] >= 0.95)


@pytest.mark.parametrize("sets,message", [
    ({"task": "retrieval"}, "task: must be one of index_lookup"),
    ({"lengths": [1, 8]}, "lengths: a list of integers from 2"),
    ({"store": "/nowhere/store"}, "store: no depthlab store at /nowhere/store"),
])
def test_mistakes_are_one_line(sets, message):
    with pytest.raises(UserError, match=message):
        run("seed003-recurrent-bounds", sets)


def test_cli_prints_the_theorem_and_a_row_per_length():
    from typer.testing import CliRunner

    from depthlab.cli import app

    result = CliRunner().invoke(app, ["construct", "seed003-recurrent-bounds", "--set", "task=dyck",
                                      "--set", "lengths=[4, 50]"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Theorem 5" in result.stdout and "mH ≥ (N − 1)/(3(p + log₂ N))" in result.stdout
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if line.startswith("│")}
    assert "0.02941" in rows["4"] and rows["4"].split("│")[3].strip() == "3" and "0.4339" in rows["50"]
