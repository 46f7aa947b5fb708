"""Every selected run by its store id, with its status and final metrics; a click shows it. Beside task, model,
depth and seed, a column for each config field in which runs of one task, model and depth differ
(``depthlab.cells.list_fields``): runs of two cells never look like seeds of one."""

from __future__ import annotations

from ...cells import short_names, value_text
from ...draw.svg import esc, fmt, loss_text
from ..html import ReportContext, section
from ._common import ensure_runs, report_fields


@section("runs", "Runs", order=90)
def render(ctx: ReportContext) -> str | None:
    if not ctx.reading.count:
        return None
    data = ensure_runs(ctx)
    fields = report_fields(ctx)
    names = short_names(fields)
    extra = "".join(f"<th class='num' title='{esc(f)}'>{esc(names[f])}</th>" for f in fields)
    head = ("<tr><th>run</th><th>task</th><th>model</th><th class='num'>layers</th>" + extra +
            "<th class='num'>seed</th><th>status</th><th class='num'>step</th><th class='num'>accuracy</th>"
            "<th class='num'>loss</th><th class='num'>chance</th><th>note</th></tr>")
    rows = []
    for record in ctx.detailed:
        run = data[record["id"]]
        final = record["final"] or {}
        note = record["error"] or ""
        values = run["settings"]
        settings = "".join(f'<td class="num">{esc(value_text(values.get(f)))}</td>' for f in fields)
        rows.append(
            f'<tr data-run="{esc(run["id"])}"><td><a class="mono" href="#run={esc(run["id"])}">{esc(run["id"])}</a>'
            f'</td><td>{esc(run["label"])}</td><td>{esc(record["model"])}</td>'
            f'<td class="num">{esc(run["layers"])}</td>{settings}<td class="num">{esc(run["seed"])}</td>'
            f'<td class="status-{esc(record["status"])}">{esc(record["status"])}</td>'
            f'<td class="num">{esc(record["step"])}</td><td class="num">{fmt(final.get("accuracy"))}</td>'
            f'<td class="num">{loss_text(final.get("loss"))}</td><td class="num">{fmt(final.get("chance"))}</td>'
            f"<td>{esc(note)}</td></tr>")
    varying = (f" Beside the seed, runs of one task and depth differ in: {esc(', '.join(fields))}." if fields
               else "")
    listed = (f"{len(rows):,} of {ctx.reading.count:,} runs: each cell's first run, then each cell's second, and so "
              f"on; the other {ctx.left_out:,} count in their cells' numbers above and are listed by <code>depthlab "
              f"runs --json</code>." if ctx.left_out else f"{len(rows)} runs.")
    return (f'<p class="legend">{listed}{varying} <code>depthlab runs --store {esc(ctx.store.root)}</code> '
            'lists the same ids; every other command takes them too.</p>'
            '<p><input id="run-filter" type="search" placeholder="filter: words that must all appear in the row" '
            'aria-label="filter runs"></p>'
            f'<table class="runs" id="all-runs"><thead>{head}</thead><tbody>{"".join(rows)}</tbody></table>')
