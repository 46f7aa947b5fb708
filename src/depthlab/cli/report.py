"""``depthlab report``: one self-contained HTML page of a store's runs (see ``depthlab.report.html``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

from .app import app
from .common import JsonOpt, StoreOpt, check_output, emit, open_store, progress_bar


@app.command("report")
def report(
    store: StoreOpt = None,
    out: Annotated[Path, typer.Option("--out", help="the HTML file to write")] = Path("report.html"),
    runs: Annotated[
        str | None,
        typer.Option("--runs", help="only these runs: comma-separated field=value terms (task=icqa,layers=2|3, "
                     "status=done, seed=0, tag=x, model.heads=2, task.k=3) or run ids / id prefixes"),
    ] = None,
    examples: Annotated[
        int, typer.Option("--examples", min=0, help="attention examples per task (0: no attention maps)")
    ] = 2,
    title: Annotated[str, typer.Option("--title", help="the page's title")] = "depthlab report",
    json_out: JsonOpt = False,
) -> None:
    """Write one self-contained HTML report: capability heat map, training curves, attention maps, runs."""
    from ..report.html import build_report

    check_output(out, "--out", store=store)
    the_store = open_store(store, readonly=True)
    columns = [TextColumn("report"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}")]
    try:
        with progress_bar(columns, "reading runs", None, json_out) as shown:
            advance = None if shown is None else (
                lambda what, done, total: shown[0].update(shown[1], completed=done, total=total, description=what))
            result = build_report(the_store, out, runs=runs, examples=examples, title=title, progress=advance)
    finally:
        the_store.close()
    if json_out:
        emit(result)
        return
    print(f"report: {result['report']} ({result['runs']} runs; sections: {', '.join(result['sections'])})")
