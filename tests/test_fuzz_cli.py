"""Property-based fuzz of the real command line: generated argument lists and files through ``depthlab.cli.main``.

Each case runs ``depthlab ARGS`` in this process through its entry point (so through its error boundary) and
must exit with 0 or 2, print no traceback, and under ``--json`` print at most one line on stdout. Arguments are
drawn from the real commands' option names (read from the app) and values of every kind: small and huge
numbers, negative ones, text, odd characters, paths to missing, unwritable, binary and garbage files; files are
generated YAML (a tiny valid run mutated field by field) or random bytes; stores are missing, a file, a folder
of garbage, empty, or one holding a trained run. Commands are chosen so that a case fails fast or costs little:
a valid run trains at most a few steps of a tiny model, sizes are checked against a 2 GiB budget, the endpoint
of ``llm-bench`` refuses connections and retries do not wait. Two tests are hostile on purpose (issue 32): files
that are random bytes, YAML nested thousands deep or exploding through aliases, files past the size limits and
special files (``/dev/zero``, a FIFO, symlinks to them, a folder, a dangling symlink) given as a config, a plugin,
a circuit, a store's database and a run's checkpoint (export, attention); and a chat-completions server on
127.0.0.1 answering ``llm-bench`` with generated statuses, bodies (random bytes, deep JSON, wrong shapes, past the
size cap), compression headers and trickles. Hypothesis is derandomized: the same cases every run
(``DEPTHLAB_CLI_FUZZ_EXAMPLES`` changes how many; with it set, they are random).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
import typer
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_depthlab
from depthlab import plugins
from depthlab.cli import app
from depthlab.config import parse_run
from depthlab.llm import runners
from depthlab.store import Store
from depthlab.tasks import TASKS
from hostile_http import Answer, HostileServer

EXAMPLES = int(os.environ.get("DEPTHLAB_CLI_FUZZ_EXAMPLES", 100))  # per test; 8 tests
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
                derandomize="DEPTHLAB_CLI_FUZZ_EXAMPLES" not in os.environ, database=None)
BUDGET = "2GiB"  # DEPTHLAB_MEMORY during the fuzz: what cannot fit in it is refused, nothing big is allocated


def options_of(command: typer.main.TyperGroup, name: str) -> list[str]:
    """Every option name of ``depthlab NAME`` (``analyze attention`` for a subcommand), as the app declares it."""
    for part in name.split():
        command = command.commands[part]
    return sorted({o for p in command.params for o in p.opts if o.startswith("-")})


ROOT = typer.main.get_command(app)
OPTIONS = {name: options_of(ROOT, name) for name in (
    "tasks", "sample", "runs", "report", "export", "train", "sweep", "construct", "llm-prompts", "llm-bench",
    "reproduce", "induction", "attention", "analyze attention", "analyze ablate", "analyze circuit",
    "analyze emergence", "atlas")}
OPTIONS["induction"].remove("--model")  # a TransformerLens model: importing transformer_lens alone takes seconds
for slow in ("--executor", "--address", "--plan-seconds"):  # starting Ray; training to time the plan
    OPTIONS["atlas"].remove(slow)

small = st.integers(-3, 20).map(str)
huge = st.sampled_from([10**9, 10**12, 2**63, 10**40, -(10**12)]).map(str)
odd = st.sampled_from(["", " ", "-", "--", "=", "nan", "inf", "1e309", "0x10", "1_000", "½", "\udcff", "a b",
                       "k=", "=3", "task.k=", "${HOME}", "../..", "/", "/proc/none", "\t", "'", '"', "[", "{a: 1"])
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
values = small | huge | odd | text
field_names = sorted({f for cls in TASKS.values() for f in cls.model_fields})
sets = st.builds(lambda k, v: f"{k}={v}", st.sampled_from([*field_names, "task.k", "model.layers", "model.width",
                                                           "train.lr", "nope", "k.x"]) | text, values)


def command_args(name: str, positional: st.SearchStrategy | None = None) -> st.SearchStrategy:
    """``NAME [POSITIONAL] [--option value | --flag]…`` with the command's own options (and a few foreign ones)."""
    options = st.sampled_from([*OPTIONS[name], "--json", "--json", "--bogus", "-x"])
    pair = st.tuples(options, values | st.sampled_from(["--json", "--store"])).map(list)
    flag = options.map(lambda o: [o])
    head = st.just(name.split()) if positional is None else st.tuples(st.just(name.split()), positional).map(
        lambda t: [*t[0], t[1]])
    return st.tuples(head, st.lists(pair | flag, max_size=4)).map(lambda t: t[0] + [x for part in t[1] for x in part])


def asks_for_json(args: list[str]) -> bool:
    """Whether the command line sets ``--json`` as its parser reads it (in ``--store --json`` it is a path)."""
    command, rest = ROOT, list(args)
    while rest and rest[0] in getattr(command, "commands", {}):
        command = command.commands[rest.pop(0)]
    try:
        context = command.make_context("depthlab", rest, resilient_parsing=True)
    except Exception:  # a usage error: nothing reaches stdout
        return False
    return bool(context.params.get("json_out"))


def check(args: list[str]) -> None:
    code, out, err = run_depthlab(*args)
    assert code in (0, 2), (args, code, err)
    assert "Traceback" not in err, (args, err)
    if asks_for_json(args) and "--help" not in args:  # --help prints help, whatever else is asked
        assert len(out.strip().splitlines()) <= 1, (args, out)


BASE_RUNS = [  # tiny valid runs that the generated files mutate
    {"task": {"name": "memorization", "n_words": 4, "length": 2, "n_examples": 8},
     "model": {"name": "attention_only", "layers": 1}, "train": {"steps": 2, "eval_every": 1, "batch_size": 8}},
    {"task": {"name": "icqa", "k": 2, "n_q": 4, "n_a": 4}, "model": {"name": "transformer", "layers": 1, "width": 8},
     "train": {"steps": 1, "batch_size": 4, "eval_examples": 16}, "seed": 3},
]
TRAINED = Store.run_id(parse_run(BASE_RUNS[0]).to_dict())  # the run in the store "trained"
STORES = ["trained", "empty", "missing", "a-file", "garbage"]  # folders of the sandbox (see ``world``)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Stores of every kind (one holds a trained run) in a folder each case starts in."""
    root = tmp_path_factory.mktemp("fuzz")
    (root / "run.yaml").write_text(yaml.safe_dump(BASE_RUNS[0]))
    code, _, err = run_depthlab("train", str(root / "run.yaml"), "--store", str(root / "trained"), "--json")
    assert code == 0, err
    with Store(root / "trained") as store:
        assert [r["id"] for r in store.find_runs()] == [TRAINED]
    Store(root / "empty").close()
    (root / "a-file").write_text("not a store")
    (root / "garbage").mkdir()
    (root / "garbage" / "depthlab.db").write_bytes(bytes(range(256)) * 16)
    (root / "cases").mkdir()
    return root


@functools.cache
def installed_entry_points(group: str) -> tuple:
    """The entry points of ``group``, read once: scanning the installed packages took 0.1 s of every case."""
    return tuple(importlib.metadata.entry_points(group=group))


@pytest.fixture
def sandbox(world, monkeypatch):
    """Each case starts from the same state: the cwd, $DEPTHLAB_STORE, the memory budget, no plugins, the task
    registry as it was, retries that do not wait; files the case needs are written into ``cases/``. The installed
    entry points are read once per module (they cannot change between cases)."""
    monkeypatch.chdir(world)
    monkeypatch.setattr(runners, "_sleep", lambda seconds: None)
    monkeypatch.setattr(plugins, "entry_points", lambda group: installed_entry_points(group))
    tasks, environment = dict(TASKS), dict(os.environ)

    def reset(files: dict[str, bytes] | None = None) -> None:
        os.environ.clear()
        os.environ.update({**environment, "DEPTHLAB_STORE": str(world / "default-store"), "DEPTHLAB_MEMORY": BUDGET,
                           "DEPTHLAB_PLUGINS": ""})
        TASKS.clear()
        TASKS.update(tasks)
        for name, content in (files or {}).items():
            (world / "cases" / name).write_bytes(content)

    yield reset
    reset()
    os.environ.clear()
    os.environ.update(environment)


MUTABLE = ["task.name", "task.k", "task.n_q", "task.n_a", "task.n_words", "task.length", "task.n_examples",
           "task.bogus", "model.name", "model.layers", "model.width", "model.heads", "model.init", "train.lr",
           "train.batch_size", "train.optimizer", "train.eval_examples", "train.checkpoint_every", "seed", "extra",
           "task", "model", "train"]


def mutate(base: dict, changes: list[tuple[str, object]]) -> dict:
    raw = yaml.safe_load(yaml.safe_dump(base))
    for dotted, value in changes:
        node, *path = dotted.split(".")
        if not path:
            raw[node] = value
        elif isinstance(raw.get(node), dict):
            raw[node][path[0]] = value
    return raw


yaml_values = (st.integers(-3, 12) | st.sampled_from([10**9, 10**15, 2**63, 0.5, -1.5, True, None, "relu", "", [],
                                                      {}, [1, 2], {"a": 1}, "icqa", "mlp", "sgd"]) | text)
run_files = st.one_of(
    st.builds(lambda i, changes: yaml.safe_dump(mutate(BASE_RUNS[i], changes), allow_unicode=True).encode(),
              st.integers(0, 1), st.lists(st.tuples(st.sampled_from(MUTABLE), yaml_values), max_size=3)),
    st.binary(max_size=64),
    st.sampled_from([b"", b"task: [", b"- 1", b"task: {name: icqa}\ntask: {name: icqa}", b"\xff\xfe", b"a: \x00",
                     b"task: &a [*a]", b"sweep: {seed: [0, 1]}\ntask: {name: memorization, n_examples: 4}"]),
    text.map(str.encode),
)
stores = st.sampled_from(STORES)
run_ids = st.sampled_from([TRAINED, TRAINED[:3], "", "0", "zz"]) | text
READING = st.tuples(st.one_of(
    command_args("tasks"),
    command_args("sample", st.sampled_from(sorted(TASKS)) | text),
    command_args("runs"),
    command_args("report").map(lambda a: [*a, "--out", "cases/report.html"]),
    command_args("export", run_ids),
    command_args("attention", run_ids),
    *(command_args(f"analyze {what}", run_ids) for what in ("attention", "ablate", "circuit", "emergence")),
    command_args("induction"),
), st.lists(stores, max_size=1)).map(lambda t: t[0] + [x for store in t[1] for x in ("--store", store)])


def training_case(command: str, content: bytes, overrides: list[str], extra: list[str]) -> tuple[list, dict]:
    grid = ["--set", "sweep.seed=[0, 1]"] if command == "sweep" else []
    return [command, "cases/run.yaml", *[x for o in overrides for x in ("--set", o)], *extra, *grid], \
        {"run.yaml": content}


TRAINING = st.builds(training_case, st.sampled_from(["train", "train", "train", "sweep"]), run_files,
                     st.lists(sets, max_size=2),
                     st.sampled_from([[], ["--json"], ["--store", "s"], ["--group-size", "0"], ["--bogus"]]))
formulations = st.sampled_from(["equations", "lives-with", "kingdoms", "functions", "relatives"]) | text
OTHERS = st.one_of(
    command_args("construct", st.sampled_from(["--list", "bogus"])),
    command_args("llm-prompts", formulations),
    command_args("llm-bench").map(lambda a: [*a, "--endpoint", "http://127.0.0.1:9/v1", "--model-name", "m",
                                             "--retries", "1", "--timeout", "0.5", "--formulation", "functions",
                                             "-n", "1"]),
    command_args("llm-bench"),
    st.tuples(st.sampled_from(["seed001-depth", "nope", ""]) | text, odd | text).map(
        lambda t: ["reproduce", t[0], "--scale", f"x{t[1]}"]),
    st.lists(values | st.sampled_from(["--help", "--json", "analyze", "bogus"]), max_size=3),
)
plugin_files = st.binary(max_size=40) | text.map(str.encode) | st.sampled_from([
    b"import depthlab\n", b"raise SystemExit(3)\n", b"import sys; sys.exit()\n", b"1/0\n",
    b"from depthlab.tasks.base import register\n@register\nclass T: name = 'x'\n"])
ROOT_OPTIONS = st.builds(
    lambda plugin, content, memory, order, tail: (
        [x for part in order for x in (["--plugin", plugin] if part == "plugin" else ["--memory", memory])] + tail,
        {"plugin.py": content}),
    st.sampled_from(["cases/plugin.py", "cases/plugin.py", "missing.py", ".", "/", "a-file"]), plugin_files,
    st.sampled_from(["1K", "2G", "0", "-1G", "lots", "1.5T", "3e9", ""]) | text,
    st.lists(st.sampled_from(["plugin", "memory"]), max_size=2),
    st.sampled_from([["tasks", "--json"], ["sample", "icqa", "-n", "3"], ["runs", "--json"]]))


@given(READING)
@FUZZ
def test_reading_commands(sandbox, args):
    """tasks, sample, runs, report, export, attention, analyze and induction, against every kind of store."""
    sandbox()
    check(args)


@given(TRAINING)
@FUZZ
def test_training_commands_with_generated_files(sandbox, case):
    """train and sweep with generated run files (valid ones train a few steps), --set overrides, stores."""
    args, files = case
    sandbox(files)
    check(args)


@given(OTHERS)
@FUZZ
def test_other_commands(sandbox, args):
    """construct --list, llm-prompts, llm-bench (validation, and an endpoint that refuses connections),
    reproduce, unknown commands, --help."""
    sandbox()
    check(args)


@given(ROOT_OPTIONS)
@FUZZ
def test_root_options_and_plugin_files(sandbox, case):
    """--memory and --plugin (missing paths, folders, generated Python text and bytes) before a cheap command."""
    args, files = case
    sandbox(files)
    check(args)


# ------------------------------------------------------------------------------------- hostile inputs (issue 32)


def deep_yaml(depth: int, flow: bool) -> bytes:
    if flow:
        return ("task: " + "[" * depth + "]" * depth).encode()
    return ("task:\n" + "".join(" " * i + "- a:\n" for i in range(1, depth))).encode()


def laughs(fan: int, levels: int) -> bytes:
    lines = [f"a0: &a0 [{', '.join(['x'] * fan)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fan)}]" for i in range(1, levels)]
    return ("\n".join(lines) + "\ntask: *a" + str(levels - 1) + "\n").encode()


hostile_bytes = st.one_of(
    st.binary(max_size=256),
    st.builds(deep_yaml, st.integers(1, 3000), st.booleans()),
    st.builds(laughs, st.integers(2, 12), st.integers(2, 9)),
    st.builds(lambda n, tail: b"#" * n + tail, st.sampled_from([(1 << 20) - 8, (1 << 20) + 1]), st.binary(max_size=8)),
    st.builds(lambda digits: f"seed: {'9' * digits}\n".encode(), st.integers(4000, 6000)),
    run_files,
)
SPECIAL = ["/dev/zero", "fifo", "to-zero", "folder", "dangling"]  # special files a path may name
HOSTILE_USES = ["config", "sweep", "plugin", "circuit", "database", "checkpoint", "attention"]


def place(world: Path, content: bytes | str, use: str) -> Path:
    """The hostile file (bytes, or one of SPECIAL) where ``use`` reads it; returns the path to give."""
    cases = world / "cases"
    target = cases / ("hostile.py" if use == "plugin" else "hostile.yaml")
    if use in ("database", "checkpoint", "attention"):
        store = cases / "hostile-store"
        if store.exists():
            shutil.rmtree(store)
        shutil.copytree(world / "trained", store)
        target = store / ("depthlab.sqlite" if use == "database" else f"artifacts/{TRAINED}/checkpoint.safetensors")
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.is_symlink() or target.exists():  # a file, a FIFO (writing to one would wait for a reader)
        target.unlink()
    if isinstance(content, bytes):
        target.write_bytes(content)
    elif content == "/dev/zero" and use not in ("database", "checkpoint", "attention"):
        return Path("/dev/zero")
    elif content in ("/dev/zero", "to-zero"):
        target.symlink_to("/dev/zero")
    elif content == "fifo":
        os.mkfifo(target)
    elif content == "folder":
        target.mkdir()
    else:
        target.symlink_to(cases / "nowhere")
    return target


def hostile_file_case(use: str, content: bytes | str, json_out: bool) -> tuple[str, bytes | str, list[str]]:
    tail = ["--json"] if json_out else []
    args = {"config": ["--memory", "1K", "train", "{path}", "--store", "cases/s", *tail],
            "sweep": ["--memory", "1K", "sweep", "{path}", "--store", "cases/s", "--set", "sweep.seed=[0, 1]", *tail],
            "plugin": ["--plugin", "{path}", "tasks", *tail],
            "circuit": ["analyze", "circuit", TRAINED, "{path}", "--store", "trained", "-n", "8", *tail],
            "database": ["runs", "--store", "cases/hostile-store", *tail],
            "checkpoint": ["export", TRAINED, "--store", "cases/hostile-store", "--out", "cases/export", *tail],
            "attention": ["attention", TRAINED, "--store", "cases/hostile-store", "--out", "cases/a.png", *tail]}[use]
    return use, content, args


HOSTILE_FILES = st.builds(hostile_file_case, st.sampled_from(HOSTILE_USES),
                          hostile_bytes | st.sampled_from(SPECIAL), st.booleans())


@given(HOSTILE_FILES)
@FUZZ
def test_hostile_files(sandbox, world, case):
    """Random bytes, deep or exploding YAML, files past the limits and special files as a config, a sweep, a plugin,
    a circuit, a store's database and a run's checkpoint (read by export and attention): one line, exit 0 or 2,
    nothing read without bound. Configs and sweeps run under a 1 KiB memory budget: a file that happens to be a
    valid run is read, validated and sized, then refused (training is test_training_commands' part)."""
    use, content, template = case
    sandbox()
    path = place(world, content, use)
    check([str(path) if part == "{path}" else part for part in template])


def endpoint_answer(status: int, body: bytes, encoding: str | None, pause: float, length: str) -> Answer:
    chunks = [body[i : i + 4096] for i in range(0, len(body), 4096)] or [b""]
    headers = {"Content-Encoding": encoding} if encoding else {}
    return Answer(status, chunks, pause, headers, {"true": -1, "none": None, "short": max(len(body) - 1, 0),
                                                   "long": len(body) + 10}[length])


chat_bodies = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda depth: b"[" * depth + b"]" * depth, st.integers(1, 300_000)),
    st.builds(lambda content: json.dumps({"choices": [{"message": {"content": content}}]}).encode(),
              st.none() | st.integers() | text | st.lists(st.dictionaries(st.just("text"), text), max_size=3)
              | st.dictionaries(text, text, max_size=2)),
    st.builds(lambda obj: json.dumps(obj).encode(), st.recursive(
        st.none() | st.integers() | text, lambda inner: st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["choices", "message", "content", "x"]), inner, max_size=3), max_leaves=8)),
    st.sampled_from([b"\x00" * ((4 << 20) + 1),  # past the 4 MiB cap, as bytes and as a well-formed answer
                     b'{"choices": [{"message": {"content": "' + b"a" * (5 << 20) + b'"}}]}']),
)
ENDPOINT_ANSWERS = st.builds(endpoint_answer, st.sampled_from([200, 200, 200, 400, 401, 413, 429, 500, 503, 302]),
                             chat_bodies, st.sampled_from([None, None, "gzip", "br", "identity"]),
                             st.sampled_from([0.0, 0.0, 0.01]),
                             st.sampled_from(["true", "true", "none", "short", "long"]))


@pytest.fixture(scope="module")
def endpoint():
    with HostileServer() as server:
        yield server


@given(ENDPOINT_ANSWERS, st.booleans(), st.sampled_from(["0", "1"]))
@FUZZ
def test_hostile_endpoint_answers(sandbox, world, endpoint, monkeypatch, answer, json_out, retries):
    """llm-bench against generated answers (statuses, bodies, encodings, lengths that lie, trickles): one question,
    one try, a 0.3 s deadline per request, a new store each time (so every case asks); exit 0 or 2, one stdout line
    under --json, never a traceback. The figure is neither drawn nor saved (most of a case's time, and not what is
    fuzzed)."""
    sandbox()
    monkeypatch.setattr("depthlab.draw.llm.accuracy_figure", lambda result, title: None)
    monkeypatch.setattr("depthlab.draw.save", lambda fig, path, vector=None: path)
    shutil.rmtree(world / "cases" / "llm", ignore_errors=True)
    endpoint.answer = answer
    check(["llm-bench", "--endpoint", endpoint.url, "--model-name", "m", "--formulation", "functions", "-n", "1",
           "--max-tries", "1", "--retries", retries, "--timeout", "0.3", "--store", "cases/llm",
           *(["--json"] if json_out else [])])


# ------------------------------------------------------------------------------ outputs, atlas, bench (issue 47)

OUTPUT_TARGETS = ["trained/depthlab.sqlite", "trained/depthlab.sqlite-wal", "trained/depthlab.sqlite-journal",
                  f"trained/artifacts/{TRAINED}/checkpoint.safetensors", f"trained/artifacts/{TRAINED}",
                  "trained/artifacts", "cases/db-link.csv", "cases/hard-link.csv", "cases/out.png",
                  "cases/out", "/dev/null", "trained", "cases/out.csv"]
OUTPUT_COMMANDS = {  # each with its output options; a store before, so the output is checked against it
    "report": ["report", "--store", "trained", "--examples", "0", "--out"],
    "runs": ["runs", "--store", "trained", "--format", "csv", "--out"],
    "metrics": ["metrics", "--store", "trained", "--format", "json", "--out"],
    "attention": ["attention", TRAINED, "--store", "trained", "--out"],
    "export": ["export", TRAINED, "--store", "trained", "--out"],
    "atlas": ["atlas", "--plan", "--store", "trained", "--out"],
    "llm-bench --out": ["llm-bench", "--endpoint", "http://127.0.0.1:9/v1", "--model-name", "m", "--retries", "0",
                        "--timeout", "0.5", "--formulation", "functions", "-n", "1", "--store", "cases/llm", "--out"],
    "llm-bench --markdown": ["llm-bench", "--endpoint", "http://127.0.0.1:9/v1", "--model-name", "m", "--retries",
                             "0", "--timeout", "0.5", "--formulation", "functions", "-n", "1", "--store", "cases/llm",
                             "--markdown"],
}
FEWER = settings(FUZZ, max_examples=max(1, EXAMPLES // 5))  # the suite's time: each of these costs 0.25 s a case
OUTPUTS = st.tuples(st.sampled_from(sorted(OUTPUT_COMMANDS)), st.sampled_from(OUTPUT_TARGETS), st.booleans())
PROTECTED = [f"trained/artifacts/{TRAINED}/checkpoint.safetensors"]  # compared byte for byte


def store_runs(world: Path) -> list[str]:
    """The run ids of the store "trained", read as SQLite reads it (its bytes change when a reader of an earlier
    case, closed late, checkpoints the WAL: the database is compared by what it holds)."""
    with sqlite3.connect(f"{(world / 'trained' / 'depthlab.sqlite').as_uri()}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return [row[0] for row in conn.execute("SELECT id FROM runs")]


@given(OUTPUTS)
@FEWER
def test_every_output_option_against_what_the_command_reads_or_owns(sandbox, world, case):
    """Every --out and --markdown, pointed at the store's database, its companions, a run's checkpoint and folder,
    links to the database, a device or a fresh path: exit 0 or 2, the store still a sound database of its one
    run and its checkpoint unchanged byte for byte (`report --out S/depthlab.sqlite` replaced the
    database, exit 0)."""
    command, target, json_out = case
    sandbox()
    for link, make in (("cases/db-link.csv", os.symlink), ("cases/hard-link.csv", os.link)):
        if not os.path.lexists(world / link):
            make(world / "trained" / "depthlab.sqlite", world / link)
    before = {path: (world / path).read_bytes() for path in PROTECTED}
    check([*OUTPUT_COMMANDS[command], target, *(["--json"] if json_out else [])])
    assert {path: (world / path).read_bytes() for path in PROTECTED} == before, (command, target)
    assert store_runs(world) == [TRAINED], (command, target)


BENCH = st.one_of(
    st.builds(lambda runs, extra: ["bench", "--runs", runs, "--seconds", "0.1", "--rounds", "1", *extra],
              huge | st.sampled_from(["0", "-1", "1,0", "10001", "1," + "9" * 30, "", "a", "1,,2", "½", "nan", "1e309",
                                      "0x10", "1.5"]),  # never a size that fits: that would run the benchmark
              st.sampled_from([[], ["--json"], ["--ops"], ["--case", "x"]])),
    command_args("atlas").map(lambda a: [*a, "--plan"]),
    command_args("atlas").map(lambda a: [*a, "--finished-only", "--store", "missing"]),
)


@given(BENCH)
@FEWER
def test_bench_and_atlas(sandbox, args):
    """bench with group sizes of every kind (sized before anything is built: --runs 1000000 allocated gigabytes)
    and atlas's options, planned only or redrawn from a missing store (refused, as runs refuses it)."""
    sandbox()
    check(args)
