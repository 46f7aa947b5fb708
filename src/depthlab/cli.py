"""The ``depthlab`` command. Every command takes ``--json`` and then prints exactly one JSON object to stdout.

User mistakes print one line ``error: <field>: <what is allowed>`` to stderr and exit with code 2.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from .analysis.cli import register as _register_analysis
from .constructions.cli import register as _register_constructions
from .errors import UserError
from .induction.cli import register as _register_induction
from .llm.cli import register as _register_llm
from .report.cli import register as _register_report

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="depthlab: what sequence models can learn, at which depth, and how.")
console = Console(stderr=True)
_register_llm(app)
_register_constructions(app)
_register_analysis(app)
_register_report(app)
_register_induction(app)

JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object to stdout and nothing else")]
StoreOpt = Annotated[Path | None, typer.Option("--store", help="store folder [$DEPTHLAB_STORE, ./depthlab-runs]")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="override a field: --set model.layers=2")]
ExecutorOpt = Annotated[str, typer.Option("--executor", help="local (in this process) or ray (a Ray task per group)")]
AddressOpt = Annotated[str | None, typer.Option(
    "--address", help="with --executor ray: the Ray cluster (auto, HOST:6379, ray://HOST:10001); "
                      "default: start a local Ray instance")]
PluginOpt = Annotated[list[Path] | None, typer.Option(
    "--plugin", help="a Python file defining tasks of your own (repeatable; also $DEPTHLAB_PLUGINS, and "
                     "entry points of the group depthlab.tasks)")]
GroupSizeOpt = Annotated[int | None, typer.Option("--group-size", min=1, help="runs per batched group")]
CAPABILITY_RECIPE = "seed001-depth"  # the capability command trains with this preset's model and train settings


@app.callback()
def _load_plugins(plugin: PluginOpt = None) -> None:
    from .plugins import load_plugins

    load_plugins(plugin)


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, allow_nan=False, default=str) + "\n")


def open_store(path: Path | None):
    from .store import Store, default_store_path

    return Store(path or default_store_path())


def setup_threads() -> int:
    """Every core this process may run on, unless ``OMP_NUM_THREADS`` asks for fewer (shared machines)."""
    import torch

    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    asked = os.environ.get("OMP_NUM_THREADS", "")
    if asked.isdigit() and int(asked) > 0:
        threads = min(threads, int(asked))
    torch.set_num_threads(threads)
    return threads


@contextmanager
def step_progress(total: int, description: str, quiet: bool):
    """A rich progress bar over run-steps; a no-op callback under --json or when stderr is not a terminal."""
    if quiet or not console.is_terminal:
        yield None
        return
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("run-steps"),
               TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def _run_sweep(runs, store, group_size: int | None, quiet: bool, description: str, executor: str = "local",
               address: str | None = None, resources=None) -> dict[str, Any]:
    from .sweep.local import run_local

    total = sum(r.train.steps for r in runs)
    with step_progress(total, description, quiet) as advance:
        if executor == "ray":
            from .plugins import share_with_ray
            from .sweep.ray_executor import run_ray

            share_with_ray()
            return run_ray(runs, store, group_size=group_size, address=address, resources=resources,
                           progress=advance)
        return run_local(runs, store, group_size=group_size, progress=advance)


def _check_executor(executor: str, address: str | None) -> None:
    if executor not in ("local", "ray"):
        raise UserError(f"--executor: must be local or ray (got {executor!r})")
    if address and executor != "ray":
        raise UserError("--address: only with --executor ray")


@app.command()
def tasks(json_out: JsonOpt = False) -> None:
    """Every task with its parameters, defaults and the seed section it comes from."""
    from .tasks import TASKS

    items = []
    for name, cls in sorted(TASKS.items()):
        params = {f: {"default": info.default, "type": str(info.annotation).replace("typing.", ""),
                      "description": info.description or ""} for f, info in cls.model_fields.items()}
        items.append({"name": name, "section": cls.section, "summary": cls.summary,
                      "eval_protocol": cls.eval_protocol, "parameters": params})
    if json_out:
        emit({"tasks": items})
        return
    table = Table("task", "seed section", "parameters (defaults)", "summary")
    for item in items:
        params = ", ".join(f"{k}={v['default']}" for k, v in item["parameters"].items())
        table.add_row(item["name"], item["section"], params, item["summary"])
    Console().print(table)


@app.command()
def sample(task: Annotated[str, typer.Argument(help="task name (see `depthlab tasks`)")],
           set_: SetOpt = None, n: Annotated[int, typer.Option("-n", min=1, help="number of examples")] = 5,
           seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
           split: Annotated[str, typer.Option("--split", help="train or eval")] = "train",
           json_out: JsonOpt = False) -> None:
    """Examples of a task as text, in the notation of seed 001 Table 1."""
    import numpy as np

    from .config import apply_overrides, parse_run

    if split not in ("train", "eval"):
        raise UserError(f"--split: must be train or eval (got {split!r})")
    overrides = [s if s.startswith("task.") else f"task.{s}" for s in (set_ or [])]
    config = parse_run(apply_overrides({"task": {"name": task}}, overrides))
    spec = config.task
    batch = spec.sample(n, np.random.default_rng(seed), split)
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
    from .config import apply_overrides, load_yaml

    return apply_overrides(load_yaml(path), overrides or [])


@app.command()
def train(config: Annotated[Path, typer.Argument(help="run file (YAML)")], set_: SetOpt = None,
          store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Train one run from a run file."""
    from .config import parse_run
    from .store import Store

    raw = _load_config(config, set_)
    if "sweep" in raw:
        raise UserError("sweep: this is a sweep file; use `depthlab sweep` (or remove the sweep section)")
    run = parse_run(raw)
    threads = setup_threads()
    db = open_store(store)
    results = _run_sweep([run], db, 1, json_out, "training")
    run_id = Store.run_id(run.to_dict())
    record = db.get_run(run_id)
    out = {"id": run_id, "status": record["status"], "metrics": results.get(run_id), "threads": threads,
           "store": str(db.root)}
    if json_out:
        emit(out)
    else:
        Console().print(f"run {run_id}: {record['status']}  {json.dumps(results.get(run_id))}")


@app.command()
def sweep(config: Annotated[Path, typer.Argument(help="sweep file (YAML): a run file plus `sweep:`")],
          set_: SetOpt = None, store: StoreOpt = None,
          group_size: Annotated[int | None, typer.Option("--group-size", min=1, help="runs per batched group")] = None,
          executor: ExecutorOpt = "local", address: AddressOpt = None, json_out: JsonOpt = False) -> None:
    """Train every run of a grid (finished runs are skipped), grouping runs of equal shapes."""
    from .config import expand_sweep, parse_resources
    from .store import Store

    _check_executor(executor, address)
    raw = _load_config(config, set_)
    runs = expand_sweep(raw)
    resources = parse_resources(raw)
    threads = setup_threads()
    db = open_store(store)
    results = _run_sweep(runs, db, group_size, json_out, "sweep", executor, address, resources)
    ids = [Store.run_id(r.to_dict()) for r in runs]
    rows = [{"id": i, "status": db.get_run(i)["status"], "metrics": results.get(i)} for i in ids]
    if json_out:
        emit({"runs": rows, "threads": threads, "store": str(db.root)})
        return
    _print_runs(rows_from_store(db, ids))


def rows_from_store(db, ids: list[str] | None = None, status: str | None = None, task: str | None = None):
    records = db.find_runs(status=status, task=task, ids=ids)
    return [{"id": r["id"], "task": r["task"], "model": r["model"], "status": r["status"], "step": r["step"],
             "seed": r["config"].get("seed"), "layers": r["config"]["model"].get("layers"),
             "metrics": r["final"] or {}} for r in records]


def _print_runs(rows: list[dict[str, Any]]) -> None:
    table = Table("id", "task", "model", "layers", "seed", "status", "step", "accuracy")
    for r in rows:
        acc = r["metrics"].get("accuracy")
        table.add_row(r["id"], r["task"], r["model"], str(r["layers"]), str(r["seed"]), r["status"],
                      str(r["step"]), f"{acc:.3f}" if acc is not None else "—")
    Console().print(table)


@app.command()
def runs(store: StoreOpt = None, status: Annotated[str | None, typer.Option(help="only runs with this status")] = None,
         task: Annotated[str | None, typer.Option(help="only runs of this task")] = None,
         json_out: JsonOpt = False) -> None:
    """List the runs in a store."""
    rows = rows_from_store(open_store(store), status=status, task=task)
    if json_out:
        emit({"runs": rows})
        return
    _print_runs(rows)


@app.command()
def reproduce(name: Annotated[str, typer.Argument(help="preset name, e.g. seed001-depth")],
              scale: Annotated[str, typer.Option(help="quick (minutes on a laptop) or paper (seed sizes)")] = "quick",
              set_: SetOpt = None, store: StoreOpt = None,
              out: Annotated[Path | None, typer.Option(help="folder for figures (default: <store>/figures)")] = None,
              group_size: Annotated[int | None, typer.Option("--group-size", min=1)] = None,
              json_out: JsonOpt = False) -> None:
    """Re-run a seed's study from its preset and print its table; writes its figure."""
    from .store import Store
    from .sweep.presets import load_preset

    preset = load_preset(name, scale, set_)
    threads = setup_threads()
    db = open_store(store)
    started = time.perf_counter()
    if not json_out:
        console.print(f"[bold]{preset.title}[/] ({preset.reproduces}), scale {scale}: {preset.size}, "
                      f"{threads} threads. {preset.note}")
    figure = (out or db.root / "figures") / f"{name}-{scale}.png"
    if preset.studies:
        summary, renderable = preset.summarize_studies(_climb(preset.studies, db, group_size, json_out, name), figure)
    else:
        _run_sweep(preset.runs, db, group_size, json_out, name)
        summary, renderable = preset.summarize(db, [Store.run_id(r.to_dict()) for r in preset.runs], figure)
    elapsed = time.perf_counter() - started
    if json_out:
        emit({"preset": name, "scale": scale, **summary, "seconds": round(elapsed, 1), "threads": threads})
        return
    Console().print(renderable)
    console.print(f"figure: {summary.get('figure')}\nstore: {db.root}  ({elapsed:.0f} s)")


def _climb(studies, db, group_size: int | None, quiet: bool, label: str, executor: str = "local",
           address: str | None = None) -> list:
    """Climb each capability study in depth, training one depth's runs at a time (see sweep.capability)."""
    from .sweep.capability import climb

    def train(configs, depth: int) -> None:
        _run_sweep(configs, db, group_size, quiet, f"{label}: {depth} layer{'s' if depth > 1 else ''}", executor,
                   address)

    session = nullcontext()
    if executor == "ray":
        from .sweep.ray_executor import ray_session

        session = ray_session(address)
    with session:
        return [cell for study in studies for cell in climb(study, db, train)]


@app.command()
def capability(
        task: Annotated[str, typer.Argument(help="task name (see `depthlab tasks`; yours with --plugin)")],
        set_: SetOpt = None,
        model: Annotated[str, typer.Option("--model", help="model family: attention_only, transformer, …")]
        = "attention_only",
        layers: Annotated[str, typer.Option("--layers", help="depths to climb: 1-6 or 1,2,4")] = "1-6",
        widths: Annotated[str | None, typer.Option("--widths", help="model.width values, e.g. 32,64 "
                                                                     "(default: the model's own)")] = None,
        seeds: Annotated[int, typer.Option("--seeds", min=1, max=1000, help="seeds per depth")] = 3,
        target: Annotated[float, typer.Option("--target", help="accuracy on held-out data a seed must reach")]
        = 0.95,
        vary: Annotated[str | None, typer.Option("--vary", help="one field over values, e.g. task.N=20,50,100: "
                                                                "a row per value (table and heat map)")] = None,
        figure: Annotated[Path | None, typer.Option(help="heat map file (.png/.svg/.pdf; default: "
                                                         "<store>/figures/capability-TASK.png)")] = None,
        store: StoreOpt = None, group_size: GroupSizeOpt = None, executor: ExecutorOpt = "local",
        address: AddressOpt = None, json_out: JsonOpt = False) -> None:
    """The smallest depth at which a strict majority of seeds reach --target on held-out data, per width.

    Climbs one depth at a time (every width, value and seed of a depth trained batched) and stops once every
    row is settled; runs already in the store are reused. Training: the seed001-depth preset's settings
    (AdamW, lr 3e-3, 300 warm-up steps, 2000 steps; attention_only with paper init, qk_scale 0.01); every
    run stops at an accuracy halfway between the target and 1. Change any of it with --set train.steps=500.
    """
    from .analysis.min_depth import min_depth_summary
    from .config import apply_overrides
    from .sweep import capability as cap
    from .sweep.presets import recipe

    _check_executor(executor, address)
    base = apply_overrides(cap.default_base(task, model, recipe(CAPABILITY_RECIPE)), cap.task_overrides(set_))
    study = cap.Study(base, cap.parse_layers(layers), list(range(seeds)), cap.parse_target(target),
                      cap.parse_widths(widths), cap.parse_vary(vary))
    threads = setup_threads()
    db = open_store(store)
    started = time.perf_counter()
    field = study.vary[0] if study.vary else None
    if not json_out:
        console.print(f"[bold]capability of {task}[/] ({model}): depths {layers}, {seeds} seeds, target {target:g}, "
                      f"at most {cap.most_runs(study)} runs, {threads} threads")
    cells = _climb([study], db, group_size, json_out, task, executor, address)
    path = figure or db.root / "figures" / f"capability-{task}{'-' + field if field else ''}.png"
    summary, table = min_depth_summary(cells, path, f"{task} ({model})")
    elapsed = time.perf_counter() - started
    if json_out:
        emit({"task": task, "model": model, "target": study.target, "layers": study.layers, "seeds": study.seeds,
              "vary": field, **summary, "seconds": round(elapsed, 1), "threads": threads, "store": str(db.root)})
        return
    Console().print(table)
    console.print(f"figure: {summary['figure']}\nstore: {db.root}  ({elapsed:.0f} s)")


@app.command()
def bench(runs: Annotated[str, typer.Option(help="group sizes to measure, comma-separated")] = "1,4,16,64",
          case: Annotated[list[str] | None, typer.Option(help="icqa-quick, icqa-paper or retrieval")] = None,
          seconds: Annotated[float, typer.Option(min=0.1, help="minimum seconds per measurement")] = 1.0,
          rounds: Annotated[int, typer.Option(min=1, help="interleaved repetitions; rates are their medians")] = 3,
          json_out: JsonOpt = False) -> None:
    """Measure the batched engine against a plain loop and the machine's peak (see benchmarks/)."""
    from .train.throughput import CASES, run_benchmark

    known = [c.name for c in CASES]
    for name in case or []:
        if name not in known:
            raise UserError(f"--case: unknown case {name!r}; allowed: {', '.join(known)}")
    try:
        counts = [int(x) for x in runs.split(",")]
    except ValueError:
        raise UserError(f"--runs: expected comma-separated integers, e.g. 1,4,16 (got {runs!r})") from None
    if not counts or min(counts) < 1:
        raise UserError(f"--runs: group sizes must be positive integers (got {runs!r})")
    threads = setup_threads()
    show = None if json_out else (lambda row: console.print(
        f"{row['name']:<11} {row['precision']} R={row['runs']:<3} plain {row['plain_examples_per_s']:>10,.0f}/s "
        f"engine {row['engine_examples_per_s']:>10,.0f}/s  ×{row['speedup']:<6} "
        f"{row['fraction_of_peak']:.0%} of peak  data {row['data_fraction']:.1%}"))
    result = run_benchmark(counts, case, seconds, progress=show, rounds=rounds)
    if json_out:
        emit(result)
        return
    console.print(f"peak fp32 {result['peak_gflops']} GFLOP/s, bf16 {result['peak_gflops_bf16']} GFLOP/s, "
                  f"{threads} threads")


def main() -> None:
    try:
        # Without standalone mode, Typer returns the exit code of a command that exits (Ctrl-C becomes 130).
        code = app(standalone_mode=False)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except click.exceptions.UsageError as e:
        print(f"error: {e.format_message()}", file=sys.stderr)
        raise SystemExit(2) from None
    except (click.exceptions.Abort, KeyboardInterrupt):
        code = 130
    except click.exceptions.Exit as e:
        code = e.exit_code
    if code == 130:
        print("interrupted", file=sys.stderr)
    if isinstance(code, int) and code:
        raise SystemExit(code)


if __name__ == "__main__":
    main()
