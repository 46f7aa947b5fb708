"""``depthlab llm-prompts`` and ``depthlab llm-bench``: seed 002 §4's prompts and benchmark."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn

from ..analysis.tables import Table
from ..errors import UserError
from ..llm.prompts import DEFAULT_CHAINS, FORMULATIONS, check_chains, check_formulation, resolve_depth
from .app import app
from .common import FIGURE_SUFFIXES, JsonOpt, check_output, console, emit, open_store, progress_bar, show
from .figures import FormatOpt, vector_format

_FORMULATION_HELP = ", ".join(FORMULATIONS)


@app.command("llm-prompts")
def llm_prompts(
    formulation: Annotated[str, typer.Argument(help=f"one of {_FORMULATION_HELP}")],
    depth: Annotated[
        int | None,
        typer.Option("--depth", help="D, statements per chain (equations, lives-with; default 5; kingdoms: 5)"),
    ] = None,
    n: Annotated[int, typer.Option("-n", min=1, help="number of prompts")] = 1,
    seed: Annotated[int, typer.Option("--seed", min=0, help="questions 0..n-1 of this seed (as llm-bench)")] = 0,
    chains: Annotated[int, typer.Option("--chains", min=1, help="interleaved chains")] = DEFAULT_CHAINS,
    json_out: JsonOpt = False,
) -> None:
    """Seed 002 Appendix A prompts: the prompt, the correct answer and the acceptable answers."""
    from ..llm.bench import require_question_memory
    from ..llm.prompts import generate_many

    check_formulation(formulation)
    d = resolve_depth(formulation, depth)
    check_chains(formulation, d, chains)
    require_question_memory([(formulation, d)], n, chains, f"-n: {n:,} prompts")
    prompts = generate_many(formulation, n, seed=seed, depth=d, chains=chains)
    if json_out:
        emit({"prompts": [p.to_dict() for p in prompts]})
        return
    sys.stdout.write("\n\n".join(p.appendix_text() for p in prompts) + "\n")


@app.command("llm-bench")
def llm_bench(
    model: Annotated[
        str | None, typer.Option("--model", help="local Hugging Face causal LM: a folder or a cached name")
    ] = None,
    endpoint: Annotated[
        str | None, typer.Option("--endpoint", help="OpenAI-compatible base URL, e.g. http://localhost:8000/v1")
    ] = None,
    model_name: Annotated[str | None, typer.Option("--model-name", help="model name sent to --endpoint")] = None,
    api_key_env: Annotated[
        str, typer.Option("--api-key-env", help="NAME of the environment variable holding the API key")
    ] = "OPENAI_API_KEY",
    formulation: Annotated[
        list[str] | None, typer.Option("--formulation", help=f"repeatable; default all: {_FORMULATION_HELP}")
    ] = None,
    depth: Annotated[str, typer.Option("--depth", help="depths for equations and lives-with: 5, 1-5 or 1,3,5")] = "1-5",
    n: Annotated[int, typer.Option("-n", min=1, help="questions per formulation and depth")] = 500,
    seed: Annotated[int, typer.Option("--seed", min=0)] = 0,
    chains: Annotated[int, typer.Option("--chains", min=1, help="interleaved chains")] = DEFAULT_CHAINS,
    max_tries: Annotated[
        int, typer.Option("--max-tries", min=1, help="asks per question until an acceptable answer")
    ] = 5,
    temperature: Annotated[float, typer.Option("--temperature", min=0.0, help="first try; 0 = greedy")] = 0.0,
    retry_temperature: Annotated[
        float, typer.Option("--retry-temperature", min=0.0, help="temperature of the re-samples")
    ] = 1.0,
    max_new_tokens: Annotated[
        int | None, typer.Option("--max-new-tokens", min=1, help="reply length cap (local default 16)")
    ] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="requests in flight (endpoint)")] = 4,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=0.001, help="seconds per HTTP request, in all (connect, headers, body)")] = 60.0,
    retries: Annotated[int, typer.Option("--retries", min=0, help="HTTP retries on 429/5xx/network errors")] = 5,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="prompts per generate call (local)")] = 1,
    device: Annotated[str | None, typer.Option("--device", help="local model device (default cuda if any)")] = None,
    store: Annotated[
        Path | None, typer.Option("--store", help="store folder (default: $DEPTHLAB_STORE or ./depthlab-runs)")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="figure file (default: in the run's artifacts)")] = None,
    markdown: Annotated[Path | None, typer.Option("--markdown", help="also write the table to this Markdown file")]
    = None,
    format_: FormatOpt = "png",
    json_out: JsonOpt = False,
) -> None:
    """Seed 002 §4: ask a language model the retrieval questions; accuracy per formulation and D.

    A rerun of the same command resumes: questions already answered are not asked again.
    """
    from ..draw import save
    from ..draw.llm import accuracy_figure
    from ..llm.bench import BenchConfig, parse_depths, run_bench

    vector = vector_format(format_)
    check_output(out, "--out", suffixes=FIGURE_SUFFIXES, store=store)  # before any question is asked
    check_output(markdown, "--markdown", store=store, inputs={"--out": out})
    if model and endpoint:
        raise UserError("--model, --endpoint: give one (--model for a local model, --endpoint for a served one)")
    if not model and not endpoint:
        raise UserError("--model or --endpoint: name a local model, or a served one with --model-name")
    if endpoint and not model_name:
        raise UserError("--model-name: required with --endpoint (the model the server should answer with)")
    if model_name and not endpoint:
        raise UserError("--model-name: only with --endpoint; name a local model with --model")
    config = BenchConfig(
        formulations=list(formulation or FORMULATIONS),
        depths=parse_depths(depth),
        n=n,
        seed=seed,
        chains=chains,
        max_tries=max_tries,
        temperature=temperature,
        retry_temperature=retry_temperature,
    )
    the_store = open_store(store)
    runner: Any
    if endpoint:
        from ..llm.runners import EndpointRunner

        runner = EndpointRunner(
            endpoint,
            model_name or "",
            api_key_env=api_key_env,
            timeout=timeout,
            retries=retries,
            concurrency=concurrency,
            max_new_tokens=max_new_tokens,
        )
    else:
        from ..llm.runners import HFRunner

        quiet = json_out or not console.is_terminal
        runner = HFRunner(model or "", max_new_tokens=max_new_tokens, batch_size=batch_size, device=device, quiet=quiet)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    try:
        with progress_bar(columns, "questions", None, json_out) as shown:
            advance = None if shown is None else (
                lambda done, total: shown[0].update(shown[1], completed=done, total=total))
            result = run_bench(runner, the_store, config, out=out, progress=advance)
    finally:
        runner.close()
        the_store.close()
    name = Path(result["model"]).name if model else result["model"]  # a local model by its folder's name
    save(accuracy_figure(result, title=name), result["figure"], vector)
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(bench_table(result, name).markdown(), encoding="utf-8")
    if json_out:
        emit(result)
        return
    _show(result, name)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}"


def bench_table(result: dict[str, Any], name: str) -> Table:
    """Accuracy per formulation and D (and per formulation over its depths), with the 95 % interval and chance;
    titled by ``name`` as the figure is (a local model by its folder's name, not this machine's path to it)."""
    table = Table.of("formulation", "D", "n", "acc %", "95% CI %", "chance %", "flagged", "tries",
                     title=f"{name}: seed 002 retrieval benchmark", title_justify="center")
    rows = [(c, "—" if c["depth"] is None else str(c["depth"])) for c in result["cells"]]
    per_cell = {f["formulation"]: sum(c["formulation"] == f["formulation"] for c in result["cells"])
                for f in result["formulations"]}  # fmt: skip
    rows += [(f, "all") for f in result["formulations"] if per_cell[f["formulation"]] > 1]
    rows.sort(key=lambda r: (FORMULATIONS.index(r[0]["formulation"]), r[1] == "all"))
    for row, d in rows:
        table.add_row(
            row["formulation"],
            d,
            str(row["n"]),
            _pct(row["accuracy"]),
            f"{_pct(row['ci_low'])}–{_pct(row['ci_high'])}",
            _pct(row["chance"]),
            str(row["flagged"]),
            "—" if row["mean_tries"] is None else f"{row['mean_tries']:.2f}",
        )
    return table


def _show(result: dict[str, Any], name: str) -> None:
    show(bench_table(result, name))
    out = Console()
    out.print(f"run {result['run_id']} in {result['store']} ({result['asked']} asked now, {result['resumed']} resumed)")
    if result["overall"]["failed"]:
        out.print(f"{result['overall']['failed']} questions refused by the endpoint: recorded as failed, not scored; "
                  "a rerun asks them again")
    out.print(f"figure: {result['figure']}")
