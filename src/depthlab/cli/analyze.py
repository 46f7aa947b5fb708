"""``depthlab analyze attention|ablate|circuit|emergence|label-sets``: looking inside a trained run.

Figures go to the run's artifact folder (``<store>/artifacts/<run>/``; with ``--format pdf|svg`` each also as a
vector file next to its PNG) and their paths are in the JSON. Examples
are drawn from the task's evaluation split with ``--seed`` (the same ones for every run of a task), or given with
``--example`` in ``depthlab sample`` notation (token tasks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ..analysis.tables import Table
from ..errors import UserError
from .app import app
from .common import FIGURE_SUFFIXES, JsonOpt, StoreOpt, check_output, emit, open_run, show
from .figures import FormatOpt, vector_format

analyze_app = typer.Typer(no_args_is_help=True, help="Look inside a trained run: attention maps, ablations, circuits, "
                                                     "emergence (seed 002 Appendix E, Figure 7), label sets.")
app.add_typer(analyze_app, name="analyze")

RunArg = Annotated[str, typer.Argument(help="run id (or a unique prefix; see `depthlab runs`)")]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, help="seed of the sampled evaluation examples")]
EXAMPLES = 64  # `depthlab attention --example I` indexes the evaluation examples `analyze attention -n 64` draws


def _examples(run, n: int, seed: int, texts: list[str] | None):
    from ..analysis.runs import encode_example, sample_examples
    from ..tasks.base import Batch

    if texts:
        if run.task.input_dim:
            raise UserError(f"--example: task {run.task.name} has vector inputs; use -n and --seed to sample")
        return Batch.concat([encode_example(run.task, t) for t in texts])
    return sample_examples(run.task, n, seed)


def _save_figure(db, run_id: str, fig, name: str, meta: dict, vector: str | None) -> Path:
    """Write ``fig`` as the run's artifact ``name`` (and its vector file), each recorded in the store."""
    from ..draw import save

    path = save(fig, db.artifact_path(run_id, "figure", name), vector)
    for file in dict.fromkeys([name, *([str(Path(name).with_suffix(f".{vector}"))] if vector else [])]):
        db.add_artifact(run_id, "figure", file, meta)
    return path


@analyze_app.command("attention")
def attention_cmd(run: RunArg, example: Annotated[list[str] | None, typer.Option(
                      "--example", help="an input in `depthlab sample` notation (repeatable; token tasks)")] = None,
                  n: Annotated[int, typer.Option("-n", min=1, max=64, help="sampled examples")] = 2,
                  seed: SeedOpt = 0, values: Annotated[bool, typer.Option(
                      "--values", help="also put the attention values in the JSON")] = False,
                  format_: FormatOpt = "png", store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Attention maps of every layer and head, labelled with the decoded tokens (seed 001 Figure 3 style)."""
    from ..analysis.attention import examples_with_attention
    from ..draw.attention_maps import attention_figure

    vector = vector_format(format_)
    db, loaded = open_run(store, run, readonly=False)  # records its figures in the store
    batch = _examples(loaded, n, seed, example)
    items = examples_with_attention(loaded, batch)
    out = []
    for i, item in enumerate(items):
        name = f"analysis/attention-seed{seed}-{i}.png" if not example else f"analysis/attention-example-{i}.png"
        path = _save_figure(db, loaded.id, attention_figure([item], f"run {loaded.id}"), name,
                            {"analysis": "attention", "text": item["text"]}, vector)
        row = {k: v for k, v in item.items() if k != "layers"}
        row["figure"] = str(path)
        if values:
            row["layers"] = [layer.tolist() for layer in item["layers"]]
        out.append(row)
    result = {"run": loaded.id, "step": loaded.step, "task": loaded.task.name, "examples": out,
              "figures": [r["figure"] for r in out]}
    if json_out:
        emit(result)
        return
    for r in out:
        Console().print(f"{r['text']}\n  figure: {r['figure']}")


@app.command("attention")
def attention_picture_cmd(run: RunArg, tokens: Annotated[str | None, typer.Option(
                              "--tokens", help="the input in the task's vocabulary, as `depthlab sample` writes it "
                                               "(a final _label gives the target)")] = None,
                          example: Annotated[int, typer.Option(
                              "--example", min=0, max=EXAMPLES - 1,
                              help=f"without --tokens: example I of the {EXAMPLES} evaluation examples drawn with "
                                   "--seed")] = 0,
                          seed: SeedOpt = 0, per_panel: Annotated[bool, typer.Option(
                              "--per-panel", help="scale each panel to its own largest weight")] = False,
                          out: Annotated[Path | None, typer.Option(
                              help="the picture's file (default: the run's analysis/ folder)")] = None,
                          format_: FormatOpt = "png", store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """One picture of a run's attention on one input: every layer × head, the tokens on the axes, a colour bar
    (`depthlab.draw.attention`); --json prints the patterns as nested lists indexed by layer, head, query and
    key."""
    from ..analysis.attention import examples_with_attention
    from ..analysis.runs import encode_example, sample_examples
    from ..draw import attention, save

    vector = vector_format(format_)
    check_output(out, "--out", suffixes=FIGURE_SUFFIXES, store=store)  # a folder, a device, …: before any work
    db, loaded = open_run(store, run, readonly=out is not None)  # without --out, the figure is recorded in the store
    if not loaded.model.heads_per_layer:
        raise UserError(f"attention: run {loaded.id} is a {loaded.config.model.name} model, which has no attention")
    if tokens is not None:
        batch = encode_example(loaded.task, tokens, "--tokens")
    else:
        batch = sample_examples(loaded.task, EXAMPLES, seed, option="--example").take(slice(example, example + 1))
    item = examples_with_attention(loaded, batch)[0]
    answer = "" if item["prediction"] is None else f"predicted {item['prediction']}" + (
        "" if item["target"] is None else f", target {item['target']}")
    patterns = {f"blocks.{layer}.attn.hook_pattern": p for layer, p in enumerate(item["layers"])}
    fig = attention(patterns, item["tokens"], title=f"run {loaded.id}: {' '.join(item['tokens'])}   {answer}",
                    shared_scale=not per_panel, kind=loaded.model.cfg.attention)
    name = f"analysis/attention-{'tokens' if tokens is not None else f'seed{seed}-example{example}'}.png"
    path = save(fig, out, vector) if out is not None else _save_figure(db, loaded.id, fig, name,
                                                                        {"analysis": "attention", "text": item["text"]},
                                                                        vector)
    result = {"run": loaded.id, "step": loaded.step, "task": loaded.task.name, "text": item["text"],
              "tokens": item["tokens"], "target": item["target"], "prediction": item["prediction"],
              "correct": item["correct"], "figure": str(path), "patterns": [p.tolist() for p in item["layers"]]}
    if json_out:
        emit(result)
        return
    print(f"{item['text']}   {answer}\n  figure: {path}")


@analyze_app.command("ablate")
def ablate_cmd(run: RunArg, head: Annotated[list[str], typer.Option(
                   "--head", help="L.H=uniform|identity|previous|recorded|onehot:ROLE|onehot:FROM->TO (repeatable)")],
               n: Annotated[int, typer.Option("-n", min=1, help="evaluation examples")] = 2048,
               seed: SeedOpt = 0, store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Re-evaluate with chosen heads' patterns replaced: loss, accuracy and partial losses before and after."""
    from ..analysis.ablation import ablate, parse_ablation

    _, loaded = open_run(store, run)
    patterns = dict(parse_ablation(h, loaded.model, loaded.task) for h in head)
    result = ablate(loaded.model, loaded.task, _examples(loaded, n, seed, None), patterns)
    result = {"run": loaded.id, "step": loaded.step, **result}
    if json_out:
        emit(result)
        return
    table = Table.of("", "loss", "accuracy", *result["before"]["partial_losses"], title_justify="center",
                     title=f"run {loaded.id}: " + ", ".join(f"{a['head']}={a['pattern']}" for a in result["ablations"]))
    for label in ("before", "after"):
        s = result[label]
        acc = "—" if s["accuracy"] is None else f"{s['accuracy']:.3f}"
        table.add_row(label, f"{s['loss']:.4f}", acc, *[f"{v:.4f}" for v in s["partial_losses"].values()])
    show(table)


@analyze_app.command("circuit")
def circuit_cmd(run: RunArg, circuit: Annotated[Path | None, typer.Argument(
                    help="circuit file (YAML); omit with --discover")] = None,
                discover_: Annotated[bool, typer.Option("--discover", help="find a circuit by ablation first")] = False,
                threshold: Annotated[float, typer.Option(help="--discover: least mean attention of a candidate path")
                                     ] = 0.3,
                tolerance: Annotated[float, typer.Option(help="--discover: the loss bound (see --accept)")] = 0.05,
                accept: Annotated[str, typer.Option(help="--discover: keep pruning while the loss is 'below' "
                                                         "--tolerance (seed 002 App. E: below 0.05) or 'within' "
                                                         "--tolerance of the intact model's")] = "within",
                n: Annotated[int, typer.Option("-n", min=1, help="evaluation examples")] = 1024,
                seed: SeedOpt = 0, format_: FormatOpt = "png", store: StoreOpt = None,
                json_out: JsonOpt = False) -> None:
    """Seed 002 Appendix E: reduce the model to a circuit's paths, then drop each path and report the loss rise."""
    from ..analysis.circuit import discover, load_circuit, validate
    from ..draw.circuit import circuit_figure

    if (circuit is None) == (not discover_):
        raise UserError("circuit: give a circuit file or --discover (not both)")
    vector = vector_format(format_)
    db, loaded = open_run(store, run, readonly=False)  # records its figures in the store
    batch = _examples(loaded, n, seed, None)
    log = None
    if discover_:
        found, log = discover(loaded.model, loaded.task, batch, threshold, tolerance, accept)
        if not found.paths:
            raise UserError(f"--discover: {log.get('note', 'no circuit found')} (threshold {threshold})")
        name = "analysis/circuit-discovered.yaml"
        circuit = found.dump(db.artifact_path(loaded.id, "circuit", name),
                             f"circuit of run {loaded.id} found by `depthlab analyze circuit --discover`")
        db.add_artifact(loaded.id, "circuit", name, {"paths": len(found.paths)})
        spec = found
    else:
        spec = load_circuit(circuit, loaded.model, loaded.task)
    result = validate(loaded.model, loaded.task, batch, spec)
    figure = _save_figure(db, loaded.id, circuit_figure(result, loaded.id), "analysis/circuit.png",
                          {"analysis": "circuit"}, vector)
    out = {"run": loaded.id, "step": loaded.step, "circuit_file": str(circuit), "figure": str(figure), **result}
    if log is not None:
        out["discovery"] = log
    if json_out:
        emit(out)
        return
    table = Table.of("path", "mean attention", "loss without it", "rise", title_justify="center",
                     title=f"run {loaded.id}: intact loss {result['intact']['loss']:.4f}, circuit only "
                           f"{result['circuit']['loss']:.4f}")
    for p in result["paths"]:
        table.add_row(p["path"], f"{p['attention']:.2f}", f"{p['loss_without']:.4f}", f"{p['rise']:+.4f}")
    show(table)
    Console().print(f"circuit: {circuit}\nfigure: {figure}")


@analyze_app.command("emergence")
def emergence_cmd(run: RunArg, circuit: Annotated[Path, typer.Argument(help="circuit file (YAML)")],
                  examples: Annotated[int, typer.Option(min=1, help="sequences for the mean attention")] = 32,
                  seed: SeedOpt = 1, format_: FormatOpt = "png", store: StoreOpt = None,
                  json_out: JsonOpt = False) -> None:
    """Mean attention on each path at every kept checkpoint; the first step above 0.5 (seed 002 Figure 7)."""
    from ..analysis.circuit import load_circuit
    from ..analysis.emergence import emergence, emergence_table
    from ..draw.emergence import emergence_figure

    vector = vector_format(format_)
    db, loaded = open_run(store, run, readonly=False)  # records its figures in the store
    spec = load_circuit(circuit, loaded.model, loaded.task)
    result = emergence(db, loaded, spec, examples=examples, seed=seed)
    figure = _save_figure(db, loaded.id, emergence_figure(result, f"run {loaded.id}"), "analysis/emergence.png",
                          {"analysis": "emergence"}, vector)
    result["figure"] = str(figure)
    result["circuit_file"] = str(circuit)
    if json_out:
        emit(result)
        return
    show(emergence_table(result, f"run {loaded.id}: emergence of the circuit's paths"))
    Console().print(f"figure: {figure}")


@analyze_app.command("label-sets")
def label_sets_cmd(run: RunArg, n: Annotated[int, typer.Option("-n", min=1, help="evaluation examples")] = 1000,
                   seed: SeedOpt = 0, positions: Annotated[bool, typer.Option(
                       "--positions", help="also put the rates of every position in the JSON")] = False,
                   store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Seed 003 Eq-ncp: which prefixes miss the all-prefixes criterion; greedy copy accuracy beside it."""
    from ..analysis.label_sets import label_set_breakdown

    _, loaded = open_run(store, run)
    result = label_set_breakdown(loaded.model, loaded.task, _examples(loaded, n, seed, None))
    if not positions:
        result.pop("per_position")
    result = {"run": loaded.id, "step": loaded.step, "task": loaded.task.name, **result}
    if json_out:
        emit(result)
        return

    def rate(value: float | None) -> str:
        return "—" if value is None else f"{value:.3f}"

    table = Table.of("prefixes", "label set right", "top label valid", "false positives", "strings copied (top label)",
                     title_justify="center", title=f"run {loaded.id} (step {loaded.step}), {result['examples']} "
                                                   f"strings: every prefix right {result['accuracy']:.3f}")
    table.add_row(f"open ({result['open_prefixes']})", rate(result["open_sets_right"]), "", "", "")
    table.add_row(f"determined ({result['determined_prefixes']})", rate(result["determined_sets_right"]),
                  rate(result["determined_top1"]), rate(result["determined_false_positives"]),
                  rate(result["determined_top1_all"]))
    show(table)
