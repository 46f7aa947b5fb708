"""The retrieval problem of seed 002: its token form (§3.1) and its minimal vector formulation (§6, §7).

Seed 002 §3.1: "Given an input sequence … x_{D−1} x_D … … x_1 x_2 … x_0 x_1 … x_0, the retrieval problem consists
in predicting the token x_D. By setting D = 1, we recover exactly the original induction problem."

Seed 002 §6: "N retrieval chains, D retrieval steps per chain, and K embedding dimensions […] Each chain contains
D + 1 unique symbols forming D pairs and one query. For every input sequence, each of the N(D + 1) unique symbols
is assigned a K-dimensional vector whose components are sampled i.i.d from a standard normal distribution. I
create the input sequences by perfectly interleaving the pairs of symbols forming each retrieval chain, followed
by the N query symbols. I randomly shuffle the query vectors. I also shuffle the input pairs from different
chains within the same retrieval step. Finally, I concatenate each token embedding with a K-dimensional rotary
positional encoding. Each input sequence will contain N(2D + 1) vectors of dimension 2K. The output sequences
consist of N vectors, one for each query token."

Seed 002 §7: "In the IC formulation, the target vectors […] contain all the tokens forming each retrieval chain
concatenated (except the query token x_0). In the non-IC formulation, the target vectors are K-dimensional and
contain only the last token of each retrieval chain, namely x_D." (The seed says the IC targets have "DN
dimensions"; the concatenation of D vectors of K dimensions has DK, the same number at the seed's N = K = 4.)

Layout shared by both tasks (and by ``constructions.information_flow``). Step s (s = 1 … D) is the pair
(x_{s-1}, x_s) of every chain; the steps are written from D down to 1 — the §3.1 order, in which a causal model
can resolve the chain — the N pairs of one step in a uniformly random chain order, two positions per pair. Then
come the queries: all N chains' x_0 in random order (vector task, one output per query), or the x_0 of one
uniformly chosen chain (token task, one output at the last position, the §3.1 question; the other chains are
distractors).

Roles. Positions move between examples, so analyses name them by their role in the chain of a read-out:
``query`` (that chain's x_0 at the end), ``first of pair k`` (x_{k-1} in the chain's step-k pair) and
``second of pair k`` (x_k in it), k = 1 … D. ``roles(batch)`` maps each role to positions [B, P], one column per
read-out (N for the vector task, 1 for the token task). ``parse_role`` reads the spellings the analysis commands
accept ("pair 2 first", "first of pair 2", "query x0").

Chain letters: the seed writes x_0, x_1, … as A, B, C, …; an example decodes as ``A2 B2 A0 B0 … | A1 A3 …`` with
the chain index after the letter (vector task).
"""

from __future__ import annotations

import itertools
import math
import re
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field, model_validator

from depthlab.tasks.base import (
    ENUMERATE_LIMIT,
    Batch,
    Task,
    all_distinct_tuples,
    check_split,
    falling_factorial,
    letter_names,
    product_indices,
    register,
    sample_distinct,
)

if TYPE_CHECKING:  # torch only in annotations: `depthlab tasks` lists the tasks without importing torch
    import torch

    from depthlab.tasks.counter import Counter, DeviceTables

SPLITS = ("train", "eval", "all")
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


# --------------------------------------------------------------------------------------------------- roles


def role_names(depth: int) -> list[str]:
    """Every role of a chain with ``depth`` steps, in chain order: query, first/second of pair 1, …, pair D."""
    names = ["query"]
    for k in range(1, depth + 1):
        names += [f"first of pair {k}", f"second of pair {k}"]
    return names


_ROLE_FORMS = [
    (re.compile(r"^(?:query|query x0|x0 query|q)$"), lambda m: "query"),
    (re.compile(r"^(first|second) of pair (\d+)$"), lambda m: f"{m.group(1)} of pair {int(m.group(2))}"),
    (re.compile(r"^pair (\d+) (first|second)$"), lambda m: f"{m.group(2)} of pair {int(m.group(1))}"),
    (re.compile(r"^p(\d+)\.(first|second)$"), lambda m: f"{m.group(2)} of pair {int(m.group(1))}"),
]


def parse_role(text: str, allowed: list[str]) -> str:
    """A role's canonical name from any accepted spelling; ValueError naming the allowed roles otherwise."""
    spelled = " ".join(str(text).strip().lower().split())
    for pattern, canon in _ROLE_FORMS:
        m = pattern.match(spelled)
        if m:
            name = canon(m)
            if name in allowed:
                return name
            break
    if spelled in allowed:
        return spelled
    raise ValueError(f"unknown role {text!r}; allowed: {', '.join(allowed)}")


def pair_roles(slot: np.ndarray, chains: np.ndarray, n_chains: int) -> dict[str, np.ndarray]:
    """Positions of the pair roles of ``chains`` [B, P] given ``slot`` [B, D, N] (slot of chain c in step s+1).

    Step s sits in block D - s; block b, slot j holds positions 2N·b + 2j (first) and 2N·b + 2j + 1 (second).
    """
    depth = slot.shape[1]
    rows = np.arange(slot.shape[0])[:, None]
    out = {}
    for k in range(1, depth + 1):
        j = slot[:, k - 1][rows, chains]  # [B, P]
        first = 2 * n_chains * (depth - k) + 2 * j
        out[f"first of pair {k}"] = first
        out[f"second of pair {k}"] = first + 1
    return out


def _interleave(chain_tokens: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Pair positions of every step: chain_tokens [B, N, D+1, …], order [B, D, N] (chain at slot j of step s+1).

    Returns [B, 2ND, …]: step D first, then D-1, …, 1; in each step the chains' pairs (x_{s-1}, x_s) in order.
    """
    b, n, d1 = chain_tokens.shape[:3]
    depth = d1 - 1
    rows = np.arange(b)[:, None]
    blocks = []
    for s in range(depth, 0, -1):
        chain = order[:, s - 1]  # [B, N]
        first = chain_tokens[rows, chain, s - 1]  # [B, N, …]
        second = chain_tokens[rows, chain, s]
        blocks.append(np.stack([first, second], axis=2).reshape(b, 2 * n, *chain_tokens.shape[3:]))
    return np.concatenate(blocks, axis=1)


def interleaved_symbols(order: torch.Tensor, depth: int) -> torch.Tensor:
    """``_interleave``'s layout as indices on the device: order [R, B, D, N] (chain at slot j of step s+1) gives,
    for every pair position, the symbol index chain·(D+1) + k it holds, [R, B, 2ND] (step D first)."""
    import torch

    before = torch.arange(depth - 1, -1, -1, device=order.device)[:, None]  # s − 1 for the blocks s = D … 1
    first = order.flip(-2) * (depth + 1) + before  # [R, B, D, N]: x_{s-1} of each slot's chain
    return torch.stack([first, first + 1], -1).flatten(-3)


def _slots(order: np.ndarray) -> np.ndarray:
    """Inverse permutations: slot[b, s, c] = j where order[b, s, j] = c."""
    return np.argsort(order, axis=-1)


# ---------------------------------------------------------------------------------------- vector task


def rotary_features(n: int, dim: int, base: float) -> np.ndarray:
    """[n, dim] positional features: (cos pθ_i, sin pθ_i) for θ_i = base^(-2i/dim), i < dim/2 — RoPE's angles."""
    theta = base ** (-np.arange(0, dim, 2) / dim)
    angles = np.arange(n)[:, None] * theta[None]
    feats = np.empty((n, dim))
    feats[:, 0::2] = np.cos(angles)
    feats[:, 1::2] = np.sin(angles)
    return feats.astype(np.float32)


@register
class RetrievalVector(Task):
    """Seed 002 §6-§7: N chains of Gaussian symbol vectors, one regression output per query (MSE)."""

    name = "retrieval_vec"
    title = "retrieval (vectors)"
    section = "seed 002 §6-§7"
    summary = "minimal retrieval: N chains of D Gaussian pairs, predict each query's chain (IC) or its end (non-IC)"
    eval_protocol = "fresh sample (continuous inputs: every example is new)"
    loss = "mse"

    N: int = Field(4, ge=1, description="retrieval chains (one query each)")
    D: int = Field(3, ge=1, description="retrieval steps per chain")
    K: int = Field(4, ge=1, description="embedding dimensions of a symbol")
    target: Literal["ic", "non_ic"] = Field("ic", description="ic: x_1 … x_D concatenated; non_ic: x_D only")
    positional: Literal["rotary", "onehot", "none"] = Field(
        "rotary", description="features concatenated to each vector: rotary (K dims), one-hot (n dims) or none")
    rope_base: float = Field(10000.0, gt=1, description="rotary features: θ_i = rope_base^(-2i/K)")

    @model_validator(mode="after")
    def _check(self) -> RetrievalVector:
        if self.positional == "rotary" and self.K % 2:
            raise ValueError(f"K must be even for rotary positional features (cos/sin pairs), got {self.K}")
        return self

    # --- shapes -------------------------------------------------------------------------------------
    @property
    def pos_dim(self) -> int:
        return {"rotary": self.K, "onehot": self.seq_len, "none": 0}[self.positional]

    @property
    def input_dim(self) -> int:
        return self.K + self.pos_dim

    @property
    def read_positions(self) -> list[int]:
        start = 2 * self.N * self.D
        return list(range(start, start + self.N))

    @property
    def target_steps(self) -> list[int]:
        """The chain positions k whose x_k each output holds, in output order."""
        return list(range(1, self.D + 1)) if self.target == "ic" else [self.D]

    @property
    def n_outputs(self) -> int:
        return self.K * len(self.target_steps)

    @property
    def vocab(self) -> list[str]:
        """Names of the input features (the model's input width): symbol coordinates, then positional ones."""
        return [f"e{i}" for i in range(self.K)] + [f"p{i}" for i in range(self.pos_dim)]

    @property
    def vocab_size(self) -> int:
        return self.input_dim

    @property
    def labels(self) -> list[str]:
        """Names of the output coordinates: x{k}[i]."""
        return [f"x{k}[{i}]" for k in self.target_steps for i in range(self.K)]

    @property
    def seq_len(self) -> int:
        return self.N * (2 * self.D + 1)

    @property
    def chance(self) -> float:
        """The MSE of the best constant prediction (zero): the targets' variance, 1. (A loss, not an accuracy.)"""
        return 1.0

    # --- data ---------------------------------------------------------------------------------------
    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        N, D, K = self.N, self.D, self.K
        symbols = rng.standard_normal((n, N, D + 1, K)).astype(np.float32)
        order = sample_distinct(rng, n * D, N, N).reshape(n, D, N)
        queries = sample_distinct(rng, n, N, N)  # [B, N]: chain of query j
        return self._build(symbols, order, queries)

    counter_sampling = True

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s distribution from the counter stream: N(D+1) symbols of K i.i.d. standard normals (Box–Muller,
        rounded to float32 as ``sample``'s are), a uniform chain order per step and a uniform order of the queries;
        the positional features appended; targets x_1 … x_D (or x_D) of each query's chain."""
        import torch

        N, D, K = self.N, self.D, self.K
        symbols = counter.normal(draw=0, width=N * (D + 1) * K).float().unflatten(-1, (N * (D + 1), K))
        order = counter.distinct(N, N, draw=1, rows=D)  # [R, B, D, N]
        queries = counter.distinct(N, N, draw=2) * (D + 1)  # [R, B, N]: x_0 of query j's chain
        where = torch.cat([interleaved_symbols(order, D), queries], -1)  # [R, B, n]
        vectors = symbols.gather(-2, where[..., None].expand(-1, -1, -1, K))
        pos = self.device_tables.get("positions", counter.device)
        inputs = torch.cat([vectors, pos.expand(*vectors.shape[:2], *pos.shape)], -1)
        steps = torch.arange(D + 1 - len(self.target_steps), D + 1, device=counter.device)  # target_steps
        held = (queries[..., None] + steps).flatten(-2)  # [R, B, N·len(steps)]
        targets = symbols.gather(-2, held[..., None].expand(-1, -1, -1, K))
        return inputs, targets.reshape(*queries.shape, len(self.target_steps) * K)

    @cached_property
    def device_tables(self) -> DeviceTables:
        from depthlab.tasks.counter import DeviceTables

        return DeviceTables(positions=self.positions)

    @property
    def positions(self) -> np.ndarray:
        """The positional features [n, pos_dim] appended to every example."""
        if self.positional == "rotary":
            return rotary_features(self.seq_len, self.K, self.rope_base)
        if self.positional == "onehot":
            return np.eye(self.seq_len, dtype=np.float32)
        return np.zeros((self.seq_len, 0), dtype=np.float32)

    def _build(self, symbols: np.ndarray, order: np.ndarray, queries: np.ndarray) -> Batch:
        b, N, D = symbols.shape[0], self.N, self.D
        rows = np.arange(b)[:, None]
        vectors = np.concatenate([_interleave(symbols, order), symbols[rows, queries, 0]], axis=1)  # [B, n, K]
        ids = np.arange(N * (D + 1)).reshape(1, N, D + 1).repeat(b, axis=0)
        symbol_id = np.concatenate([_interleave(ids, order), ids[rows, queries, 0]], axis=1)  # chain*(D+1) + k
        pos = self.positions
        inputs = np.concatenate([vectors, np.broadcast_to(pos, (b, *pos.shape))], axis=2).astype(np.float32)
        steps = self.target_steps
        targets = symbols[rows, queries][:, :, steps].reshape(b, N, len(steps) * self.K)
        meta = {"symbol": symbol_id.astype(np.int64), "query_chain": queries.astype(np.int64),
                "slot": _slots(order).astype(np.int64)}
        return Batch(np.ascontiguousarray(inputs), np.ascontiguousarray(targets, dtype=np.float32), meta)

    def dataset_size(self, split: str = "eval") -> int:
        check_split(split, SPLITS)
        return 10**18  # continuous inputs: unbounded

    def enumerate(self, split: str = "eval") -> Batch | None:
        return None

    # --- seed 002 Figure 4 (right): the loss of each chain position ----------------------------------
    def partial_losses(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """MSE of each chain position x_k, per run: outputs and targets [R, B, N, len(steps)·K] -> {"x{k}": [R]}."""
        r = outputs.shape[0]
        o = outputs.float().reshape(r, -1, len(self.target_steps), self.K)
        t = targets.float().reshape(r, -1, len(self.target_steps), self.K)
        per = ((o - t) ** 2).mean(dim=(1, 3))  # [R, steps]
        return {f"x{k}": per[:, i] for i, k in enumerate(self.target_steps)}

    # --- roles and decoding -------------------------------------------------------------------------
    @property
    def role_names(self) -> list[str]:
        return role_names(self.D)

    def roles(self, batch: Batch) -> dict[str, np.ndarray]:
        """Positions [B, N] of every role of each read-out's chain (column j: the chain of query j)."""
        chains = batch.meta["query_chain"]
        out = {"query": np.broadcast_to(np.arange(2 * self.N * self.D, self.seq_len), chains.shape).copy()}
        out.update(pair_roles(batch.meta["slot"], chains, self.N))
        return out

    def symbol_label(self, symbol: int) -> str:
        chain, k = divmod(int(symbol), self.D + 1)
        return f"{LETTERS[k % 26]}{chain}"

    def example_tokens(self, batch: Batch, i: int) -> tuple[list[str], str]:
        tokens = [self.symbol_label(s) for s in batch.meta["symbol"][i]]
        chains = batch.meta["query_chain"][i]
        target = " ".join("".join(f"{LETTERS[k % 26]}{c}" for k in self.target_steps) for c in chains)
        return tokens, target

    def decode(self, batch: Batch, i: int) -> str:
        tokens, target = self.example_tokens(batch, i)
        pairs = [tokens[j] + tokens[j + 1] for j in range(0, 2 * self.N * self.D, 2)]
        return " ".join(pairs) + " | " + " ".join(tokens[2 * self.N * self.D :]) + " → " + target


# ----------------------------------------------------------------------------------------- token task


@register
class Retrieval(Task):
    """Seed 002 §3.1 with tokens: N interleaved chains of D pairs, one query x_0, predict its chain's x_D."""

    name = "retrieval"
    title = "retrieval"
    section = "seed 002 §3.1"
    summary = "retrieval: … x_{D-1} x_D … x_0 x_1 … x_0 → x_D, with N interleaved chains (N-1 distractors)"
    eval_protocol = "the task's dataset"

    N: int = Field(2, ge=1, description="interleaved chains (the queried one and N-1 distractors)")
    D: int = Field(2, ge=1, description="retrieval steps (D = 1 is the induction problem)")
    n_symbols: int = Field(16, ge=2, description="alphabet size; every sequence uses N(D+1) distinct symbols")

    @model_validator(mode="after")
    def _check(self) -> Retrieval:
        need = self.N * (self.D + 1)
        if need > self.n_symbols:
            raise ValueError(f"N*(D+1) must be at most n_symbols ({self.n_symbols}): {self.N} chains of "
                             f"{self.D + 1} distinct symbols need {need}")
        return self

    # --- shapes -------------------------------------------------------------------------------------
    @property
    def vocab(self) -> list[str]:
        return letter_names(self.n_symbols)

    @property
    def vocab_size(self) -> int:
        return self.n_symbols

    @property
    def labels(self) -> list[str]:
        return self.vocab

    @property
    def seq_len(self) -> int:
        return 2 * self.N * self.D + 1

    @property
    def chance(self) -> float:
        """1/N: a uniform guess among the N chain ends (the seconds of the first step's pairs)."""
        return 1.0 / self.N

    # --- data ---------------------------------------------------------------------------------------
    def _build(self, chains: np.ndarray, order: np.ndarray, c: np.ndarray) -> Batch:
        """chains [B, N, D+1] symbols, order [B, D, N] chain per slot of each step, c [B] queried chain."""
        b = chains.shape[0]
        rows = np.arange(b)
        inputs = np.concatenate([_interleave(chains, order), chains[rows, c, 0][:, None]], axis=1)
        meta = {"c": c.astype(np.int64), "slot": _slots(order).astype(np.int64)}
        return Batch(inputs.astype(np.int64), chains[rows, c, self.D].astype(np.int64), meta)

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        chains = sample_distinct(rng, n, self.n_symbols, self.N * (self.D + 1)).reshape(n, self.N, self.D + 1)
        order = sample_distinct(rng, n * self.D, self.N, self.N).reshape(n, self.D, self.N)
        return self._build(chains, order, rng.integers(0, self.N, n))

    counter_sampling = True

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s distribution from the counter stream: N(D+1) distinct symbols, a uniform chain order per
        step, the queried chain c uniform; the pairs of steps D … 1, then x_0 of chain c; the target its x_D."""
        import torch

        N, D = self.N, self.D
        symbols = counter.distinct(self.n_symbols, N * (D + 1), draw=0)  # chain·(D+1) + k
        order = counter.distinct(N, N, draw=1, rows=D)
        query = counter.below(N, draw=2) * (D + 1)  # [R, B, 1]
        inputs = symbols.gather(-1, torch.cat([interleaved_symbols(order, D), query], -1))
        return inputs, symbols.gather(-1, query + D)[..., 0]

    def dataset_size(self, split: str = "eval") -> int:
        """Distinct sequences: chains named by their slot in step 1 (so step 1's order is fixed), an ordered
        choice of N(D+1) symbols, the chain orders of steps 2 … D, and the queried chain."""
        check_split(split, SPLITS)
        perms = math.factorial(self.N) ** (self.D - 1)
        return falling_factorial(self.n_symbols, self.N * (self.D + 1)) * perms * self.N

    def enumerate(self, split: str = "eval") -> Batch | None:
        if self.dataset_size(split) > ENUMERATE_LIMIT:
            return None
        N, D = self.N, self.D
        chains = all_distinct_tuples(self.n_symbols, N * (D + 1)).reshape(-1, N, D + 1)
        perms = np.array(list(itertools.permutations(range(N))), dtype=np.int64)
        step_orders = [np.arange(N)[None]] + [perms] * (D - 1)  # step 1 fixed (canonical chain names)
        combos = np.array(list(itertools.product(*[range(len(o)) for o in step_orders])), dtype=np.int64)
        orders = np.stack([step_orders[s][combos[:, s]] for s in range(D)], axis=1)  # [O, D, N]
        ci, oi, c = product_indices(chains.shape[0], orders.shape[0], N)
        return self._build(chains[ci], orders[oi], c)

    # --- roles --------------------------------------------------------------------------------------
    @property
    def role_names(self) -> list[str]:
        return role_names(self.D)

    def roles(self, batch: Batch) -> dict[str, np.ndarray]:
        """Positions [B, 1] of every role of the queried chain."""
        chains = batch.meta["c"][:, None]
        out = {"query": np.full(chains.shape, self.seq_len - 1, dtype=np.int64)}
        out.update(pair_roles(batch.meta["slot"], chains, self.N))
        return out
