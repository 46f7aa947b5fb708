"""Seed settings against ours: what each preset's paper scale takes from its seed, and where it differs, why.

A preset's ``settings:`` list says, for the paper scale, one setting at a time:

- ``name``: the setting in words ("optimizer", "W_QK at initialisation");
- ``field``: the dotted run field it is (``train.optimizer``), ``options.NAME`` for an option the scale passes
  to its summary (``options.accept``), or null for a setting no run field holds;
- ``where``: optionally, the runs it is about (``{task.name: ictm}``; a list of values matches any of them);
- ``seed``: the seed's own value, with ``section`` (where the seed gives it) and ``quote`` (its words), or null
  when the seed names none (``quote`` then shows what it does say);
- ``grid: true`` when the value is the set of values the runs sweep (``train.lr`` over App. H's grid), not the
  value every run has;
- ``ours``: only where depthlab's paper scale differs from the seed, with ``why`` (the measurement or reason
  that forced it) and ``seed_set``: the ``--set`` changes that run the seed's own value instead;
- ``adds: true`` (with ``grid``): ours sweeps the seed's values and more (a comparison the seed does not run);
  the seed's own runs are among ours, so no ``seed_set`` is needed;
- ``seed_text`` / ``ours_text``: how to show a value when the raw one needs words ("uniform [0, 1)").

An entry ``{include: PRESET}`` takes that preset's settings too, except for the fields this preset's own settings
name (its own replace every included setting of that field); included settings about runs this preset does not
have are skipped. :func:`check` holds a paper scale to its settings (``tests/test_seed_settings.py`` runs it for every
preset); :func:`explain` is ``depthlab reproduce NAME --explain``; :func:`markdown` writes the documentation's table
"Seed settings against ours" (docs/how-to/presets.md) from the same data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..config import EXECUTION_FIELDS, UNSET_LEFT_OUT, RunConfig
from ..errors import UserError
from ..fields import flat_fields
from .climb import study_runs
from .presets import Preset, load_preset, preset_path, read_preset, shared_preset

KEYS = {"name", "field", "where", "seed", "seed_text", "section", "quote", "grid", "adds", "ours", "ours_text",
        "why", "seed_set"}
REQUIRED = ("name", "section", "quote")
# Fields a paper scale may set without a setting: bookkeeping that does not change what a run learns.
# Where a run executes (EXECUTION_FIELDS) is left out of its id for the same reason.
BOOKKEEPING = frozenset({"task.name", "model.name", "train.eval_every", "train.eval_examples",
                         "train.keep_checkpoints", *(f"train.{f}" for f in EXECUTION_FIELDS)})
_SAME = object()


@dataclass(frozen=True)
class Setting:
    """One setting of a preset's paper scale against its seed (see the module docstring)."""

    name: str
    field: str | None
    seed: Any
    section: str
    quote: str
    where: dict[str, Any] = field(default_factory=dict)
    grid: bool = False
    adds: bool = False
    ours: Any = _SAME
    why: str = ""
    seed_set: tuple[str, ...] = ()
    seed_text: str | None = None
    ours_text: str | None = None
    preset: str = ""  # the preset whose file holds it (an included setting keeps its own)
    index: int = 0  # its place in that file's list

    @property
    def differs(self) -> bool:
        return self.ours is not _SAME

    @property
    def expected(self) -> Any:
        """What the paper scale's runs hold: depthlab's value where it differs, else the seed's."""
        return self.ours if self.differs else self.seed

    def show_seed(self) -> str:
        if self.seed_text is not None:
            return self.seed_text
        return "not given" if self.seed is None else show(self.seed)

    def show_ours(self) -> str:
        if self.ours_text is not None:
            return self.ours_text
        return show(self.expected)

    def matches(self, flat: dict[str, Any]) -> bool:
        """Whether a run (its flat fields) is one this setting is about: it has the field and fits ``where``."""
        if self.field is not None and self.field not in flat:
            return False
        return all(flat.get(key) in (want if isinstance(want, list) else [want]) for key, want in self.where.items())


def show(value: Any) -> str:
    """A setting's value in a table: numbers plainly, lists in brackets, text as it is."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


def _parse(name: str, i: int, raw: Any) -> Setting:
    where = f"{name}.settings[{i}]"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: must be a mapping with name, field, seed, section and quote")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise UserError(f"{where}.{unknown[0]}: unknown key; allowed: {', '.join(sorted(KEYS))}")
    missing = [k for k in (*REQUIRED, "seed") if k not in raw]
    if missing:
        raise UserError(f"{where}.{missing[0]}: required")
    differs = "ours" in raw
    if differs and not str(raw.get("why") or "").strip():
        raise UserError(f"{where}.why: required where ours differs from the seed (the measurement or reason)")
    if differs and raw["seed"] is not None and raw.get("field") and not raw.get("seed_set") and not raw.get("adds"):
        raise UserError(f"{where}.seed_set: required where ours differs: the --set changes that run the seed's own")
    filt = raw.get("where") or {}
    if not isinstance(filt, dict):
        raise UserError(f"{where}.where: must map dotted fields to values, e.g. {{task.name: ictm}}")
    return Setting(str(raw["name"]), raw.get("field"), raw["seed"], str(raw["section"]), str(raw["quote"]), filt,
                   bool(raw.get("grid", False)), bool(raw.get("adds", False)), raw["ours"] if differs else _SAME,
                   str(raw.get("why") or ""), tuple(raw.get("seed_set") or ()), raw.get("seed_text"),
                   raw.get("ours_text"), name, i)


def own_settings(name: str) -> list[Setting]:
    """The settings written in preset ``name``'s own file (its ``include:`` entries left out)."""
    raw = read_preset(name).get("settings") or []
    if not isinstance(raw, list):
        raise UserError(f"{name}.settings: must be a list of settings")
    return [_parse(name, i, item) for i, item in enumerate(raw) if not (isinstance(item, dict) and "include" in item)]


def includes(name: str) -> list[str]:
    raw = read_preset(name).get("settings") or []
    return [str(item["include"]) for item in raw if isinstance(item, dict) and "include" in item]


def settings(name: str, _seen: frozenset[str] = frozenset()) -> list[Setting]:
    """Preset ``name``'s settings: its own, then those of the presets it includes (and theirs)."""
    if name in _seen:
        raise UserError(f"{name}.settings: includes itself (through {', '.join(sorted(_seen))})")
    out = own_settings(name)
    mine = {s.field for s in out if s.field}
    for other in includes(name):
        out += [s for s in settings(other, _seen | {name}) if s.field not in mine]
    return out


def _flat(run: RunConfig) -> dict[str, Any]:
    """A run's fields, dotted; train fields left out of its config while unset are there as None."""
    return {**{f"train.{f}": getattr(run.train, f) for f in UNSET_LEFT_OUT}, **flat_fields(run.to_dict())}


def _values(setting: Setting, flats: list[dict[str, Any]]) -> list[Any]:
    return [flat.get(setting.field) for flat in flats if setting.matches(flat)]


def _holds(setting: Setting, values: list[Any], want: Any, seed: bool = False) -> bool:
    if setting.grid and setting.adds and seed:  # the seed's runs are among ours
        return isinstance(want, list) and set(_distinct(want)) <= set(_distinct(values))
    if setting.grid:
        return isinstance(want, list) and _distinct(values) == _distinct(want)
    return all(v == want for v in values)


def _distinct(values: list[Any]) -> list[str]:
    return sorted({repr(v) for v in values})


def _set_by(mapping: dict[str, Any], study: bool = False) -> set[str]:
    """The run fields one sweep or study mapping sets itself (its task, model and train, its grid; a study's
    depths, seeds, widths and varied field)."""
    out = set(flat_fields({k: v for k, v in mapping.items() if k in ("task", "model", "train")}))
    grid = mapping.get("vary" if study else "sweep") or {}
    out |= set(grid)
    for value in grid.get("model", []):  # a grid over whole model mappings
        out |= set(flat_fields({"model": value}))
    if "seed" in mapping or study:
        out.add("seed")
    if study:
        out |= {"model.layers"} | ({"model.width"} if mapping.get("widths") else set())
    return out - {"model"} - BOOKKEEPING


@dataclass(frozen=True)
class _Scale:
    """A paper scale, loaded once per file version and overrides: the preset, every run's flat fields, and per sweep
    and study the fields it sets itself with the indices of its runs."""

    preset: Preset
    flats: list[dict[str, Any]]
    parts: list[tuple[set[str], range]]


def _scale(name: str, overrides: tuple[str, ...] = ()) -> _Scale:
    path = preset_path(name)
    return _load_scale(name, overrides, str(path), path.stat().st_mtime_ns)


@lru_cache(maxsize=32)
def _load_scale(name: str, overrides: tuple[str, ...], path: str, mtime_ns: int) -> _Scale:
    preset = load_preset(name, "paper", list(overrides)) if overrides else shared_preset(name, "paper")
    body = read_preset(name)["scales"]["paper"]
    parts, start = [], 0
    groups = [(_set_by(raw), runs) for raw, runs in zip(body.get("sweeps") or [], preset.sweeps, strict=True)]
    groups += [(_set_by(raw, study=True), study_runs(study))
               for raw, study in zip(body.get("studies") or [], preset.studies, strict=True)]
    flats = []
    for fields, runs in groups:
        flats += map(_flat, runs)
        parts.append((fields, range(start, start + len(runs))))
        start += len(runs)
    return _Scale(preset, flats, parts)


def check(name: str) -> list[str]:
    """What is wrong with preset ``name``'s paper scale against its settings (empty: nothing):

    - a field the paper scale sets that no setting covers for some run;
    - a setting of its own that matches none of its runs, or names a field the runs do not have;
    - runs whose field is not what the setting says (the seed's value, or ours where it differs);
    - a differing setting whose ``seed_set`` does not give the seed's value.
    """
    scale = _scale(name)
    preset, flats = scale.preset, scale.flats
    every = settings(name)
    problems = [f"{name}: setting {s.name!r} ({s.field}): the paper scale's options hold "
                f"{show(preset.options.get(s.field.removeprefix('options.')))}, the setting says {show(s.expected)}"
                for s in every if s.field and s.field.startswith("options.")
                and preset.options.get(s.field.removeprefix("options.")) != s.expected]
    for s in every:
        if s.field is None or s.field.startswith("options."):
            continue
        values = _values(s, flats)
        if not values:
            if s.preset == name:  # an included setting may be about runs this preset does not have
                problems.append(f"{name}: setting {s.name!r} ({s.field}) matches no paper-scale run")
            continue
        if s.adds and not _holds(s, values, s.seed, seed=True):
            problems.append(f"{name}: setting {s.name!r} ({s.field}) adds to the seed's values but lacks some of "
                            f"them: runs hold {_distinct(values)}, the seed {show(s.seed)}")
        if not _holds(s, values, s.expected):
            problems.append(f"{name}: setting {s.name!r} ({s.field}): runs hold {_distinct(values)}, the setting "
                            f"says {show(s.expected)}")
        if s.differs and s.seed is not None and not s.adds:
            got = _values(s, _scale(name, s.seed_set).flats)
            if not got or not _holds(s, got, s.seed):
                problems.append(f"{name}: setting {s.name!r}: --set {' '.join(s.seed_set)} gives "
                                f"{_distinct(got)}, not the seed's {show(s.seed)}")
    for fields, indices in scale.parts:
        for f in sorted(fields):
            mine = [s for s in every if s.field == f]
            uncovered = [flats[i] for i in indices if f in flats[i] and not any(s.matches(flats[i]) for s in mine)]
            if uncovered:
                first = uncovered[0]
                problems.append(f"{name}: field {f} is set by the paper scale but no setting covers it (e.g. a run "
                                f"of task {first.get('task.name')}, model {first.get('model.name')})")
    return problems


def rows(name: str) -> list[dict[str, Any]]:
    """Preset ``name``'s settings as rows (``--explain``, ``--list --json``): the setting, the runs it is about,
    the seed's value with its section and words, depthlab's, whether they differ, why, and the ``--set`` changes
    that run the seed's own."""
    out = []
    for s in applies(name):
        out.append({"setting": s.name, "field": s.field, "where": s.where or None, "seed": s.show_seed(),
                    "section": s.section, "quote": s.quote, "ours": s.show_ours(), "differs": s.differs,
                    "why": s.why or None, "seed_set": list(s.seed_set), "from": s.preset})
    return out


def explain(name: str) -> dict[str, Any]:
    """What ``depthlab reproduce NAME --scale paper --explain --json`` prints."""
    preset = _scale(name).preset
    return {"preset": name, "scale": "paper", "title": preset.title, "reproduces": preset.reproduces,
            "settings": rows(name)}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _where(s: Setting) -> str:
    """``where`` in a few words: ``task=ictm``, ``model=[lstm, mamba], layers=1``."""
    def short(key: str) -> str:
        section, _, rest = key.partition(".")
        return section if rest == "name" else rest or section

    return ", ".join(f"{short(k)}={show(v)}" for k, v in s.where.items())


def applies(name: str) -> list[Setting]:
    """Preset ``name``'s settings that are about its paper-scale runs (an included setting about runs this
    preset does not have is left out; a setting without a field always applies)."""
    flats = _scale(name).flats
    return [s for s in settings(name) if s.field is None or s.preset == name or any(s.matches(f) for f in flats)]


def markdown(names: list[str]) -> str:
    """The documentation's table (docs/how-to/presets.md): every setting where depthlab's paper scale differs from
    its seed or the seed names no value, one row per setting (the presets that share it, through ``include:``,
    listed together), with the ``--set`` changes that run the seed's own."""
    grouped: dict[tuple[str, int], tuple[Setting, list[str]]] = {}
    for name in names:
        for s in applies(name):
            if s.differs:
                key = (s.preset, s.index)
                grouped.setdefault(key, (s, []))[1].append(name)
    lines = ["| presets | setting | the seed | ours | why | the seed's own |", "|---|---|---|---|---|---|"]
    for s, presets in grouped.values():
        setting = s.name + (f" ({_where(s)})" if s.where else "")
        run_seed = " ".join(f"`--set {x}`" for x in s.seed_set) if s.seed_set else "—"
        lines.append(f"| {', '.join(dict.fromkeys(presets))} | {_cell(setting)} | {_cell(s.show_seed())} "
                     f"({_cell(s.section)}) | {_cell(s.show_ours())} | {_cell(s.why)} | {run_seed} |")
    return "\n".join(lines) + "\n"
