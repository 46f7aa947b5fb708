"""Preset summaries: what ``depthlab reproduce`` (and ``capability``) print and draw once the runs are done.

A preset names its summary (``summary: lengths`` in its YAML file; ``depthlab.sweeps.presets``). Each summary
computes with ``depthlab.analysis`` (or ``induction``, ``constructions``), draws with ``depthlab.draw`` and returns
``(json, tables)``: the JSON object's keys (``figure`` and the other figure paths among them) and the tables to
show (``depthlab.analysis.tables.Table``). A preset of runs (``sweeps``) uses one of :data:`RUN_SUMMARIES`,
called as ``summary(store, run_ids, figure, title, vector=None)``; a preset of capability studies (``studies``) one
of :data:`STUDY_SUMMARIES`, called as ``summary(cells, figure, title, vector=None)`` with the cells every study
settled. ``figure`` is the path of the preset's main figure; other figures go next to it; ``vector`` ("pdf" or
"svg") writes each figure in that format too (``depthlab.draw.save``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from ..analysis import capability, circuits, construction_maps, emergence, heads, layers, lengths
from ..analysis.tables import Column, Table
from ..constructions import information_flow, log_width
from ..draw import save
from ..draw.attention_maps import comparison_figure
from ..draw.capability import min_depth_figure
from ..draw.circuit import circuits_figure
from ..draw.depth import depth_figure
from ..draw.emergence import emergence_figure
from ..draw.heads import heads_figure
from ..draw.induction import bleeding_figure, capacity_figure, strength_figure, write_figures
from ..draw.information_flow import information_flow_figure
from ..draw.layers import layers_figure
from ..draw.lengths import curves_figure, heatmap_figure, width_figure
from ..draw.widths import widths_figure
from ..errors import UserError
from ..induction import hypotheses
from ..induction.reproduce import measure_runs
from ..induction.tables import runs_table, summary_tables
from ..store import Store
from ..sweeps.climb import CellResult
from ..sweeps.presets import Preset

Summary = tuple[dict[str, Any], list[Table]]


def depth_summary(store: Store, run_ids: list[str], figure: Path, title: str, vector: str | None = None) -> Summary:
    """Seed 001's depth study: rows of the capability table (one per cell), the table, and Figure 2 (a column
    per row label, titled by the task's seed name)."""
    rows = capability.capability_rows(store, run_ids)
    labels = list(dict.fromkeys(r["label"] for r in rows))
    fig = depth_figure(capability.curves(store, rows), labels, capability.chance_by_task(rows, "label"),
                       capability.panel_titles(rows), title)
    path = save(fig, figure, vector)
    return {"rows": capability.depth_rows(rows), "figure": str(path)}, [capability.capability_table(rows, title)]


def layers_summary(store: Store, run_ids: list[str], figure: Path, title: str, vector: str | None = None) -> Summary:
    """Seed 002 Figure 4: rows ``{"formulation", "layers", "loss", "partial_losses", …}``, the table, the figure."""
    rows = layers.layers_rows(store, run_ids)
    path = save(layers_figure(rows, title), figure, vector)
    return {"rows": layers.layers_json(rows), "figure": str(path)}, [layers.layers_table(rows, title)]


def emergence_summary(store: Store, run_ids: list[str], figure: Path, title: str,
                      vector: str | None = None, accept: str = "within") -> Summary:
    """Seed 002 Figures 6-7: each run's circuit found by ablation (``accept``: App. E's criterion "below" or
    depthlab's "within", see ``analysis.circuit``), validated, and its emergence (a figure per run,
    ``FIGURE-RUN.png`` when there are several)."""
    results, tables = [], []
    for run_id in run_ids:
        found = emergence.circuit_emergence(store, run_id, accept)
        if found.emergence is None:
            results.append(found.to_json())
            continue
        path = figure if len(run_ids) == 1 else figure.with_name(f"{figure.stem}-{run_id}{figure.suffix}")
        save(emergence_figure(found.emergence, f"{title}: run {run_id}"), path, vector)
        results.append({**found.to_json(), "figure": str(path)})
        tables.append(found.table(title))
    return {"runs": results, "figure": results[0].get("figure") if len(results) == 1 else None}, tables


def lengths_summary(store: Store, run_ids: list[str], figure: Path, title: str, vector: str | None = None,
                    curve_length: int | None = None, tuned: bool = False,
                    by: dict[str, list[str]] | None = None) -> Summary:
    """Seed 003's length table: JSON rows, the model × length table, the heat map, and each task's validation
    curves at one length (``FIGURE-curves.png``; ``curve_length`` where every model of the task ran at it, else the
    longest such length). ``tuned``: a hyperparameter search (App. H): one row per model family and length, its
    best configuration (``depthlab.analysis.lengths.best_per_family``; ``by``: sizes kept apart per family)."""
    rows = lengths.length_rows(store, run_ids)
    if tuned:
        rows = lengths.best_per_family(rows, by)
    figure = Path(figure)
    heat = save(heatmap_figure(rows, title), figure, vector)
    chosen = lengths.choose_curve_lengths(rows, curve_length)
    shown = [r for r in rows if r["length"] == chosen.get(r["task_label"])]
    targets = {r["target_accuracy"] for r in shown if r["target_accuracy"] is not None}
    curves = curves_figure(lengths.curves(store, rows, chosen), capability.chance_by_task(rows, "task_label"), chosen,
                           f"{title}: validation curves", {r["task_label"]: r["task_title"] for r in rows},
                           {r["label"]: r["max_steps"] for r in shown}, min(targets) if targets else None)
    curve_path = save(curves, figure.with_name(f"{figure.stem}-curves{figure.suffix}"), vector)
    out = {"rows": lengths.lengths_json(rows), "figure": str(heat), "curves_figure": str(curve_path),
           "curve_lengths": chosen}
    return out, [lengths.length_table(rows, title)]


def index_lookup_summary(store: Store, run_ids: list[str], figure: Path, title: str,
                         vector: str | None = None) -> Summary:
    """Seed 003 Figure 2 left and middle: the length table, with the validation curves at N = 200 where it was run."""
    return lengths_summary(store, run_ids, figure, title, vector, curve_length=200)


def widths_summary(store: Store | None, run_ids: list[str], figure: Path, title: str,
                   vector: str | None = None) -> Summary:
    """Seed 003's constructions (no training runs): the smallest exact width against N, the fit, the figure.

    The scale is read from the figure's name (``…-paper.png`` → N up to 10^4, else up to 3000).
    """
    ns = log_width.PAPER_NS if str(figure).endswith("-paper.png") else log_width.QUICK_NS
    table = log_width.widths_table(ns)
    path = save(widths_figure(table), figure, vector)
    view = Table([Column(c, "right") for c in ("construction", "N", "k", "width", "η")], title=title,
                 caption_justify="center")
    captions = []
    for name, entry in table["constructions"].items():
        for r in entry["rows"]:
            view.add_row(name, str(r["N"]), str(r["k"]), str(r["width"]), f"{r['eta']:.2f}")
        fit = entry["fit_width"]
        captions.append(f"{name}: width ≈ {fit['slope_per_ln_N']:.2f}·ln N + {fit['intercept']:.2f} "
                        f"(R² {fit['r2']:.3f})")
    view.caption = "; ".join(captions)
    return {**table, "figure": str(path)}, [view]


def information_flow_summary(store: Store | None, run_ids: list[str], figure: Path, title: str,
                             vector: str | None = None, D: int = 5, depths: list[int] | None = None,
                             N: int = 4) -> Summary:
    """Seed 002 Figures 3 and 8 (no training runs): the shared information of one chain at ``D`` and the pieces
    each position holds after every layer, drawn; for every D of ``depths`` (default 1 … 6) Theorem 1's bound next
    to the simulated least depths (``depthlab.constructions.information_flow``)."""
    flow = information_flow.flow(D)
    path = save(information_flow_figure(flow, f"{title}, D = {D}"), figure, vector)
    rows = information_flow.depth_rows(list(depths or range(1, 7)), N)
    view = Table([Column(c, "right") for c in ("D", "⌈log₃(2D)⌉", "any position (simulated)",
                                                "last position (simulated)", "⌈log₃(4D+1)⌉")],
                 title=f"{title}: least layers, N = {N} chains",
                 caption="any position: the least t at which some position holds the whole chain x_0 … x_D "
                         "(Lemma 3's quantity); last position: the least t at which the query holds x_D "
                         "(Theorem 1's)")
    for r in rows:
        view.add_row(*(str(r[k]) for k in ("D", "closed_form", "layers_any", "layers_last", "last_position_form")))
    return {"flow": flow, "rows": rows, "figure": str(path)}, [view]


def circuits_summary(store: Store, run_ids: list[str], figure: Path, title: str,
                     vector: str | None = None, accept: str = "within") -> Summary:
    """Seed 002 Figure 5: each run's circuit found by ablation (``accept`` as for :func:`emergence_summary`) and
    validated (transformers A, B, C in run order), a panel each."""
    rows = circuits.circuit_rows(store, run_ids, accept)
    path = save(circuits_figure(rows, title), figure, vector)
    return {"rows": rows, "figure": str(path)}, [circuits.circuits_table(rows, title)]


def mamba_width_summary(store: Store, run_ids: list[str], figure: Path, title: str,
                        vector: str | None = None) -> Summary:
    """Seed 003 Figure 3: accuracy of each width at each length (the length table, a row per width), drawn
    against width and against length."""
    rows = lengths.length_rows(store, run_ids)
    path = save(width_figure(rows, title), figure, vector)
    return {"rows": lengths.lengths_json(rows), "figure": str(path)}, [lengths.length_table(rows, title)]


def hypotheses_summary(store: Store, run_ids: list[str], figure: Path, title: str, vector: str | None = None,
                       per_token: int = 256, sequences: int = 4096) -> Summary:
    """Seed 004 Hypotheses 1 and 2: every run measured (``per_token`` sequences per token for A and B power,
    ``sequences`` for strengths and bleeding), a table row per run, a figure column per capacity knob, the
    essay's wording of each hypothesis in the caption."""
    rows = hypotheses.capacity_rows(store, run_ids, per_token, sequences)
    fig = capacity_figure(hypotheses.knob_groups(rows), hypotheses.HYPOTHESES, title)
    path = save(fig, figure, vector)
    return ({"rows": hypotheses.capacity_json(rows), "hypotheses": hypotheses.HYPOTHESES, "figure": str(path),
             "per_token": per_token, "sequences": sequences}, [hypotheses.capacity_table(rows, title)])


def induction_summary(store: Store, run_ids: list[str], figure: Path, title: str,
                      vector: str | None = None) -> Summary:
    """Seed 004 on every run: rows of mean/median strength per model, a combined strength figure, the bleeding
    figure, and four figures per run (``FIGURE-MODEL-NlayerS-strength.png`` …)."""
    measured = measure_runs(store, run_ids)
    per_run = [path for m in measured for path in write_figures(m.study, figure.parent, f"{figure.stem}-{m.name}",
                                                                vector, f"{title}: {m.label}")]
    combined = save(strength_figure({m.label: m.study.strength.strength for m in measured}, title), figure, vector)
    bleed = save(bleeding_figure({m.label: m.study.bleeding for m in measured}, title),
                 figure.with_name(f"{figure.stem}-bleeding{figure.suffix}"), vector)
    rows = [m.row for m in measured]
    out = {"rows": rows, "figure": str(combined), "figures": [str(f) for f in [combined, bleed, *per_run]],
           "models": [m.result for m in measured]}
    return out, [runs_table(rows, title), *[t for m in measured for t in summary_tables(m.result)]]


def heads_summary(store: Store, run_ids: list[str], figure: Path, title: str, vector: str | None = None) -> Summary:
    """Seed 001 Figures 4-7: rows per (task, head list) with final accuracy and speed, the table, the figure."""
    rows = heads.head_rows(store, run_ids)
    path = save(heads_figure(rows, title), figure, vector)
    return {"rows": heads.heads_json(rows), "figure": str(path)}, [heads.heads_table(rows, title)]


def attention_summary(store: Store, run_ids: list[str], figure: Path, title: str,
                      vector: str | None = None) -> Summary:
    """Seed 001 Figure 3 (§6.2): each trained configuration's attention maps on the figure's sequences next to the
    construction's, and each layer's share of attention on the constructed pattern (a row per run and layer); for
    template matching §6.2's "AAB=" and "ABB=" against §14.2's parse-mapping construction."""
    compared = construction_maps.compare_runs(store, run_ids)
    sources = [(r["label"], r["maps"]) for r in compared["runs"]]
    sources.append((f"constructed ({compared['construction']['layers']} layers, hand-set)",
                    compared["construction"]["maps"]))
    seed_figure = "seed 001 §6.2, templates" if compared["task"] == "template" else "seed 001 Figure 3 (§6.2)"
    path = save(comparison_figure(sources, f"{seed_figure}: {title}"), figure, vector)
    table = Table.of("run", "accuracy", "layer", "share on construction", "last row", title=title,
                     caption=f"share: fraction of a layer's attention where the construction attends, mean over "
                             f"{construction_maps.MEASURED} evaluation examples")
    rows = []
    for run in compared["runs"]:
        for share in run["shares"]:
            rows.append({"run": run["id"], "label": run["label"], "accuracy": run["accuracy"], **share})
            acc = "—" if run["accuracy"] is None else f"{run['accuracy']:.3f}"
            table.add_row(run["label"], acc, str(share["layer"]), f"{share['share']:.2f}",
                          f"{share['share_last_row']:.2f}")
    return {"rows": rows, "examples": compared["examples"], "figure": str(path)}, [table]


def min_depth_summary(cells: list[CellResult], figure: Path, title: str, vector: str | None = None,
                      expected_label: str = "seed says") -> Summary:
    """Capability studies: a JSON row and a table row per cell, and the heat map (mean accuracy per cell and
    depth, the minimum depth outlined)."""
    path = save(min_depth_figure(cells, title, expected_label), figure, vector)
    return ({"rows": [capability.result_row(c) for c in cells], "figure": str(path)},
            [capability.min_depth_table(cells, title, expected_label)])


def retrieval_bound_summary(cells: list[CellResult], figure: Path, title: str,
                            vector: str | None = None) -> Summary:
    """Seed 002 §5: the minimum depth against D next to the lower bound ⌈log3(2D)⌉."""
    return min_depth_summary(capability.with_retrieval_bound(cells), figure, title, vector,
                             expected_label="⌈log3(2D)⌉")


RUN_SUMMARIES: dict[str, Callable[..., Summary]] = {
    "depth": depth_summary,
    "layers": layers_summary,
    "emergence": emergence_summary,
    "lengths": lengths_summary,
    "index-lookup": index_lookup_summary,
    "lengths-tuned": partial(lengths_summary, tuned=True),
    "index-lookup-tuned": partial(lengths_summary, curve_length=200, tuned=True),
    "widths": widths_summary,
    "induction": induction_summary,
    "attention": attention_summary,
    "heads": heads_summary,
    "information-flow": information_flow_summary,
    "circuits": circuits_summary,
    "mamba-width": mamba_width_summary,
    "hypotheses": hypotheses_summary,
}
STUDY_SUMMARIES: dict[str, Callable[..., Summary]] = {
    "min-depth": min_depth_summary,
    "retrieval-bound": retrieval_bound_summary,
}


def preset_summary(preset: Preset) -> Callable[..., Summary]:
    """The summary ``preset`` names (a UserError naming the allowed ones for any other)."""
    known: dict[str, Callable[..., Summary]] = dict(STUDY_SUMMARIES if preset.studies else RUN_SUMMARIES)
    if preset.summary not in known:
        kind = "capability studies" if preset.studies else "runs"
        raise UserError(f"{preset.name}.summary: unknown summary {preset.summary!r} for a preset of {kind}; "
                        f"allowed: {', '.join(known)}")
    return known[preset.summary]
