"""Minimum depth: the smallest number of layers at which most seeds reach a target accuracy on held-out data.

The rule (the seeds' "can a model with L layers learn this?", made one number): a depth *solves* a cell (a task
config at one width) when a strict majority of its seeds end with an accuracy of at least ``target`` on the
task's evaluation data (``eval_protocol``: held-out examples where the task has them, the exhaustive dataset or a
fixed fresh sample otherwise). The minimum depth is the smallest depth that solves it; "not reached up to L" when
no depth tried does. A run that diverged or failed counts as a seed that did not reach the target.

Reads only the store (final metrics of finished runs). :func:`min_depth_summary` turns the results into the
JSON rows, a table and the heat map; :func:`retrieval_bound_summary` adds seed 002 §5's lower bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from ..report.min_depth import min_depth_figure
from ..store import Store


@dataclass
class CellResult:
    """One cell of a capability study: a task config at one width, climbed in depth."""

    task: str  # the task's name
    width: int | None  # the model's width (None: the family's default, d + n for attention_only)
    field: str | None  # the varied field (``task.N``), or None
    value: Any  # its value in this cell
    max_layers: int  # the deepest depth the study would try
    target: float
    expected: int | None = None  # what the seed says (or a bound), shown next to the measurement
    chance: float | None = None
    eval_protocol: str | None = None
    accuracies: dict[int, list[float | None]] = field(default_factory=dict)  # depth -> per seed
    min_layers: int | None = None

    @property
    def label(self) -> str:
        parts = [self.task] + ([f"width {self.width}"] if self.width is not None else [])
        if self.field is not None:
            parts.append(f"{self.field.removeprefix('task.')}={self.value}")
        return ", ".join(parts)


def seed_accuracies(store: Store, run_ids: list[str]) -> list[float | None]:
    """Final accuracy of each run (None for a run that is not done: diverged, failed, missing)."""
    out: list[float | None] = []
    for run_id in run_ids:
        run = store.get_run(run_id)
        final = (run or {}).get("final") or {}
        accuracy = final.get("accuracy") if run and run["status"] == "done" else None
        out.append(None if accuracy is None or not math.isfinite(accuracy) else float(accuracy))
    return out


def run_info(store: Store, run_ids: list[str]) -> dict[str, Any]:
    """Chance and evaluation protocol, from the first finished run."""
    for run_id in run_ids:
        final = ((store.get_run(run_id) or {}).get("final")) or {}
        if final:
            return {"chance": final.get("chance"), "eval_protocol": final.get("eval_protocol")}
    return {"chance": None, "eval_protocol": None}


def reached(accuracies: list[float | None], target: float) -> int:
    return sum(a is not None and a >= target for a in accuracies)


def solves(accuracies: list[float | None], target: float) -> bool:
    """A strict majority of the seeds reach ``target``."""
    return 2 * reached(accuracies, target) > len(accuracies)


def verdict(cell: CellResult) -> str:
    return str(cell.min_layers) if cell.min_layers is not None else f"not reached up to {cell.max_layers}"


def _mean(values: list[float | None]) -> float | None:
    done = [v for v in values if v is not None]
    return sum(done) / len(done) if done else None


def result_row(cell: CellResult) -> dict[str, Any]:
    """The JSON row: ``{"task", "width", <field>: value, "min_layers", "accuracies": {"1": [...]}, …}``."""
    row: dict[str, Any] = {"task": cell.task, "width": cell.width}
    if cell.field is not None:
        row[cell.field] = cell.value
    row.update({"min_layers": cell.min_layers, "max_layers": cell.max_layers,
                "accuracies": {str(d): a for d, a in sorted(cell.accuracies.items())},
                "reached": {str(d): reached(a, cell.target) for d, a in sorted(cell.accuracies.items())},
                "chance": cell.chance, "eval_protocol": cell.eval_protocol})
    if cell.expected is not None:
        row["expected"] = cell.expected
    return row


def _cell_text(accuracies: list[float | None] | None, target: float) -> str:
    """``0.993 (3/3)``: the mean over seeds and how many reached the target; blank for a depth not trained."""
    if not accuracies:
        return ""
    mean = _mean(accuracies)
    return f"{'—' if mean is None else f'{mean:.3f}'} ({reached(accuracies, target)}/{len(accuracies)})"


def min_depth_table(cells: list[CellResult], title: str, expected_label: str = "seed says") -> Table:
    """A row per cell: minimum depth, the expectation, and per depth the mean accuracy and seeds at target."""
    depths = sorted({d for c in cells for d in c.accuracies} | {1})
    target = cells[0].target if cells else 0.0
    protocols = dict.fromkeys(f"{c.task}: {c.eval_protocol}" for c in cells if c.eval_protocol)
    table = Table(title=f"minimum depth — {title} (target {target:g}, strict majority of seeds)",
                  title_justify="left", caption="evaluated on " + "; ".join(protocols) if protocols else None,
                  caption_justify="left")
    table.add_column("task")
    table.add_column("min layers", justify="right")
    show_expected = any(c.expected is not None for c in cells)
    if show_expected:
        table.add_column(expected_label, justify="right")
    for depth in depths:
        table.add_column(f"{depth} layer{'s' if depth > 1 else ''}", justify="right")
    table.add_column("chance", justify="right")
    for c in cells:
        cols = [c.label, verdict(c)]
        if show_expected:
            cols.append("" if c.expected is None else str(c.expected))
        cols += [_cell_text(c.accuracies.get(depth), c.target) for depth in depths]
        cols.append("—" if c.chance is None else f"{c.chance:.3f}")
        table.add_row(*cols)
    return table


def min_depth_summary(cells: list[CellResult], figure: Path, title: str,
                      expected_label: str = "seed says") -> tuple[dict[str, Any], Table]:
    """JSON (``rows``, ``figure``), the table, and the heat map (mean accuracy per cell and depth)."""
    path = min_depth_figure([c.label for c in cells], [{d: _mean(a) for d, a in c.accuracies.items()} for c in cells],
                            [c.min_layers for c in cells], [c.expected for c in cells], figure, title,
                            expected_label)
    return {"rows": [result_row(c) for c in cells], "figure": str(path)}, min_depth_table(cells, title, expected_label)


def log3_bound(depth_of_retrieval: int) -> int:
    """⌈log3(2D)⌉ (seed 002 §5, Theorem 1): the least t with 3^t ≥ 2D, in integers (no rounding error)."""
    t = 0
    while 3**t < 2 * depth_of_retrieval:
        t += 1
    return t


def retrieval_bound_summary(cells: list[CellResult], figure: Path, title: str) -> tuple[dict[str, Any], Table]:
    """The seed002-min-depth preset: minimum depth against D next to the lower bound ⌈log3(2D)⌉."""
    for cell in cells:
        cell.expected = log3_bound(int(cell.value))
    return min_depth_summary(cells, figure, title, expected_label="⌈log3(2D)⌉")
