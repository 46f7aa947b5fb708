"""Issue 47 item 1: an output never lands on what a command reads or owns.

`report --store S --out S/depthlab.sqlite` (and `runs`/`metrics --format … --out` the same) replaced the store's
database with the output, exit 0; `metrics --out S/artifacts/RUN/checkpoint.safetensors` replaced a checkpoint.
Every output option is now checked, through symlinks and hard links, against the store's database and its
SQLite companions, its folders, the command's inputs and the running interpreter's files, before any work:
one line, exit 2, the file untouched. The store here is made by depthlab but holds no run (nothing is trained):
the refusal comes before any read.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from conftest import one_line_exit_2, run_depthlab
from depthlab.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A depthlab store with a run's checkpoint file in artifacts/ (bytes only: nothing here reads it)."""
    root = tmp_path / "S"
    Store(root).close()
    (root / "artifacts" / "run1").mkdir(parents=True)
    (root / "artifacts" / "run1" / "checkpoint.safetensors").write_bytes(b"weights")
    return root


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("command", [["report"], ["runs", "--format", "csv"], ["metrics", "--format", "json"]])
def test_a_read_command_never_writes_over_the_store_database(store, command):
    before = digest(store / "depthlab.sqlite")
    one_line_exit_2(run_depthlab(*command, "--store", str(store), "--out", str(store / "depthlab.sqlite")),
                    "--out:", "is the store's database")
    assert digest(store / "depthlab.sqlite") == before


def test_nor_over_its_companions_a_checkpoint_or_a_symlink_or_hard_link_to_them(store, tmp_path):
    (tmp_path / "link.csv").symlink_to(store / "depthlab.sqlite")
    os.link(store / "depthlab.sqlite", tmp_path / "hard.csv")
    (tmp_path / "folder-link").symlink_to(store / "artifacts" / "run1")
    cases = [(store / "depthlab.sqlite-wal", "is the store's database's wal file"),
             (store / "depthlab.sqlite-journal", "is the store's database's journal file"),
             (store / "artifacts" / "run1" / "checkpoint.safetensors", "inside the store's artifacts folder"),
             (tmp_path / "folder-link" / "checkpoint.safetensors", "inside the store's artifacts folder"),
             (tmp_path / "link.csv", "is the store's database"),
             (tmp_path / "hard.csv", "is the store's database"),
             (store / "atlas" / "quick.json", "is inside the store's atlas folder")]
    for out, needle in cases:
        one_line_exit_2(run_depthlab("metrics", "--store", str(store), "--out", str(out)), needle)
    assert (store / "artifacts" / "run1" / "checkpoint.safetensors").read_bytes() == b"weights"
    assert not (store / "depthlab.sqlite-journal").exists()


def test_the_default_store_is_guarded_too(store, monkeypatch):
    monkeypatch.setenv("DEPTHLAB_STORE", str(store))
    one_line_exit_2(run_depthlab("report", "--out", str(store / "depthlab.sqlite")), "is the store's database")


def test_folder_outputs_stay_out_of_the_store_folders_but_may_use_a_runs_sub_folder(store):
    for folder in (store / "artifacts", store / "artifacts" / "run1", store / "reproduced"):
        one_line_exit_2(run_depthlab("atlas", "--out", str(folder), "--store", str(store)), "--out:", "the store's")
    from depthlab.cli.common import check_output

    check_output(store / "artifacts" / "run1" / "export", "--out", folder=True, store=store)  # the default's place
    check_output(store / "report.html", "--out", store=store)  # beside the database is fine


def test_nor_over_the_interpreter_its_libraries_or_the_inputs(store, tmp_path):
    import depthlab

    (tmp_path / "model").mkdir()
    for out, needle in [(Path(sys.executable), "is the running Python"),
                        (Path(depthlab.__file__), "the running Python's libraries"),
                        (Path(os.__file__), "the running Python's libraries"),
                        (Path(__file__), "is the source of the loaded module")]:
        one_line_exit_2(run_depthlab("report", "--store", str(store), "--out", str(out)), needle)
    one_line_exit_2(run_depthlab("induction", "--model", str(tmp_path / "model"), "--out",
                                 str(tmp_path / "model" / "figs")), "--model (an input of this command)")
    one_line_exit_2(run_depthlab("llm-bench", "--endpoint", "http://127.0.0.1:9/v1", "--model-name", "m",
                                 "--out", str(tmp_path / "a.png"), "--markdown", str(tmp_path / "a.png"),
                                 "--store", str(store)), "--markdown:", "--out (an input of this command)")
