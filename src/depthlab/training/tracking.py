"""Experiment trackers: each run's config and metrics mirrored to MLflow or Weights & Biases as it trains.

The store stays the record; a tracker is a mirror for the tools people already browse runs with. The engine
calls a :class:`Tracker` where it writes to the store: :meth:`~Tracker.start` when a run starts (or resumes)
training, :meth:`~Tracker.log` with the metrics rows it writes (``(run_id, step, split, {name: value})``), and
:meth:`~Tracker.finish` with the status and final metrics it records. The base class does nothing, so an
engine without a tracker pays nothing.

Both trackers stay on this machine: ``mlflow`` writes an MLflow file store under ``<store>/mlruns`` with
MLflow's own client (``mlflow ui --backend-store-uri <store>/mlruns`` shows it), ``wandb`` writes W&B offline
runs under ``<store>/wandb`` (``wandb sync <store>/wandb/offline-run-*`` uploads them when you choose). The
packages are an extra: ``pip install 'depthlab[track]'``.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import UserError

MetricsRow = tuple[str, int, str, dict[str, float]]  # (run_id, step, split, {name: value}), as the store takes them


class Tracker:
    """Where the engine mirrors runs; this base mirrors nothing."""

    def start(self, run_id: str, config: dict[str, Any]) -> None:
        """Run ``run_id`` (resolved config ``config``) starts or resumes training."""

    def log(self, rows: Sequence[MetricsRow]) -> None:
        """Metrics rows just written to the store (several runs, train and eval)."""

    def finish(self, run_id: str, status: str, final: dict[str, Any] | None) -> None:
        """Run ``run_id`` left training with ``status`` (done, diverged, interrupted, failed); ``final`` is what the
        store recorded as its final metrics (None unless done)."""

    def close(self) -> None:
        """Write out what is pending."""


class Trackers(Tracker):
    """Several trackers mirrored together, in order."""

    def __init__(self, trackers: Sequence[Tracker]) -> None:
        self.trackers = list(trackers)

    def start(self, run_id: str, config: dict[str, Any]) -> None:
        for tracker in self.trackers:
            tracker.start(run_id, config)

    def log(self, rows: Sequence[MetricsRow]) -> None:
        for tracker in self.trackers:
            tracker.log(rows)

    def finish(self, run_id: str, status: str, final: dict[str, Any] | None) -> None:
        for tracker in self.trackers:
            tracker.finish(run_id, status, final)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


def _mlflow(root: Path) -> Tracker:
    from .tracking_mlflow import MLflowTracker

    return MLflowTracker(root)


def _wandb(root: Path) -> Tracker:
    from .tracking_wandb import WandbTracker

    return WandbTracker(root)


TRACKERS: dict[str, Callable[[Path], Tracker]] = {"mlflow": _mlflow, "wandb": _wandb}


def check_trackers(names: Sequence[str]) -> list[str]:
    """The tracker names, checked before any work: known, and their package installed."""
    names = list(dict.fromkeys(names))
    for name in names:
        if name not in TRACKERS:
            raise UserError(f"--log: unknown tracker {name!r}; allowed: {', '.join(TRACKERS)}")
        if importlib.util.find_spec(name) is None:  # each tracker's package has its name
            raise UserError(f"--log {name}: the {name} package is not installed; pip install 'depthlab[track]'")
    return names


@contextlib.contextmanager
def open_trackers(names: Sequence[str], root: Path) -> Iterator[Tracker | None]:
    """The trackers ``names`` (``mlflow``, ``wandb``) that will write under the store folder ``root`` (nothing is
    written before the first run starts), closed at the end; None when ``names`` is empty."""
    trackers = [TRACKERS[name](root) for name in check_trackers(names)]
    if not trackers:
        yield None
        return
    tracker = trackers[0] if len(trackers) == 1 else Trackers(trackers)
    try:
        yield tracker
    finally:
        tracker.close()


def numbers(values: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric entries of ``values`` (nested mappings flattened with ``/``, as trackers name metrics)."""
    out: dict[str, float] = {}
    for name, value in values.items():
        if isinstance(value, dict):
            out.update(numbers(value, f"{prefix}{name}/"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[f"{prefix}{name}"] = float(value)
    return out


def by_run_and_step(rows: Sequence[MetricsRow]) -> dict[tuple[str, int], dict[str, float]]:
    """Rows merged per (run, step) under ``split/name`` keys (``train/loss``, ``eval/accuracy``), in order."""
    merged: dict[tuple[str, int], dict[str, float]] = {}
    for run_id, step, split, values in rows:
        merged.setdefault((run_id, step), {}).update(numbers(values, f"{split}/"))
    return merged
