"""Seed 002 Figure 5 (§8, Appendix E): the circuits of several trained transformers, each found by ablation.

§8: "I train three transformers (denoted as A, B, and C) with 12 layers and only one attention head per layer on
the retrieval problem with D = 3. I then manually reverse-engineer the circuits learned by the transformers by
studying their attention maps." Here the manual procedure is :func:`depthlab.analysis.circuit.discover` (Appendix E
steps 1-4 automated) and its validation :func:`depthlab.analysis.circuit.validate` (steps 5-6). The runs are named
A, B, C … in the order given (the seeds of the ``seed002-circuits`` preset).

Outputs: a JSON row per transformer (its paths, the loss intact and reduced to the circuit, the heads it uses),
a table, and the data of ``depthlab.draw.circuit.circuits_figure``.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..store import Store
from .circuit import Circuit, discover, validate
from .runs import LoadedRun, load_run, sample_examples
from .tables import Column, Table

CIRCUIT_EXAMPLES = 1024  # examples for circuit discovery and validation
ANALYSIS_SEED = 1  # the seed of the examples the analyses draw (split "eval")


@dataclass
class FoundCircuit:
    """A run's circuit found by ablation (empty when no head attends between roles), its validation and file."""

    run: LoadedRun
    circuit: Circuit
    discovery: dict[str, Any]
    validation: dict[str, Any] | None = None
    file: Path | None = None


def find_circuit(store: Store, run_id: str, accept: str = "within") -> FoundCircuit:
    """Find run ``run_id``'s circuit by ablation (``accept``: the pruning criterion of
    :func:`depthlab.analysis.circuit.discover`), validate it and keep it as the run's artifact ``circuit.yaml``."""
    run = load_run(store, run_id)
    batch = sample_examples(run.task, CIRCUIT_EXAMPLES, ANALYSIS_SEED)
    circuit, log = discover(run.model, run.task, batch, accept=accept)
    if not circuit.paths:
        return FoundCircuit(run, circuit, log)
    checked = validate(run.model, run.task, batch, circuit)
    path = circuit.dump(store.artifact_path(run_id, "circuit", "circuit.yaml"),
                        f"circuit of run {run_id} found by `depthlab analyze circuit --discover`")
    store.add_artifact(run_id, "circuit", "circuit.yaml", {"paths": len(circuit.paths)})
    return FoundCircuit(run, circuit, log, checked, path)


def transformer_name(i: int) -> str:
    """The seed's names: transformers A, B, C, … (then A2, B2, … past Z)."""
    letter = string.ascii_uppercase[i % 26]
    return letter if i < 26 else f"{letter}{i // 26 + 1}"


def circuit_rows(store: Store, run_ids: list[str], accept: str = "within") -> list[dict[str, Any]]:
    """A row per run: ``name``, ``run``, ``layers``, ``D``, ``roles`` (one chain's roles), ``paths``
    [{layer, head, from, to, attention, loss_without}], ``intact_loss``, ``circuit_loss``, ``heads_used``,
    ``meets_criterion`` (App. E's, under ``accept``)."""
    rows = []
    for i, run_id in enumerate(run_ids):
        found = find_circuit(store, run_id, accept)
        run, v = found.run, found.validation
        paths = [{"layer": p.layer, "head": p.head, "from": p.src, "to": p.dst,
                  "attention": None if v is None else v["paths"][j]["attention"],
                  "loss_without": None if v is None else v["paths"][j]["loss_without"]}
                 for j, p in enumerate(found.circuit.paths)]
        rows.append({"name": transformer_name(i), "run": run_id, "seed": run.config.seed,
                     "layers": run.config.model.layers, "D": run.task.D, "roles": list(run.task.role_names),
                     "paths": paths, "intact_loss": found.discovery["intact_loss"],
                     "circuit_loss": None if v is None else v["circuit"]["loss"],
                     "heads_used": len(found.circuit.circuit_heads),
                     "meets_criterion": found.discovery.get("meets_criterion"),
                     "circuit_file": None if found.file is None else str(found.file)})
    return rows


def circuits_table(rows: list[dict[str, Any]], title: str) -> Table:
    """A row per path of every transformer: its head, roles, mean attention, and the circuit's loss without it."""
    table = Table([Column("transformer", no_wrap=True), Column("head", "right"), Column("path", no_wrap=True),
                   Column("attention", "right"), Column("loss without it", "right")], title=title,
                  caption="loss: validation MSE on 1,024 examples; the circuit alone is every other head replaced "
                          "(uniform or identity), every circuit head one-hot on its paths (seed 002 Appendix E)")
    for r in rows:
        circuit = "no circuit" if r["circuit_loss"] is None else f"circuit {r['circuit_loss']:.3f}"
        table.add_row(f"{r['name']} (seed {r['seed']})", "",  # its summary in the wide path column
                      f"MSE {r['intact_loss']:.3f}, {circuit}, {r['heads_used']} heads", "", "")
        for p in r["paths"]:
            table.add_row("", f"{p['layer']}.{p['head']}", f"{p['from']} → {p['to']}", f"{p['attention']:.2f}",
                          f"{p['loss_without']:.3f}")
    return table
