"""String equality in the three settings of seed 003 Appendix H.2: Eq-random, Eq-one and Eq-ncp.

H.2 setup: "we have a vocabulary Σ which contains one token that is reserved as a separator token '[sep]' and
is placed between the first half and the second half of the input string. For each task, while creating an
example we first pick the length k uniformly at random from N/10, N/10 + 2, N/10 + 4, … N […]. During
evaluation, we test the models on strings of length exactly N." A string is x [sep] y with |x| = |y| = k/2.

- Eq-random (``eq_random``): Σ = {0, 1, [sep]}; "With probability 1/2, we create a positive example by first
  sampling a string of length k/2 uniformly followed by the separator token and then the same string again.
  With probability 1/2, we create the second half of the string by sampling another string of the same length
  […]. We assign the label based on whether or not it is equal to the first half."
- Eq-one (``eq_one``): "a vocabulary with 1024 […] To generate a negative example, we set the second half to
  be equal to the first half and then change the symbol at only one of the positions." Positives as above.
- Eq-ncp (``eq_ncp``): next-character prediction, "a model is required to predict the next set of valid
  continuations for every prefix of a given string […] The prediction for a particular input string is
  considered correct if the prediction for every prefix is correct." Every example is a string x [sep] x of
  the language {w [sep] w : |w| ≥ 1}; the multi-label target after each prefix marks the valid next tokens
  among Σ ∪ {[sep], [eos]}: every symbol and [sep] inside the first half, exactly one symbol (the one to copy)
  after [sep], and [eos] once the copy is complete. Read at every position, binary cross-entropy per label.

Token ids: symbols 0..|Σ|-1, [sep] = |Σ|, padding = |Σ| + 1. Inputs have N + 1 tokens; shorter training
strings are padded on the left (the classification read-out stays the last position; nothing is masked, a pad
is a token the model learns to skip). In Eq-ncp the target after a pad is the continuation of the empty
prefix: every symbol. Evaluation strings have length N, hence no pads.

Memory note for Eq-ncp: targets are [examples, N + 1, |Σ| + 2] bytes and logits the same number of floats;
with |Σ| = 1024 keep N small at quick scale (the engine evaluates up to 8,192 examples in one chunk), or
lower ``eval_size``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from depthlab.tasks.base import Batch, check_split, register
from depthlab.tasks.eval_sets import SPLITS, FixedEvalSet

if TYPE_CHECKING:  # torch only where the counter stream runs: `depthlab tasks` never loads it
    import torch

    from depthlab.tasks.counter import Counter


def alphabet_field(default: int, paper: str | None = None) -> Any:
    """The field |Σ| of one setting: the paper's alphabet size as default, described as the paper does."""
    return Field(default, ge=2, description=f"|Σ| without [sep] (the paper: {paper or default})")


class _Equality(FixedEvalSet):
    """What the three settings share: lengths, layout, padding."""

    N: int = Field(20, ge=2, description="evaluation length: |x| + |y| (even)")
    alphabet: int = Field(2, ge=2, description="|Σ| without [sep]")
    eval_size: int = Field(5000, ge=1, description="evaluation examples (the paper: 5000 fresh examples)")

    @model_validator(mode="after")
    def _check(self) -> _Equality:
        if self.N % 2:
            raise ValueError(f"N must be even (two halves of equal length), got {self.N}")
        return self

    @property
    def sep_id(self) -> int:
        return self.alphabet

    @property
    def pad_id(self) -> int:
        return self.alphabet + 1

    @property
    def min_length(self) -> int:
        """The shortest training length: N/10 rounded up to an even number (at least 2)."""
        return max(2, 2 * math.ceil(self.N / 20))

    @property
    def vocab(self) -> list[str]:
        return [*(str(i) for i in range(self.alphabet)), "|", "·"]

    @property
    def vocab_size(self) -> int:
        return self.alphabet + 2

    @property
    def seq_len(self) -> int:
        return self.N + 1

    @property
    def n_inputs(self) -> int:
        return self.alphabet**self.N

    def lengths(self, n: int, rng: np.random.Generator, split: str) -> np.ndarray:
        """k per example: uniform over N/10, N/10 + 2, …, N for training; N for evaluation."""
        if split == "eval":
            return np.full(n, self.N)
        choices = np.arange(self.min_length, self.N + 1, 2)
        return choices[rng.integers(0, len(choices), n)]

    def layout(self, x: np.ndarray, y: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Inputs [n, N + 1]: pads, x[:k/2], [sep], y[:k/2] (x, y are [n, N/2], used up to k/2)."""
        n, half = x.shape[0], self.N // 2
        cols = np.arange(self.N + 1)[None]
        start = (self.N - k)[:, None]  # first column of x
        h = (k // 2)[:, None]
        i_x, i_y = cols - start, cols - start - h - 1
        out = np.full((n, self.N + 1), self.pad_id, dtype=np.int64)
        in_x, in_y = (i_x >= 0) & (i_x < h), (i_y >= 0) & (i_y < h)
        out = np.where(in_x, np.take_along_axis(x, np.clip(i_x, 0, half - 1), 1), out)
        out = np.where(in_y, np.take_along_axis(y, np.clip(i_y, 0, half - 1), 1), out)
        return np.where(i_x == h, self.sep_id, out)

    # Stream 2 (``tasks.counter``): the same lengths and layout on the device.
    counter_sampling = True

    def counter_lengths(self, counter: Counter) -> torch.Tensor:
        """k per example [R, B, 1], uniform over N/10, N/10 + 2, …, N (``lengths``' training draw)."""
        return self.min_length + 2 * counter.below((self.N - self.min_length) // 2 + 1, draw=0)

    def counter_positions(self, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The index i of each column in the string x|y (negative: a pad), [R, B, N + 1], and h = k/2."""
        import torch

        return torch.arange(self.N + 1, device=k.device) - (self.N - k), k // 2

    def counter_layout(self, x: torch.Tensor, y: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """``layout`` on the device: x, y [R, B, N/2], k [R, B, 1] -> inputs [R, B, N + 1]."""
        import torch

        i, h = self.counter_positions(k)
        last = self.N // 2 - 1
        out = torch.where((i >= 0) & (i < h), x.gather(-1, i.clamp(0, last)), self.pad_id)
        j = i - h - 1
        out = torch.where((j >= 0) & (j < h), y.gather(-1, j.clamp(0, last)), out)
        return torch.where(i == h, self.sep_id, out)


class _Classification(_Equality):
    eval_protocol = "eval_size fresh strings of length exactly N (training lengths N/10, N/10 + 2, …, N)"

    @property
    def labels(self) -> list[str]:
        return ["0", "1"]

    @property
    def chance(self) -> float:
        return 0.5

    def second_half(self, x: np.ndarray, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        k = self.lengths(n, rng, split)
        x = rng.integers(0, self.alphabet, (n, self.N // 2))
        positive = rng.random(n) < 0.5
        y = np.where(positive[:, None], x, self.second_half(x, k, rng))
        used = np.arange(self.N // 2)[None] < (k // 2)[:, None]
        label = ((x == y) | ~used).all(1)
        return Batch(self.layout(x, y, k), label.astype(np.int64), {"k": k.astype(np.int64)})

    def counter_second_half(self, x: torch.Tensor, k: torch.Tensor, counter: Counter) -> torch.Tensor:
        """``second_half`` from the counter stream (draws 3 and up)."""
        raise NotImplementedError

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s training distribution from the counter stream: k as ``lengths`` draws it, x uniform, the
        second half x itself with probability 1/2, else ``counter_second_half``; the label whether the used halves
        are equal."""
        import torch

        k = self.counter_lengths(counter)
        x = counter.below(self.alphabet, draw=1, width=self.N // 2)
        positive = counter.below(2, draw=2) == 1
        y = torch.where(positive, x, self.counter_second_half(x, k, counter))
        used = torch.arange(self.N // 2, device=x.device) < k // 2
        label = ((x == y) | ~used).all(-1)
        return self.counter_layout(x, y, k), label.long()

    def decode(self, batch: Batch, i: int) -> str:
        return " ".join(self.vocab[t] for t in batch.inputs[i] if t != self.pad_id) + " _" + str(batch.targets[i])


@register
class EqRandom(_Classification):
    name = "eq_random"
    title = "string equality (random negatives)"
    section = "seed 003 App. H.2 (i)"
    summary = "string equality, negatives with a random second half (binary strings)"

    alphabet: int = alphabet_field(2, "binary")

    def second_half(self, x: np.ndarray, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, self.alphabet, x.shape)

    def counter_second_half(self, x: torch.Tensor, k: torch.Tensor, counter: Counter) -> torch.Tensor:
        return counter.below(self.alphabet, draw=3, width=x.shape[-1])


@register
class EqOne(_Classification):
    name = "eq_one"
    title = "string equality (one-symbol negatives)"
    section = "seed 003 App. H.2 (ii)"
    summary = "string equality, negatives differ from the first half in exactly one symbol"

    alphabet: int = alphabet_field(1024)

    def second_half(self, x: np.ndarray, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n = x.shape[0]
        rows = np.arange(n)
        where = (rng.random(n) * (k // 2)).astype(np.int64)  # a position inside the used half
        y = x.copy()
        y[rows, where] = (x[rows, where] + rng.integers(1, self.alphabet, n)) % self.alphabet
        return y

    def counter_second_half(self, x: torch.Tensor, k: torch.Tensor, counter: Counter) -> torch.Tensor:
        where = counter.below(k // 2, draw=3)  # a position inside the used half, [R, B, 1]
        changed = (x.gather(-1, where) + 1 + counter.below(self.alphabet - 1, draw=4)) % self.alphabet
        return x.scatter(-1, where, changed)


@register
class EqNCP(_Equality):
    name = "eq_ncp"
    title = "string equality (next character)"
    section = "seed 003 App. H.2 (iii)"
    summary = "string equality as next-character prediction: valid continuations of every prefix of w|w"
    eval_protocol = "eval_size fresh strings w|w of length exactly N; correct when every prefix's label set is right"
    accuracy_over = "example"

    alphabet: int = alphabet_field(1024)
    weighting: Literal["balanced", "mean"] = Field(
        "balanced", description="binary cross-entropy over each label set: balanced (positives and negatives "
                                "weigh equally) or mean (every label equally; after [sep] 1 of |Σ| + 2 is positive)")

    @property
    def loss(self) -> str:  # type: ignore[override]
        return "bce_balanced" if self.weighting == "balanced" else "bce"

    @property
    def labels(self) -> list[str]:
        return [*(str(i) for i in range(self.alphabet)), "|", "$"]

    @property
    def n_outputs(self) -> int:
        return self.alphabet + 2

    @property
    def read_positions(self) -> list[int]:
        return list(range(self.seq_len))

    @property
    def chance(self) -> float:
        return 0.0  # a uniform guess of the second half is right with probability |Σ|^(−N/2)

    def sample(self, n: int, rng: np.random.Generator, split: str = "train") -> Batch:
        check_split(split, SPLITS)
        k = self.lengths(n, rng, split)
        x = rng.integers(0, self.alphabet, (n, self.N // 2))
        inputs = self.layout(x, x, k)
        a, length = self.alphabet, self.N + 1
        targets = np.zeros((n, length, a + 2), dtype=np.uint8)
        cols = np.arange(length)[None]
        start, h = (self.N - k)[:, None], (k // 2)[:, None]
        i = cols - start  # index in the string x|x of each column (negative: a pad)
        targets[:, :, :a] = (i < h)[..., None]  # pads and first half: every symbol
        targets[:, :, a] = ((i >= 0) & (i < h))[..., None].squeeze(-1)  # inside x: [sep] is valid too
        copying = (i >= h) & (i < 2 * h)  # after [sep] or a copied symbol, not yet complete: one symbol
        j = np.clip(i - h, 0, self.N // 2 - 1)
        nxt = np.take_along_axis(x, j, 1)
        rows, pos = np.nonzero(copying)
        targets[rows, pos, nxt[rows, pos]] = 1
        targets[:, :, a + 1] = i == 2 * h  # the copy is complete: end of string
        return Batch(inputs, targets, {"k": k.astype(np.int64)})

    def sample_counter(self, counter: Counter) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample``'s training distribution from the counter stream: k as ``lengths`` draws it, x uniform, the
        string x|x; the same label sets after every prefix (uint8 [R, B, N + 1, |Σ| + 2])."""
        import torch

        a = self.alphabet
        k = self.counter_lengths(counter)
        x = counter.below(a, draw=1, width=self.N // 2)
        i, h = self.counter_positions(k)
        targets = (i < h)[..., None].to(torch.uint8).expand(*i.shape, a + 2).clone()  # pads, x: every symbol
        targets[..., a] = (i >= 0) & (i < h)  # inside x: [sep] is valid too
        targets[..., a + 1] = i == 2 * h  # the copy is complete: end of string
        copying = (i >= h) & (i < 2 * h)  # after [sep] or a copied symbol, not yet complete: one symbol
        to_copy = x.gather(-1, (i - h).clamp(0, self.N // 2 - 1))[..., None]
        targets.scatter_(-1, to_copy, (copying | (i < h))[..., None].to(torch.uint8))  # rows i < h stay all ones
        return self.counter_layout(x, x, k), targets

    def decode(self, batch: Batch, i: int) -> str:
        return " ".join(self.vocab[t] for t in batch.inputs[i] if t != self.pad_id)
