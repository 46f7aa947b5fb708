"""Bounded Dyck languages, Dyck-(n, k) (seed 003 §4.1, Appendix E, Appendix H.1).

Seed 003 §4.1: "Dyck-(n, k) is the language of well-matched strings over n types of parenthesis pairs […],
where any prefix has at most k opening parentheses not yet closed." The task is recognition: label 1 when
the string is in Dyck-(n, k), 0 otherwise, read at the last position (the last bracket; no extra token, so
strings have length exactly N). The paper's experiments use Dyck-(2, 2); the generator below is H.1's for any
n and k = ``depth``.

Positives (H.1): "we iterate over N − 2 steps and for each step, we check whether the current depth of the
stack is < 2. If the depth of the stack is 2, the sequence continues with the closing bracket corresponding to
the open bracket in the stack. If the depth is < 2, the sequence is either continued by choosing one of the
open brackets uniformly if the stack is empty or by choosing uniformly between open brackets and the closing
bracket if the stack is non-empty. After N − 2 steps, the generated string could be a well-balanced string of
length N − 2 in which case we add a depth 1 string of length 2 at the end […]. Otherwise, the stack could be
nonempty we add the remaining closing brackets." With depth k the stack is full at k; the stack holds
N − 2 mod 2 brackets at the end, so N must be even (and then it holds 0 or 2 for k = 2; in general an even
number up to k, closed at the end; see ``positives`` for depths k > 2).

Negatives (H.1): corrupt a fresh positive: "sample a number k = 1, …, N/10 uniformly at random and then pick
k different indices uniformly at random. For each of those positions, with probability 1/2, we swap the types
of brackets […] and with probability 1/2 we switch open brackets to closing brackets (or vice versa)." A
corruption that is still in the language is redone. Labels are 1 with probability 1/2 (balanced classes).

Token ids: type t opens as 2t and closes as 2t + 1: ( ) [ ] { } … Chance is 1/2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field, model_validator

from depthlab.tasks.base import Batch, check_split, register
from depthlab.tasks.eval_sets import SPLITS, FixedEvalSet

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter

BRACKETS = ["(", ")", "[", "]", "{", "}", "<", ">"]
# Stream 2 corrupts a negative this many times at once and keeps the first corruption out of the language. Measured
# on 1 … 4 types, N from 2 to 400 and depth 1, 2, 3 and 5 (20,000 strings each; 4,000 at N = 400): with one bracket
# type (a type swap changes nothing) at most half the corruptions stay in the language, with two or more at most
# 1.5 %. 0.5⁴⁰ and 0.02⁸ are below 10⁻¹².
CORRUPTIONS = {1: 40, 2: 8}


def is_dyck(strings: np.ndarray, n_types: int, depth: int) -> np.ndarray:
    """Membership in Dyck-(n_types, depth) of each row of token ids (a bounded stack per row, vectorised)."""
    b, length = strings.shape
    stack = np.zeros((b, depth + 1), dtype=np.int64)
    top = np.zeros(b, dtype=np.int64)
    ok = np.ones(b, dtype=bool)
    rows = np.arange(b)
    for j in range(length):
        tok = strings[:, j]
        kind, opening = tok // 2, tok % 2 == 0
        # open: push (too deep is a failure); close: the top must be the same kind
        push = opening & ok
        ok &= ~(push & (top >= depth))
        stack[rows, np.minimum(top, depth)] = np.where(push, kind, stack[rows, np.minimum(top, depth)])
        top = np.where(push, top + 1, top)
        pop = ~opening & ok
        below = np.maximum(top - 1, 0)
        ok &= ~(pop & ((top == 0) | (stack[rows, below] != kind)))
        top = np.where(pop & ok, top - 1, top)
    return ok & (top == 0)


def matching_opens(opening: torch.Tensor, depth_after: torch.Tensor, depth: int) -> torch.Tensor:
    """For every position [..., N] of a bracket walk, the last opening position before it that reached the depth
    the walk has just before it (−1 if none): for a closing bracket in a walk within 0 … ``depth``, the bracket it
    closes. One running maximum per level (k of them), not a loop over positions."""
    import torch

    positions = torch.arange(opening.shape[-1], dtype=torch.int32, device=opening.device)
    levels = torch.arange(1, depth + 1, device=opening.device)[:, None]  # [k, 1]
    opened = opening[..., None, :] & (depth_after[..., None, :] == levels)  # [..., k, N]: an open reaching ℓ
    last = running_max(torch.where(opened, positions, -1))
    before = depth_after - torch.where(opening, 1, -1)  # the depth just before each position
    return last.gather(-2, (before - 1).clamp(0, depth - 1)[..., None, :])[..., 0, :].long()


def running_max(values: torch.Tensor) -> torch.Tensor:
    """``cummax`` of the last axis by doubling (⌈log₂ N⌉ element-wise maxima, in place on its own copy): the same
    values; on Dyck's corrupted walks (1.3 million int32 values) 5× faster than ``cummax`` on a CPU, whose kernel
    walks each short row one element at a time."""
    import torch

    values, shift = values.clone(), 1
    while shift < values.shape[-1]:
        values[..., shift:] = torch.maximum(values[..., shift:], values[..., :-shift])
        shift *= 2
    return values


def is_dyck_tensor(strings: torch.Tensor, depth: int) -> torch.Tensor:
    """:func:`is_dyck` on the device, vectorised over positions: the walk (+1 open, −1 close) stays in 0 … depth
    and ends at 0, and every closing bracket has the kind of the open it matches (:func:`matching_opens`)."""
    import torch

    kind, opening = strings >> 1, (strings & 1) == 0  # token ids are ≥ 0: the shift and mask are // 2 and % 2
    depth_after = torch.where(opening, 1, -1).cumsum(-1)
    walk = (depth_after.amin(-1) >= 0) & (depth_after.amax(-1) <= depth) & (depth_after[..., -1] == 0)
    matched = kind.gather(-1, matching_opens(opening, depth_after, depth).clamp(min=0)) == kind
    return walk & (opening | matched).all(-1)


def is_dyck_by_positions(strings: torch.Tensor, depth: int) -> torch.Tensor:
    """:func:`is_dyck` on tensors, position by position with a stack of open kinds (the same answers as
    :func:`is_dyck_tensor`): off a graph, on a CPU 2× faster than its running maxima over every level (6,000
    strings of 20 brackets: 9.7 → 5.1 ms). Kinds and directions are read for every position at once, and the
    stack's slot 0 holds −1, the kind of no bracket: a close is valid where the top's kind is its own (at level 0
    the top is that slot), an open where the level is below the depth (9 operations a position, 16 before)."""
    import torch

    lead, big_n = strings.shape[:-1], strings.shape[-1]
    tokens = strings.reshape(-1, big_n).T.contiguous()  # [N, M]: each position one contiguous row
    kinds, opening = tokens >> 1, (tokens & 1) == 0
    steps = opening.long().mul_(2).sub_(1)  # +1 open, −1 close
    level = tokens.new_zeros(tokens.shape[1])
    stack = tokens.new_zeros(depth + 3, tokens.shape[1])  # stack[d]: the kind of the open that reached level d ≥ 1
    stack[0] = -1
    ok = torch.ones_like(level, dtype=torch.bool)
    for j in range(big_n):
        top = level.clamp(0, depth + 1)  # the slot read; a row out of range has failed already
        ok &= torch.where(opening[j], level < depth, stack.gather(0, top[None])[0] == kinds[j])
        stack.scatter_(0, top.add_(1)[None], kinds[j][None])  # a close's write lands above the top
        level += steps[j]
    return (ok & (level == 0)).view(lead)


@register
class BoundedDyck(FixedEvalSet):
    name = "dyck"
    title = "bounded Dyck"
    section = "seed 003 §4.1, App. H.1"
    summary = "bounded Dyck recognition: is the bracket string well matched with depth at most k?"
    eval_protocol = "eval_size fresh strings of length exactly N (H.1 generator), balanced classes"

    N: int = Field(20, ge=2, description="string length (even)")
    n_types: int = Field(2, ge=1, le=4, description="n: types of bracket pairs")
    depth: int = Field(2, ge=1, description="k: maximum depth")
    eval_size: int = Field(5000, ge=1, description="evaluation examples (the paper: 5000 fresh examples)")

    @model_validator(mode="after")
    def _check(self) -> BoundedDyck:
        if self.N % 2:
            raise ValueError(f"N must be even (a well-matched string has even length), got {self.N}")
        return self

    @property
    def vocab(self) -> list[str]:
        return BRACKETS[: 2 * self.n_types]

    @property
    def labels(self) -> list[str]:
        return ["0", "1"]

    @property
    def seq_len(self) -> int:
        return self.N

    @property
    def chance(self) -> float:
        return 0.5

    @property
    def n_inputs(self) -> int:
        return (2 * self.n_types) ** self.N

    def positives(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """H.1's positive generator, vectorised over examples (a loop over the N positions).

        At each position: close the top bracket when the stack is full (depth k) or when the open brackets
        exactly fill the rest of the string; otherwise choose uniformly among the n open brackets, plus the
        closing bracket when the stack is non-empty (H.1's "uniformly between open brackets and the closing
        bracket", read as uniform over those n + 1 tokens). For Dyck-(2, 2) this is H.1's procedure, its ending
        included: after N − 2 steps the stack holds 0 brackets (then a random pair is added) or 2 (then
        both are closed); for larger k it keeps every string at length exactly N.
        """
        big_n, k, types = self.N, self.depth, self.n_types
        out = np.empty((n, big_n), dtype=np.int64)
        stack = np.zeros((n, k + 1), dtype=np.int64)
        top = np.zeros(n, dtype=np.int64)
        rows = np.arange(n)
        for j in range(big_n):
            remaining = big_n - j
            empty = top == 0
            choice = (rng.random(n) * np.where(empty, types, types + 1)).astype(np.int64)
            close = (top >= k) | (top >= remaining) | (~empty & (choice == types))
            kind = np.where(close, stack[rows, np.maximum(top - 1, 0)], np.minimum(choice, types - 1))
            out[:, j] = 2 * kind + close
            slot = np.minimum(top, k)
            stack[rows, slot] = np.where(close, stack[rows, slot], kind)
            top = np.where(close, top - 1, top + 1)
        return out

    def corrupt(self, strings: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """H.1's corruption: k ~ U{1..max(1, N/10)} distinct positions; at each, swap the type or flip the
        direction of the bracket (probability 1/2 each). Rows still in the language are corrupted again."""
        out = strings.copy()
        todo = np.arange(len(out))
        while len(todo):
            rows = strings[todo].copy()
            m = len(todo)
            k = rng.integers(1, max(1, self.N // 10) + 1, m)
            order = np.argsort(rng.random((m, self.N)), axis=1)
            chosen = np.zeros((m, self.N), dtype=bool)
            np.put_along_axis(chosen, order, np.arange(self.N)[None] < k[:, None], axis=1)
            swap_type = rng.random((m, self.N)) < 0.5
            kind, is_close = rows // 2, rows % 2
            other = (kind + rng.integers(1, max(self.n_types, 2), (m, self.N))) % self.n_types
            new_kind = np.where(chosen & swap_type, other, kind)
            new_close = np.where(chosen & ~swap_type, 1 - is_close, is_close)
            rows = 2 * new_kind + new_close
            out[todo] = rows
            todo = todo[is_dyck(rows, self.n_types, self.depth)]
        return out

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        labels = (rng.random(n) < 0.5).astype(np.int64)
        strings = self.positives(n, rng)
        negative = labels == 0
        strings[negative] = self.corrupt(strings[negative], rng)
        return Batch(strings, labels)

    counter_sampling = True

    def counter_positives(self, counter: Counter) -> torch.Tensor:
        """:meth:`positives` on the device [R, B, N], with no loop over positions.

        The generator's choice at position j is a function of its 32-bit draw and of the depth d before it only:
        close when d = k, when d ≥ N − j, or (d > 0) when the draw picks the closing bracket among n + 1 tokens;
        else open the kind the draw picks among the n (of n + 1 when d > 0). So each position is a map f_j of the
        depths 0 … k, the depth before j is (f_{j−1} ∘ … ∘ f_0)(0), and all those compositions come from a parallel
        prefix scan (⌈log₂ N⌉ compositions of tables of k + 1 entries). A closing bracket's kind is that of the
        open it matches (:func:`matching_opens`). The same draws and the same decisions as the position-by-position
        loop: the same strings, so the law of H.1's generator."""
        import torch

        if not counter.capturable:
            return self.positives_by_positions(counter)
        big_n, k, types = self.N, self.depth, self.n_types
        bits = counter.bits(draw=1, width=big_n)[..., None]  # [R, B, N, 1]
        d = torch.arange(k + 1, device=bits.device)  # the depth before a position, every value at once
        remaining = big_n - torch.arange(big_n, device=bits.device)[:, None]  # [N, 1]
        choice = (bits * torch.where(d == 0, types, types + 1)) >> 32  # [R, B, N, k + 1]
        close = (d >= k) | (d >= remaining) | ((d > 0) & (choice == types))
        scan = torch.where(close, d - 1, d + 1)  # f_j(d); then f_j ∘ … ∘ f_0 by doubling
        shift = 1
        while shift < big_n:
            scan = torch.cat([scan[..., :shift, :], scan[..., shift:, :].gather(-1, scan[..., :-shift, :])], -2)
            shift *= 2
        before = torch.cat([torch.zeros_like(scan[..., :1, 0]), scan[..., :-1, 0]], -1)[..., None]  # [R, B, N, 1]
        closing = close.gather(-1, before)[..., 0]
        kind = choice.gather(-1, before)[..., 0].clamp(max=types - 1)
        opens = matching_opens(~closing, before[..., 0] + torch.where(closing, -1, 1), k)
        kind = torch.where(closing, kind.gather(-1, opens.clamp(min=0)), kind)
        return 2 * kind + closing

    def positives_by_positions(self, counter: Counter) -> torch.Tensor:
        """:meth:`counter_positives` off a graph: the generator's loop over positions, on all examples at once, with
        a stack of the open brackets (the same draws and integer decisions, so the same strings). On a CPU 4× faster
        than the scan (8,192 examples at the defaults: 17 → 4.4 ms; 6.8× at N = 40, depth 4), whose tables over every
        depth make k + 1 times the work; a graph would hold N steps of small kernels, so in one the scan stays.

        The draws are laid out position by position ([N, M]: each position's draws contiguous) and the loop keeps
        few operations per position: a position closes where the depth reaches its threshold (1 where the draw picks
        the closing bracket, else min(k, N − j): nothing closes at depth 0), else opens the token drawn for depth 0
        or above it, and a close writes the token of the open it matches, plus one (8,192 examples: 6.7 → 5.1 ms)."""
        import torch

        from depthlab.tasks.counter import unsigned

        big_n, k, types = self.N, self.depth, self.n_types
        bits = unsigned(counter.words_by_lanes(draw=1, width=big_n).view(big_n, -1))  # [N, M]
        at_zero = (bits * types).bitwise_right_shift_(32).mul_(2)  # the open token drawn at depth 0 (no closing)
        above = bits.mul_(types + 1).bitwise_right_shift_(32)  # at depth > 0: a kind, or ``types`` for the closing
        limits = torch.tensor([min(k, big_n - j) for j in range(big_n)], device=bits.device)[:, None]
        threshold = limits - (above == types) * (limits - 1)
        above = above.clamp_(max=types - 1).mul_(2)
        depth = bits.new_zeros(bits.shape[1])
        stack = bits.new_zeros(k + 2, bits.shape[1])  # stack[d + 1]: the token of the open that left depth d
        out = torch.empty_like(bits)
        for j in range(big_n):
            close = depth >= threshold[j]
            opened = torch.where(depth == 0, at_zero[j], above[j])
            torch.where(close, stack.gather(0, depth[None])[0], opened, out=out[j]).add_(close)
            stack.scatter_(0, (depth + 1)[None], opened[None])  # a close's write lands above the top: never read
            depth.add_(close, alpha=-2).add_(1)
        return out.T.reshape(*counter.keys.shape[:-1], big_n)

    def counter_corruptions(self, strings: torch.Tensor, counter: Counter, tries: int) -> torch.Tensor:
        """:meth:`corrupt`'s first round, ``tries`` times independently: [R, B, T, N]. Each: k uniform in
        1 … K = max(1, N/10), the first k of a uniformly random ordered selection of K positions (k distinct
        positions, uniformly), at each a type swap or a direction flip with probability 1/2. Corruption t takes the
        same lanes of each draw at any ``tries``: the first ones are the same whatever the budget."""
        import torch

        big_n, most = self.N, max(1, self.N // 10)
        k = 1 + counter.below(most, draw=2, width=tries)[..., None]  # [R, B, T, 1]
        where = counter.distinct(big_n, most, draw=3, rows=tries)  # [R, B, T, K]
        active = torch.arange(most, device=where.device) < k
        swap = counter.below(2, draw=4, width=tries * most).view(where.shape) == 1
        shift = 1 + counter.below(max(self.n_types, 2) - 1, draw=5, width=tries * most).view(where.shape)
        copies = strings[..., None, :].expand(*where.shape[:-1], big_n)
        tokens = copies.gather(-1, where)
        kind, is_close = tokens >> 1, tokens & 1  # token ids are ≥ 0: // 2 and % 2
        kind = torch.where(active & swap, (kind + shift) % self.n_types, kind)
        is_close = torch.where(active & ~swap, 1 - is_close, is_close)
        return copies.scatter(-1, where, 2 * kind + is_close)

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s distribution from the counter stream: label 1 with probability 1/2, a positive from H.1's
        generator, for a negative the first of ``CORRUPTIONS`` corruptions that leaves the language (the law of
        :meth:`corrupt`'s redraws). Should every corruption stay in the language (below 10⁻¹² per example) the
        example keeps it and is labelled 1: a label is always the string's membership."""
        import torch

        positive = counter.below(2, draw=0)[..., 0] == 1
        strings = self.counter_positives(counter)
        if counter.capturable:
            negative, left = self.first_leaving(strings, counter, CORRUPTIONS[min(self.n_types, 2)])
            return strings.where(positive[..., None], negative), (positive | ~left).long()
        # Off a graph: the negatives only, each corrupted once, and all the corruptions only where the first one stays
        # in the language (at most 1.5 % with two or more types). Corruption t of an example is the same at any
        # budget (its lanes come first), so these are the values above. Rows are taken and put back by index_select
        # and index_copy_ (2× faster than by a mask on a CPU).
        strings, label, negatives = strings.contiguous(), positive.long(), (~positive).view(-1).nonzero().view(-1)
        flat = strings.view(-1, self.N)
        negative, left = self.first_leaving(flat.index_select(0, negatives)[None], counter.rows(~positive), 1)
        stays = (~left[0]).nonzero().view(-1)
        if len(stays):
            again = torch.zeros_like(positive).view(-1).index_fill_(0, negatives.index_select(0, stays), True)
            redone, redone_left = self.first_leaving(flat.index_select(0, negatives.index_select(0, stays))[None],
                                                     counter.rows(again.view(positive.shape)),
                                                     CORRUPTIONS[min(self.n_types, 2)])
            negative[0].index_copy_(0, stays, redone[0])
            left[0].index_copy_(0, stays, redone_left[0])
        flat.index_copy_(0, negatives, negative[0])
        label.view(-1).index_copy_(0, negatives, (~left[0]).long())
        return strings, label

    def first_leaving(self, strings: torch.Tensor, counter: Counter, tries: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first of ``tries`` corruptions of each string [R, B, N] that leaves the language (the first
        corruption if none does), and whether it left, [R, B]."""
        from depthlab.tasks.counter import first_true

        corrupted = self.counter_corruptions(strings, counter, tries)
        member = is_dyck_tensor if counter.capturable else is_dyck_by_positions
        left = ~member(corrupted, self.depth)  # [R, B, T]
        pick = first_true(left)
        kept = corrupted.gather(-2, pick[..., None].expand(-1, -1, -1, self.N))[..., 0, :]
        return kept, left.gather(-1, pick)[..., 0]

    def decode(self, batch: Batch, i: int) -> str:
        return "".join(self.vocab[t] for t in batch.inputs[i]) + " _" + self.labels[int(batch.targets[i])]
