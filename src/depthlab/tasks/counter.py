"""A counter-based random stream for training data made on the run's device (issue 45, item 1; stream version 2).

Every random number of a training example is a hash of its coordinates: (run seed, step, example in the batch,
draw, lane): no generator state, nothing sampled on the host, nothing copied to the device. The hash is Chris Wellons'
``lowbias32`` integer finaliser (x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16),
applied once per coordinate (a sponge: h ← hash(h ^ coordinate)). It is computed on int32 tensors holding the 32-bit
values' bits (two's complement): exact integer arithmetic modulo 2³², so the stream is the same bit for bit on the
CPU and on any GPU, at half the memory traffic of int64 (on this project's 2-core CPU, one thread: 88 → 40 µs per
hash of 16 K values, 8.6 → 1.3 ms of 1 M, against the int64 form with 16-bit-half products it replaced).

Why int32 arithmetic is exact here. lowbias32 is arithmetic modulo 2³², and two's complement int32 *is* the ring of
integers modulo 2³² under ``+``, ``*``, ``^``, ``&``: a product's low 32 bits do not depend on whether its factors
are read as signed or unsigned, and an int32 ``mul`` keeps exactly those bits (it wraps) on the CPU (ATen's kernels
and their vectorised forms), on CUDA, and in the code Inductor/Triton generate; the int64 → int32 conversion keeps
the low 32 bits likewise (``steps`` and seeds mod 2³²). The one place where signed and unsigned differ is the right
shift (arithmetic on int32: the sign bit is copied in), so every shift by s is masked to its 32 − s low bits: the
logical shift of the unsigned value. (torch.uint32 would need no mask but has no ``>>`` on the CPU in torch 2.13.)
``tests/test_counter_stream.py`` checks :func:`hash32_` against the 64-bit formula on edge values, and
``tests/test_counter_golden.py`` pins every task's values, so a backend that did not wrap would fail there.

Draws from the 32-bit values h (unsigned, in [0, 2³²)): an integer below m is ``(h · m) >> 32`` (the multiply-shift
map; its bias is at most m / 2³² per value; computed in int64, or for m = 2ᵏ as h's top k bits in int32), k
distinct values of a population are the k smallest of a hash per member (each member's key made unique by its
index, so the order never depends on how a device breaks ties): a uniformly random ordered selection, up to the
hash. A uniform real is (h + ½) / 2³², and a standard normal is Box and Muller's transform of
two: the integers are the same bit for bit everywhere; the reals pass through the device's ``log`` and ``cos``
(float64), which agree to the last bits, not beyond.

Samplers that reject: a task whose draws are redone until a condition holds (a template's sequence in the
training split, a corrupted Dyck string out of the language) draws a fixed number of candidates at once and takes
the first that holds (:func:`first_true`): the first accepted of independent candidates has the conditional law
the redraw loop has, and the budget is sized so that none holding is negligible (each task says how).

The held-out split of the template tasks (``base.split_mask``, a splitmix64 hash of the sequence) is
:func:`split_mask`: the same 64-bit arithmetic on pairs of 32-bit halves, so the training stream knows which
sequences are held out, on the device.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1
SIGN32 = -(1 << 31)  # the int32 sign bit: h ^ SIGN32, read as signed, orders as h does unsigned (h − 2³¹)
FEW = 8  # off a graph, a selection of at most this many values (of at least twice as many) is made by passes
FEW_ON_GRAPH = 4  # on a graph, at most this many by argmin passes (two kernels each), more by one topk
SORTED = 16  # off a graph, a selection of more than half of at most this many members is a sort of the row
STRUCK = (1 << 63) - 1  # above every int64 key of :meth:`Counter.distinct` (|key| < 2⁶², population < 2³¹)


def _signed32(m: int) -> int:
    """A 32-bit constant as the int32 with its bits (an int32 tensor's scalar operand must fit int32)."""
    return m - (1 << 32) if m >= 1 << 31 else m


@functools.cache
def _int32(m: int) -> torch.Tensor:
    """A 32-bit constant as a 0-d int32 tensor on the CPU, made once: an int32 tensor's operation with it is an int32
    one from the start (a Python int is wrapped as an int64 tensor first: 1.5 µs more per operation, and a hash takes
    eleven; 33 → 19 µs per hash of 8 K values). A 0-d CPU tensor is a scalar argument on every device, read on the
    host when the kernel is launched: no copy, nothing a CUDA graph cannot hold."""
    return torch.tensor(_signed32(m & MASK32), dtype=torch.int32)


def hash32_(x: torch.Tensor) -> torch.Tensor:
    """``lowbias32`` of the 32-bit values whose bits the int32 tensor x holds, in place (x is returned): a bijection
    of 32-bit integers that mixes every bit into every bit. On a CPU (where no graph is captured) by numpy on x's own
    memory (:func:`hash32_host_`), elsewhere, or while torch.compile traces, by torch operations
    (:func:`hash32_tensor_`): the same bits (``tests/test_counter_stream.py`` checks both)."""
    if on_host(x):
        return hash32_host_(x)
    return hash32_tensor_(x)


def hash32_tensor_(x: torch.Tensor) -> torch.Tensor:
    """:func:`hash32_` by torch operations on any device, capturable: products wrap modulo 2³²; each shift by s is
    masked to its 32 − s low bits, the logical shift (the module's docstring says why this is exact). In place with
    one scratch tensor: a CPU's large temporaries cost page faults more than arithmetic (a fresh tensor per operation
    made a hash of 8,192 × 64 values 4× slower on this project's CPU: 2.2 ms against 0.5 ms with the copy of x)."""
    shifted = (x >> _int32(16)).bitwise_and_(_int32(0xFFFF))
    x.bitwise_xor_(shifted).mul_(_int32(0x7FEB352D))
    x.bitwise_xor_(torch.bitwise_right_shift(x, _int32(15), out=shifted).bitwise_and_(_int32(0x1FFFF)))
    x.mul_(_int32(0x846CA68B))
    return x.bitwise_xor_(torch.bitwise_right_shift(x, _int32(16), out=shifted).bitwise_and_(_int32(0xFFFF)))


def hash32_host_(x: torch.Tensor) -> torch.Tensor:
    """:func:`hash32_` of a CPU tensor by numpy (:func:`lowbias32_`), in place on its memory read as uint32."""
    lowbias32_(x.numpy().view(np.uint32))
    return x


def lowbias32_(h: np.ndarray) -> np.ndarray:
    """``lowbias32`` of uint32 values in place (h is returned): numpy's shift of unsigned values is the logical one (no
    masks), and its operations cost less to call than torch's: 8,192 values 20 → 10 µs, 128 values 14 → 4 µs,
    524,288 values 470 → 355 µs on this project's CPU, one thread."""
    scratch = np.right_shift(h, _U16)
    h ^= scratch
    h *= _MUL1
    h ^= np.right_shift(h, _U15, out=scratch)
    h *= _MUL2
    h ^= np.right_shift(h, _U16, out=scratch)
    return h


_MUL1, _MUL2, _U15, _U16 = (np.uint32(c) for c in (0x7FEB352D, 0x846CA68B, 15, 16))  # no promotion per call


def on_host(x: torch.Tensor) -> bool:
    """Whether x's draws are computed by numpy on its memory: on a CPU, unless torch.compile is tracing."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def unsigned(words: torch.Tensor) -> torch.Tensor:
    """The 32-bit values of int32 ``words`` as int64 in [0, 2³²): for the 64-bit arithmetic of their consumers."""
    return words.to(torch.int64).bitwise_and_(MASK32)


def _absorb(h: torch.Tensor, value: torch.Tensor | int) -> torch.Tensor:
    """The sponge's step: h ← hash(h ^ value), value taken mod 2³² (an int64 tensor's low 32 bits by ``to``)."""
    if isinstance(value, int):
        return hash32_(h ^ _int32(value))
    return hash32_(h ^ value.to(torch.int32))


def seed_keys(seeds: torch.Tensor) -> torch.Tensor:
    """The runs' keys [R] (int32) from their seeds (int64, all 63 bits used): computed once per group."""
    return _absorb(hash32_(seeds.to(torch.int32) ^ _int32(0x5EED)), hash32_((seeds >> 32).to(torch.int32)))


class Counter:
    """The random draws of one step of R runs, B examples each, keyed by (seed, step, example, draw, lane).

    ``keys`` (:func:`seed_keys`, int32) and ``steps`` (int64) are tensors [R] on the device (a run's step counts its
    batches); every draw method takes a ``draw`` number, distinct for every use within a task's sampler (below
    2¹⁵), and returns [R, B, …]. A value is hash(key(seed, step, example) ^ (draw · 2¹⁶ + lane)) (lane < 2¹⁶; a
    wider draw: :meth:`words`): one hash over the output, two over [R, B] per step.

    ``capturable`` (the default) asks the sampler for work a CUDA graph can hold: no shape that depends on the values
    drawn, no host synchronisation. Off a graph (``capturable=False``: stream 2 made ahead on a CPU) a sampler may
    draw a redraw's further candidates only for the examples that need them (:meth:`rows`), for the same values.

    On a CPU (:func:`on_host`) the keys and the words are computed by numpy on the tensors' memory (``host``: the
    keys as uint32), the same bits: a sampler's fixed cost is mostly its calls (memorization's chunk cost 122 µs for
    a single example, 157 µs for 8,192), and numpy's cost less than torch's."""

    def __init__(self, keys: torch.Tensor, steps: torch.Tensor, batch: int, capturable: bool = True) -> None:
        self.batch, self.device, self.capturable = batch, keys.device, capturable
        self.host: np.ndarray | None = None
        if on_host(keys):  # _absorb twice, in numpy: (key ^ step mod 2³²), then ^ example
            run_keys = lowbias32_(keys.numpy().view(np.uint32) ^ steps.numpy().astype(np.uint32))
            example_keys = lowbias32_(run_keys[:, None] ^ np.arange(batch, dtype=np.uint32))
            self.keys, self.host = torch.from_numpy(example_keys.view(np.int32))[..., None], example_keys[..., None]
            return
        examples = torch.arange(batch, dtype=torch.int32, device=self.device)
        self.keys = _absorb(_absorb(keys, steps)[:, None], examples)[..., None]  # [R, B, 1]: one key per example

    def rows(self, chosen: torch.Tensor) -> Counter:
        """The draws of the examples where ``chosen`` [R, B] is True only, as one run of M examples ([1, M, …]):
        each example's values are the ones it has here. Its shape depends on the values: off a graph only."""
        if self.capturable:
            raise RuntimeError("Counter.rows makes a shape that depends on the values: a capturable sampler cannot")
        subset = object.__new__(Counter)
        subset.keys = self.keys[chosen][None]
        subset.batch, subset.device, subset.capturable = subset.keys.shape[1], self.device, False
        subset.host = subset.keys.numpy().view(np.uint32) if self.host is not None else None
        return subset

    def words(self, draw: int, width: int, first: int = 0) -> torch.Tensor:
        """``width`` 32-bit values per example, [R, B, width], as the bits of int32 (two's complement); with ``first``,
        the values first … first + width − 1 of the draw (within its first 2¹⁶), the same as in a wider call. A draw
        has 2¹⁶ lanes; a wider one takes them again, each value hashed once more with its block number (1, 2, … for
        the values 2¹⁶ …), so the first 2¹⁶ values are the same at any width and no lane of another draw is touched."""
        if self.host is not None and width <= 1 << 16:
            return torch.from_numpy(self._host_words(draw, width, first).view(np.int32))
        values = hash32_(self.keys ^ self._lanes(draw, width, first))
        if width <= 1 << 16:
            return values
        blocks = torch.arange(1, -(-width // (1 << 16)), dtype=torch.int32, device=self.device)[:, None]
        wider = hash32_(values[..., None, :] ^ blocks).flatten(-2)
        return torch.cat([values, wider], -1)[..., :width]

    def _lanes(self, draw: int, width: int, first: int = 0) -> torch.Tensor:
        """``width`` lanes of a draw from lane ``first`` (at most 2¹⁶ in all), int32 [width]."""
        start = _first_lane(draw, width, first)
        return torch.arange(start, start + min(width, 1 << 16), dtype=torch.int32, device=self.device)

    def _host_words(self, draw: int, width: int, first: int = 0) -> np.ndarray:
        """:meth:`words` (``width`` ≤ 2¹⁶) by numpy from the ``host`` keys, uint32 [R, B, width]."""
        start = _first_lane(draw, width, first)
        return lowbias32_(self.host ^ np.arange(start, start + width, dtype=np.uint32))

    def words_by_lanes(self, draw: int, width: int) -> torch.Tensor:
        """:meth:`words` (``width`` ≤ 2¹⁶) laid out lane by lane, [width, R, B]: each lane's values contiguous, for
        samplers that work across examples one lane at a time."""
        start = _first_lane(draw, width, 0)
        if self.host is not None:
            lanes = np.arange(start, start + width, dtype=np.uint32)[:, None, None]
            return torch.from_numpy(lowbias32_(lanes ^ self.host[..., 0]).view(np.int32))
        return hash32_(self._lanes(draw, width)[:, None, None] ^ self.keys[..., 0])

    def bits(self, draw: int, width: int) -> torch.Tensor:
        """:meth:`words` as int64 in [0, 2³²), [R, B, width]."""
        if self.host is not None and width <= 1 << 16:
            return torch.from_numpy(self._host_words(draw, width).astype(np.int64))
        return unsigned(self.words(draw, width))

    def below(self, m: torch.Tensor | int, draw: int, width: int = 1) -> torch.Tensor:
        """Integers uniform in [0, m) (up to the multiply-shift's bias), int64 [R, B, width]; ``m`` < 2³¹, an int or a
        tensor broadcasting against [R, B, width]. For m = 2ᵏ, (h · 2ᵏ) >> 32 is h's top k bits: taken in int32."""
        if isinstance(m, int) and m == 1 and self.host is not None:  # (h · 1) >> 32 = 0: no words to draw
            return torch.zeros(*self.keys.shape[:-1], width, dtype=torch.int64)
        if isinstance(m, int) and m > 1 and m & (m - 1) == 0:
            if self.host is not None and width <= 1 << 16:  # numpy's shift of unsigned values: no mask
                return torch.from_numpy((self._host_words(draw, width) >> (33 - m.bit_length())).astype(np.int64))
            words = self.words(draw, width)
            return (words >> _int32(33 - m.bit_length())).bitwise_and_(_int32(m - 1)).to(torch.int64)
        product = self.bits(draw, width).mul_(m) if isinstance(m, int) else self.bits(draw, width) * m
        return product.bitwise_right_shift_(32)

    def distinct(self, population: int, k: int, draw: int, rows: int | None = None) -> torch.Tensor:
        """k distinct values of [0, population), in random order, [R, B, k]; with ``rows``, that many independent
        selections, [R, B, rows, k]: the members of the k smallest keys (:meth:`_keys`), in order.

        On a graph, with the fewest kernels: ``topk``, or for at most ``FEW_ON_GRAPH`` values that many argmin
        passes. Off a graph, by the fastest method measured on a CPU (8,192 rows, one thread): k passes of the row's
        minimum for k ≤ 8 of at least 2k members (faster than topk, which sorts each short row: 8 members, k = 3:
        591 → 323 µs with argmin; 100 members, k = 5: 5.5 → 3.3 ms), on float64 keys, whose row minimum is 3× faster
        than int64's argmin (64 members: 411 → 128 µs); one selection of at most 16 members, any k, laid out lane by
        lane (:meth:`_smallest_by_lanes`: against a sort of each row, 4 of 4 316 → 275 µs, 8 of 5 744 → 396 µs,
        16 of 16 1.6 → 1.4 ms); for ``rows`` of at most 16 members, a whole sort of each row for most of them (8 of 8:
        719 → 532 µs; 12 of 12: 1.4 → 0.9 ms against passes); topk otherwise (16 of 32 or of 64: passes and sort are
        slower). Sort and topk are 1.3–1.5× faster on int64 keys than on float64. The keys are unique, so every method
        gives topk's answer."""
        shift = max(1, (population - 1).bit_length())
        if self.capturable:
            keys = self._keys(draw, population, rows, shift, torch.int64)
            if k > FEW_ON_GRAPH:
                return keys.topk(k, dim=-1, largest=False, sorted=True).indices
            picked = []
            for _ in range(k):
                smallest = keys.argmin(-1, keepdim=True)
                picked.append(smallest)
                keys.scatter_(-1, smallest, STRUCK)
            return torch.cat(picked, -1)
        if rows is None and population <= SORTED:
            return self._smallest_by_lanes(population, k, draw, shift)
        if k <= FEW and 2 * k <= population:
            return self._smallest_by_passes(self._keys(draw, population, rows, shift, torch.float64 if shift <= 21
                                                       else torch.int64), k, shift)
        keys = self._keys(draw, population, rows, shift, torch.int64)
        if population <= SORTED and 2 * k > population:
            return keys.sort(-1).indices[..., :k]
        return keys.topk(k, dim=-1, largest=False, sorted=True).indices

    def _keys(self, draw: int, population: int, rows: int | None, shift: int, dtype: torch.dtype) -> torch.Tensor:
        """A key per member, [R, B, (rows,) population]: (h − 2³¹) · 2^shift + member (2^shift ≥ population), which
        orders as (h, member) with h unsigned, is unique (no ties for a device to break), and whose low ``shift``
        bits are the member. Exact in int64, and in float64 below 2⁵³ (shift ≤ 21). In place on the words: see
        :func:`hash32_`."""
        words = self.words(draw, population * (rows or 1))
        if rows is not None:
            words = words.unflatten(-1, (rows, population))
        members = torch.arange(population, dtype=dtype, device=self.device)
        return words.bitwise_xor_(_int32(SIGN32)).to(dtype).mul_(1 << shift).add_(members)

    def _smallest_by_passes(self, keys: torch.Tensor, k: int, shift: int) -> torch.Tensor:
        """The members of the k smallest keys, in order: k passes of the row's minimum, each struck out by
        ``index_fill_`` on the flat keys (1.7× faster than ``scatter_`` on a CPU)."""
        population = keys.shape[-1]
        picked, flat = [], keys.view(-1)
        starts = torch.arange(0, flat.numel(), population, device=self.device).view(*keys.shape[:-1], 1)
        struck = math.inf if keys.is_floating_point() else STRUCK
        for j in range(k):
            smallest = keys.amin(-1, keepdim=True).to(torch.int64).bitwise_and_((1 << shift) - 1)
            picked.append(smallest)
            if j < k - 1:
                flat.index_fill_(0, (smallest + starts).view(-1), struck)
        return torch.cat(picked, -1)

    def _smallest_by_lanes(self, population: int, k: int, draw: int, shift: int) -> torch.Tensor:
        """:meth:`distinct`'s passes for at most ``SORTED`` members, the same keys laid out lane by lane,
        [population, R, B]: each pass's minimum is element-wise across whole rows, not along short ones (2× faster
        on a CPU: 8,192 selections of 6 of 12 members, 980 → 482 µs; of 3 of 8, 420 → 191 µs)."""
        words = self.words_by_lanes(draw, population)  # [P, R, B]
        members = torch.arange(population, dtype=torch.float64, device=self.device)[:, None, None]
        keys = words.bitwise_xor_(_int32(SIGN32)).double().mul_(1 << shift).add_(members)
        picked, flat = [], keys.view(-1)
        examples = torch.arange(words[0].numel(), device=self.device).view(words.shape[1:])
        for j in range(k):
            smallest = keys.amin(0).to(torch.int64).bitwise_and_((1 << shift) - 1)
            picked.append(smallest)
            if j < k - 1:
                flat.index_fill_(0, (smallest * examples.numel() + examples).view(-1), math.inf)
        return torch.stack(picked, -1)

    def uniform(self, draw: int, width: int = 1, first: int = 0) -> torch.Tensor:
        """Reals uniform in (0, 1), float64 [R, B, width] (values ``first`` … of the draw): (h + ½) / 2³², never 0 or
        1. Computed as ((h − 2³¹) + (2³¹ + ½)) · 2⁻³² from the signed int32 h ^ 2³¹: every step exact in float64."""
        words = self.words(draw, width, first)
        return words.bitwise_xor_(_int32(SIGN32)).double().add_(2.0**31 + 0.5).mul_(2.0**-32)

    def normal(self, draw: int, width: int = 1, first: int = 0) -> torch.Tensor:
        """Standard normals, float64 [R, B, width] (values ``first`` … of the draw): Box–Muller, each pair of uniforms
        (u, v) (lanes 2i, 2i + 1) giving the two independent normals √(−2 ln u) cos(2πv) and √(−2 ln u) sin(2πv)
        (values 2i, 2i + 1)."""
        start = first - first % 2  # the pair that holds value ``first``
        u = self.uniform(draw, 2 * ((first + width + 1) // 2) - start, start).unflatten(-1, (-1, 2))
        radius, angle = u[..., 0].log().mul_(-2.0).sqrt_(), u[..., 1].mul(2.0 * math.pi)
        normals = torch.empty_like(u)  # the products written in their places (IEEE ×: the same values as in place)
        torch.mul(angle.cos(), radius, out=normals[..., 0])
        torch.mul(angle.sin_(), radius, out=normals[..., 1])
        return normals.flatten(-2)[..., first - start : first - start + width]


def _first_lane(draw: int, width: int, first: int) -> int:
    """The counter of a draw's lane ``first`` (draw · 2¹⁶ + first), checked: lanes of two draws never meet."""
    if not 0 <= draw < 1 << 15:
        raise ValueError(f"a counter draw is numbered below 32,768 (got {draw})")
    if first and first + width > 1 << 16:
        raise ValueError(f"a counter draw's values from {first} are taken within its first 65,536 (got {width})")
    return (draw << 16) + first


def take_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[index]``, [*index.shape, *table.shape[1:]]: ``index_select`` (twice as fast as indexing on a CPU)."""
    return table.index_select(0, index.flatten()).view(*index.shape, *table.shape[1:])


class PackedRows:
    """The rows of a non-negative integer table [P, w] each as one int64, where they fill one exactly (8 int8, 4 int16
    or 2 int32 lanes, every value within the lane): taking rows is then one ``index_select`` of one word per row and
    one conversion (on a CPU, 8,192 of memorization's rows of 4 tokens: 25 → 15 µs against ``index_select`` of the
    int64 rows, which copies each short row on its own). ``lane`` is None where the rows do not fit."""

    def __init__(self, table: np.ndarray) -> None:
        lane = {8: np.int8, 4: np.int16, 2: np.int32}.get(table.shape[1])
        fits = lane is not None and table.min() >= 0 and table.max() <= np.iinfo(lane).max
        self.lane = lane if fits else None
        self.words = np.ascontiguousarray(table.astype(lane)).view(np.int64)[:, 0] if fits else None

    def take(self, words: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """``table[index]`` as int64, [..., w], from :attr:`words` on the index's device."""
        lane = {np.int8: torch.int8, np.int16: torch.int16, np.int32: torch.int32}[self.lane]
        return words.index_select(0, index.flatten()).view(lane).view(*index.shape, -1).to(torch.int64)


def first_true(ok: torch.Tensor) -> torch.Tensor:
    """Index of the first True along the last axis (0 where none is): the candidate a redraw loop would keep,
    [..., 1] for ``gather``."""
    return ok.to(torch.uint8).argmax(-1, keepdim=True)  # argmax gives the first of equal maxima on every device


class DeviceTables:
    """A task's fixed arrays (a stored dataset, a table of sequences), copied to each device the first time a
    sampler asks for them there and kept: the copy happens before a CUDA graph captures the step (its warm-up
    steps run eagerly), never inside it."""

    def __init__(self, **arrays: np.ndarray) -> None:
        self.arrays: dict[str, np.ndarray] = arrays
        self.copies: dict[tuple[str, torch.device], torch.Tensor] = {}

    def get(self, name: str, device: torch.device) -> torch.Tensor:
        key = (name, device)
        if key not in self.copies:
            self.copies[key] = torch.as_tensor(self.arrays[name]).to(device)
        return self.copies[key]


# --- 64-bit arithmetic on pairs of 32-bit halves (hi, lo), each in [0, 2³²) in an int64 tensor --------------

Pair = tuple[torch.Tensor, torch.Tensor]


def _mul32(x: torch.Tensor, m: int) -> torch.Tensor:
    """x · m mod 2³² for x in [0, 2³²) (int64), as the wrapping int32 product sign-extended to int64: its low 32 bits
    are the product's (the caller's sum is masked)."""
    return x.to(torch.int32).mul_(_signed32(m)).to(torch.int64)


def _product64(x: torch.Tensor, m: int) -> Pair:
    """The whole 64-bit product of x in [0, 2³²) and a 32-bit m: two products of at most 48 bits."""
    low, high = x * (m & 0xFFFF), x * (m >> 16)  # x·m = low + high·2¹⁶
    total = low + ((high & 0xFFFF) << 16)
    return (total >> 32) + (high >> 16), total & MASK32


def _mul64(z: Pair, m: int) -> Pair:
    """z · m mod 2⁶⁴ for a 64-bit constant m."""
    hi, lo = z
    carry, low = _product64(lo, m & MASK32)
    return (carry + _mul32(hi, m & MASK32) + _mul32(lo, m >> 32)) & MASK32, low


def _xor_shift64(z: Pair, s: int) -> Pair:
    """z ^ (z >> s) for 0 < s < 32."""
    hi, lo = z
    return hi ^ (hi >> s), lo ^ (((lo >> s) | (hi << (32 - s))) & MASK32)


def split_mask(codes: torch.Tensor, eval_fraction: float, split_seed: int) -> torch.Tensor:
    """``base.split_mask`` on the device, bit for bit: True where an item's int64 code (non-negative) is held out.

    splitmix64 of code + 0x9E3779B97F4A7C15·(split_seed + 1), its top 53 bits read as a real in [0, 1) and
    compared with ``eval_fraction``."""
    offset = (0x9E3779B97F4A7C15 * (split_seed + 1)) & MASK64
    lo = (codes & MASK32) + (offset & MASK32)
    z = (((codes >> 32) + (offset >> 32) + (lo >> 32)) & MASK32, lo & MASK32)
    z = _mul64(_xor_shift64(z, 30), 0xBF58476D1CE4E5B9)
    z = _mul64(_xor_shift64(z, 27), 0x94D049BB133111EB)
    hi, lo = _xor_shift64(z, 31)
    top53 = (hi << 21) | (lo >> 11)
    return top53.double() * 2.0**-53 < eval_fraction


def encode_rows(rows: torch.Tensor, base: int) -> torch.Tensor:
    """``base.encode_rows`` on tensors: each row of the last axis as one int64 of base-``base`` digits, by Horner's
    scheme as there (tensor operations with Python numbers only: no host-to-device copy, so a CUDA graph holds it)."""
    code = torch.zeros_like(rows[..., 0])
    for j in range(rows.shape[-1]):
        code = code.mul_(base).add_(rows[..., j])
    return code
