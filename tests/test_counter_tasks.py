"""Issue 45, item 1: stream version 2 for every task. Each task's ``sample_counter`` is deterministic given (seed,
step, example) and differs across seeds and steps, has the shapes and dtypes of its ``sample``, and follows the
task's definition: uniform draws where the task says so, labels equal to the task's own label function or reference
solver, lengths and masks right. (IC-QA, index lookup and MQAR: ``test_counter_stream.py``.)"""

import numpy as np
import pytest
import torch

from depthlab.tasks import TASKS
from depthlab.tasks.counter import Counter, seed_keys
from test_seed003_tasks import ncp_reference

# One small setting per task: what the generic tests sample.
SETTINGS = {
    "memorization": {"n_words": 6, "length": 3, "n_examples": 40},
    "template": {"l": 3, "n_symbols": 10},
    "ictm": {"k": 2, "l": 3, "n_symbols": 10, "n_a": 5},
    "icqa": {"k": 3, "n_q": 8, "n_a": 8},
    "nested_icqa": {"k": 2, "hops": 2, "n_symbols": 9},
    "conditional_retrieval": {"N": 2, "D": 3, "parents": 2, "dag": "random"},
    "retrieval": {"N": 3, "D": 2, "n_symbols": 12},
    "retrieval_vec": {"N": 3, "D": 2, "K": 4},
    "induction": {"n_tokens": 6, "length": 10},
    "index_lookup": {"N": 12},
    "mqar": {"pairs": 4, "n_keys": 10, "n_values": 6},
    "dyck": {"N": 12},
    "eq_random": {"N": 12},
    "eq_one": {"N": 12, "alphabet": 16},
    "eq_ncp": {"N": 12, "alphabet": 4},
    "nearest_neighbor": {"N": 8, "d": 6},
}


COUNTED = sorted(name for name in SETTINGS if TASKS[name].counter_sampling)


def counter_batch(task, seeds, steps, size=64):
    return task.sample_counter(Counter(seed_keys(torch.tensor(seeds)), torch.tensor(steps), size))


def flat(task, size, seed=0, step=0):
    """One run's batch as numpy arrays [size, …]."""
    x, y = counter_batch(task, [seed], [step], size)
    return x[0].numpy(), y[0].numpy()


def chi_square_ok(counts, expected) -> bool:
    """Every count within five standard deviations of its expectation."""
    counts, expected = np.asarray(counts), np.asarray(expected, dtype=float)
    return bool(np.all(np.abs(counts - expected) < 5 * np.sqrt(expected)))


def test_every_registered_task_has_the_counter_stream_and_a_setting_here():
    assert sorted(SETTINGS) == sorted(TASKS) and sorted(TASKS) == COUNTED


@pytest.mark.parametrize("name", COUNTED)
def test_a_run_s_batch_depends_on_its_seed_and_step_only(name):
    task = TASKS[name](**SETTINGS[name])
    x_group, y_group = counter_batch(task, [3, 5, 2**40 + 5], [7, 7, 7], 16)
    x_alone, y_alone = counter_batch(task, [5], [7], 16)
    assert torch.equal(x_group[1], x_alone[0]) and torch.equal(y_group[1], y_alone[0])
    assert torch.equal(counter_batch(task, [5], [7], 16)[0], x_alone)  # the same again
    assert not torch.equal(x_group[0], x_group[1]) and not torch.equal(x_group[1], x_group[2])  # other seeds
    assert not torch.equal(counter_batch(task, [5], [8], 16)[0], x_alone)  # the next step


@pytest.mark.parametrize("name", COUNTED)
def test_counter_batches_have_the_shapes_and_dtypes_of_the_task_s_own_batches(name):
    task = TASKS[name](**SETTINGS[name])
    x, y = counter_batch(task, [0, 1], [0, 0], 5)
    own = task.sample(5, np.random.default_rng(0), "train")
    assert x.shape == (2, *own.inputs.shape) and y.shape == (2, *own.targets.shape)
    assert x.numpy().dtype == own.inputs.dtype and y.numpy().dtype == own.targets.dtype
    if not task.input_dim:
        assert x.min() >= 0 and x.max() < task.vocab_size


def test_memorization_draws_the_stored_examples_uniformly():
    task = TASKS["memorization"](**SETTINGS["memorization"])
    x, y = flat(task, 8000)
    stored = {tuple(row): label for row, label in zip(task.dataset.inputs.tolist(), task.dataset.targets.tolist(),
                                                      strict=True)}
    assert all(stored[tuple(row)] == label for row, label in zip(x.tolist(), y.tolist(), strict=True))
    assert chi_square_ok(np.bincount(y, minlength=40), np.full(40, 8000 / 40))


@pytest.mark.parametrize("first", [None, 2])
def test_induction_examples_repeat_one_bigram_and_a_occurs_nowhere_else(first):
    task = TASKS["induction"](**SETTINGS["induction"], first=first)
    x, y = flat(task, 6000)
    tokens = np.concatenate([x[:, 1:], y[:, None]], 1) - 4  # t_0 … t_{n-1}
    a, b = tokens[:, -2], tokens[:, -1]
    assert (x[:, 0] == 1).all() and (a != b).all()
    seen = tokens[:, :-2] == a[:, None]
    assert (seen.sum(1) == 1).all()  # A once before the end, and B right after it
    p = seen.argmax(1)
    assert (tokens[np.arange(len(p)), p + 1] == b).all()
    assert (p == 2).all() if first == 2 else chi_square_ok(np.bincount(p, minlength=7), np.full(7, 6000 / 7))
    others = tokens[:, :-2][~seen & (np.arange(8) != (p + 1)[:, None])]  # neither A nor the B after it
    assert chi_square_ok(np.bincount(a, minlength=6), np.full(6, 1000))
    assert len(np.unique(others)) == 6  # every word, A of other examples included


def follow_chains(pairs, start, steps):
    """The reference solver of retrieval: from ``start`` follow the pairs (first → second) ``steps`` times."""
    value = start.copy()
    for _ in range(steps):
        hit = pairs[:, :, 0] == value[:, None]
        assert (hit.sum(1) == 1).all()  # every symbol opens exactly one pair
        value = pairs[np.arange(len(value)), hit.argmax(1), 1]
    return value


def test_retrieval_targets_are_the_chain_ends_and_the_symbols_uniform_and_distinct():
    task = TASKS["retrieval"](**SETTINGS["retrieval"])
    x, y = flat(task, 6000)
    pairs = x[:, :-1].reshape(len(x), -1, 2)
    assert np.array_equal(follow_chains(pairs, x[:, -1], 2), y)
    symbols = np.concatenate([pairs[:, 3:, 0], pairs[:, 3:, 1], pairs[:, :3, 1]], 1)  # each symbol of a chain once
    assert (np.diff(np.sort(symbols, 1), axis=1) > 0).all()
    assert np.isin(pairs[:, :3, 0], pairs[:, 3:, 1]).all()  # step 2 starts where step 1 ended
    assert chi_square_ok(np.bincount(symbols.ravel(), minlength=12), np.full(12, 9 * 6000 / 12))
    queried = (pairs[:, 3:, 0] == x[:, -1:]).argmax(1)  # the query's slot in step 1: uniform
    assert chi_square_ok(np.bincount(queried, minlength=3), np.full(3, 2000))


def test_retrieval_vec_symbols_are_standard_normal_and_targets_the_query_s_chain():
    task = TASKS["retrieval_vec"](**SETTINGS["retrieval_vec"])
    x, y = flat(task, 3000)
    assert np.array_equal(x[:, :, 4:], np.broadcast_to(task.positions, (3000, 15, 4)))
    vectors = x[:, :, :4].astype(np.float64)
    assert abs(vectors.mean()) < 0.01 and abs(vectors.var() - 1) < 0.02
    assert abs(np.mean(vectors**4) - 3) < 0.1  # the normal's fourth moment
    pair = vectors[:, 0, :2].T  # Box–Muller's two normals of one pair of uniforms: independent
    assert abs(np.corrcoef(pair)[0, 1]) < 0.05 and abs(np.corrcoef(pair**2)[0, 1]) < 0.05
    pairs = vectors[:, :12].reshape(3000, 6, 2, 4)
    for q in range(3):  # follow each query's chain by exact vector matches
        value, chain = vectors[:, 12 + q], []
        for _ in range(2):
            hit = (pairs[:, :, 0] == value[:, None]).all(-1)
            assert (hit.sum(1) == 1).all()
            value = pairs[np.arange(3000), hit.argmax(1), 1]
            chain.append(value)
        assert np.array_equal(np.concatenate(chain, 1).astype(np.float32), y[:, q])


@pytest.mark.parametrize("shuffle", [True, False])
def test_nested_icqa_targets_follow_hops_links_from_the_query(shuffle):
    task = TASKS["nested_icqa"](**SETTINGS["nested_icqa"], shuffle=shuffle)
    x, y = flat(task, 6000)
    links = x[:, :-2].reshape(len(x), -1, 3)
    assert (links[:, :, 1] == task.sign_id).all() and (x[:, -1] == task.sign_id).all()
    assert np.array_equal(follow_chains(links[:, :, ::2], x[:, -2], 2), y)
    symbols = np.concatenate([links[:, :, 0], links[:, :, 2]], 1)
    assert chi_square_ok(np.bincount(links[:, 0, 0], minlength=9), np.full(9, 6000 / 9))
    assert (np.sort(symbols, 1)[:, 1:] != np.sort(symbols, 1)[:, :-1]).sum(1).min() == 5  # 6 distinct of 8
    first_link = (links[:, :, 0] == x[:, -2:-1]).argmax(1)  # where the query's first link sits
    if shuffle:
        assert chi_square_ok(np.bincount(first_link, minlength=4), np.full(4, 1500))
    else:
        assert set(np.unique(first_link)) == {0, 1}


def equality_halves(task, x):
    """x, y and k of each equality example, read back from its tokens (pads on the left, [sep] in the middle)."""
    k = (x[:, :-1] != task.pad_id).sum(1) + (x[:, -1] != task.pad_id) - 1
    strings = [row[row != task.pad_id] for row in x]
    assert all(s[len(s) // 2] == task.sep_id for s in strings) and (k % 2 == 0).all()
    return [s[: len(s) // 2] for s in strings], [s[len(s) // 2 + 1 :] for s in strings], k


@pytest.mark.parametrize("name", ["eq_random", "eq_one"])
def test_equality_labels_say_whether_the_halves_are_equal_and_lengths_are_uniform(name):
    task = TASKS[name](**SETTINGS[name])
    x, y = flat(task, 6000)
    first, second, k = equality_halves(task, x)
    assert np.array_equal(y, [int(np.array_equal(a, b)) for a, b in zip(first, second, strict=True)])
    assert chi_square_ok(np.bincount(k)[2::2], np.full(6, 1000))  # k in 2, 4, …, 12
    assert abs(y.mean() - (0.5 if name == "eq_one" else 0.5 + 0.5 * np.mean(0.5 ** (k // 2)))) < 0.03
    symbols, size = np.concatenate(first), task.alphabet
    assert chi_square_ok(np.bincount(symbols, minlength=size), np.full(size, len(symbols) / size))
    if name == "eq_one":  # a negative differs from its first half in exactly one symbol
        assert all((a != b).sum() == 1 for a, b, label in zip(first, second, y, strict=True) if not label)


def test_eq_ncp_targets_are_the_valid_continuations_of_every_prefix():
    task = TASKS["eq_ncp"](**SETTINGS["eq_ncp"])
    x, y = flat(task, 400)
    first, second, k = equality_halves(task, x)
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    assert chi_square_ok(np.bincount(k)[2::2], np.full(6, 400 / 6))
    for row, targets in zip(x.tolist(), y, strict=True):
        assert np.array_equal(targets, ncp_reference(task, row))


@pytest.mark.parametrize("setting", [{"N": 12}, {"N": 20, "n_types": 1}, {"N": 16, "n_types": 3, "depth": 3}])
def test_dyck_labels_are_membership_and_positives_follow_the_generator(setting):
    from depthlab.tasks.dyck import is_dyck, is_dyck_tensor

    task = TASKS["dyck"](**setting)
    x, y = flat(task, 4000)
    assert np.array_equal(y, is_dyck(x, task.n_types, task.depth))  # the label is the string's membership
    assert abs(y.mean() - 0.5) < 0.04
    own = task.positives(4000, np.random.default_rng(0))
    assert np.array_equal(is_dyck_tensor(torch.as_tensor(own), task.depth).numpy(), np.ones(4000, bool))
    for column in range(0, task.N, 3):  # each position's bracket distribution is the generator's
        ours = np.bincount(x[y == 1, column], minlength=2 * task.n_types) / (y == 1).sum()
        theirs = np.bincount(own[:, column], minlength=2 * task.n_types) / 4000
        assert np.abs(ours - theirs).max() < 0.05


@pytest.mark.parametrize("setting", [{"N": 10, "depth": 2}, {"N": 16, "depth": 3, "n_types": 3}])
def test_dyck_membership_on_the_device_is_the_host_s(setting):
    from depthlab.tasks.dyck import is_dyck, is_dyck_by_positions, is_dyck_tensor

    rng = np.random.default_rng(1)
    task = TASKS["dyck"](**setting)
    strings = np.concatenate([rng.integers(0, 2 * task.n_types, (3000, task.N)), task.positives(3000, rng)])
    host = is_dyck(strings, task.n_types, task.depth)
    for member in (is_dyck_tensor, is_dyck_by_positions):  # on a graph, and position by position off one
        assert np.array_equal(member(torch.as_tensor(strings), task.depth).numpy(), host)


def solve_conditional_retrieval(task, row):
    """The reference solver: from the query, at each step the fact whose last key is the latest value and whose
    other keys are among the chain's earlier values; returns the answer and each step's earlier parents."""
    facts = row[:-1].reshape(-1, task.width)
    known, start, parents = [row[-1]], 0, []
    for s in range(task.D, 0, -1):
        size = task.facts_in_step(s)
        start += size
    for s in range(1, task.D + 1):
        size = task.facts_in_step(s)
        start -= size
        block = facts[start : start + size]
        keys = [[v for v in fact[:-1] if v != task.blank_id] for fact in block]
        match = [i for i, key in enumerate(keys) if key[-1] == known[-1] and all(v in known for v in key)]
        assert len(match) == 1
        parents.append([known.index(v) for v in keys[match[0]][:-1]])
        known.append(block[match[0], -1])
    return known[-1], parents


@pytest.mark.parametrize("setting", [SETTINGS["conditional_retrieval"], {"N": 1, "D": 3, "dag": "random"},
                                     {"N": 3, "D": 3, "parents": 3, "decoys": False}])
def test_conditional_retrieval_targets_are_the_solver_s_and_parents_uniform(setting):
    task = TASKS["conditional_retrieval"](**setting)
    x, y = flat(task, 1500)
    solved = [solve_conditional_retrieval(task, row) for row in x]
    assert np.array_equal(y, [answer for answer, _ in solved])
    symbols = x[x != task.blank_id]
    assert set(np.unique(symbols)) == set(range(task.n_symbols))
    if task.dag == "random":  # step 3's other parent: v_0 or v_1, uniformly
        other = np.array([parents[2][0] for _, parents in solved])
        assert chi_square_ok(np.bincount(other, minlength=2), [750, 750])


@pytest.mark.parametrize("setting", [SETTINGS["template"], {"l": 5, "n_symbols": 60, "n_classes": 7}])
def test_template_sequences_are_training_ones_labelled_by_their_template(setting):
    task = TASKS["template"](**setting)
    x, y = flat(task, 6000)
    seqs, space = x[:, :-1], task.space
    assert (x[:, -1] == task.sign_id).all() and not space.held_out(seqs).any()  # nothing held out is trained on
    tmpl = space.template_of(seqs)
    assert np.array_equal(y, task.template_labels[tmpl])
    n_templates = len(task.template_rows)
    assert chi_square_ok(np.bincount(tmpl, minlength=n_templates), np.full(n_templates, 6000 / n_templates))
    if setting["l"] == 3:  # within a template, uniform over its training sequences: here αβγ's 540 of 720
        train = space.enumerate("train")[0][space.enumerate("train")[1] == 4]
        codes = seqs[tmpl == 4] @ np.array([100, 10, 1])
        assert set(codes) <= set(train @ np.array([100, 10, 1]))
        assert len(set(codes)) > 0.8 * len(train) and np.bincount(codes).max() < 12  # spread over them


@pytest.mark.parametrize("setting", [SETTINGS["ictm"], {"k": 3, "l": 5, "n_symbols": 60, "n_a": 6}])
def test_ictm_targets_are_the_answer_of_the_question_sharing_the_query_s_template(setting):
    task = TASKS["ictm"](**setting)
    n = 3000 if task.l == 3 else 1000  # l = 5: 3 · 224 candidates an example (the redraw budget of a batch of 1,000)
    x, y = flat(task, n)
    k, l, space = task.k, task.l, task.space
    blocks = x[:, : k * (l + 2)].reshape(len(x), k, l + 2)
    questions, answers, query = blocks[:, :, :l], blocks[:, :, -1], x[:, -l - 1 : -1]
    assert (blocks[:, :, l] == task.sign_id).all()
    assert not space.held_out(questions.reshape(-1, l)).any() and not space.held_out(query).any()
    templates = space.template_of(questions.reshape(-1, l)).reshape(len(x), k)
    assert (np.sort(templates, 1)[:, 1:] != np.sort(templates, 1)[:, :-1]).all()  # k distinct templates
    asked = templates == space.template_of(query)[:, None]
    assert (asked.sum(1) == 1).all()  # the reference solver: the one question with the query's template
    c = asked.argmax(1)
    assert np.array_equal(y, answers[np.arange(len(x)), c])
    assert (questions[np.arange(len(x)), c] != query).any(1).all()  # a new substitution map
    assert chi_square_ok(np.bincount(c, minlength=k), np.full(k, n / k))
    assert chi_square_ok(np.bincount(answers.ravel() - task.answer_offset), np.full(task.n_a, n * k / task.n_a))


def test_the_held_out_split_on_the_device_is_the_host_s():
    from depthlab.tasks.base import split_mask as host_mask
    from depthlab.tasks.counter import split_mask

    rng = np.random.default_rng(0)
    codes = np.concatenate([rng.integers(0, 2**62, 20000), np.arange(500), [2**62 - 1, 2**63 - 1]])
    for split_seed, fraction in ((0, 0.25), (7, 0.5), (2**40, 0.9), (1, 0.0)):
        device = split_mask(torch.as_tensor(codes), fraction, split_seed).numpy()
        assert np.array_equal(device, host_mask(codes, fraction, split_seed))


def nearest_labels(x, y, half):
    """The reference solver of NstNb: each query's label is the label of its nearest earlier vector."""
    labels = []
    for k in range(half, x.shape[1]):
        dots = np.einsum("bkd,bd->bk", x[:, :k], x[:, k])
        labels.append(y[np.arange(len(x)), dots.argmax(1)])
        top2 = np.sort(dots, 1)[:, -2:]
        assert (top2[:, 1] - top2[:, 0] >= 0.05 - 1e-6).all()  # the margin γ, up to float32 rounding
    return np.stack(labels, 1)


def test_nearest_neighbor_queries_have_the_margin_and_the_nearest_neighbour_s_label():
    task = TASKS["nearest_neighbor"](**SETTINGS["nearest_neighbor"])
    inputs, targets = flat(task, 3000)
    x, y = inputs[:, 0::2, :6].astype(np.float64), inputs[:, 1::2, 7].astype(np.int64)
    assert (inputs[:, 0::2, 6:] == 0).all() and (inputs[:, 1::2, :6] == 0).all()
    assert np.array_equal(inputs[:, 1::2, 6], 1 - y) and np.array_equal(targets, y[:, 4:])
    assert np.allclose(np.linalg.norm(x, axis=-1), 1, atol=1e-6)
    assert np.array_equal(nearest_labels(x, y, 4), targets)
    first = x[:, :4].reshape(-1, 6)  # uniform on the sphere: mean 0, covariance I/d
    assert np.abs(first.mean(0)).max() < 0.03 and np.abs(first.T @ first / len(first) - np.eye(6) / 6).max() < 0.01
    assert chi_square_ok(np.bincount(y[:, :4].ravel()), [6000, 6000])


def test_a_margin_out_of_reach_is_one_clear_error_before_sampling():
    from depthlab.errors import UserError

    task = TASKS["nearest_neighbor"](N=16, d=2, gamma=0.9)
    with pytest.raises(UserError, match=r"task\.gamma: a margin of 0\.9 is out of reach"):
        counter_batch(task, [0], [0], 4)


@pytest.mark.parametrize("name", COUNTED)
def test_a_group_trains_every_task_on_stream_two(tmp_path, name):
    """The engine's step takes every task's stream-2 batch (token or vector inputs, class, multi-label or real
    targets), and the loss it trains on is finite."""
    from depthlab.config import parse_run
    from depthlab.store import Store
    from depthlab.training import engine

    raw = {"task": {"name": name, **SETTINGS[name]}, "model": {"name": "transformer", "layers": 1, "width": 8},
           "train": {"optimizer": "sgd", "lr": 0.01, "steps": 2, "batch_size": 16, "stream": 2}}
    configs = [parse_run({**raw, "seed": seed}) for seed in (0, 1)]
    store = Store(tmp_path)
    ids = [store.create_run(c.to_dict(), c.task.name, c.model.name) for c in configs]
    group = engine.Group(list(zip(configs, ids, strict=True)), store, len(configs))
    group.step()
    group.step()
    assert torch.isfinite(group.loss_sums).all() and (group.loss_sums > 0).all()
    assert group.batches.steps.tolist() == [2, 2]


def positives_by_loop(task, counter):
    """The position-by-position loop of ``BoundedDyck.positives`` on the counter's draws (the reference the scan
    of ``counter_positives`` must equal)."""
    big_n, k, types = task.N, task.depth, task.n_types
    bits = counter.bits(draw=1, width=big_n)
    stack = bits.new_zeros((*bits.shape[:-1], k + 1))
    top = bits.new_zeros((*bits.shape[:-1], 1))
    out = []
    for j in range(big_n):
        empty = top == 0
        choice = (bits[..., j : j + 1] * torch.where(empty, types, types + 1)) >> 32
        close = (top >= k) | (top >= big_n - j) | (~empty & (choice == types))
        kind = torch.where(close, stack.gather(-1, (top - 1).clamp(min=0)), choice.clamp(max=types - 1))
        out.append(2 * kind + close)
        slot = top.clamp(max=k)
        stack = stack.scatter(-1, slot, torch.where(close, stack.gather(-1, slot), kind))
        top = torch.where(close, top - 1, top + 1)
    return torch.cat(out, -1)


@pytest.mark.parametrize("setting", [{"N": 2}, {"N": 12}, {"N": 37 * 2, "n_types": 3, "depth": 4},
                                     {"N": 20, "depth": 1, "n_types": 1}])
@pytest.mark.parametrize("capturable", [True, False])  # the prefix scan; off a graph, the stack loop
def test_dyck_positives_by_the_prefix_scan_are_the_loop_s(setting, capturable):
    task = TASKS["dyck"](**setting)
    counter = Counter(seed_keys(torch.tensor([0, 9])), torch.tensor([0, 5]), 500, capturable=capturable)
    assert torch.equal(task.counter_positives(counter), positives_by_loop(task, counter))


def test_a_draw_wider_than_its_lanes_keeps_its_first_values_and_stays_uniform():
    counter = Counter(seed_keys(torch.tensor([4])), torch.tensor([2]), 3)
    wide, narrow = counter.bits(7, 150_000), counter.bits(7, 1 << 16)
    assert wide.shape == (1, 3, 150_000) and torch.equal(wide[..., : 1 << 16], narrow)
    assert torch.equal(counter.bits(7, 70_000), wide[..., :70_000]) and len(torch.unique(wide)) > 449_000
    top = (wide[..., 1 << 16 :] >> 28).flatten()  # the re-hashed blocks: uniform top bits
    assert chi_square_ok(torch.bincount(top, minlength=16).numpy(), np.full(16, top.numel() / 16))
    with pytest.raises(ValueError, match="numbered below 32,768"):
        counter.bits(1 << 15, 4)


@pytest.mark.parametrize(("setting", "most"), [({"N": 20, "n_types": 1}, 0.52), ({"N": 20}, 0.02),
                                               ({"N": 40, "n_types": 3, "depth": 3}, 0.02)])
def test_dyck_corruptions_stay_in_the_language_as_rarely_as_the_budget_assumes(setting, most):
    from depthlab.tasks.dyck import CORRUPTIONS, is_dyck_tensor

    task = TASKS["dyck"](**setting)
    counter = Counter(seed_keys(torch.tensor([3])), torch.tensor([1]), 1000)
    tries = CORRUPTIONS[min(task.n_types, 2)]
    corrupted = task.counter_corruptions(task.counter_positives(counter), counter, tries)
    assert corrupted.shape == (1, 1000, tries, task.N)
    assert is_dyck_tensor(corrupted, task.depth).float().mean() <= most
    assert most ** CORRUPTIONS[min(task.n_types, 2)] < 1e-11  # the budget leaves every candidate in it that rarely


def last_query_margins(inputs):
    """The mean largest dot product of the last query with the vectors before it, and the mean gap to the second."""
    x = inputs[:, 0::2, :6].astype(np.float64)
    top2 = np.sort(np.einsum("bkd,bd->bk", x[:, :-1], x[:, -1]), 1)[:, -2:]
    return [top2[:, 1].mean(), (top2[:, 1] - top2[:, 0]).mean()]


def test_nearest_neighbor_queries_follow_the_law_of_the_task_s_own_redraws():
    """The first candidate with the margin has the law of ``sample``'s redraw loop: the last query's largest dot
    product with the vectors before it, and its margin, are distributed alike in both streams."""
    task = TASKS["nearest_neighbor"](**SETTINGS["nearest_neighbor"])
    ours = last_query_margins(flat(task, 3000)[0])
    theirs = last_query_margins(task.sample(3000, np.random.default_rng(5)).inputs)
    assert np.allclose(ours, theirs, atol=0.02), (ours, theirs)
