"""``--log wandb``: each run mirrored to a Weights & Biases run in offline mode, under ``<store>/wandb``.

One W&B run per depthlab run, in the project ``depthlab``, whose id and name are the run id (a resumed run
reuses it); its config is the resolved config, its history the metrics rows merged per step (``train/loss``,
``eval/accuracy`` …), its summary the final metrics (``final/accuracy`` …), its exit code 0 when done. Offline
mode writes files only; ``wandb sync <store>/wandb/offline-run-*`` uploads them, when you choose. Runs of one
group train together, so their W&B runs are open together (``reinit="create_new"``); none captures the
console, so ``--json`` output stays one object.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .tracking import MetricsRow, Tracker, by_run_and_step, numbers

PROJECT = "depthlab"


class WandbTracker(Tracker):
    def __init__(self, root: Path, project: str = PROJECT) -> None:
        import wandb

        self.wandb, self.project = wandb, project
        self.dir = Path(root).absolute()
        self.runs: dict[str, Any] = {}  # depthlab run id -> open wandb Run

    def start(self, run_id: str, config: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        settings = self.wandb.Settings(mode="offline", silent=True, console="off", save_code=False, disable_git=True,
                                       disable_job_creation=True, x_disable_stats=True, x_disable_meta=True,
                                       x_disable_machine_info=True, x_save_requirements=False)
        self.runs[run_id] = self.wandb.init(project=self.project, id=run_id, name=run_id, dir=str(self.dir),
                                            config=config, resume="allow", reinit="create_new", settings=settings)

    def log(self, rows: Sequence[MetricsRow]) -> None:
        for (run_id, step), values in by_run_and_step(rows).items():
            if run_id in self.runs:
                self.runs[run_id].log(values, step=step)

    def finish(self, run_id: str, status: str, final: dict[str, Any] | None) -> None:
        run = self.runs.pop(run_id, None)
        if run is None:
            return
        if final:
            run.summary.update(numbers(final, "final/"))
        run.summary["status"] = status
        run.finish(exit_code=0 if status == "done" else 1)

    def close(self) -> None:
        for run_id in list(self.runs):  # runs the engine never finished (an error outside it): close them
            self.finish(run_id, "failed", None)
