"""``--log mlflow`` and ``--log wandb``: each run's config and metrics mirrored, with the real packages, to a local
MLflow file store and to W&B offline runs, and nothing sent over the network."""

from __future__ import annotations

import json
import socket
import struct
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import depthlab
from depthlab.cli import app
from depthlab.errors import UserError

SWEEP = {
    "task": {"name": "memorization", "n_words": 4, "length": 2, "n_examples": 8},
    "model": {"name": "attention_only", "layers": 1},
    "train": {"optimizer": "adamw", "lr": 0.01, "steps": 30, "eval_every": 10, "batch_size": 8},
    "sweep": {"model.layers": [1, 2]},
}
runner = CliRunner()


@pytest.fixture
def offline(monkeypatch):
    """This process may open connections to this machine only; W&B's server address points at a closed local port."""
    connect = socket.socket.connect

    def local_only(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not str(address[0]).startswith(("127.", "::1",
                                                                                                  "localhost")):
            raise AssertionError(f"a connection to {address} was attempted")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", local_only)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def store_metrics(store: depthlab.Store, run_id: str) -> dict[tuple[str, int], float]:
    rows = store.metrics(run_id)
    return {(f"{r.split}/{r.metric}", r.step): r.value for r in rows.itertuples()}


def test_mlflow_mirrors_config_metrics_and_status(tmp_path, offline):
    from mlflow.tracking import MlflowClient

    root = tmp_path / "store"
    results = depthlab.sweep(SWEEP, store=root, log="mlflow")
    store = depthlab.Store(root)
    client = MlflowClient(tracking_uri=(root / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("depthlab")
    mirrored = {run.data.tags["depthlab.run_id"]: run for run in client.search_runs([experiment.experiment_id])}
    assert set(mirrored) == {r.id for r in results}
    for result in results:
        run, record = mirrored[result.id], store.get_run(result.id)
        assert run.info.status == "FINISHED" and run.info.run_name == result.id
        assert run.data.params["model.layers"] == str(record["config"]["model"]["layers"])
        assert run.data.params["train.lr"] == "0.01" and run.data.params["task.name"] == "memorization"
        history = {(name, m.step): m.value for name in ("train/loss", "train/accuracy", "eval/loss", "eval/accuracy")
                   for m in client.get_metric_history(run.info.run_id, name)}
        assert history == store_metrics(store, result.id)
        assert run.data.metrics["final/accuracy"] == result.metrics["accuracy"]
    again = depthlab.sweep(SWEEP, store=root, log="mlflow")  # done runs are skipped: nothing new is mirrored
    assert [r.status for r in again] == ["done", "done"]
    assert len(client.search_runs([experiment.experiment_id])) == 2


def wandb_records(path: Path):
    """The records of a W&B offline run file (a LevelDB-style log of protobuf records, 32 KiB blocks)."""
    from wandb.proto import wandb_internal_pb2

    data, block, position, pending = path.read_bytes(), 32768, 7, b""  # after the 7-byte header
    while position + 7 <= len(data):
        if block - position % block < 7:  # too little room left in the block for a record header
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if position + 7 + length > len(data):  # still being written
            return
        if length == 0 and kind == 0:
            position += block - position % block
            continue
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_mirrors_offline_runs(tmp_path, offline):
    root = tmp_path / "store"
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    result = runner.invoke(app, ["sweep", str(tmp_path / "sweep.yaml"), "--store", str(root), "--log", "wandb",
                                 "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)  # W&B wrote nothing to stdout
    store = depthlab.Store(root)
    files = sorted((root / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2
    seen = set()
    for path in files:
        # W&B's service process writes a finished run's file a moment after finish() returns (a process that
        # exits, as the CLI does, waits for it): wait for the run's exit record
        deadline = time.monotonic() + 60
        while not any(r.WhichOneof("record_type") == "exit" for r in wandb_records(path)):
            assert time.monotonic() < deadline, f"{path} was never completed"
            time.sleep(0.2)
        history, config, exit_code, run_id = {}, {}, None, None
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":  # the config comes with the run, or in config records after it
                run_id = record.run.run_id
                config.update({item.key: json.loads(item.value_json) for item in record.run.config.update})
            elif kind == "config":
                config.update({item.key: json.loads(item.value_json) for item in record.config.update})
            elif kind == "history":
                values = {"/".join(item.nested_key) or item.key: json.loads(item.value_json)
                          for item in record.history.item}
                step = values.pop("_step")
                history.update({(name, step): value for name, value in values.items() if not name.startswith("_")})
            elif kind == "exit":
                exit_code = record.exit.exit_code
        seen.add(run_id)
        assert config["model"] == store.get_run(run_id)["config"]["model"]
        assert history == store_metrics(store, run_id) and exit_code == 0
    assert seen == {r["id"] for r in out["runs"]}


def test_tracker_mistakes_are_one_line_before_any_work(tmp_path, monkeypatch):
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(SWEEP))
    args = ["sweep", str(tmp_path / "sweep.yaml"), "--store", str(tmp_path / "store")]
    cases = [(["--log", "tensorboard"], "--log: unknown tracker 'tensorboard'; allowed: mlflow, wandb"),
             (["--log", "mlflow", "--executor", "ray"], "--log: trackers mirror runs that the local executor trains")]
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    cases.append((["--log", "wandb"], "--log wandb: the wandb package is not installed; pip install 'depthlab[track]'"))
    for extra, message in cases:
        result = runner.invoke(app, [*args, *extra])
        assert isinstance(result.exception, UserError) and str(result.exception).startswith(message), result.output
    assert not (tmp_path / "store").exists()
