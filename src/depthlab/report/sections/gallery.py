"""The gallery: a section per seed with every figure ``depthlab reproduce`` drew into this store, beside the seed's
own caption of the figure it reproduces (``depthlab.captions``).

Which preset drew which file is read from the store's manifests (``depthlab.store.reproduced``, written by
``reproduce``); the PNG files are embedded in the page as ``data:`` images, so the report stays one file. A seed's
section also lists the presets of that seed not yet in the store (with the command that makes them) and the seed's
figures no preset draws. The gallery is left out of a report of a store ``reproduce`` never wrote into.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from ...bounded import Unreadable, read_file
from ...captions import CAPTIONS, SEEDS, seed_items
from ...draw.svg import esc
from ...store import reproductions
from ..html import ReportContext, Section, register_section, safe_name

MAX_EMBEDDED_BYTES = 8_000_000  # a larger PNG is named, not embedded


def entries(ctx: ReportContext) -> list[dict[str, Any]]:
    """The store's reproduce manifests, read once per report."""
    return ctx.cached("reproductions", lambda: reproductions(ctx.store.root))


def _known_presets() -> dict[str, list[str]]:
    """Every preset file's seed figures (a preset file that does not load is left out of the gallery's hints)."""
    from ...errors import UserError
    from ...sweeps.presets import preset_figures_of, preset_names

    out = {}
    for name in preset_names():
        try:
            out[name] = preset_figures_of(name)
        except UserError:
            continue
    return out


def embedded_png(path: str) -> str:
    """The PNG at ``path`` embedded in the page (a `data:` image), read bounded (``depthlab.bounded``): a missing
    file, one past MAX_EMBEDDED_BYTES, or something else in its place (a device, a FIFO, a folder) is named
    instead."""
    file = Path(path)
    if not file.exists() and not file.is_symlink():
        return f'<p class="muted">missing file <code>{esc(path)}</code> (moved or deleted since it was drawn)</p>'
    try:
        content = read_file(file, MAX_EMBEDDED_BYTES, "figure")
    except Unreadable as e:
        return f'<p class="muted">not embedded: {esc(e.detail)}</p>'
    data = base64.b64encode(content).decode("ascii")
    return (f'<figure class="gallery-png"><img src="data:image/png;base64,{data}" alt="{esc(file.name)}">'
            f"<figcaption><code>{esc(file.name)}</code></figcaption></figure>")


def _card(entry: dict[str, Any], seed: str) -> str:
    keys = [k for k in entry.get("figures", []) if k in CAPTIONS and CAPTIONS[k].seed == seed]
    quotes = "".join(f'<blockquote class="seed-caption" data-figure="{esc(k)}"><b>{esc(CAPTIONS[k].label)}.</b> '
                     f"{esc(CAPTIONS[k].caption)}</blockquote>" for k in keys)
    overrides = entry.get("overrides") or []
    changed = (f' <span class="warn">Changed from the preset: <code>{esc(" ".join(overrides))}</code>.</span>'
               if overrides else "")
    runs = entry.get("run_ids") or []
    partial = entry.get("partial")
    drawn = (f' <span class="warn">Partial: drawn with <code>--finished-only</code> from {esc(partial[0])} of '
             f'{esc(partial[1])} runs.</span>' if partial else "")
    facts = (f'<p class="legend">Drawn by <code>{esc(entry.get("command", ""))}</code> '
             f'({esc(entry.get("finished", "?"))}, {esc(entry.get("seconds", "?"))} s'
             f'{f", {len(runs)} runs" if runs else ""}).{changed}{drawn} Scale: {esc(entry.get("note", ""))}</p>')
    images = "".join(embedded_png(p) for p in entry.get("files", [])) or '<p class="muted">no figure file recorded</p>'
    title = f'{", ".join(CAPTIONS[k].label for k in keys)} — {entry["preset"]} ({entry["scale"]})'
    return (f'<article class="gallery-item" id="{esc(anchor(entry))}" data-preset="{esc(entry["preset"])}" '
            f'data-scale="{esc(entry["scale"])}"><h3>{esc(title)}</h3><div class="gallery-body">'
            f'<div class="gallery-figs">{images}</div><div class="gallery-text"><p class="muted">The seed\'s '
            f"caption:</p>{quotes}{facts}</div></div></article>")


def anchor(entry: dict[str, Any]) -> str:
    return f"fig-{safe_name(entry['preset'])}-{safe_name(entry['scale'])}"


def render_seed(ctx: ReportContext, seed: str) -> str | None:
    """Seed ``seed``'s page: its reproduced figures with the seed's captions, then what is missing."""
    made = entries(ctx)
    if not made:
        return None
    mine = [e for e in made if any(k in CAPTIONS and CAPTIONS[k].seed == seed for k in e.get("figures", []))]
    presets = ctx.cached("known-presets", _known_presets)
    done = {e["preset"] for e in mine}
    todo = {name: [k for k in figs if CAPTIONS[k].seed == seed] for name, figs in presets.items() if name not in done}
    todo = {name: figs for name, figs in todo.items() if figs}
    drawn = {k for figs in presets.values() for k in figs}
    undrawn = [item.label for item in seed_items(seed) if item.key not in drawn]
    parts = [f'<p class="legend"><i>{esc(SEEDS[seed])}</i>. {len(mine)} figure set{"s" if len(mine) != 1 else ""} '
             "in this store, each beside the seed's own caption of what it reproduces.</p>"]
    if mine:
        links = "".join(f'<a href="#{esc(anchor(e))}">{esc(e["preset"])} ({esc(e["scale"])})</a>' for e in mine)
        parts.append(f'<nav class="seed-nav" aria-label="seed {esc(seed)} figures">{links}</nav>')
        parts += [_card(e, seed) for e in mine]
    if todo:
        items = "".join(f"<li><code>depthlab reproduce {esc(name)} --store {esc(ctx.store.root)}</code>: "
                        f"{esc(', '.join(CAPTIONS[k].label for k in figs))}</li>" for name, figs in todo.items())
        parts.append(f'<p class="muted">Not in this store yet:</p><ul class="todo">{items}</ul>')
    if undrawn:
        parts.append(f'<p class="muted">No preset draws: {esc(", ".join(undrawn))}.</p>')
    return "".join(parts)


def _register() -> None:
    for i, seed in enumerate(SEEDS):
        register_section(Section(f"seed-{seed}", f"Seed {seed}", lambda ctx, s=seed: render_seed(ctx, s),
                                 order=1 + i / 10))


_register()
