"""``depthlab.atlas``: the trained minimum depth of every task and model family beside the theory's bounds.

:func:`run_atlas` is the one implementation (the CLI calls it with its progress bars, :func:`atlas` with its own):
climb every study of the plan (``depthlab.sweeps.atlas``) one depth at a time, all studies' runs of a depth in one
executor call, or read them from the store (``finished_only``); put each cell beside its bounds
(``depthlab.constructions.bounds``, constructions run once per store and kept in ``<store>/atlas/theory.json``);
mark the disagreements (``depthlab.analysis.atlas``); draw a heat map per family; keep the result in
``<store>/atlas/<scale>.json`` for the report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .training import open_store, train_configs

if TYPE_CHECKING:
    from ..analysis.tables import Table
    from ..store import Store
    from ..sweeps.atlas import AtlasPlan

Train = Callable[[list[Any], str], Any]  # train(run configs, label for the progress bar)


class TheoryCache:
    """``registry.run`` with its results kept in the store: a construction is checked once per store."""

    def __init__(self, root: Path) -> None:
        from ..store import read_theory

        self.root, self.results, self.added = root, read_theory(root), 0

    def __call__(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        from ..constructions.registry import resolve, run
        from ..errors import UserError

        key = f"{name} {json.dumps(resolve(name, params), sort_keys=True)}"
        if key not in self.results:
            try:
                self.results[key] = json.loads(json.dumps(run(name, params), default=str))
            except UserError as e:  # a construction that cannot be built here: remembered as such
                self.results[key] = {"error": str(e)}
            self.added += 1
        if "error" in self.results[key]:
            raise UserError(self.results[key]["error"])
        return self.results[key]

    def save(self) -> None:
        from ..store import write_theory

        if self.added:
            write_theory(self.root, self.results)


def _model_shape(config: Any) -> tuple[list[int] | None, int | None]:
    """Heads per layer and residual width of a run config's model (one run of it built: a few milliseconds; a
    model on PyTorch's meta device would first import TorchDynamo, seconds)."""
    from ..models import TaskShapes, build_model

    spec = config.model
    heads = spec.heads_per_layer if hasattr(spec, "heads_per_layer") else getattr(spec, "heads", None)
    heads = [heads] * spec.layers if isinstance(heads, int) else heads
    return heads, getattr(build_model(spec, TaskShapes.of(config.task), [0]), "width", getattr(spec, "width", None))


def atlas_cells(plan: AtlasPlan, store: Store, train: Train | None) -> list[dict[str, Any]]:
    """Climb (or, ``train=None``, read) every study of ``plan`` and return its cells beside their bounds (the
    theory computed after the climb, so that a long climb picks up what another process added to the cache)."""
    from ..analysis.atlas import atlas_cell
    from ..constructions.bounds import theory
    from ..sweeps.climb import climb_many
    from ..sweeps.climb import plan as study_plan

    def one_depth(configs: list[Any], depth: int) -> None:
        assert train is not None
        train(configs, f"atlas {plan.scale}: {depth} layer{'s' if depth > 1 else ''}")

    results = climb_many([s.study for s in plan.studies], store, one_depth if train is not None else None)
    theory_run = TheoryCache(store.root)
    out = []
    for entry, cells in zip(plan.studies, results, strict=True):
        for cell, (_, runs) in zip(cells, study_plan(entry.study), strict=True):
            first = next(iter(runs.values()))[0]
            task = {"name": first.task.name, **first.task.model_dump(mode="json")}
            model = {k: v for k, v in first.model.model_dump(mode="json").items() if k != "layers"}
            heads, width = _model_shape(first)
            try:
                bounds = theory(task, model, theory_run)
            finally:
                theory_run.save()
            out.append(atlas_cell(cell, task, model, bounds, heads, width, entry.source))
    return out


def run_atlas(plan: AtlasPlan, store: Store, train: Train | None, out: Path | None = None,
              vector: str | None = None, command: str = "") -> tuple[dict[str, Any], list[Table]]:
    """Climb the atlas (``train=None``: read the finished runs only), draw a heat map per family into ``out``
    (default ``<store>/figures``) and return the result object and the table to show."""
    import torch

    from ..analysis.atlas import MARKS, atlas_table, min_widths, row_names
    from ..draw.atlas import atlas_figure
    from ..draw.style import save
    from ..store import record_atlas

    started = time.perf_counter()
    cells = atlas_cells(plan, store, train)
    for cell, name in zip(cells, row_names(cells), strict=True):
        cell["name"] = name
    folder = out or store.root / "figures"
    families = list(dict.fromkeys(c["family"] for c in cells))
    title = f"depth atlas, {plan.scale} scale"
    if train is None:
        unfinished = sum(c["status"] == "unfinished" for c in cells)
        title += f" (from the store: {unfinished} of {len(cells)} cells unfinished)" if unfinished else ""
    figures = {f: str(save(atlas_figure([c for c in cells if c["family"] == f], f, f"{title}: {f}"),
                           folder / f"atlas-{plan.scale}-{f}.png", vector)) for f in families}
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault(json.dumps([c["task_config"], c["model_config"] | {"width": None}], sort_keys=True),
                          []).append(c)
    widths = [{"task": g[0]["task"], "family": g[0]["family"], "size": g[0]["size"], "min_width": min_widths(g)}
              for g in groups.values() if len({c["width"] for c in g}) > 1]
    marked = {mark: [f"{c['name']} ({c['family']})" for c in cells if any(m["mark"] == mark for m in c["marks"])]
              for mark in MARKS}
    result = {"scale": plan.scale, "note": plan.note, "target": plan.target, "families": families,
              "tasks": list(dict.fromkeys(c["task"] for c in cells)), "cells": cells, "min_widths": widths,
              "marks": marked, "mark_meanings": MARKS, "left_out": plan.left_out, "figures": figures,
              "finished_only": train is None, "command": command,
              "runs": sum(len(a) for c in cells for a in c["accuracies"].values()),
              "seconds": round(time.perf_counter() - started, 1), "threads": torch.get_num_threads()}
    record_atlas(store.root, result)
    return result, [atlas_table(cells, f"{title} (target {plan.target:g}, strict majority of seeds)")]


def plan_time(plan: AtlasPlan, store: str | Path | Store | None = None, group_size: int | None = None,
              max_seconds: float | None = 120.0) -> dict[str, Any]:
    """How long the atlas may take on this device: :func:`depthlab.sweeps.plan.plan_runs` of every run of every
    study (each cell climbed to its last depth: an upper bound), the runs finished in ``store`` left out; what
    ``depthlab atlas --plan --plan-seconds S --json`` prints under ``time``."""
    from ..sweeps.plan import plan_runs
    from .reproduce import done_runs, existing_store

    runs = plan.every_run
    return plan_runs(runs, group_size, max_seconds, done_runs(existing_store(store), runs))


def atlas(scale: str = "quick", *, tasks: str | list[str] | None = None, families: str | list[str] | None = None,
          store: str | Path | Store | None = None, out: str | Path | None = None, finished_only: bool = False,
          progress: bool = False, group_size: int | None = None, executor: str = "local",
          address: str | None = None, **overrides: Any) -> dict[str, Any]:
    """The depth atlas at ``scale`` (quick, medium or paper) into ``store``: the object ``depthlab atlas --json``
    prints (``cells`` with ``min_layers``, ``lower``, ``upper``, ``bounds`` and ``marks``; ``figures`` per family;
    ``left_out``). ``tasks`` and ``families`` (names, or comma-separated) select part of it; ``finished_only``
    trains nothing and draws from the runs already done; ``overrides`` change every run (``train__steps=500``).
    Runs already in the store are reused; an interrupted atlas resumes where it stopped."""
    from ..config import flat_fields
    from ..sweeps.atlas import load_atlas
    from .catalog import load_plugins

    load_plugins()
    fields = flat_fields({key.replace("__", "."): value for key, value in overrides.items()})
    plan = load_atlas(scale, tasks, families, [f"{k}={json.dumps(v)}" for k, v in fields.items()])
    db = open_store(store)

    def train(configs: list[Any], label: str) -> None:
        train_configs(configs, db, label, progress, (), group_size, executor, address)

    session = nullcontext()
    if executor == "ray" and not finished_only:
        from ..sweeps.ray_executor import ray_session

        session = ray_session(address)  # one Ray instance for the whole climb
    with session:
        return run_atlas(plan, db, None if finished_only else train, Path(out) if out is not None else None)[0]
