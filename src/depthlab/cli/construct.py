"""``depthlab construct``: build a theorem's construction and check it, or list them."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ..analysis.tables import Column, Table
from ..errors import UserError
from .app import app
from .common import JsonOpt, emit, show


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """``key=value`` strings to a mapping; values are read as YAML (``3``, ``icqa``)."""
    from ..bounded import BoundError, parse_yaml

    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise UserError(f"--set {item}: expected key=value, e.g. k=4")
        key, text = item.split("=", 1)
        key = key.strip()
        if not key:
            raise UserError(f"--set {item}: the key is empty")
        try:
            out[key] = parse_yaml(text, f"--set {key}")
        except BoundError as e:
            raise UserError(f"--set {key}: cannot parse value {text!r} ({e.detail})") from None
    return out


@app.command("construct")
def construct(
    name: Annotated[str | None, typer.Argument(help="construction name (see --list)")] = None,
    list_: Annotated[bool, typer.Option("--list", help="list the constructions and their parameters")] = False,
    set_: Annotated[list[str] | None, typer.Option("--set", help="a parameter: --set k=4 (repeatable)")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Build a theorem's transformer with hand-set weights and check it on the task's dataset (or --list)."""
    import torch

    from ..constructions.registry import listing, run

    if list_:
        if name is not None:
            raise UserError("--list: takes no construction name")
        items = listing()
        if json_out:
            emit({"constructions": [{k: c[k] for k in ("name", "theorem", "parameters")} for c in items]})
            return
        table = Table([Column("name", no_wrap=True), Column("theorem"), Column("source"),
                       Column("parameters (defaults)")])
        for c in items:
            table.add_row(c["name"], c["theorem"], c["source"],
                          ", ".join(f"{k}={v}" for k, v in c["parameters"].items()))
        show(table)
        return
    if name is None:
        raise UserError("construction: give a name, or --list to see them")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small models: one thread is as fast and leaves the others free
    try:
        result = run(name, parse_sets(set_))
    finally:
        torch.set_num_threads(threads)
    if json_out:
        emit(result)
        return
    _show_result(result)


def _show_result(result: dict[str, Any]) -> None:
    """Each key on a line of its own, then the tables of width against N and of depth against D."""
    if result.get("construction") == "seed003-recurrent-bounds":
        _show_bounds(result)
        return
    for key, value in result.items():
        if key in ("by_kind", "rows", "constructions"):
            continue
        if key == "dependent_set" and len(value) > 8:
            value = [*value[:8], f"… ({len(value)} sequences)"]
        text = json.dumps(value, ensure_ascii=False) if isinstance(value, list | dict) else str(value)
        print(f"{key}: {text}")
    if "constructions" in result:
        table = Table.of("construction", "N", "k", "width", "η")
        for cname, entry in result["constructions"].items():
            for r in entry["rows"]:
                table.add_row(cname, str(r["N"]), str(r["k"]), str(r["width"]), f"{r['eta']:.2f}")
        show(table)
        for cname, entry in result["constructions"].items():
            fit = entry["fit_width"]
            print(f"{cname}: width ≈ {fit['slope_per_ln_N']:.2f}·ln N + {fit['intercept']:.2f} (R² {fit['r2']:.3f}); "
                  f"k ≈ {entry['fit_k']['slope_per_ln_N']:.2f}·ln N + {entry['fit_k']['intercept']:.2f}")
    if "rows" in result:
        table = Table.of("D", "layers (last position holds x_D)", "⌈log3(4D+1)⌉",
                         "layers (some position holds x_0…x_D)", "⌈log3(2D)⌉")
        for r in result["rows"]:
            table.add_row(str(r["D"]), str(r["layers_last"]), str(r["last_position_form"]), str(r["layers_any"]),
                          str(r["closed_form"]))
        show(table)


def _show_bounds(result: dict[str, Any]) -> None:
    """seed003-recurrent-bounds: the theorem, then a row per length: the bound, the exact one-way complexity where
    enumerable, and each trained model of the store at that length."""
    print(f"{result['theorem']} ({result['source']}): {result['statement']}")
    print(f"bound on {result['of']}: {result['bound']}")
    table = Table.of("N", "bound", "exact one-way (bits)", "trained models (state bits or mH; accuracy)",
                     title=f"{result['task']}: held = accuracy ≥ {result['held_at']}")
    for row in result["rows"]:
        exact = row["exact_one_way"]
        models = "; ".join(
            f"{m['model']} ({m['layers']}, {m['width']}): {m.get('state_bits', m.get('mH'))}"
            f"{'' if m['above_bound'] is None else (' ≥ bound' if m['above_bound'] else ' < bound')}, "
            f"{'—' if m['accuracy'] is None else format(m['accuracy'], '.3f')} "
            f"{'held' if m['held'] else 'failed'}" for m in row["models"]) or "—"
        table.add_row(str(row["N"]), f"{row['bound']:.4g}", "—" if exact is None else str(exact["bits"]), models)
    show(table)
