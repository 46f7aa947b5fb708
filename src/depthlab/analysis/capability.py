"""Capability: final accuracy per (task, depth), and the minimum depth at which a task is learned.

**The capability table** (``depthlab reproduce``'s default summary and the report's heat map): mean ± sd of the
final accuracy over seeds, next to the chance level; a row groups finished runs whose configs differ only in the
seed. Reads only the store.

**Minimum depth**: the smallest number of layers at which most seeds reach a target accuracy on held-out data
(the seeds' "can a model with L layers learn this?", made one number). A depth *solves* a cell (a task config at
one width) when a strict majority of its seeds end with an accuracy of at least ``target`` on the task's
evaluation data (``eval_protocol``: held-out examples where the task has them, the exhaustive dataset or a fixed
fresh sample otherwise); the rule and the climb that applies it are ``depthlab.sweeps.climb``. The minimum depth is
the smallest depth that solves it; ">L" (not reached up to L) when no depth tried does. A run that diverged or failed
counts as a seed that did not reach the target. Here: the JSON rows and the table of settled cells, and seed
002 §5's lower bound.
"""

from __future__ import annotations

import json
import math
from array import array
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..cells import cell_id, cell_key, field_values, labelled, variant_fields, variant_labels, without_seed
from ..constructions.information_flow import closed_form
from ..store import Store
from ..sweeps.climb import CellResult, reached
from ..tasks import task_title
from ..training.eval_label import protocol_of
from .runs import is_trained
from .tables import Column, Table


def depth_label(depth: Any) -> str:
    """``1 layer``, ``3 layers``."""
    return f"{depth} layer" if depth == 1 else f"{depth} layers"


CELL_AXES = ("model.layers",)  # what a capability table lays out as columns, never as a label


class CellTally:
    """One cell's numbers gathered run by run (:meth:`add`), so a store of 100,000 runs is read once and never held:
    its runs' count and statuses, the final accuracies of those that finished (the mean ± sd over seeds), and the
    ids of its first ``keep`` runs (``None``: every run's id), each with its seed and final accuracy."""

    def __init__(self, config: dict[str, Any], keep: int | None = None) -> None:
        self.config, self.keep = config, keep
        self.n_runs = 0
        self.statuses: Counter[str] = Counter()
        self.accuracies = array("d")  # of the finished runs, in their order: np.mean over them as over a list
        self.bests = array("d")
        self.steps = 0  # their steps, summed (exact in integers)
        self.final: dict[str, Any] = {}  # the first finished run's
        self.lost: list[dict[str, Any]] = []
        self.failed: list[str] = []
        self.n_failed = 0
        self.first: list[dict[str, Any]] = []  # id, seed, status, final accuracy and order of the first ``keep`` runs

    def add(self, record: dict[str, Any], order: int = 0) -> None:
        """Count ``record`` (a store record of this cell); ``order``: its place in the listing (oldest first)."""
        final = record["final"] or {}
        kept = self.keep is None or self.n_runs < self.keep
        self.n_runs += 1
        self.statuses[record["status"]] += 1
        if kept:
            self.first.append({"id": record["id"], "seed": record["config"].get("seed"), "status": record["status"],
                               "accuracy": final.get("accuracy"), "order": order})
        if record["status"] == "done" and final.get("accuracy") is not None:
            if not self.accuracies:
                self.final = final
            self.accuracies.append(final["accuracy"])
            self.steps += final["steps"]
            if final.get("best"):
                self.bests.append(final["best"]["accuracy"])
            if final.get("learned_then_lost"):
                self.lost.append({"run": record["id"], **final["learned_then_lost"]})
        elif record["status"] in ("failed", "diverged", "interrupted"):
            self.n_failed += 1
            if kept:
                self.failed.append(record["id"])

    def row(self, label: str, settings: dict[str, Any]) -> dict[str, Any]:
        """The cell as a capability row (:func:`capability_rows`)."""
        config, final, accs = self.config, self.final, np.asarray(self.accuracies, dtype=float)
        return {
            "task": config["task"]["name"], "label": label, "settings": settings, "cell": cell_id(config),
            "config": without_seed(config), "layers": config["model"].get("layers"),
            "heads": config["model"].get("heads"), "model": config["model"]["name"],
            "accuracy": float(accs.mean()) if len(accs) else None,
            "accuracy_sd": float(accs.std(ddof=1)) if len(accs) > 1 else (0.0 if len(accs) else None),
            "shows": "final",  # what "accuracy" is: the final evaluation (best_accuracy: the best log point's)
            "best_accuracy": float(np.mean(self.bests)) if self.bests else None,
            "lost": self.lost, "seeds": len(accs), "runs": [run["id"] for run in self.first],
            "failed": self.failed, "n_runs": self.n_runs, "n_failed": self.n_failed, "statuses": dict(self.statuses),
            "first": self.first, "chance": final.get("chance"),
            "steps": int(self.steps / len(accs)) if len(accs) else None,
            "eval_protocol": protocol_of(final), "eval_examples": final.get("eval_examples"),
            "exhaustive": final.get("exhaustive"),
        }


def tally_cells(records: Iterable[dict[str, Any]], keep: int | None = None) -> dict[str, CellTally]:
    """The trained runs of ``records`` counted into their cells (``depthlab.cells``), by cell key, in the order each
    cell is first seen; ``keep`` as for :class:`CellTally`."""
    cells: dict[str, CellTally] = {}
    for order, record in enumerate(records):
        if is_trained(record):
            config = record["config"]
            key = cell_key(config)
            if key not in cells:
                cells[key] = CellTally(config, keep)
            cells[key].add(record, order)
    return cells


def cell_rows(cells: Iterable[CellTally]) -> list[dict[str, Any]]:
    """The capability rows of counted cells, each labelled by its task and the fields in which it differs from the
    other cells of its task besides the depth (:func:`capability_rows`)."""
    cells = list(cells)
    configs = [cell.config for cell in cells]
    fields = variant_fields(configs, lambda c: c["task"]["name"], ignore=CELL_AXES)
    return [cell.row(labelled(config["task"]["name"], config, distinguishing),
                     field_values(config, distinguishing))
            for cell, config, distinguishing in zip(cells, configs, fields, strict=True)]


def capability_rows(store: Store, run_ids: list[str], records: list[dict[str, Any]] | None = None
                    ) -> list[dict[str, Any]]:
    """One row per cell (the runs whose configs differ only in the seed: ``depthlab.cells``), in the order the
    runs are given; runs that were not trained (``llm-bench``) are left out.

    Each row's ``label`` is its task's name and every field in which it differs from other cells of that task
    besides the depth (``icqa lr=0.01``; ``settings`` holds them as ``{"train.lr": 0.01}``), so two cells that
    differ in anything but depth never share a row of a table, and a field that changes with the depth (800 steps
    at 1 layer, 2,000 at 2) is named too, never hidden behind one label. ``records``: the runs' store records,
    where the caller has read them already (else they are read in one pass)."""
    if records is None:
        by_id = {r["id"]: r for r in store.find_runs(ids=run_ids)}
        records = [by_id[i] for i in dict.fromkeys(run_ids) if i in by_id]
    return cell_rows(tally_cells(records).values())


def curves(store: Store, rows: list[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, list[float]]]]:
    """Eval curves (step, accuracy, loss) of each run of the capability ``rows``, keyed by (row label, layers):
    the runs of one cell."""
    out: dict[tuple[str, int], list[dict[str, list[float]]]] = {}
    for row in rows:
        metrics = [m for m in (store.metric_columns(r).get("eval") for r in row["runs"]) if m]
        if metrics:
            out[(row["label"], row["layers"])] = metrics
    return out


def format_cell(row: dict[str, Any]) -> str:
    if row["accuracy"] is None:
        return "—"
    sd = row["accuracy_sd"] or 0.0
    if row["seeds"] < 2 or math.isnan(sd):  # one seed has no spread to show
        return f"{row['accuracy']:.3f}"
    return f"{row['accuracy']:.3f} ± {sd:.3f}"


def capability_grids(store: Store, run_ids: list[str], records: list[dict[str, Any]] | None = None
                     ) -> list[dict[str, Any]]:
    """The capability table arranged as heat maps: one grid per model variant (the model config without
    ``layers``), a row per task variant (the cell's task and training config: a store of one task at two learning
    rates has two rows, ``icqa lr=0.003`` and ``icqa lr=0.01``), a column per depth (``model.layers``).

    Each grid: ``model`` (config without layers), ``model_label``, ``tasks`` (list of ``{"config", "label",
    "name", "settings", "chance", "eval_protocol", "eval_examples"}``: the rows), ``depths`` (sorted) and
    ``cells``: a list of capability rows (:func:`capability_rows`) each with ``task_index`` and ``depth`` added.
    ``records`` as for :func:`capability_rows`.
    """
    return arrange_grids(capability_rows(store, run_ids, records))


def arrange_grids(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Capability rows (:func:`capability_rows`, :func:`cell_rows`) as the heat maps of :func:`capability_grids`."""
    grids: dict[str, dict[str, Any]] = {}
    for row in rows:
        config = row["config"]
        model = {k: v for k, v in config["model"].items() if k != "layers"}
        grid = grids.setdefault(json.dumps(model, sort_keys=True),
                                {"model": model, "tasks": [], "task_keys": [], "depths": set(), "cells": []})
        task_key = json.dumps({k: v for k, v in config.items() if k != "model"}, sort_keys=True)
        if task_key not in grid["task_keys"]:
            grid["task_keys"].append(task_key)
            grid["tasks"].append({"config": config["task"], "variant": config, "name": config["task"]["name"],
                                  "chance": row["chance"], "eval_protocol": row["eval_protocol"],
                                  "eval_examples": row["eval_examples"]})
        task = grid["tasks"][grid["task_keys"].index(task_key)]
        for key in ("chance", "eval_protocol", "eval_examples"):
            if task[key] is None:
                task[key] = row[key]
        grid["depths"].add(row["layers"])
        grid["cells"].append({**row, "task_index": grid["task_keys"].index(task_key), "depth": row["layers"]})
    out = list(grids.values())
    model_labels = variant_labels([g["model"] for g in out], lambda m: m.get("name", "?"))
    for grid, label in zip(out, model_labels, strict=True):
        grid["model_label"] = label
        grid["depths"] = sorted(grid["depths"], key=lambda d: (d is None, d))
        variants = [t.pop("variant") for t in grid["tasks"]]
        fields = variant_fields(variants, lambda v: v["task"]["name"], ignore=("model",))  # rows differ: say how
        for task, variant, distinguishing in zip(grid["tasks"], variants, fields, strict=True):
            task["label"] = labelled(task["name"], variant, distinguishing)
            task["settings"] = field_values(variant, distinguishing)
        del grid["task_keys"]
    return out


def panel_titles(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Each row label's title for a figure: the task's seed name and the row's distinguishing settings
    (``in-context QA (IC-QA)`` for ``icqa``; ``… lr=0.01`` for ``icqa lr=0.01``)."""
    return {r["label"]: labelled(task_title(r["task"]), r["settings"], list(r["settings"]))
            for r in rows}


def depth_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The seed 001 depth study's JSON rows: the capability rows without their run bookkeeping."""
    keys = ("task", "label", "settings", "layers", "accuracy", "accuracy_sd", "shows", "best_accuracy", "lost",
            "seeds", "chance", "steps", "eval_protocol", "runs")
    return [{k: r[k] for k in keys} for r in rows]


def chance_by_task(rows: list[dict[str, Any]], key: str = "task") -> dict[str, float]:
    """The chance level of each task (or row ``key``: ``label``) of ``rows`` (where a run recorded it)."""
    return {r[key]: r["chance"] for r in rows if r["chance"] is not None}


def aggregate_curves(curves: list[dict[str, list]], name: str) -> tuple[list, list[float], list[float], list[float]]:
    """Steps, mean, lowest and highest of metric ``name`` over runs, at every step any run logged."""
    by_step: dict[int, list[float]] = {}
    for c in curves:
        for step, v in zip(c.get("step", []), c.get(name, []), strict=False):
            if v is not None and math.isfinite(v):
                by_step.setdefault(step, []).append(v)
    steps = sorted(by_step)
    values = [np.asarray(by_step[s]) for s in steps]
    return (steps, [float(v.mean()) for v in values], [float(v.min()) for v in values],
            [float(v.max()) for v in values])


def seeds_note(rows: list[dict[str, Any]]) -> tuple[int | None, str]:
    """The number of seeds most cells have, and the sentence a table says it in once: "mean ± sd over 3 seeds"
    (cells with another number carry it: ``(n=2)``)."""
    counts = Counter(r["seeds"] for r in rows if r["accuracy"] is not None)
    if not counts:
        return None, "mean ± sd over seeds"
    n = counts.most_common(1)[0][0]
    return n, f"mean ± sd over {n} seed{'s' if n != 1 else ''}" + (" (other counts marked n=…)" if len(counts) > 1
                                                                   else "")


def protocol_note(rows: list[dict[str, Any]], key: str = "label") -> str:
    """The evaluation protocol of each task, said once below a table: "evaluated on — memorization: exhaustive
    dataset (64 examples); icqa: …" (tasks sharing one protocol named together)."""
    said: dict[str, list[str]] = {}
    for r in rows:
        if r.get("eval_protocol"):
            names = said.setdefault(r["eval_protocol"], [])
            if r[key] not in names:
                names.append(r[key])
    return "evaluated on — " + "; ".join(f"{', '.join(names)}: {p}" for p, names in said.items()) if said else ""


LOST_MARK = "†"  # a cell with a run that learned and then lost it (best at the target, final below)


def lost_note(rows: list[dict[str, Any]], key: str = "label") -> str:
    """The caption's sentence for the cells marked †: "† learned, then lost — icqa 3 layers: run abc (≥ 0.95) at
    step 3,500; …" (empty when no run was)."""
    said = []
    for r in rows:
        for lost in r.get("lost") or []:
            said.append(f"{r[key]} {depth_label(r['layers'])}: run {lost['run']} (≥ {lost['target']:g}) "
                        f"at step {lost['step']:,}")
    return f"{LOST_MARK} learned, then lost — " + "; ".join(said) if said else ""


def capability_table(rows: list[dict[str, Any]], title: str) -> Table:
    """Rows: cells' labels (a task, with its distinguishing settings); columns: depth; cells: the final accuracy's
    mean ± sd over seeds (marked † where a run learned and then lost it); then chance. How many seeds, what each
    task was evaluated on and which runs were lost are said once, in the caption, so the table fits 80 columns."""
    depths = sorted({r["layers"] for r in rows})
    n, seeds = seeds_note(rows)
    caption = "; ".join(x for x in (f"final accuracy, {seeds}", protocol_note(rows), lost_note(rows)) if x)
    table = Table([Column("task"), *[Column(depth_label(d), "right", no_wrap=True) for d in depths],
                   Column("chance", "right", no_wrap=True)], title=f"capability table — {title}", caption=caption)
    for label in dict.fromkeys(r["label"] for r in rows):
        cells = {r["layers"]: r for r in rows if r["label"] == label}
        first = next(iter(cells.values()))
        texts = [format_cell(c) + (f" (n={c['seeds']})" if c["accuracy"] is not None and c["seeds"] != n else "")
                 + (f" {LOST_MARK}" if c.get("lost") else "") if (c := cells.get(d)) else "" for d in depths]
        table.add_row(label, *texts, f"{first['chance']:.3f}" if first["chance"] is not None else "—")
    return table


# ------------------------------------------------------------------------------------- minimum depth


def verdict(cell: CellResult) -> str:
    """The minimum depth, or ``>L`` when no depth up to L reached the target (the table's caption says so)."""
    return str(cell.min_layers) if cell.min_layers is not None else f">{cell.max_layers}"


def mean_accuracy(values: list[float | None]) -> float | None:
    """The mean over the seeds that finished, None if none did."""
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
    mean = mean_accuracy(accuracies)
    return f"{'—' if mean is None else f'{mean:.3f}'} ({reached(accuracies, target)}/{len(accuracies)})"


def min_depth_table(cells: list[CellResult], title: str, expected_label: str = "seed says") -> Table:
    """A row per cell: minimum depth, the expectation, and per depth the mean accuracy and seeds at target."""
    depths = sorted({d for c in cells for d in c.accuracies} | {1})
    target = cells[0].target if cells else 0.0
    protocols = dict.fromkeys(f"{c.task}: {c.eval_protocol}" for c in cells if c.eval_protocol)
    show_expected = any(c.expected is not None for c in cells)
    chances = {"—" if c.chance is None else f"{c.chance:.3f}" for c in cells}
    one_chance = len(chances) == 1  # said once in the caption, a column less at 80 columns
    columns = [Column("task", no_wrap=True), Column("min", "right", no_wrap=True)]
    if show_expected:
        columns.append(Column(expected_label, "right", no_wrap=True))
    columns += [Column(str(d), "right") for d in depths] + ([] if one_chance else [Column("chance", "right")])
    caption = (f"min: the minimum depth (>L: no depth up to L reached the target); columns {depths[0]}–{depths[-1]}: "
               f"layers, each cell the mean accuracy over seeds (seeds at the target)"
               + (f"; chance {next(iter(chances))}" if one_chance else ""))
    table = Table(columns, title=f"minimum depth — {title} (target {target:g}, strict majority of seeds)",
                  caption=caption + ("; evaluated on " + "; ".join(protocols) if protocols else ""), compact=True)
    for c in cells:
        cols = [c.label, verdict(c)]
        if show_expected:
            cols.append("" if c.expected is None else str(c.expected))
        cols += [_cell_text(c.accuracies.get(depth), c.target) for depth in depths]
        if not one_chance:
            cols.append("—" if c.chance is None else f"{c.chance:.3f}")
        table.add_row(*cols)
    return table


def with_retrieval_bound(cells: list[CellResult]) -> list[CellResult]:
    """The seed002-min-depth preset: each cell (a value of D) expects the lower bound ⌈log3(2D)⌉ (seed 002 §5,
    Theorem 1)."""
    for cell in cells:
        cell.expected = closed_form(int(cell.value))
    return cells
