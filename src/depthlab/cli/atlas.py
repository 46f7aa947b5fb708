"""``depthlab atlas``: the trained minimum depth of every task and model family beside the theory's bounds."""

from __future__ import annotations

import shlex
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from .app import app
from .common import (
    AddressOpt,
    DeviceOpt,
    ExecutorOpt,
    GroupSizeOpt,
    JsonOpt,
    SetOpt,
    StoreOpt,
    WorkersOpt,
    check_executor,
    check_output,
    console,
    emit,
    open_store,
    run_sweep,
    setup_threads,
    show,
    with_device,
)
from .figures import FormatOpt, vector_format


@app.command()
def atlas(scale: Annotated[str, typer.Option(help="quick (about an hour of one CPU core), medium or paper")]
          = "quick",
          tasks: Annotated[str | None, typer.Option("--tasks", help="only these tasks, e.g. icqa,retrieval")] = None,
          families: Annotated[str | None, typer.Option("--families", help="only these model families, e.g. "
                                                                         "transformer,lstm")] = None,
          finished_only: Annotated[bool, typer.Option("--finished-only", help="train nothing: draw from the runs "
                                                      "already done in the store (missing ones: 'unfinished')")]
          = False,
          plan_only: Annotated[bool, typer.Option("--plan", help="train nothing: list the studies, their bounds' "
                                                  "sources and the most runs they may train")] = False,
          plan_seconds: Annotated[float | None, typer.Option("--plan-seconds", min=1, help="with --plan: also "
                                                             "time a few steps of each group shape here (this "
                                                             "long at most, the other shapes estimated) and "
                                                             "project the wall time")] = None,
          set_: SetOpt = None, store: StoreOpt = None,
          out: Annotated[Path | None, typer.Option(help="folder for the heat maps (default: <store>/figures)")]
          = None,
          format_: FormatOpt = "png", group_size: GroupSizeOpt = None, executor: ExecutorOpt = "local",
          address: AddressOpt = None, device: DeviceOpt = None, workers: WorkersOpt = None,
          json_out: JsonOpt = False) -> None:
    """For every task and model family of a scale: the trained minimum depth over the task's sizes beside the
    seeds' bounds (construction: upper; impossibility: lower), the disagreements marked, a heat map per family.

    An atlas is a set of capability studies: runs already in the store (from any preset or capability command
    with the same config) are reused, a stopped atlas resumes, --executor ray spreads it over a cluster, and
    --finished-only redraws it from what is done.
    """
    from ..api.atlas import run_atlas
    from ..sweeps.atlas import load_atlas

    check_executor(executor, address)
    if plan_seconds is not None and not plan_only:
        raise UserError("--plan-seconds: only with --plan (depthlab atlas --plan --plan-seconds 120)")
    vector = vector_format(format_)
    check_output(out, "--out", folder=True, store=store)  # before any training
    plan = load_atlas(scale, tasks, families, with_device(set_, device, executor, workers))
    if plan_only:
        timing = None
        if plan_seconds is not None:
            from ..api.atlas import plan_time
            from ..store import default_store_path

            setup_threads()
            timing = plan_time(plan, store or default_store_path(), group_size, plan_seconds)
        _show_plan(plan, json_out, timing)
        return
    threads = setup_threads()
    db = open_store(store, create=not finished_only)  # redrawing what is done: a mistyped store is an error
    if not json_out:
        studies = f"{len(plan.studies)} capability stud{'y' if len(plan.studies) == 1 else 'ies'}"
        console.print(f"[bold]depth atlas[/], scale {scale}: {studies}, at most {plan.most_runs} runs, {threads} "
                      f"threads. {plan.note}".rstrip())
    session = nullcontext()
    if executor == "ray" and not finished_only:
        from ..sweeps.ray_executor import ray_session

        session = ray_session(address)
    with session:
        result, tables = run_atlas(plan, db, None if finished_only else (
            lambda configs, label: run_sweep(configs, db, group_size, json_out, label, executor, address)),
            out, vector, command=shlex.join(["depthlab", *sys.argv[1:]]))
    if json_out:
        emit(result)
        return
    show(*tables)
    for mark, labels in result["marks"].items():
        if labels:
            console.print(f"[bold]{result['mark_meanings'][mark]}[/]: {'; '.join(labels)}")
    for row in result["min_widths"]:
        widths = ", ".join(f"{depth} layer{'s' if depth != '1' else ''}: {w}" for depth, w in row["min_width"].items())
        console.print(f"smallest width that learned, per depth: {row['task']} {row['size']} ({row['family']}): "
                      f"{widths or 'none learned'}")
    for item in result["left_out"]:
        console.print(f"left out: {item.get('task') or item['family']}: {item['why']}")
    console.print("figures: " + ", ".join(result["figures"].values()))
    console.print(f"store: {db.root}  ({result['seconds']:.0f} s)")


def _show_plan(plan, json_out: bool, timing: dict | None = None) -> None:
    """The studies of the plan: task, family, axis and sizes, depths, seeds, where the study comes from, and the most
    runs and group steps (a cell's seeds train as one group) it may train: every cell climbed to its last depth."""
    from ..analysis.tables import Table
    from ..sweeps.climb import most_runs
    from ..sweeps.climb import plan as cells_of

    rows = []
    for s in plan.studies:
        runs = most_runs(s.study)
        _, first = cells_of(s.study)[0]
        steps = first[s.study.layers[0]][0].train.steps  # the run's own, the config's default included
        rows.append({"task": s.task, "family": s.family, "axis": s.axis,
                     "sizes": s.study.vary[1] if s.study.vary else None, "widths": s.study.widths,
                     "layers": s.study.layers, "seeds": len(s.study.seeds), "steps": steps, "most_runs": runs,
                     "most_group_steps": runs // len(s.study.seeds) * steps, "source": s.source})
    if json_out:
        emit({"scale": plan.scale, "note": plan.note, "studies": rows, "most_runs": plan.most_runs,
              "most_group_steps": sum(r["most_group_steps"] for r in rows), "left_out": plan.left_out,
              **({"time": timing} if timing else {})})
        return
    table = Table.of("task", "family", "sizes", "depths", "seeds", "steps", "runs ≤", "from",
                     title=f"depth atlas {plan.scale}: {len(rows)} studies, at most {plan.most_runs} runs")
    for r in rows:
        sizes = f"{r['axis'].removeprefix('task.')}={','.join(map(str, r['sizes']))}" if r["axis"] else "—"
        table.add_row(r["task"], r["family"], sizes, f"{r['layers'][0]}-{r['layers'][-1]}", str(r["seeds"]),
                      str(r["steps"]), str(r["most_runs"]), r["source"])
    show(table)
    for item in plan.left_out:
        console.print(f"left out: {item.get('task') or item['family']}: {item['why']}")
    if timing:
        from .reproduce import duration

        done = f" ({timing['done']} already done in the store)" if timing["done"] else ""
        console.print(f"{timing['runs']} runs{done} in {timing['groups']} groups: projected [bold]"
                      f"{duration(timing['projected_seconds'])}[/] on {timing['device']} ({timing['threads']} "
                      f"threads) — an upper bound (every cell climbed to its last depth, every run to its last "
                      f"step); measured in {timing['measured_seconds']:.0f} s.")
