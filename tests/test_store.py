"""Tests of the embedded experiment store (depthlab.store)."""

from __future__ import annotations

import importlib.util
import json
import math
import multiprocessing as mp
import os
import sqlite3
import sys
import threading
from pathlib import Path

import pytest

if importlib.util.find_spec("depthlab") is None:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from depthlab.errors import UserError
from depthlab.store import (
    SCHEMA_VERSION,
    Store,
    StoreError,
    atomic_write_bytes,
    atomic_write_json,
    default_store_path,
)


@pytest.fixture
def store(tmp_path: Path):
    with Store(tmp_path / "store") as s:
        yield s


def _config(seed: int = 0, **kw) -> dict:
    return {"task": {"name": "parity"}, "model": {"name": "transformer", "layers": 2}, "seed": seed, **kw}


# ------------------------------------------------------------------------------------ opening


def test_creates_root_db_wal_and_version(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b"
    with Store(root) as s:
        assert s.root == root
    assert (root / "depthlab.sqlite").is_file()
    conn = sqlite3.connect(root / "depthlab.sqlite")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"runs", "metrics", "artifacts"} <= tables
    finally:
        conn.close()
    with Store(str(root)) as s:  # reopening an existing store is fine
        assert s.find_runs() == []


def test_newer_schema_refused_and_file_unchanged(tmp_path: Path) -> None:
    root = tmp_path / "s"
    root.mkdir()
    db = root / "depthlab.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE future (x)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before_bytes, before_mtime = db.read_bytes(), db.stat().st_mtime_ns
    before_files = sorted(p.name for p in root.iterdir())
    with pytest.raises(StoreError) as info:
        Store(root)
    message = str(info.value)
    assert isinstance(info.value, UserError)
    assert "\n" not in message
    assert str(SCHEMA_VERSION + 1) in message and "upgrade" in message
    assert db.read_bytes() == before_bytes
    assert db.stat().st_mtime_ns == before_mtime
    assert sorted(p.name for p in root.iterdir()) == before_files


def test_not_a_database(tmp_path: Path) -> None:
    root = tmp_path / "s"
    root.mkdir()
    (root / "depthlab.sqlite").write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(StoreError, match="not a depthlab store"):
        Store(root)


def test_default_store_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPTHLAB_STORE", str(tmp_path / "env-store"))
    assert default_store_path() == tmp_path / "env-store"
    monkeypatch.delenv("DEPTHLAB_STORE")
    monkeypatch.chdir(tmp_path)
    assert default_store_path() == tmp_path / "depthlab-runs"


# --------------------------------------------------------------------------------------- runs


def test_run_id_stable_and_sensitive() -> None:
    a = _config(seed=1)
    reordered = {"seed": 1, "model": {"layers": 2, "name": "transformer"}, "task": {"name": "parity"}}
    rid = Store.run_id(a)
    assert len(rid) == 16 and all(c in "0123456789abcdef" for c in rid)
    assert Store.run_id(reordered) == rid
    assert Store.run_id(_config(seed=2)) != rid
    assert Store.run_id(_config(seed=1, lr=1e-3)) != rid
    assert Store.run_id({**a, "model": {"name": "transformer", "layers": 3}}) != rid
    # the documented formula, literally
    import hashlib

    canonical = json.dumps(a, sort_keys=True, separators=(",", ":"))
    assert rid == hashlib.sha256(canonical.encode()).hexdigest()[:16]


def test_create_get_find_round_trip(store: Store) -> None:
    cfg = _config(seed=3, lr=0.01)
    rid = store.create_run(cfg, task="parity", model="transformer", group_id="g1", tags=["smoke", "a"])
    assert rid == Store.run_id(cfg)
    run = store.get_run(rid)
    assert run is not None
    assert run["id"] == rid and run["task"] == "parity" and run["model"] == "transformer"
    assert run["config"] == cfg
    assert run["status"] == "pending" and run["step"] == 0
    assert run["final"] is None and run["error"] is None
    assert run["group_id"] == "g1" and run["tags"] == ["smoke", "a"]
    assert run["created"] <= run["updated"]
    assert store.get_run("nope") is None

    rid2 = store.create_run(_config(seed=4), task="parity", model="mlp", tags=["b"])
    rid3 = store.create_run(_config(seed=5, task={"name": "copy"}), task="copy", model="mlp")
    store.set_status(rid2, "running", step=10)
    assert [r["id"] for r in store.find_runs()] == [rid, rid2, rid3]
    assert [r["id"] for r in store.find_runs(status="running")] == [rid2]
    assert [r["id"] for r in store.find_runs(status=["pending", "running"])] == [rid, rid2, rid3]
    assert [r["id"] for r in store.find_runs(status=[])] == []
    assert [r["id"] for r in store.find_runs(task="copy")] == [rid3]
    assert [r["id"] for r in store.find_runs(ids=[rid3, rid])] == [rid, rid3]
    assert store.find_runs(ids=[]) == []
    assert [r["id"] for r in store.find_runs(tag="smoke")] == [rid]
    assert [r["id"] for r in store.find_runs(tag="b", status="running")] == [rid2]
    assert [r["id"] for r in store.find_runs(tag="b", status="pending")] == []


def test_create_run_twice_keeps_status(store: Store) -> None:
    cfg = _config()
    rid = store.create_run(cfg, "parity", "transformer")
    store.set_status(rid, "running", step=40)
    created = store.get_run(rid)["created"]
    assert store.create_run(cfg, "parity", "transformer", tags=["other"]) == rid
    run = store.get_run(rid)
    assert run["status"] == "running" and run["step"] == 40 and run["created"] == created
    assert run["tags"] == []
    assert len(store.find_runs()) == 1


def test_set_status_and_errors(store: Store) -> None:
    rid = store.create_run(_config(), "parity", "transformer")
    store.set_status(rid, "failed", error="CUDA out of memory")
    run = store.get_run(rid)
    assert run["status"] == "failed" and run["error"] == "CUDA out of memory"
    store.set_status(rid, "running")
    assert store.get_run(rid)["error"] is None
    with pytest.raises(ValueError):
        store.set_status(rid, "exploded")
    with pytest.raises(StoreError):
        store.set_status("0000000000000000", "running")


def test_finish_run_and_nan_json(store: Store) -> None:
    rid = store.create_run(_config(), "parity", "transformer")
    store.finish_run(rid, {"acc": 0.98, "loss": 0.01}, step=500)
    run = store.get_run(rid)
    assert run["status"] == "done" and run["step"] == 500
    assert run["final"] == {"acc": 0.98, "loss": 0.01}

    rid2 = store.create_run(_config(seed=9), "parity", "transformer")
    store.finish_run(rid2, {"loss": float("nan"), "grad": float("inf"), "acc": 0.5}, status="diverged")
    run2 = store.get_run(rid2)
    assert run2["status"] == "diverged"
    assert run2["final"] == {"loss": None, "grad": None, "acc": 0.5}
    conn = sqlite3.connect(store.db_path)
    try:
        raw = conn.execute("SELECT final FROM runs WHERE id = ?", (rid2,)).fetchone()[0]
    finally:
        conn.close()
    assert "NaN" not in raw and "Infinity" not in raw
    json.loads(raw)  # strict JSON


# ------------------------------------------------------------------------------------ metrics


def test_metrics_alignment_and_relog(store: Store) -> None:
    rid = store.create_run(_config(), "parity", "transformer")
    store.log_metrics(rid, 0, "train", {"loss": 2.0, "acc": 0.1})
    store.log_metrics(rid, 20, "train", {"loss": 1.0})  # acc missing at step 20 → NaN
    store.log_metrics(rid, 10, "train", {"loss": 1.5, "acc": 0.3})  # out of order
    store.log_metrics(rid, 10, "eval", {"acc": 0.25, "loss": float("nan")})
    m = store.metric_columns(rid)
    assert set(m) == {"train", "eval"}
    assert m["train"]["step"] == [0, 10, 20]
    assert m["train"]["loss"] == [2.0, 1.5, 1.0]
    assert m["train"]["acc"][:2] == [0.1, 0.3] and math.isnan(m["train"]["acc"][2])
    assert m["eval"]["step"] == [10] and m["eval"]["acc"] == [0.25]
    assert math.isnan(m["eval"]["loss"][0])

    # a resumed run re-logs step 10: replaced, not duplicated
    store.log_metrics(rid, 10, "train", {"loss": 1.4, "acc": 0.35})
    again = store.metric_columns(rid, split="train")
    assert set(again) == {"train"}
    assert again["train"]["step"] == [0, 10, 20]
    assert again["train"]["loss"] == [2.0, 1.4, 1.0]
    conn = sqlite3.connect(store.db_path)
    try:
        n = conn.execute("SELECT COUNT(*) FROM metrics WHERE run_id = ?", (rid,)).fetchone()[0]
    finally:
        conn.close()
    assert n == 7
    assert store.metric_columns("missing") == {}


def test_log_metrics_many(store: Store) -> None:
    ids = [store.create_run(_config(seed=s), "parity", "transformer") for s in range(3)]
    rows = [
        (rid, step, "train", {"loss": 1.0 / (step + 1 + i)}) for i, rid in enumerate(ids) for step in range(4)
    ]
    store.log_metrics_many(rows)
    store.log_metrics_many([])
    for i, rid in enumerate(ids):
        m = store.metric_columns(rid)["train"]
        assert m["step"] == [0, 1, 2, 3]
        assert m["loss"] == [1.0 / (s + 1 + i) for s in range(4)]


# ---------------------------------------------------------------------------------- artifacts


def test_artifacts(store: Store) -> None:
    rid = store.create_run(_config(), "parity", "transformer")
    path = store.artifact_path(rid, "checkpoint", "ckpt/last.safetensors")
    assert path.is_absolute()
    assert path == store.root / "artifacts" / rid / "ckpt" / "last.safetensors"
    assert path.parent.is_dir()
    path.write_bytes(b"weights")
    returned = store.add_artifact(
        rid, "checkpoint", "ckpt/last.safetensors", meta={"step": 100, "x": math.nan}
    )
    assert returned == path
    store.add_artifact(rid, "plot", "curve.png")
    arts = store.artifacts(rid)
    assert [(a["kind"], a["name"]) for a in arts] == [
        ("checkpoint", "ckpt/last.safetensors"),
        ("plot", "curve.png"),
    ]
    assert arts[0]["path"] == path and arts[0]["meta"] == {"step": 100, "x": None}
    assert arts[1]["meta"] == {}
    assert [a["name"] for a in store.artifacts(rid, kind="plot")] == ["curve.png"]
    conn = sqlite3.connect(store.db_path)
    try:
        stored = conn.execute("SELECT path FROM artifacts WHERE kind='checkpoint'").fetchone()[0]
    finally:
        conn.close()
    assert stored == f"artifacts/{rid}/ckpt/last.safetensors"
    # re-adding replaces the row
    store.add_artifact(rid, "checkpoint", "ckpt/last.safetensors", meta={"step": 200})
    assert store.artifacts(rid, kind="checkpoint")[0]["meta"] == {"step": 200}
    for bad in ("../escape", "/abs/path", ""):
        with pytest.raises(StoreError):
            store.artifact_path(rid, "x", bad)
    with pytest.raises(StoreError):
        store.artifact_path("../x", "x", "a")


def test_delete_run(store: Store) -> None:
    rid = store.create_run(_config(), "parity", "transformer")
    keep = store.create_run(_config(seed=1), "parity", "transformer")
    store.log_metrics(rid, 0, "train", {"loss": 1.0})
    store.log_metrics(keep, 0, "train", {"loss": 1.0})
    store.artifact_path(rid, "plot", "a.png").write_bytes(b"png")
    store.add_artifact(rid, "plot", "a.png")
    store.delete_run(rid)
    assert store.get_run(rid) is None
    assert store.metric_columns(rid) == {} and store.artifacts(rid) == []
    assert not (store.root / "artifacts" / rid).exists()
    assert store.get_run(keep) is not None and store.metric_columns(keep)["train"]["loss"] == [1.0]


def test_pickle_and_reopen(store: Store) -> None:
    import pickle

    rid = store.create_run(_config(), "parity", "transformer")
    copy = pickle.loads(pickle.dumps(store))
    assert copy.get_run(rid)["id"] == rid
    copy.close()
    store.close()
    assert store.get_run(rid) is not None  # reopens lazily after close


# -------------------------------------------------------------------------------- concurrency

N_WRITERS, N_METRIC_ROWS, N_RUNS = 4, 200, 50


def _writer(root: str, worker: int, start) -> None:
    start.wait(30)
    store = Store(root)  # every worker opens the (possibly not yet created) store at the same moment
    ids = []
    for i in range(N_RUNS):
        rid = store.create_run({"worker": worker, "i": i, "seed": 0}, "parity", "transformer")
        store.set_status(rid, "running", step=i)
        ids.append(rid)
    for step in range(N_METRIC_ROWS):
        store.log_metrics(ids[step % N_RUNS], step, "train", {"loss": float(step)})
    store.close()


def test_concurrent_writer_processes_lose_nothing(tmp_path: Path) -> None:
    root = str(tmp_path / "shared")
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(root, w, start)) for w in range(N_WRITERS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * N_WRITERS
    with Store(root) as s:
        runs = s.find_runs()
        assert len(runs) == N_WRITERS * N_RUNS
        assert all(r["status"] == "running" for r in runs)
        conn = sqlite3.connect(s.db_path)
        try:
            n = conn.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
        finally:
            conn.close()
        assert n == N_WRITERS * N_METRIC_ROWS


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_connection_reopened_after_fork(store: Store) -> None:
    rid = store.create_run(_config(), "parity", "transformer")
    ctx = mp.get_context("fork")

    proc = ctx.Process(target=_log_in_child, args=(store, rid))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert store.metric_columns(rid)["train"]["loss"] == [0.5]


def _log_in_child(store: Store, rid: str) -> None:
    store.log_metrics(rid, 1, "train", {"loss": 0.5})
    assert store._pid == os.getpid()


# ------------------------------------------------------------------------------ atomic writes


def test_atomic_write_bytes_and_json(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file.bin"
    atomic_write_bytes(target, b"first version")
    assert target.read_bytes() == b"first version"
    atomic_write_bytes(target, b"2")
    assert target.read_bytes() == b"2"
    big = os.urandom(1 << 20)
    atomic_write_bytes(target, big)
    assert target.read_bytes() == big
    js = tmp_path / "sub" / "m.json"
    atomic_write_json(js, {"loss": float("nan"), "acc": [1.0, float("-inf")], "n": 3})
    assert json.loads(js.read_text()) == {"loss": None, "acc": [1.0, None], "n": 3}
    assert "NaN" not in js.read_text()
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["file.bin", "m.json"]


def test_atomic_write_failure_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.json"
    atomic_write_bytes(target, b"old")

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(target, b"new content")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_atomic_write_never_partial_for_readers(tmp_path: Path) -> None:
    target = tmp_path / "state.bin"
    payloads = [b"a" * 300_000, b"b" * 7, b"c" * 100_000]
    atomic_write_bytes(target, payloads[0])
    stop = threading.Event()

    def write_loop() -> None:
        i = 0
        while not stop.is_set() and i < 300:
            atomic_write_bytes(target, payloads[i % len(payloads)])
            i += 1

    writer = threading.Thread(target=write_loop)
    writer.start()
    try:
        for _ in range(300):
            assert target.read_bytes() in payloads
    finally:
        stop.set()
        writer.join()
    assert [p.name for p in tmp_path.iterdir()] == ["state.bin"]


# ------------------------------------------------------------------------------------ records


def test_records_round_trip_replace_and_isolation(store: Store) -> None:
    a = store.create_run(_config(seed=1), task="llm-bench", model="m")
    b = store.create_run(_config(seed=2), task="llm-bench", model="m")
    assert store.records(a) == {}
    store.put_record(a, "eq/D005/000001", {"prompt": "a = 1", "replies": ["1"], "score": math.nan})
    store.put_record(a, "eq/D005/000000", [1, 2.5, None])
    store.put_records(b, {"k": "v", "j": {"x": math.inf}})
    got = store.records(a)
    assert list(got) == ["eq/D005/000000", "eq/D005/000001"]  # ordered by key
    assert got["eq/D005/000001"] == {"prompt": "a = 1", "replies": ["1"], "score": None}
    assert got["eq/D005/000000"] == [1, 2.5, None]
    store.put_record(a, "eq/D005/000000", "replaced")
    assert store.records(a)["eq/D005/000000"] == "replaced"
    assert store.records(b) == {"j": {"x": None}, "k": "v"}
    store.put_records(b, {})  # nothing to write is fine
    store.delete_run(a)
    assert store.records(a) == {}
    assert store.records(b) == {"j": {"x": None}, "k": "v"}


def test_records_table_added_to_an_existing_version_1_store(tmp_path: Path) -> None:
    root = tmp_path / "old"
    with Store(root) as s:
        rid = s.create_run(_config(), task="t", model="m")
    conn = sqlite3.connect(root / "depthlab.sqlite")
    conn.execute("DROP TABLE records")  # a store written before the records table existed
    conn.commit()
    conn.close()
    with Store(root) as s:
        assert s.records(rid) == {}
        s.put_record(rid, "q", {"ok": True})
        assert s.records(rid) == {"q": {"ok": True}}
        assert s.get_run(rid)["model"] == "m"
    conn = sqlite3.connect(root / "depthlab.sqlite")
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 1
        columns = [r[1] for r in conn.execute("PRAGMA table_info(records)")]
        assert columns == ["run_id", "key", "value", "created"]
    finally:
        conn.close()


@pytest.mark.parametrize("kind,needle", [
    ("a file", "is a file; a store is a folder"),
    ("under a file", "which is a file; a store is a folder"),
    ("random bytes as its database", "is not a depthlab store"),
])
def test_a_path_that_cannot_hold_a_store_is_one_clear_error(tmp_path, kind, needle):
    """Issue 21 item 3: these gave FileExistsError, NotADirectoryError and sqlite3 tracebacks."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "depthlab.sqlite").write_bytes(os.urandom(4096))
    root = {"a file": tmp_path / "file", "under a file": tmp_path / "file" / "sub",
            "random bytes as its database": tmp_path / "junk"}[kind]
    with pytest.raises(StoreError, match=needle):
        Store(root)


def test_a_folder_that_cannot_be_written_is_one_clear_error(tmp_path, monkeypatch):
    """A read-only folder (simulated: the tests may run as root, for whom permissions do not apply)."""
    def refuse(*args, **kwargs):
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr("depthlab.store.sqlite.open_database", refuse)
    with pytest.raises(StoreError, match=r"cannot open .*depthlab\.sqlite: unable to open database file"):
        Store(tmp_path / "ro")

    def no_permission(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", no_permission)
    with pytest.raises(StoreError, match=r"cannot write to .*new: permission denied"):
        Store(tmp_path / "new")


def test_reading_a_store_that_is_not_there_is_an_error_not_an_empty_store(tmp_path):
    with pytest.raises(StoreError, match="no depthlab store at"):
        Store(tmp_path / "typo", create=False)
    assert not (tmp_path / "typo").exists()
    Store(tmp_path / "real").close()
    Store(tmp_path / "real", create=False).close()
