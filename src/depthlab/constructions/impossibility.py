"""Seed 001's impossibility results made checkable: dependent sequences and the one-layer linear relation.

§11, Definition 3: sequences X^(0), …, X^(N-1) are *dependent* when they end with the same token and integer
coefficients λ_i (not all zero) balance them position by position: at every position j and for every token
v, Σ_i λ_i [X^(i)_j = v] = 0. Proposition 8: for any single-layer attention-only transformer with ReLU
attention and any number of heads, the outputs then satisfy Σ_i λ_i o^(i) = 0, because the last position's
output is x_{n-1} + Σ_j Attn(x_j, x_{n-1}), a sum of per-position terms (the positional one-hots are
concatenated, so position j contributes the same term wherever the same token sits there).
Proposition 10 (§16): with a single softmax head the relation holds with λ'_i = λ_i Z_i, where
Z_i = Σ_j exp(score(x^(i)_j, x_{n-1})) is the softmax normaliser of sequence i; Z_i > 0 keeps every sign.

From the relation to an accuracy bound:
- in-context QA (§13.1): the four sequences  a=x b=y a= (x),  a=y b=x b= (x),  a=y b=x a= (y),  a=x b=y b= (y)
  with λ = (1, 1, -1, -1). o0 - o2 = o3 - o1 and "all four right" give the cycle of strict inequalities
  of eq. (16); so at least one is wrong: accuracy ≤ 3/4 on the set.
- template matching (§14.1): all sequences of two templates t, t' over the whole alphabet, weighted
  λ = n_t' / g and λ' = -n_t / g (g = gcd; Lemma 5: each token occurs n_t/|X| times at each position). The
  relation Σ_{D_t} λ o = Σ_{D_t'} λ' o (positive weights, also after the softmax rescaling) contradicts
  "every sequence of t scores label y and every sequence of t' label y' ≠ y", so at least one of the
  n_t + n_t' sequences is wrong: accuracy ≤ 1 - 1/(n_t + n_t') on the set.

``certify`` measures the relation on any single-layer model given to it (float64), and ``random_models``
draws the models the CLI tries: ReLU attention with 1 to 8 heads and a single softmax head, at several
attention scales.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..tasks import Batch, Task

SET_TASKS = ("icqa", "template")


@dataclass
class DependentSet:
    """Dependent sequences of a task with their coefficients, and the accuracy bound they imply."""

    task: Task
    batch: Batch  # the sequences (inputs [N, n]) and their targets
    coefficients: np.ndarray  # λ_i, integers, [N]
    accuracy_bound: float
    argument: str

    def decoded(self) -> list[str]:
        return [self.task.decode(self.batch, i) for i in range(len(self.batch))]


def is_dependent(inputs: np.ndarray, coefficients: np.ndarray) -> bool:
    """Definition 3: same last token, and Σ_i λ_i [X^(i)_j = v] = 0 for every position j and token v."""
    inputs = np.asarray(inputs)
    lam = np.asarray(coefficients, dtype=np.int64)
    if inputs.ndim != 2 or len(lam) != inputs.shape[0] or not lam.any():
        return False
    if np.any(inputs[:, -1] != inputs[0, -1]):
        return False
    vocab = int(inputs.max()) + 1
    counts = np.zeros((inputs.shape[1], vocab), dtype=np.int64)
    for j in range(inputs.shape[1]):
        np.add.at(counts[j], inputs[:, j], lam)
    return not counts.any()


def icqa_dependent_set(task: Task) -> DependentSet:
    """§13.1's four sequences, in ``task``'s token ids (questions a, b = 0, 1; answers x, y = the first two).

    For k > 2 the other k - 2 pairs are the same in all four (questions and answers 2, 3, …), which keeps
    the set dependent.
    """
    if task.k < 2:
        raise ValueError("task.k: the §13.1 set needs k ≥ 2 pairs (with k = 1 one layer can copy the only answer)")
    k = task.k
    a, b = 0, 1
    x, y = 0, 1
    rest = np.arange(2, k)
    rows = []
    for (first, second), query, answer in [((x, y), a, x), ((y, x), b, x), ((y, x), a, y), ((x, y), b, y)]:
        questions = np.concatenate([[a, b], rest])
        answers = np.concatenate([[first, second], rest])
        c = {a: 0, b: 1}[query]
        assert answers[c] == answer
        rows.append((questions, answers, c))
    questions = np.stack([r[0] for r in rows])
    answers = np.stack([r[1] for r in rows])
    c = np.array([r[2] for r in rows])
    batch = task._build(questions, answers, c)
    argument = ("o0 + o1 = o2 + o3 (Proposition 8); targets x, x, y, y; all four right would give the cycle of "
                "strict inequalities of eq. (16), so at least one of the four is wrong")
    return DependentSet(task, batch, np.array([1, 1, -1, -1]), 0.75, argument)


def template_dependent_set(task: Task, templates: tuple[int, int] = (0, 1)) -> DependentSet:
    """§14.1's set: every sequence of two templates (indices into ``task.template_rows``), λ = n_t'/g, -n_t/g."""
    rows = task.template_rows
    t0, t1 = templates
    if not (0 <= t0 < len(rows) and 0 <= t1 < len(rows)) or t0 == t1:
        raise ValueError(f"templates: need two different template indices below {len(rows)}, got {templates}")
    if task.template_labels[t0] == task.template_labels[t1]:
        raise ValueError("templates: the two templates share a label, so their dependence bounds nothing")
    seqs, tmpl = task.space.enumerate("all")
    keep = (tmpl == t0) | (tmpl == t1)
    batch = task._build(seqs[keep], tmpl[keep])
    n0, n1 = int((tmpl == t0).sum()), int((tmpl == t1).sum())
    g = math.gcd(n0, n1)
    lam = np.where(batch.meta["template"] == t0, n1 // g, -(n0 // g)).astype(np.int64)
    names = task.template_strings
    argument = (f"{n1 // g}·Σ o over the {n0} sequences of {names[t0]} = {n0 // g}·Σ o over the {n1} sequences of "
                f"{names[t1]} (Lemma 7); if every sequence of each template got its label, the left side would "
                f"favour label {task.template_labels[t0]} and the right label {task.template_labels[t1]}, so at least "
                f"one of the {n0 + n1} sequences is wrong")
    return DependentSet(task, batch, lam, 1.0 - 1.0 / (n0 + n1), argument)


def dependent_set(task: Task) -> DependentSet:
    """The dependent set the seed uses for ``task`` (icqa: §13.1; template: §14.1 with its first two templates)."""
    if task.name == "icqa":
        dep = icqa_dependent_set(task)
    elif task.name == "template":
        dep = template_dependent_set(task)
    else:
        raise ValueError(f"task: dependent sets are built for {', '.join(SET_TASKS)}, not {task.name!r}")
    assert is_dependent(dep.batch.inputs, dep.coefficients)
    return dep


def _softmax_normalisers(model, inputs: torch.Tensor) -> torch.Tensor:
    """log Z_i = log Σ_j exp(score(x_j, x_{n-1})) of the single softmax head, per run and sequence [R, N]."""
    h = model.residual_stream(inputs)  # [R, N, n, d']
    w = model.param("blocks.0.attn.W_QK")[:, 0]  # [R, d', d']
    scores = torch.einsum("rnd,rde,rnje->rnj", h[:, :, -1], w, h)
    return torch.logsumexp(scores, dim=-1)


@torch.no_grad()
def certify(model, dep: DependentSet) -> dict[str, float]:
    """The relation Σ_i λ_i o^(i) = 0 (ReLU) or Σ_i λ_i Z_i o^(i) = 0 (one softmax head) on ``model``'s runs.

    Returns the largest relative deviation over runs, |Σ_i λ'_i o^(i)|_∞ / max_i |λ'_i o^(i)|_∞ (so 1e-16
    means exact to float64 rounding whatever the scale of the weights), and the best accuracy on the set.
    """
    if model.layers != 1:
        raise ValueError(f"model: the relation is proved for single-layer models; this one has {model.layers}")
    heads = model.spec.heads_per_layer[0]
    if model.spec.attention == "softmax" and heads != 1:
        raise ValueError("model: the softmax relation (Proposition 10) is proved for a single head only")
    model = model.double()
    inputs = torch.as_tensor(dep.batch.inputs)[None].expand(model.n_runs, -1, -1)
    outputs = model(inputs).outputs  # [R, N, C]
    lam = torch.as_tensor(dep.coefficients, dtype=torch.float64)[None].expand(model.n_runs, -1)
    if model.spec.attention == "softmax":
        log_z = _softmax_normalisers(model, inputs)
        lam = lam * torch.exp(log_z - log_z.max(dim=1, keepdim=True).values)
    terms = lam[:, :, None] * outputs
    residual = terms.sum(1).abs().amax(-1)
    scale = terms.abs().amax((1, 2)).clamp_min(torch.finfo(torch.float64).tiny)
    accuracy = (outputs.argmax(-1) == torch.as_tensor(dep.batch.targets)).double().mean(1)
    return {"max_deviation": float((residual / scale).max()), "max_accuracy": float(accuracy.max())}


def random_models(task: Task, per_kind: int = 4, seed: int = 0, max_heads: int = 8):
    """Single-layer models to try: (label, model) for ReLU with 1..max_heads heads and one softmax head.

    Each kind is one model object holding ``per_kind`` runs: normal weights (std 1/√d') with W_QK scaled by
    1, 4, 16, … so that attention ranges from nearly uniform to sharp, plus the paper's initialisation for
    ReLU. All float64.
    """
    from ..models import TaskShapes, build_model
    from ..models.attention_only import AttentionOnlySpec

    shapes = TaskShapes(len(task.vocab), task.seq_len, len(task.labels))
    kinds = [("relu", h) for h in range(1, max_heads + 1)] + [("softmax", 1)]
    out = []
    for index, (attention, heads) in enumerate(kinds):
        spec = AttentionOnlySpec(layers=1, heads=heads, attention=attention, init="random")
        gens = [torch.Generator().manual_seed(seed * 1000 + index * 100 + r) for r in range(per_kind)]
        model = build_model(spec, shapes, gens).double()
        with torch.no_grad():
            scale = torch.tensor([4.0**r for r in range(per_kind)], dtype=torch.float64)
            model.param("blocks.0.attn.W_QK").mul_(scale[:, None, None, None])
        out.append((f"{attention}, {heads} head{'s' if heads > 1 else ''}", model))
        if attention == "relu":
            paper = AttentionOnlySpec(layers=1, heads=heads, attention="relu", init="paper")
            out.append((f"relu, {heads} heads, paper init", build_model(paper, shapes, gens).double()))
    return out


def certify_many(dep: DependentSet, per_kind: int = 4, seed: int = 0) -> dict:
    """``certify`` over ``random_models``: models tried, the largest deviation, the best accuracy seen."""
    tried, worst, best = 0, 0.0, 0.0
    kinds = []
    for label, model in random_models(dep.task, per_kind, seed):
        result = certify(model, dep)
        tried += model.n_runs
        worst = max(worst, result["max_deviation"])
        best = max(best, result["max_accuracy"])
        kinds.append({"model": label, "runs": model.n_runs, **result})
    return {"models_tried": tried, "max_deviation": worst, "max_accuracy_seen": best, "by_kind": kinds}
