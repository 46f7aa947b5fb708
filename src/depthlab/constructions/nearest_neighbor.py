"""Seed 003's Theorem 7 (§5.2, Appendix G.2): a two-layer transformer that runs the nearest-neighbour algorithm.

Theorem 7: "For any N ∈ ℕ, there exists a 2-layer Transformer f_NN ∈ TF²_{m,p,2} with width m = O(log N) and
precision p = O(log N) such that f_NN computes the nearest-neighbor task [on] all sequences of length at most N
satisfying the assumptions above" (unit vectors; a margin γ: x_kᵀx_{j*} ≥ x_kᵀx_i + γ for every i ≠ j*).
Appendix G.2: "the first layer can find the nearest neighbor x_{j*} and retrieve the position of the label
y_{j*}. The second layer can then attend over that position and produce the desired label."

Built on the project's GPT-style ``transformer`` (pre-LayerNorm, GELU MLP, learned positions, causal) with
hand-set float64 weights, reading the ``nearest_neighbor`` task's own inputs: an x token [x, 0, 0] at position
2i, a y token [0…0, 1{y=0}, 1{y=1}] at 2i + 1, read at every x_k with k ≥ N/2 (0-based), through W_E as a
[d + 2, d_model] projection. Every pair i = (x_i, y_i) has one address A(i) from ``nearly_orthogonal`` (the paper
gives x_i and y_i separate vectors T(2i−1), T(2i); one per pair needs N vectors instead of 2N, and the label
penalty below separates the two). Residual slots (each mirrored, [v, −v], so LayerNorm's mean is 0):
x (d), label code ±1, type (+1 at x, −1 at y), ballast Λ, address A(i) (k), retrieved (k), signs (k), output.

Layer 1 (the paper's Q(z_{2k−1}) = [x_k, 1, −10 T(2k−1)], K(z_{2i−1}) = [x_i, 3, T(2i−1)]): the query at x_k
scores x_i as η₁(⟨x_k, x_i⟩ − c₁⟨A(k), A(i)⟩) (the address term suppresses the query itself) and every label
η₁(−c₁⟨A(k), A(i)⟩ − c₂); values V·A_s(i) ("the value vector will be of the form … 2 T_s(2i)", signs ±1,
V = 4 here for slack). The address term moves the inputs' scores by at most c₁·spread (``address_spread``;
spread ≤ 2γ_A with γ_A = max_{i≠j} |⟨A(i), A(j)⟩|), so the nearest neighbour leads the other inputs by
τ = γ − c₁·spread and the query itself by c₁(1 − top) − 2 (⟨x_k, x_{j*}⟩ can be −1, so c₁ > 2; the two are
balanced by c₁ = (γ + 2)/(1 − top + spread)), and η₁ = ln(18N)/τ gives it weight ≥ 9/10 (the paper's
"η = 5/(4γ) log 18N", where τ = 4γ/5).
The MLP is the paper's clamp σ(a) = ReLU(a + 1) − ReLU(a − 1) − 1 with GELU: (GELU(s(a + 1)) − GELU(s(a − 1)))/s
− 1, which is within μ·Φ(−sμ), μ = |a| − 1, of sign(a) when sμ ≥ 1, so the signs slot holds A_s(j*) almost exactly.
Layer 2: query A_s(j*)/k (η₂-scaled), keys A(own pair) plus a bonus for label positions (c₃), value the label
code; the read-out is its sign.

A finding on "width O(log N)": τ > 0 with self-suppression needs γ_A ≲ γ/(γ + 4), and random ±1 vectors have
γ_A ≈ √(2 ln(N²)/k), so the certified k is O(log N / γ²): width O(log N) for a *fixed* margin γ (the paper's
γ ≥ N^{−c} makes it O(N^{2c} log N)), with a large constant (measured at γ = 0.9, N = 4 … 512: k ≈ 92·ln N − 89).
The vectors come from their own nested family of dimension up to ``NN_MAX_K``.

LayerNorm: at layer 0 every position has the same norm (x, address and type at x tokens; label, address and
type at y tokens; Λ everywhere), so the first LayerNorm is an exact, known scale σ₀, folded into the weights.
After layer 1 the retrieved and sign slots (mixtures at non-query positions) add at most E to the squared norm;
the ballast Λ (chosen so that E/Λ² ≈ 10⁻⁶) keeps each later scale within a factor √(1 + ρ), ρ = E/(W σ₀²), of σ₀,
and ``certify_nearest_neighbor`` carries that factor through every margin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..models import TaskShapes
from ..models.init import blank_model
from ..models.transformer import TransformerSpec
from .log_width import LN_EPS, log_fit, max_off_diagonal, nearly_orthogonal, smallest_width

NN_MAX_K = 1024  # its own nested family (sign_matrix(N, seed, NN_MAX_K)); index lookup and equality keep MAX_K
VALUE_SCALE = 4.0  # layer 1's values V·A_s (the paper's 2 T_s): a weight w on j* leaves |a| ≥ V(2w − 1)
SHARPNESS = 8.0  # s in GELU(s·u)/s ≈ ReLU(u)
LABEL_BONUS = 2.0  # c₃: layer 2's preference for label positions over x positions
BALLAST_RHO = 1e-6  # target for E/Λ², the relative change of LayerNorm's squared scale after layer 1
GELU_TAIL = 0.17  # max_z z·Φ(−z) ≈ 0.1700: |GELU(z) − ReLU(z)| ≤ 0.17, so |clamp| ≤ 1 + 0.17/s
GRID = 4097  # points on which the certificate evaluates the model's MLP
NORMS = ("blocks.0.ln1", "blocks.0.ln2", "blocks.1.ln1", "blocks.1.ln2", "ln_final")


def nn_slots(d: int, k: int) -> tuple[dict[str, np.ndarray], int]:
    """Residual coordinates of each slot (first half; the mirror is at + m) and m."""
    sizes = {"x": d, "label": 1, "type": 1, "ballast": 1, "address": k, "retrieved": k, "signs": k, "output": 1}
    slots, start = {}, 0
    for name, size in sizes.items():
        slots[name] = np.arange(start, start + size)
        start += size
    return slots, start


def address_spread(vectors: np.ndarray) -> tuple[float, float]:
    """Over the queries k ≥ N/2: the largest spread max_{i<k} ⟨A(k), A(i)⟩ − min_{i<k} ⟨A(k), A(i)⟩, and the
    largest max_{i<k} ⟨A(k), A(i)⟩. Layer 1's address term moves the inputs' scores by at most c₁·spread
    (τ = γ − c₁·spread) and leaves the query itself c₁(1 − top) − 2 below the nearest neighbour."""
    N = len(vectors)
    gram = vectors[N // 2 :] @ vectors.T  # [N/2, N]: row q is the query N/2 + q
    earlier = np.arange(N)[None, :] < np.arange(N // 2, N)[:, None]
    high = np.where(earlier, gram, -np.inf).max(1)
    low = np.where(earlier, gram, np.inf).min(1)
    return float((high - low).max()), float(high.max())


@dataclass
class NearestNeighborModel:
    """The built nearest-neighbour model and what it was built from."""

    model: torch.nn.Module
    N: int
    d: int
    k: int
    gamma: float
    eta: float  # η₁
    eta2: float
    c1: float
    c2: float
    tau: float  # the address part of layer 1's margin, γ − c₁·spread (``address_spread``)
    ballast: float
    coherence: float  # γ_A of the addresses
    vectors: np.ndarray  # A(0) … A(N − 1), [N, k]

    @property
    def width(self) -> int:
        return self.model.spec.width

    @property
    def slots(self) -> dict[str, np.ndarray]:
        return nn_slots(self.d, self.k)[0]

    def task(self):
        """The ``nearest_neighbor`` task this model reads."""
        from ..tasks.nearest_neighbor import NearestNeighbor

        return NearestNeighbor(N=self.N, d=self.d, gamma=self.gamma)


def nearest_neighbor_model(N: int, k: int, d: int = 8, gamma: float = 0.5, seed: int = 0) -> NearestNeighborModel:
    """Theorem 7 of seed 003 (Appendix G.2) as a two-layer ``transformer`` (float64) for NearestNeighbor(N, d, γ)."""
    if N < 2 or N % 2 or d < 1 or not 0 < gamma < 1:
        raise ValueError(f"need N even and at least 2, d ≥ 1 and 0 < γ < 1 (got N={N}, d={d}, γ={gamma})")
    vectors = nearly_orthogonal(N, k, seed, NN_MAX_K)
    coherence = max_off_diagonal(vectors)
    spread, top = address_spread(vectors)
    c1 = (gamma + 2.0) / (1.0 - top + spread)  # balances τ = γ − c₁·spread against c₁(1 − top) − 2
    tau = gamma - c1 * spread
    eta = math.log(18 * N) / max(tau, gamma / 100)  # the paper's η = log(18N)/τ (τ floored when k is too small)
    c2 = 2.0 * (c1 + 1.0)
    eta2 = math.log(18 * N) / max(1.0 - coherence, 0.1)
    slots, m = nn_slots(d, k)
    width, d_head = 2 * m, d + k + 1
    extra = k * (VALUE_SCALE**2 + (1.0 + GELU_TAIL / SHARPNESS) ** 2)  # retrieved + signs, squared, per half
    ballast = math.sqrt(extra / BALLAST_RHO)
    sigma0 = math.sqrt(2 * (3.0 + ballast**2) / width + LN_EPS)  # every position at layer 0: norm² 3 + Λ² per half
    spec = TransformerSpec(layers=2, heads=1, width=width, d_head=d_head, mlp=True, d_mlp=2 * k,
                           positional="learned", causal=True)
    model = blank_model(spec, TaskShapes(vocab_size=d + 2, seq_len=2 * N, n_classes=2))
    idx = {name: torch.as_tensor(v) for name, v in slots.items()}
    x, label, typ, bal = idx["x"], int(idx["label"][0]), int(idx["type"][0]), int(idx["ballast"][0])
    address, retrieved, signs, out = idx["address"], idx["retrieved"], idx["signs"], int(idx["output"][0])
    rows, root = torch.arange(k), math.sqrt(d_head)

    def mirror(w: torch.Tensor) -> torch.Tensor:
        """A write into the residual (last axis = the first half), with its mirror appended."""
        return torch.cat([w, -w], dim=-1)

    with torch.no_grad():
        w_e = torch.zeros(d + 2, m, dtype=torch.float64)
        w_e[torch.arange(d), x] = 1.0
        w_e[d, label], w_e[d + 1, label] = -1.0, 1.0
        w_e[d:, typ] = -1.0
        model.param("embed.W_E")[0] = mirror(w_e)
        w_pos = torch.zeros(2 * N, m, dtype=torch.float64)
        w_pos[:, address] = torch.as_tensor(np.repeat(vectors, 2, axis=0))  # x_i and y_i share A(i)
        w_pos[0::2, typ] = 1.0
        w_pos[:, bal] = ballast
        model.param("pos_embed.W_pos")[0] = mirror(w_pos)
        # layer 1: η₁(⟨x_k, x_i⟩ − c₁⟨A(k), A(i)⟩ + (c₂/2)·type), values V·A_s(i) into "retrieved"
        w_q, w_k = (torch.zeros(width, d_head, dtype=torch.float64) for _ in range(2))
        w_q[x, torch.arange(d)] = eta * sigma0 * root
        w_k[x, torch.arange(d)] = sigma0
        w_q[address, d + rows] = -c1 * eta * sigma0 * root
        w_k[address, d + rows] = sigma0
        w_k[typ, d + k] = sigma0
        b_q = torch.zeros(d_head, dtype=torch.float64)
        b_q[d + k] = eta * c2 / 2 * root
        w_v = torch.zeros(width, d_head, dtype=torch.float64)
        w_v[address, rows] = VALUE_SCALE * sigma0 * math.sqrt(k)
        w_o = torch.zeros(d_head, m, dtype=torch.float64)
        w_o[rows, retrieved] = 1.0
        for name, value in (("W_Q", w_q), ("W_K", w_k), ("W_V", w_v), ("W_O", mirror(w_o)), ("b_Q", b_q)):
            model.param(f"blocks.0.attn.{name}")[0, 0] = value
        # layer 1 MLP: the clamp (GELU(s(a + 1)) − GELU(s(a − 1)))/s − 1 into "signs"
        w_in = torch.zeros(width, 2 * k, dtype=torch.float64)
        w_in[retrieved, rows] = SHARPNESS * sigma0
        w_in[retrieved, k + rows] = SHARPNESS * sigma0
        b_in = torch.cat([torch.full((k,), SHARPNESS), torch.full((k,), -SHARPNESS)]).double()
        w_out = torch.zeros(2 * k, m, dtype=torch.float64)
        w_out[rows, signs], w_out[k + rows, signs] = 1.0 / SHARPNESS, -1.0 / SHARPNESS
        b_out = torch.zeros(m, dtype=torch.float64)
        b_out[signs] = -1.0
        model.param("blocks.0.mlp.W_in")[0] = w_in
        model.param("blocks.0.mlp.b_in")[0] = b_in
        model.param("blocks.0.mlp.W_out")[0] = mirror(w_out)
        model.param("blocks.0.mlp.b_out")[0] = mirror(b_out)
        # layer 2: η₂(⟨signs, A_s(i)⟩/k − (c₃/2)·type), value the label code into "output"
        w_q2, w_k2 = (torch.zeros(width, d_head, dtype=torch.float64) for _ in range(2))
        w_q2[signs, rows] = eta2 * sigma0 * root / k
        w_k2[address, rows] = sigma0 * math.sqrt(k)
        w_k2[typ, k] = -sigma0
        b_q2 = torch.zeros(d_head, dtype=torch.float64)
        b_q2[k] = eta2 * LABEL_BONUS / 2 * root
        w_v2 = torch.zeros(width, d_head, dtype=torch.float64)
        w_v2[label, 0] = sigma0
        w_o2 = torch.zeros(d_head, m, dtype=torch.float64)
        w_o2[0, out] = 1.0
        for name, value in (("W_Q", w_q2), ("W_K", w_k2), ("W_V", w_v2), ("W_O", mirror(w_o2)), ("b_Q", b_q2)):
            model.param(f"blocks.1.attn.{name}")[0, 0] = value
        w_u = torch.zeros(width, 2, dtype=torch.float64)
        w_u[out] = torch.tensor([-1.0, 1.0]) * sigma0  # logits ≈ ±(layer 2's output): the final scale is ≈ σ₀
        model.param("unembed.W_U")[0] = w_u
    return NearestNeighborModel(model, N, d, k, gamma, eta, eta2, c1, c2, tau, ballast, coherence, vectors)


def _structure(built: NearestNeighborModel) -> dict[str, bool]:
    """The zero pattern and mirroring that the certificate's decomposition relies on, read from the weights."""
    model, (slots, m) = built.model, nn_slots(built.d, built.k)
    P = lambda name: model.param(name)[0]  # noqa: E731
    both = lambda idx: np.concatenate([idx, idx + m])  # noqa: E731
    layer0 = both(np.concatenate([slots[s] for s in ("x", "label", "type", "ballast", "address")]))
    known = both(np.concatenate([slots[s] for s in ("label", "type", "ballast", "address")]))

    def zero_except(w: torch.Tensor, keep: np.ndarray, axis: int) -> bool:
        mask = torch.ones(w.shape[axis], dtype=torch.bool)
        mask[torch.as_tensor(keep, dtype=torch.long)] = False
        return bool((w.index_select(axis, torch.nonzero(mask)[:, 0]) == 0).all())

    def mirrored(w: torch.Tensor) -> bool:
        return bool(torch.equal(w[..., m:], -w[..., :m]))

    a0, a1 = "blocks.0.attn.", "blocks.1.attn."
    checks = {
        "layernorm_identity": all(bool((P(f"{n}.w") == 1).all() and (P(f"{n}.b") == 0).all()) for n in NORMS),
        "writes_mirrored": all(mirrored(P(n)) for n in ("embed.W_E", "pos_embed.W_pos", a0 + "W_O", a0 + "b_O",
                                                        "blocks.0.mlp.W_out", "blocks.0.mlp.b_out", a1 + "W_O",
                                                        a1 + "b_O", "blocks.1.mlp.b_out")),
        "embedding_in_layer0_slots": zero_except(P("embed.W_E"), layer0, 1) and zero_except(P("pos_embed.W_pos"),
                                                                                            layer0, 1),
        "layer1_reads_layer0": all(zero_except(P(a0 + f"W_{s}")[0], layer0, 0) for s in "QKV"),
        "layer1_values_not_x": zero_except(P(a0 + "W_V")[0], known, 0) and bool((P(a0 + "b_V") == 0).all()),
        "layer1_writes_retrieved": zero_except(P(a0 + "W_O")[0], both(slots["retrieved"]), 1)
        and bool((P(a0 + "b_O") == 0).all()),
        "mlp_reads_retrieved": zero_except(P("blocks.0.mlp.W_in"), both(slots["retrieved"]), 0),
        "mlp_writes_signs": zero_except(P("blocks.0.mlp.W_out"), both(slots["signs"]), 1)
        and zero_except(P("blocks.0.mlp.b_out"), both(slots["signs"]), 0),
        "layer2_query_reads_signs": zero_except(P(a1 + "W_Q")[0], both(slots["signs"]), 0),
        "layer2_keys_values_known": all(zero_except(P(a1 + f"W_{s}")[0], known, 0) and
                                        bool((P(a1 + f"b_{s}") == 0).all()) for s in "KV"),
        "layer2_writes_output": zero_except(P(a1 + "W_O")[0], both(slots["output"]), 1)
        and bool((P(a1 + "b_O") == 0).all()),
        "layer2_mlp_off": all(bool((P(f"blocks.1.mlp.{n}") == 0).all()) for n in ("W_in", "b_in", "W_out", "b_out")),
        "readout_reads_output": zero_except(P("unembed.W_U")[:, 1] - P("unembed.W_U")[:, 0], both(slots["output"]), 0)
        and bool((P("unembed.b_U") == 0).all()),
    }
    return checks


@torch.no_grad()
def certify_nearest_neighbor(built: NearestNeighborModel, chunk: int = 256) -> dict:
    """A sufficient condition for the model to be right on every input of N pairs with unit vectors and margin γ,
    computed from the model's own weights.

    1. Structure (``_structure``): the zero pattern and the mirroring (so LayerNorm's mean is 0 everywhere).
    2. Layer 0: every position's squared norm (x tokens for any unit x, y tokens for either label) is the same
       (checked: ``layer0_norm_spread``), so the first LayerNorm is the scale σ₀ and layer 1's score of key p at
       query 2k is a·⟨x_k, x_p⟩ + xᵀE x' + S(2k, p) ± (x-by-position cross terms), with a·I + E the x-by-x form
       (‖E‖₂ bounded) and S the position/label part. For every query k ≥ N/2 and every possible j* < k, the
       weight on x_{j*} is at least 1/(1 + R), R bounding Σ_{p≠j*} e^{score_p − score_j*} with ⟨x_k, x_i⟩ ≤
       ⟨x_k, x_{j*}⟩ − γ for the other inputs, ≤ 1 − ⟨x_k, x_{j*}⟩ ≤ 2 for the query itself and ≤ 1 for labels.
       ``min_weight1`` is the smallest such bound.
    3. The retrieved coordinate j at the query is w·v_{j*,j} ± (1 − w)·max_p |v_{p,j}|, so its sign is that of
       j*'s value when ``min_retrieved`` > 0; LayerNorm's scale before the MLP is within √(1 + ρ₁) of σ₀.
    4. The model's own MLP, evaluated on a fine grid of the feasible interval, gives the signs slot at the query
       as t_j·[s_lo, s_hi] (t = j*'s sign vector) and at most s_max elsewhere.
    5. Layer 2 (scale within √(1 + ρ₂)): for every target label 2j* + 1 and query k, the weight on the target is
       at least 1/(1 + R₂), with the scores bounded over the signs box and both scale ratios (the last query,
       which sees every key, is the worst). ``min_weight2`` is the smallest.
    6. The read-out is the sign of Σ_p w_p r_p δ_p (δ_p = the label's write on the logit difference, 0 at x
       positions); ``min_margin`` = w₂·r_lo·min |δ_target|/max |δ| − (1 − w₂) > 0 (with the right signs) makes
       every query right. The grid in step 4 is the only sampled step (the clamp is smooth; as in equality).

    Step 2 uses the address inner products of every (query, key) pair, not the coherence bound γ − 2c₁γ_A.
    Inputs are taken as exactly unit vectors; the task's float32 vectors are unit to about 1e-7, far inside
    the margins.
    """
    model, N, d, k, gamma = built.model, built.N, built.d, built.k, built.gamma
    slots, m = nn_slots(d, k)
    width = 2 * m
    P = lambda name: model.param(name)[0]  # noqa: E731
    structure = _structure(built)
    w_e, w_pos = P("embed.W_E"), P("pos_embed.W_pos")[: 2 * N]
    w_x = w_e[:d]
    # layer-0 parts: x positions (without x) and label positions for y = 0, 1
    e_x = w_pos[0::2]
    e_y = torch.stack([w_pos[1::2] + w_e[d + y] for y in (0, 1)])  # [2, N, W]
    gram = w_x @ w_x.T
    c = float(gram.diagonal().mean())
    norms = torch.cat([c + (e_x**2).sum(1), (e_y**2).sum(2).flatten()])
    spread = float((norms.max() - norms.min()) / norms.max() + (gram - c * torch.eye(d)).abs().max()
                   + (w_x @ e_x.T).abs().max() / c)
    sigma0 = math.sqrt(float(norms.mean()) / width + LN_EPS)
    # --- layer 1 attention -----------------------------------------------------------------------------
    w_q, w_k = P("blocks.0.attn.W_Q")[0], P("blocks.0.attn.W_K")[0]
    b_q, b_k = P("blocks.0.attn.b_Q")[0], P("blocks.0.attn.b_K")[0]
    root = math.sqrt(w_q.shape[1])
    a_q, a_k = w_x @ w_q / sigma0, w_x @ w_k / sigma0  # [d, d_head]
    form = a_q @ a_k.T / root
    a = float(form.diagonal().mean())
    e2 = float(torch.linalg.matrix_norm(form - a * torch.eye(d), ord=2))
    q_e = e_x / sigma0 @ w_q + b_q  # [N, d_head] at x positions
    k_x = e_x / sigma0 @ w_k + b_k
    k_y = e_y / sigma0 @ w_k + b_k  # [2, N, d_head]
    cross_kx = (a_q @ k_x.T).norm(dim=0) / root  # |x_q-part · key| ≤ this, per key
    cross_ky = ((a_q @ k_y.transpose(1, 2)).norm(dim=1) / root).amax(0)
    cross_q = (a_k @ q_e.T).norm(dim=0) / root  # |query · x_p-part| ≤ this, per query
    weight1 = 1.0
    for q in range(N // 2, N):
        s_x = q_e[q] @ k_x[: q + 1].T / root
        s_y = (q_e[q] @ k_y[:, :q].transpose(1, 2) / root).amax(0) + cross_ky[:q]
        upper = s_x[:q] + cross_kx[:q] + cross_q[q]
        lower = s_x[:q] - cross_kx[:q] - cross_q[q]
        top = upper.max()
        others = (torch.exp(upper - top).sum() - torch.exp(upper - top)).clamp_min(0.0)
        self_up = s_x[q] + cross_kx[q] + cross_q[q]
        ratio = (torch.exp(-a * gamma + 2 * e2 + top - lower) * others
                 + torch.exp(2 * a + 2 * e2 + self_up - lower)
                 + torch.exp(a + e2 + torch.logsumexp(s_y, 0) - lower))
        weight1 = min(weight1, float((1.0 / (1.0 + ratio)).min()))
    # --- layer 1 values, the MLP's input --------------------------------------------------------------------
    ret = torch.as_tensor(slots["retrieved"])
    write1 = lambda e: (e / sigma0 @ P("blocks.0.attn.W_V")[0]) @ P("blocks.0.attn.W_O")[0]  # noqa: E731
    v_x, v_y = write1(e_x), write1(e_y)  # [N, W], [2, N, W]
    v_max = torch.maximum(v_x.abs(), v_y.abs().amax(0)).amax(0)  # per residual coordinate
    target = v_x[: N - 1, ret]  # j*'s value, j* ≤ N − 2
    retrieved_min = float((weight1 * target.abs().amin(0) - (1.0 - weight1) * v_max[ret]).min())
    rho1 = float((v_max**2).sum()) / (width * sigma0**2)
    r1 = 1.0 / math.sqrt(1.0 + rho1)
    # --- the MLP on the model's own weights ---------------------------------------------------------------
    w_in, b_in = P("blocks.0.mlp.W_in"), P("blocks.0.mlp.b_in")
    gain = (w_in[ret] - w_in[ret + m]) / sigma0  # [k, units]: each unit reads one retrieved coordinate
    unit_gain = gain.sum(0)
    sgn = torch.as_tensor(slots["signs"])
    w_out_s, b_out_s = P("blocks.0.mlp.W_out")[:, sgn], P("blocks.0.mlp.b_out")[sgn]
    # each unit reads one retrieved coordinate and writes only that coordinate's sign
    one_each = bool(((gain != 0).sum(0) == 1).all() and not ((w_out_s.T != 0) & (gain == 0)).any())

    def clamp(u: torch.Tensor) -> torch.Tensor:
        """The signs slot written for retrieved value u (a grid), every coordinate: [len(u), k]."""
        return F.gelu(u[:, None] * unit_gain[None] + b_in[None]) @ w_out_s + b_out_s

    u_lo, u_hi = r1 * max(retrieved_min, 0.0), float(v_max[ret].max())
    grid = torch.linspace(u_lo, u_hi, GRID, dtype=torch.float64)
    at_target = torch.cat([clamp(grid), -clamp(-grid)])  # t·f(t·u) for t = ±1
    s_lo, s_hi = float(at_target.min()), float(at_target.max())
    s_max = clamp(torch.linspace(-u_hi, u_hi, GRID, dtype=torch.float64)).abs().amax(0)  # [k]
    rho2 = rho1 + 2 * float((s_max**2).sum()) / (width * sigma0**2)
    r2 = 1.0 / math.sqrt(1.0 + rho2)
    # --- layer 2 attention -------------------------------------------------------------------------------
    w_q2 = P("blocks.1.attn.W_Q")[0]
    query_form = (w_q2[sgn] - w_q2[sgn + m]) / sigma0  # [k, d_head]
    b_q2, w_k2 = P("blocks.1.attn.b_Q")[0], P("blocks.1.attn.W_K")[0]
    keys = torch.stack([e_x, e_y[0], e_y[1]]) / sigma0 @ w_k2  # [3, N, d_head]: x, y=0, y=1 of each pair
    beta = keys @ query_form.T / root  # [3, N, k]
    bias = keys @ b_q2 / root  # [3, N]
    signs_of = torch.sign(target)  # [N − 1, k]: t for each possible j*
    s_mid, s_rad = (s_lo + s_hi) / 2, (s_hi - s_lo) / 2
    weight2 = 1.0
    for start in range(0, N - 1, chunk):
        t = signs_of[start : start + chunk]
        mid = s_mid * torch.einsum("jc,vpc->jvp", t, beta)  # [J, 3, N]
        rad = s_rad * beta.abs().sum(-1)[None]
        corners = torch.stack([rq * rp * g + rp * bias[None] for rq in (r2, 1.0) for rp in (r2, 1.0)
                               for g in (mid - rad, mid + rad)])
        upper, lower = corners.amax(0), corners.amin(0)
        rows = torch.arange(len(t))
        targets = start + rows
        lower_t = lower[rows, 1:, targets].amin(1)  # the target label, either value
        upper_keys = torch.stack([upper[:, 0], upper[:, 1:].amax(1)], dim=2).flatten(1)  # [J, 2N] in order
        upper_keys = upper_keys[:, : 2 * N - 1]  # the last query (2N − 2) sees every key but y_{N−1}
        terms = torch.exp(upper_keys - lower_t[:, None])
        terms[rows, 2 * targets + 1] = 0.0
        weight2 = min(weight2, float((1.0 / (1.0 + terms.sum(1))).min()))
    # --- read-out ---------------------------------------------------------------------------------------
    w_u = P("unembed.W_U")
    direction = w_u[:, 1] - w_u[:, 0]
    write2 = lambda e: (e / sigma0 @ P("blocks.1.attn.W_V")[0]) @ P("blocks.1.attn.W_O")[0] @ direction  # noqa: E731
    delta_x, delta_y = write2(e_x), write2(e_y)  # [N], [2, N]
    right_sign = bool((delta_y[1] > 0).all() and (delta_y[0] < 0).all())
    delta_max = float(torch.maximum(delta_x.abs().max(), delta_y.abs().max()))
    margin = weight2 * r2 * float(delta_y.abs().min()) / delta_max - (1.0 - weight2)  # in units of max |δ|
    exact = (all(structure.values()) and one_each and spread < 1e-9 and a > 0 and retrieved_min > 0
             and s_lo > 0 and right_sign and margin > 0)
    return {"coherence": built.coherence, "tau": built.tau,
            "layer0_norm_spread": spread, "min_weight1": weight1, "min_retrieved": retrieved_min,
            "signs_range": [s_lo, s_hi], "rho1": rho1, "rho2": rho2, "min_weight2": weight2,
            "min_margin": margin if right_sign else -abs(margin), "structure_ok": all(structure.values()) and one_each,
            "exact": bool(exact)}


@torch.no_grad()
def run_nearest_neighbor(built: NearestNeighborModel, examples: int = 256, seed: int = 0,
                         batch: int = 64) -> dict[str, float]:
    """The forward pass on the ``nearest_neighbor`` task's own sampled sequences, read at every query."""
    task = built.task()
    data = task.sample(examples, np.random.default_rng(seed), "eval")
    read = torch.as_tensor(task.read_positions)
    correct, margin = 0, float("inf")
    for start in range(0, examples, batch):
        x = torch.as_tensor(data.inputs[start : start + batch])
        y = torch.as_tensor(data.targets[start : start + batch])
        logits = built.model(x[None], read=read).outputs[0]  # [B, N/2, 2]
        correct += int((logits.argmax(-1) == y).sum())
        gap = (logits[..., 1] - logits[..., 0]) * (2 * y - 1)
        margin = min(margin, float(gap.min()))
    queries = examples * len(task.read_positions)
    return {"examples": examples, "queries": queries, "accuracy": correct / queries, "min_logit_margin": margin}


def smallest_nearest_neighbor_width(N: int, d: int = 8, gamma: float = 0.9, seed: int = 0) -> dict:
    """The smallest k at which ``certify_nearest_neighbor`` proves the model right on every valid input."""
    found = smallest_width(N, lambda n, k: nearest_neighbor_model(n, k, d, gamma, seed),
                           lambda built: certify_nearest_neighbor(built)["exact"], NN_MAX_K)
    built = nearest_neighbor_model(N, found["k"], d, gamma, seed)
    return {**found, "width": built.width, "eta": built.eta, "gamma": gamma, **certify_nearest_neighbor(built)}


def nearest_neighbor_widths(ns: list[int], d: int = 8, gamma: float = 0.9, seed: int = 0) -> dict:
    """Smallest certified k and width against N at a fixed margin γ, with the fits k, width ≈ a·ln N + c."""
    rows = [smallest_nearest_neighbor_width(N, d, gamma, seed) for N in ns]
    return {"theorem": "Theorem 7 (seed 003)", "rows": rows,
            "fit_k": log_fit([r["N"] for r in rows], [r["k"] for r in rows]),
            "fit_width": log_fit([r["N"] for r in rows], [r["width"] for r in rows])}
