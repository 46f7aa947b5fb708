"""Nearest neighbour, NstNb (seed 003 §5.2, Appendix G).

Seed 003 §5.2: "a model is provided with a sequence of vectors and labels (x_1, y_1, …, x_{k−1}, y_{k−1}, x_k)
where N/2 < k ≤ N, the input unit vectors x_i ∈ R^d and labels y_i ∈ {0, 1}. For each x_k where k > N/2, the
output is the label corresponding to the nearest neighbor in (x_1, …, x_{k−1})". Assumptions: unit norm, and
a margin γ: x_kᵀx_{j*} ≥ x_kᵀx_i + γ for every i ≠ j* among the k − 1 earlier vectors.

One example is the whole sequence x_1, y_1, …, x_N, y_N (2N tokens) and the model is read at every x_k with
k > N/2 (before it sees y_k): multi-query, as Appendix G relates it to MQAR. The first N/2 labels are uniform
bits; each later label is the label of x_k's nearest neighbour among x_1 … x_{k−1} (earlier queries included).
Vectors are uniform on the unit sphere; a query that would violate the margin γ is drawn again (a loop over
the N/2 query positions, vectorised over examples). An example whose earlier vectors leave no query direction with
the margin (two of them nearly equal, say) is drawn again whole; where that keeps happening the margin is out of
reach for these N and d, and sampling stops with an error naming ``task.gamma``.

Inputs are vectors (``input_dim`` = d + 2): an x token is [x, 0, 0], a y token [0…0, 1{y = 0}, 1{y = 1}].
Targets [examples, N/2] (labels 0/1); accuracy is the mean over queries. Read-outs are causal: use causal
models (the ``attention_only`` model attends both ways and would see y_k).
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field, model_validator

from depthlab.errors import UserError
from depthlab.tasks.base import Batch, Task, check_split, register

MAX_TRIES = 200  # queries drawn for one position before its examples are drawn again whole (a query misses
# the margin rarely unless the earlier vectors rule it out: then more tries only cost time)
MAX_REDRAWS = 20  # examples drawn again whole, in a row, before the margin is called out of reach
MAX_COUNTER_TRIES = 256  # stream 2's candidates per query, at most (see ``counter_tries``)
# Off a graph, the candidates drawn per stage for the examples still undecided (``query_off_graph``): one for every
# example (three in four have the margin at the defaults), four for the rest, then the whole budget (0.3 %).
SURE_STAGES = (1, 4)

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter


def unit_vectors(rng: np.random.Generator, shape: tuple[int, ...], d: int) -> np.ndarray:
    v = rng.standard_normal((*shape, d))
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@register
class NearestNeighbor(Task):
    name = "nearest_neighbor"
    title = "nearest neighbour"
    section = "seed 003 §5.2, App. G"
    summary = "nearest neighbour: label each later query with the label of its closest earlier vector"
    eval_protocol = "fresh random sequences (unit vectors, margin γ)"
    accuracy_over = "position"

    N: int = Field(16, ge=2, description="number of (x, y) pairs; queries are x_k for k > N/2")
    d: int = Field(8, ge=2, description="dimension of the unit vectors")
    gamma: float = Field(0.05, ge=0, lt=1, description="margin γ of the nearest neighbour")

    @model_validator(mode="after")
    def _check(self) -> NearestNeighbor:
        if self.N % 2:
            raise ValueError(f"N must be even, got {self.N}")
        return self

    @property
    def input_dim(self) -> int:
        return self.d + 2

    @property
    def vocab(self) -> list[str]:
        return [f"e{i}" for i in range(self.d)] + ["y=0", "y=1"]

    @property
    def vocab_size(self) -> int:
        return self.d + 2

    @property
    def labels(self) -> list[str]:
        return ["0", "1"]

    @property
    def seq_len(self) -> int:
        return 2 * self.N

    @property
    def read_positions(self) -> list[int]:
        return [2 * k for k in range(self.N // 2, self.N)]

    @property
    def chance(self) -> float:
        return 0.5

    def vectors_and_labels(self, n: int, rng: np.random.Generator,
                           redraws: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x [n, N, d], y [n, N] and the nearest neighbour's index j* [n, N/2] of each query (``redraws``: how
        many times in a row these examples were drawn again whole)."""
        half = self.N // 2
        x = np.empty((n, self.N, self.d))
        x[:, :half] = unit_vectors(rng, (n, half), self.d)
        y = np.empty((n, self.N), dtype=np.int64)
        y[:, :half] = rng.integers(0, 2, (n, half))
        nearest = np.empty((n, half), dtype=np.int64)
        for k in range(half, self.N):
            todo = np.arange(n)
            for _ in range(MAX_TRIES):
                q = unit_vectors(rng, (len(todo),), self.d)
                dots = np.einsum("bkd,bd->bk", x[todo, :k], q)
                top2 = np.partition(dots, k - 2, axis=1)[:, -2:] if k >= 2 else dots
                ok = top2[:, -1] - top2[:, 0] >= self.gamma
                good = todo[ok]
                x[good, k] = q[ok]
                nearest[good, k - half] = dots[ok].argmax(1)
                todo = todo[~ok]
                if not len(todo):
                    break
            else:  # no direction has the margin after these examples' earlier vectors: draw them again whole
                if redraws == MAX_REDRAWS:
                    raise UserError(f"task.gamma: a margin of {self.gamma:g} is out of reach for N = {self.N} unit "
                                    f"vectors in d = {self.d} (no query direction had it in {MAX_TRIES:,} tries, "
                                    f"{MAX_REDRAWS} sequences in a row); lower gamma or raise d")
                x[todo], y[todo], nearest[todo] = self.vectors_and_labels(len(todo), rng, redraws + 1)
            y[:, k] = y[np.arange(n), nearest[:, k - half]]
        return x, y, nearest

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, ("train", "eval"))
        x, y, nearest = self.vectors_and_labels(n, rng)
        inputs = np.zeros((n, 2 * self.N, self.d + 2), dtype=np.float32)
        inputs[:, 0::2, : self.d] = x
        inputs[:, 1::2, self.d] = y == 0
        inputs[:, 1::2, self.d + 1] = y == 1
        return Batch(inputs, y[:, self.N // 2 :].copy(), {"nearest": nearest})

    # --- stream 2 (``tasks.counter``) -----------------------------------------------------------------
    counter_sampling = True

    @cached_property
    def counter_tries(self) -> int:
        """Candidate queries stream 2 draws per position: enough that none has the margin with probability below
        10⁻¹² at the acceptance rate of the last query (the most earlier vectors), measured once on 4,096 draws from
        a fixed seed (its lower 3σ bound); at most ``MAX_COUNTER_TRIES``."""
        rng = np.random.default_rng(0)
        x, q = unit_vectors(rng, (4096, self.N - 1), self.d), unit_vectors(rng, (4096,), self.d)
        top2 = np.sort(np.einsum("bkd,bd->bk", x, q), axis=1)[:, -2:]
        rate = float(np.mean(top2[:, -1] - top2[:, 0] >= self.gamma)) if self.N > 2 else float(self.gamma == 0)
        bound = rate - 3 * math.sqrt(rate * (1 - rate) / 4096)
        if bound <= 0:
            raise UserError(f"task.gamma: a margin of {self.gamma:g} is out of reach for N = {self.N} unit vectors in "
                            f"d = {self.d} (measured acceptance {rate:.2%}); lower gamma or raise d")
        return min(MAX_COUNTER_TRIES, max(1, math.ceil(math.log(1e-12) / math.log1p(-bound)))) if bound < 1 else 1

    def counter_unit_vectors(self, counter: Counter, draw: int, count: int, first: int = 0) -> torch.Tensor:
        """``count`` vectors uniform on the unit sphere per example, [R, B, count, d] (float64): normalised normals;
        with ``first``, the vectors first … first + count − 1 of the draw, the same as in a wider call."""
        v = counter.normal(draw, count * self.d, first * self.d).unflatten(-1, (count, self.d))
        return v / v.norm(dim=-1, keepdim=True)

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s distribution from the counter stream: the first N/2 vectors uniform on the sphere with
        uniform labels; each query the first of ``counter_tries`` uniform candidates with the margin γ over the
        vectors before it (the law of ``vectors_and_labels``' redraws), labelled as its nearest neighbour. Should no
        candidate have the margin (below 10⁻¹² per query at the measured rate) the one with the widest gap is used:
        its label is still its nearest neighbour's, only the margin is short. Dot products are float64 on the
        device, so the vectors agree across devices to the last bits, not bit for bit."""
        import torch

        if not counter.capturable:
            return self.counter_tokens(*self.vectors_and_labels_off_graph(counter))
        x = self.counter_unit_vectors(counter, 0, self.N // 2)
        y = counter.below(2, draw=1, width=self.N // 2)
        for k in range(self.N // 2, self.N):
            q, dots = self.first_with_margin(counter, 2 + k, x)
            x = torch.cat([x, q[..., None, :]], -2)
            y = torch.cat([y, y.gather(-1, dots.argmax(-1, keepdim=True))], -1)
        return self.counter_tokens(x, y)

    def counter_tokens(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs [R, B, 2N, d + 2] (float32; an x token [x, 0, 0], a y token [0…0, 1{y = 0}, 1{y = 1}]) and targets
        [R, B, N/2] from the vectors x [R, B, N, d] (float64) and labels y [R, B, N]: each written in its place."""
        import torch

        tokens = torch.zeros(*y.shape, 2, self.d + 2, dtype=torch.float32, device=y.device)
        tokens[..., 0, : self.d] = x
        tokens[..., 1, self.d] = y == 0
        tokens[..., 1, self.d + 1] = y == 1
        return tokens.flatten(-3, -2), y[..., self.N // 2 :]

    def vectors_and_labels_off_graph(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`sample_counter`'s vectors x [R, B, N, d] and labels y [R, B, N] off a graph, the same values:
        written in place position by position, each query found by :meth:`query_off_graph`."""
        import torch

        half = self.N // 2
        first = self.counter_unit_vectors(counter, 0, half)
        x = first.new_empty(*first.shape[:-2], self.N, self.d)
        x[..., :half, :] = first
        y = torch.empty(*first.shape[:-2], self.N, dtype=torch.int64, device=first.device)
        y[..., :half] = counter.below(2, draw=1, width=half)
        lanes = x.new_empty(self.d, self.N, y[..., 0].numel())  # x lane by lane, [d, N, examples]
        lanes[:, :half] = first.view(-1, half, self.d).permute(2, 1, 0)
        for k in range(half, self.N):
            stages = tuple(s for s in SURE_STAGES if s < self.counter_tries) if k >= 2 else ()  # one vector: gaps 0
            x[..., k, :], nearest = self.query_off_graph(counter, 2 + k, x[..., :k, :], stages, lanes=lanes[:, :k])
            lanes[:, k] = x[..., k, :].reshape(-1, self.d).T
            y[..., k] = y.gather(-1, nearest[..., None])[..., 0]
        return x, y

    @cached_property
    def sure_margin(self) -> float:
        """Twice the most by which two kernels' gaps of unit vectors in R^d can differ (:meth:`query_off_graph`):
        2 (4γ_d + 3u), γ_d = d·u / (1 − d·u), u = 2⁻⁵³; about 10⁻¹⁴ at d = 8."""
        unit = 2.0**-53
        return 2 * (4 * self.d * unit / (1 - self.d * unit) + 3 * unit)

    def query_off_graph(self, counter: Counter, draw: int, x: torch.Tensor, stages: tuple[int, ...],
                        start: int = 0, lanes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The query :meth:`first_with_margin` keeps [..., d] and the index of its nearest earlier vector [...] among
        x [..., k, d], off a graph, the same values, drawing a few candidates for most examples.

        Stage by stage, the candidates ``start`` … ``stages[0]`` − 1 of the examples still undecided (the vectors of
        the whole budget: their normals are element-wise, each normalised on its own), their dot products by the
        quickest kernel, and a decision only where it is sure. Whatever kernel computes a dot product of d terms (any
        order of summation, fused or not), it is within γ_d = d·u/(1 − d·u) of the exact one (u = 2⁻⁵³; Higham,
        *Accuracy and Stability of Numerical Algorithms*, §3.1), so two kernels differ by at most 2γ_d on unit
        vectors; the largest and the second largest value move by no more, and the gap's rounding adds at most 3u.
        A gap below γ − :attr:`sure_margin` lacks the margin with :meth:`candidate_dots`' kernel too; one at or above
        γ + the margin has it, and its nearest neighbour is the same (no other dot product comes within 2γ_d of the
        largest). Where the first candidate not surely short is surely long, it is the query; where every candidate
        is surely short the example goes on to the next stage; else (a gap within the margin of γ, a band about
        1.6·10⁻¹⁴ wide at d = 8; a test widens the margin to send many) and after the last stage, to
        :meth:`first_with_margin`'s whole budget with its own kernel shapes, so every value is its value. With
        ``lanes`` (x lane by lane, [d, k, examples]) a one-candidate stage takes its dot products and gaps across
        examples, element-wise (:func:`lane_dots`, :func:`top_gap_by_lanes`)."""
        from depthlab.tasks.counter import first_true

        if not stages:
            q, dots = self.first_with_margin(counter, draw, x)
            return q, dots.argmax(-1)
        q = self.counter_unit_vectors(counter, draw, stages[0] - start, start)  # [..., F, d]
        if lanes is not None and q.shape[-2] == 1:  # one candidate for every example: lane by lane (1.4× faster)
            gap, nearest = top_gap_by_lanes(lane_dots(q.view(-1, self.d), lanes))
            gap, nearest = gap.view(q.shape[:-1]), nearest.view(*q.shape[:-1], 1)
        else:
            dots = q @ x.transpose(-1, -2)  # [..., F, k]
            nearest = dots.argmax(-1, keepdim=True)
            gap = (dots.gather(-1, nearest) - dots.scatter(-1, nearest, -math.inf).amax(-1, keepdim=True))[..., 0]
        short = gap < self.gamma - self.sure_margin
        if q.shape[-2] == 1:  # one candidate: it is the first not surely short, or none is
            kept, nearest, every_short, gap = q[..., 0, :], nearest[..., 0, 0], short[..., 0], gap[..., 0]
        else:
            pick = first_true(~short)  # [..., 1]: the first candidate not surely short
            kept = q.gather(-2, pick[..., None].expand(*pick.shape, self.d))[..., 0, :]
            nearest, every_short, gap = nearest[..., 0].gather(-1, pick)[..., 0], short.all(-1), gap.gather(-1, pick)
        unsure = ~every_short & (gap.view(every_short.shape) < self.gamma + self.sure_margin)
        for rows, later, first in ((every_short, stages[1:], stages[0]), (unsure, (), 0)):
            where = rows.view(-1).nonzero().view(-1)  # index_select and index_copy_: 2× faster than a mask
            if len(where):
                found, found_nearest = self.query_off_graph(
                    counter.rows(rows), draw, x.flatten(0, -3).index_select(0, where)[None], later, first)
                kept.view(-1, self.d).index_copy_(0, where, found[0])
                nearest.view(-1).index_copy_(0, where, found_nearest[0])
        return kept, nearest

    def candidate_dots(self, queries: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Dot products [..., T, k] of ``counter_tries`` candidate queries [..., T, d] with the earlier vectors
        [..., k, d]: one float64 ``bmm`` of T × d by d × k per example (its kernel, and so its rounding, is chosen by
        these shapes: a query's dot products are the same in any batch of examples, but not with fewer rows)."""
        return queries @ x.transpose(-1, -2)

    def first_with_margin(self, counter: Counter, draw: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The query kept at one position [..., d] and its dot products with the earlier vectors x [..., k, d]:
        the first of the ``counter_tries`` candidates with the margin γ, else the one with the widest gap."""
        import torch

        from depthlab.tasks.counter import first_true

        q = self.counter_unit_vectors(counter, draw, self.counter_tries)  # [R, B, T, d]
        dots = self.candidate_dots(q, x)  # [R, B, T, k]
        gap = top_gap(dots)
        ok = gap >= self.gamma
        pick = torch.where(ok.any(-1, keepdim=True), first_true(ok), gap.argmax(-1, keepdim=True))[..., None]
        return (q.gather(-2, pick.expand(*pick.shape[:-1], self.d))[..., 0, :],
                dots.gather(-2, pick.expand(*pick.shape[:-1], x.shape[-2]))[..., 0, :])

    def dataset_size(self, split: str = "eval") -> int:
        return 2**62  # continuous inputs: never enumerated

    def enumerate(self, split: str = "eval") -> Batch | None:
        return None

    def decode(self, batch: Batch, i: int) -> str:
        half = self.N // 2
        labels = batch.inputs[i, 1::2, self.d + 1].astype(int)
        return (f"{self.N} vectors in R^{self.d}; labels {''.join(map(str, labels[:half]))} | "
                f"queries → {''.join(map(str, batch.targets[i]))}")

    def example_tokens(self, batch: Batch, i: int) -> tuple[list[str], str]:
        return [self.decode(batch, i)], "".join(map(str, batch.targets[i]))


def top_gap(dots: torch.Tensor) -> torch.Tensor:
    """The largest value of the last axis minus the second largest (0 for one value): ``topk(2)``'s two values,
    as the maximum and the maximum with it struck out (``topk`` sorts each short row; the task sampled 1.3× faster)."""
    import torch

    if dots.shape[-1] < 2:
        return torch.zeros_like(dots[..., 0])
    first, where = dots.max(-1, keepdim=True)
    return (first - dots.scatter(-1, where, -math.inf).amax(-1, keepdim=True))[..., 0]


def lane_dots(queries: torch.Tensor, lanes: torch.Tensor) -> torch.Tensor:
    """Dot products [k, M] of one query per example [M, d] with the earlier vectors laid out lane by lane [d, k, M]:
    d products and sums across whole rows (any order of summation is within the bound ``query_off_graph`` allows)."""
    columns = queries.T.contiguous()  # [d, M]
    dots = lanes[0] * columns[0]
    for i in range(1, len(columns)):
        dots.addcmul_(lanes[i], columns[i])
    return dots


def top_gap_by_lanes(dots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`top_gap` over the first axis of dots [k, M] (k ≥ 2), and the index of the largest (the first of
    equal ones): a running largest and second largest across whole rows, not reductions along short ones."""
    import torch

    largest, second = dots[0].clone(), torch.full_like(dots[0], -math.inf)
    nearest = torch.zeros(dots.shape[1], dtype=torch.int64, device=dots.device)
    for j in range(1, len(dots)):
        torch.maximum(second, torch.minimum(largest, dots[j]), out=second)
        nearest.masked_fill_(dots[j] > largest, j)
        torch.maximum(largest, dots[j], out=largest)
    return largest - second, nearest
