"""``depthlab report``: one self-contained HTML page of a store's runs (see ``depthlab.report.html``).

:func:`register` adds the command to a Typer app. ``--json`` prints exactly one JSON object to stdout;
user mistakes raise :class:`depthlab.errors.UserError` (the main CLI prints it on one line and exits 2).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from depthlab.errors import UserError


def _emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, allow_nan=False, default=str) + "\n")
    sys.stdout.flush()


def report(
    store: Annotated[
        Path | None, typer.Option("--store", help="store folder [$DEPTHLAB_STORE, ./depthlab-runs]")
    ] = None,
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
    json_out: Annotated[bool, typer.Option("--json", help="print one JSON object to stdout and nothing else")] = False,
) -> None:
    """Write one self-contained HTML report: capability heat map, training curves, attention maps, runs."""
    from depthlab.report.html import build_report
    from depthlab.store import Store, default_store_path

    root = store or default_store_path()
    if not (root / "depthlab.sqlite").exists():
        raise UserError(f"--store: no depthlab store at {root} (train runs with `depthlab sweep --store {root}`)")
    if out.exists() and out.is_dir():
        raise UserError(f"--out: {out} is a folder; name the HTML file to write, e.g. {out / 'report.html'}")
    the_store = Store(root)
    err = Console(stderr=True)
    try:
        if json_out or not err.is_terminal:
            result = build_report(the_store, out, runs=runs, examples=examples, title=title)
        else:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            columns = [TextColumn("report"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       TextColumn("{task.description}")]
            with Progress(*columns, console=err, transient=False) as bar:
                task = bar.add_task("reading runs", total=None)

                def advance(what: str, done: int, total: int) -> None:
                    bar.update(task, completed=done, total=total, description=what)

                result = build_report(the_store, out, runs=runs, examples=examples, title=title, progress=advance)
    finally:
        the_store.close()
    if json_out:
        _emit(result)
        return
    print(f"report: {result['report']} ({result['runs']} runs; sections: {', '.join(result['sections'])})")


def register(app: typer.Typer) -> None:
    """Add ``report`` to ``app``."""
    app.command("report")(report)
