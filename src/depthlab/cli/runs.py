"""``depthlab tasks``, ``sample``, ``train``, ``sweep``, ``runs`` and ``metrics``: the tasks, their examples, training,
the store's runs and metrics (as tables, or CSV / Parquet / JSON files)."""

from __future__ import annotations

import bisect
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ..analysis.tables import Column, Table
from ..errors import UserError
from .app import app
from .common import (
    AddressOpt,
    DeviceOpt,
    ExecutorOpt,
    GroupSizeOpt,
    JsonOpt,
    LogOpt,
    SetOpt,
    StoreOpt,
    WorkersOpt,
    check_executor,
    check_output,
    emit,
    open_store,
    run_sweep,
    setup_threads,
    show,
    with_device,
)


@app.command()
def tasks(json_out: JsonOpt = False) -> None:
    """Every task with its parameters, defaults and the seed section it comes from."""
    from ..tasks import TASKS

    items = []
    for name, cls in sorted(TASKS.items()):
        params = {f: {"default": info.default, "type": str(info.annotation).replace("typing.", ""),
                      "description": info.description or ""} for f, info in cls.model_fields.items()}
        items.append({"name": name, "section": cls.section, "summary": cls.summary,
                      "eval_protocol": cls.eval_protocol, "parameters": params})
    if json_out:
        emit({"tasks": items})
        return
    # two columns, each cell two parts one under the other: four side by side at 80 columns (piped) squeezed the
    # summary to 15 characters a line
    table = Table.of("task, seed section", "summary, parameters (defaults)")
    for item in items:
        params = ", ".join(f"{k}={v['default']}" for k, v in item["parameters"].items())
        table.add_row(f"{item['name']}\n{item['section']}", f"{item['summary']}\n{params}")
    show(table)


TEXT_BYTES_PER_TOKEN = 200  # an example's tokens, text and JSON as Python strings (measured: 22 to 190)


@app.command()
def sample(task: Annotated[str, typer.Argument(help="task name (see `depthlab tasks`)")],
           set_: SetOpt = None, n: Annotated[int, typer.Option("-n", min=1, help="number of examples")] = 5,
           seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
           split: Annotated[str, typer.Option("--split", help="train or eval")] = "train",
           json_out: JsonOpt = False) -> None:
    """Examples of a task as text, in the notation of seed 001 Table 1."""
    import numpy as np

    from ..config import apply_overrides, parse_run
    from ..training.footprint import check_sample

    if split not in ("train", "eval"):
        raise UserError(f"--split: must be train or eval (got {split!r})")
    overrides = [s if s.startswith("task.") else f"task.{s}" for s in (set_ or [])]
    config = parse_run(apply_overrides({"task": {"name": task}}, overrides))
    spec = config.task
    check_sample(spec, n, split, f"-n: sampling {n:,} examples of {spec.name}", "lower -n",
                 per_example=(spec.seq_len + 2) * TEXT_BYTES_PER_TOKEN)
    try:
        batch = spec.sample(n, np.random.default_rng(seed), split)
    except UserError:  # a plugin's sample that failed: its own message
        raise
    except ValueError as e:  # a split this task cannot sample (e.g. eval with eval_fraction 0)
        raise UserError(f"--split {split}: {' '.join(str(e).split())}") from None
    examples = []
    for i in range(len(batch)):
        tokens, target = spec.example_tokens(batch, i)
        examples.append({"input": tokens, "target": target, "text": spec.decode(batch, i)})
    if json_out:
        emit({"task": spec.name, "parameters": spec.model_dump(mode="json"), "split": split, "examples": examples})
        return
    for ex in examples:
        print(ex["text"])


def _load_config(path: Path, overrides: list[str] | None) -> dict[str, Any]:
    from ..config import apply_overrides, load_yaml

    return apply_overrides(load_yaml(path), overrides or [])


@app.command()
def train(config: Annotated[Path, typer.Argument(help="run file (YAML)")], set_: SetOpt = None,
          store: StoreOpt = None, device: DeviceOpt = None, log: LogOpt = None, json_out: JsonOpt = False) -> None:
    """Train one run from a run file."""
    from ..api.training import run_results
    from ..config import parse_run
    from ..sweeps.local import preflight
    from ..training.tracking import check_trackers

    raw = _load_config(config, with_device(set_, device))
    if "sweep" in raw:
        raise UserError("sweep: this is a sweep file; use `depthlab sweep` (or remove the sweep section)")
    run = parse_run(raw)
    check_trackers(log or [])
    size = preflight([run], 1)  # a run over the memory budget is refused before the store is created
    threads = setup_threads()
    db = open_store(store)
    results = run_sweep([run], db, 1, json_out, "training", log=log, size=size)
    (result,) = run_results(db, [db.run_id(run.to_dict())], results)
    if json_out:
        emit({**result.to_dict(), "threads": threads, "store": str(db.root)})
    else:
        Console().print(f"run {result.id}: {result.status}  {json.dumps(result.metrics)}")


@app.command()
def sweep(config: Annotated[Path, typer.Argument(help="sweep file (YAML): a run file plus `sweep:`")],
          set_: SetOpt = None, store: StoreOpt = None,
          group_size: GroupSizeOpt = None,
          executor: ExecutorOpt = "local", address: AddressOpt = None, device: DeviceOpt = None,
          workers: WorkersOpt = None, log: LogOpt = None, json_out: JsonOpt = False) -> None:
    """Train every run of a grid (finished runs are skipped), grouping runs of equal shapes."""
    from ..api.training import run_results
    from ..config import expand_sweep, parse_resources
    from ..sweeps.execute import check_tracked
    from ..sweeps.local import preflight
    from ..training.tracking import check_trackers

    check_executor(executor, address)
    check_tracked(executor, bool(log))
    check_trackers(log or [])
    raw = _load_config(config, with_device(set_, device, executor, workers))
    runs = expand_sweep(raw)
    resources = parse_resources(raw)
    # a group over the memory budget is refused before the store is created
    size = preflight(runs, group_size) if executor == "local" else None
    threads = setup_threads()
    db = open_store(store)
    results = run_sweep(runs, db, group_size, json_out, "sweep", executor, address, resources, log, size)
    ids = [db.run_id(r.to_dict()) for r in runs]
    if json_out:
        emit({"runs": [r.to_dict() for r in run_results(db, ids, results)], "threads": threads,
              "store": str(db.root)})
        return
    _show_runs(_rows_from_store(db, ids), db.run_ids())


def _rows_from_store(db, ids: list[str] | None = None, status: str | None = None, task: str | None = None):
    """The runs as rows of ``depthlab runs`` (:func:`_run_row`), with the settings in which they differ."""
    from ..cells import list_fields

    records = db.find_runs(status=status, task=task, ids=ids)
    fields = list_fields([r["config"] or {} for r in records])
    return [_run_row(r, fields) for r in records]


def _run_row(record: dict[str, Any], fields: list[str], cells: dict[str, tuple] | None = None) -> dict[str, Any]:
    """A run as a row of ``depthlab runs``: what every run has, its ``cell`` (``depthlab.cells``) and its
    ``settings``: the values of ``fields``, the config fields in which runs of one task, model and depth differ (a
    learning rate, a width). ``cells``: the cell and settings of each ``cell_text`` found so far (``Store.iter_runs``
    with ``cells``), to find them once per cell."""
    from ..cells import cell_id, field_values

    config = record["config"] or {}
    text = record.get("cell_text")
    if cells is None or text is None:
        cell, settings = cell_id(config), field_values(config, fields)
    else:
        if text not in cells:
            if len(cells) >= CELLS_KEPT:  # a store whose every run is a cell of its own: memory stays bounded
                cells.clear()
            cells[text] = (cell_id(config), field_values(config, fields))
        cell, settings = cells[text]
    return {"id": record["id"], "task": record["task"], "model": record["model"], "status": record["status"],
            "step": record["step"], "seed": config.get("seed"), "layers": (config.get("model") or {}).get("layers"),
            "cell": cell, "settings": settings, "metrics": record["final"] or {}}


CELLS_KEPT = 10_000  # cells whose id and settings a listing keeps at once


MIN_ID = 8  # characters of a run id shown at least (every command takes a unique prefix)


def short_ids(ids: list[str], every: list[str]) -> dict[str, str]:
    """Each of ``ids`` by its shortest prefix of at least ``MIN_ID`` characters that no other id of ``every``
    starts with (the store's ids: any command given it finds exactly that run)."""
    ordered = sorted(set(every) | set(ids))
    out = {}
    for run_id in ids:
        i = bisect.bisect_left(ordered, run_id)  # the ids sharing the longest prefix with it are its neighbours
        common = max((_common(run_id, ordered[j]) for j in (i - 1, i + 1) if 0 <= j < len(ordered)), default=0)
        out[run_id] = run_id[: max(MIN_ID, common + 1)]
    return out


def _common(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _show_runs(rows: list[dict[str, Any]], every: list[str], note: str = "") -> None:
    """The runs as a table that fits 80 columns: ids by a unique prefix, the settings that vary as columns, and
    each finished run's final accuracy, or its final loss where its task has no accuracy (a regression task's);
    beside it the best log-point accuracy, and † where the run learned and then lost it (the caption says when)."""
    from ..analysis.capability import LOST_MARK
    from ..cells import short_names, value_text

    fields = list(rows[0]["settings"]) if rows else []
    names = short_names(fields)
    ids = short_ids([r["id"] for r in rows], every)
    scores = _final_scores(rows)
    best = any(r["metrics"].get("best") for r in rows)
    lost = [f"{ids[r['id']]} at step {r['metrics']['learned_then_lost']['step']:,} "
            f"(≥ {r['metrics']['learned_then_lost']['target']:g})" for r in rows
            if r["metrics"].get("learned_then_lost")]
    caption = "; ".join(["ids: a unique prefix (every command takes one); --json gives them whole",
                         *(["final: the final evaluation; best: the best log point's (on the probe)"] * best),
                         *([f"{LOST_MARK} learned, then lost: " + ", ".join(lost)] if lost else [])])
    table = Table([Column("id", no_wrap=True), Column("task", no_wrap=True), Column("model", no_wrap=True),
                   Column("layers", "right"),
                   *[Column(names[f], "right") for f in fields], Column("seed", "right"), Column("status"),
                   Column("step", "right"), *[Column(score, "right", no_wrap=True) for score in scores],
                   *([Column("best", "right", no_wrap=True)] if best else [])],
                  caption=caption + note if rows else None, compact=True)
    for r in rows:
        layers = "—" if r["layers"] is None else str(r["layers"])  # an llm-bench run has none
        mark = f" {LOST_MARK}" if r["metrics"].get("learned_then_lost") else ""
        table.add_row(ids[r["id"]], r["task"], r["model"], layers, *[value_text(r["settings"][f]) for f in fields],
                      str(r["seed"]), r["status"], str(r["step"]),
                      *[_score_text(r["metrics"], score) + (mark if score == "accuracy" else "") for score in scores],
                      *([_score_text(r["metrics"].get("best") or {}, "accuracy")] if best else []))
    show(table)


def _final_scores(rows: list[dict[str, Any]]) -> list[str]:
    """The final metrics a runs table shows: ``accuracy``, and ``loss`` where a run has a loss and no accuracy
    (then ``loss`` alone if no run has an accuracy)."""
    accuracy = any(r["metrics"].get("accuracy") is not None for r in rows)
    loss = any(r["metrics"].get("accuracy") is None and r["metrics"].get("loss") is not None for r in rows)
    return ["accuracy"] * (accuracy or not loss) + ["loss"] * loss


def _score_text(metrics: dict[str, Any], score: str) -> str:
    value = metrics.get(score)
    if value is None:
        return "—"
    return f"{value:.3f}" if score == "accuracy" else f"{value:.3g}"  # a loss may be 4e-05: three figures


FormatOpt = Annotated[str | None, typer.Option(
    "--format", help="write the whole table as csv, parquet (needs pyarrow) or json (an array of records) "
                     "instead of showing it: the table depthlab.Store gives as a pandas DataFrame")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="with --format: the file to write (default: stdout)")]


def _write_table(pages: Iterable[Any], fmt: str, out: Path | None) -> None:
    """The table whose pages (DataFrames) are ``pages`` in format ``fmt`` to ``out``, or to stdout, a page at a
    time."""
    import io

    from ..api.tables import check_format, write_table
    from ..store import atomic_writer

    check_format(fmt)  # before a byte is written, or a file replaced
    if out is not None:
        with atomic_writer(out) as file:
            write_table(pages, fmt, file)
    elif fmt == "parquet":  # a Parquet file is written with its footer last: built whole, then sent
        buffer = io.BytesIO()
        write_table(pages, fmt, buffer)
        sys.stdout.buffer.write(buffer.getvalue())
    else:
        write_table(pages, fmt, sys.stdout.buffer)
    sys.stdout.flush()


def _emit_list(key: str, items: Iterable[dict[str, Any]], **after: Any) -> None:
    """``{key: [items], **after}`` as the one line of JSON :func:`emit` prints, the items written one at a time
    (they are never all in memory)."""
    from ..store import to_jsonable

    def page_text(page: list[dict[str, Any]]) -> str:  # a page of items at a time: one call, the same bytes
        try:  # what the store gives is JSON already; only a NaN (a metric's) needs to_jsonable's walk
            return json.dumps(page, allow_nan=False, default=str)[1:-1]
        except ValueError:
            return json.dumps(to_jsonable(page), allow_nan=False, default=str)[1:-1]

    separator = ""
    sys.stdout.write(f'{{"{key}": [')
    for text in _pages(items, page_text, JSON_PAGE):
        if text:
            sys.stdout.write(separator + text)
            separator = ", "
    sys.stdout.write("]" + "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in after.items()) + "}\n")
    sys.stdout.flush()


def _check_filters(db, status: str | None, task: str | None) -> None:
    """An unknown status, or a task neither depthlab nor the store knows, is a mistake (not an empty list)."""
    from ..store import STATUSES
    from ..tasks import TASKS

    if status is not None and status not in STATUSES:
        raise UserError(f"--status: unknown status {status!r}; allowed: {', '.join(STATUSES)}")
    if task is not None and task not in TASKS:
        stored = db.task_names()
        if task not in stored:
            raise UserError(f"--task: unknown task {task!r}; allowed: {', '.join(sorted(set(TASKS) | stored))}")


TABLE_ROWS = 500  # runs the table shows at most unless --limit says otherwise: --json and --format give every run
PAGE = 5000  # rows turned into a DataFrame at a time when a table is written
JSON_PAGE = 500  # items --json encodes in one call (one call per item cost a second at 100,000 runs)


def _pages(items: Iterable[Any], make: Callable[[list[Any]], Any], size: int = PAGE) -> Iterator[Any]:
    """``make(chunk)`` for each chunk of ``size`` items (one for no items: a table has its header)."""
    chunk: list[Any] = []
    made = False
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield make(chunk)
            chunk, made = [], True
    if chunk or not made:
        yield make(chunk)


LimitOpt = Annotated[int | None, typer.Option(
    "--limit", min=0, help=f"at most this many runs (default: {TABLE_ROWS} in the table, every run with --json or "
                           "--format; 0: every run)")]
OffsetOpt = Annotated[int, typer.Option("--offset", min=0, help="leave out the first N runs (oldest first)")]


@app.command()
def runs(store: StoreOpt = None, status: Annotated[str | None, typer.Option(help="only runs with this status")] = None,
         task: Annotated[str | None, typer.Option(help="only runs of this task")] = None,
         fmt: FormatOpt = None, out: OutOpt = None, limit: LimitOpt = None, offset: OffsetOpt = 0,
         json_out: JsonOpt = False) -> None:
    """List the runs in a store (the table a page at a time: --limit, --offset); with --format, write every run's
    config fields and final metrics as a table."""
    from ..cells import list_fields

    check_output(out, "--out", store=store)
    db = open_store(store, readonly=True)
    _check_filters(db, status, task)
    if fmt is not None:
        from ..api.tables import runs_frame

        _write_table([runs_frame(list(db.iter_runs(status, task, limit=limit or None, offset=offset)))], fmt, out)
        return
    if out is not None:
        raise UserError("--out: only with --format csv, parquet or json")
    if json_out:
        fields = list_fields(db.cell_configs(status, task))
        # each run's metrics are its final ones: accuracy and loss of the final evaluation, with its best log point
        cells: dict[str, tuple] = {}
        _emit_list("runs", (_run_row(r, fields, cells) for r in db.iter_runs(status, task, limit=limit or None,
                                                                              offset=offset, cells=True)),
                   shows="final")
        return
    shown = TABLE_ROWS if limit is None else limit or None
    records = list(db.iter_runs(status, task, limit=shown, offset=offset))
    fields = list_fields([r["config"] for r in records])
    total = db.count_runs(status, task)
    note = ""
    if records and len(records) < total:
        last = offset + len(records)
        note = (f"\nruns {offset + 1:,} to {last:,} of {total:,} (oldest first): --offset {last} for the next, "
                "--limit 0 for all, --json or --format csv for every run")
    _show_runs([_run_row(r, fields) for r in records], db.run_ids(), note)


@app.command()
def metrics(run: Annotated[list[str] | None, typer.Argument(help="run ids or unique prefixes (default: every run)")]
            = None, store: StoreOpt = None,
            fmt: Annotated[str, typer.Option("--format", help="csv, parquet (needs pyarrow) or json")] = "csv",
            out: OutOpt = None, json_out: JsonOpt = False) -> None:
    """Every metrics row of the runs (run_id, step, split, metric, value): the table depthlab.Store.metrics gives."""
    from ..api.tables import METRIC_COLUMNS, metrics_frame

    check_output(out, "--out", store=store)
    db = open_store(store, readonly=True)
    rows = db.iter_metric_rows([db.resolve(r) for r in run] if run else None)
    if json_out:
        _emit_list("metrics", (dict(zip(METRIC_COLUMNS, row, strict=True)) for row in rows))
        return
    _write_table(_pages(rows, metrics_frame), fmt, out)
