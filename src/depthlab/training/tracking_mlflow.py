"""``--log mlflow``: each run mirrored to a local MLflow file store, ``<store>/mlruns``, with MLflow's own client.

One MLflow run per depthlab run, in the experiment ``depthlab``, named by the run id and tagged
``depthlab.run_id`` (a resumed run continues the MLflow run it started). Its config goes in as parameters under
dotted names (``model.layers``), its metrics rows as ``train/loss``, ``eval/accuracy`` … at their steps, its final
metrics as ``final/accuracy`` …, and its end as the MLflow status (done: FINISHED, diverged and failed: FAILED,
interrupted: KILLED). Nothing leaves the machine: the tracking URI is a folder and MLflow's telemetry is off.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..fields import flat_fields
from .tracking import MetricsRow, Tracker, by_run_and_step, numbers

EXPERIMENT = "depthlab"
STATUS = {"done": "FINISHED", "diverged": "FAILED", "failed": "FAILED", "interrupted": "KILLED"}
BATCH = 100  # MLflow takes at most 100 parameters (and 1000 metrics) per log_batch call
MAX_PARAM = 6000  # characters of a parameter's value MLflow keeps


class MLflowTracker(Tracker):
    def __init__(self, root: Path, experiment: str = EXPERIMENT) -> None:
        # Set before MLflow is imported: no usage reports, and the file store MLflow 3 keeps (in maintenance mode)
        # behind an opt-in; a value the user set wins.
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self.Metric, self.Param = Metric, Param
        self.uri = (Path(root) / "mlruns").absolute().as_uri()
        self.client = MlflowClient(tracking_uri=self.uri)
        self.experiment, self.experiment_id = experiment, ""  # created when the first run starts
        self.runs: dict[str, str] = {}  # depthlab run id -> MLflow run id

    def start(self, run_id: str, config: dict[str, Any]) -> None:
        if not self.experiment_id:
            found = self.client.get_experiment_by_name(self.experiment)
            self.experiment_id = found.experiment_id if found else self.client.create_experiment(self.experiment)
        found = self.client.search_runs([self.experiment_id], f"tags.`depthlab.run_id` = '{run_id}'", max_results=1)
        if found:
            self.runs[run_id] = found[0].info.run_id
            self.client.update_run(self.runs[run_id], "RUNNING")
            return
        tags = {"depthlab.run_id": run_id, "depthlab.task": config["task"]["name"],
                "depthlab.model": config["model"]["name"]}
        self.runs[run_id] = self.client.create_run(self.experiment_id, run_name=run_id, tags=tags).info.run_id
        params = [self.Param(name, str(value)[:MAX_PARAM]) for name, value in flat_fields(config).items()]
        for i in range(0, len(params), BATCH):
            self.client.log_batch(self.runs[run_id], params=params[i : i + BATCH])

    def _metrics(self, run_id: str, values: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        metrics = [self.Metric(name, value, now, step) for name, value in values.items()]
        for i in range(0, len(metrics), 10 * BATCH):
            self.client.log_batch(self.runs[run_id], metrics=metrics[i : i + 10 * BATCH])

    def log(self, rows: Sequence[MetricsRow]) -> None:
        for (run_id, step), values in by_run_and_step(rows).items():
            self._metrics(run_id, values, step)

    def finish(self, run_id: str, status: str, final: dict[str, Any] | None) -> None:
        if run_id not in self.runs:
            return
        if final:
            self._metrics(run_id, numbers(final, "final/"), int(final.get("steps") or 0))
        self.client.set_terminated(self.runs.pop(run_id), STATUS.get(status, "FAILED"))
