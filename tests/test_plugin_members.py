"""Every member of a plugin task is checked, at load (the task built with its defaults) and at each use: the
failure names the plugin file, the task and the member (issue 47, item 5). Before, each case here was an internal
error, a traceback, a run recorded with a wrong result, or output that broke ``--json``."""

from __future__ import annotations

import json

import pytest

from conftest import run_depthlab
from depthlab import plugins
from depthlab.models import MODELS
from depthlab.tasks import TASKS

PLUGIN = '''
import numpy as np
from depthlab.tasks.base import Batch, Task, register, letter_names, number_names
{top}

@register
class Member(Task):
    name = "member_{kind}"
    section = "a test"
    summary = "a plugin task with one member out of its contract"
    eval_protocol = "exhaustive dataset"
    loss = {loss!r}
    vocab = property(lambda self: letter_names(4))
    labels = property(lambda self: {labels})
    seq_len = property(lambda self: {seq_len})
    chance = property(lambda self: {chance})

    def sample(self, n, rng, split="train"):
        {body}
        return Batch(x, y)

    def dataset_size(self, split="eval"):
        return {size}

    def enumerate(self, split="eval"):
        return self.sample({enumerated}, np.random.default_rng(0))
'''
GOOD = {"top": "", "labels": "number_names(4)", "loss": "cross_entropy", "seq_len": 3, "chance": 0.25, "size": 64,
        "enumerated": 64, "body": "x, y = rng.integers(0, 4, (n, 3)), rng.integers(0, 4, n)"}
TRAIN = {"model": {"name": "attention_only", "layers": 1}, "train": {"steps": 2, "eval_every": 2, "batch_size": 4}}

# kind: (what differs from GOOD, the command after --plugin FILE (train: a run file of the task), needle)
CASES = {
    "dataset-size-text": ({"size": "'64'"}, "sample", "task member_dataset-size-text: dataset_size is '64' (str); "
                                                      "it must be a whole number"),
    "seq-len-float": ({"seq_len": 3.5}, "sample", "seq_len is '3.5' (float); it must be a whole number"),
    "chance-text": ({"chance": "'0.25'"}, "sample", "chance is '0.25' (str); it must be a number from 0 to 1"),
    "chance-above-1": ({"chance": 1.5}, "sample", "chance is '1.5' (float); it must be a number from 0 to 1"),
    "unknown-loss": ({"loss": "hinge"}, "sample", "loss is 'hinge'; allowed: cross_entropy, mse, bce"),
    "torch-cpu": ({"top": "import torch", "body": "x, y = torch.randint(0, 4, (n, 3)), torch.randint(0, 4, (n,))"},
                  "sample", "sample returned inputs as a torch.Tensor, not a numpy array"),
    "torch-meta": ({"top": "import torch", "body": "x = torch.empty((n, 3), dtype=torch.long, device='meta'); "
                                                   "y = torch.empty((n,), dtype=torch.long, device='meta')"},
                   "sample", "sample returned inputs as a torch.Tensor, not a numpy array"),
    "regression-shape": ({"loss": "mse", "body": "x, y = rng.integers(0, 4, (n, 3)), rng.random(n)"}, "sample",
                         "sample returned targets of shape [2] (float64); a mse task needs numbers of shape [2, 4]"),
    # counted before each name is checked: it fails at once (it took 43 s, then the allocator refused 98 GB)
    "labels-3-million": ({"labels": "['0'] * 3_000_000"}, "sample", "labels has 3,000,000 names, more than the "
                                                                    "1,048,576 a task may have"),
    "enumerate-short": ({"enumerated": 5}, "train", "enumerate returned 5 examples, while dataset_size('eval') "
                                                    "says 64"),
}


@pytest.fixture(autouse=True)
def registries_as_they_were(monkeypatch):
    """The plugin files register tasks: the registries and $DEPTHLAB_PLUGINS are given back after each test."""
    monkeypatch.setenv(plugins.ENV, "")
    tasks, models, loaded = dict(TASKS), dict(MODELS), dict(plugins.LOADED)
    yield
    for registry, before in ((TASKS, tasks), (MODELS, models), (plugins.LOADED, loaded)):
        registry.clear()
        registry.update(before)


def plugin_file(tmp_path, kind: str, **changes) -> str:
    path = tmp_path / f"member_{kind.replace('-', '_')}.py"
    path.write_text(PLUGIN.format(kind=kind, **{**GOOD, **changes}))
    return str(path)


@pytest.mark.parametrize("kind", list(CASES))
def test_a_plugin_member_out_of_its_contract_names_the_file_the_task_and_the_member(tmp_path, kind):
    changes, command, needle = CASES[kind]
    plugin = plugin_file(tmp_path, kind, **changes)
    if command == "train":
        run = tmp_path / "run.yaml"
        run.write_text(json.dumps({**TRAIN, "task": {"name": f"member_{kind}"}}))
        args = ["train", str(run), "--store", str(tmp_path / "store")]
    else:
        args = ["sample", f"member_{kind}", "-n", "2"]
    code, out, err = run_depthlab("--plugin", plugin, *args)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, (code, err)
    assert lines[0].startswith(f"error: plugin {plugin}: task member_{kind}") and needle in lines[0], lines[0]


def test_a_keyboard_interrupt_raised_by_a_plugin_is_exit_130_naming_it(tmp_path):
    plugin = plugin_file(tmp_path, "interrupt", body="raise KeyboardInterrupt")
    code, out, err = run_depthlab("--plugin", plugin, "sample", "member_interrupt", "-n", "2")
    assert code == 130 and out == "", err
    assert err.strip() == f"interrupted: plugin {plugin}: task member_interrupt: sample was interrupted line 19", err


def test_a_plugin_that_writes_to_descriptor_1_or_forks_on_import_cannot_break_json(tmp_path, capfd):
    writes = plugin_file(tmp_path, "writes", top="import os\nos.write(1, b'from the plugin\\n')")
    code, out, err = run_depthlab("--plugin", writes, "tasks", "--json")
    descriptors = capfd.readouterr()
    assert code == 0 and len(out.splitlines()) == 1 and "member_writes" in out, err
    assert "from the plugin" not in descriptors.out and "from the plugin" in descriptors.err
    forks = plugin_file(tmp_path, "forks", top="import os, posix\npid = os.fork()\nif pid == 0:\n    posix._exit(0)\n"
                                                "os.waitpid(pid, 0)")
    code, out, err = run_depthlab("--plugin", forks, "tasks", "--json")
    assert code == 2 and out == "" and "Traceback" not in err, err
    assert err.startswith(f"error: --plugin {forks}: line 5: called os.fork()"), err


# each way a plugin could start a process whose output reaches depthlab's stdout: (code, what the line names);
# a child that does start exits at once (posix._exit: os._exit is refused in plugin code), as on main it did start
STARTS = {
    "posix.fork": ("import posix\npid = posix.fork()\nif pid == 0:\n    os.write(1, b'child')\n    posix._exit(0)\n"
                   "os.waitpid(pid, 0)", "called os.fork()"),  # posix.fork is os.fork
    "os.forkpty": ("import posix\npid, fd = os.forkpty()\nif pid == 0:\n    posix._exit(0)\nos.waitpid(pid, 0)",
                   "called os.forkpty()"),
    "os.system": ("os.system('echo child')", "called os.system()"),
    "os.posix_spawn": ("os.waitpid(os.posix_spawn('/bin/echo', ['echo', 'child'], os.environ), 0)",
                       "called os.posix_spawn()"),
    "subprocess": ("import subprocess\nsubprocess.run(['echo', 'child'])",
                   "started the process \"['echo', 'child']\" with depthlab's stdout as its own"),
    "multiprocessing": ("import multiprocessing\nprocess = multiprocessing.get_context('spawn').Process(target=print, "
                        "args=('child',))\nprocess.start()\nprocess.join()", "started a multiprocessing process"),
}


@pytest.mark.parametrize("where", ["import", "sample"])
@pytest.mark.parametrize("start", list(STARTS))
def test_a_plugin_that_starts_a_process_writing_to_stdout_is_refused_naming_it(tmp_path, capfd, start, where):
    """Only os.fork was refused: posix.fork, os.forkpty, a shell, a spawn, a subprocess or a multiprocessing
    child started on import or in a member broke ``--json`` or left a child writing to stdout. Each is one line
    naming the plugin file, exit 2, and no child writes to file descriptor 1."""
    code_text, needle = STARTS[start]
    kind = f"{start.replace('.', '-')}-{where}"
    if where == "import":
        plugin = plugin_file(tmp_path, kind, top="import os\n" + code_text)
        args, label = ["tasks", "--json"], f"error: --plugin {plugin}: line "
    else:
        body = "import os\n" + code_text + "\nx, y = rng.integers(0, 4, (n, 3)), rng.integers(0, 4, n)"
        plugin = plugin_file(tmp_path, kind, body=body.replace("\n", "\n        "))
        args, label = ["sample", f"member_{kind}", "-n", "2", "--json"], f"error: plugin {plugin}: task member_{kind}"
    code, out, err = run_depthlab("--plugin", plugin, *args)
    descriptors = capfd.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, (code, out, err)
    assert lines[0].startswith(label) and needle in lines[0], lines[0]
    assert "child" not in descriptors.out


def test_a_plugin_may_start_a_process_whose_stdout_is_its_own(tmp_path):
    """What the guard leaves alone: a subprocess whose output the plugin reads (or sends elsewhere)."""
    top = "import subprocess\nsaid = subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout"
    plugin = plugin_file(tmp_path, "captures", top=top)
    code, out, err = run_depthlab("--plugin", plugin, "tasks", "--json")
    assert code == 0 and "member_captures" in json.loads(out)["tasks"][-1]["name"] + out, err
