"""The emergence of a circuit's attention paths during training (seed 002 Figures 6-7).

Figure 7: "I save a checkpoint every 10 epochs (80 steps) that I later use to measure the average attention for
each attention path in the reverse-engineered circuit, at each epoch during training, using 32 input sequences.
[…] I approximate the attention between checkpoints using linear interpolation. […] the first epoch when the
average attention goes above 0.5 for each attention path." :func:`emergence` does exactly that over a run's
checkpoint history (weights-only safetensors ``history/step-NNNNNNN.safetensors`` in the run's artifact folder,
written by the engine when ``train.keep_checkpoints`` is set), and measures the partial losses at every kept
checkpoint too. :func:`circuit_emergence` is what the ``seed002-emergence`` preset measures: it finds the circuit
of the trained run with the ablation tools (:func:`depthlab.analysis.circuit.discover`), validates it, and
measures its emergence (``depthlab.draw.emergence`` draws it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import UserError
from ..models import TaskShapes, build_model
from ..store import Store
from .ablation import capture, score
from .circuit import Circuit, path_attention
from .circuits import ANALYSIS_SEED, find_circuit
from .runs import LoadedRun, sample_examples
from .tables import Column, Table

EMERGENCE_EXAMPLES = 32  # "using 32 input sequences" (seed 002 §9.1)
LOSS_EXAMPLES = 1024  # examples for the loss curves measured on each kept checkpoint
THRESHOLD = 0.5
HISTORY = "history"
_STEP = re.compile(r"step-(\d+)\.safetensors$")


# ------------------------------------------------------------------------------------- checkpoint history


def history(store: Store, run_id: str) -> list[tuple[int, Path]]:
    """The run's kept checkpoints (step, weights file), by step: recorded artifacts, else files in the folder."""
    found = {}
    for art in store.artifacts(run_id, kind=HISTORY):
        m = _STEP.search(str(art["path"]))
        if m and Path(art["path"]).exists():
            found[int(m.group(1))] = Path(art["path"])
    folder = store.run_folder(run_id) / HISTORY
    if folder.is_dir():
        for path in folder.glob("step-*.safetensors"):
            found.setdefault(int(_STEP.search(path.name).group(1)), path)
    return sorted(found.items())


def history_name(step: int) -> str:
    return f"{HISTORY}/step-{step:07d}.safetensors"


def save_history(store: Store, run_id: str, weights: dict[str, torch.Tensor], step: int) -> Path:
    """Keep ``weights`` (a run's state dict) as the checkpoint of ``step`` (what the engine does when asked)."""
    from safetensors.torch import save

    from ..store import atomic_write_bytes

    path = store.artifact_path(run_id, HISTORY, history_name(step))
    atomic_write_bytes(path, save({k: v.contiguous() for k, v in weights.items()}, metadata={"step": str(step)}))
    store.add_artifact(run_id, HISTORY, history_name(step), {"step": step})
    return path


def load_weights(model: Any, path: Path, run: LoadedRun) -> None:
    """``run``'s kept weights at ``path`` into ``model`` (names, dtypes and shapes checked before they are read)."""
    from ..training.checkpoint import layout_of, read_weights

    model.load_run_state_dict(0, read_weights(path, layout_of(run.config), run.id))


def first_crossing(steps: list[float], values: list[float], threshold: float = THRESHOLD,
                   above: bool = True) -> float | None:
    """The first step where ``values`` (linearly interpolated between steps) goes above (or below) ``threshold``."""
    for i, (s, v) in enumerate(zip(steps, values, strict=True)):
        if (v > threshold) if above else (v < threshold):
            if i == 0:
                return float(s)
            s0, v0 = steps[i - 1], values[i - 1]
            return float(s0 + (threshold - v0) / (v - v0) * (s - s0)) if v != v0 else float(s)
    return None


def settled_crossing(steps: list[float], values: list[float], threshold: float = THRESHOLD) -> float | None:
    """The step from which ``values`` stays above ``threshold`` to the end (interpolated), None if it ends below."""
    below = [i for i, v in enumerate(values) if not v > threshold]
    if not below:
        return float(steps[0])
    i = below[-1]
    if i == len(values) - 1:
        return None
    return first_crossing(steps[i : i + 2], values[i : i + 2], threshold)


# ------------------------------------------------------------------------------------- emergence


@torch.no_grad()
def emergence(store: Store, run: LoadedRun, circuit: Circuit, examples: int = EMERGENCE_EXAMPLES,
              loss_examples: int = LOSS_EXAMPLES, seed: int = ANALYSIS_SEED) -> dict[str, Any]:
    """Mean attention on every path of ``circuit`` and the partial losses at every kept checkpoint of ``run``."""
    points = history(store, run.id)
    if not points:
        raise UserError(f"run {run.id}: no checkpoint history; train it with train.keep_checkpoints=true and "
                        f"train.checkpoint_every=STEPS to measure emergence")
    task = run.task
    batch = sample_examples(task, examples, seed, option="--examples")
    loss_batch = sample_examples(task, loss_examples, seed + 1)
    model = build_model(run.config.model, TaskShapes.of(task), [run.config.seed])  # step 0: as the engine built it
    model.eval()
    steps, attention, losses, partial = [], [], [], {}

    def measure(step: int) -> None:
        steps.append(step)
        attention.append(path_attention(capture(model, batch), task, batch, circuit.paths))
        s = score(model, task, loss_batch)
        losses.append(s["loss"])
        for name, value in s["partial_losses"].items():
            partial.setdefault(name, []).append(value)

    measure(0)
    for step, path in points:
        if step == 0:
            continue
        load_weights(model, path, run)
        measure(step)
    if run.step > steps[-1]:  # the final weights, when the history stops before them
        model = run.model
        measure(run.step)
    att = np.array(attention)  # [checkpoints, paths]
    paths = []
    for i, p in enumerate(circuit.paths):
        values = att[:, i].tolist()
        paths.append({**p.to_dict(), "path": p.label, "first_step_above": first_crossing(steps, values),
                      "settled_step_above": settled_crossing(steps, values), "final_attention": values[-1],
                      "attention": values})
    partial_first = {name: first_crossing(steps, v, THRESHOLD, above=False) for name, v in partial.items()}
    return {"run": run.id, "steps": steps, "threshold": THRESHOLD, "examples": examples, "paths": paths,
            "loss": losses, "partial_losses": partial, "partial_first_step_below": partial_first,
            "loss_examples": loss_examples}


def emergence_table(result: dict[str, Any], title: str) -> Table:
    """A row per path (when its attention first went above 0.5, and for good), then per partial loss (when it
    first went below 0.5)."""
    table = Table([Column("path", no_wrap=True), Column("first step above 0.5", "right"),
                   Column("above 0.5 from then on", "right"), Column("final attention", "right")], title=title)
    show = lambda step: "never" if step is None else f"{step:.0f}"  # noqa: E731
    for p in sorted(result["paths"], key=lambda p: (p["first_step_above"] is None, p["first_step_above"] or 0)):
        table.add_row(p["path"], show(p["first_step_above"]), show(p["settled_step_above"]),
                      f"{p['final_attention']:.2f}")
    for name, first in result["partial_first_step_below"].items():
        table.add_row(f"partial loss {name} < 0.5", show(first), "", "")
    return table


@dataclass
class CircuitEmergence:
    """What the ``seed002-emergence`` preset finds in one run: the circuit discovered by ablation (its file and
    validation) and its emergence over the kept checkpoints; only ``discovery`` when no circuit was found."""

    run: str
    discovery: dict[str, Any]
    circuit_file: Path | None = None
    validation: dict[str, Any] | None = None  # :func:`depthlab.analysis.circuit.validate`'s result
    emergence: dict[str, Any] | None = None  # :func:`emergence`'s result

    def to_json(self) -> dict[str, Any]:
        if self.emergence is None or self.validation is None:
            return {"run": self.run, "circuit": None, "discovery": self.discovery}
        return {"run": self.run, "circuit_file": str(self.circuit_file), "discovery": self.discovery,
                "validation": _compact_validation(self.validation), "emergence": _compact_emergence(self.emergence)}

    def table(self, title: str) -> Table:
        assert self.emergence is not None and self.validation is not None, "no circuit was found"
        v = self.validation
        losses = f"circuit loss {v['circuit']['loss']:.4f}, intact {v['intact']['loss']:.4f}"
        return emergence_table(self.emergence, f"{title}: run {self.run} ({losses})")


def circuit_emergence(store: Store, run_id: str, accept: str = "within") -> CircuitEmergence:
    """Find the circuit of run ``run_id`` by ablation (``accept``: App. E's criterion, or depthlab's), validate it,
    keep it as the run's artifact ``circuit.yaml`` and measure its emergence."""
    found = find_circuit(store, run_id, accept)
    if found.validation is None:
        return CircuitEmergence(run_id, found.discovery)
    return CircuitEmergence(run_id, found.discovery, found.file, found.validation,
                            emergence(store, found.run, found.circuit))


def _compact_validation(v: dict[str, Any]) -> dict[str, Any]:
    return {"intact_loss": v["intact"]["loss"], "circuit_loss": v["circuit"]["loss"],
            "paths": [{"path": p["path"], "attention": p["attention"], "loss_without": p["loss_without"],
                       "rise": p["rise"]} for p in v["paths"]],
            "circuit_heads": v["circuit_heads"], "off_circuit": v["off_circuit"], "rest": v["rest"]}


def _compact_emergence(e: dict[str, Any]) -> dict[str, Any]:
    return {"paths": [{"path": p["path"], "first_step_above": p["first_step_above"],
                       "settled_step_above": p["settled_step_above"], "final_attention": p["final_attention"]}
                      for p in e["paths"]],
            "partial_first_step_below": e["partial_first_step_below"], "steps": e["steps"],
            "loss": e["loss"], "partial_losses": e["partial_losses"]}


__all__ = ["circuit_emergence", "emergence", "first_crossing", "history", "save_history"]
