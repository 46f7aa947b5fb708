"""``depthlab induction`` (seed 004's measurements) and ``depthlab export RUN --to transformerlens``."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ..errors import UserError
from .app import app
from .common import JsonOpt, StoreOpt, check_output, emit, open_run, show
from .figures import FormatOpt, vector_format


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "model"


def _load_model(model: str | None, run: str | None, store: Path | None, device: str):
    """(LogitModel, figure folder, protocol) for ``--model`` or ``--run`` (a run: its task's length)."""
    from ..store import default_store_path

    if (model is None) == (run is None):
        raise UserError("--model/--run: give exactly one (a TransformerLens model name or folder, or a run id)")
    if run is not None:
        from ..induction.model import RunModel

        db, loaded = open_run(store, run)
        try:
            lm = RunModel(loaded)
        except ValueError as e:
            raise UserError(f"--run: {e}") from None
        return lm, db.artifact_path(loaded.id, "figure", "analysis/induction"), lm.protocol
    from ..induction import tl
    from ..induction.sequences import SEED

    folder = (store or default_store_path()) / "figures" / f"induction-{_slug(model)}"
    return tl.load(model, device), folder, SEED


@app.command("induction")
def induction(model: Annotated[str | None, typer.Option(
                  "--model", help="TransformerLens model: a local folder (config.json + state dict) or a name in "
                                  "the local cache")] = None,
              run: Annotated[str | None, typer.Option("--run", help="a depthlab run id (or unique prefix)")] = None,
              tokens: Annotated[str | None, typer.Option(
                  "--tokens", help="token ids LO-HI scored and drawn (default 4-10003, cut to the vocabulary)")] = None,
              sequences: Annotated[int, typer.Option(min=2, help="sequences for strengths and bleeding")] = 4096,
              per_token: Annotated[int, typer.Option("--per-token", min=2, help="sequences per token for A/B power")
                                   ] = 256,
              neighbours: Annotated[int, typer.Option(min=1, help="nearest tokens to B scored (ranks 1..k)")] = 15,
              fix_a: Annotated[int | None, typer.Option(
                  "--fix-a", help="A of the fixed-A 2-D histogram (default: the token of median A power)")] = None,
              fix_b: Annotated[int | None, typer.Option(
                  "--fix-b", help="B of the fixed-B 2-D histogram (default: the token of median B power)")] = None,
              seed: Annotated[int, typer.Option(min=0)] = 0,
              batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="sequences per forward pass")] = 512,
              device: Annotated[str, typer.Option(help="torch device of a TransformerLens model")] = "cpu",
              out: Annotated[Path | None, typer.Option(help="figure folder (default: the run's artifacts, "
                                                            "or <store>/figures/induction-NAME)")] = None,
              format_: FormatOpt = "png", store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Seed 004: induction strength, A/B power and bleeding of a language model; writes four figures."""
    from ..draw.induction import write_figures
    from ..induction.sequences import default_token_range, parse_token_range
    from ..induction.study import Settings, run_study, summary
    from ..induction.tables import summary_tables

    vector = vector_format(format_)
    check_output(out, "--out", folder=True, store=store, inputs={"--model": Path(model) if model else None})
    lm, folder, protocol = _load_model(model, run, store, device)
    try:
        token_range = default_token_range(lm.d_vocab) if tokens is None else parse_token_range(tokens, lm.d_vocab)
    except ValueError as e:
        raise UserError(f"--tokens: {e}") from None
    for name, value in (("--fix-a", fix_a), ("--fix-b", fix_b)):
        if value is not None and not token_range.lo <= value <= token_range.hi:
            raise UserError(f"{name}: must be a token id in {token_range.lo}-{token_range.hi}, got {value}")
    if neighbours >= token_range.size:
        raise UserError(f"--neighbours: must be below the number of tokens in the range ({token_range.size})")
    settings = Settings(token_range, sequences, per_token, neighbours, seed, batch_size, fix_a, fix_b, protocol)
    started = time.perf_counter()
    try:
        study = run_study(lm, settings)
    except ValueError as e:
        raise UserError(f"--model/--run: {e}") from None
    figures = write_figures(study, out or folder, "induction", vector)
    seconds = round(time.perf_counter() - started, 1)
    result = {**summary(study), "figures": [str(f) for f in figures], "seconds": seconds}
    if json_out:
        emit(result)
        return
    show(*summary_tables(result))
    Console().print("figures: " + ", ".join(result["figures"]))


@app.command("export")
def export(run: Annotated[str, typer.Argument(help="run id (or unique prefix)")],
           to: Annotated[str, typer.Option("--to", help="format: transformerlens")] = "transformerlens",
           out: Annotated[Path | None, typer.Option(
               help="folder (default: <store>/artifacts/<run>/transformerlens)")] = None,
           store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Write a run's weights in another library's format (model.safetensors + config.json)."""
    from ..models.export import transformerlens_export, write_export

    if to != "transformerlens":
        raise UserError(f"--to: unknown format {to!r}; allowed: transformerlens")
    check_output(out, "--out", folder=True, store=store)
    db, loaded = open_run(store, run)
    state, config = transformerlens_export(loaded.model, {"run": loaded.id, "step": loaded.step}, loaded.task)
    folder = out or db.artifact_path(loaded.id, "export", "transformerlens")
    files = write_export(state, config, folder)
    result = {"run": loaded.id, "format": to, "folder": str(folder), "files": [str(f) for f in files],
              "relu_hooks": config["depthlab"].get("attention") == "relu"}
    if json_out:
        emit(result)
        return
    Console().print(f"run {loaded.id} → {folder}" + ("  (ReLU attention: load with depthlab.induction.tl."
                                                      "load_folder, which attaches the hooks)"
                                                      if result["relu_hooks"] else ""))
