"""A counter-based random stream for training data made on the run's device (issue 45, item 1; stream version 2).

Every random number of a training example is a hash of its coordinates: (run seed, step, example in the batch,
draw, lane): no generator state, nothing sampled on the host, nothing copied to the device. The hash is Chris Wellons'
``lowbias32`` integer finaliser (x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16),
applied once per coordinate (a sponge: h ← hash(h ^ coordinate)). It is computed on 32-bit values held in int64
tensors with 32 × 32-bit products split into 16-bit halves, so that no intermediate leaves the range int64 holds:
every operation is exact integer arithmetic, and the stream is the same bit for bit on the CPU and on any GPU.

Draws from the 32-bit values: an integer below m is ``(h · m) >> 32`` (the multiply-shift map; its bias is at most
m / 2³² per value), k distinct values of a population are the k smallest of a hash per member (each member's key
made unique by its index, so the order never depends on how a device breaks ties): a uniformly random ordered
selection, up to the hash.
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, m: int) -> torch.Tensor:
    """x · m mod 2³² for x in [0, 2³²): as two products of at most 48 bits (int64 never overflows)."""
    low = x * (m & 0xFFFF)
    high = ((x * (m >> 16)) & 0xFFFF) << 16
    return (low + high) & MASK32


def hash32(x: torch.Tensor) -> torch.Tensor:
    """``lowbias32`` of x in [0, 2³²) (int64): a bijection of 32-bit integers that mixes every bit into every bit."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _absorb(h: torch.Tensor, value: torch.Tensor | int) -> torch.Tensor:
    """The sponge's step: h ← hash(h ^ value), value taken mod 2³²."""
    return hash32(h ^ (value & MASK32))


def seed_keys(seeds: torch.Tensor) -> torch.Tensor:
    """The runs' keys [R] from their seeds (int64, all 63 bits used): computed once per group."""
    return _absorb(hash32((seeds & MASK32) ^ 0x5EED), hash32((seeds >> 32) & MASK32))


class Counter:
    """The random draws of one step of R runs, B examples each, keyed by (seed, step, example, draw, lane).

    ``keys`` (:func:`seed_keys`) and ``steps`` are int64 tensors [R] on the device (a run's step counts its
    batches); every draw method takes a ``draw`` number, distinct for every use within a task's sampler (below
    2¹⁵), and returns [R, B, …]. A value is hash(key(seed, step, example) ^ (draw · 2¹⁶ + lane)): one hash over
    the output, two over [R, B] per step."""

    def __init__(self, keys: torch.Tensor, steps: torch.Tensor, batch: int) -> None:
        self.batch, self.device = batch, keys.device
        examples = torch.arange(batch, dtype=torch.int64, device=self.device)
        self.keys = _absorb(_absorb(keys, steps)[:, None], examples)[..., None]  # [R, B, 1]: one key per example

    def bits(self, draw: int, width: int) -> torch.Tensor:
        """``width`` 32-bit values per example, [R, B, width] (int64 in [0, 2³²)); width at most 2¹⁶."""
        lanes = torch.arange(draw << 16, (draw << 16) + width, dtype=torch.int64, device=self.device)
        return hash32(self.keys ^ lanes)

    def below(self, m: torch.Tensor | int, draw: int, width: int = 1) -> torch.Tensor:
        """Integers uniform in [0, m) (up to the multiply-shift's bias), [R, B, width]; ``m`` < 2³¹, an int or a
        tensor broadcasting against [R, B, width]."""
        return (self.bits(draw, width) * m) >> 32

    def distinct(self, population: int, k: int, draw: int) -> torch.Tensor:
        """k distinct values of [0, population), in random order, [R, B, k]."""
        members = torch.arange(population, dtype=torch.int64, device=self.device)
        keys = self.bits(draw, population) * population + members  # unique keys: no ties to break
        return keys.topk(k, dim=-1, largest=False, sorted=True).indices
