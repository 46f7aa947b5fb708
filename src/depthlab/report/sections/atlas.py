"""The depth atlas (``depthlab atlas``): per scale kept in the store, the table of trained minimum depths beside the
seeds' bounds with the disagreements marked, and the heat map of each model family."""

from __future__ import annotations

from typing import Any

from ...analysis.atlas import MARKS, atlas_table
from ...draw.svg import esc
from ...store import atlases
from ..html import ReportContext, section
from .gallery import embedded_png

MARK_CLASS = {"below_lower": "warn", "above_upper": "warn"}


def _table(result: dict[str, Any]) -> str:
    """The atlas table as HTML; a marked row's marks in the warning colour, each with its detail as a tooltip."""
    table = atlas_table(result["cells"], "")
    head = "".join(f"<th>{esc(c.header)}</th>" for c in table.columns)
    rows = []
    for cell, row in zip(result["cells"], table.rows, strict=True):
        marks = ", ".join(f'<span class="{MARK_CLASS.get(m["mark"], "muted")}" title="{esc(m["detail"])}">'
                          f'{esc(m["mark"].replace("_", " "))}</span>' for m in cell["marks"])
        rows.append("<tr>" + "".join(f"<td>{esc(text)}</td>" for text in row[:-1]) + f"<td>{marks}</td></tr>")
    return (f'<table class="runs"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            f'<p class="muted">{esc(table.caption)}</p>')


def _scale(result: dict[str, Any]) -> str:
    marked = "".join(f"<li><b>{esc(MARKS[mark])}</b>: {esc('; '.join(labels))}</li>"
                     for mark, labels in result["marks"].items() if labels and mark in MARKS)
    left = "".join(f"<li>{esc(item.get('task') or item['family'])}: {esc(item['why'])}</li>"
                   for item in result.get("left_out", []))
    drawn = " Drawn from the store alone (--finished-only)." if result.get("finished_only") else ""
    facts = (f'<p class="legend">Scale <b>{esc(result["scale"])}</b>: {esc(result.get("note", ""))} Target '
             f'{esc(result["target"])} for a strict majority of seeds; {esc(result.get("runs", "?"))} runs; '
             f'<code>{esc(result.get("command") or "depthlab atlas --scale " + result["scale"])}</code> '
             f'({esc(result.get("seconds", "?"))} s).{drawn}</p>')
    figures = "".join(embedded_png(path) for path in result.get("figures", {}).values())
    return (f'<article class="gallery-item" id="atlas-{esc(result["scale"])}">{facts}'
            f'{f"<ul>{marked}</ul>" if marked else "<p>No cell disagrees with its bounds.</p>"}{_table(result)}'
            f'<div class="gallery-figs">{figures}</div>{f"<p>Left out:</p><ul>{left}</ul>" if left else ""}</article>')


@section("atlas", "Depth atlas: trained depth against the theorems", order=12)
def render(ctx: ReportContext) -> str | None:
    results = ctx.cached("atlases", lambda: atlases(ctx.store.root))
    if not results:
        return None
    intro = ('<p class="legend">For every task and model family of the atlas: the smallest depth at which most seeds '
             "reach the target (trained), beside the binding lower bound (an impossibility: fewer layers are never "
             "exact) and the smallest construction (upper: that many layers suffice) the seeds state for that model. "
             "Marked: trained below the lower bound (investigate), above the construction (optimisation falls "
             "short), not reached. Hover a mark for its numbers.</p>")
    return intro + "".join(_scale(r) for r in results)
