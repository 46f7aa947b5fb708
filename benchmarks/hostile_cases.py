"""Issue 32's hostile cases re-run by hand: each as a real `depthlab` process, its exit code and first stderr line.

    PYTHONPATH=src python benchmarks/hostile_cases.py [WORKDIR] [--only-issue-47]

Every case of the issue (unbounded reads, silently wrong results, someone else's problem reported as depthlab's,
unclear messages), set up in WORKDIR (default: a temporary folder) with tiny runs: a store with two trained runs
of one shape, plugin files, a store edited by hand, a chat-completions server on 127.0.0.1 (``tests/hostile_http``).
Prints each case, its exit code, the first line on stderr (or stdout when stderr is empty) and its wall time
(mostly importing torch). About 3 minutes of CPU in all (run it through /work/bin/heavy on a shared machine);
nothing allocates more than a few MB (``DEPTHLAB_MEMORY=off`` with ``model.width: 1e6`` asks the allocator for
terabytes, which it refuses at once).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from hostile_http import Answer, HostileServer

RUN = {"task": {"name": "memorization", "n_words": 4, "length": 2, "n_examples": 8},
       "model": {"name": "attention_only", "layers": 1},
       "train": {"steps": 4, "eval_every": 2, "batch_size": 8, "checkpoint_every": 2}}
TIMEOUT = 900  # seconds a case may take: most of it is importing torch, 10 to 40 s on a loaded machine
PLUGIN = Path(__file__).resolve().parents[1] / "tests" / "test_hostile.py"


def depthlab(*args: str, env: dict[str, str] | None = None, stdout=subprocess.PIPE, shell: str | None = None,
             timeout: float = TIMEOUT) -> tuple[int, str]:
    """Run ``depthlab ARGS`` (or a shell line) as its own process: (exit code, its first line of output)."""
    environ = {**os.environ, **(env or {})}
    command = shell if shell is not None else [sys.executable, "-m", "depthlab.cli", *args]
    started = time.perf_counter()
    done = subprocess.run(command, env=environ, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=timeout,
                          shell=shell is not None)
    lines = (done.stderr or "").strip().splitlines() or (done.stdout or "").strip().splitlines() or ["(no output)"]
    return done.returncode, f"{lines[0][:150]}  [{time.perf_counter() - started:.1f} s]"


def plugin_template() -> str:
    """The plugin task of tests/test_hostile.py, with ``{kind}`` and ``{body}`` (its sample) to fill in."""
    return PLUGIN.read_text().split("PLUGIN = '''")[1].split("'''")[0]


def write(path: Path, content: object) -> Path:
    path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
    return path


def run_id(store: Path, seed: int) -> str:
    with sqlite3.connect(store / "depthlab.sqlite") as conn:
        return next(r[0] for r in conn.execute("SELECT id, config FROM runs")
                    if f'"seed": {seed}' in r[1] or (seed == 0 and '"seed"' not in r[1]))


def cases(work: Path, only_issue_47: bool = False) -> list[tuple[str, tuple[int, str]]]:
    out: list[tuple[str, tuple[int, str]]] = []

    def case(name: str, result: tuple[int, str]) -> None:
        out.append((name, result))
        print(f"{name}\n    exit {result[0]}: {result[1]}", flush=True)

    trained = work / "trained"
    write(work / "two.yaml", {**RUN, "sweep": {"seed": [0, 1]}})
    assert depthlab("sweep", str(work / "two.yaml"), "--store", str(trained))[0] == 0
    a, b = run_id(trained, 0), run_id(trained, 1)

    def copy(name: str) -> Path:
        target = work / name
        shutil.copytree(trained, target)
        return target

    if only_issue_47:
        issue_47_outputs_secrets_waits(work, a, copy, case)
        issue_47_labels_and_processes(work, case)
        return out

    # unbounded reads
    zero = copy("zero")
    (zero / "artifacts" / a / "checkpoint.safetensors").unlink()
    (zero / "artifacts" / a / "checkpoint.safetensors").symlink_to("/dev/zero")
    case("export RUN, its checkpoint a symlink to /dev/zero", depthlab("export", a, "--store", str(zero)))
    case("train /dev/zero", depthlab("train", "/dev/zero", "--store", str(work / "s0")))
    grid = {**RUN, "sweep": {"seed": list(range(100)), "train.lr": [0.001 * i for i in range(1, 101)],
                             "train.steps": list(range(1, 101)), "train.batch_size": list(range(1, 101))}}
    case("sweep of 4 keys x 100 values", depthlab("sweep", str(write(work / "grid.yaml", grid)), "--store",
                                                  str(work / "s0")))
    with HostileServer() as server:
        bench = ["llm-bench", "--endpoint", server.url, "--model-name", "m", "--formulation", "functions", "-n", "1",
                 "--max-tries", "1", "--retries", "0"]
        server.answer = Answer(chunks=[b"[" * 200_000])
        case("endpoint answers 200,000 nested [", depthlab(*bench, "--store", str(work / "llm1")))
        server.answer = Answer(chunks=[b" "] * 40, pause=0.5)
        case("endpoint trickles 40 bytes over 20 s, --timeout 1 --retries 0",
             depthlab(*bench, "--timeout", "1", "--store", str(work / "llm2")))

    # silently wrong
    swapped = copy("swapped")
    for name in ("checkpoint.safetensors", "checkpoint.json"):
        shutil.copy(swapped / "artifacts" / b / name, swapped / "artifacts" / a / name)
    with sqlite3.connect(swapped / "depthlab.sqlite") as conn:
        conn.execute("UPDATE runs SET status = 'interrupted' WHERE id = ?", (a,))
    case("run B's checkpoint in run A's folder, A interrupted, sweep", depthlab("sweep", str(work / "two.yaml"),
                                                                               "--store", str(swapped)))
    layers = write(work / "layers.yaml", {**RUN, "sweep": {"model.layers": [1, 2]}})
    case("sweep (sweeps model.layers) --set model.layers=abc",
         depthlab("sweep", str(layers), "--set", "model.layers=abc", "--store", str(work / "s1")))
    case("reproduce seed001-depth --set model.layers=abc", depthlab("reproduce", "seed001-depth", "--set",
                                                                    "model.layers=abc", "--store", str(work / "s1")))
    empty = work / "empty"
    (empty / "artifacts").mkdir(parents=True)
    (empty / "depthlab.sqlite").write_bytes(b"")
    result = depthlab("runs", "--store", str(empty))
    case(f"a zero-byte depthlab.sqlite, runs (file still {(empty / 'depthlab.sqlite').stat().st_size} bytes)", result)
    negative = copy("negative")
    with sqlite3.connect(negative / "depthlab.sqlite") as conn:
        conn.execute("PRAGMA user_version = -5")
    case("PRAGMA user_version = -5, runs", depthlab("runs", "--store", str(negative)))

    # someone else's problem
    bodies = {"target-99": "x, y = rng.integers(0, 4, (n, 3)), np.full(n, 99)",
              "target-minus-1": "x, y = rng.integers(0, 4, (n, 3)), np.full(n, -1)",
              "width": "x, y = rng.integers(0, 4, (n, 4)), rng.integers(0, 4, n)",
              "empty-vocab": "x, y = rng.integers(0, 4, (n, 3)), rng.integers(0, 4, n)",
              "raises": "raise RuntimeError('boom')"}
    template = plugin_template()
    for kind, body in bodies.items():
        slug = kind.replace("-", "_")
        plugin = write(work / f"plugin_{slug}.py", template.format(kind=kind, body=body))
        config = write(work / f"plugin_{slug}.yaml", {**RUN, "task": {"name": f"hostile_{kind}"}})
        case(f"plugin task, sample: {kind}", depthlab("--plugin", str(plugin), "train", str(config), "--store",
                                                       str(work / "s2")))
    exits = write(work / "exits.py", "import os\nos._exit(0)\n")
    case("plugin calling os._exit(0)", depthlab("--plugin", str(exits), "tasks"))
    chatty = write(work / "chatty.py", "print('hello')" + template.format(kind="ok", body=bodies["width"]))
    done = subprocess.run([sys.executable, "-m", "depthlab.cli", "--plugin", str(chatty), "tasks", "--json"],
                          capture_output=True, text=True, timeout=TIMEOUT)
    case("plugin printing on import, tasks --json",
         (done.returncode, f"{len(done.stdout.strip().splitlines())} line on stdout; stderr: {done.stderr.strip()!r}"))
    for sql, what in (("DROP TABLE metrics", "table dropped"),
                      ("UPDATE runs SET config = '{not json' WHERE id = '{a}'", "config='{not json'"),
                      ("UPDATE runs SET final = '[1,2' WHERE id = '{a}'", "final='[1,2'"),
                      ("UPDATE metrics SET value = 'abc' WHERE run_id = '{a}'", "text in metrics.value")):
        damaged = copy(f"damaged-{len(out)}")
        with sqlite3.connect(damaged / "depthlab.sqlite") as conn:
            conn.execute(sql.replace("{a}", a))
        command = ["metrics", "--json"] if "metrics" in sql else ["runs", "--json"]
        case(f"store edited by hand ({what}), {' '.join(command)}", depthlab(*command, "--store", str(damaged)))
    wide = write(work / "wide.yaml", {**RUN, "model": {"name": "transformer", "layers": 1, "width": int(1e11)}})
    case("model.width: 1e11", depthlab("train", str(wide), "--store", str(work / "s3")))
    million = write(work / "million.yaml", {**RUN, "model": {"name": "transformer", "layers": 1, "width": 10**6}})
    case("DEPTHLAB_MEMORY=off, width 1e6", depthlab("train", str(million), "--store", str(work / "s3"),
                                                    env={"DEPTHLAB_MEMORY": "off"}))
    seed = write(work / "seed.yaml", yaml.safe_dump(RUN) + "seed: " + "9" * 5000 + "\n")
    case("a 5,000-digit seed", depthlab("train", str(seed), "--store", str(work / "s3")))
    case("--endpoint 'http://[::1'", depthlab("llm-bench", "--endpoint", "http://[::1", "--model-name", "m"))
    case("runs --json > /dev/full", depthlab(shell=f"{sys.executable} -m depthlab.cli runs --json --store {trained} "
                                                   f"> /dev/full"))
    case("tasks with stdout closed", depthlab(shell=f"{sys.executable} -m depthlab.cli tasks >&-"))
    case("capability memorization --figure out.exe", depthlab("capability", "memorization", "--figure", "out.exe",
                                                              "--store", str(work / "s4")))

    # unclear messages
    case("--set task.=3", depthlab("train", str(write(work / "run.yaml", RUN)), "--set", "task.=3", "--store",
                                   str(work / "s5")))
    write(work / "afile", "x")
    case("DEPTHLAB_STORE=afile (a file), runs", depthlab("runs", env={"DEPTHLAB_STORE": str(work / "afile")}))
    dangling = work / "dangling"
    dangling.mkdir()
    (dangling / "artifacts").symlink_to(work / "nowhere")
    case("a store whose artifacts/ is a dangling symlink, train", depthlab("train", str(work / "run.yaml"), "--store",
                                                                           str(dangling)))
    case("--store a file, train", depthlab("train", str(work / "run.yaml"), "--store", str(work / "afile")))
    race = write(work / "race.yaml", {**RUN, "train": {**RUN["train"], "steps": 200}, "sweep": {"seed": [0, 1, 2]}})
    command = [sys.executable, "-m", "depthlab.cli", "sweep", str(race), "--group-size", "1", "--store",
               str(work / "race"), "--json"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    first.communicate(timeout=TIMEOUT)
    with sqlite3.connect(work / "race" / "depthlab.sqlite") as conn:
        statuses = sorted(r[0] for r in conn.execute("SELECT status FROM runs"))
    case("two sweep --group-size 1 into one store at once",
         (max(first.returncode, second.returncode), f"exits {first.returncode} and {second.returncode}; runs "
                                                    f"{', '.join(statuses)}; stderr: {second.stderr.strip()[:60]!r}"))
    evil = work / "evil"
    evil.mkdir()
    write(evil / "config.json", '{"n_layers": 1, "d_model": 8, "n_ctx": 8, "d_head": 4, "n_heads": 2, '
                                '"d_vocab": 10, "act_fn": "relu", "attn_only": true}')
    subprocess.run([sys.executable, "-c", "import os, torch\nclass E:\n    def __reduce__(self):\n"
                    "        return (os.system, ('echo pwned',))\n"
                    f"torch.save({{'w': E()}}, {str(evil / 'model.pth')!r})"], check=True)
    case("induction --model FOLDER holding a pickle that runs code", depthlab("induction", "--model", str(evil)))
    nomodel = write(work / "nomodel.yaml", {k: v for k, v in RUN.items() if k != "model"})
    case("train nomodel.yaml --set model.layers=2", depthlab("train", str(nomodel), "--set", "model.layers=2",
                                                             "--store", str(work / "s6"), "--json"))

    # issue 47, items 4 and 5 (i47b): damaged rows and plugin members named, never internal
    rows = {"runs.id NULL, runs": ("UPDATE runs SET id = NULL WHERE id = '{a}'", ["runs"]),
            "runs.id NULL, metrics PREFIX": ("UPDATE runs SET id = NULL WHERE id = '{a}'", ["metrics", "{b6}"]),
            "metrics.name NULL, report": ("UPDATE metrics SET name = NULL WHERE run_id = '{a}'",
                                          ["report", "--examples", "0", "--out", str(work / "r47.html")]),
            "final accuracy text, runs": ("UPDATE runs SET final = json_set(final, '$.accuracy', 'high') "
                                          "WHERE id = '{a}'", ["runs"]),
            "final chance text, report": ("UPDATE runs SET final = json_set(final, '$.chance', 'a quarter') "
                                          "WHERE id = '{a}'", ["report", "--examples", "0", "--out",
                                                               str(work / "r47.html")]),
            'config {"task": 5}, runs': ("UPDATE runs SET config = json_set(config, '$.task', 5) WHERE id = '{a}'",
                                         ["runs"]),
            'layers "abc", report': ("UPDATE runs SET config = json_set(config, '$.model.layers', 'abc') "
                                     "WHERE id = '{a}'", ["report", "--examples", "0", "--out",
                                                          str(work / "r47.html")]),
            "a trigger deleting runs, sweep": ("CREATE TRIGGER gone AFTER INSERT ON runs BEGIN DELETE FROM runs "
                                               "WHERE id = NEW.id; END", ["sweep", str(layers)])}
    for what, (sql, command) in rows.items():
        damaged = copy(f"rows47-{len(out)}")
        with sqlite3.connect(damaged / "depthlab.sqlite") as conn:
            conn.execute(sql.replace("{a}", a))
        case(f"store edited by hand ({what})",
             depthlab(*[c.replace("{b6}", b[:6]) for c in command], "--store", str(damaged)))
    members = {"dataset_size returning a string": ("dataset_size = lambda self, split='eval': '64'", ["tasks"]),
               "seq_len 3.5": ("seq_len = property(lambda self: 3.5)", ["tasks"]),
               "chance as text": ("chance = property(lambda self: '0.25')", ["tasks"]),
               "an unknown loss": ("loss = 'hinge'", ["tasks"]),
               "torch tensors (CPU) from sample": (
                   "sample = lambda self, n, rng, split='train': __import__('depthlab').tasks.base.Batch("
                   "__import__('torch').zeros((n, 3), dtype=__import__('torch').long), "
                   "__import__('torch').zeros(n, dtype=__import__('torch').long))", ["sample", "-n", "2"]),
               "torch tensors (meta) from sample": (
                   "sample = lambda self, n, rng, split='train': __import__('depthlab').tasks.base.Batch("
                   "__import__('torch').empty((n, 3), device='meta'), __import__('torch').empty(n, device='meta'))",
                   ["sample", "-n", "2"]),
               "regression targets of the wrong shape": (
                   "loss = 'mse'\n    sample = lambda self, n, rng, split='train': __import__('depthlab').tasks.base"
                   ".Batch(rng.integers(0, 4, (n, 3)), rng.random(n))", ["sample", "-n", "2"]),
               "KeyboardInterrupt in sample": (
                   "def sample(self, n, rng, split='train'):\n        raise KeyboardInterrupt", ["sample", "-n", "2"]),
               "enumerate 5 examples, dataset_size 64": (
                   "dataset_size = lambda self, split='eval': 64\n    enumerate = lambda self, split='eval': "
                   "self.sample(5, __import__('numpy').random.default_rng(0))", ["train"])}
    for what, (member, command) in members.items():
        slug = f"member47_{len(out)}"
        source = template.format(kind=slug, body=bodies["width"].replace("(n, 4)", "(n, 3)"))
        plugin = write(work / f"{slug}.py", f"{source}    {member}\n")
        args = [*command[:1], f"hostile_{slug}", *command[1:]] if command[0] == "sample" else command
        if command == ["train"]:
            args = ["train", str(write(work / f"{slug}.yaml", {**RUN, "task": {"name": f"hostile_{slug}"}})),
                    "--store", str(work / "s47")]
        case(f"plugin task: {what}, {command[0]}", depthlab("--plugin", str(plugin), *args))
    for what, top in (("os.write(1, …) on import", "import os\nos.write(1, b'from the plugin\\n')\n"),
                      ("os.fork() on import", "import os\nif os.fork() == 0:\n    print('child')\n")):
        plugin = write(work / f"top47_{len(out)}.py", top + template.format(kind=f"top{len(out)}",
                                                                           body=bodies["target-99"]))
        done = subprocess.run([sys.executable, "-m", "depthlab.cli", "--plugin", str(plugin), "tasks", "--json"],
                              capture_output=True, text=True, timeout=TIMEOUT)
        case(f"plugin {what}, tasks --json", (done.returncode, f"{len(done.stdout.strip().splitlines())} line(s) on "
                                                               f"stdout; stderr: {done.stderr.strip()[:90]!r}"))
    # end of issue 47, items 4 and 5
    issue_47_outputs_secrets_waits(work, a, copy, case)
    issue_47_labels_and_processes(work, case)
    return out


def issue_47_labels_and_processes(work: Path, case) -> None:
    """Issue 47's last plugin cases (i47c): a vocabulary of 3,000,000 labels, and every way plugin code could start
    a process writing to depthlab's stdout, each on import (``tasks --json``) or in ``sample``."""
    sample = "x, y = rng.integers(0, 4, (n, 3)), rng.integers(0, 4, n)"
    labels = write(work / "labels47.py", plugin_template().format(kind="labels47", body=sample)
                   .replace("number_names(4)", "number_names(3_000_000)"))
    run = write(work / "labels47.yaml", {**RUN, "task": {"name": "hostile_labels47"}})
    case("plugin task with 3,000,000 labels, train", depthlab("--plugin", str(labels), "train", str(run), "--store",
                                                              str(work / "s47c")))
    starts = {"posix.fork() on import": "import posix\nif posix.fork() == 0:\n    print('child')\n",
              "os.forkpty() on import": "import os\nif os.forkpty()[0] == 0:\n    print('child')\n",
              "os.system('echo child') on import": "import os\nos.system('echo child')\n",
              "a multiprocessing (spawn) process on import": (
                  "import multiprocessing\nmultiprocessing.get_context('spawn').Process(target=print, "
                  "args=('child',)).start()\n"),
              "subprocess.run(['echo', 'child']) on import": "import subprocess\nsubprocess.run(['echo', 'child'])\n"}
    for i, (what, top) in enumerate(starts.items()):
        plugin = write(work / f"start47_{i}.py", top + plugin_template().format(kind=f"s47_{i}", body=sample))
        done = subprocess.run([sys.executable, "-m", "depthlab.cli", "--plugin", str(plugin), "tasks", "--json"],
                              capture_output=True, text=True, timeout=TIMEOUT)
        case(f"plugin {what}, tasks --json", (done.returncode, f"{len(done.stdout.strip().splitlines())} line(s) on "
                                                               f"stdout; stderr: {done.stderr.strip()[:150]!r}"))
    body = "import subprocess; subprocess.run(['echo', 'child']); " + sample
    plugin = write(work / "start47_sample.py", plugin_template().format(kind="s47sample", body=body))
    done = subprocess.run([sys.executable, "-m", "depthlab.cli", "--plugin", str(plugin), "sample", "hostile_s47sample",
                           "-n", "2", "--json"], capture_output=True, text=True, timeout=TIMEOUT)
    case("plugin running subprocess.run(['echo', 'child']) in sample, sample --json",
         (done.returncode, f"{len(done.stdout.strip().splitlines())} line(s) on stdout; stderr: "
                           f"{done.stderr.strip()[:150]!r}"))


# --------------------------------------------------------------- issue 47 items 1, 2, 3, 6: outputs, secrets, waits

KEY = "sk-abc123XYZ"  # the API key of these cases; the check below looks for it in every form (depthlab.secrets)


def leaked(text: str) -> str:
    from depthlab.secrets import forms

    found = sorted(form for form in forms(KEY) if form.lower() in text.lower())
    found += ["percent-decoded"] * (KEY in urllib.parse.unquote(text))
    return f"KEY LEAKED ({found[0]!r})" if found else "no form of the key"


def issue_47_outputs_secrets_waits(work: Path, a: str, copy, case) -> None:
    """Issue 47's cases of items 1, 2, 3 and 6, each as a process: (exit code, first line)."""
    # outputs over what a command reads or owns
    for command in (["report"], ["runs", "--format", "csv"], ["metrics", "--format", "json"]):
        store = copy(f"owned-{command[0]}")
        result = depthlab(*command, "--store", str(store), "--out", str(store / "depthlab.sqlite"))
        intact = sqlite3.connect(store / "depthlab.sqlite").execute("PRAGMA integrity_check").fetchone()[0]
        case(f"{' '.join(command)} --store S --out S/depthlab.sqlite (then integrity_check: {intact})", result)
    store = copy("owned-checkpoint")
    case("metrics --store S --out S/artifacts/RUN/checkpoint.safetensors",
         depthlab("metrics", "--store", str(store), "--out", str(store / "artifacts" / a / "checkpoint.safetensors")))

    # secrets
    with HostileServer() as server:
        bench = ["llm-bench", "--endpoint", server.url, "--model-name", "m", "--formulation", "functions", "-n", "1",
                 "--max-tries", "1", "--api-key-env", "HOSTILE_KEY"]
        for key, what in ((KEY + "\r\nX-Evil: 1", "holding \\r\\n"), ("sk-clé", "non-ASCII")):
            code, line = depthlab(*bench, "--store", str(work / "k1"), env={"HOSTILE_KEY": key})
            case(f"llm-bench, an API key {what} ({leaked(line)} on stderr)", (code, line))
        server.answer = Answer(status=401, chunks=[f"bad key {KEY}, as %-encoded {KEY.replace('-', '%2D')}".encode()])
        code, line = depthlab(*bench, "--retries", "0", "--store", str(work / "k2"), env={"HOSTILE_KEY": KEY})
        with sqlite3.connect(work / "k2" / "depthlab.sqlite") as conn:
            stored = " ".join(str(r[0]) for r in conn.execute("SELECT error FROM runs"))
        case(f"llm-bench, a server echoing the key in a 401 ({leaked(line)} on stderr, {leaked(stored)} in "
             f"runs.error)", (code, line))

        # waits: Retry-After under --timeout 3
        for header in ({"Retry-After": "99999"}, {"Retry-After": "Fri, 01 Jan 2100 00:00:00 GMT"},
                       {"retry-after-ms": "inf"}):
            server.answer = Answer(status=429, headers=header)
            name, value = next(iter(header.items()))
            case(f"endpoint answers 429 with {name}: {value}, --timeout 3",
                 depthlab(*bench, "--timeout", "3", "--retries", "2", "--store", str(work / "k3")))
        case("llm-bench --timeout inf", depthlab(*bench, "--timeout", "inf", "--store", str(work / "k4")))
    case("bench --runs 1000000", depthlab("bench", "--runs", "1000000"))
    endless = copy("endless")
    with sqlite3.connect(endless / "depthlab.sqlite") as conn:
        conn.execute("DROP TABLE metrics")
        conn.execute("CREATE VIEW metrics AS WITH RECURSIVE r(run_id, step, split, name, value) AS (SELECT 'a', 0, "
                     "'eval', 'accuracy', 1.0 UNION ALL SELECT run_id, step + 1, split, name, value FROM r) "
                     "SELECT * FROM r")
    for command in (["metrics"], ["report", "--out", str(work / "endless.html")]):
        case(f"a store whose metrics is an endless recursive view, {command[0]}",
             depthlab(*command, "--store", str(endless), timeout=120))
    sample = "x, y = rng.integers(0, 4, (n, 3)), rng.integers(0, 4, n)"
    sleeper = write(work / "sleeper.py", "import threading, time\n"
                    "threading.Thread(target=time.sleep, args=(120,)).start()\n"
                    + plugin_template().format(kind="ok", body=sample))
    case("a plugin starting a non-daemon thread of 120 s, tasks --json (the wall time below)",
         depthlab("--plugin", str(sleeper), "tasks", "--json"))

    # the environment and the messages
    case("DEPTHLAB_STORE='~nosuchuser/x' runs", depthlab("runs", env={"DEPTHLAB_STORE": "~nosuchuser/x"}))
    (work / "loop-a.py").symlink_to(work / "loop-b.py")
    (work / "loop-b.py").symlink_to(work / "loop-a.py")
    case("--plugin on a symlink loop", depthlab("--plugin", str(work / "loop-a.py"), "tasks"))
    case("PYTHONIOENCODING=ascii tasks (non-ASCII summaries)", depthlab("tasks", env={"PYTHONIOENCODING": "ascii"}))
    code, line = depthlab("tasks", env={"COLUMNS": "0"})
    case("COLUMNS=0 tasks (the first line of stdout)", (code, line))
    case("atlas --finished-only --store TYPO", depthlab("atlas", "--finished-only", "--store", str(work / "TYPO")))
    case("construct seed003-nearest-neighbor --set gamma=1e-308",
         depthlab("construct", "seed003-nearest-neighbor", "--set", "gamma=1e-308"))
    for cap, store_size in (("8000000", ""), ("4000000", ""), ("4000000", "DEPTHLAB_RAY_OBJECT_STORE=512MiB ")):
        # 4 GB: Ray's default object store (30 % of the available memory) does not fit; its raylet died mapping it
        # and ray.init waited 30 s, then an internal error (exit 1); with 512MiB the same sweep runs
        case(f"{store_size}sweep --executor ray under a {int(cap) // 10**6} GB address-space cap (ulimit -v {cap})",
             depthlab(shell=f"ulimit -v {cap}; {store_size}{sys.executable} -m depthlab.cli sweep {work / 'two.yaml'} "
                            f"--executor ray --store {work / f'ray-{cap}-{bool(store_size)}'}", timeout=300))


def main() -> None:
    args = [arg for arg in sys.argv[1:] if arg != "--only-issue-47"]
    work = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="hostile-"))
    work.mkdir(parents=True, exist_ok=True)
    cases(work, only_issue_47="--only-issue-47" in sys.argv[1:])


if __name__ == "__main__":
    main()
