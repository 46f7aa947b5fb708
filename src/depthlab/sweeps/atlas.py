"""The depth atlas's plan: one capability study per (task, model family) of a scale of ``presets/atlas/atlas.yaml``.

An atlas asks, of every task of the catalog and every model family listed for it, the question of
``depthlab capability``: the smallest depth at which a strict majority of the seeds reach the target, over the
task's size axis (``vary``: N, D, hops, k …) and, where an entry lists ``widths``, at each width. It is nothing
but a set of capability studies (``depthlab.sweeps.climb``): the same config is the same run id, so an atlas
reuses every run a preset or a ``depthlab capability`` command trained with the same config (an entry
``{preset: seed001-min-depth, study: icqa}`` takes that preset's study as it is, so their runs coincide), it
resumes where it stopped, and it can be drawn from the store alone (``finished_only``: nothing trained, a cell
whose runs are missing is *unfinished*).

The scale file says, per scale: ``layers``, ``seeds``, ``target``, the default ``families``, the ``tasks``
entries, ``left_out`` (task: why) and ``left_out_families`` (families: why). Tasks of the catalog that no entry
names (a plugin's, for instance) are climbed at their defaults for the scale's families; tasks scored by mean
squared error have no accuracy and are left out with that reason. Each family's training comes from ``families``
(a preset's recipe, merged with ``model`` and ``train``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..config import apply_overrides, load_yaml, parse_task
from ..errors import UserError
from ..models import MODELS
from ..tasks import TASKS
from .climb import Study, parse_layers, parse_seeds, parse_target, parse_vary, parse_widths, task_overrides
from .presets import load_preset, recipe

ENTRY_KEYS = ("task", "preset", "study", "preset_scale", "vary", "families", "model", "train", "layers", "seeds",
              "target", "widths")


def atlas_file() -> Path:
    return Path(str(resources.files("depthlab") / "presets" / "atlas" / "atlas.yaml"))


@dataclass
class AtlasStudy:
    """One capability study of the atlas: a task (at its sizes) and a model family."""

    task: str
    family: str
    study: Study
    source: str  # where it comes from: ``tasks[3]``, ``task kv_recall at its defaults`` or ``preset seed001-min-depth``

    @property
    def axis(self) -> str | None:
        """The size axis (``task.N``), or None for a task at one size."""
        return self.study.vary[0] if self.study.vary else None


@dataclass
class AtlasPlan:
    scale: str
    note: str
    target: float
    studies: list[AtlasStudy]
    left_out: list[dict[str, str]] = field(default_factory=list)  # {"task", "family"?, "why"}

    @property
    def most_runs(self) -> int:
        from .climb import most_runs

        return sum(most_runs(s.study) for s in self.studies)

    @property
    def every_run(self) -> list[Any]:
        """Every run of every depth of every study (what the atlas trains at most)."""
        from .climb import plan

        return [run for s in self.studies for _, by_depth in plan(s.study) for runs in by_depth.values()
                for run in runs]


def _names(text: str | list[str] | None, known: list[str], where: str) -> list[str] | None:
    """``a,b`` (or a list) checked against ``known``; None when not given."""
    if text is None:
        return None
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text) if n.strip()]
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise UserError(f"{where}: unknown name {unknown[0] if unknown else text!r}; allowed: {', '.join(known)}")
    return names


def _family_base(families: dict[str, Any], family: str, where: str) -> dict[str, Any]:
    """The model and train mappings a family climbs with (its recipe's, merged with its own)."""
    spec = families.get(family)
    if not isinstance(spec, dict):
        raise UserError(f"{where}: family {family!r} has no entry under families:; allowed: {', '.join(families)}")
    base = recipe(spec["recipe"]) if spec.get("recipe") else {"model": {}, "train": {}}
    model = {**(base["model"] if base["model"].get("name") == family else {}), **(spec.get("model") or {})}
    return {"model": {**model, "name": family}, "train": {**base["train"], **(spec.get("train") or {})}}


def _preset_study(name: str, task: str, scale: str, where: str) -> Study:
    studies = [s for s in load_preset(name, scale).studies if s.base["task"]["name"] == task]
    if not studies:
        raise UserError(f"{where}.study: preset {name} has no study of task {task!r} at scale {scale}")
    return studies[0]


def _entry_studies(entry: dict[str, Any], scale_raw: dict[str, Any], families: dict[str, Any], scale: str,
                   where: str, wanted: list[str] | None) -> list[AtlasStudy]:
    unknown = [k for k in entry if k not in ENTRY_KEYS]
    if unknown:
        raise UserError(f"{where}.{unknown[0]}: unknown key; allowed: {', '.join(ENTRY_KEYS)}")
    names = entry.get("families") or scale_raw.get("families") or []
    if wanted is not None and not set(names) & set(wanted):
        return []  # before reading a preset: none of its families is asked for
    preset = (_preset_study(entry["preset"], entry.get("study", ""), entry.get("preset_scale", scale), where)
              if entry.get("preset") else None)
    task = copy.deepcopy(preset.base["task"] if preset else entry.get("task"))
    if not isinstance(task, dict) or "name" not in task:
        raise UserError(f"{where}.task: a task mapping with a name, or preset: NAME with study: TASK")
    out = []
    for family in names:
        if wanted is not None and family not in wanted:
            continue
        vary = parse_vary(entry["vary"], f"{where}.vary") if "vary" in entry else (preset.vary if preset else None)
        own = preset is not None and preset.base["model"].get("name") == family
        if own:
            base = copy.deepcopy(preset.base)
            layers, seeds, target, widths = preset.layers, preset.seeds, preset.target, preset.widths
        else:
            base = _family_base(families, family, where)
            base["task"] = copy.deepcopy(task)
            if preset is not None and "steps" in (preset.base.get("train") or {}):
                base["train"]["steps"] = preset.base["train"]["steps"]  # the task's own budget
            layers = parse_layers(scale_raw.get("layers", "1-4"), f"{where}.layers")
            seeds = parse_seeds(scale_raw.get("seeds", 3), f"{where}.seeds")
            target = parse_target(scale_raw.get("target", 0.95), f"{where}.target")
            widths = [None]
        base["model"].update((entry.get("model") or {}).get(family) or {})
        base["train"] = {**(base.get("train") or {}), **(entry.get("train") or {})}
        layers = parse_layers(entry["layers"], f"{where}.layers") if "layers" in entry else layers
        seeds = parse_seeds(entry["seeds"], f"{where}.seeds") if "seeds" in entry else seeds
        target = parse_target(entry["target"], f"{where}.target") if "target" in entry else target
        widths = parse_widths(entry["widths"], f"{where}.widths") if "widths" in entry else widths
        source = f"preset {entry['preset']}" if own else where.removeprefix(f"atlas {scale} ").strip("()")
        out.append(AtlasStudy(task["name"], family, Study(base, layers, seeds, target, widths, vary), source))
    return out


def load_atlas(scale: str = "quick", tasks: str | list[str] | None = None, families: str | list[str] | None = None,
               overrides: list[str] | None = None, path: str | Path | None = None) -> AtlasPlan:
    """The atlas of ``scale``: its studies (only ``tasks`` and ``families`` when given), validated before any work
    (every run of every depth of every study), and what it leaves out and why. ``overrides`` (``--set``) change
    every run (and so its id: no run is then shared with a preset)."""
    raw = load_yaml(path or atlas_file())
    scales = raw.get("scales") or {}
    if scale not in scales:
        raise UserError(f"--scale: unknown scale {scale!r}; allowed: {', '.join(scales)}")
    body = scales[scale]
    family_specs = raw.get("families") or {}
    wanted_tasks = _names(tasks, sorted(TASKS), "--tasks")
    wanted_families = _names(families, sorted(MODELS), "--families")
    studies: list[AtlasStudy] = []
    for i, entry in enumerate(body.get("tasks") or []):
        name = entry.get("study") if entry.get("preset") else (entry.get("task") or {}).get("name")
        if wanted_tasks is not None and name not in wanted_tasks:
            continue
        studies += _entry_studies(entry, body, family_specs, scale, f"atlas {scale} tasks[{i}]", wanted_families)
    listed = bool(studies)
    named = {s.task for s in studies} | {e.get("study") or (e.get("task") or {}).get("name")
                                         for e in body.get("tasks") or []}
    left_out = [{"task": t, "why": " ".join(str(why).split())} for t, why in (body.get("left_out") or {}).items()
                if wanted_tasks is None or t in wanted_tasks]
    left_out += [{"family": f, "why": " ".join(str(why).split())}
                 for f, why in (body.get("left_out_families") or {}).items()]
    skipped = {d["task"] for d in left_out if "task" in d}
    for name in sorted(TASKS):
        if name in named or name in skipped or (wanted_tasks is not None and name not in wanted_tasks):
            continue
        if parse_task({"name": name}).loss == "mse":
            left_out.append({"task": name, "why": "scored by mean squared error: no accuracy to reach"})
            continue
        studies += _entry_studies({"task": {"name": name}}, body, family_specs, scale,
                                  f"atlas {scale} (task {name} at its defaults)", wanted_families)
    if overrides:
        sets = task_overrides(overrides)
        for s in studies:
            s.study = Study(apply_overrides(s.study.base, sets), s.study.layers, s.study.seeds, s.study.target,
                            s.study.widths, s.study.vary)
    if not studies:
        raise UserError("--tasks/--families: no study of this atlas scale matches them")
    note = " ".join(str(body.get("note", "")).split())
    if wanted_tasks is not None and not listed:
        # only tasks the scale does not list (a plugin's, at its defaults): its note and the families it leaves
        # out speak of its own tasks, not of these
        note, left_out = "", [d for d in left_out if "task" in d]
    return AtlasPlan(scale, note, parse_target(body.get("target", 0.95), f"atlas {scale}.target"), studies,
                     left_out)
