"""Seed 002 §5: the information-flow model of self-attention, simulated on an actual retrieval sequence.

Assumption 1: "During self-attention, a position can only attend to another position if they already share
a piece of information." Assumption 2: "When a position attends to another position, it retrieves all the
information contained in the attended position."

The sequence (§3.1, §6): N interleaved chains x_0 → x_1 → … → x_D, written as D retrieval steps of pairs
(x_{D-1} x_D) … (x_1 x_2) (x_0 x_1), the N pairs of one step in shuffled chain order, then the N queries x_0 in
shuffled order. Pieces of information (Appendix B, Definition 2): every token's embedding (shared by the two
occurrences of x_k) and every pair's positional encoding (shared by the two tokens of the pair; "p_k is the
positional encoding of the k-th input pair"); each query has its own positional encoding.

The simulator holds, for every position, the set of pieces it contains (a boolean matrix). One layer, under
the two assumptions taken as permissively as possible: every position attends to every position it shares a
piece with (itself included) and takes the union of their sets, all positions at once from the previous
layer's sets. After t layers a position holds exactly the pieces it *can* hold after t layers of any
transformer obeying the assumptions, so the least t at which the last position holds x_D is the least depth
at which retrieval is possible in this model.

Two numbers come out, and only one of them is the closed form of Theorem 1:
- ``layers_any``: the least t at which *some* position holds the whole chain x_0 … x_D (2D + 1 consecutive
  pieces). This is the quantity of Lemma 3 (an interval grows from length 2 to at most 3^t + 1) and equals
  ⌈log₃(2D)⌉ exactly.
- ``layers_last``: the least t at which the *last* position holds x_D, the quantity Theorem 1 bounds. The
  query sits at the end of the chain of shared pieces, so its interval grows on one side only and the
  simulation gives ⌈log₃(4D + 1)⌉: never below ⌈log₃(2D)⌉ (Theorem 1 holds), at most one layer above it,
  and equal to it for some D only (D = 2: 2 = 2; D = 1: 2 > 1 — the familiar fact that induction needs two
  layers). Appendix B's proof applies the two-sided growth of Lemma 3 to the last position, so its bound is
  not tight; and its Lemma 2 indexes the initial pieces as {e_i, e_{i+1}}, while its Definition 2 gives
  {e_{i-1}, e_i} (the query holds x_0 and its own positional encoding, not p_1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RetrievalSequence:
    """Token ids and pair ids of a retrieval sequence, and where chain ``chain``'s x_D and last query are."""

    tokens: np.ndarray  # [n] token id per position
    pairs: np.ndarray  # [n] pair id per position (queries: a pair of their own)
    last: int  # the last position (a query)
    target_token: int  # x_D of the last query's chain
    chain_tokens: np.ndarray  # x_0 … x_D of that chain

    @property
    def n_pieces(self) -> int:
        return int(self.tokens.max()) + 1 + int(self.pairs.max()) + 1


def retrieval_sequence(D: int, N: int = 4, seed: int = 0) -> RetrievalSequence:
    """The §6 sequence with N chains of D steps: pairs by step (D first, 1 last), shuffled chains, then queries."""
    if D < 1 or N < 1:
        raise ValueError(f"D and N must be at least 1, got D={D}, N={N}")
    rng = np.random.default_rng(seed)
    chain = np.arange(N * (D + 1)).reshape(N, D + 1)  # chain[c, k] = token id of x_k in chain c
    tokens, pairs = [], []
    pair_id = 0
    for step in range(D, 0, -1):  # the pair (x_{step-1}, x_step)
        for c in rng.permutation(N):
            tokens += [chain[c, step - 1], chain[c, step]]
            pairs += [pair_id, pair_id]
            pair_id += 1
    order = rng.permutation(N)
    for c in order:
        tokens.append(chain[c, 0])
        pairs.append(pair_id)
        pair_id += 1
    last_chain = order[-1]
    return RetrievalSequence(np.array(tokens), np.array(pairs), len(tokens) - 1, int(chain[last_chain, D]),
                             chain[last_chain])


def sequence_from_tokens(tokens: np.ndarray, target: int, n_pairs: int, D: int) -> RetrievalSequence:
    """A retrieval sequence read from token ids: positions 2j, 2j+1 (j < n_pairs) are the pairs, the rest each
    have their own position; the last token is the query x_0 and the chain is followed pair by pair to x_D.

    This is how ``simulate_task`` reads an example of depthlab's ``retrieval`` task.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    n = len(tokens)
    pairs = np.concatenate([np.repeat(np.arange(n_pairs), 2), n_pairs + np.arange(n - 2 * n_pairs)])
    first, second = tokens[0 : 2 * n_pairs : 2], tokens[1 : 2 * n_pairs : 2]
    chain = [int(tokens[-1])]
    for _ in range(D):
        (where,) = np.nonzero(first == chain[-1])
        if len(where) != 1:
            raise ValueError(f"token {chain[-1]} starts {len(where)} pairs; not a retrieval sequence")
        chain.append(int(second[where[0]]))
    if chain[-1] != target:
        raise ValueError(f"following the chain from the query gives {chain[-1]}, but the target is {target}")
    return RetrievalSequence(tokens, pairs, n - 1, int(target), np.array(chain))


def initial_pieces(seq: RetrievalSequence) -> np.ndarray:
    """[positions, pieces] booleans: token embedding pieces first, then positional (pair) pieces."""
    n_tokens = int(seq.tokens.max()) + 1
    held = np.zeros((len(seq.tokens), seq.n_pieces), dtype=bool)
    rows = np.arange(len(seq.tokens))
    held[rows, seq.tokens] = True
    held[rows, n_tokens + seq.pairs] = True
    return held


def propagate(held: np.ndarray) -> np.ndarray:
    """One layer: each position takes the union of the pieces of every position sharing a piece with it."""
    h = held.astype(np.float32)  # counts stay far below 2^24: float32 products are exact (and use BLAS)
    shares = (h @ h.T) > 0  # Assumption 1 (a position shares with itself)
    return (shares.astype(np.float32) @ h) > 0  # Assumption 2


def simulate(D: int, N: int = 4, seed: int = 0, max_layers: int = 64) -> dict:
    """Propagate layer by layer on the §6 sequence built here (``retrieval_sequence``)."""
    return simulate_sequence(retrieval_sequence(D, N, seed), D, N, max_layers)


def simulate_task(D: int, N: int = 4, seed: int = 0, max_layers: int = 64) -> dict:
    """Propagate layer by layer on an example drawn from depthlab's ``retrieval`` task (seed 002 §3.1)."""
    from ..tasks import TASKS

    if "retrieval" not in TASKS:
        raise ValueError("sequence: the retrieval task is not available in this depthlab")
    task = TASKS["retrieval"](D=D, N=N, n_symbols=max(16, N * (D + 1)))
    batch = task.sample(1, np.random.default_rng(seed))
    seq = sequence_from_tokens(batch.inputs[0], int(batch.targets[0]), N * D, D)
    return simulate_sequence(seq, D, N, max_layers)


def simulate_sequence(seq: RetrievalSequence, D: int, N: int, max_layers: int = 64) -> dict:
    """The least layers for the last position to hold x_D and for any position to hold the whole chain, and
    the longest run of the chain's pieces held by one position after each layer."""
    held = initial_pieces(seq)
    n_tokens = int(seq.tokens.max()) + 1
    chain_pieces = _chain_pieces(seq, n_tokens)
    layers_last = layers_any = None
    longest = []
    for t in range(max_layers + 1):
        if t:
            held = propagate(held)
        on_chain = held[:, chain_pieces]
        longest.append(int(_longest_true_run(on_chain)))
        if layers_last is None and held[seq.last, seq.target_token]:
            layers_last = t
        if layers_any is None and on_chain.all(axis=1).any():
            layers_any = t
        if layers_last is not None and layers_any is not None:
            break
    return {"D": D, "N": N, "layers_last": layers_last, "layers_any": layers_any, "closed_form": closed_form(D),
            "longest_chain_run": longest, "positions": len(seq.tokens)}


def _chain_pieces(seq: RetrievalSequence, n_tokens: int) -> np.ndarray:
    """The pieces e_0 … e_{2D} of the last query's chain in order: x_0, p(x_0 x_1), x_1, p(x_1 x_2), …, x_D."""
    out = [seq.chain_tokens[0]]
    for k in range(1, len(seq.chain_tokens)):
        a, b = seq.chain_tokens[k - 1], seq.chain_tokens[k]
        where = np.flatnonzero((seq.tokens[:-1] == a) & (seq.tokens[1:] == b) & (seq.pairs[:-1] == seq.pairs[1:]))
        out += [n_tokens + seq.pairs[where[0]], b]
    return np.array(out)


def _longest_true_run(rows: np.ndarray) -> int:
    """The longest run of consecutive True in any row of a boolean matrix."""
    run = np.zeros(rows.shape[0], dtype=np.int64)
    best = 0
    for j in range(rows.shape[1]):
        run = np.where(rows[:, j], run + 1, 0)
        best = max(best, int(run.max(initial=0)))
    return best


def closed_form(D: int) -> int:
    """⌈log₃(2D)⌉, computed in integers: the least t ≥ 0 with 3^t ≥ 2D."""
    t = 0
    while 3**t < 2 * D:
        t += 1
    return t


def flow(D: int, layers: int | None = None) -> dict:
    """Seed 002 Figures 3 and 8 (§5, Appendix B) and the layers after them, for one chain (N = 1): the relevant
    positions in input order, the pieces shared before any layer, and which pieces e_0 … e_{2D} each position
    holds after every layer t = 0 … ``layers`` (default: until the last position holds x_D).

    Figure 3: "Positions that contain shared information before any transformer layers in the case of D=5. Top
    edges denote shared token embeddings. Bottom edges denote shared positional encodings." The positions are
    the chain's own 2D + 1 (the other N − 1 chains share nothing with it, Lemma 1), in input order: the pairs
    (x_{D-1} x_D) … (x_0 x_1), then the query x_0. ``s`` gives each position's index s_i of Definition 1
    (s_0 the last position, s_{2k} and s_{2k+1} the second and first occurrences of x_k) and ``held[t][i][j]``
    whether position i holds e_j after t layers (e_{2k} = x_k, e_{2k-1} = p_k, Definition 3).
    """
    seq = retrieval_sequence(D, 1)
    n_tokens = int(seq.tokens.max()) + 1
    pieces = _chain_pieces(seq, n_tokens)
    held = initial_pieces(seq)
    target = last_position_form(D) if layers is None else layers
    steps = [held[:, pieces]]
    for _ in range(target):
        held = propagate(held)
        steps.append(held[:, pieces])
    k = [int(t) for t in seq.tokens]  # chain 0's token id is x_k's index k
    n = len(k)
    s = [0 if i == n - 1 else 2 * k[i] + (1 if i % 2 == 0 else 0) for i in range(n)]
    token_edges = [(i, j) for i in range(n) for j in range(i + 1, n) if k[i] == k[j]]
    pair_edges = [(i, i + 1) for i in range(0, n - 1, 2)]
    return {"D": D, "tokens": k, "s": s, "token_edges": token_edges, "pair_edges": pair_edges,
            "held": [h.astype(int).tolist() for h in steps], "last": n - 1,
            "layers_last": last_position_form(D), "closed_form": closed_form(D)}


def depth_rows(depths: list[int], N: int = 4) -> list[dict]:
    """For every D: Theorem 1's bound ⌈log₃(2D)⌉, the simulated least depth at which some position holds the whole
    chain (``layers_any``) and at which the last position holds x_D (``layers_last``), and ⌈log₃(4D + 1)⌉."""
    rows = []
    for D in depths:
        sim = simulate(D, N)
        rows.append({"D": D, "N": N, "closed_form": closed_form(D), "layers_any": sim["layers_any"],
                     "layers_last": sim["layers_last"], "last_position_form": last_position_form(D)})
    return rows


def last_position_form(D: int) -> int:
    """⌈log₃(4D + 1)⌉: the least t with (3^t - 1)/2 ≥ 2D, the one-sided growth of the query's interval."""
    t = 0
    while 3**t < 4 * D + 1:
        t += 1
    return t
