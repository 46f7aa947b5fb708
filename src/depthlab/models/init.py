"""Initialisations of seed 001's attention-only model, chosen by ``model.init``, and the constructed first layers.

Seed 001 §9.1: "the weights W_QK are initialized uniformly in [0, 1) [...] and W_V with a value of 1 [...].
For other tasks, we initialize W_QK in the first layer of the transformer with constructed pattern for
different tasks, as illustrated in 13.2, 14.2, and 15."

- ``paper``: W_QK uniform in [0, ``qk_scale``) (the paper: [0, 1)); W_V "initialised with a value of 1", read as
  the identity (a matrix of ones would copy every coordinate into every other); W_U uniform in [0, 1); then the
  task's constructed first layer (:func:`paper_first_layer`).
- ``paper-first``: the constructed first layer (on W_QK uniform in [0, qk_scale)), every other weight random as
  below. With §9.1's W_V = I and W_U uniform [0, 1) after the constructed layer, 3-layer models stay at chance
  on IC-TM (measured); with random weights after it they learn it.
- ``random``: W_QK, W_V and W_U normal with standard deviation 1/√d'.
- ``random-stream`` and ``paper-first-stream``: the same draws, then each randomly drawn layer's W_QK rescaled so
  that it adds at most 10/√L of the residual stream at initialisation (:func:`bound_stream`); for runs of 4 or
  more layers, where §3.1's un-normalised ReLU stream otherwise grows cubically per layer at initialisation.

Coordinates (``models.attention_only``): token one-hot in [0, d), position one-hot in [d, d + n), then free
dimensions. Weights use the model's row convention: score(query q, key k) = x_q W_QK x_kᵀ and value = x W_V,
so the paper's α[i, j] (key i, query j; Lemma 1) lands at W_QK[d + j, d + i]. §10's two lemmas, used by every
construction here and in ``depthlab.constructions``:
- instructive attention (Lemma 1): any position-only pattern α is obtained with W_pp = α;
- constrained attention (Lemma 2): a large negative W_pp entry masks a pair of positions.

The construction is found by the task's name (``TaskShapes.task``): the seed defines one per task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .components import shapes_only

MASK = -1.0e4  # "a sufficiently large negative value" (Lemma 2)
STREAM = "-stream"  # the suffix of the initialisations that bound the residual stream (``bound_stream``)
# r in bound_stream: each random layer adds at most r/√L of a probe row's norm. Measured on IC-TM (k = 2, l = 3,
# 16 symbols; seed001-heads' quick recipe, 4,000 steps, seed 0), 4 single-head layers: r = 10 passes 0.95 at step
# 2,000 (0.997 at the end), r = 3 at 3,750 (0.987), r = 1 stays at chance (0.501), as do the worst-case bound this
# replaced (0.502; at 3 layers 0.500, where paper-first reaches 0.974) and paper-first itself.
STREAM_RATIO = 10.0


def drawn_as(init: str) -> str:
    """The initialisation whose draws ``init`` takes: ``random-stream`` draws as ``random`` and
    ``paper-first-stream`` as ``paper-first``, before :func:`bound_stream` rescales them."""
    return init.removesuffix(STREAM)


# --------------------------------------------------------------------------------- the three initialisations


def attention_only_weight(kind: str, init: str, shape: list[int], generators: list[torch.Generator],
                          width: int, qk_scale: float, first_layer: bool = False) -> torch.nn.Parameter:
    """One stacked weight of the attention-only model: ``kind`` is ``qk``, ``v`` or ``u`` (W_QK, W_V, W_U);
    ``first_layer`` marks layer 0's W_QK, which ``paper-first`` draws as the paper does."""
    out = torch.empty([len(generators), *shape])
    if shapes_only():
        return torch.nn.Parameter(out)
    init = drawn_as(init)
    paper = init == "paper" or (init == "paper-first" and kind == "qk" and first_layer)
    # qk_scale shrinks random W_QK under `random` only (paper-first's later layers stay as they were measured)
    random_scale = qk_scale if (kind, init) == ("qk", "random") else 1.0
    for r, gen in enumerate(generators):
        if not paper:
            out[r] = torch.randn(shape, generator=gen) / width**0.5 * random_scale  # the order kept: same bits
        elif kind == "qk":
            out[r] = torch.rand(shape, generator=gen) * qk_scale
        elif kind == "v":
            out[r] = torch.eye(shape[-1]).expand(shape)
        else:
            out[r] = torch.rand(shape, generator=gen)
    return torch.nn.Parameter(out)


# ------------------------------------------------------------------------- a residual stream bounded at init


def stream_probe(d: int, n: int) -> torch.Tensor:
    """The inputs :func:`bound_stream` measures the stream on: 64 uniformly random token sequences (a fixed seed)
    and each constant sequence (where the constructions that match tokens add the most). [64 + d, n]."""
    return torch.cat([torch.randint(0, d, (64, n), generator=torch.Generator().manual_seed(0)),
                      torch.arange(d)[:, None].expand(-1, n)])


def bound_stream(model: Any, first_random: int, ratio: float = STREAM_RATIO) -> None:
    """Rescale the W_QK of every layer from ``first_random`` on so that, on :func:`stream_probe`'s inputs, the
    largest update a layer adds to a row of the residual stream is ``ratio``/√L of that row's norm (L layers).

    Why: §3.1's eq. 2 has no normalisation. For a query row h_q one head adds Σ_k σ(h_q W_QK h_kᵀ) h_k W_V, which
    is cubic in the stream, so at N(0, 1/d') a 4-layer IC-TM model's logits reach 10⁸ at initialisation (5 layers
    10²⁶; 6 overflow float32). σ is positively homogeneous, so multiplying a head's W_QK by c > 0 multiplies its
    update by c and keeps every score's sign: the factor is set layer by layer, on the stream the rescaled layers
    below give. A probe row then grows by at most (1 + r/√L) per layer; on IC-TM's own sequences the largest row
    grows 1.4-3.2× over the random layers and the logits stay below 1.1 at 2-8 layers (docs/results/seed001.md). A
    worst-case bound for every input (n ‖W_QK‖ ‖W_V‖ R² = 1/L, which this replaced) left the random layers adding
    ~10⁻⁴ of the stream on real data, and models trained from it stayed at chance at 3 and 4 layers
    (:data:`STREAM_RATIO` gives the measurements behind r). Only W_QK changes: the draws are those of ``random`` or
    ``paper-first``.
    """
    layers = len(model.blocks)
    with torch.no_grad():
        h = model.residual_stream(stream_probe(model.d, model.n).expand(model.n_runs, -1, -1))
        for layer, block in enumerate(model.blocks):
            attn = block.attn
            update = attn.output(h, attn.pattern(h))
            if layer >= first_random:
                largest = (update.norm(dim=-1) / h.norm(dim=-1)).amax((1, 2))  # [R]: over probe rows and positions
                factor = (ratio / layers**0.5 / largest.clamp_min(1e-30)).view(-1, 1, 1, 1)
                attn.W_QK.mul_(factor)
                update = update * factor
            h = h + update


# ------------------------------------------------------------------------------------ §10's two lemmas


def instructive_attention(alpha: np.ndarray, d: int, width: int) -> torch.Tensor:
    """Lemma 1: W_QK whose pattern is the position-only ``alpha`` (key i, query j), whatever the tokens."""
    n = alpha.shape[0]
    w = torch.zeros(width, width)
    w[d : d + n, d : d + n] = torch.as_tensor(alpha, dtype=torch.float32).T
    return w


def constrained_attention(w_qk: torch.Tensor, allowed: np.ndarray, d: int) -> torch.Tensor:
    """Lemma 2: add MASK to every (key i, query j) position pair where ``allowed[i, j]`` is False."""
    n = allowed.shape[0]
    out = w_qk.clone()
    out[d : d + n, d : d + n] += torch.as_tensor(np.where(allowed, 0.0, MASK), dtype=torch.float32).T
    return out


def token_match(d: int, width: int) -> torch.Tensor:
    """W_QK = I on the token coordinates: a query attends to every position holding the same token."""
    w = torch.zeros(width, width)
    w[:d, :d] = torch.eye(d)
    return w


def block_diagonal(sizes: list[int], inner: Callable[[int], np.ndarray]) -> np.ndarray:
    """A block-diagonal n×n matrix with ``inner(size)`` on each diagonal block."""
    n = sum(sizes)
    out = np.zeros((n, n))
    start = 0
    for size in sizes:
        out[start : start + size, start : start + size] = inner(size)
        start += size
    return out


def _ones_off_diagonal(size: int) -> np.ndarray:
    return np.ones((size, size)) - np.eye(size)


# ------------------------------------------------------------------------------- constructed first layers


@dataclass
class FirstLayer:
    """A constructed first layer: how many free dimensions it needs, and how to set it on a model."""

    extra_width: int
    build: Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]  # (d, n, width) -> (W_QK, W_V)

    def apply(self, model: Any) -> None:
        """Add the construction to every head of layer 0's W_QK (in every run) and set its W_V.

        The construction is added to the random initial W_QK rather than replacing it: ReLU attention has no
        gradient where a score is exactly 0, so a pure construction could never leave its zero pattern.
        """
        w_qk, w_v = self.build(model.d, model.n, model.width)
        attn = model.blocks[0].attn
        with torch.no_grad():
            attn.W_QK.add_(w_qk)
            attn.W_V[:] = w_v


def copy_layer(k: int) -> FirstLayer:
    """§13.2 "copy among Q-A block": α(1) = blockdiag(A_3×3 × k, A_2×2), W_V = I."""
    sizes = [3] * k + [2]

    def build(d: int, n: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        return instructive_attention(block_diagonal(sizes, _ones_off_diagonal), d, width), torch.eye(width)

    return FirstLayer(0, build)


def parse_layer() -> FirstLayer:
    """§14.2 "check position with the same token": W_QK = I on tokens; values copy the positional one-hot.

    Row j of the positional block then holds p_j + Σ_{i: x_i = x_j} p_i, the template representation.
    The paper's W_V also subtracts the tokens; no linear map can cancel a token that repeats a varying number
    of times, so the tokens stay in the residual stream (the trained second layer may ignore them).
    """

    def build(d: int, n: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        w_v = torch.zeros(width, width)
        w_v[d : d + n, d : d + n] = torch.eye(n)
        return token_match(d, width), w_v

    return FirstLayer(0, build)


def block_parse_layer(k: int, l: int) -> FirstLayer:
    """§15 first layer: parse each question into its template, attention constrained to its own block.

    Blocks are (question, r, answer) of l + 2 positions, then the query block of l + 1. Values write a
    position's offset inside its block into l + 2 free coordinates, so equal templates in different blocks
    get equal representations (the paper's d' = d + n + l + 2).
    """
    sizes = [l + 2] * k + [l + 1]

    def build(d: int, n: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        allowed = block_diagonal(sizes, lambda s: np.ones((s, s))).astype(bool)
        w_qk = constrained_attention(token_match(d, width), allowed, d)
        w_v = torch.zeros(width, width)
        offsets = np.concatenate([np.arange(s) for s in sizes])
        w_v[d + np.arange(n), d + n + offsets] = 1.0
        return w_qk, w_v

    return FirstLayer(l + 2, build)


# §9.1's first layer per task (seed 001's in-context tasks), from the task's fields
FIRST_LAYERS: dict[str, Callable[[dict[str, Any]], FirstLayer]] = {
    "icqa": lambda p: copy_layer(p["k"]),
    "nested_icqa": lambda p: copy_layer(p["k"] * p["hops"]),
    "template": lambda p: parse_layer(),
    "ictm": lambda p: block_parse_layer(p["k"], p["l"]),
}


def paper_first_layer(task: str, task_params: dict[str, Any], init: str) -> FirstLayer | None:
    """The §9.1 constructed first layer for ``task`` under ``init`` (paper or paper-first), or None (random
    init, memorization and the tasks the seed constructs none for)."""
    if drawn_as(init) not in ("paper", "paper-first") or task not in FIRST_LAYERS:
        return None
    return FIRST_LAYERS[task](dict(task_params))


# --------------------------------------------------------------------------------------- hand-set weights


def blank_model(spec: Any, shapes: Any) -> Any:
    """One run of ``spec``'s family in float64 with every weight zero and every norm's gain one: the start of a
    construction whose weights are all set by hand (the seeds' theorems, ``depthlab.constructions``)."""
    from .base import build_model
    from .components import LayerNorm

    model = build_model(spec, shapes, [0]).double()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for module in model.modules():
            if isinstance(module, LayerNorm):
                module.w.fill_(1.0)
    return model
