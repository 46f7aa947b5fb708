"""Seed 002 tasks: the minimal vector formulation (§6-§7), token retrieval (§3.1), conditional retrieval (§3.1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from depthlab.config import parse_run
from depthlab.errors import UserError
from depthlab.tasks import TASKS

SMALL = {"retrieval_vec": {"N": 3, "D": 3}, "retrieval": {"N": 3, "D": 3}, "conditional_retrieval": {}}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_sampling_is_reproducible(name):
    task = TASKS[name](**SMALL[name])
    a, b = task.sample(64, np.random.default_rng(3)), task.sample(64, np.random.default_rng(3))
    c = task.sample(64, np.random.default_rng(4))
    assert np.array_equal(a.inputs, b.inputs) and np.array_equal(a.targets, b.targets)
    assert all(np.array_equal(a.meta[k], b.meta[k]) for k in a.meta)
    assert not np.array_equal(a.inputs, c.inputs)
    assert a.inputs.shape[:2] == (64, task.seq_len)
    assert task.section.startswith("seed 002")
    rows = np.arange(64)[:, None]
    for role, pos in task.roles(a).items():  # every role is a position of the sequence
        assert pos.shape[0] == 64 and pos.min() >= 0 and pos.max() < task.seq_len, role
    assert set(task.roles(a)) == set(task.role_names)
    assert task.decode(a, 0) and len(task.example_tokens(a, 0)[0]) == task.seq_len
    del rows


@pytest.mark.parametrize("target", ["ic", "non_ic"])
def test_vector_formulation_layout_and_targets(target):
    task = TASKS["retrieval_vec"](N=4, D=3, K=4, target=target)
    batch = task.sample(200, np.random.default_rng(0))
    N, D, K = 4, 3, 4
    assert task.seq_len == N * (2 * D + 1) and task.input_dim == 2 * K  # "N(2D+1) vectors of dimension 2K"
    assert batch.inputs.shape == (200, task.seq_len, 2 * K) and batch.inputs.dtype == np.float32
    steps = task.target_steps
    assert steps == ([1, 2, 3] if target == "ic" else [3])
    assert batch.targets.shape == (200, N, len(steps) * K) and task.n_outputs == len(steps) * K
    assert task.read_positions == list(range(2 * N * D, task.seq_len))
    roles = task.roles(batch)
    rows = np.arange(200)[:, None]
    symbol = batch.inputs[..., :K]
    vec = lambda role: symbol[rows, roles[role]]  # noqa: E731  [B, N, K]
    assert np.array_equal(vec("first of pair 1"), vec("query"))  # x_0
    for k in range(1, D):
        assert np.array_equal(vec(f"second of pair {k}"), vec(f"first of pair {k + 1}"))  # x_k twice
    blocks = batch.targets.reshape(200, N, len(steps), K)
    for i, k in enumerate(steps):
        assert np.array_equal(blocks[:, :, i], vec(f"second of pair {k}"))
    # positional features: the same rotary table in every example; symbols fresh N(0, 1)
    assert np.array_equal(batch.inputs[0, :, K:], batch.inputs[1, :, K:])
    assert abs(symbol.mean()) < 0.05 and abs(symbol.std() - 1) < 0.05
    # steps from D down to 1, each step's pairs a permutation of the chains; queries a permutation too
    level = batch.meta["symbol"] % (D + 1)
    chain = batch.meta["symbol"] // (D + 1)
    for s in range(D, 0, -1):
        block = slice(2 * N * (D - s), 2 * N * (D - s + 1))
        assert (level[:, block][:, 0::2] == s - 1).all() and (level[:, block][:, 1::2] == s).all()
        assert (np.sort(chain[:, block][:, 0::2], axis=1) == np.arange(N)).all()
    assert (np.sort(batch.meta["query_chain"], axis=1) == np.arange(N)).all()
    assert len({tuple(r) for r in batch.meta["slot"][:, 0]}) > 10  # shuffled, not a fixed order


def test_vector_partial_losses():
    task = TASKS["retrieval_vec"](N=2, D=3)
    batch = task.sample(4000, np.random.default_rng(0))
    y = torch.from_numpy(batch.targets)[None]
    exact = task.partial_losses(y, y)
    assert set(exact) == {"x1", "x2", "x3"} and all(float(v[0]) == 0.0 for v in exact.values())
    zero = task.partial_losses(torch.zeros_like(y), y)  # predicting zero costs the variance, 1
    assert all(abs(float(v[0]) - 1.0) < 0.05 for v in zero.values())
    non_ic = TASKS["retrieval_vec"](N=2, D=3, target="non_ic")
    y = torch.from_numpy(non_ic.sample(10, np.random.default_rng(0)).targets)[None]
    assert set(non_ic.partial_losses(y, y)) == {"x3"}


def test_vector_positional_options_and_errors():
    assert TASKS["retrieval_vec"](positional="onehot", N=2, D=2).input_dim == 4 + 10
    assert TASKS["retrieval_vec"](positional="none").input_dim == 4
    with pytest.raises(ValidationError, match="even"):
        TASKS["retrieval_vec"](K=3)
    with pytest.raises(UserError, match=r"task\.target"):
        parse_run({"task": {"name": "retrieval_vec", "target": "both"}})


def follow_pairs(inputs: np.ndarray, n_chains: int, depth: int) -> np.ndarray:
    """Reference solver for the token retrieval problem: follow the pairs step by step from the query."""
    out = []
    for row in inputs:
        token = row[-1]
        for s in range(1, depth + 1):
            block = row[2 * n_chains * (depth - s) : 2 * n_chains * (depth - s + 1)]
            firsts = np.flatnonzero(block[0::2] == token)
            assert len(firsts) == 1
            token = block[2 * firsts[0] + 1]
        out.append(token)
    return np.array(out)


def test_token_retrieval_follows_the_chain():
    task = TASKS["retrieval"](N=3, D=4, n_symbols=20)
    batch = task.sample(300, np.random.default_rng(1))
    assert task.seq_len == 2 * 3 * 4 + 1
    assert np.array_equal(follow_pairs(batch.inputs, 3, 4), batch.targets)
    assert all(len(set(r)) == 3 * 5 for r in batch.inputs[:, :-1])  # N(D+1) distinct symbols, each twice but x_D
    assert task.chance == pytest.approx(1 / 3)
    induction = TASKS["retrieval"](N=1, D=1, n_symbols=5).sample(5, np.random.default_rng(0))
    assert (induction.inputs[:, 0] == induction.inputs[:, 2]).all()  # a b a -> b: the induction problem


@pytest.mark.parametrize(("N", "D", "n_symbols"), [(2, 1, 5), (2, 2, 6), (1, 3, 4), (3, 1, 6)])
def test_token_retrieval_enumeration(N, D, n_symbols):
    task = TASKS["retrieval"](N=N, D=D, n_symbols=n_symbols)
    full = task.enumerate()
    assert len(full) == task.dataset_size()
    rows = {tuple(r) for r in full.inputs}
    assert len(rows) == len(full)  # distinct sequences
    assert np.array_equal(follow_pairs(full.inputs, N, D), full.targets)
    sample = task.sample(200, np.random.default_rng(0))
    assert {tuple(r) for r in sample.inputs} <= rows
    with pytest.raises(ValidationError, match="N\\*\\(D\\+1\\)"):
        TASKS["retrieval"](N=3, D=3, n_symbols=11)


def solve_conditional(task, inputs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reference solver: at each step the fact whose every key symbol is a value already retrieved.

    Returns the answers and how many step-D facts a latest-parent-only reader could not tell apart; the step
    indices of the last fact's parents are left in ``solve_conditional.last_parents``.
    """
    W, blank = task.width, task.blank_id
    answers, ambiguous, parent_steps = [], [], []
    for row in inputs:
        known, latest = {int(row[-1])}, int(row[-1])
        chain = [latest]
        start = 0
        blocks = {}
        for s in range(task.D, 0, -1):
            k = task.facts_in_step(s)
            blocks[s] = row[start : start + k * W].reshape(k, W)
            start += k * W
        for s in range(1, task.D + 1):
            keys = [set(int(t) for t in fact[:-1] if t != blank) for fact in blocks[s]]
            match = [i for i, key in enumerate(keys) if key <= known]
            assert len(match) == 1
            if s == task.D:
                ambiguous.append(sum(int(fact[-2]) == latest for fact in blocks[s]))
                order = {v: i for i, v in enumerate(chain)}
                parent_steps.append(tuple(sorted(order[int(t)] for t in blocks[s][match[0], :-1] if t != blank)))
            latest = int(blocks[s][match[0], -1])
            known.add(latest)
            chain.append(latest)
        answers.append(latest)
    solve_conditional.last_parents = parent_steps
    return np.array(answers), np.array(ambiguous)


@pytest.mark.parametrize("dag", ["recent", "random"])
@pytest.mark.parametrize(("N", "parents"), [(2, 2), (1, 3), (3, 1)])
def test_conditional_retrieval_is_a_dag_of_lookups(dag, N, parents):
    task = TASKS["conditional_retrieval"](N=N, D=4, parents=parents, dag=dag, n_symbols=40)
    batch = task.sample(200, np.random.default_rng(2))
    answers, ambiguous = solve_conditional(task, batch.inputs)
    assert np.array_equal(answers, batch.targets)
    if parents >= 2:
        assert (ambiguous == 2).all()  # with decoys the latest parent alone does not decide
        assert task.chance == pytest.approx(1 / (2 * N))
    else:
        assert (ambiguous == 1).all() and task.seq_len == 2 * N * 4 + 1  # parents=1 is the retrieval problem
    roles = task.roles(batch)
    rows = np.arange(200)[:, None]
    assert np.array_equal(batch.inputs[rows, roles["value of fact 4"]][:, 0], batch.targets)
    assert np.array_equal(batch.inputs[rows, roles[f"key {parents} of fact 1"]][:, 0], batch.inputs[:, -1])


def test_conditional_retrieval_parents_and_errors():
    task = TASKS["conditional_retrieval"](N=1, D=5, parents=3, dag="random", decoys=False, n_symbols=8)
    batch = task.sample(500, np.random.default_rng(0))
    answers, _ = solve_conditional(task, batch.inputs)
    assert np.array_equal(answers, batch.targets)
    # step 5 depends on v4 and two of v0..v3, drawn per example: several different key sets occur
    parents = solve_conditional.last_parents
    assert all(len(p) == 3 and p[-1] == 4 for p in parents)
    assert len(set(parents)) == 6  # v4 and any 2 of v0..v3: C(4, 2) key sets
    with pytest.raises(ValidationError, match="n_symbols must be at least"):
        TASKS["conditional_retrieval"](N=2, D=3, n_symbols=9)
