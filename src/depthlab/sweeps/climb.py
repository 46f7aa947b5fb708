"""Capability studies: the smallest depth at which a task is learned, climbed one depth at a time.

This module decides what to train; ``depthlab.analysis.capability`` turns the settled cells into rows and
tables, ``depthlab.draw.capability`` draws them.

A study is a base run mapping (``task``, ``model``, ``train``), the depths to try (``layers``), the seeds, the
target accuracy, optionally several widths (``model.width``) and one varied field (``vary``: ``task.N`` over
a list of values). Every (width, value) pair is a *cell*. :func:`climb` trains all open cells at the first depth
(every width, value and seed of that depth in one call of the executor, which batches runs of equal shapes),
reads their final accuracies from the store, closes the cells that depth solves
(:func:`solves`: a strict majority of seeds at the target) and goes one depth up
with the rest; it stops as soon as every cell is settled or the depths run out. Runs are ordinary runs:
the same config gives the same run id, so a repeated study trains nothing twice.

Unless the train mapping sets ``target_accuracy`` itself (``null`` included), every run stops once its
evaluation accuracy is halfway between the target and 1 (:func:`stop_accuracy`): a run that has learned the
task well past the target need not train on, while its final accuracy (measured on the whole evaluation set
when it stops) still decides against the target with room to spare.

Every run of every depth is validated before any work, so a mistake in a cell fails at once.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..bounded import BoundError, parse_yaml
from ..config import RunConfig, apply_overrides, parse_run, set_field
from ..errors import UserError
from ..store import Store
from ..training.engine import TERMINAL
from ..training.eval_label import protocol_of

MAX_LAYERS = 64
STUDY_KEYS = ("task", "model", "train", "layers", "seeds", "target", "widths", "vary", "expect")
RESERVED = {"model.layers": "--layers", "seed": "--seeds", "model.width": "--widths"}


@dataclass
class Study:
    """What to climb: a base run mapping and the grid around it."""

    base: dict[str, Any]
    layers: list[int]
    seeds: list[int]
    target: float = 0.95
    widths: list[int | None] = field(default_factory=lambda: [None])
    vary: tuple[str, list[Any]] | None = None
    expected: int | None = None  # what the seed says, shown next to the measurement

    def __post_init__(self) -> None:
        plan(self)  # every run of every cell and depth validated now, before any work


@dataclass
class CellResult:
    """One cell of a capability study: a task config at one width, climbed in depth."""

    task: str  # the task's name
    width: int | None  # the model's width (None: the family's default, d + n for attention_only)
    field: str | None  # the varied field (``task.N``), or None
    value: Any  # its value in this cell
    max_layers: int  # the deepest depth the study would try
    target: float
    expected: int | None = None  # what the seed says (or a bound), shown next to the measurement
    chance: float | None = None
    eval_protocol: str | None = None
    accuracies: dict[int, list[float | None]] = field(default_factory=dict)  # depth -> per seed
    # depth -> the runs that learned and then lost it (training.best): {"run", "target", "step"} each
    lost: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    min_layers: int | None = None
    unfinished_at: int | None = None  # read from the store only: the first depth whose runs are not all finished

    @property
    def label(self) -> str:
        parts = [self.task] + ([f"width {self.width}"] if self.width is not None else [])
        if self.field is not None:
            parts.append(f"{self.field.removeprefix('task.')}={self.value}")
        return ", ".join(parts)


def stop_accuracy(target: float) -> float:
    """The accuracy at which a run stops training: halfway between the target and 1."""
    return round((1.0 + target) / 2.0, 6)


# --- parsing the grid ---------------------------------------------------------------------------------------

def parse_layers(text: Any, where: str = "--layers") -> list[int]:
    """``1-6``, ``1,2,4`` or a list of integers -> sorted distinct depths in 1 … MAX_LAYERS."""
    items = text if isinstance(text, list) else str(text).replace(" ", "").split(",")
    depths: list[int] = []
    for item in items:
        m = re.fullmatch(r"(\d+)-(\d+)", str(item))
        if m:
            depths += range(int(m.group(1)), int(m.group(2)) + 1)
        elif (isinstance(item, int) and not isinstance(item, bool)) or str(item).isdigit():
            depths.append(int(item))
        else:
            raise UserError(f"{where}: expected depths such as 1-6 or 1,2,4 (got {text!r})")
    if not depths or min(depths) < 1 or max(depths) > MAX_LAYERS:
        raise UserError(f"{where}: depths must be integers from 1 to {MAX_LAYERS} (got {text!r})")
    return sorted(set(depths))


def parse_seeds(value: Any, where: str = "--seeds") -> list[int]:
    """A count (``3`` -> seeds 0, 1, 2) or an explicit list of seeds."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1000:
        return list(range(value))
    if isinstance(value, list) and value and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                  for s in value):
        return sorted(set(value))
    raise UserError(f"{where}: a number of seeds from 1 to 1000, or a list of seeds (got {value!r})")


def parse_target(value: Any, where: str = "--target") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise UserError(f"{where}: the target accuracy must be in (0, 1] (got {value!r})")
    return float(value)


def _values(text: str, where: str) -> list[Any]:
    """``a,b,c`` -> each item parsed as YAML (``20`` an int, ``relu`` a string)."""
    out = []
    for item in text.split(","):
        try:
            out.append(parse_yaml(item.strip(), where))
        except BoundError as e:
            raise UserError(f"{where}: cannot parse value {item.strip()!r} ({e.detail})") from None
    return out


def parse_widths(text: str | list[Any] | None, where: str = "--widths") -> list[int | None]:
    """``32,64`` (or a list) -> widths; None -> the model's own width."""
    if text is None:
        return [None]
    values = text if isinstance(text, list) else _values(text, where)
    if not values or not all(isinstance(w, int) and not isinstance(w, bool) and 1 <= w <= 1 << 16 for w in values):
        raise UserError(f"{where}: positive integers such as 32,64 (got {text!r})")
    return list(dict.fromkeys(values))


def _field(name: str) -> str:
    """A dotted field; a bare name is a task field (``N`` -> ``task.N``)."""
    return name if "." in name or name == "seed" else f"task.{name}"


def parse_vary(text: str | dict[str, Any] | None, where: str = "--vary") -> tuple[str, list[Any]] | None:
    """``task.N=20,50,100`` (or a mapping ``{task.N: [20, 50, 100]}``) -> (field, values)."""
    if text is None:
        return None
    if isinstance(text, dict):
        if len(text) != 1 or not isinstance(next(iter(text.values())), list):
            raise UserError(f"{where}: one field with a list of values, e.g. {{task.N: [20, 50]}} (got {text!r})")
        name, values = next(iter(text.items()))
    else:
        name, sep, rest = str(text).partition("=")
        if not sep or not name.strip() or not rest.strip():
            raise UserError(f"{where}: expected field=v1,v2,…, e.g. task.N=20,50,100 (got {text!r})")
        values = _values(rest, where)
    name = _field(str(name).strip())
    if name in RESERVED:
        raise UserError(f"{where} {name}: that is an axis of its own; use {RESERVED[name]}")
    if not values or len({yaml.safe_dump(v) for v in values}) != len(values):
        raise UserError(f"{where} {name}: give distinct values (got {values!r})")
    return name, values


def task_overrides(overrides: list[str] | None) -> list[str]:
    """``--set`` items; a bare ``k=3`` is a task field (``task.k=3``), as in ``depthlab sample``. The study's
    own axes (depth, seed, width) are refused: the climb would overwrite them."""
    out = []
    for item in overrides or []:
        key, sep, rest = item.partition("=")
        name = _field(key.strip())
        if name in RESERVED:
            raise UserError(f"--set {name}: that is an axis of the capability study; use {RESERVED[name]}")
        out.append(f"{name}{sep}{rest}")
    return out


def default_base(task: str, model: str, recipe: dict[str, Any]) -> dict[str, Any]:
    """The capability command's starting point: ``recipe``'s model (when it is of this family) and training."""
    recipe_model = recipe.get("model") or {}
    return {"task": {"name": task},
            "model": dict(recipe_model) if recipe_model.get("name") == model else {"name": model},
            "train": dict(recipe.get("train") or {})}


def study_from_mapping(raw: Any, where: str, overrides: list[str] | None = None) -> Study:
    """A study of a preset: ``task``, ``model``, ``train`` and ``layers``, ``seeds``, ``target``, ``widths``,
    ``vary``, ``expect``; ``overrides`` (``--set``) apply to its run mapping."""
    if not isinstance(raw, dict):
        raise UserError(f"{where}: must be a mapping with keys {', '.join(STUDY_KEYS)}")
    unknown = [k for k in raw if k not in STUDY_KEYS]
    if unknown:
        raise UserError(f"{where}.{unknown[0]}: unknown key; allowed: {', '.join(STUDY_KEYS)}")
    base = apply_overrides({k: raw[k] for k in ("task", "model", "train") if k in raw}, task_overrides(overrides))
    expected = raw.get("expect")
    if expected is not None and (not isinstance(expected, int) or isinstance(expected, bool) or expected < 1):
        raise UserError(f"{where}.expect: the depth the seed claims, a positive integer (got {expected!r})")
    return Study(base,
                 layers=parse_layers(raw.get("layers", "1-6"), f"{where}.layers"),
                 seeds=parse_seeds(raw.get("seeds", 3), f"{where}.seeds"),
                 target=parse_target(raw.get("target", 0.95), f"{where}.target"),
                 widths=parse_widths(raw.get("widths"), f"{where}.widths"),
                 vary=parse_vary(raw.get("vary"), f"{where}.vary"),
                 expected=expected)


# --- the rule ------------------------------------------------------------------------------------------------

def seed_accuracies(store: Store, run_ids: list[str]) -> list[float | None]:
    """Final accuracy of each run (None for a run that is not done: diverged, failed, missing)."""
    out: list[float | None] = []
    for run_id in run_ids:
        run = store.get_run(run_id)
        final = (run or {}).get("final") or {}
        accuracy = final.get("accuracy") if run and run["status"] == "done" else None
        out.append(None if accuracy is None or not math.isfinite(accuracy) else float(accuracy))
    return out


def seed_losses(store: Store, run_ids: list[str]) -> list[dict[str, Any]]:
    """The runs that learned and then lost it (their final metrics' ``learned_then_lost``), with their ids."""
    finals = [(run_id, ((store.get_run(run_id) or {}).get("final")) or {}) for run_id in run_ids]
    return [{"run": run_id, **final["learned_then_lost"]} for run_id, final in finals
            if final.get("learned_then_lost")]


def run_info(store: Store, run_ids: list[str]) -> dict[str, Any]:
    """Chance and evaluation protocol, from the first finished run."""
    for run_id in run_ids:
        final = ((store.get_run(run_id) or {}).get("final")) or {}
        if final:
            return {"chance": final.get("chance"), "eval_protocol": protocol_of(final)}
    return {"chance": None, "eval_protocol": None}


def reached(accuracies: list[float | None], target: float) -> int:
    return sum(a is not None and a >= target for a in accuracies)


def solves(accuracies: list[float | None], target: float) -> bool:
    """A strict majority of the seeds reach ``target``."""
    return 2 * reached(accuracies, target) > len(accuracies)


# --- the climb ----------------------------------------------------------------------------------------------

def _run(study: Study, width: int | None, value: Any, depth: int, seed: int) -> RunConfig:
    raw = copy.deepcopy(study.base)
    raw["train"] = raw.get("train") or {}
    if isinstance(raw["train"], dict):  # anything else: parse_run says what is wrong
        raw["train"].setdefault("target_accuracy", stop_accuracy(study.target))
    set_field(raw, "model.layers", depth, where="--layers")
    set_field(raw, "seed", seed, where="--seeds")
    if width is not None:
        set_field(raw, "model.width", width, where="--widths")
    if study.vary is None:
        return parse_run(raw)
    set_field(raw, study.vary[0], value, where="--vary")
    try:
        return parse_run(raw)
    except UserError as e:
        raise UserError(f"--vary {study.vary[0]}={value}: {e}") from None


def plan(study: Study) -> list[tuple[CellResult, dict[int, list[RunConfig]]]]:
    """Every cell with the runs of every depth, all validated (nothing is trained)."""
    values = study.vary[1] if study.vary else [None]
    cells = []
    for value in values:
        for width in study.widths:
            runs = {d: [_run(study, width, value, d, s) for s in study.seeds] for d in study.layers}
            first = runs[study.layers[0]][0]
            if first.task.loss == "mse":
                raise UserError(f"task: {first.task.name} is scored by mean squared error and has no accuracy; "
                                f"capability needs a classification task (loss cross_entropy or bce)")
            cell = CellResult(task=first.task.name, width=first.model.model_dump().get("width"),
                              field=study.vary[0] if study.vary else None, value=value,
                              max_layers=study.layers[-1], target=study.target, expected=study.expected)
            cells.append((cell, runs))
    return cells


def climb(study: Study, store: Store, train: Callable[[list[RunConfig], int], Any]) -> list[CellResult]:
    """Train depth after depth until every cell is settled; ``train(configs, depth)`` runs one depth's runs
    (skipping those already done in ``store``). Returns every cell with its accuracies and minimum depth."""
    return climb_many([study], store, train)[0]


def climb_many(studies: list[Study], store: Store,
               train: Callable[[list[RunConfig], int], Any] | None) -> list[list[CellResult]]:
    """:func:`climb` for several studies at once: every open cell of every study at one depth is trained in one
    call of ``train`` (one executor call: more runs to batch and to spread over workers).

    ``train=None`` trains nothing and reads the store: a cell whose runs at a depth are not all finished (done or
    diverged) stops there, unsettled, with ``unfinished_at`` set to that depth."""
    planned = [plan(study) for study in studies]
    open_cells = [(cell, runs, study) for study, cells in zip(studies, planned, strict=True) for cell, runs in cells]
    for depth in sorted({d for study in studies for d in study.layers}):
        at_depth = [(cell, runs, study) for cell, runs, study in open_cells if depth in runs]
        if not at_depth:
            continue
        configs = [config for _, runs, _ in at_depth for config in runs[depth]]
        if train is not None:
            train(configs, depth)
        for cell, runs, study in at_depth:
            ids = [Store.run_id(config.to_dict()) for config in runs[depth]]
            if train is None and not finished(store, ids):
                cell.unfinished_at = depth
                continue
            cell.accuracies[depth] = seed_accuracies(store, ids)
            if lost := seed_losses(store, ids):
                cell.lost[depth] = lost
            if cell.chance is None:
                info = run_info(store, ids)
                cell.chance, cell.eval_protocol = info["chance"], info["eval_protocol"]
            if solves(cell.accuracies[depth], study.target):
                cell.min_layers = depth
        open_cells = [(cell, runs, study) for cell, runs, study in open_cells
                      if cell.min_layers is None and cell.unfinished_at is None]
    return [[cell for cell, _ in cells] for cells in planned]


def finished(store: Store, run_ids: list[str]) -> bool:
    """Every run is in the store with an outcome a re-run would not change (done or diverged)."""
    found = {r["id"]: r["status"] for r in store.find_runs(ids=run_ids)}
    return all(found.get(run_id) in TERMINAL for run_id in run_ids)


def study_runs(study: Study) -> list[RunConfig]:
    """Every run the study may train (every cell, depth and seed; climbing stops once a cell settles)."""
    return [run for _, by_depth in plan(study) for runs in by_depth.values() for run in runs]


def most_runs(study: Study) -> int:
    """How many runs the study trains at most (when no depth settles a cell before the last)."""
    return len(study.vary[1] if study.vary else [None]) * len(study.widths) * len(study.layers) * len(study.seeds)
