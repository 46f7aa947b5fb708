"""``depthlab reproduce``, ``capability`` and ``bench``: a seed's study from its preset, the minimum depth of a
task, and the engine's throughput."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import UserError
from .app import app
from .common import (
    FIGURE_SUFFIXES,
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

CAPABILITY_RECIPE = "seed001-depth"  # the capability command trains with this preset's model and train settings


@app.command()
def reproduce(name: Annotated[str | None, typer.Argument(help="preset name, e.g. seed001-depth (see --list)")] = None,
              list_: Annotated[bool, typer.Option("--list", help="list every preset: the seed figures it draws and "
                                                                 "the size of its scales")] = False,
              scale: Annotated[str, typer.Option(help="quick (minutes on a laptop), medium (about an hour on a "
                                                       "2-core CPU, where a preset has it) or paper (seed sizes)")]
              = "quick",
              set_: SetOpt = None, store: StoreOpt = None,
              out: Annotated[Path | None, typer.Option(help="folder for figures (default: <store>/figures)")] = None,
              format_: FormatOpt = "png", device: DeviceOpt = None, workers: WorkersOpt = None,
              group_size: GroupSizeOpt = None,
              finished_only: Annotated[bool, typer.Option("--finished-only", help="train nothing: draw from the "
                                                          "runs of this preset already done in the store (its "
                                                          "title says how many when some are missing)")] = False,
              explain: Annotated[bool, typer.Option("--explain", help="train nothing: the paper scale against the "
                                                    "seed, setting by setting (the seed's value and section, ours, "
                                                    "why they differ, the --set that runs the seed's own)")] = False,
              markdown: Annotated[bool, typer.Option("--markdown", help="with --explain: the documentation's table of "
                                                     "settings that differ (every preset without NAME)")] = False,
              plan: Annotated[bool, typer.Option("--plan", help="train nothing recorded: time a few steps of each "
                                                 "group shape here and project the scale's wall time")] = False,
              plan_seconds: Annotated[float, typer.Option("--plan-seconds", min=1, help="with --plan: measuring "
                                                          "time after which the other shapes are estimated")]
              = 120.0,
              json_out: JsonOpt = False) -> None:
    """Re-run a seed's study from its preset and print its table; writes its figure. --list: every preset;
    --explain: its paper scale against the seed; --plan: how long a scale takes on this device."""
    from ..api.reproduce import run_preset
    from ..sweeps.presets import load_preset

    if list_:
        _list_presets(json_out)
        return
    if markdown and not explain:
        raise UserError("--markdown: only with --explain (depthlab reproduce --explain --markdown)")
    if explain:
        _explain(name, markdown, json_out, scale)
        return
    if name is None:
        raise UserError("NAME: name a preset, e.g. depthlab reproduce seed001-depth (depthlab reproduce --list "
                        "lists them)")
    if plan:
        _plan(load_preset(name, scale, with_device(set_, device)), store, group_size, plan_seconds, json_out)
        return

    vector = vector_format(format_)
    check_output(out, "--out", folder=True, store=store)  # before any training
    preset = load_preset(name, scale, with_device(set_, device, workers=workers))
    threads = setup_threads()
    db = open_store(store)
    if not json_out:
        console.print(f"[bold]{preset.title}[/] ({preset.reproduces}), scale {scale}: {preset.size}, "
                      f"{threads} threads. {preset.note}")
    result, tables = run_preset(preset, db, out, lambda configs, label: run_sweep(configs, db, group_size, json_out,
                                                                                   label), vector, finished_only)
    if json_out:
        emit(result)
        return
    show(*tables)
    console.print(f"figure: {result.get('figure')}\nstore: {db.root}  ({result['seconds']:.0f} s)")


def _explain(name: str | None, markdown: bool, json_out: bool, scale: str) -> None:
    """``--explain``: a preset's paper scale against its seed (or, with ``--markdown``, the table of
    docs/how-to/presets.md)."""
    from rich.markup import escape

    from ..analysis.tables import Table
    from ..sweeps import settings
    from ..sweeps.presets import preset_names

    if markdown:
        names = [name] if name else preset_names()
        if name:
            settings.explain(name)  # an unknown name fails with the allowed ones
        text = settings.markdown(names)
        if json_out:
            emit({"presets": names, "markdown": text})
        else:
            typer.echo(text, nl=False)
        return
    if name is None:
        raise UserError("--explain: name a preset (or add --markdown for every preset's table)")
    out = settings.explain(name)
    if json_out:
        emit(out)
        return
    if scale != "paper":
        console.print(f"(--explain describes the paper scale; --scale {scale} shrinks it as its note says)")
    table = Table.of("setting", "the seed", "ours", "why", title=f"{name} --scale paper against its seed",
                     title_justify="center")
    for row in out["settings"]:
        where = ", ".join(f"{k}={settings.show(v)}" for k, v in (row["where"] or {}).items())
        seed = f"{row['seed']} ({row['section']})"
        ours = row["ours"] if row["differs"] else "= the seed"
        why = (row["why"] or "") + ("\n--set " + " --set ".join(row["seed_set"]) if row["seed_set"] else "")
        table.add_row(*map(escape, (row["setting"] + (f" ({where})" if where else ""), seed, ours, why)))
    show(table)


def _plan(preset, store: Path | None, group_size: int | None, seconds: float, json_out: bool) -> None:
    """``--plan``: the scale's projected wall time on this device."""
    from ..analysis.tables import Table
    from ..api.reproduce import plan_for
    from ..store import default_store_path

    setup_threads()
    out = plan_for(preset, store or default_store_path(), group_size, seconds)
    name, scale = preset.name, preset.scale
    if json_out:
        emit(out)
        return
    table = Table.of("task", "model", "runs/group", "groups", "steps", "s/step", "projected",
                     title=f"{name} --scale {scale}: plan on {out['device']} ({out['threads']} thread"
                           f"{'s' if out['threads'] != 1 else ''})",
                     title_justify="center")
    for d in out["shapes_detail"]:
        table.add_row(d["task"], d["model"], str(d["runs_per_group"]), str(d["groups"]), f"{d['steps']:,}",
                      f"{d['seconds_per_step']:.3g}" + ("" if d["measured"] else " (est.)"),
                      duration(d["projected_seconds"]))
    show(table)
    done = f" ({out['done']} already done in the store)" if out["done"] else ""
    console.print(f"{out['runs']} runs{done} in {out['groups']} groups ({out['shapes']} shapes), {out['steps']:,} "
                  f"group steps: projected [bold]{duration(out['projected_seconds'])}[/] here — an upper bound "
                  f"(runs that stop early take less); measured in {out['measured_seconds']:.0f} s.")


def duration(seconds: float) -> str:
    """Seconds in words a plan reads at a glance: 45 s, 12 min, 3.4 h, 5.2 days, 3.1 weeks."""
    for unit, size in (("weeks", 7 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}" if unit in ("weeks", "days", "h") else f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _list_presets(json_out: bool) -> None:
    """Every preset file, its seed figures and its scales' sizes (a new file in presets/ appears here as it is)."""
    from ..analysis.tables import Table
    from ..sweeps.presets import preset_info, preset_names
    from ..sweeps.settings import rows

    presets = [{**preset_info(name), "settings": rows(name)} for name in preset_names()]
    if json_out:
        emit({"presets": presets})
        return
    table = Table.of("preset", "draws", "scales", title="presets: depthlab reproduce NAME --scale SCALE",
                     title_justify="center")
    for p in presets:
        table.add_row(p["name"], "\n".join(p["figures"]) or p["reproduces"],
                      "\n".join(f"{scale}: {s['size']}" for scale, s in p["scales"].items()))
    show(table)


def _climb(studies, db, group_size: int | None, quiet: bool, label: str, executor: str = "local",
           address: str | None = None) -> list:
    """Climb each capability study in depth, training one depth's runs at a time (see sweeps.climb)."""
    from ..api.reproduce import climb_studies

    session = nullcontext()
    if executor == "ray":
        from ..sweeps.ray_executor import ray_session

        session = ray_session(address)
    with session:
        return climb_studies(studies, db, lambda configs, description: run_sweep(
            configs, db, group_size, quiet, description, executor, address), label)


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
        format_: FormatOpt = "png", store: StoreOpt = None, group_size: GroupSizeOpt = None,
        executor: ExecutorOpt = "local", address: AddressOpt = None, device: DeviceOpt = None,
        workers: WorkersOpt = None,
        json_out: JsonOpt = False) -> None:
    """The smallest depth at which a strict majority of seeds reach --target on held-out data, per width.

    Climbs one depth at a time (every width, value and seed of a depth trained batched) and stops once every
    row is settled; runs already in the store are reused. Training: the seed001-depth preset's settings
    (AdamW, lr 3e-3, 300 warm-up steps, 2000 steps; attention_only with paper init, qk_scale 0.01); every
    run stops at an accuracy halfway between the target and 1. Change any of it with --set train.steps=500.
    """
    from ..config import apply_overrides
    from ..report.summaries import min_depth_summary
    from ..sweeps import climb as cap
    from ..sweeps.presets import recipe

    check_executor(executor, address)
    vector = vector_format(format_)
    check_output(figure, "--figure", suffixes=FIGURE_SUFFIXES, store=store)  # before any training
    overrides = cap.task_overrides(with_device(set_, device, executor, workers))
    base = apply_overrides(cap.default_base(task, model, recipe(CAPABILITY_RECIPE)), overrides)
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
    summary, tables = min_depth_summary(cells, path, f"{task} ({model})", vector=vector)
    elapsed = time.perf_counter() - started
    if json_out:
        emit({"task": task, "model": model, "target": study.target, "layers": study.layers, "seeds": study.seeds,
              "vary": field, **summary, "seconds": round(elapsed, 1), "threads": threads, "store": str(db.root)})
        return
    show(*tables)
    console.print(f"figure: {summary['figure']}\nstore: {db.root}  ({elapsed:.0f} s)")


@app.command()
def bench(runs: Annotated[str | None, typer.Option(help="group sizes to measure, comma-separated "
                                                        "(default 1,4,16,64; with --ops 1,16)")] = None,
          case: Annotated[list[str] | None, typer.Option(help="icqa-quick, icqa-paper, retrieval (the default "
                                                         "three), icqa-quick-stream2, retrieval-stream2, a "
                                                         "family case such as mamba-n400-w64, or families "
                                                         "(all 24)")] = None,
          seconds: Annotated[float, typer.Option(min=0.1, help="minimum seconds per measurement")] = 1.0,
          rounds: Annotated[int, typer.Option(min=1, help="interleaved repetitions; rates are their medians")] = 3,
          device: Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N: where both train")] = "cpu",
          ops: Annotated[bool, typer.Option("--ops", help="count ATen operations per training step instead "
                                                          "(torch.profiler)")] = False,
          compile: Annotated[str, typer.Option("--compile", help="the engine's step as it is (off), compiled with "
                                                                 "torch.compile (on: train.compile), or both in turn "
                                                                 "(rows say which)")] = "off",
          json_out: JsonOpt = False) -> None:
    """Measure the batched engine against a plain loop and the machine's peak, or count the operations of its
    training step with --ops (see benchmarks/)."""
    from ..training.bench_cases import case_names
    from ..training.throughput import check_sizes, run_benchmark

    known = case_names()
    for name in case or []:
        if name not in known:
            raise UserError(f"--case: unknown case {name!r}; allowed: {', '.join(known)}")
    modes = {"off": ("off",), "on": ("on",), "both": ("off", "on")}
    if compile not in modes:
        raise UserError(f"--compile: {compile!r} is not one of off, on, both")
    runs = runs or ("1,16" if ops else "1,4,16,64")
    try:
        counts = [int(x) for x in runs.split(",")]
    except ValueError:
        raise UserError(f"--runs: expected comma-separated integers, e.g. 1,4,16 (got {runs!r})") from None
    if not counts or min(counts) < 1:
        raise UserError(f"--runs: group sizes must be positive integers (got {runs!r})")
    left_out = check_sizes(counts, case, device)  # before a config is built: --runs 1000000 allocated gigabytes
    if ops and left_out:
        raise UserError(left_out[0]["reason"])
    for entry in left_out:  # one line each on stderr (stdout keeps its one JSON object)
        print(f"warning: bench leaves out {entry['name']} at {entry['runs']} runs: {entry['reason']}",
              file=sys.stderr, flush=True)
    threads = setup_threads()
    if ops:
        _bench_ops(counts, case, device, json_out, modes[compile])
        return
    show_row = _row_printer(json_out, lambda row: console.print(
        f"{row['name']:<28} {row['precision']} R={row['runs']:<3} {_compiled(row)}"
        f"plain {row['plain_examples_per_s']:>10,.0f}/s "
        f"engine {row['engine_examples_per_s']:>10,.0f}/s  ×{row['speedup']:<6} "
        f"{row['fraction_of_peak']:.0%} of peak  data {row['data_fraction']:.1%}"))
    result = run_benchmark(counts, case, seconds, progress=show_row, rounds=rounds, device=device,
                           left_out=left_out, compile_modes=modes[compile])
    if json_out:
        emit(result)
        return
    console.print(f"{result['device']}: peak fp32 {result['peak_gflops']} GFLOP/s, bf16 "
                  f"{result['peak_gflops_bf16']} GFLOP/s, {threads} threads")


def _row_printer(json_out: bool, human: Callable[[dict], None]) -> Callable[[dict], None]:
    """Each measured row as it comes: for a person a table line, under --json one JSON line on stderr (stdout
    keeps its one object), so a benchmark stopped at a time limit still leaves what it measured."""
    if not json_out:
        return human
    return lambda row: print(json.dumps(row), file=sys.stderr, flush=True)


def _compiled(row: dict[str, Any]) -> str:
    """A measured row's mark when its step was compiled (``bench --compile``)."""
    return "compiled " if row["compile"] == "on" else ""


def _bench_ops(counts: list[int], case: list[str] | None, device: str, json_out: bool,
               compile_modes: tuple[str, ...]) -> None:
    from ..training.opcount import count_ops

    show_row = _row_printer(json_out, lambda row: console.print(
        f"{row['name']:<28} R={row['runs']:<3} {_compiled(row)}{row['parameter_tensors']:>3} parameter tensors: "
        f"{row['ops']:>7,.0f} ATen ops/step ({row['top_ops']:,.0f} called directly; forward "
        f"{row['forward_ops']:,.0f}, backward {row['backward_ops']:,.0f}, optimizer {row['optimizer_ops']:,.0f}, "
        f"data {row['data_ops']:,.0f})"
        + (f", {row['kernels']:,.0f} kernels" if "kernels" in row else "")))
    result = count_ops(counts, case, device, progress=show_row, compile_modes=compile_modes)
    if json_out:
        emit(result)
