"""``depthlab.train`` and ``depthlab.sweep``: train from Python, get the runs' ids and final metrics back.

A config is a YAML file (a path) or a mapping with the sections of a run file (``task``, ``model``, ``train``,
``seed``; a sweep adds ``sweep:``, dotted fields to lists of values). Keyword overrides change it before it is
validated: a dotted field (``**{"model.layers": 3}``), the same with ``__`` for the dot (``model__layers=3``),
or a section as a mapping merged into it (``train={"steps": 500}``). Runs are stored as the CLI stores them:
the same config is the same run id, so finished runs are skipped and unfinished ones resume.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..store import Store as LowLevelStore
from .catalog import load_plugins
from .store import Store

ConfigLike = str | os.PathLike | Mapping[str, Any]


@dataclass(frozen=True)
class RunResult:
    """One trained run: its id in the store, its status (done, diverged, …) and its final metrics (None unless
    done: ``accuracy``, ``loss``, ``steps``, ``chance``, …)."""

    id: str
    status: str
    metrics: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def config_mapping(config: ConfigLike, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The config (a YAML file's path, a mapping, or a RunConfig) with the keyword ``overrides`` applied."""
    from ..config import RunConfig, load_yaml, set_field
    from ..fields import flat_fields

    if isinstance(config, str | os.PathLike):
        raw = load_yaml(config)
    elif isinstance(config, RunConfig):
        raw = config.to_dict()
    else:
        raw = copy.deepcopy(dict(config))
    for key, value in overrides.items():
        field = key.replace("__", ".")
        fields = flat_fields({field: value}) if isinstance(value, Mapping) and value else {field: value}
        for name, item in fields.items():
            set_field(raw, name, item, where="override")
    return raw


def open_store(store: str | Path | LowLevelStore | None) -> LowLevelStore:
    """``store`` as a store to train into (a path is created when missing; None: the default store)."""
    return store if isinstance(store, LowLevelStore) else Store(store, create=True)


@contextlib.contextmanager
def progress_bar(total: int, description: str, shown: bool) -> Iterator[Callable[[int], None] | None]:
    """A progress bar over run-steps when ``shown`` (rich: a terminal or a notebook); yields ``advance(steps)``."""
    if not shown:
        yield None
        return
    from rich.progress import MofNCompleteColumn, Progress

    with Progress(*Progress.get_default_columns(), MofNCompleteColumn()) as bar:
        task = bar.add_task(description, total=total)
        yield lambda steps: bar.advance(task, steps)


def train_configs(runs: list[Any], store: LowLevelStore, description: str, progress: bool = False,
                  log: str | Sequence[str] = (), group_size: int | None = None, executor: str = "local",
                  address: str | None = None, resources: Any = None) -> list[RunResult]:
    """Train ``runs`` (RunConfigs) into ``store`` and return each run's result, in order."""
    from ..sweeps.execute import train_runs
    from ..training.tracking import open_trackers

    names = [log] if isinstance(log, str) else list(log)
    total = sum(run.train.steps for run in runs)
    with progress_bar(total, description, progress) as advance, open_trackers(names, store.root) as tracker:
        results = train_runs(runs, store, group_size, executor, address, resources, advance, tracker)
    return run_results(store, [LowLevelStore.run_id(run.to_dict()) for run in runs], results)


def run_results(store: LowLevelStore, ids: list[str], results: Mapping[str, Any]) -> list[RunResult]:
    """Each run's status from the store and final metrics from ``results``, in the order of ``ids``."""
    records = {record["id"]: record for record in store.find_runs(ids=ids)}
    return [RunResult(run_id, records[run_id]["status"], results.get(run_id)) for run_id in ids]


def train(config: ConfigLike, store: str | Path | LowLevelStore | None = None, *, progress: bool = False,
          log: str | Sequence[str] = (), **overrides: Any) -> RunResult:
    """Train one run (a run file's path or mapping, changed by ``overrides``) into ``store``; its result.

    ``progress=True`` shows a progress bar; ``log="mlflow"`` or ``"wandb"`` (or both, a list) mirrors the run to
    a local experiment tracker (``pip install 'depthlab[track]'``). A run already done is not trained again.
    """
    from ..config import parse_run
    from ..errors import UserError

    load_plugins()
    raw = config_mapping(config, overrides)
    if "sweep" in raw:
        raise UserError("sweep: this is a sweep config; use depthlab.sweep (or remove the sweep section)")
    run = parse_run(raw)
    return train_configs([run], open_store(store), "training", progress, log, group_size=1)[0]


def sweep(config: ConfigLike, store: str | Path | LowLevelStore | None = None, *, progress: bool = False,
          log: str | Sequence[str] = (), group_size: int | None = None, executor: str = "local",
          address: str | None = None, **overrides: Any) -> list[RunResult]:
    """Train every run of a sweep (a sweep file's path or mapping, changed by ``overrides``) into ``store``,
    runs of equal shapes batched; each run's result, in grid order. Finished runs are skipped.

    ``progress``, ``log``: as for :func:`train`. ``group_size``: runs per batched group (default: by memory).
    ``executor="ray"`` trains each group as a Ray task (``address``: a cluster; default a local instance).
    """
    from ..config import expand_sweep, parse_resources

    load_plugins()
    raw = config_mapping(config, overrides)
    runs = expand_sweep(raw)
    return train_configs(runs, open_store(store), "sweep", progress, log, group_size, executor, address,
                         parse_resources(raw))
