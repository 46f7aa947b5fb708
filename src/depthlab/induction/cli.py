"""``depthlab induction`` (seed 004's measurements) and ``depthlab export RUN --to transformerlens``.

:func:`register` adds both commands to a Typer app. With ``--json`` each prints exactly one JSON object; user
mistakes raise :class:`depthlab.errors.UserError` (one line, exit code 2).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from depthlab.errors import UserError

from .sequences import SEED

JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object to stdout and nothing else")]
StoreOpt = Annotated[Path | None, typer.Option("--store", help="store folder [$DEPTHLAB_STORE, ./depthlab-runs]")]


def _emit(obj: dict[str, Any]) -> None:
    from depthlab.store import to_jsonable

    sys.stdout.write(json.dumps(to_jsonable(obj), allow_nan=False) + "\n")
    sys.stdout.flush()


def summary_tables(result: dict[str, Any]) -> list[Table]:
    """Rich tables of one model's summary: strengths and powers, then bleeding by neighbour rank."""
    stats = Table("", "mean", "median", "sd", "n", title=f"{result['model']}: tokens {result['tokens']}")
    for label, key in (("induction strength", "strength"), ("A power", "a_power"), ("B power", "b_power")):
        s = result[key]
        stats.add_row(label, f"{s['mean']:.3f}", f"{s['median']:.3f}", f"{s['sd']:.3f}", str(s["n"]))
    corr = result["power_correlation"]
    below = {role: result[f"{role}_power"]["fraction_below_zero"] for role in ("a", "b")}
    stats.caption = (f"correlation of A and B power {'—' if corr is None else f'{corr:.3f}'}; powers below zero: "
                     f"A {below['a']:.1%}, B {below['b']:.1%}")
    bleed = Table("scored token", "mean strength", "± se", title="bleeding: strength of B's nearest tokens")
    rows = [("B", result["bleeding"]["b"])]
    rows += [(f"neighbour {r['rank']}", r) for r in result["bleeding"]["by_rank"]]
    rows += [("random tokens", result["bleeding"]["random"])]
    for label, s in rows:
        bleed.add_row(label, f"{s['mean']:.3f}", f"{s['se']:.3f}")
    return [stats, bleed]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "model"


def _load_model(model: str | None, run: str | None, store: Path | None, device: str):
    """(LogitModel, figure folder, protocol) for ``--model`` or ``--run`` (a run: its task's length)."""
    from depthlab.store import default_store_path

    if (model is None) == (run is None):
        raise UserError("--model/--run: give exactly one (a TransformerLens model name or folder, or a run id)")
    if run is not None:
        from depthlab.analysis.cli import _open

        db, loaded = _open(store, run)
        from .model import RunModel

        try:
            lm = RunModel(loaded)
        except ValueError as e:
            raise UserError(f"--run: {e}") from None
        return lm, db.artifact_path(loaded.id, "figure", "analysis/induction"), lm.protocol
    from . import tl

    folder = (store or default_store_path()) / "figures" / f"induction-{_slug(model)}"
    return tl.load(model, device), folder, SEED


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
              store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Seed 004: induction strength, A/B power and bleeding of a language model; writes four figures."""
    from .sequences import default_token_range, parse_token_range
    from .study import Settings, run_study, summary, write_figures

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
    figures = write_figures(study, out or folder, "induction")
    seconds = round(time.perf_counter() - started, 1)
    result = {**summary(study), "figures": [str(f) for f in figures], "seconds": seconds}
    if json_out:
        _emit(result)
        return
    for table in summary_tables(result):
        Console().print(table)
    Console().print("figures: " + ", ".join(result["figures"]))


def export(run: Annotated[str, typer.Argument(help="run id (or unique prefix)")],
           to: Annotated[str, typer.Option("--to", help="format: transformerlens")] = "transformerlens",
           out: Annotated[Path | None, typer.Option(
               help="folder (default: <store>/artifacts/<run>/transformerlens)")] = None,
           store: StoreOpt = None, json_out: JsonOpt = False) -> None:
    """Write a run's weights in another library's format (model.safetensors + config.json)."""
    from depthlab.analysis.cli import _open

    from .export import transformerlens_export, write_export

    if to != "transformerlens":
        raise UserError(f"--to: unknown format {to!r}; allowed: transformerlens")
    db, loaded = _open(store, run)
    state, config = transformerlens_export(loaded)
    folder = out or db.artifact_path(loaded.id, "export", "transformerlens")
    files = write_export(state, config, folder)
    result = {"run": loaded.id, "format": to, "folder": str(folder), "files": [str(f) for f in files],
              "relu_hooks": config["depthlab"].get("attention") == "relu"}
    if json_out:
        _emit(result)
        return
    Console().print(f"run {loaded.id} → {folder}" + ("  (ReLU attention: load with depthlab.induction.tl."
                                                      "load_folder, which attaches the hooks)"
                                                      if result["relu_hooks"] else ""))


def register(app: typer.Typer) -> None:
    """Add ``depthlab induction`` and ``depthlab export`` to ``app``."""
    app.command("induction")(induction)
    app.command("export")(export)
