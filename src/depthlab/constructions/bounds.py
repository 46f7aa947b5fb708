"""The theory column of the depth atlas: what the seeds prove about the depth (and width) a task needs, per model.

For a task config and a model config, :func:`theory` lists every bound a seed states that speaks of that model:

- **upper** — a construction: a model of that depth exists that solves the task. Where depthlab builds it, the
  numbers (layers, heads, width) and its check (accuracy on the dataset, exhaustive where it is small; or a
  certificate of exactness on every input) are those of ``depthlab construct NAME --json`` with the task's sizes
  as parameters, obtained through the registry (:mod:`depthlab.constructions.registry`), not restated here.
- **lower** — an impossibility: no model of fewer layers is exact on the task (seed 001 Theorems 2 and 4, with the
  registry's certificate of the one-layer linear relation), or cannot hold the target at all (seed 002 Theorem 1,
  with the information-flow simulation of its assumptions).
- **width** — a lower bound on a size, not on depth: the hidden state of any recurrent model (seed 003 Theorems 3,
  8, 11, Proposition 9: m·p ≥ N, N/2 …) or the width of a one-layer transformer (Theorem 5, Dyck). Its ``value``
  is the bound at p = 32 bits (float32): it is below 1, hence vacuous, at every length under p.

A bound records which models it speaks of: seed 001 of §3.1's attention-only transformer with ReLU attention (its
impossibilities also of softmax attention with a single head, §16), seed 002 of any transformer under its two
assumptions of information flow, seed 003's constructions of softmax transformers with MLPs (``transformer``), its
recurrent bounds of ``lstm``, ``mamba``, ``dss``, ``retnet`` and ``linear_transformer`` (causal linear attention:
"these lower bounds also apply to causal forms of linear attention", §3). Tasks no seed bounds — induction (seed
004 is an essay with no theorem), conditional retrieval, a plugin's — have none, and the atlas says so.

Every number is one the seed states or the registry computes; where a seed states a depth without a construction
depthlab builds (seed 003's two-layer Dyck, cited from [65]; MQAR as a corollary of Theorem 7) the bound has no
``construction`` and says it is the seed's statement. ``seed_states=False`` marks depthlab's own tighter
construction (nested IC-QA in hops + 1 layers): an upper bound all the same, since it is checked exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import UserError

PRECISION_BITS = 32  # p of seed 003's bounds for depthlab's float32 training
RECURRENT = ("lstm", "mamba", "dss", "retnet", "linear_transformer")
Run = Callable[[str, dict[str, Any]], dict[str, Any]]  # registry.run(name, parameters) or a cache in front of it


@dataclass(frozen=True)
class Bound:
    kind: str  # "upper", "lower" or "width"
    theorem: str
    source: str  # the seed and its sections
    statement: str  # the bound in words
    layers: int | None = None  # the depth it fixes (upper: suffices; lower: fewer never exact)
    width: int | None = None  # upper: the construction's width (d' or m)
    heads: list[int] | None = None  # upper: the construction's heads per layer
    value: float | None = None  # width bounds: the bound at p = 32 bits
    construction: str | None = None  # the registry entry the numbers come from
    parameters: dict[str, Any] | None = None  # its parameters
    check: dict[str, Any] | None = None  # what the registry's run found
    seed_states: bool = True  # False: depthlab's own construction, not the seed's

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def _built(run: Run, kind: str, name: str, params: dict[str, Any], statement: str, **extra: Any) -> Bound:
    """A bound whose numbers come from the registry's ``name`` run with ``params``; a construction the registry
    cannot complete at these parameters keeps the theorem's depth and says why in its check."""
    from .registry import CONSTRUCTIONS

    entry = CONSTRUCTIONS[name]
    try:
        result = run(name, params)
    except UserError as e:
        return Bound(kind, entry.theorem, entry.source, statement, construction=name, parameters=params,
                     check={"error": str(e)}, **extra)
    check = {k: result[k] for k in ("accuracy", "examples", "exhaustive", "min_margin", "certified_all_inputs",
                                    "accuracy_bound", "max_accuracy_seen", "models_tried") if k in result}
    numbers = {"layers": result.get("layers"), "width": result.get("width"), "heads": result.get("heads")}
    numbers = {k: v for k, v in numbers.items() if v is not None}
    return Bound(kind, entry.theorem, entry.source, statement, construction=name, parameters=params,
                 check=check, **{**extra, **numbers})


def _seed001(task: dict[str, Any], model: dict[str, Any], run: Run) -> list[Bound]:
    """Seed 001 §5 and §7 on §3.1's attention-only transformer."""
    relu = model.get("attention", "relu") == "relu"
    heads = model.get("heads", 1)
    single = heads == 1 or (isinstance(heads, list) and set(heads) == {1})
    lower_applies = relu or single  # Theorems 2 and 4 for ReLU, any heads; softmax with one head (§16)
    name, out = task["name"], []
    one_layer = "no one-layer attention-only transformer, with any number of heads, is right on every example"
    if name == "memorization" and relu:
        out.append(_built(run, "upper", "seed001-memorization",
                          {"N": task["n_examples"], "n_words": task["n_words"], "length": task["length"],
                           "data_seed": task["data_seed"]}, "one layer with n heads memorises every sequence"))
    if name == "icqa":
        if relu:
            out.append(_built(run, "upper", "seed001-icqa", {"k": task["k"], "n_q": task["n_q"], "n_a": task["n_a"]},
                              "two layers of one head (copy-matching) answer every question"))
        if lower_applies and task["k"] >= 2:
            out.append(_built(run, "lower", "seed001-one-layer-bound",
                              {"task": "icqa", "k": task["k"], "n_q": task["n_q"], "n_a": task["n_a"]}, one_layer,
                              layers=2))
    default_templates = not any(task.get(k) for k in ("templates", "n_wildcards", "n_classes"))
    if name == "template" and default_templates:
        if relu:
            out.append(_built(run, "upper", "seed001-template", {"l": task["l"], "n_symbols": task["n_symbols"]},
                              "two layers of one head (parse-mapping) classify every sequence"))
        if lower_applies:
            out.append(_built(run, "lower", "seed001-one-layer-bound",
                              {"task": "template", "l": task["l"], "n_symbols": task["n_symbols"]}, one_layer,
                              layers=2))
    if name == "ictm" and default_templates:
        if relu:
            out.append(_built(run, "upper", "seed001-ictm", {"k": task["k"], "l": task["l"],
                                                             "n_symbols": task["n_symbols"], "n_a": task["n_a"]},
                              "three layers, heads [1, 1, 2l] (parse-copy-match), answer every question"))
        if lower_applies:  # stated in §5.4: IC-TM degenerates to IC-QA, so Theorem 2 carries over
            out.append(Bound("lower", "Theorem 2 via §5.4", "seed 001 §5.4", one_layer + " (IC-TM degenerates to "
                             "IC-QA); §5.4 conjectures 3 layers are needed, without proof", layers=2))
    if name == "nested_icqa" and relu:
        params = {"k": task["k"], "hops": task["hops"], "n_symbols": task["n_symbols"], "shuffle": task["shuffle"]}
        out.append(_built(run, "upper", "seed001-nested-icqa", {**params, "depth": "paper"},
                          "copy-matching once per hop: 2·hops layers of one head (§7)"))
        out.append(_built(run, "upper", "seed001-nested-icqa", {**params, "depth": "compact"},
                          "depthlab's compact construction: hops + 1 layers, checked as exactly", seed_states=False))
    return out


def _seed002(task: dict[str, Any], run: Run) -> list[Bound]:
    """Seed 002 §5, Theorem 1, on any transformer obeying its two assumptions of information flow; the check is the
    registry's simulation of those assumptions (the last position itself needs ⌈log3(4D + 1)⌉ there)."""
    from .registry import CONSTRUCTIONS

    if task["name"] != "retrieval":
        return []
    entry, params = CONSTRUCTIONS["seed002-information-flow"], {"D": task["D"], "N": task["N"]}
    row = run(entry.name, params)["rows"][0]
    return [Bound("lower", entry.theorem, entry.source, "the last position cannot hold x_D after fewer than "
                  "⌈log3(2D)⌉ layers", layers=row["closed_form"], construction=entry.name, parameters=params,
                  check={"closed_form": row["closed_form"], "simulated_layers_last": row["layers_last"],
                         "simulated_layers_any": row["layers_any"]})]


def _state(theorem: str, where: str, formula: str, value: float) -> Bound:
    return Bound("width", theorem, f"seed 003 {where}", f"hidden state of any recurrent model: {formula}",
                 value=round(value, 4))


def _seed003(task: dict[str, Any], family: str, run: Run) -> list[Bound]:
    """Seed 003 §3-§5: log-width softmax constructions, one-layer and recurrent size bounds."""
    name, p, out = task["name"], PRECISION_BITS, []
    if family == "transformer":
        if name == "index_lookup":
            out.append(_built(run, "upper", "seed003-index-lookup", {"N": task["N"], "n_symbols": task["alphabet"]},
                              "one softmax layer of width O(log N) looks up every index"))
        if name == "eq_random":
            out.append(_built(run, "upper", "seed003-equality", {"N": task["N"]},
                              "two softmax layers of width O(log N) decide equality of the two halves"))
        if name in ("eq_random", "eq_one"):
            out.append(Bound("width", "Theorem 12 (seed 003)", "seed 003 §4.2, Appendix F.1", "a one-layer "
                             "transformer needs m·p·H = Ω(N) (no constant stated, so no number here)", layers=1))
        if name == "eq_one":
            out.append(Bound("upper", "Theorem 6 (seed 003)", "seed 003 §5.1, Appendix F.2", "two layers decide "
                             "equality over any finite alphabet (depthlab builds the binary case only)", layers=2))
        if name == "nearest_neighbor":
            out.append(_built(run, "upper", "seed003-nearest-neighbor",
                              {"N": task["N"], "d": task["d"], "gamma": task["gamma"]},
                              "two softmax layers with a clamp MLP label every query by its nearest neighbour"))
        if name == "mqar":
            out.append(Bound("upper", "Theorem 7 (seed 003), corollary", "seed 003 §5.2, Appendix G.2", "two layers "
                             "of width O(log N) perform associative recall such as MQAR (no depthlab construction)",
                             layers=2))
        if name == "dyck":
            n = task["N"]
            out.append(Bound("upper", "cited [65]", "seed 003 §4.1", "two-layer transformers recognise "
                             "bounded-depth Dyck (a cited result; no depthlab construction)", layers=2))
            out.append(Bound("width", "Theorem 5 (seed 003)", "seed 003 §4.1, Appendix E", "a one-layer "
                             "transformer needs m·H ≥ (N − 1) / (3(p + log N))", layers=1,
                             value=round((n - 1) / (3 * (p + math.log2(n))), 4)))
    if family in RECURRENT:
        if name == "index_lookup":
            out.append(_state("Theorem 3", "§3, Appendix C.1", "m ≥ N/p", task["N"] / p))
        if name in ("eq_random", "eq_one"):
            out.append(_state("Theorem 11", "§4.2, Appendix F.1", "m·p ≥ N/2", task["N"] / 2 / p))
        if name == "nearest_neighbor":
            out.append(_state("Theorem 8", "§5.2, Appendix G.1", "m ≥ N/(2p)", task["N"] / 2 / p))
        if name == "mqar" and task.get("queries") in (None, task["pairs"]):
            # App. G.1: Theorem 8's proof holds for MQAR itself, whose N inputs are the N/2 keys and their N/2
            # queries (a permutation of them: depthlab's queries = pairs)
            n = 2 * task["pairs"]
            out.append(_state("Theorem 8 (for MQAR, Appendix G.1)", "§5.2, Appendix G.1", "m ≥ N/(2p)", n / 2 / p))
    return out


def theory(task: dict[str, Any], model: dict[str, Any], run: Run | None = None) -> list[Bound]:
    """Every bound a seed states for ``task`` (a task config: name and fields) on ``model`` (a model config), the
    constructions and certificates computed by ``run`` (default: the registry's; the atlas puts a cache in front)."""
    if run is None:
        from .registry import run as registry_run

        run = registry_run
    family = model["name"]
    out: list[Bound] = []
    if family == "attention_only":
        out += _seed001(task, model, run)
    if family in ("attention_only", "transformer"):
        out += _seed002(task, run)
    out += _seed003(task, family, run)
    return out
