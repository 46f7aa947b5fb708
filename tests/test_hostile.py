"""Untrusted files, plugins and endpoints (issue 32): bounded, attributed, never silently wrong.

One test per class of hostile input, with real special files (``/dev/zero``, a FIFO, symlinks to them), a real
SQLite store edited by hand, real plugin files and a chat-completions server on 127.0.0.1 that answers what the
test tells it to. Every refusal is one line on stderr, exit code 2, and leaves the files as they were. Commands
run in this process through the real entry point (``conftest.run_depthlab``); tiny runs, a second or two each.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import shutil
import sqlite3
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save

from conftest import one_line_exit_2, run_depthlab
from depthlab import plugins
from depthlab.bounded import BoundError, json_depth, parse_yaml, read_file
from depthlab.config import MAX_GRID_POINTS, apply_overrides, expand_sweep, parse_run
from depthlab.llm.runners import EndpointError, EndpointRunner, Request
from depthlab.models import MODELS
from depthlab.store import Store, StoreError
from depthlab.sweeps.local import run_local
from depthlab.tasks import TASKS
from depthlab.training import checkpoint as ckpt
from depthlab.training.checkpoint import WEIGHTS, CheckpointError, Owner, layout_of, load_checkpoint, save_checkpoint
from depthlab.training.claims import hold_runs
from depthlab.training.engine import train_group
from hostile_http import Answer, HostileServer

RUN = {"task": {"name": "memorization", "n_words": 4, "length": 2, "n_examples": 8},
       "model": {"name": "attention_only", "layers": 1},
       "train": {"steps": 4, "eval_every": 2, "batch_size": 8, "checkpoint_every": 2}}


@pytest.fixture(autouse=True)
def registries_as_they_were():
    """The plugin files these tests load register tasks: the registries are given back after each test, so the
    tests that share this process (``pytest -n 2 --dist loadfile``) see depthlab's own tasks only."""
    tasks, models, loaded = dict(TASKS), dict(MODELS), dict(plugins.LOADED)
    yield
    for registry, before in ((TASKS, tasks), (MODELS, models), (plugins.LOADED, loaded)):
        registry.clear()
        registry.update(before)


def run_config(seed: int = 0):
    return parse_run({**RUN, "seed": seed})


def rid(config) -> str:
    return Store.run_id(config.to_dict())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A store with two trained runs of one shape (seeds 0 and 1), each with its final checkpoint."""
    root = tmp_path_factory.mktemp("trained") / "store"
    store = Store(root)
    train_group([run_config(0), run_config(1)], store)
    store.close()
    return root


@pytest.fixture
def store_copy(trained, tmp_path):
    """A copy of the trained store a test may damage."""
    shutil.copytree(trained, tmp_path / "store")
    return tmp_path / "store"


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------------- unbounded reads


@pytest.fixture
def special(tmp_path):
    """Special files a path may name: a device, a FIFO, symlinks to them, a folder, a file past the limit."""
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    (tmp_path / "big.yaml").write_bytes(b"#" * ((1 << 20) + 1))
    (tmp_path / "folder.yaml").mkdir()
    return {"/dev/zero": ("/dev/zero", "a character device"), "fifo": (str(fifo), "a FIFO"),
            "symlink": (str(tmp_path / "zero.yaml"), "a character device"),
            "folder": (str(tmp_path / "folder.yaml"), "a folder"),
            "big": (str(tmp_path / "big.yaml"), "more than the 1,048,576 bytes (1.0 MiB) allowed")}


@pytest.mark.parametrize("kind", ["/dev/zero", "fifo", "symlink", "folder", "big"])
def test_special_or_huge_files_are_refused_before_a_byte_is_read(special, kind, tmp_path):
    """`train /dev/zero` read 11.8 GB in 32 s; a FIFO blocked forever. Now the kind and size come first."""
    path, needle = special[kind]
    one_line_exit_2(run_depthlab("train", path, "--store", str(tmp_path / "s")), needle)
    one_line_exit_2(run_depthlab("--plugin", path, "tasks"), "--plugin")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("text, needle", [
    ("[" * 200_000, "nest more than 64 levels"),
    ("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)), "more than 200,000 values"),
    ("a: &a [*a]", "refers to the list or mapping it is in"),
    ("a0: &a0 [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 80)), "once aliases are expanded"),
    ("seed: " + "9" * 5000, "line 1, column 7"),
], ids=["deep", "billion-laughs", "self-alias", "alias-depth", "5000-digits"])
def test_deep_exploding_or_endless_yaml_is_refused_while_it_is_read(tmp_path, text, needle):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    one_line_exit_2(run_depthlab("train", str(path), "--store", str(tmp_path / "s")), "config:", needle)


def test_json_depth_counts_brackets_outside_strings_only():
    assert json_depth(json.dumps({"a": "[[[{{", "b": [1, {"c": '"]]'}]})) == 3
    assert json_depth(b'"\\\\"[[') == 2 and json_depth(b'"\\"[["') == 0 and json_depth(b"plain") == 0


def test_a_grid_is_counted_before_it_is_expanded(tmp_path):
    """A 1.3 KB sweep file of 4 keys × 100 values (10⁸ points) ran 25 s in silence; now it is one line at once."""
    raw = {**RUN, "sweep": {"seed": list(range(100)), "train.lr": [0.001 * i for i in range(1, 101)],
                            "train.steps": list(range(1, 101)), "train.batch_size": list(range(1, 101))}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw))
    one_line_exit_2(run_depthlab("sweep", str(path), "--store", str(tmp_path / "s")),
                    "100,000,000 grid points", f"{MAX_GRID_POINTS:,}")
    assert not (tmp_path / "s").exists()


def test_a_checkpoint_is_judged_by_its_header_before_its_data_is_read(store_copy, monkeypatch):
    """A checkpoint that declares a tensor the run does not have (here 1 GiB of it, a sparse file) is refused on
    its header: no read larger than the header is ever made."""
    config = run_config(0)
    folder = store_copy / "artifacts" / rid(config)
    header = json.dumps({"__metadata__": {"step": "4"}, "evil": {"dtype": "F32", "shape": [1 << 28],
                                                                 "data_offsets": [0, 1 << 30]}}).encode()
    path = folder / WEIGHTS
    with path.open("wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + (1 << 30))
    reads = []
    real = ckpt.read_safetensors.__globals__["read_exactly"]
    monkeypatch.setitem(ckpt.read_safetensors.__globals__, "read_exactly",
                        lambda fd, n, *a: reads.append(n) or real(fd, n, *a))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(folder, Owner.of(config), layout_of(config))
    assert max(reads) == len(header) and "\n" not in str(info.value)


def test_a_checkpoint_linked_to_a_device_is_refused(store_copy):
    """`export RUN` with checkpoint.safetensors -> /dev/zero grew to 24 GB until the OOM killer came."""
    run = rid(run_config(0))
    path = store_copy / "artifacts" / run / WEIGHTS
    path.unlink()
    path.symlink_to("/dev/zero")
    for command in (["export", run], ["analyze", "attention", run], ["attention", run]):
        one_line_exit_2(run_depthlab(*command, "--store", str(store_copy)), "a character device", run)


@pytest.fixture
def server():
    with HostileServer() as s:
        yield s


def ask(url: str, timeout: float = 5.0) -> str:
    runner = EndpointRunner(url, "m", timeout=timeout, retries=0)
    try:
        return runner.complete(Request("q", 0.0, 0)).text
    finally:
        runner.close()


@pytest.mark.parametrize("answer, needle", [
    (Answer(chunks=[b"[" * 200_000]), "JSON nested 200,000 levels deep"),
    (Answer(chunks=[b" " * 10] * 40, pause=0.1), "did not answer within --timeout 0.5 s"),
    (Answer(chunks=[b" " * (1 << 20)] * 6, length=None), "more than 4,194,304 bytes"),
    (Answer(chunks=[gzip.compress(json.dumps({"choices": [{"message": {"content": "x" * 10**7}}]}).encode())],
            headers={"Content-Encoding": "gzip"}), "Content-Encoding gzip"),
], ids=["200k-brackets", "trickle", "endless", "gzip-bomb"])
def test_hostile_endpoint_answers_are_bounded(server, answer, needle):
    """The trickle sends 400 bytes over 4 s, each read well inside the 0.5 s timeout: only a deadline on the
    whole request ends it (without one it would end 4 s later as a malformed answer)."""
    server.answer = answer
    with pytest.raises(EndpointError, match=needle):
        ask(server.url, timeout=0.5)
    server.answer = Answer.chat("fine")
    assert ask(server.url) == "fine"


# ------------------------------------------------------------------------------ silently wrong


def test_another_runs_checkpoint_is_refused_naming_both_runs(store_copy):
    """Run B's checkpoint copied into run A's folder: A was resumed from it and recorded `done` with B's loss."""
    a, b = run_config(0), run_config(1)
    store = Store(store_copy)
    for name in (WEIGHTS, ckpt.SIDECAR):
        shutil.copy(store_copy / "artifacts" / rid(b) / name, store_copy / "artifacts" / rid(a) / name)
    store.finish_run(rid(a), {}, status="interrupted")
    before = files_of(store_copy / "artifacts")
    with pytest.raises(CheckpointError) as info:
        run_local([a], store)
    message = str(info.value)
    assert f"belongs to run {rid(b)}" in message and f"not to run {rid(a)}" in message and "\n" not in message
    assert files_of(store_copy / "artifacts") == before
    assert store.get_run(rid(a))["status"] == "interrupted"  # refused before any work


def test_format_2_and_1_checkpoints_load_where_their_run_id_matches(tmp_path):
    """Old checkpoints stay loadable where their run can be verified: format 2 records the run id in the weights
    file, format 1 in the sidecar."""
    config = run_config(0)
    tensors = {"w": torch.ones(2)}
    save_checkpoint(tmp_path / "f2", tensors, 3, {"run_id": rid(config), "stream": {}})  # format 2: no config hash
    assert load_checkpoint(tmp_path / "f2", Owner.of(config))[1]["step"] == 3
    with pytest.raises(CheckpointError, match="belongs to run"):
        load_checkpoint(tmp_path / "f2", Owner.of(run_config(1)))
    (tmp_path / "f1").mkdir()
    (tmp_path / "f1" / WEIGHTS).write_bytes(save(tensors, metadata={"step": "3"}))
    (tmp_path / "f1" / ckpt.SIDECAR).write_text(json.dumps({"step": 3, "run_id": rid(config)}))
    assert load_checkpoint(tmp_path / "f1", Owner.of(config))[1]["step"] == 3
    (tmp_path / "f1" / ckpt.SIDECAR).write_text(json.dumps({"step": 3}))
    with pytest.raises(CheckpointError, match="records no run id"):
        load_checkpoint(tmp_path / "f1", Owner.of(config))


def test_a_checkpoint_whose_tensors_do_not_fit_is_refused_on_its_header(tmp_path):
    config = run_config(0)
    layout = layout_of(config)
    name = sorted(layout.required)[0]
    shape = layout.tensors[name][1]
    for tensors, needle in (({name: torch.zeros(*shape, 2)}, f"{name} is F32"),
                            ({name: torch.zeros(shape, dtype=torch.float64)}, f"{name} is F64"),
                            ({"stray": torch.zeros(1)}, "unknown tensor 'stray'")):
        save_checkpoint(tmp_path, tensors, 2, {}, Owner.of(config))
        with pytest.raises(CheckpointError, match="does not fit") as info:
            load_checkpoint(tmp_path, Owner.of(config), layout)
        assert needle in str(info.value) or "no tensor" in str(info.value)


def test_set_of_a_swept_field_is_refused_never_ignored(tmp_path):
    """`sweep … --set model.layers=abc` where the file sweeps model.layers trained every run with the file's values;
    `reproduce seed001-depth --set model.layers=abc` trained 36 runs. The grid's values change with sweep.FIELD."""
    raw = {**RUN, "sweep": {"model.layers": [1, 2]}}
    with pytest.raises(StoreError.__mro__[1], match=r"--set model.layers: the sweep varies model.layers"):
        apply_overrides(raw, ["model.layers=abc"])
    with pytest.raises(StoreError.__mro__[1], match="the sweep varies model"):
        apply_overrides({**RUN, "sweep": {"model": [{"name": "lstm"}]}}, ["model.width=3"])
    assert [c.model.layers for c in expand_sweep(apply_overrides(raw, ["sweep.model.layers=[3]"]))] == [3]
    assert [c.model.layers for c in expand_sweep(apply_overrides(raw, ["train.lr=0.5"]))] == [1, 2]
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw))
    one_line_exit_2(run_depthlab("sweep", str(path), "--set", "model.layers=abc", "--store", str(tmp_path / "s")),
                    "the sweep varies model.layers")
    one_line_exit_2(run_depthlab("reproduce", "seed001-depth", "--set", "model.layers=abc", "--store",
                                 str(tmp_path / "s")), "the sweep varies model.layers")
    assert not (tmp_path / "s").exists()


def test_a_config_without_a_model_takes_set_model_fields_on_seed_001s_model():
    """`train nomodel.yaml --set model.layers=2` said `unknown model None`."""
    raw = {k: v for k, v in RUN.items() if k != "model"}
    assert parse_run(apply_overrides(raw, ["model.layers=2"])).model.layers == 2
    with pytest.raises(StoreError.__mro__[1], match=r"task.name: required; allowed: "):
        parse_run({"task": {"k": 3}})
    with pytest.raises(StoreError.__mro__[1], match=r"--set task.: a field name is empty between the dots"):
        apply_overrides(RUN, ["task.=3"])


def test_read_commands_open_the_store_read_only_and_never_rewrite_it(store_copy, tmp_path):
    """A zero-byte depthlab.sqlite was rewritten as a new store by `runs`; user_version -5 was set back to 1."""
    db = store_copy / "depthlab.sqlite"
    before = db.read_bytes()
    run = rid(run_config(0))
    for command in (["runs"], ["runs", "--json"], ["metrics", "--json"], ["export", run, "--out", str(tmp_path / "x")],
                    ["attention", run, "--out", str(tmp_path / "a.png")]):  # with --out: nothing to record
        code, _, err = run_depthlab(*command, "--store", str(store_copy))
        assert code == 0, err
    assert (tmp_path / "a.png").read_bytes().startswith(b"\x89PNG")
    assert db.read_bytes() == before  # mode=ro: the file is never written (SQLite may add its -wal/-shm)
    assert {p.name for p in store_copy.iterdir()} <= {"depthlab.sqlite", "depthlab.sqlite-wal",
                                                      "depthlab.sqlite-shm", "artifacts"}
    empty = tmp_path / "empty"
    (empty / "artifacts").mkdir(parents=True)
    (empty / "depthlab.sqlite").write_bytes(b"")
    one_line_exit_2(run_depthlab("runs", "--store", str(empty)), "is empty (0 bytes): not a depthlab store")
    assert (empty / "depthlab.sqlite").read_bytes() == b"" and sorted(os.listdir(empty)) == ["artifacts",
                                                                                            "depthlab.sqlite"]
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = -5")
    before = db.read_bytes()
    for command in (["runs"], ["train", str(write_run(tmp_path))]):  # a writer refuses it too
        one_line_exit_2(run_depthlab(*command, "--store", str(store_copy)), "schema version -5")
    assert db.read_bytes() == before


def write_run(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(RUN))
    return path


# ------------------------------------------------------------------------ errors name their owner


PLUGIN = '''
import numpy as np
from depthlab.tasks.base import Batch, Task, register, letter_names, number_names

@register
class Hostile(Task):
    name = "hostile_{kind}"
    section = "a test"
    summary = "a plugin task that breaks its contract: {kind}"
    eval_protocol = "fresh sample"
    vocab = property(lambda self: [] if "{kind}" == "empty-vocab" else letter_names(4))
    labels = property(lambda self: number_names(4))
    seq_len = property(lambda self: 3)
    chance = property(lambda self: 0.25)

    def sample(self, n, rng, split="train"):
        {body}
        return Batch(x, y)

    def dataset_size(self, split="eval"):
        return 10**9

    def enumerate(self, split="eval"):
        return None
'''
BODIES = {
    "target-99": ("x, y = rng.integers(0, 4, (n, 3)), np.full(n, 99)", "returned target 99, outside its 4 labels"),
    "target-minus-1": ("x, y = rng.integers(0, 4, (n, 3)), np.full(n, -1)", "returned target -1"),
    "width": ("x, y = rng.integers(0, 4, (n, 4)), rng.integers(0, 4, n)", "returned inputs of shape"),
    "token": ("x, y = np.full((n, 3), 7), rng.integers(0, 4, n)", "returned token id 7, outside its vocabulary"),
    "empty-vocab": ("x, y = rng.integers(0, 4, (n, 3)), rng.integers(0, 4, n)", "has a vocabulary of 0"),
    "raises": ("raise RuntimeError('boom')", "sample raised line 17: RuntimeError: boom"),
    "exits": ("import os; os._exit(0)", "called os._exit(0)"),
    "prints": ("print('chatty'); x, y = rng.integers(0, 4, (n, 3)), np.full(n, 99)", "returned target 99"),
}


@pytest.mark.parametrize("kind", list(BODIES))
def test_plugin_failures_name_the_plugin_the_task_and_what_broke(tmp_path, kind):
    body, needle = BODIES[kind]
    plugin = tmp_path / f"{kind.replace('-', '_')}.py"
    plugin.write_text(PLUGIN.format(kind=kind, body=body))
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({**RUN, "task": {"name": f"hostile_{kind}"}}))
    code, out, err = run_depthlab("--plugin", str(plugin), "train", str(run), "--json", "--store", str(tmp_path / "s"))
    printed = ["chatty"] * (len(err.splitlines()) - 1) if kind == "prints" else []  # its prints go to stderr
    one_line_exit_2((code, out, "\n".join(line for line in err.splitlines() if line not in printed)), needle,
                    str(plugin), f"hostile_{kind}")
    assert err.splitlines()[:-1] == printed


def test_a_plugin_that_prints_or_exits_on_import_cannot_break_json_or_end_the_command(tmp_path):
    chatty = tmp_path / "chatty.py"
    chatty.write_text(PLUGIN.format(kind="ok", body="x, y = rng.integers(0, 4, (n, 3)), rng.integers(0, 4, n)")
                      .replace("import numpy", "print('hello from a plugin')\nimport numpy"))
    code, out, err = run_depthlab("--plugin", str(chatty), "tasks", "--json")
    assert code == 0 and len(out.splitlines()) == 1 and "hostile_ok" in json.loads(out)["tasks"][0]["name"] + out
    assert "hello from a plugin" in err
    exits = tmp_path / "exits.py"
    exits.write_text("import os\nos._exit(0)\n")
    one_line_exit_2(run_depthlab("--plugin", str(exits), "tasks"), "line 2: called os._exit(0)")


def damage(db: Path, sql: str) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(sql)


@pytest.mark.parametrize("sql, column", [
    ("UPDATE runs SET config = '{not json' WHERE id = '{a}'", "config is not JSON"),
    ("UPDATE runs SET final = '[1,2' WHERE id = '{a}'", "final is not JSON"),
    ("UPDATE runs SET status = 'weird' WHERE id = '{a}'", "status is 'weird'"),
    ("UPDATE metrics SET value = 'abc' WHERE run_id = '{a}'", "is 'abc', not a number"),
    ("DROP TABLE metrics", "table metrics: missing; read as empty"),
], ids=["config", "final", "status", "metric-value", "dropped-table"])
def test_store_corruption_names_the_store_and_row_and_the_rest_still_works(store_copy, sql, column, tmp_path):
    a, b = rid(run_config(0)), rid(run_config(1))
    damage(store_copy / "depthlab.sqlite", sql.replace("{a}", a))
    code, out, err = run_depthlab("runs", "--json", "--store", str(store_copy))
    assert code == 0 and len(out.splitlines()) == 1, err
    listed = [r["id"] for r in json.loads(out)["runs"]]
    assert b in listed
    if column.startswith(("config", "final", "status")):
        assert a not in listed
        assert f"warning: store {store_copy}: run {a}: {column}" in err
        one_line_exit_2(run_depthlab("export", a, "--store", str(store_copy)), f"run {a}: {column}")
    code, _, err = run_depthlab("metrics", "--store", str(store_copy), "--format", "csv", "--out",
                                str(tmp_path / "m.csv"))
    assert code == 0 and "Traceback" not in err
    if column.startswith(("is 'abc'", "table")):
        assert column in err
    code, _, err = run_depthlab("export", b, "--store", str(store_copy), "--out", str(tmp_path / "b"))
    assert code == 0, err


def test_resource_failures_name_the_path_or_the_stream(tmp_path, monkeypatch, store_copy, capsys):
    path = tmp_path / "f.bin"

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as info:
        ckpt.atomic_write_bytes(path, b"x")
    assert info.value.filename == str(path) and info.value.errno == 28
    monkeypatch.undo()

    class Full:
        def write(self, text):
            raise OSError(28, "No space left on device")

        def flush(self):
            raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(sys, "argv", ["depthlab", "runs", "--json", "--store", str(store_copy)])
        m.setattr(sys, "stdout", Full())
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            from depthlab.cli import main
            main()
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "error: stdout: cannot write the output (No space left on device); free space " \
                                      "or redirect it elsewhere\n"
    with monkeypatch.context() as m:
        m.setattr(sys, "stdout", None)
        m.setattr(sys, "argv", ["depthlab", "runs", "--store", str(store_copy)])
        with pytest.raises(SystemExit) as exit_info:
            main()
    assert exit_info.value.code == 2 and capsys.readouterr().err.startswith("error: stdout is closed")
    huge = write_run(tmp_path)
    huge.write_text(yaml.safe_dump({**RUN, "model": {"name": "transformer", "layers": 1, "width": 10**11}}))
    one_line_exit_2(run_depthlab("train", str(huge), "--store", str(tmp_path / "s")), "past PyTorch's size limit")


def test_the_cpu_allocator_running_out_is_out_of_memory_exit_2(tmp_path, monkeypatch):
    """With DEPTHLAB_MEMORY=off nothing is checked before it is allocated: PyTorch's allocator error (a
    RuntimeError) is out of memory, exit 2, like a MemoryError."""
    from depthlab.training import engine

    def refuse(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 4000000000000 bytes. Error code 12")

    monkeypatch.setattr(engine, "build_model", refuse)
    monkeypatch.setenv("DEPTHLAB_MEMORY", "off")
    one_line_exit_2(run_depthlab("train", str(write_run(tmp_path)), "--store", str(tmp_path / "s")),
                    "out of memory: can't allocate memory: you tried to allocate 4000000000000 bytes")


def test_every_output_path_is_checked_before_any_work(tmp_path, store_copy):
    """`capability … --figure out.exe` trained first and failed after."""
    (tmp_path / "gone").symlink_to(tmp_path / "nothing")
    (tmp_path / "a-file").write_text("x")
    cases = [(["capability", "memorization", "--figure", "out.exe", "--store", str(tmp_path / "s")],
              "--figure: out.exe must end in .png, .svg, .pdf"),
             (["reproduce", "seed001-depth", "--out", str(tmp_path / "a-file"), "--store", str(tmp_path / "s")],
              "is a file; give the path of a folder"),
             (["export", rid(run_config(0)), "--out", "/dev/null", "--store", str(store_copy)],
              "/dev/null is a character device"),
             (["report", "--out", str(tmp_path / "gone" / "r.html"), "--store", str(store_copy)],
              "which does not exist"),
             (["runs", "--format", "csv", "--out", str(tmp_path / "a-file" / "x.csv"), "--store", str(store_copy)],
              "is not a folder"),
             (["attention", rid(run_config(0)), "--out", "/dev/null", "--store", str(store_copy)],
              "/dev/null is a character device"),
             (["attention", rid(run_config(0)), "--out", "a.exe", "--store", str(store_copy)],
              "--out: a.exe must end in .png, .svg, .pdf"),
             (["atlas", "--out", str(tmp_path / "a-file"), "--store", str(tmp_path / "s")],
              "is a file; give the path of a folder")]
    for args, needle in cases:
        one_line_exit_2(run_depthlab(*args), needle)
    assert not (tmp_path / "s").exists()


def test_unclear_messages_now_say_what_is_wrong(tmp_path, monkeypatch, store_copy):
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("DEPTHLAB_STORE", str(tmp_path / "afile"))
    one_line_exit_2(run_depthlab("runs"), "$DEPTHLAB_STORE:", "is a file")
    monkeypatch.delenv("DEPTHLAB_STORE")
    dangling = tmp_path / "dangling"
    dangling.mkdir()
    (dangling / "artifacts").symlink_to(tmp_path / "nowhere")
    one_line_exit_2(run_depthlab("train", str(write_run(tmp_path)), "--store", str(dangling)),
                    "is a symlink to", "which does not exist")
    one_line_exit_2(run_depthlab("llm-bench", "--endpoint", "http://[::1", "--model-name", "m"),
                    "--endpoint: not a URL (Invalid IPv6 URL)")


def test_a_pickle_that_would_run_code_is_one_line_without_torchs_warnings(tmp_path):
    """torch printed three lines of UserWarning around the refusal (and advised weights_only=False)."""
    from depthlab.induction import tl

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    torch.save({"w": Evil()}, tmp_path / "model.pth", _use_new_zipfile_serialization=True)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(Exception) as info:
        warnings.simplefilter("always")
        tl._read_state(tmp_path)
    assert "is not a plain state dict" in str(info.value) and "weights_only=False" not in str(info.value)
    assert not caught


def test_a_run_another_process_trains_is_waited_for_not_trained_twice(store_copy):
    """Two `sweep --group-size 1` into one store at once: one deleted the other's temporary checkpoint (exit 2,
    `…tmp: No such file or directory`). A group now holds an exclusive lock on each of its runs' folders."""
    store = Store(store_copy)
    folder = store.run_folder(rid(run_config(0)))
    probe = os.open(folder, os.O_RDONLY)
    try:
        with hold_runs(store, [run_config(0)]), pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the group ends
    finally:
        os.close(probe)


def test_a_worker_process_holds_its_groups_runs_while_it_trains(monkeypatch, store_copy):
    """Groups spread over devices or workers (``sweeps.devices``) hold their runs as one process does: a second
    command training the same run waits. The worker's body runs here, its train_group probing the lock."""
    from depthlab.sweeps import devices
    from depthlab.training import engine

    folder = Store(store_copy).run_folder(rid(run_config(0)))

    def probe(configs, store):
        fd = os.open(folder, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        return {"probed": {}}

    monkeypatch.setattr(engine, "train_group", probe)
    monkeypatch.setattr(devices, "_DEVICE", "cpu")
    config = run_config(0)
    assert devices._train([config.to_dict()], devices._execution(config), str(store_copy)) == {"probed": {}}


def test_report_figures_are_read_bounded(tmp_path):
    """A gallery figure replaced by a link to /dev/zero, a FIFO or a file past the limit is named, not read."""
    from depthlab.report.sections import gallery

    (tmp_path / "zero.png").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.png")
    big = tmp_path / "big.png"
    with big.open("wb") as f:
        f.truncate(gallery.MAX_EMBEDDED_BYTES + 1)
    (tmp_path / "ok.png").write_bytes(b"\x89PNG")
    for name, needle in (("zero.png", "is a character device"), ("fifo.png", "is a FIFO"),
                         ("big.png", "more than the 8,000,000 bytes"), ("gone.png", "missing file")):
        html = gallery.embedded_png(str(tmp_path / name))
        assert needle in html and "base64" not in html, html
    assert "data:image/png;base64,iVBORw==" in gallery.embedded_png(str(tmp_path / "ok.png"))


def test_a_torch_state_dict_past_the_memory_budget_is_refused_before_torch_reads_it(tmp_path, monkeypatch):
    from depthlab.errors import ResourceError
    from depthlab.induction import tl

    torch.save({"w": torch.zeros(4096)}, tmp_path / "model.pth")
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load reached"))
    monkeypatch.setenv("DEPTHLAB_MEMORY", "16K")
    with pytest.raises(ResourceError, match=r"--model: .*model.pth needs about"):
        tl._read_state(tmp_path)


def test_bounded_helpers_refuse_with_one_line(tmp_path):
    with pytest.raises(BoundError, match="not valid YAML at line 2, column 1: duplicate key 'a'"):
        parse_yaml("a: 1\na: 2", "x")
    (tmp_path / "f").write_bytes(b"x" * 11)
    with pytest.raises(BoundError, match="has 11 bytes, more than the 10 bytes allowed"):
        read_file(tmp_path / "f", 10, "x")


def test_a_command_whose_later_group_cannot_fit_trains_nothing(tmp_path, monkeypatch):
    """Every group of a command is checked against the memory budget before the first one trains."""
    raw = {**RUN, "model": {"name": "transformer", "layers": 1}, "sweep": {"model.width": [8, 4096]}}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("DEPTHLAB_MEMORY", "64M")
    one_line_exit_2(run_depthlab("sweep", str(path), "--store", str(tmp_path / "s")), "memory: a run of memorization")
    assert not (tmp_path / "s").exists()  # refused before the store was created: the small group did not train
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump({**RUN, "model": {"name": "transformer", "layers": 1, "width": 4096}}))
    one_line_exit_2(run_depthlab("train", str(run_file), "--store", str(tmp_path / "t")), "memory: a run of")
    assert not (tmp_path / "t").exists()


def test_a_command_says_its_size_before_its_first_run(tmp_path, monkeypatch):
    """On a terminal: how many runs, groups and run-steps, and what the largest group needs, before any training."""
    import io

    from rich.console import Console

    from depthlab.cli import common
    from depthlab.memory import format_bytes
    from depthlab.sweeps import execute
    from depthlab.training.footprint import footprint

    configs = expand_sweep({**RUN, "model": {"name": "transformer", "layers": 1}, "sweep": {"model.width": [8, 64],
                                                                                            "seed": [0, 1, 2]}})
    seen = io.StringIO()
    monkeypatch.setattr(common, "console", Console(file=seen, force_terminal=True, color_system=None, width=200))
    monkeypatch.setattr(execute, "train_runs", lambda *args: seen.write("\ntraining\n") and {})
    common.run_sweep(configs, Store(tmp_path / "s"), None, quiet=False, description="sweep")
    peak = footprint(configs[-1]).total(3)  # the width-64 group of three seeds
    first, *rest = seen.getvalue().splitlines()
    assert first == f"6 runs in 2 groups (24 run-steps); the largest group needs about {format_bytes(peak)}", first
    assert "training" in rest
