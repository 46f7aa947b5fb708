"""Every construction and check by name, with its parameters (named as in the papers) and its evaluation.

``CONSTRUCTIONS[name]`` holds the theorem, where it comes from, the parameters with their defaults, and a
function from parameters to a JSON-able result. ``run(name, overrides)`` validates the overrides (unknown
names and impossible values raise ``UserError`` naming the field) and runs it.

A model construction's result is ``{"construction", "theorem", "source", "task", "parameters", "layers",
"heads", "width", "examples", "exhaustive", "accuracy", "min_margin", "seconds"}``: the model is built with
hand-set weights and evaluated on the task's exhaustive dataset when it has at most ``EXHAUSTIVE_LIMIT``
examples, else on ``examples`` random ones (seeded by ``seed``). ``min_margin`` is the smallest gap between
the target's logit and the best other logit (> 0 on every example iff accuracy is exactly 1).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import UserError

EXHAUSTIVE_LIMIT = 400_000
EVAL_CHUNK = 8192
MIN_GAMMA = 1e-6  # the nearest-neighbour margin: below it η = log(18N)/γ runs toward float32's overflow


@dataclass(frozen=True)
class Construction:
    name: str
    theorem: str
    source: str
    summary: str
    parameters: dict[str, Any]
    run: Callable[[dict[str, Any]], dict[str, Any]]


CONSTRUCTIONS: dict[str, Construction] = {}


def construction(name: str, theorem: str, source: str, summary: str, parameters: dict[str, Any]) -> Callable:
    """Decorator: the function below is construction ``name``, with these parameter defaults (listed in file order)."""

    def add(run: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        CONSTRUCTIONS[name] = Construction(name, theorem, source, summary, parameters, run)
        return run

    return add


def make_task(name: str, **fields: Any):
    """A task from its fields; a ValueError from the task's validation becomes a UserError naming the field."""
    from pydantic import ValidationError

    from ..tasks import TASKS

    try:
        return TASKS[name](**fields)
    except ValidationError as e:
        parts = [f"{'.'.join(str(x) for x in err['loc']) or name}: {err['msg'].removeprefix('Value error, ')}"
                 for err in e.errors()]
        raise UserError("; ".join(parts)) from None


@torch.no_grad()
def evaluate(model, task, examples: int = 20_000, seed: int = 0) -> dict[str, Any]:
    """Accuracy and the smallest logit margin of a one-run ``model`` on ``task`` (exhaustive when small)."""
    exhaustive = task.dataset_size("all") <= EXHAUSTIVE_LIMIT
    batch = task.enumerate("all") if exhaustive else None
    if batch is None:
        exhaustive = False
        batch = task.sample(examples, np.random.default_rng(seed), "all")
    correct, margin = 0, float("inf")
    inputs, targets = torch.as_tensor(batch.inputs), torch.as_tensor(batch.targets)
    for start in range(0, len(batch), EVAL_CHUNK):
        x, y = inputs[start : start + EVAL_CHUNK], targets[start : start + EVAL_CHUNK]
        logits = model(x[None]).outputs[0]
        correct += int((logits.argmax(-1) == y).sum())
        target = logits.gather(1, y[:, None])[:, 0]
        others = logits.scatter(1, y[:, None], float("-inf")).amax(-1)
        margin = min(margin, float((target - others).min()))
    return {"examples": len(batch), "exhaustive": exhaustive, "accuracy": correct / len(batch), "min_margin": margin}


def _model_result(name: str, params: dict[str, Any], task, build: Callable) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        model = build(task)
    except ValueError as e:
        raise UserError(str(e)) from None
    scores = evaluate(model, task, params.get("examples", 20_000), params.get("seed", 0))
    entry = CONSTRUCTIONS[name]
    return {
        "construction": name, "theorem": entry.theorem, "source": entry.source,
        "task": {"name": task.name, **task.model_dump(mode="json")}, "parameters": params,
        "layers": model.layers, "heads": model.spec.heads_per_layer, "width": model.width,
        **scores, "seconds": round(time.perf_counter() - started, 3),
    }


# --- the entries ----------------------------------------------------------------------------------------

@construction("seed001-memorization", "Theorem 1", "seed 001 §5.1, §12",
              "1 layer, n heads, d' = max(nd, d+n): memorises N sequences with distinct labels",
              {"N": 64, "n_words": 8, "length": 3, "data_seed": 0})
def _memorization(p: dict[str, Any]) -> dict[str, Any]:
    from .attention_only import memorization_model

    task = make_task("memorization", n_words=p["n_words"], length=p["length"], n_examples=p["N"],
                     data_seed=p["data_seed"])
    return _model_result("seed001-memorization", p, task, memorization_model)


@construction("seed001-icqa", "Theorem 3", "seed 001 §5.2, §13.2",
              "2 layers, 1 head, d' = d+n: copy–matching solves in-context QA",
              {"k": 3, "n_q": 6, "n_a": 6, "examples": 20_000, "seed": 0})
def _icqa(p: dict[str, Any]) -> dict[str, Any]:
    from .attention_only import icqa_model

    task = make_task("icqa", k=p["k"], n_q=p["n_q"], n_a=p["n_a"])
    return _model_result("seed001-icqa", p, task, icqa_model)


@construction("seed001-template", "Theorem 5", "seed 001 §5.3, §14.2",
              "2 layers, 1 head, d' = d+n+l: parse–mapping (ternary codes) solves template matching",
              {"l": 4, "n_symbols": 8, "examples": 20_000, "seed": 0})
def _template(p: dict[str, Any]) -> dict[str, Any]:
    from .attention_only import template_model

    task = make_task("template", l=p["l"], n_symbols=p["n_symbols"], eval_fraction=0.0)
    return _model_result("seed001-template", p, task, template_model)


@construction("seed001-ictm", "Theorem 6", "seed 001 §5.4, §15",
              "3 layers, heads [1, 1, 2l], d' = d+n+l+2: parsing–copying–matching solves IC-TM",
              {"k": 2, "l": 3, "n_symbols": 3, "n_a": 3, "examples": 20_000, "seed": 0})
def _ictm(p: dict[str, Any]) -> dict[str, Any]:
    from .attention_only import ictm_model

    task = make_task("ictm", k=p["k"], l=p["l"], n_symbols=p["n_symbols"], n_a=p["n_a"], eval_fraction=0.0)
    return _model_result("seed001-ictm", p, task, ictm_model)


@construction("seed001-nested-icqa", "§7 (nested in-context QA)", "seed 001 §7, §10, §13.2",
              "copy–matching once per hop: 2·hops layers of 1 head (§7: 6 layers for 3 hops); depth=compact: hops+1",
              {"k": 2, "hops": 3, "n_symbols": 8, "shuffle": False, "depth": "paper", "examples": 20_000, "seed": 0})
def _nested_icqa(p: dict[str, Any]) -> dict[str, Any]:
    from .attention_only import nested_icqa_model

    task = make_task("nested_icqa", k=p["k"], hops=p["hops"], n_symbols=p["n_symbols"], shuffle=p["shuffle"])
    return _model_result("seed001-nested-icqa", p, task, lambda t: nested_icqa_model(t, p["depth"]))


@construction("seed001-one-layer-bound", "Theorems 2 and 4 (Propositions 8 and 10)",
              "seed 001 §11, §13.1, §14.1, §16",
              "dependent sequences force o0 + o1 = o2 + o3 on every 1-layer model: accuracy ≤ 3/4 on the set",
              {"task": "icqa", "k": 2, "n_q": 2, "n_a": 2, "l": 3, "n_symbols": 4, "per_kind": 4, "seed": 0})
def _one_layer_bound(p: dict[str, Any]) -> dict[str, Any]:
    from .impossibility import SET_TASKS, certify_many, dependent_set

    started = time.perf_counter()
    if p["task"] == "icqa":
        task = make_task("icqa", k=p["k"], n_q=p["n_q"], n_a=p["n_a"])
    elif p["task"] == "template":
        task = make_task("template", l=p["l"], n_symbols=p["n_symbols"], eval_fraction=0.0)
    else:
        raise UserError(f"task: must be one of {', '.join(SET_TASKS)} (got {p['task']!r})")
    if p["per_kind"] < 1:
        raise UserError(f"per_kind: must be at least 1 (got {p['per_kind']})")
    try:
        dep = dependent_set(task)
    except ValueError as e:
        raise UserError(str(e)) from None
    checked = certify_many(dep, per_kind=p["per_kind"], seed=p["seed"])
    entry = CONSTRUCTIONS["seed001-one-layer-bound"]
    return {
        "construction": "seed001-one-layer-bound", "theorem": entry.theorem, "source": entry.source,
        "task": {"name": task.name, **task.model_dump(mode="json")}, "parameters": p,
        "dependent_set": dep.decoded(), "coefficients": dep.coefficients.tolist(),
        "models_tried": checked["models_tried"], "max_deviation": checked["max_deviation"],
        "accuracy_bound": dep.accuracy_bound, "max_accuracy_seen": checked["max_accuracy_seen"],
        "argument": dep.argument, "by_kind": checked["by_kind"],
        "seconds": round(time.perf_counter() - started, 3),
    }


@construction("seed002-information-flow", "Theorem 1 (seed 002)", "seed 002 §5, Appendix B",
              "information-flow simulator: least layers for the last position to hold x_D vs ⌈log3(2D)⌉",
              {"D": 10, "N": 4, "seed": 0, "D_max": 0, "sequence": "builtin"})
def _information_flow(p: dict[str, Any]) -> dict[str, Any]:
    from .information_flow import last_position_form, simulate, simulate_task

    started = time.perf_counter()
    if p["D"] < 1 or p["N"] < 1:
        raise UserError(f"D and N: must be at least 1 (got D={p['D']}, N={p['N']})")
    if p["D_max"] < 0 or p["D_max"] > 1000:
        raise UserError(f"D_max: must be between 0 (only D) and 1000 (got {p['D_max']})")
    if p["sequence"] not in ("builtin", "task"):
        raise UserError(f"sequence: must be builtin (the §6 sequence built here) or task (an example of the "
                        f"retrieval task), got {p['sequence']!r}")
    depths = range(1, p["D_max"] + 1) if p["D_max"] else [p["D"]]
    rows = []
    for D in depths:
        try:
            r = (simulate if p["sequence"] == "builtin" else simulate_task)(D, p["N"], p["seed"])
        except ValueError as e:
            raise UserError(str(e)) from None
        rows.append({**r, "last_position_form": last_position_form(D)})
    entry = CONSTRUCTIONS["seed002-information-flow"]
    return {
        "construction": "seed002-information-flow", "theorem": entry.theorem, "source": entry.source,
        "parameters": p, "rows": rows,
        "layers_any_equals_closed_form": all(r["layers_any"] == r["closed_form"] for r in rows),
        "layers_last_at_least_closed_form": all(r["layers_last"] >= r["closed_form"] for r in rows),
        "layers_last_equals_closed_form": [r["D"] for r in rows if r["layers_last"] == r["closed_form"]],
        "seconds": round(time.perf_counter() - started, 3),
    }


FORWARD_LIMIT = 2000  # above this N the forward pass (all N² attention scores per example) is skipped


def _certified_result(name: str, p: dict[str, Any], build, certify, exact, forward) -> dict:
    """Build the model for the parameter k (searched with ``smallest_k()`` when it is 0), certify it, run it.

    ``build`` is ``(smallest_k, model_of_k)``; ``exact(certificate)`` says whether the certificate holds.
    """
    smallest_k, model_of_k = build
    started = time.perf_counter()
    try:
        built = model_of_k(p["k"] or smallest_k())
    except ValueError as e:
        raise UserError(str(e)) from None
    certificate = certify(built)
    exact = exact(certificate)
    scores = forward(built, p["examples"], p["seed"]) if built.N <= FORWARD_LIMIT and p["examples"] > 0 else None
    entry = CONSTRUCTIONS[name]
    return {
        "construction": name, "theorem": entry.theorem, "source": entry.source, "parameters": p,
        "layers": built.model.layers, "heads": [built.model.spec.heads] * built.model.layers,
        "width": built.width, "k": built.k, "N": built.N, "eta": built.eta,
        "examples": scores["examples"] if scores else 0, "exhaustive": False,
        "accuracy": scores["accuracy"] if scores else None,
        "certified_all_inputs": exact, "certificate": certificate,
        "seconds": round(time.perf_counter() - started, 3),
    }


@construction("seed003-index-lookup", "Theorem 1 (seed 003)", "seed 003 §3, Appendix B.3, C.2",
              "1 softmax layer, width O(log N) via nearly orthogonal vectors (Lemma 2): index lookup",
              {"N": 100, "k": 0, "n_symbols": 4, "eta": 0, "examples": 64, "seed": 0})
def _index_lookup(p: dict[str, Any]) -> dict[str, Any]:
    from .log_width import certify_index_lookup, index_lookup_model, run_index_lookup, smallest_index_lookup_width

    if p["N"] < 1 or p["n_symbols"] < 2 or p["k"] < 0:
        raise UserError(f"N, n_symbols, k: need N ≥ 1, n_symbols ≥ 2, k ≥ 0 (got {p['N']}, {p['n_symbols']}, {p['k']})")
    eta = p["eta"] or None
    build = (lambda: smallest_index_lookup_width(p["N"], p["n_symbols"], eta, p["seed"])["k"],
             lambda k: index_lookup_model(p["N"], k, p["n_symbols"], eta, p["seed"]))
    return _certified_result("seed003-index-lookup", p, build, certify_index_lookup,
                           lambda cert: cert["min_margin"] > 0, run_index_lookup)


@construction("seed003-equality", "Theorem 6 (seed 003)", "seed 003 §5.1, Appendix F.2",
              "2 softmax layers with an MLP, width O(log N): equality of the two halves of N bits",
              {"N": 64, "k": 0, "examples": 64, "seed": 0})
def _equality(p: dict[str, Any]) -> dict[str, Any]:
    from .log_width import certify_equality, equality_model, run_equality, smallest_equality_width

    if p["N"] < 2 or p["N"] % 2 or p["k"] < 0:
        raise UserError(f"N: must be even and at least 2, and k ≥ 0 (got N={p['N']}, k={p['k']})")
    build = (lambda: smallest_equality_width(p["N"], p["seed"])["k"],
             lambda k: equality_model(p["N"], k, seed=p["seed"]))
    return _certified_result("seed003-equality", p, build, certify_equality, lambda cert: cert["exact"], run_equality)


@construction("seed003-nearest-neighbor", "Theorem 7 (seed 003)", "seed 003 §5.2, Appendix G.2",
              "2 softmax layers with a clamp MLP, width O(log N) at a fixed margin γ: nearest neighbour",
              {"N": 4, "d": 16, "gamma": 0.5, "k": 0, "examples": 64, "seed": 0})
def _nearest_neighbor(p: dict[str, Any]) -> dict[str, Any]:
    from .nearest_neighbor import (
        certify_nearest_neighbor,
        nearest_neighbor_model,
        run_nearest_neighbor,
        smallest_nearest_neighbor_width,
    )

    if p["N"] < 2 or p["N"] % 2 or p["d"] < 2 or p["k"] < 0 or not 0 < p["gamma"] < 1:
        raise UserError(f"N, d, gamma, k: need N even ≥ 2, d ≥ 2, 0 < gamma < 1, k ≥ 0 (got N={p['N']}, "
                        f"d={p['d']}, gamma={p['gamma']}, k={p['k']})")
    if p["gamma"] < MIN_GAMMA:
        raise UserError(f"gamma: at least {MIN_GAMMA:g} (got {p['gamma']:g}): the construction's scale "
                        f"η = log(18N)/γ grows as 1/γ and overflows float32 near γ = 1e-36")
    build = (lambda: smallest_nearest_neighbor_width(p["N"], p["d"], p["gamma"], p["seed"])["k"],
             lambda k: nearest_neighbor_model(p["N"], k, p["d"], p["gamma"], p["seed"]))
    return _certified_result("seed003-nearest-neighbor", p, build, certify_nearest_neighbor,
                           lambda cert: cert["exact"], run_nearest_neighbor)


@construction("seed003-nearest-neighbor-widths", "Theorem 7 (seed 003)", "seed 003 §5.2, Appendix G.2",
              "smallest certified width of the nearest-neighbour construction against N (4 … N_max), fixed γ",
              {"N_max": 64, "d": 8, "gamma": 0.9, "seed": 0})
def _nearest_neighbor_widths(p: dict[str, Any]) -> dict[str, Any]:
    from .nearest_neighbor import nearest_neighbor_widths

    if not 4 <= p["N_max"] <= 1024 or not 0 < p["gamma"] < 1:
        raise UserError(f"N_max, gamma: need 4 ≤ N_max ≤ 1024 and 0 < gamma < 1 (got {p['N_max']}, {p['gamma']})")
    started = time.perf_counter()
    ns = [n for n in (4, 8, 16, 32, 64, 128, 256, 512, 1024) if n <= p["N_max"]]
    try:
        table = nearest_neighbor_widths(ns, p["d"], p["gamma"], p["seed"])
    except ValueError as e:
        raise UserError(str(e)) from None
    entry = CONSTRUCTIONS["seed003-nearest-neighbor-widths"]
    return {"construction": entry.name, "theorem": entry.theorem, "source": entry.source, "parameters": p,
            "constructions": {"nearest_neighbor": table}, "seconds": round(time.perf_counter() - started, 3)}


@construction("seed003-widths", "Theorems 1 and 6 (seed 003)", "seed 003 §3, §5.1",
              "smallest exact width against N (10 … N_max) for each seed 003 construction, with log-fits",
              {"N_max": 3000, "seed": 0})
def _widths(p: dict[str, Any]) -> dict[str, Any]:
    from .log_width import widths_table

    if not 10 <= p["N_max"] <= 10_000:
        raise UserError(f"N_max: must be between 10 and 10000 (got {p['N_max']})")
    started = time.perf_counter()
    ns = [n for n in (10, 30, 100, 300, 1000, 3000, 10_000) if n <= p["N_max"]]
    table = widths_table(ns, seed=p["seed"])
    return {"construction": "seed003-widths", "theorem": CONSTRUCTIONS["seed003-widths"].theorem,
            "source": CONSTRUCTIONS["seed003-widths"].source, "parameters": p, **table,
            "seconds": round(time.perf_counter() - started, 3)}


@construction("seed003-recurrent-bounds", "Theorems 2, 3, 5, 8, 10, 11 (seed 003)",
              "seed 003 §3, §4, §5.2, App. C.1, D, E, F.1, G.1",
              "the state in bits a recurrent model needs at length N (index lookup, equality, nearest neighbour; Dyck: "
              "one-layer transformers' mH), exact where N is small, beside a store's trained models",
              {"task": "index_lookup", "lengths": [4, 8, 16, 20, 50, 100, 200, 400], "store": "", "held": 0.95,
               "precision": 32})
def _recurrent_bounds(p: dict[str, Any]) -> dict[str, Any]:
    from .state_bounds import certificate, family

    family(p["task"])  # an unknown task fails first, with the allowed ones
    lengths = p["lengths"]
    if not isinstance(lengths, list) or not lengths or not all(
            isinstance(n, int) and not isinstance(n, bool) and 2 <= n <= 10**6 for n in lengths):
        raise UserError(f"lengths: a list of integers from 2 to 10^6 (got {lengths!r})")
    if not 0 < p["held"] <= 1 or p["precision"] not in (16, 32, 64):
        raise UserError(f"held, precision: need 0 < held ≤ 1 and precision 16, 32 or 64 (got {p['held']}, "
                        f"{p['precision']})")
    started = time.perf_counter()
    records = _store_runs(p["store"]) if p["store"] else []
    entry = CONSTRUCTIONS["seed003-recurrent-bounds"]
    return {"construction": entry.name, "parameters": p,
            **certificate(p["task"], sorted(set(lengths)), records, p["held"], p["precision"]),
            "seconds": round(time.perf_counter() - started, 3)}


def _store_runs(path: str) -> list[dict[str, Any]]:
    """Every run of the store at ``path`` (read only: a missing store is an error, not an empty one)."""
    from pathlib import Path

    from ..store import Store, database_path

    if not database_path(Path(path)).is_file():
        raise UserError(f"store: no depthlab store at {path}")
    return Store(Path(path)).find_runs()


def listing() -> list[dict[str, Any]]:
    return [{"name": c.name, "theorem": c.theorem, "source": c.source, "summary": c.summary,
              "parameters": dict(c.parameters)} for c in CONSTRUCTIONS.values()]


def resolve(name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The entry's defaults updated with ``overrides``; unknown names and wrong types raise UserError."""
    if name not in CONSTRUCTIONS:
        raise UserError(f"construction: unknown name {name!r}; allowed: {', '.join(CONSTRUCTIONS)}")
    entry = CONSTRUCTIONS[name]
    params = dict(entry.parameters)
    for key, value in overrides.items():
        if key not in params:
            raise UserError(f"{key}: unknown parameter of {name}; allowed: {', '.join(params)}")
        default = params[key]
        if isinstance(default, int) and not isinstance(default, bool):
            if not isinstance(value, int) or isinstance(value, bool):
                raise UserError(f"{key}: must be an integer (got {value!r})")
        elif isinstance(default, float):
            value = _number(key, value)
        elif isinstance(default, str) and not isinstance(value, str):
            raise UserError(f"{key}: must be a string (got {value!r})")
        params[key] = value
    return params


def _number(key: str, value: object) -> float:
    """``value`` as a finite float: YAML 1.1 reads ``1e-308`` (no dot) as text, which is still a number here."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise UserError(f"{key}: must be a finite number such as 0.5 or 1e-3 (got {value!r})")
    return float(value)


def run(name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build and check construction ``name`` with its defaults updated by ``overrides``."""
    params = resolve(name, overrides or {})
    return CONSTRUCTIONS[name].run(params)
