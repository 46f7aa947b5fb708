"""Tests of the seed 001 sequence tasks: reproducibility, shapes, invariants, sizes, errors, decoding."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from pydantic import ValidationError

from depthlab.tasks import TASKS, Batch, Task
from depthlab.tasks.base import SIGN, all_distinct_tuples, sample_distinct
from depthlab.tasks.templates_common import all_templates, canonical_form, count_templates

SMALL = {
    "memorization": {},
    "icqa": {},
    "template": {},
    "ictm": {},
    "nested_icqa": {},
}


def rowset(x: np.ndarray) -> set[tuple[int, ...]]:
    return {tuple(int(v) for v in r) for r in x}


def equality_pattern(x: np.ndarray) -> np.ndarray:
    return x[:, :, None] == x[:, None, :]


# --- common contract --------------------------------------------------------------------------------


def test_registry_has_the_five_tasks():
    assert set(SMALL) <= set(TASKS)
    for name in SMALL:
        assert issubclass(TASKS[name], Task)
        assert TASKS[name].name == name


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("split", ["train", "eval"])
def test_sampling_is_reproducible_and_well_shaped(name, split):
    task = TASKS[name](**SMALL[name])
    a = task.sample(256, np.random.default_rng(7), split)
    b = task.sample(256, np.random.default_rng(7), split)
    c = task.sample(256, np.random.default_rng(8), split)
    assert np.array_equal(a.inputs, b.inputs) and np.array_equal(a.targets, b.targets)
    assert all(np.array_equal(a.meta[k], b.meta[k]) for k in a.meta)
    assert not np.array_equal(a.inputs, c.inputs)
    assert a.inputs.shape == (256, task.seq_len) and a.inputs.dtype == np.int64
    assert a.targets.shape == (256,) and a.targets.dtype == np.int64
    assert a.inputs.min() >= 0 and a.inputs.max() < len(task.vocab)
    assert a.targets.min() >= 0 and a.targets.max() < len(task.labels)
    assert 0 < task.chance <= 1
    assert isinstance(task.eval_protocol, str) and task.section.startswith("seed 001")


@pytest.mark.parametrize("name", sorted(SMALL))
def test_bad_split_rejected(name):
    task = TASKS[name](**SMALL[name])
    with pytest.raises(ValueError, match="split"):
        task.sample(2, np.random.default_rng(0), "test")


# --- memorization ----------------------------------------------------------------------------------


def test_memorization_dataset():
    task = TASKS["memorization"](n_words=4, length=3, n_examples=40, data_seed=3)
    data = task.enumerate()
    assert len(data) == task.dataset_size() == 40
    assert len(rowset(data.inputs)) == 40  # N distinct sequences
    assert sorted(data.targets.tolist()) == list(range(40))  # N distinct labels
    assert (data.inputs[:, -1] == 4).all() and task.vocab[4] == SIGN
    assert task.chance == 1 / 40
    # sampling draws from the N examples, with their labels
    batch = task.sample(500, np.random.default_rng(0))
    label_of = {tuple(r): int(y) for r, y in zip(data.inputs.tolist(), data.targets.tolist(), strict=True)}
    pairs = zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True)
    assert all(label_of[tuple(r)] == y for r, y in pairs)
    # the dataset is fixed by data_seed
    again = TASKS["memorization"](n_words=4, length=3, n_examples=40, data_seed=3).enumerate()
    assert np.array_equal(again.inputs, data.inputs) and np.array_equal(again.targets, data.targets)
    other = TASKS["memorization"](n_words=4, length=3, n_examples=40, data_seed=4).enumerate()
    assert not np.array_equal(other.inputs, data.inputs)
    # every possible sequence
    full = TASKS["memorization"](n_words=3, length=2, n_examples=9).enumerate()
    assert len(rowset(full.inputs)) == 9


def test_memorization_errors():
    with pytest.raises(ValidationError, match="n_examples"):
        TASKS["memorization"](n_words=2, length=3, n_examples=9)
    with pytest.raises(ValidationError, match="length"):
        TASKS["memorization"](length=0)
    with pytest.raises(ValidationError, match="n_words"):
        TASKS["memorization"](n_words=0)


# --- in-context QA ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("population", "k"), [(8, 3), (8, 8), (64, 10), (100, 3), (100, 4), (100, 10), (1024, 5)])
def test_sample_distinct_is_the_k_smallest_draws_in_order(population, k):
    """Every fast path returns what a full argsort of the same draws would, so data streams do not change."""
    got = sample_distinct(np.random.default_rng(7), 500, population, k)
    noise = np.random.default_rng(7).random((500, population))
    assert np.array_equal(got, np.argsort(noise, axis=1)[:, :k])
    assert all(len(set(row)) == k for row in got.tolist())


def test_icqa_invariants():
    task = TASKS["icqa"](k=4, n_q=6, n_a=5)
    b = task.sample(2000, np.random.default_rng(1))
    k, x = task.k, b.inputs
    questions, signs, answers = x[:, 0 : 3 * k : 3], x[:, 1 : 3 * k : 3], x[:, 2 : 3 * k : 3]
    assert (signs == task.n_q).all() and (x[:, -1] == task.n_q).all()
    assert (questions < task.n_q).all() and (answers > task.n_q).all()
    # distinct questions and distinct answers in each context
    assert (np.sort(questions, 1)[:, 1:] != np.sort(questions, 1)[:, :-1]).all()
    assert (np.sort(answers, 1)[:, 1:] != np.sort(answers, 1)[:, :-1]).all()
    rows = np.arange(len(b))
    # the query question is context question c, and the target is the answer right after its sign
    assert (questions[rows, b.meta["c"]] == x[:, 3 * k]).all()
    assert (x[rows, 3 * b.meta["c"] + 2] == b.targets).all()
    assert (questions == x[:, [3 * k]]).any(axis=1).all()
    assert task.labels == task.vocab and task.chance == 1 / 4
    assert set(np.unique(b.meta["c"])) == set(range(k))


@pytest.mark.parametrize(("k", "n_q", "n_a"), [(1, 1, 1), (2, 3, 2), (3, 4, 3), (2, 2, 4)])
def test_icqa_dataset_size_and_enumerate(k, n_q, n_a):
    task = TASKS["icqa"](k=k, n_q=n_q, n_a=n_a)
    size = math.perm(n_q, k) * math.perm(n_a, k) * k
    assert task.dataset_size("eval") == task.dataset_size("train") == size
    data = task.enumerate()
    assert len(data) == size and len(rowset(data.inputs)) == size
    assert (data.inputs[np.arange(size), 3 * data.meta["c"] + 2] == data.targets).all()
    sampled = task.sample(300, np.random.default_rng(0))
    assert rowset(sampled.inputs) <= rowset(data.inputs)


def test_icqa_errors_and_limit():
    with pytest.raises(ValidationError, match="k must be at most n_q"):
        TASKS["icqa"](k=5, n_q=4)
    with pytest.raises(ValidationError, match="n_a"):
        TASKS["icqa"](k=5, n_q=9, n_a=4)
    with pytest.raises(ValidationError, match="k must be at least 1"):
        TASKS["icqa"](k=0)
    assert TASKS["icqa"](k=5, n_q=100, n_a=100).enumerate() is None


def test_icqa_decode_like_table_1():
    task = TASKS["icqa"](k=2, n_q=2, n_a=3)
    a, b, r, one, two = 0, 1, 2, 4, 5  # answers start at n_q + 1 = 3 ("0")
    inputs = np.array([[a, r, one, b, r, two, a, r], [b, r, one, a, r, two, a, r]])
    batch = Batch(inputs, np.array([one, two]))
    assert task.decode(batch, 0) == "a → 1 b → 2 a → _1"
    assert task.decode(batch, 1) == "b → 1 a → 2 a → _2"


# --- template matching -----------------------------------------------------------------------------


def test_all_templates_are_restricted_growth_strings():
    for l in range(1, 7):
        for m in range(1, l + 1):
            rows = all_templates(l, m)
            assert rows.shape == (count_templates(l, m), l)
            assert len(rowset(rows)) == rows.shape[0]
            assert all(canonical_form(r) == tuple(r) and max(r) < m for r in rows.tolist())
    assert count_templates(5, 5) == 52  # Bell(5)
    assert TASKS["template"](l=3).template_strings == ["ααα", "ααβ", "αβα", "αββ", "αβγ"]


def test_template_labels_depend_only_on_template():
    task = TASKS["template"](l=4, n_symbols=10, n_classes=4, data_seed=2)
    n_t = len(task.template_strings)
    assert n_t == 15 and sorted(set(task.template_labels.tolist())) == [0, 1, 2, 3]
    for split in ("train", "eval"):
        b = task.sample(3000, np.random.default_rng(3), split)
        assert (b.targets == task.template_labels[b.meta["template"]]).all()
        label_of_seq: dict[tuple[int, ...], int] = {}
        for row, y in zip(b.inputs[:, :-1].tolist(), b.targets.tolist(), strict=True):
            assert label_of_seq.setdefault(tuple(row), y) == y
        # every sequence follows its template's equality pattern
        pattern = equality_pattern(task.template_rows[b.meta["template"]])
        assert (equality_pattern(b.inputs[:, :-1]) == pattern).all()
        assert (task.space.template_of(b.inputs[:, :-1]) == b.meta["template"]).all()
        assert (b.inputs[:, -1] == task.sign_id).all()
    assert task.chance == np.bincount(task.template_labels).max() / n_t
    distinct = TASKS["template"](l=4, n_symbols=10)
    assert distinct.labels == [str(i) for i in range(15)] and distinct.chance == 1 / 15


def test_template_split_disjoint_and_sizes():
    task = TASKS["template"](l=3, n_symbols=6, eval_fraction=0.3, split_seed=1)
    train, ev, full = task.enumerate("train"), task.enumerate("eval"), task.enumerate("all")
    assert len(full) == task.dataset_size("all") == 6**3  # every sequence follows one template
    assert len(train) == task.dataset_size("train") and len(ev) == task.dataset_size("eval")
    tr, evs = rowset(train.inputs), rowset(ev.inputs)
    assert not tr & evs and tr | evs == rowset(full.inputs) and len(tr) == len(train)
    assert task.split_counts_exact("eval")
    assert rowset(task.sample(2000, np.random.default_rng(0), "train").inputs) <= tr
    assert rowset(task.sample(2000, np.random.default_rng(0), "eval").inputs) <= evs
    # every template has sequences in both splits
    assert set(train.meta["template"].tolist()) == set(ev.meta["template"].tolist()) == set(range(5))


@pytest.mark.parametrize(("l", "n_symbols", "n_wildcards"), [(3, 4, 2), (4, 5, 2), (4, 5, 3), (2, 7, None)])
def test_template_full_count_closed_form(l, n_symbols, n_wildcards):
    kw = {"eval_fraction": 0.5, "split_seed": 3}
    task = TASKS["template"](l=l, n_symbols=n_symbols, n_wildcards=n_wildcards, **kw)
    m = n_wildcards or l
    brute = sum(len(set(s)) <= m for s in itertools.product(range(n_symbols), repeat=l))
    closed = sum(math.perm(n_symbols, int(max(r)) + 1) for r in task.template_rows.tolist())
    assert task.dataset_size("all") == closed == brute
    assert task.dataset_size("train") + task.dataset_size("eval") == brute
    assert len(rowset(task.enumerate("all").inputs)) == brute


def test_template_rejection_path_for_large_templates():
    # templates with 4-5 wildcards over 20 symbols are not tabled: they are sampled by rejection
    task = TASKS["template"](l=5, n_symbols=20)
    assert not task.space.tabled.all()
    b = task.sample(4000, np.random.default_rng(0), "eval")
    assert task.space.held_out(b.inputs[:, :-1]).all()
    assert (task.space.template_of(b.inputs[:, :-1]) == b.meta["template"]).all()
    b = task.sample(4000, np.random.default_rng(0), "train")
    assert not task.space.held_out(b.inputs[:, :-1]).any()
    assert task.enumerate("all") is None or task.dataset_size("all") <= 2_000_000
    # many wildcards over few symbols: injections come from sample_distinct (independent draws would collide)
    task = TASKS["template"](l=8, n_symbols=9)
    assert not task.space.tabled.all() and task.space.distinct_prob < 0.5
    for split in ("train", "eval"):
        b = task.sample(1000, np.random.default_rng(0), split)
        seqs = b.inputs[:, :-1]
        assert (task.space.held_out(seqs) == (split == "eval")).all()
        assert (equality_pattern(seqs) == equality_pattern(task.template_rows[b.meta["template"]])).all()


def test_explicit_templates():
    task = TASKS["template"](l=3, templates=["aab", "xyz", "βαα"])
    assert task.template_strings == ["ααβ", "αβγ", "αββ"]
    b = task.sample(500, np.random.default_rng(0))
    pattern = equality_pattern(task.template_rows[b.meta["template"]])
    assert (equality_pattern(b.inputs[:, :-1]) == pattern).all()
    assert task.dataset_size("all") == 16 * 15 * 2 + 16 * 15 * 14


def test_template_errors():
    with pytest.raises(ValidationError, match="same template up to renaming"):
        TASKS["template"](l=3, templates=["αβα", "βαβ"])
    with pytest.raises(ValidationError, match="l must be at least 1"):
        TASKS["template"](l=0)
    with pytest.raises(ValidationError, match="has length 2 but l is 3"):
        TASKS["template"](l=3, templates=["αβ"])
    with pytest.raises(ValidationError, match="n_symbols"):
        TASKS["template"](l=3, n_symbols=2)
    with pytest.raises(ValidationError, match="n_wildcards"):
        TASKS["template"](l=3, templates=["αβγ"], n_wildcards=2)
    with pytest.raises(ValidationError, match="n_classes"):
        TASKS["template"](l=3, n_classes=6)
    with pytest.raises(ValidationError, match="eval_fraction"):
        TASKS["template"](eval_fraction=1.0)
    with pytest.raises(ValidationError, match="2\\*\\*62"):
        TASKS["template"](l=40, n_symbols=4, n_wildcards=1)
    # a single-wildcard template over 2 symbols cannot have a sequence in both splits for some seed
    bad = next(
        s for s in range(200)
        if _fails(lambda s=s: TASKS["template"](l=2, n_symbols=2, eval_fraction=0.5, split_seed=s))
    )
    with pytest.raises(ValidationError, match="split_seed"):
        TASKS["template"](l=2, n_symbols=2, eval_fraction=0.5, split_seed=bad)


def _fails(make) -> bool:
    try:
        make()
    except ValidationError:
        return True
    return False


def test_template_decode():
    task = TASKS["template"](l=2, n_symbols=3, eval_fraction=0.0)
    assert task.template_strings == ["αα", "αβ"]
    batch = Batch(np.array([[0, 0, 3], [0, 1, 3]]), np.array([0, 1]))
    assert task.decode(batch, 0) == "a a → _0"
    assert task.decode(batch, 1) == "a b → _1"


# --- in-context template matching ------------------------------------------------------------------


def test_ictm_invariants():
    task = TASKS["ictm"](k=3, l=3, n_symbols=12, n_a=6)
    k, l = task.k, task.l
    for split in ("train", "eval"):
        b = task.sample(2000, np.random.default_rng(5), split)
        x, c, rows = b.inputs, b.meta["c"], np.arange(len(b))
        blocks = x[:, : k * (l + 2)].reshape(-1, k, l + 2)
        questions, signs, answers = blocks[:, :, :l], blocks[:, :, l], blocks[:, :, l + 1]
        query = x[:, k * (l + 2) : k * (l + 2) + l]
        assert (signs == task.sign_id).all() and (x[:, -1] == task.sign_id).all()
        assert (answers >= task.answer_offset).all() and (questions < task.n_symbols).all()
        # distinct templates in the context, the recorded ones
        space = task.space
        qt = space.template_of(questions.reshape(-1, l)).reshape(-1, k)
        assert (qt == b.meta["templates"]).all()
        assert (np.sort(qt, 1)[:, 1:] != np.sort(qt, 1)[:, :-1]).all()
        # the query follows context question c's template with a new sequence; the target is its answer
        assert (space.template_of(query) == qt[rows, c]).all()
        assert (query != questions[rows, c]).any(axis=1).all()
        assert (answers[rows, c] == b.targets).all()
        # split: all k + 1 question sequences of an example are in the split
        held = space.held_out(np.concatenate([questions.reshape(-1, l), query]))
        assert held.all() if split == "eval" else not held.any()
    assert task.labels == task.vocab and task.chance == 1 / 3


def test_ictm_paper_length():
    for k in (1, 2, 3):
        task = TASKS["ictm"](k=k, l=5, n_symbols=100, n_a=100)
        assert task.seq_len == 7 * k + 6 == k * (5 + 2) + 5 + 1
        assert task.sample(64, np.random.default_rng(0), "eval").inputs.shape == (64, 7 * k + 6)
    assert task.enumerate() is None


def _ictm_brute_size(task, split):
    counts = task.space.split_counts(split)[0]
    total = 0
    for perm in all_distinct_tuples(len(counts), task.k).tolist():
        prod = math.prod(counts[t] for t in perm)
        total += sum(prod // counts[t] * counts[t] * (counts[t] - 1) for t in perm)
    return total * math.perm(task.n_a, task.k)


def test_ictm_dataset_size_tiny_full():
    # eval_fraction=0: no held-out split, train is the full dataset
    task = TASKS["ictm"](k=2, l=2, n_symbols=3, n_a=2, eval_fraction=0.0)
    size = task.dataset_size("all")
    assert size == 2 * ((3 - 1) * 3 * 6 + 3 * 6 * (6 - 1)) * 2 == _ictm_brute_size(task, "all")
    assert task.dataset_size("train") == size and task.dataset_size("eval") == 0
    data = task.enumerate("all")
    assert len(data) == size and len(rowset(data.inputs)) == size
    assert rowset(task.enumerate("train").inputs) == rowset(data.inputs) and len(task.enumerate("eval")) == 0
    for split in ("all", "train"):
        assert rowset(task.sample(500, np.random.default_rng(0), split).inputs) <= rowset(data.inputs)
    with pytest.raises(ValueError, match="no held-out split"):
        task.sample(4, np.random.default_rng(0), "eval")


def test_ictm_dataset_size_tiny_splits():
    kw = {"k": 2, "l": 2, "n_symbols": 6, "n_a": 2, "eval_fraction": 0.5}
    seed = next(s for s in range(100) if not _fails(lambda s=s: TASKS["ictm"](**kw, split_seed=s)))
    task = TASKS["ictm"](**kw, split_seed=seed)
    sets = {}
    for split in ("train", "eval"):
        data = task.enumerate(split)
        assert len(data) == task.dataset_size(split) == _ictm_brute_size(task, split)
        sets[split] = rowset(data.inputs)
        assert len(sets[split]) == len(data)
        assert rowset(task.sample(500, np.random.default_rng(1), split).inputs) <= sets[split]
    assert not sets["train"] & sets["eval"]


def test_ictm_errors():
    with pytest.raises(ValidationError, match="number of templates"):
        TASKS["ictm"](k=3, l=2)
    with pytest.raises(ValidationError, match="n_a"):
        TASKS["ictm"](k=3, n_a=2)
    with pytest.raises(ValidationError, match="l must be at least 1"):
        TASKS["ictm"](l=0)
    with pytest.raises(ValidationError, match="same template up to renaming"):
        TASKS["ictm"](l=2, templates=["xy", "yx"], k=1)
    with pytest.raises(ValidationError, match="n_symbols"):
        TASKS["ictm"](k=1, l=1, n_symbols=1)  # the query needs a second sequence of the template


def test_ictm_decode_like_table_1():
    task = TASKS["ictm"](k=2, l=2, n_symbols=3, n_a=3, eval_fraction=0.0)
    a, b, r, one, two = 0, 1, 3, 5, 6
    batch = Batch(np.array([[a, a, r, one, a, b, r, two, b, b, r]]), np.array([one]))
    assert task.decode(batch, 0) == "a a → 1 a b → 2 b b → _1"


# --- nested in-context QA --------------------------------------------------------------------------


@pytest.mark.parametrize("shuffle", [True, False])
def test_nested_following_links_gives_target(shuffle):
    task = TASKS["nested_icqa"](k=3, hops=3, n_symbols=14, shuffle=shuffle)
    b = task.sample(1000, np.random.default_rng(2))
    m = task.k * task.hops
    x = b.inputs
    src, sign, dst = x[:, 0 : 3 * m : 3], x[:, 1 : 3 * m : 3], x[:, 2 : 3 * m : 3]
    assert (sign == task.sign_id).all() and x.shape[1] == 3 * m + 2
    rows = np.arange(len(b))
    cur = x[:, 3 * m]
    for _ in range(task.hops):
        hit = src == cur[:, None]
        assert (hit.sum(axis=1) == 1).all()
        cur = dst[rows, hit.argmax(axis=1)]
    assert (cur == b.targets).all()
    # the target is a chain end: it never starts a link
    assert not (src == b.targets[:, None]).any()
    # all symbols distinct
    symbols = np.concatenate([src, dst], axis=1)
    assert all(len(set(r)) == task.k * (task.hops + 1) for r in symbols.tolist()[:50])
    assert task.chance == 1 / 3


@pytest.mark.parametrize(
    ("k", "hops", "n_symbols", "shuffle"),
    [(1, 1, 3, True), (2, 1, 4, True), (2, 1, 5, False), (2, 2, 6, True), (1, 3, 5, True), (3, 1, 6, True)],
)
def test_nested_dataset_size_and_enumerate(k, hops, n_symbols, shuffle):
    task = TASKS["nested_icqa"](k=k, hops=hops, n_symbols=n_symbols, shuffle=shuffle)
    data = task.enumerate()
    size = task.dataset_size()
    assert len(data) == size and len(rowset(data.inputs)) == size
    if shuffle:
        chain_sets = math.perm(n_symbols, k * (hops + 1)) // math.factorial(k)
        assert size == chain_sets * math.factorial(k * hops) * k
    assert rowset(task.sample(2000, np.random.default_rng(0)).inputs) <= rowset(data.inputs)


def test_nested_errors_and_decode():
    with pytest.raises(ValidationError, match="k\\*\\(hops\\+1\\)"):
        TASKS["nested_icqa"](k=3, hops=3, n_symbols=11)
    with pytest.raises(ValidationError, match="hops"):
        TASKS["nested_icqa"](hops=0)
    task = TASKS["nested_icqa"](k=1, hops=3, n_symbols=4, shuffle=False)
    data = task.enumerate()
    assert task.decode(data, 0) == "a → b b → c c → d a → _d"
    assert task.seq_len == 11


# --- issue 21: sizes ------------------------------------------------------------------------------------------


def test_every_task_gives_its_vocabulary_size_without_building_the_vocabulary():
    for name, cls in TASKS.items():
        task = cls()
        assert task.vocab_size == len(task.vocab), name


@pytest.mark.parametrize("name,fields,needle", [
    ("icqa", {"k": 2, "n_q": 10**9, "n_a": 4}, "n_q=1,000,000,000 gives a vocabulary of 1,000,000,005, more than "
                                                "the 1,048,576 allowed"),
    ("memorization", {"n_words": 2**21, "data_seed": 2**40}, "n_words=2,097,152 gives a vocabulary"),
    ("retrieval_vec", {"K": 2**21}, "K=2,097,152 gives an input width of 4,194,304"),
    ("induction", {"length": 10**6}, "length=1,000,000 gives sequences of 1,000,000 positions, more than the 65,536"),
    ("conditional_retrieval", {"D": 10**12}, "D=1,000,000,000,000 gives sequences of"),
])
def test_a_vocabulary_or_length_no_model_could_take_is_refused_at_once(name, fields, needle):
    with pytest.raises(ValidationError, match=needle):
        TASKS[name](**fields)


def test_the_measured_cost_of_sampling_predicts_its_peak():
    import tracemalloc

    from depthlab.tasks.sizes import batch_bytes, sample_cost

    for name, cls in TASKS.items():
        for task in (cls(), *([cls(n_q=3000)] if name == "icqa" else [])):
            cost = sample_cost(task, "train")
            tracemalloc.start()
            try:
                batch = task.sample(4096, np.random.default_rng(1), "train")
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert 0.7 <= cost.bytes(4096) / peak <= 1.4, (name, cost, peak)
            assert 0.99 <= 4096 * cost.kept / batch_bytes(batch) <= 1.01, name
    assert sample_cost(TASKS["template"](eval_fraction=0.0), "eval") is None  # no held-out split to sample
