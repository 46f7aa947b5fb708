"""Ready studies: one YAML file per reproduced figure (``configs/NAME.yaml``), each with a quick and a paper scale.

A preset holds ``title``, ``reproduces`` (the seed's figure or section, in words), ``figures`` (the seed figures
it draws, as keys of ``depthlab.captions.CAPTIONS``: ``["seed 001 Figure 2"]``; when left out, read from
``reproduces``), ``scales`` and ``summary``; each scale
is a list of ``sweeps`` (sweep mappings as in a sweep file), a ``note`` saying what it shrinks, and optionally
``options``: keyword arguments of the summary at that scale (``seed004-hypotheses``: how many sequences it
measures). ``summary``
(top level, or in a scale to override it there) names what turns the finished runs into the preset's table and
figure: an entry of
``depthlab.report.summaries.RUN_SUMMARIES`` (default ``depth``: the capability table and seed 001 Figure 2).

A scale may instead hold ``studies``: capability studies (``depthlab.sweeps.climb``), each a run mapping
(``task``, ``model``, ``train``) with ``layers``, ``seeds``, ``target``, ``widths``, ``vary`` and ``expect``
(the depth the seed claims). Their runs are not known in advance (each study climbs in depth until settled);
their ``summary`` is an entry of ``depthlab.report.summaries.STUDY_SUMMARIES`` (default ``min-depth``), given the
cells of every study.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..captions import CAPTIONS, figures_in
from ..config import RunConfig, apply_overrides, expand_sweep, load_yaml
from ..errors import UserError
from .climb import Study, most_runs, study_from_mapping, study_runs


def preset_dir() -> Path:
    return Path(str(resources.files("depthlab") / "presets"))


def preset_names() -> list[str]:
    return sorted(p.stem for p in preset_dir().glob("*.yaml"))


@dataclass
class Preset:
    name: str
    title: str
    reproduces: str
    scale: str
    note: str
    sweeps: list[list[RunConfig]]
    raw: dict[str, Any]
    studies: list[Study] = field(default_factory=list)
    summary_name: str | None = None  # the scale's own ``summary``, else the preset's
    overrides: list[str] = field(default_factory=list)  # the --set changes it was loaded with

    @property
    def figures(self) -> list[str]:
        """The seed figures (theorems, results) the preset draws: keys of ``depthlab.captions.CAPTIONS``."""
        return preset_figures(self.name, self.raw)

    @property
    def most_runs(self) -> int:
        """The runs it trains (its studies' most, which stop climbing once settled)."""
        return sum(map(most_runs, self.studies)) if self.studies else len(self.runs)

    @property
    def runs(self) -> list[RunConfig]:
        return [run for sweep in self.sweeps for run in sweep]

    @property
    def every_run(self) -> list[RunConfig]:
        """Every run the scale may train: its sweeps' runs, and every depth, width, value and seed of its studies
        (which stop climbing once settled, so they train at most these)."""
        return list(self.runs) + [run for study in self.studies for run in study_runs(study)]

    @property
    def size(self) -> str:
        """How much work, in words: ``36 runs``, or ``4 capability studies (at most 48 runs)``."""
        if not self.studies:
            n = len(self.runs)
            return f"{n} run{'s' if n != 1 else ''}" if n else "no training (constructions)"
        studies = f"{len(self.studies)} capability stud{'y' if len(self.studies) == 1 else 'ies'}"
        return f"{studies} (at most {self.most_runs} runs)"

    @property
    def options(self) -> dict[str, Any]:
        """The scale's ``options``: keyword arguments of its summary (e.g. how many sequences a measurement uses)."""
        return dict(self.raw["scales"][self.scale].get("options") or {})

    @property
    def summary(self) -> str:
        """The name of the preset's summary (``depthlab.report.summaries``)."""
        return self.summary_name or self.raw.get("summary") or ("min-depth" if self.studies else "depth")


def preset_figures(name: str, raw: dict[str, Any]) -> list[str]:
    """``raw["figures"]`` checked against the caption registry, or the figures ``raw["reproduces"]`` names."""
    given = raw.get("figures")
    if given is None:
        return figures_in(str(raw.get("reproduces", "")))
    if not isinstance(given, list) or not given or not all(isinstance(x, str) for x in given):
        raise UserError(f"{name}.figures: must be a non-empty list of seed figures, e.g. [\"seed 001 Figure 2\"] "
                        f"(got {given!r})")
    unknown = [x for x in given if x not in CAPTIONS]
    if unknown:
        raise UserError(f"{name}.figures: unknown seed figure {unknown[0]!r}; allowed: {', '.join(CAPTIONS)}")
    return list(given)


def preset_figures_of(name: str) -> list[str]:
    """The seed figures of the preset ``name`` (:func:`preset_figures`), without loading its scales."""
    return preset_figures(name, read_preset(name))


def preset_info(name: str) -> dict[str, Any]:
    """What ``depthlab reproduce --list`` shows of a preset: ``name``, ``title``, ``reproduces``, ``figures``,
    ``summary`` and per scale its ``size`` in words, the ``runs`` it trains at most and its ``note``."""
    raw = read_preset(name)
    path = preset_path(name)
    scales = {scale: _scale_info(name, scale, str(path), path.stat().st_mtime_ns) for scale in raw.get("scales", {})}
    first = next(iter(scales.values()), None)
    return {"name": name, "title": raw.get("title", name), "reproduces": raw.get("reproduces", ""),
            "figures": preset_figures(name, raw), "summary": first["summary"] if first else None,
            "scales": {scale: {k: v for k, v in info.items() if k != "summary"} for scale, info in scales.items()}}


def _scale_info(name: str, scale: str, path: str, mtime_ns: int) -> dict[str, Any]:
    """A scale's size in words, its most runs, its note and summary."""
    p = shared_preset(name, scale)
    return {"size": p.size, "runs": p.most_runs, "note": p.note, "summary": p.summary}


def shared_preset(name: str, scale: str) -> Preset:
    """``load_preset(name, scale)`` without overrides, loaded once per file version and shared: for reading only
    (loading validates every run, seconds for the paper scales' thousands; ``--list``, ``--explain`` and the
    settings checks read the same scales)."""
    path = preset_path(name)
    return _shared(name, scale, str(path), path.stat().st_mtime_ns)


@lru_cache(maxsize=64)
def _shared(name: str, scale: str, path: str, mtime_ns: int) -> Preset:
    return load_preset(name, scale)


def preset_path(name: str) -> Path:
    """The file of preset ``name`` (a UserError naming the presets when there is none)."""
    path = preset_dir() / f"{name}.yaml"
    if not path.exists():
        raise UserError(f"reproduce: unknown preset {name!r}; allowed: {', '.join(preset_names())}")
    return path


def read_preset(name: str) -> dict[str, Any]:
    """A preset file's mapping, parsed once per file version (``--list`` reads every scale of every preset, and
    the YAML parser took 3.5 of its 6 s); a copy, so a caller's edits never reach the cache."""
    path = preset_path(name)
    return copy.deepcopy(_parse(path, path.stat().st_mtime_ns))


@lru_cache(maxsize=64)
def _parse(path: Path, mtime_ns: int) -> dict[str, Any]:
    return load_yaml(path)


def recipe(name: str) -> dict[str, Any]:
    """A preset's shared top-level ``model`` and ``train`` settings (the ones its studies measured to work)."""
    raw = read_preset(name)
    return {"model": raw.get("model") or {}, "train": raw.get("train") or {}}


def load_preset(name: str, scale: str, overrides: list[str] | None = None) -> Preset:
    raw = read_preset(name)
    preset_figures(name, raw)  # a wrong figures list fails before any training
    scales = raw.get("scales", {})
    if scale not in scales:
        raise UserError(f"--scale: unknown scale {scale!r} for {name}; allowed: {', '.join(scales)}")
    body = scales[scale]
    sweeps = [expand_sweep(apply_overrides(s, overrides or [])) for s in body.get("sweeps", [])]
    studies = [study_from_mapping(s, f"{name}.scales.{scale}.studies[{i}]", overrides)
               for i, s in enumerate(body.get("studies", []))]
    return Preset(name, raw.get("title", name), raw.get("reproduces", ""), scale, body.get("note", ""), sweeps, raw,
                  studies, body.get("summary"), list(overrides or []))
