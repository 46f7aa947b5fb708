"""Ready studies: one YAML file per reproduced figure (``configs/NAME.yaml``), each with a quick and a paper scale.

A preset holds ``title``, ``reproduces`` (the seed's figure or section), ``scales`` and ``summary``; each scale
is a list of ``sweeps`` (sweep mappings as in a sweep file) and a ``note`` saying what it shrinks. ``summary``
names the function that turns the finished runs into the preset's table and figure, as ``module:function``
(default: the capability table of ``depthlab.analysis.capability:depth_summary``); it is called as
``function(store, run_ids, figure_path, title) -> (json_dict, rich_renderable)``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..config import RunConfig, apply_overrides, expand_sweep, load_yaml
from ..errors import UserError


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

    @property
    def runs(self) -> list[RunConfig]:
        return [run for sweep in self.sweeps for run in sweep]

    def summarize(self, store: Any, run_ids: list[str], figure: Path) -> tuple[dict[str, Any], Any]:
        module, _, function = self.raw.get("summary", "depthlab.analysis.capability:depth_summary").partition(":")
        return getattr(importlib.import_module(module), function)(store, run_ids, figure, self.title)


def load_preset(name: str, scale: str, overrides: list[str] | None = None) -> Preset:
    path = preset_dir() / f"{name}.yaml"
    if not path.exists():
        raise UserError(f"reproduce: unknown preset {name!r}; allowed: {', '.join(preset_names())}")
    raw = load_yaml(path)
    scales = raw.get("scales", {})
    if scale not in scales:
        raise UserError(f"--scale: unknown scale {scale!r} for {name}; allowed: {', '.join(scales)}")
    body = scales[scale]
    sweeps = [expand_sweep(apply_overrides(s, overrides or [])) for s in body["sweeps"]]
    return Preset(name, raw.get("title", name), raw.get("reproduces", ""), scale, body.get("note", ""), sweeps, raw)
