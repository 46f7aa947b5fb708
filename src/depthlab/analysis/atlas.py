"""The depth atlas as data: every settled capability cell beside the theory's bounds, the disagreements marked.

A *cell* is one task config (at one size of its axis) on one model config (at one width), climbed in depth over
the seeds: the runs of a cell differ only in the seed and the depth (``depthlab.sweeps.climb``). Its trained
minimum depth is the capability rule's (a strict majority of the seeds at the target on held-out data). Beside
it, the bounds of :func:`depthlab.constructions.bounds.theory` that speak of that model:

- ``lower``: the largest depth an impossibility forbids below (fewer layers are never exact);
- ``upper``: the smallest depth of a construction (that many layers suffice; depthlab's own compact
  construction counts, since it is checked exactly).

**Marks** (``MARKS``), the cells worth a look:

- ``below_lower`` — trained depth < lower bound: the theorem forbids a model that is right on *every* example at
  that depth, so reaching the target there is either a target short of exactness (the mark says the best seed's
  accuracy and whether the evaluation was exhaustive) or a bug or a wrong reading of the seed: investigate.
- ``above_upper`` — trained depth > construction, or no depth up to the climb's limit learned although the
  limit reaches the construction's depth: optimisation falls short of what exists (the mark says when the
  construction has more heads or width than the model trained).
- ``not_reached`` — no depth up to the climb's limit reached the target.
- ``unfinished`` — drawn from the store alone and some runs of the next depth are missing.
- ``learned_then_lost`` — a run of the cell reached its target at a log point and ended below it ("learned, then
  lost at step S", ``training.best``): its final accuracy understates what that depth can learn.

Where several widths were climbed, ``min_width`` gives, per depth, the smallest width whose minimum depth is at
most that depth.
"""

from __future__ import annotations

from typing import Any

from ..constructions.bounds import Bound
from ..sweeps.climb import CellResult, reached
from .capability import depth_label, mean_accuracy
from .tables import Column, Table

MARKS = {
    "below_lower": "trained depth below the lower bound: investigate",
    "above_upper": "trained depth above the construction: optimisation falls short",
    "not_reached": "no depth up to the climb's limit learned",
    "unfinished": "runs missing in the store (--finished-only)",
    "learned_then_lost": "a run reached its target, then ended below it",
}


def depth_bounds(bounds: list[Bound]) -> tuple[Bound | None, Bound | None]:
    """The binding lower bound (largest depth) and upper bound (smallest depth), None where there is none."""
    lowers = [b for b in bounds if b.kind == "lower" and b.layers is not None]
    uppers = [b for b in bounds if b.kind == "upper" and b.layers is not None]
    return (max(lowers, key=lambda b: b.layers, default=None), min(uppers, key=lambda b: b.layers, default=None))


def _smaller_than(bound: Bound, model_heads: list[int] | None, model_width: int | None) -> list[str]:
    """Where the construction is bigger than the model trained: more heads in some layer, or a wider stream."""
    out = []
    if bound.heads and model_heads and max(bound.heads) > max(model_heads):
        out.append(f"the construction has {max(bound.heads)} heads in a layer, the model trained {max(model_heads)}")
    if bound.width and model_width and bound.width > model_width:
        out.append(f"the construction is {bound.width} wide, the model trained {model_width}")
    return out


def marks(cell: CellResult, lower: Bound | None, upper: Bound | None, model_heads: list[int] | None = None,
          model_width: int | None = None) -> list[dict[str, str]]:
    """The marks of one cell (``{"mark", "detail"}``), see the module's docstring."""
    out = []
    if cell.unfinished_at is not None:
        return [{"mark": "unfinished", "detail": f"runs at {cell.unfinished_at} layers not all finished"}]
    trained = cell.min_layers
    for depth, runs in sorted(cell.lost.items()):
        out.append({"mark": "learned_then_lost", "detail": f"{depth_label(depth)}: " + ", ".join(
            f"run {r['run']} (≥ {r['target']:g}) lost at step {r['step']:,}" for r in runs)})
    if trained is None:
        out.append({"mark": "not_reached", "detail": f"no depth up to {cell.max_layers} reached {cell.target:g}"})
    if trained is not None and lower is not None and trained < lower.layers:
        best = max((a for a in cell.accuracies[trained] if a is not None), default=None)
        exact = "exact" if best == 1.0 else f"best seed {best:.4f}, not exact"
        out.append({"mark": "below_lower", "detail": f"reached {cell.target:g} at {trained} layers < {lower.layers} "
                    f"({lower.theorem}, {lower.source}); {exact} on {cell.eval_protocol}"})
    short = upper is not None and ((trained is not None and trained > upper.layers)
                                   or (trained is None and cell.max_layers >= upper.layers))
    if short:
        smaller = _smaller_than(upper, model_heads, model_width)
        found = f"{trained} layers" if trained is not None else f"not reached up to {cell.max_layers}"
        out.append({"mark": "above_upper", "detail": "; ".join([f"{found}; the construction ({upper.theorem}, "
                                                                f"{upper.source}) has {upper.layers}", *smaller])})
    return out


def min_widths(cells: list[dict[str, Any]]) -> dict[str, int]:
    """Per depth, the smallest width whose minimum depth is at most that depth (cells of one task size and model
    at several widths)."""
    solved = [(c["min_layers"], c["width"]) for c in cells if c["min_layers"] is not None and c["width"] is not None]
    depths = sorted({d for d, _ in solved})
    return {str(d): min(w for m, w in solved if m <= d) for d in depths}


def atlas_cell(cell: CellResult, task: dict[str, Any], model: dict[str, Any], bounds: list[Bound],
               model_heads: list[int] | None, model_width: int | None, source: str) -> dict[str, Any]:
    """One cell of the atlas as JSON: what was trained, what it reached, the bounds and the marks."""
    lower, upper = depth_bounds(bounds)
    status = ("unfinished" if cell.unfinished_at is not None else
              "not reached" if cell.min_layers is None else "settled")
    return {
        "task": cell.task, "family": model["name"], "axis": cell.field, "size": cell.value, "label": cell.label,
        "width": cell.width, "trained_width": model_width, "heads": model_heads,
        "min_layers": cell.min_layers, "max_layers": cell.max_layers, "status": status,
        "unfinished_at": cell.unfinished_at, "target": cell.target,
        "accuracies": {str(d): a for d, a in sorted(cell.accuracies.items())},
        "mean_accuracy": {str(d): mean_accuracy(a) for d, a in sorted(cell.accuracies.items())},
        "reached": {str(d): reached(a, cell.target) for d, a in sorted(cell.accuracies.items())},
        "learned_then_lost": {str(d): runs for d, runs in sorted(cell.lost.items())},
        "chance": cell.chance, "eval_protocol": cell.eval_protocol,
        "lower": lower.layers if lower else None, "upper": upper.layers if upper else None,
        "bounds": [b.to_dict() for b in bounds],
        "marks": marks(cell, lower, upper, model_heads, model_width),
        "task_config": task, "model_config": model, "source": source,
    }


def _bound_text(cell: dict[str, Any], kind: str) -> str:
    layers = cell[kind]
    if layers is None:
        return "—"
    bound = next(b for b in cell["bounds"] if b["kind"] == kind and b.get("layers") == layers)
    width = f", w{bound['width']}" if kind == "upper" and bound.get("width") else ""
    return f"{layers} {short_theorem(bound)}{width}"


def _size_text(cell: dict[str, Any]) -> str:
    """The size bounds (hidden state, one-layer width) at p = 32 bits: ``state ≥ 0.31 T3``."""
    return "; ".join(f"{'1-layer size' if b.get('layers') == 1 else 'state'} "
                     f"{'≥ ' + format(b['value'], '.2g') if b.get('value') is not None else 'Ω(N)'} "
                     f"{short_theorem(b)}" for b in cell["bounds"] if b["kind"] == "width")


def short_theorem(bound: dict[str, Any]) -> str:
    """``T2`` for Theorem 2 (seed 001), ``§7`` for a section, ``[65]`` for a citation; ``*`` depthlab's own."""
    theorem = bound["theorem"]
    own = "" if bound.get("seed_states", True) else "*"
    if theorem.startswith("Theorem"):
        return "T" + theorem.split()[1].rstrip(",") + own
    return theorem.split()[0] + own


def trained_text(cell: dict[str, Any]) -> str:
    if cell["status"] == "unfinished":
        return f"… at {cell['unfinished_at']}"
    return str(cell["min_layers"]) if cell["min_layers"] is not None else f">{cell['max_layers']}"


def row_names(cells: list[dict[str, Any]]) -> list[str]:
    """``icqa k=3``, ``index_lookup width 16 N=20``: the task, its width where the task was climbed at several for
    that family, and its size."""
    widths: dict[tuple[str, str], set] = {}
    for cell in cells:
        widths.setdefault((cell["task"], cell["family"]), set()).add(cell["width"])
    names = []
    for cell in cells:
        parts = [cell["task"]]
        if len(widths[cell["task"], cell["family"]]) > 1:
            parts.append(f"width {cell['width']}")
        if cell["axis"] is not None:
            parts.append(f"{cell['axis'].removeprefix('task.')}={cell['size']}")
        names.append(" ".join(parts))
    return names


def atlas_table(cells: list[dict[str, Any]], title: str) -> Table:
    """A row per cell: the trained minimum depth, the binding lower and upper bounds (depth, theorem, width) and
    the marks."""
    table = Table([Column("task", no_wrap=True), Column("family", no_wrap=True), Column("trained", "right"),
                   Column("lower", "right"), Column("upper", "right"), Column("size bound"), Column("mark")],
                  title=title,
                  caption="trained: minimum depth (>L: not reached up to L; … at L: runs of L layers "
                          "missing); lower/upper: the binding bound's depth and theorem (T2: Theorem 2 of the "
                          "task's seed; w: the construction's width; *: depthlab's own construction); —: no bound "
                          "stated for this model; size bound: a recurrent model's state (m) or a one-layer "
                          "transformer's width × heads must be at least this (p = 32 bits)")
    for cell, name in zip(cells, row_names(cells), strict=True):
        table.add_row(name, cell["family"], trained_text(cell), _bound_text(cell, "lower"),
                      _bound_text(cell, "upper"), _size_text(cell),
                      ", ".join(m["mark"].replace("_", " ") for m in cell["marks"]))
    return table
