"""One self-contained HTML report of a store: ``build_report(store, out)``, and the section registry.

The page needs nothing but itself: its stylesheet and script are inlined (``report.assets``), every plot is
inline SVG (``depthlab.draw.svg``, or drawn by the page's script from the page's JSON data), and a
Content-Security-Policy forbids fetching anything, so it opens offline in any browser and sends no request.

**Sections.** The page is a list of sections, each a function ``render(ctx) -> str | None`` returning an HTML
fragment (or None to leave the section out), registered with ``@section(id, title, order)``. Every module in
the package ``depthlab.report.sections`` is imported when a report is built, so an analysis adds its section
by adding one file there::

    # src/depthlab/report/sections/ablation.py
    from depthlab.report.html import ReportContext, section

    @section("ablation", "Head ablations", order=40)
    def render(ctx: ReportContext) -> str | None:
        rows = [r for r in ctx.detailed if ...]     # ctx.store, ctx.runs: the store and the selected runs
        if not rows:
            return None
        return ctx.figure(some_svg, "ablation", "what the figure shows")  # SVG and PNG buttons included

A section escapes every text it writes (``depthlab.draw.svg.esc``; ``depthlab.draw.svg`` also draws heat
maps and line charts), reads the selected runs through ``ctx.runs`` (streamed from the store at each pass: a store
of 100,000 runs is never held), ``ctx.detailed`` (the few runs given detail of their own, held) or
``ctx.reading`` (what one pass gathered: counts, statuses, each cell's numbers), may put data for the page's
script in ``ctx.data`` and inert HTML in
``ctx.add_template``, shares work through ``ctx.cached`` and ``ctx.metrics``, and calls ``ctx.tick(what)`` per
run it works through (the progress bar). Built-in orders: the gallery's seed pages 1-1.3 (``sections/gallery``:
every figure ``depthlab reproduce`` drew into the store beside the seed's caption), capability 10, training curves
20, attention 30, runs 90; an analysis section fits between 30 and 90.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.runs import iter_selected
from ..draw.svg import esc
from ..errors import UserError
from ..store import Store, atomic_write_bytes, reproductions, to_json
from .assets import CSS, JS
from .gather import Gathered, SelectedRuns, gather

Progress = Callable[[str, int, int], None]  # (what is being done, units done, units in all)
DETAILED_RUNS = 200  # runs given a row, curves and attention maps of their own; the others count in their cell
CURVE_RUNS = 10  # runs of a cell whose curves a cell's figures draw
TIP_RUNS = 12  # run ids (and accuracies) a cell's tooltip names; the rest are counted
CELL_RUNS = max(CURVE_RUNS, TIP_RUNS)  # the first runs of each cell a report keeps the ids of

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
       "base-uri 'none'; form-action 'none'")


@dataclass(frozen=True)
class Section:
    """A part of the report: ``render(ctx)`` returns its HTML (without the heading) or None to be left out."""

    id: str
    title: str
    render: Callable[[ReportContext], str | None]
    order: float = 50.0


_SECTIONS: dict[str, Section] = {}


def register_section(sec: Section) -> Section:
    """Add (or replace, by id) a section of every report built from now on."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", sec.id):
        raise ValueError(f"section id {sec.id!r}: use lowercase letters, digits, '-' and '_'")
    _SECTIONS[sec.id] = sec
    return sec


def section(id: str, title: str, order: float = 50.0) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn(ctx) -> str | None`` as the report section ``id`` titled ``title``."""

    def deco(fn: Callable[[ReportContext], str | None]) -> Callable[[ReportContext], str | None]:
        register_section(Section(id, title, fn, order))
        return fn

    return deco


def load_sections() -> list[Section]:
    """Every registered section, ordered; first imports every module of ``depthlab.report.sections``."""
    from . import sections as package

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    return sorted(_SECTIONS.values(), key=lambda s: (s.order, s.id))


def safe_name(text: str) -> str:
    """A file-name-safe version of ``text`` (for downloaded figures)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-") or "figure"


@dataclass
class ReportContext:
    """What sections read and write while a report is built."""

    store: Store
    runs: Iterable[dict[str, Any]]  # the selected runs' store records (id, task, model, config, status, final, …):
    # in a report, read again from the store, a page at a time, each time they are iterated (``gather.SelectedRuns``)
    examples: int = 2  # attention examples per run
    filter: str | None = None
    data: dict[str, Any] = field(default_factory=dict)  # JSON for the page's script (sections may add keys)
    templates: list[str] = field(default_factory=list)
    tick: Callable[[str], None] = lambda what: None  # a section calls it once per run it works through
    gathered: Gathered | None = None  # the runs read once (``report.gather``); read from ``runs`` when not given
    _metrics: dict[str, dict[str, dict[str, list]]] = field(default_factory=dict)
    _cache: dict[str, Any] = field(default_factory=dict)

    @property
    def reading(self) -> Gathered:
        """The selected runs read once: their count and statuses, their cells' numbers, the detailed runs."""
        if self.gathered is None:
            self.gathered = gather(self.runs, DETAILED_RUNS, CELL_RUNS)
        return self.gathered

    @property
    def run_ids(self) -> list[str]:
        return [r["id"] for r in self.runs]

    def run(self, run_id: str) -> dict[str, Any] | None:
        """A detailed run's store record (None for any other run: a store of 100,000 runs is not held)."""
        by_id = self.cached("runs-by-id", lambda: {r["id"]: r for r in self.detailed})
        return by_id.get(run_id)

    @property
    def detailed(self) -> list[dict[str, Any]]:
        """The runs given a row, curves and attention maps of their own: every run, or where there are more than
        :data:`DETAILED_RUNS`, that many in their order: each cell's first run, then each cell's second, and so on
        (``report.gather``)."""
        return self.reading.detailed

    @property
    def left_out(self) -> int:
        """How many selected runs have no detail of their own (a store of 100,000 runs: all but
        :data:`DETAILED_RUNS`); they still count in their cell's numbers."""
        return self.reading.count - len(self.detailed)

    def metrics(self, run_id: str) -> dict[str, dict[str, list]]:
        """``store.metric_columns(run_id)``, read once per report."""
        if run_id not in self._metrics:
            self._metrics[run_id] = self.store.metric_columns(run_id)
        return self._metrics[run_id]

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per report under ``key`` (sections share work, e.g. the capability grids)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def add_template(self, template_id: str, html: str) -> None:
        """Inert HTML the page's script clones on demand (``<template id=…>``)."""
        self.templates.append(f'<template id="{esc(template_id)}">{html}</template>')

    @staticmethod
    def figure(svg: str, name: str, caption: str = "", caption_html: str | None = None) -> str:
        """An SVG figure with its caption and download buttons (SVG, PNG). ``caption`` is escaped."""
        text = caption_html if caption_html is not None else esc(caption)
        return (f'<figure class="fig" data-name="{esc(safe_name(name))}">{svg}<figcaption><span>{text}</span>'
                '<span class="dl"><button type="button" data-dl="svg" title="download as SVG">SVG</button> '
                '<button type="button" data-dl="png" title="download as PNG">PNG</button></span>'
                "</figcaption></figure>")


# ------------------------------------------------------------------------------------------------ page


def _json_for_script(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</script>``, no ``<!--``)."""
    text = to_json(obj, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("depthlab")
    except Exception:  # not installed (running from a checkout)
        return "dev"


def render_page(ctx: ReportContext, parts: list[tuple[Section, str]], title: str) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(ctx.reading.statuses.items()))
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    nav = "".join(f'<a href="#sec-{esc(s.id)}">{esc(s.title)}</a>' for s, _ in parts)
    body = "".join(f'<section class="report-section" id="sec-{esc(s.id)}"><h2>{esc(s.title)}</h2>{html}</section>'
                   for s, html in parts)
    chosen = f" matching <code>--runs {esc(ctx.filter)}</code>" if ctx.filter else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="depthlab {esc(_version())}">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>{esc(title)}</h1>"
        f"<p>store <code>{esc(ctx.store.root)}</code> · {ctx.reading.count} runs{chosen} ({esc(counts)}) · "
        f"generated {esc(now)} by depthlab {esc(_version())}</p>"
        f"<p>Every run is named by its store id: <code>depthlab runs --store {esc(ctx.store.root)} --json</code> "
        "lists them.</p></header>"
        f"<nav>{nav}</nav><main>{body}</main>"
        '<div id="tip" role="tooltip" hidden></div>'
        + "".join(ctx.templates)
        + f'<script type="application/json" id="depthlab-data">{_json_for_script(ctx.data)}</script>'
        f"<script>{JS}</script></body></html>\n"
    )


def build_report(store: Store, out: str | Path, runs: str | None = None, examples: int = 2,
                 title: str = "depthlab report", progress: Progress | None = None) -> dict[str, Any]:
    """Write the report of ``store``'s runs matching the ``runs`` filter to ``out``.

    Returns ``{"report": path, "runs": n, "sections": [ids of the sections the page has]}``.
    """
    gathered = gather(iter_selected(store, runs), DETAILED_RUNS, CELL_RUNS)
    if not gathered.count:
        if runs:
            raise UserError(f"--runs: no run in {store.root} matches {runs!r} (see `depthlab runs`)")
        if not reproductions(store.root):  # a preset without runs (seed003-widths) still has its figures
            raise UserError(f"--store: {store.root} has no runs yet; train some with `depthlab sweep` or "
                            "`depthlab reproduce` first")
    sections = load_sections()
    ctx = ReportContext(store, SelectedRuns(store, runs, gathered.count), examples=examples, filter=runs,
                        gathered=gathered)
    total = len(gathered.detailed) + len(sections)  # the attention section works through each detailed run
    done = 0

    def tick(what: str) -> None:
        nonlocal done
        done = min(done + 1, total)
        if progress:
            progress(what, done, total)

    ctx.tick = tick
    if progress:
        progress("reading runs", 0, total)
    parts: list[tuple[Section, str]] = []
    for sec in sections:
        html = sec.render(ctx)
        if html is not None:
            parts.append((sec, html))
        tick(sec.title)
    if progress:
        progress("writing", total, total)
    path = Path(out).expanduser().absolute()
    atomic_write_bytes(path, render_page(ctx, parts, title).encode("utf-8"))
    return {"report": str(path), "runs": gathered.count, "sections": [s.id for s, _ in parts]}
