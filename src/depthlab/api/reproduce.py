"""``depthlab.reproduce``: a seed's study from its preset, returning what ``depthlab reproduce --json`` prints.

:func:`run_preset` is the one implementation: the CLI calls it with its progress bars, the API with its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UserError
from ..store import record_reproduction
from .training import open_store, train_configs

if TYPE_CHECKING:
    from ..analysis.tables import Table
    from ..store import Store
    from ..sweeps.climb import CellResult, Study
    from ..sweeps.presets import Preset

Train = Callable[[list[Any], str], Any]  # train(run configs, label for the progress bar)


def climb_studies(studies: list[Study], store: Store, train: Train, label: str) -> list[CellResult]:
    """Climb each capability study in depth (``depthlab.sweeps.climb``), one depth's runs at a time."""
    from ..sweeps.climb import climb

    def one_depth(configs: list[Any], depth: int) -> None:
        train(configs, f"{label}: {depth} layer{'s' if depth > 1 else ''}")

    return [cell for study in studies for cell in climb(study, store, one_depth)]


def run_preset(preset: Preset, store: Store, out: Path | None, train: Train, vector: str | None = None,
               finished_only: bool = False) -> tuple[dict[str, Any], list[Table]]:
    """Train a preset's runs (or climb its studies) with ``train``, then summarize them: the result object
    (``preset``, ``scale``, the summary's keys, ``seconds``, ``threads``) and the tables to show. The figure is
    ``<out or store/figures>/<name>-<scale>.png``, with its ``vector`` file (pdf, svg) next to it when asked; the
    scale's ``options`` are passed to the summary as keyword arguments.

    ``finished_only``: train nothing and summarize the preset's runs already done in the store (a sweep preset
    only: a study's runs are found by climbing). When some are missing the title says how many of how many were
    drawn, the result and the store's manifest carry ``partial: [done, total]``."""
    import torch

    from ..report.summaries import preset_summary

    summarize = preset_summary(preset)  # an unknown summary fails before any training
    if finished_only and preset.studies:
        raise UserError(f"--finished-only: {preset.name} climbs capability studies, whose runs are chosen by "
                        "training; allowed only for presets of sweeps")
    started = time.perf_counter()
    figure = (out or store.root / "figures") / f"{preset.name}-{preset.scale}.png"
    title, partial = preset_title(preset), None
    if preset.studies:
        run_ids: list[str] = []  # a study's runs are found by climbing; its cells do not keep their ids
        summary, tables = summarize(climb_studies(preset.studies, store, train, preset.name), figure, title,
                                    vector=vector, **preset.options)
    else:
        run_ids = list(dict.fromkeys(store.run_id(run.to_dict()) for run in preset.runs))
        if finished_only:
            done = {r["id"] for r in store.find_runs(ids=run_ids) if r["status"] == "done"}
            partial = [len(done), len(run_ids)] if len(done) < len(run_ids) else None
            run_ids = [i for i in run_ids if i in done]
            if not run_ids:
                raise UserError(f"--finished-only: no run of {preset.name} --scale {preset.scale} is done in "
                                f"{store.root}")
            if partial:
                title = f"{title} (partial: {partial[0]} of {partial[1]} runs)"
        else:
            train(preset.runs, preset.name)
        summary, tables = summarize(store, run_ids, figure, title, vector=vector, **preset.options)
    result = {"preset": preset.name, "scale": preset.scale, **summary, **({"partial": partial} if partial else {}),
              "seconds": round(time.perf_counter() - started, 1), "threads": torch.get_num_threads()}
    record_reproduction(store.root, manifest(preset, result, run_ids))
    return result, tables


def preset_title(preset: Preset) -> str:
    """What a preset's figures and tables are titled: its title and the seed figures it draws, said once
    (``training dynamics for different attention heads (seed 001 Figures 4-7)``)."""
    from ..captions import figures_text

    figures = figures_text(preset.figures)
    return f"{preset.title} ({figures})" if figures else preset.title


def figure_files(obj: Any) -> list[str]:
    """Every PNG path a summary's JSON names (``figure``, ``curves_figure``, ``figures``, per-run ``figure``),
    in order, once each."""
    found: list[str] = []
    if isinstance(obj, dict):
        for value in obj.values():
            found += figure_files(value)
    elif isinstance(obj, list):
        for value in obj:
            found += figure_files(value)
    elif isinstance(obj, str) and obj.endswith(".png"):
        found.append(obj)
    return list(dict.fromkeys(found))


def manifest(preset: Preset, result: dict[str, Any], run_ids: list[str]) -> dict[str, Any]:
    """What the store keeps of a reproduction (``depthlab.store.reproduced``): the preset, its seed figures, the
    figure files it drew, its runs, the overrides it ran with and when it finished."""
    import datetime as dt

    command = f"depthlab reproduce {preset.name} --scale {preset.scale}"
    command += "".join(f" --set {o}" for o in preset.overrides)
    return {"preset": preset.name, "scale": preset.scale, "title": preset.title, "reproduces": preset.reproduces,
            "figures": preset.figures, "note": preset.note, "overrides": preset.overrides, "command": command,
            "files": figure_files({k: v for k, v in result.items() if "figure" in k}), "run_ids": run_ids,
            **({"partial": result["partial"]} if "partial" in result else {}),
            "seconds": result["seconds"], "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}


def reproduce(name: str, scale: str = "quick", *, store: str | Path | Store | None = None,
              out: str | Path | None = None, progress: bool = False, log: str | list[str] = (),
              group_size: int | None = None, finished_only: bool = False, **overrides: Any) -> dict[str, Any]:
    """Re-run the preset ``name`` (``seed001-depth``, …; ``depthlab reproduce --help`` lists them) at ``scale``
    (quick or paper) into ``store``, write its figure (into ``out``, default ``<store>/figures``), and return the
    object ``depthlab reproduce NAME --json`` prints: ``preset``, ``scale``, the summary (``rows``, ``figure``,
    …), ``seconds``, ``threads``. Runs already in the store are reused.

    ``overrides`` change every run of the preset, as ``--set`` does (``train__steps=500`` or
    ``**{"train.steps": 500}``); ``progress``, ``log``, ``group_size`` as for :func:`depthlab.sweep`;
    ``finished_only`` trains nothing and draws from the runs already done (see :func:`run_preset`).
    """
    preset = _load(name, scale, overrides)
    db = open_store(store)

    def train(configs: list[Any], label: str) -> None:
        train_configs(configs, db, label, progress, log, group_size)

    return run_preset(preset, db, Path(out) if out is not None else None, train, finished_only=finished_only)[0]


def done_runs(store: Store | None, configs: list[Any]) -> set[str]:
    """The ids of ``configs``' runs finished in ``store`` (none without one): what a plan leaves out."""
    if store is None:
        return set()
    ids = list(dict.fromkeys(store.run_id(c.to_dict()) for c in configs))
    return {r["id"] for r in store.find_runs(ids=ids) if r["status"] == "done"}


def plan(name: str, scale: str = "quick", *, store: str | Path | Store | None = None, group_size: int | None = None,
         max_seconds: float | None = 120.0, **overrides: Any) -> dict[str, Any]:
    """How long ``depthlab reproduce name --scale scale`` would take on this device, measured by training a few
    steps of each distinct group shape in a scratch store (nothing is recorded in ``store``; its finished runs,
    when it exists, are left out): what ``depthlab reproduce NAME --plan --json`` prints (``runs``, ``groups``,
    ``steps``, ``projected_seconds`` — an upper bound: runs that stop early take less —, ``shapes_detail``, …).
    Past ``max_seconds`` of measuring, the remaining shapes are estimated from the measured ones. ``overrides``
    as for :func:`reproduce`."""
    return plan_for(_load(name, scale, overrides), store, group_size, max_seconds)


def plan_for(preset: Preset, store: str | Path | Store | None = None, group_size: int | None = None,
             max_seconds: float | None = 120.0) -> dict[str, Any]:
    """:func:`plan` of a loaded preset (``store``: a store or the path of one; a path with no store is no store)."""
    from ..sweeps.plan import plan_preset

    return plan_preset(preset, group_size, max_seconds, done_runs(existing_store(store), preset.every_run))


def existing_store(store: str | Path | Store | None) -> Store | None:
    """``store`` opened when it exists (a path with no store is no store: a plan creates nothing)."""
    from ..store import Store as LowLevelStore
    from ..store import database_path

    return store if isinstance(store, LowLevelStore) else (
        LowLevelStore(Path(store)) if store is not None and database_path(Path(store)).is_file() else None)


def explain(name: str) -> dict[str, Any]:
    """Preset ``name``'s paper scale against its seed, setting by setting: what ``depthlab reproduce NAME --explain
    --json`` prints (``settings``: each with the seed's value, its section and words, depthlab's, whether they
    differ, why, and the ``--set`` changes that run the seed's own)."""
    from ..sweeps.settings import explain as settings_explain

    return settings_explain(name)


def _load(name: str, scale: str, overrides: dict[str, Any]) -> Preset:
    from ..fields import flat_fields
    from ..sweeps.presets import load_preset
    from .catalog import load_plugins

    load_plugins()
    fields = flat_fields({key.replace("__", "."): value for key, value in overrides.items()})
    return load_preset(name, scale, [f"{field}={json.dumps(value)}" for field, value in fields.items()])
