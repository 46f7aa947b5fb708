"""Every selected run by its store id, with its status and final metrics; a click shows it."""

from __future__ import annotations

from ...draw.svg import esc, fmt, loss_text
from ..html import ReportContext, section
from ._common import ensure_runs


@section("runs", "Runs", order=90)
def render(ctx: ReportContext) -> str | None:
    if not ctx.runs:
        return None
    data = ensure_runs(ctx)
    head = ("<tr><th>run</th><th>task</th><th>model</th><th class='num'>layers</th><th class='num'>seed</th>"
            "<th>status</th><th class='num'>step</th><th class='num'>accuracy</th><th class='num'>loss</th>"
            "<th class='num'>chance</th><th>note</th></tr>")
    rows = []
    for record in ctx.runs:
        run = data[record["id"]]
        final = record["final"] or {}
        note = record["error"] or ""
        rows.append(
            f'<tr data-run="{esc(run["id"])}"><td><a class="mono" href="#run={esc(run["id"])}">{esc(run["id"])}</a>'
            f'</td><td>{esc(run["label"])}</td><td>{esc(record["model"])}</td>'
            f'<td class="num">{esc(run["layers"])}</td><td class="num">{esc(run["seed"])}</td>'
            f'<td class="status-{esc(record["status"])}">{esc(record["status"])}</td>'
            f'<td class="num">{esc(record["step"])}</td><td class="num">{fmt(final.get("accuracy"))}</td>'
            f'<td class="num">{loss_text(final.get("loss"))}</td><td class="num">{fmt(final.get("chance"))}</td>'
            f"<td>{esc(note)}</td></tr>")
    return (f'<p class="legend">{len(rows)} runs. <code>depthlab runs --store {esc(ctx.store.root)}</code> lists '
            'the same ids; every other command takes them too.</p>'
            '<p><input id="run-filter" type="search" placeholder="filter: words that must all appear in the row" '
            'aria-label="filter runs"></p>'
            f'<table class="runs" id="all-runs"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>')
