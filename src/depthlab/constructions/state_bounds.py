"""Seed 003's lower bounds on the state of recurrent models (and of one-layer transformers), as certificates.

Seed 003 §2: "An RNN with a hidden state of size m over p-bit numbers […] The hidden state is an mp-bit memory";
"we say that the representation size of a hidden state is mp". Every bound below is on that size, in bits.

- **Theorem 2** (§3): "If an RNN with a hidden state of representation size mp computes any function f: Σ^N → {0,1},
  then for any K < N, if Alice has access to s_1, …, s_K and Bob has access to s_{K+1}, …, s_N, then there exists a
  one-way communication protocol with mp bits from Alice to Bob, by which Bob can compute the output of the function
  f(s_1 … s_N)." So mp is at least the one-way communication complexity of f at every contiguous split K: the
  log₂ of the number of distinct rows of the matrix (prefix, suffix) ↦ f, rounded up. :func:`one_way_bits`
  computes that number exactly, by enumeration, for small N: a check of each bound's value, not only its order.
- **Theorem 3** (§3, proof in App. C.1 from Fact 3, the Index problem): "Any recurrent model with a hidden state of
  width m using p-bits of precision that computes the Index Lookup task for all sequences of length N must have
  m ≥ N/p" — mp ≥ N bits (no hidden constant). The proof maps two symbols of Σ to 0 and 1.
- **Theorem 11** (App. F.1, Proof 1 from Fact 2 and Theorem 2): "Any recurrent model with a hidden state of size m
  over p-bits of precision that computes the INEQ(x) for all x ∈ {0,1}^N must have mp ≥ N/2" — for EQ as well
  (INEQ = 1 − EQ). Eq-one's alphabet holds two symbols, so it applies there; Eq-ncp by a reduction that is
  depthlab's, not the seed's: a model whose next-symbol sets are right at every prefix of w [sep] w decides whether
  a second half w′ equals w (at the first position where w′ differs, its symbol is not in the set).
- **Theorem 8** (§5.2, App. G.1, from Fact 1, Disjointness): "Any recurrent model with a hidden state of width m
  with p-bits of precision that can perform the nearest neighbor task for all inputs of length N must have
  m ≥ N/2p" — mp ≥ N/2 bits.
- **Dyck-(2, 2)**: the seed proves no recurrent bound that grows with N; App. E: "the language Dyck-(2, 2)
  considered here can be represented by a DFA with just 7 states. Hence, it follows that a recurrent model of
  constant size can represent the Dyck-(2, 2) language". Its bound is for **one-layer transformers**: **Theorem 5**
  (§4.1; Theorem 10 in App. E with d for m), from **Lemma 1** (Alice and Bob holding the odd and even positions
  "must exchange at least N − 1 bits", a fooling set of size 2^(N−1)) and **Theorem 4** (a one-layer transformer
  gives a protocol of "3m(p + log N)H bits"): "Consider a one-layer Transformer f ∈ TF^1_{m,p,H} deciding
  membership in Dyck-(2, 2). Then mH ≥ (N − 1)/(3(p + log N))". The base of the log is not stated; read as 2
  (bits). Theorem 12 (INEQ, one-layer transformers: "mpH = Ω(N)") leaves its constant unspecified: no number.

A certificate at each length N gives the bound in bits (Dyck: the one-layer transformer's mH), the exact one-way
complexity where N is small enough to enumerate, and beside them the trained models of a store at that N: their
state in bits (``state_size`` numbers × p, p = 32 for fp32 and TF32 runs, 16 for bf16), whether they held (final
accuracy at least ``held``) and whether their state is above the bound. A model below the bound cannot be right on
every input of length N; one above it may still fail (the bound is necessary, not sufficient).
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import UserError
from ..models import MODELS

TASKS = ("index_lookup", "dyck", "eq_random", "eq_one", "eq_ncp", "nearest_neighbor")
ENUMERATE_LIMIT = 2**16  # inputs enumerated for the exact one-way complexity (Dyck: N ≤ 8; INEQ, Index: N ≤ 16)
PRECISION_BITS = {"fp32": 32, "tf32": 32, "bf16": 16}

BOUNDS: dict[str, dict[str, str]] = {
    "index_lookup": {"theorem": "Theorem 3", "source": "seed 003 §3, App. C.1 (Theorem 2, Fact 3)",
                     "bound": "mp ≥ N", "of": "recurrent state (bits)",
                     "statement": "Any recurrent model with a hidden state of width m using p-bits of precision that "
                                  "computes the Index Lookup task for all sequences of length N must have m ≥ N/p."},
    "equality": {"theorem": "Theorem 11", "source": "seed 003 App. F.1 (Theorem 2, Fact 2)",
                 "bound": "mp ≥ N/2", "of": "recurrent state (bits)",
                 "statement": "Any recurrent model with a hidden state of size m over p-bits of precision that "
                              "computes the INEQ(x) for all x ∈ {0,1}^N must have mp ≥ N/2."},
    "nearest_neighbor": {"theorem": "Theorem 8", "source": "seed 003 §5.2, App. G.1 (Theorem 2, Fact 1)",
                         "bound": "mp ≥ N/2", "of": "recurrent state (bits)",
                         "statement": "Any recurrent model with a hidden state of width m with p-bits of precision "
                                      "that can perform the nearest neighbor task for all inputs of length N must "
                                      "have m ≥ N/2p."},
    "dyck": {"theorem": "Theorem 5 (one-layer transformers; Theorem 10, Lemma 1, Theorem 4)",
             "source": "seed 003 §4.1, App. E, App. D",
             "bound": "mH ≥ (N − 1)/(3(p + log₂ N))", "of": "one-layer transformer width × heads",
             "statement": "Consider a one-layer Transformer f ∈ TF^1_{m,p,H} deciding membership in Dyck-(2, 2). "
                          "Then mH ≥ (N − 1)/(3(p + log N)). [Recurrent models: none; App. E: \"the language "
                          "Dyck-(2, 2) considered here can be represented by a DFA with just 7 states\".]"},
}


def family(task: str) -> str:
    if task not in TASKS:
        raise UserError(f"task: must be one of {', '.join(TASKS)} (got {task!r})")
    return "equality" if task.startswith("eq_") else task


def bound(task: str, n: int, p: int = 32) -> float:
    """The theorem's bound at length ``n``: bits of recurrent state, or (Dyck) a one-layer transformer's mH at
    ``p``-bit precision."""
    kind = family(task)
    if kind == "index_lookup":
        return float(n)
    if kind in ("equality", "nearest_neighbor"):
        return n / 2
    return (n - 1) / (3 * (p + math.log2(n)))


# --- exact one-way complexity at contiguous splits (Theorem 2), by enumeration --------------------------------

def _index_values(n: int) -> np.ndarray:
    """Index over binary strings (App. C.1's reduction): row s_1 … s_n (Alice's), column p (Bob's): s_p."""
    return np.array(list(itertools.product((0, 1), repeat=n)), dtype=np.uint8)


def _ineq_values(n: int) -> np.ndarray:
    x = np.arange(2**n, dtype=np.int64)
    return ((x >> (n // 2)) != (x & ((1 << (n // 2)) - 1))).astype(np.uint8)


@lru_cache(maxsize=8)
def _dyck_values(n: int) -> np.ndarray:
    """Membership of every string of Σ^n, Σ = ( ) [ ], in Dyck-(2, 2), by the bounded stack (App. E), vectorised
    over all 4^n strings (symbol 0 '(', 1 ')', 2 '[', 3 ']'; string index = base-4 digits, first symbol highest)."""
    count = 4**n
    idx = np.arange(count, dtype=np.int64)
    stack = np.zeros((count, 2), dtype=np.int8)  # bracket types, 1 or 2; 0 empty
    depth = np.zeros(count, dtype=np.int8)
    alive = np.ones(count, dtype=bool)
    rows = np.arange(count)
    for i in range(n):
        sym = (idx // 4 ** (n - 1 - i)) % 4
        kind, opening = sym // 2 + 1, sym % 2 == 0
        push = alive & opening
        alive &= ~(push & (depth >= 2))
        push &= alive
        stack[rows[push], depth[push]] = kind[push]
        depth[push] += 1
        pop = alive & ~opening
        top = stack[rows, np.maximum(depth - 1, 0)]
        alive &= ~(pop & ((depth == 0) | (top != kind)))
        pop &= alive
        depth[pop] -= 1
        stack[rows[pop], depth[pop]] = 0
    return (alive & (depth == 0)).astype(np.uint8)


def _distinct_rows(matrix: np.ndarray) -> int:
    return len(np.unique(np.packbits(matrix, axis=1), axis=0))


def one_way_bits(task: str, n: int) -> dict[str, Any] | None:
    """The exact one-way communication complexity of the task's function at every contiguous split (Theorem 2:
    a recurrent model's mp is at least each), by enumerating its inputs; None when there are more than
    ``ENUMERATE_LIMIT`` (or none are defined: nearest neighbour's inputs are real vectors).

    Index lookup: Alice holds the binary string, Bob the position (App. C.1). INEQ: every split K of the n bits.
    Dyck-(2, 2): every split K of the n brackets."""
    kind = family(task)
    if kind == "index_lookup" and 2**n <= ENUMERATE_LIMIT:
        rows = _distinct_rows(_index_values(n))
        return {"split": n, "distinct_rows": rows, "bits": math.ceil(math.log2(rows))}
    if kind == "equality" and n % 2 == 0 and 2**n <= ENUMERATE_LIMIT:
        values = _ineq_values(n)
        per_split = {k: _distinct_rows(values.reshape(2**k, 2 ** (n - k))) for k in range(1, n)}
    elif kind == "dyck" and n % 2 == 0 and 4**n <= ENUMERATE_LIMIT:
        values = _dyck_values(n)
        per_split = {k: _distinct_rows(values.reshape(4**k, 4 ** (n - k))) for k in range(1, n)}
    else:
        return None
    split = max(per_split, key=per_split.get)
    return {"split": split, "distinct_rows": per_split[split], "bits": math.ceil(math.log2(per_split[split]))}


def fooling_set(n: int) -> dict[str, Any] | None:
    """Lemma 1's fooling set for Dyck-(2, 2) at even length n (App. E): every string of the language, split into its
    odd- and even-position symbols; checked to fool (no two of them can swap halves and stay in the language).
    Its size bounds the two-way complexity of that partition: log₂ |S| bits (Fact 4)."""
    if n % 2 or 4**n > ENUMERATE_LIMIT:
        return None
    members = np.flatnonzero(_dyck_values(n))
    digits = (members[:, None] // 4 ** np.arange(n - 1, -1, -1)) % 4
    weights = 4 ** np.arange(n - 1, -1, -1)
    odd = digits[:, 0::2] @ weights[0::2]  # Alice's part of each string's index (positions 1, 3, … of the seed)
    even = digits[:, 1::2] @ weights[1::2]  # Bob's
    mixed = np.isin(odd[:, None] + even[None, :], members)  # (x_i, y_j) in the language?
    fools = bool(mixed.diagonal().all() and mixed.sum() == len(members))
    return {"size": len(members), "fools": fools, "bits": math.log2(len(members)), "lemma_1_bits": n - 1}


# --- trained models beside the bound --------------------------------------------------------------------------

def state_bits(record: dict[str, Any]) -> tuple[int | None, int]:
    """A stored run's recurrent state in bits (state_size numbers × p) and p; None for models without a state."""
    model = record["config"]["model"]
    spec_cls = MODELS.get(model["name"])
    precision = PRECISION_BITS.get(str((record.get("final") or {}).get("precision", "fp32")), 32)
    if spec_cls is None:
        return None, precision
    spec = spec_cls(**model)
    size = getattr(spec, "state_size", None)
    return (None if size is None else int(size) * precision), precision


def trained_rows(records: list[dict[str, Any]], task: str, n: int, held: float) -> list[dict[str, Any]]:
    """The store's finished runs of ``task`` at length ``n`` beside the bound: recurrent models' state in bits
    (Dyck: one-layer transformers' width × heads too), final accuracy, held or failed, above the bound or not."""
    out = []
    for r in records:
        config = r["config"]
        if config["task"]["name"] != task or config["task"].get("N") != n or r["status"] != "done":
            continue
        model = config["model"]
        accuracy = (r["final"] or {}).get("accuracy")
        bits, p = state_bits(r)
        row = {"run": r["id"], "model": model["name"], "layers": model.get("layers"), "width": model.get("width"),
               "accuracy": accuracy, "held": accuracy is not None and accuracy >= held, "precision_bits": p}
        if family(task) == "dyck":
            if model["name"] != "transformer" or model.get("layers") != 1:
                if bits is not None:  # recurrent models of Dyck: no bound, their state shown
                    out.append({**row, "state_bits": bits, "bound": None, "above_bound": None})
                continue
            mh = int(model.get("width", 0)) * int(model.get("heads", 1))  # §2: "The width […] is max(m, d)"
            need = bound(task, n, p)
            out.append({**row, "mH": mh, "bound": need, "above_bound": mh >= need})
        elif bits is not None:
            need = bound(task, n)
            out.append({**row, "state_bits": bits, "bound": need, "above_bound": bits >= need})
    return out


def certificate(task: str, lengths: list[int], records: list[dict[str, Any]], held: float = 0.95,
                p: int = 32) -> dict[str, Any]:
    """The bound at each length, its exact one-way value where N is small, and the trained models beside it."""
    kind = family(task)
    rows = []
    for n in lengths:
        exact = one_way_bits(task, n)
        entry = {"N": n, "bound": bound(task, n, p), "exact_one_way": exact,
                 "models": trained_rows(records, task, n, held)}
        if kind == "dyck":
            entry["fooling_set"] = fooling_set(n)
        rows.append(entry)
    return {**BOUNDS[kind], "task": task, "precision_bits": p, "held_at": held, "rows": rows}
