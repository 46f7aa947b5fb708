"""Template machinery shared by the template tasks (seed 001 §4.3 Definition 1, used again in §4.4).

``TemplateTask`` is the base of both tasks: their template fields, checks and held-out split, built from the
functions and ``TemplateSpace`` below.

Seed 001 §4.3, Definition 1: "A template is a string t ∈ W^l, where W is an alphabet of 'wildcards'. A
substitution map is an injection function s : W → X that maps wildcards to real word symbols X. [...]
Different wildcards should be mapped to different tokens to ensure that each sequence can be mapped to one
and only one template."

Choices made here (the text leaves them open):

- Templates are identified up to renaming of wildcards (αβα and βαβ produce the same sequences once
  substituted by every injection), so each template is stored in restricted-growth form: the first wildcard
  is 0, the next new one 1, and so on. "All templates of length l" are all restricted-growth strings of
  length l whose largest value is below the number of wildcards |W|; every sequence of X^l with at most |W|
  distinct symbols then belongs to exactly one template, and template t has A(|X|, j_t) sequences (j_t = its
  distinct wildcards).
- Held-out split: a sequence (its l symbols read as base-|X| digits) is held out iff ``split_mask(code,
  eval_fraction, split_seed)``; membership is a pure function of the sequence, so the same sequence is held
  out in every task that uses the same ``n_symbols``, ``eval_fraction`` and ``split_seed``.
- Sampling a template's sequence in a split is uniform over that template's sequences in the split: small
  templates, and any template expected to have fewer than ``SAFE_EXPECTED`` sequences in a split, are
  enumerated once (a table per split, also used to check that no split is empty); the others use a uniformly
  random injection, rejected and redrawn when the sequence falls in the other split.
- Split sizes are exact for templates with at most ``COUNT_BUDGET`` sequences in all (enumerated and
  hashed); beyond that the held-out count of a template is its expectation ``round(A(|X|, j_t) ·
  eval_fraction)`` (``TemplateSpace.split_counts`` says which).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

import numpy as np

from depthlab.tasks.base import (
    Task,
    all_distinct_tuples,
    check_split,
    encode_rows,
    falling_factorial,
    sample_distinct,
    split_mask,
)

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    from depthlab.tasks.counter import DeviceTables

GREEK = "αβγδεζηθικλμνξοπρστυφχψω"
MAX_TEMPLATES = 100_000  # more templates than this is certainly a mistake (and a slow construction)
TABLE_BUDGET = 1 << 18  # sequences enumerated at construction: the smallest templates get a per-split table
COUNT_BUDGET = 1 << 21  # sequences enumerated (lazily) to count split sizes exactly
CHUNK = 1 << 18  # sequences per enumeration chunk
SAFE_EXPECTED = 64  # a template expected to have this many sequences in a split is not checked exhaustively
SPLITS = ("train", "eval", "all")


def canonical_form(template: Sequence) -> tuple[int, ...]:
    """Restricted-growth form: the first wildcard becomes 0, the next new one 1, … (αβα → (0, 1, 0))."""
    first: dict = {}
    return tuple(first.setdefault(ch, len(first)) for ch in template)


def template_string(row: Sequence[int]) -> str:
    """A canonical template written with greek letters: (0, 1, 0) → 'αβα'."""
    return "".join(GREEK[v % len(GREEK)] + (str(v // len(GREEK)) if v >= len(GREEK) else "") for v in row)


def stirling2(n: int, k: int) -> int:
    """Stirling number of the second kind: partitions of n positions into k non-empty blocks."""
    return sum((-1) ** i * math.comb(k, i) * (k - i) ** n for i in range(k + 1)) // math.factorial(k)


def count_templates(l: int, n_wildcards: int) -> int:
    """Number of templates of length l with at most n_wildcards distinct wildcards: Σ_j S(l, j)."""
    return sum(stirling2(l, j) for j in range(1, min(l, n_wildcards) + 1))


def all_templates(l: int, n_wildcards: int) -> np.ndarray:
    """Every restricted-growth string of length l with values below n_wildcards, lexicographic, [T, l]."""
    width = min(l, n_wildcards)
    rows = np.zeros((1, 1), dtype=np.int64)
    top = np.zeros(1, dtype=np.int64)
    for _ in range(1, l):
        grid = np.repeat(rows, width, axis=0)
        nxt = np.tile(np.arange(width, dtype=np.int64), rows.shape[0])
        gtop = np.repeat(top, width)
        keep = nxt <= gtop + 1
        rows = np.concatenate([grid, nxt[:, None]], axis=1)[keep]
        top = np.maximum(gtop, nxt)[keep]
    return rows


def resolve_templates(
    l: int, n_symbols: int, n_wildcards: int | None, templates: list[str] | None
) -> np.ndarray:
    """The canonical templates [T, l] the fields describe; ValueError naming the field when impossible."""
    if n_symbols ** l >= 2**62:
        raise ValueError(
            f"n_symbols ** l must be below 2**62 (sequences are hashed as base-n_symbols int64 codes); "
            f"got n_symbols={n_symbols}, l={l}"
        )
    if templates is None:
        m = min(l, n_wildcards if n_wildcards is not None else l)
        if m > n_symbols:
            raise ValueError(
                f"n_symbols ({n_symbols}) is too small: template {template_string(range(m))} has {m} "
                f"distinct wildcards, which need {m} distinct symbols; use n_symbols >= {m} or "
                f"n_wildcards <= {n_symbols}"
            )
        count = count_templates(l, m)
        if count > MAX_TEMPLATES:
            raise ValueError(
                f"l={l} with n_wildcards={m} gives {count} templates, more than the {MAX_TEMPLATES} allowed; "
                f"lower l or n_wildcards, or list templates explicitly"
            )
        return all_templates(l, m)
    if len(templates) == 0:
        raise ValueError("templates must list at least one template (or be None: all templates of length l)")
    if len(templates) > MAX_TEMPLATES:
        raise ValueError(f"templates lists {len(templates)} templates, more than the {MAX_TEMPLATES} allowed")
    seen: dict[tuple[int, ...], str] = {}
    for t in templates:
        if len(t) != l:
            raise ValueError(
                f"templates: {t!r} has length {len(t)} but l is {l}; every template must have length l"
            )
        form = canonical_form(t)
        j = max(form) + 1
        if n_wildcards is not None and j > n_wildcards:
            raise ValueError(
                f"templates: {t!r} uses {j} distinct wildcards but n_wildcards is {n_wildcards}"
            )
        if j > n_symbols:
            raise ValueError(
                f"templates: {t!r} uses {j} distinct wildcards, which need {j} distinct symbols, "
                f"but n_symbols is {n_symbols}"
            )
        if form in seen:
            raise ValueError(
                f"templates {seen[form]!r} and {t!r} are the same template up to renaming of wildcards "
                f"(both {template_string(form)}); list each template once"
            )
        seen[form] = t
    return np.array(list(seen), dtype=np.int64).reshape(len(seen), l)


def expand(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each i, ``counts[i]`` rows: (parent index i, local index 0..counts[i]-1), vectorised."""
    counts = np.asarray(counts, dtype=np.int64)
    parent = np.repeat(np.arange(counts.shape[0], dtype=np.int64), counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return parent, np.arange(parent.shape[0], dtype=np.int64) - starts[parent]


class TemplateSpace:
    """The sequences of a set of templates over ``n_symbols`` symbols, with the seeded held-out split."""

    def __init__(self, rows: np.ndarray, n_symbols: int, eval_fraction: float, split_seed: int):
        self.rows = np.asarray(rows, dtype=np.int64)
        self.n_templates, self.l = self.rows.shape
        self.n_symbols = n_symbols
        self.eval_fraction = eval_fraction
        self.split_seed = split_seed
        self.n_distinct = self.rows.max(axis=1) + 1
        self.jmax = int(self.n_distinct.max())
        self.sizes = [falling_factorial(n_symbols, int(j)) for j in self.n_distinct]  # exact Python ints
        self._counts: dict[str, tuple[list[int], bool]] = {}
        # Tables (every sequence of the template, per split, sorted by template) for the smallest templates
        # (whole groups of equal j, ascending, within TABLE_BUDGET) and for the templates expected to have
        # fewer than SAFE_EXPECTED sequences in a split (exact checks; no slow rejection for them).
        size_of_j = {int(j): falling_factorial(n_symbols, int(j)) for j in np.unique(self.n_distinct)}
        total, limit_j = 0, 0
        for j in sorted(size_of_j):
            total += size_of_j[j] * int((self.n_distinct == j).sum())
            if total > TABLE_BUDGET:
                break
            limit_j = j
        fmin = min(eval_fraction, 1.0 - eval_fraction) if eval_fraction > 0 else 1.0
        sizes = np.array([float(x) for x in self.sizes])
        risky = (self.n_distinct > limit_j) & (sizes * fmin < SAFE_EXPECTED)
        if sizes[risky].sum() > COUNT_BUDGET:
            raise ValueError(
                f"eval_fraction={eval_fraction} is too extreme for n_symbols={n_symbols}: some templates "
                f"would have too few sequences in a split to be checked; use an eval_fraction nearer 0.5"
            )
        self.tabled = (self.n_distinct <= limit_j) | risky
        seqs, tmpl = self._collect(np.flatnonzero(self.tabled), "all")
        held = self.held_out(seqs)
        self._tables: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for split, keep in (("eval", held), ("train", ~held)):
            counts = np.bincount(tmpl[keep], minlength=self.n_templates).astype(np.int64)
            offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
            counts[~self.tabled] = -1
            self._tables[split] = (seqs[keep], offsets, counts)

    # --- membership ---------------------------------------------------------------------------------
    def held_out(self, seqs: np.ndarray) -> np.ndarray:
        """True where a sequence [*, l] of symbol ids is in the held-out (eval) split."""
        return split_mask(encode_rows(seqs, self.n_symbols), self.eval_fraction, self.split_seed)

    def in_split(self, seqs: np.ndarray, split: str) -> np.ndarray:
        if split == "all":
            return np.ones(seqs.shape[0], dtype=bool)
        held = self.held_out(seqs)
        return held if split == "eval" else ~held

    def template_of(self, seqs: np.ndarray) -> np.ndarray:
        """Index of the template each sequence [B, l] follows (-1 if none), by its equality pattern."""
        eq = seqs[:, :, None] == seqs[:, None, :]
        teq = self.rows[:, :, None] == self.rows[:, None, :]
        match = (eq[:, None] == teq[None]).all(axis=(2, 3))
        return np.where(match.any(axis=1), match.argmax(axis=1), -1)

    # --- enumeration --------------------------------------------------------------------------------
    def iter_sequences(self, ids: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every sequence of templates ``ids`` in chunks (sequences [*, l], template index [*]); grouped by
        the number of distinct wildcards, templates in ``ids`` order within a group, injections
        lexicographic."""
        ids = np.asarray(ids, dtype=np.int64)
        for j in np.unique(self.n_distinct[ids]):
            group = ids[self.n_distinct[ids] == j]
            tuples = all_distinct_tuples(self.n_symbols, int(j))
            per_chunk = max(1, CHUNK // max(1, tuples.shape[0]))
            for start in range(0, group.shape[0], per_chunk):
                sel = group[start : start + per_chunk]
                seqs = tuples[:, self.rows[sel]].transpose(1, 0, 2).reshape(-1, self.l)
                yield seqs, np.repeat(sel, tuples.shape[0])

    def _collect(self, ids: np.ndarray, split: str) -> tuple[np.ndarray, np.ndarray]:
        parts = [(s[k], t[k]) for s, t in self.iter_sequences(ids) for k in [self.in_split(s, split)]]
        if not parts:
            return np.zeros((0, self.l), dtype=np.int64), np.zeros(0, dtype=np.int64)
        seqs = np.concatenate([p[0] for p in parts])
        tmpl = np.concatenate([p[1] for p in parts])
        order = np.argsort(tmpl, kind="stable")
        return seqs[order], tmpl[order]

    def enumerate(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """Every sequence of the split, by template then injection: (sequences [N, l], template [N])."""
        return self._collect(np.arange(self.n_templates), split)

    # --- sizes --------------------------------------------------------------------------------------
    def split_counts(self, split: str) -> tuple[list[int], bool]:
        """Sequences of each template in the split, and whether all counts are exact (module docstring)."""
        if split == "all":
            return list(self.sizes), True
        if split not in self._counts:
            counts = [int(c) for c in self._tables[split][2]]
            frac = self.eval_fraction if split == "eval" else 1.0 - self.eval_fraction
            rest = np.flatnonzero(~self.tabled)
            rest = rest[np.argsort([self.sizes[t] for t in rest], kind="stable")]
            budget, exact_ids = 0, []
            for t in rest:
                budget += self.sizes[t]
                if budget > COUNT_BUDGET:
                    break
                exact_ids.append(int(t))
            for t in rest:
                counts[t] = round(self.sizes[t] * frac)
            acc = np.zeros(self.n_templates, dtype=np.int64)
            for seqs, tmpl in self.iter_sequences(np.array(sorted(exact_ids), dtype=np.int64)):
                acc += np.bincount(tmpl[self.in_split(seqs, split)], minlength=self.n_templates)
            for t in exact_ids:
                counts[t] = int(acc[t])
            self._counts[split] = (counts, len(exact_ids) == rest.shape[0])
        return self._counts[split]

    def check_splits(self, min_per_split: int) -> None:
        """ValueError unless every template has at least ``min_per_split`` sequences in each split."""
        for t in range(self.n_templates):
            if self.sizes[t] < min_per_split:
                raise ValueError(
                    f"n_symbols={self.n_symbols} is too small: template {template_string(self.rows[t])} has "
                    f"only {self.sizes[t]} sequence(s), at least {min_per_split} needed"
                )
        p = self.eval_fraction
        for split, frac in (("eval", p), ("train", 1.0 - p)):
            if frac == 0.0:  # eval_fraction 0: no held-out split, nothing to check
                continue
            # Untabled templates expect at least SAFE_EXPECTED sequences in the split (see __init__).
            counts = self._tables[split][2]
            for t in np.flatnonzero(counts >= 0):
                c = int(counts[t])
                if c < min_per_split:
                    raise ValueError(
                        f"with n_symbols={self.n_symbols}, eval_fraction={p}, split_seed={self.split_seed}, "
                        f"template {template_string(self.rows[t])} has {c} of its {self.sizes[t]} sequences "
                        f"in the {split} split, fewer than the {min_per_split} needed; change "
                        f"eval_fraction or split_seed, or raise n_symbols"
                    )

    # --- sampling -----------------------------------------------------------------------------------
    @property
    def distinct_prob(self) -> float:
        """Probability that jmax independent uniform symbols are distinct."""
        return falling_factorial(self.n_symbols, self.jmax) / self.n_symbols**self.jmax

    def _draw_injections(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` candidate injections [n, jmax] and whether each is valid. When jmax independent symbols
        are distinct with probability >= 1/2 they are drawn independently (valid iff distinct, rejected
        otherwise: conditionally uniform, and much cheaper than permuting all symbols); else
        ``sample_distinct``."""
        if self.distinct_prob >= 0.5:
            inj = rng.integers(0, self.n_symbols, (n, self.jmax))
            srt = np.sort(inj, axis=1)
            return inj, (srt[:, 1:] != srt[:, :-1]).all(axis=1)
        return sample_distinct(rng, n, self.n_symbols, self.jmax), np.ones(n, dtype=bool)

    def max_rounds(self, n: int, split: str, exclude: bool) -> int:
        """Rounds after which a batch of n is unfilled with probability < 1e-12, from a lower bound on the
        acceptance rate: injection validity, split membership (an untabled template has at least
        SAFE_EXPECTED split sequences, so about frac of its sequences: frac / 2 bounds it), exclusion
        (at least 2 candidates: 1/2)."""
        accept = 1.0
        if split == "all" or not self.tabled.all():  # some rows use drawn injections
            accept = self.distinct_prob if self.distinct_prob >= 0.5 else 1.0
            if split != "all":
                accept *= (self.eval_fraction if split == "eval" else 1.0 - self.eval_fraction) / 2
        if exclude:
            accept /= 2
        if accept >= 1.0:
            return 1
        return math.ceil(math.log(1e-12 / max(n, 1)) / math.log1p(-accept)) + 16

    def sample(
        self, rng: np.random.Generator, tmpl: np.ndarray, split: str, exclude: np.ndarray | None = None
    ) -> np.ndarray:
        """A uniformly random sequence [B, l] of template ``tmpl[b]`` in ``split`` for each b, different
        from ``exclude[b]`` when given. Vectorised rejection: only rejected rows are redrawn, for a bounded
        number of rounds."""
        tmpl = np.asarray(tmpl, dtype=np.int64)
        if split == "eval" and self.eval_fraction == 0.0 and tmpl.shape[0]:
            raise ValueError("eval_fraction is 0: there is no held-out split to sample from")
        out = np.zeros((tmpl.shape[0], self.l), dtype=np.int64)
        todo = np.arange(tmpl.shape[0])
        for _ in range(self.max_rounds(tmpl.shape[0], split, exclude is not None)):
            if todo.size == 0:
                break
            tt = tmpl[todo]
            inj, inj_ok = self._draw_injections(rng, tt.shape[0])
            cand = np.take_along_axis(inj, self.rows[tt], axis=1)
            tab = np.zeros(tt.shape[0], dtype=bool)
            if split != "all" and self.tabled.any():
                table, offsets, counts = self._tables[split]
                u = rng.random(tt.shape[0])
                pick = offsets[tt] + np.floor(u * np.maximum(counts[tt], 1)).astype(np.int64)
                tab = counts[tt] >= 0
                cand[tab] = table[pick[tab]]
            ok = self.in_split(cand, split) & (inj_ok | tab)
            if exclude is not None:
                ok &= (cand != exclude[todo]).any(axis=1)
            out[todo[ok]] = cand[ok]
            todo = todo[~ok]
        if todo.size:
            raise ValueError(
                f"could not draw {todo.size} {split} sequence(s) by rejection; eval_fraction="
                f"{self.eval_fraction} may be too extreme for n_symbols={self.n_symbols}"
            )
        return out


    # --- stream 2 (``tasks.template_counter``) ------------------------------------------------------------
    @cached_property
    def device_tables(self) -> DeviceTables:
        """The templates, and the training sequences of the tabled ones, for sampling on a device."""
        from depthlab.tasks.counter import DeviceTables

        table, offsets, counts = self._tables["train"]
        return DeviceTables(rows=self.rows, table=table, offsets=offsets, counts=counts)


class TemplateTask(Task):
    """Base of the template tasks (template, ictm): templates and held-out split from the fields ``l``,
    ``n_symbols``, ``n_wildcards``, ``templates``, ``eval_fraction`` and ``split_seed``, which a subclass declares."""

    def check_template_fields(self) -> None:
        """ValueError naming the first of those fields that is impossible."""
        if self.l < 1:
            raise ValueError(f"l must be at least 1 (template length 0 is impossible), got {self.l}")
        if self.n_symbols < 1:
            raise ValueError(f"n_symbols must be at least 1, got {self.n_symbols}")
        if self.n_wildcards is not None and self.n_wildcards < 1:
            raise ValueError(f"n_wildcards must be at least 1 (or None: l), got {self.n_wildcards}")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(
                f"eval_fraction must be in [0, 1) (0: no held-out split), got {self.eval_fraction}"
            )

    @cached_property
    def template_rows(self) -> np.ndarray:
        """Canonical templates [T, l] (restricted-growth form)."""
        return resolve_templates(self.l, self.n_symbols, self.n_wildcards, self.templates)

    @cached_property
    def space(self) -> TemplateSpace:
        rows = tuple(map(tuple, self.template_rows.tolist()))
        return template_space(rows, self.n_symbols, self.eval_fraction, self.split_seed)

    @property
    def template_strings(self) -> list[str]:
        """The canonical templates in greek letters, e.g. ['ααα', 'ααβ', 'αβα', 'αββ', 'αβγ']."""
        return [template_string(r) for r in self.template_rows]

    def split_counts_exact(self, split: str = "eval") -> bool:
        return self.space.split_counts(check_split(split, SPLITS))[1]


@lru_cache(maxsize=32)
def template_space(rows: tuple[tuple[int, ...], ...], n_symbols: int, eval_fraction: float,
                   split_seed: int) -> TemplateSpace:
    """One TemplateSpace per set of arguments: building it enumerates the small templates (about 25 ms at
    seed 001's paper sizes), and validating a sweep builds the same task once per run (2,000 runs of
    ``reproduce --list`` spent 3.7 s here). Its only state after construction is a memo of split counts."""
    return TemplateSpace(np.array(rows, dtype=np.int64), n_symbols, eval_fraction, split_seed)


def ordered_product_sum(weights: list[int], special: list[int], k: int) -> int:
    """Σ over ordered selections (t_0..t_{k-1}) of k distinct indices of
    Σ_c special[t_c] · Π_{i≠c} weights[t_i].

    = k · (k-1)! · Σ_t special[t] · e_{k-1}(weights without t), with e the elementary symmetric polynomials;
    exact integer arithmetic.
    """
    e = [1] + [0] * k  # e_j of all weights
    for w in weights:
        for j in range(k, 0, -1):
            e[j] += w * e[j - 1]
    total = 0
    for w, s in zip(weights, special, strict=True):
        # e_j(without w) = e_j - w · e_{j-1}(without w)
        prev = 1
        for j in range(1, k):
            prev = e[j] - w * prev
        total += s * (prev if k > 1 else 1)
    return total * k * math.factorial(k - 1)
