"""llm-bench against a chat-completions server run by the test on 127.0.0.1.

The server answers each question by a script chosen from the question's index: right away, after a
429, after a 500 and an off-list reply, after a timeout, wrongly, or never acceptably. The protocol's
retries, re-samples and flags must follow, the run must resume after a failure without asking again,
and the API key must never be written anywhere.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
import uuid
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("depthlab") is None:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import typer
from typer.testing import CliRunner

from depthlab.errors import UserError
from depthlab.llm import runners
from depthlab.llm.bench import BenchConfig, match_answer, parse_depths, record_key, wilson
from depthlab.llm.prompts import question
from depthlab.llm.runners import EndpointError, EndpointRunner, Request, _retry_after, chat_url
from depthlab.store import Store

KEY_ENV = "DEPTHLAB_TEST_LLM_KEY"
MODEL = "test-model"
MAX_TRIES = 3
# The client's --timeout. An answer from this server takes milliseconds (median 13 ms, at most 42 ms, measured on
# the 2-core machine at a load average of 14), so 3 s leaves almost two orders of magnitude of slack; the "timeout"
# script never answers in time (it waits until the test ends), so it times out however fast or slow the machine is.
TIMEOUT = "3"
SCRIPTS = ("right", "429-then-right", "500-offlist-then-right", "timeout-then-right", "wrong", "never")


class ChatServer:
    """A chat-completions server that answers each prompt by the script of its question."""

    def __init__(self, key: str, answers: dict[str, tuple[str, list[str], str]]) -> None:
        self.key = key
        self.answers = answers  # prompt -> (correct, acceptable, script)
        self.lock = threading.Lock()
        self.served: dict[str, int] = {}  # prompt -> requests seen
        self.log: list[dict[str, Any]] = []  # every request: prompt, temperature, status
        self.down = False  # answer 503 to everything
        self.refuse = True  # answer 400 to "refused" questions, and to "offlist-then-refused" ones when re-sampled
        self.closing = threading.Event()  # set when the test ends: a request left hanging gives up
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                server.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        try:
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
        except OSError:  # the client gave up (timeout)
            pass

    def _reply(self, h: BaseHTTPRequestHandler, text: str) -> None:
        body = {"id": "x", "object": "chat.completion", "model": MODEL,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}]}  # fmt: skip
        self._send(h, 200, body)

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        assert h.path == "/v1/chat/completions" and body["model"] == MODEL
        with self.lock:
            seen = self.served.get(prompt, 0)
            self.served[prompt] = seen + 1
            entry = {"prompt": prompt, "temperature": body["temperature"], "status": 200}
            self.log.append(entry)
        if h.headers.get("Authorization") != f"Bearer {self.key}":
            entry["status"] = 401
            return self._send(h, 401, {"error": {"message": "bad key"}})
        if self.down:
            entry["status"] = 503
            return self._send(h, 503, {"error": {"message": "overloaded"}})
        correct, acceptable, script = self.answers[prompt]
        wrong = next(a for a in acceptable if a != correct)
        if script == "429-then-right" and seen == 0:
            entry["status"] = 429
            return self._send(h, 429, {"error": {"message": "slow down"}}, {"Retry-After": "2"})
        if script == "500-offlist-then-right":
            if seen == 0:
                entry["status"] = 500
                return self._send(h, 500, {"error": {"message": "oops"}})
            if seen == 1:
                return self._reply(h, f"I think the answer is {correct}, because it follows.")
            return self._reply(h, f"**{correct.lower()}**.\n")
        if script == "timeout-then-right" and seen == 0:
            self.closing.wait()  # no answer before the client's --timeout, whatever the machine's speed
            return None
        resample = body["temperature"] > 0
        if self.refuse and (script == "refused" or (script == "offlist-then-refused" and resample)):
            entry["status"] = 400  # about this question only; the reason even quotes the key, which must not spread
            return self._send(h, 400, {"error": {"message": f"prompt too long for this model (key {self.key})"}})
        if self.refuse and script == "offlist-then-refused":
            return self._reply(h, "I would rather not say.")
        if script == "wrong":
            return self._reply(h, f" {wrong} ")
        if script == "never":
            return self._reply(h, "Let me think step by step.")
        return self._reply(h, correct)


def _cells(formulations: list[str], depths: list[int], n: int, seed: int = 0):
    config = BenchConfig(formulations=formulations, depths=depths, n=n, seed=seed)
    for f, d in config.cells():
        for i in range(n):
            yield record_key(f, d, i), question(f, i, seed, d)


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv(KEY_ENV, secret)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    return secret


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []
    monkeypatch.setattr(runners, "_sleep", waits.append)  # record the backoff instead of waiting
    return waits


@pytest.fixture
def app() -> typer.Typer:
    from depthlab.cli import app

    return app


def _server(key: str, formulations: list[str], depths: list[int], n: int) -> tuple[ChatServer, dict]:
    items = dict(_cells(formulations, depths, n))
    answers = {}
    scripts = {}
    for k, p in items.items():
        script = SCRIPTS[int(k.rsplit("/", 1)[1]) % len(SCRIPTS)]
        answers[p.prompt] = (p.correct, list(p.acceptable), script)
        scripts[k] = script
    assert len(answers) == len(items), "two questions share a prompt"
    return ChatServer(key, answers), scripts


def _no_key_anywhere(root: Path, key: str, *texts: str) -> None:
    secret = key.encode()
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert secret not in path.read_bytes(), f"API key written to {path}"
    for text in texts:
        assert key not in text


def _bench_args(server: ChatServer, store: Path, n: int, *extra: str) -> list[str]:
    return ["llm-bench", "--endpoint", server.url, "--model-name", MODEL, "--api-key-env", KEY_ENV,
            "--formulation", "equations", "--formulation", "relatives", "--depth", "2-3", "-n", str(n),
            "--max-tries", str(MAX_TRIES), "--concurrency", "4", "--timeout", TIMEOUT, "--retries", "2",
            "--store", str(store), "--json", *extra]  # fmt: skip


def test_protocol_retries_resamples_flags_and_resume(app, key, sleeps, tmp_path: Path) -> None:
    n = 12
    server, scripts = _server(key, ["equations", "relatives"], [2, 3], n)
    store_root = tmp_path / "store"
    try:
        result = CliRunner().invoke(app, _bench_args(server, store_root, n))
        assert result.exit_code == 0, result.output
        assert result.stdout.count("\n") == 1  # exactly one JSON object
        out = json.loads(result.stdout)
        total = 3 * n
        assert out["questions"] == total and out["asked"] == total and out["resumed"] == 0
        with Store(store_root) as store:
            records = store.records(out["run_id"])
            run = store.get_run(out["run_id"])
        assert run["status"] == "done" and run["task"] == "llm-bench"
        assert len(records) == total
        for k, r in records.items():
            script = scripts[k]
            assert r["prompt"] and r["correct"] in r["acceptable"]
            assert r["tries"] == len(r["replies"]) == len(r["http_attempts"])
            if script == "right":
                assert (r["tries"], r["http_attempts"], r["verdict"], r["flagged"]) == (1, [1], "correct", False)
            elif script == "429-then-right":  # retried over HTTP: one try, two attempts
                assert (r["tries"], r["http_attempts"], r["verdict"]) == (1, [2], "correct")
            elif script == "500-offlist-then-right":  # a 500, an off-list reply re-sampled, then accepted
                assert r["tries"] == 2 and r["http_attempts"] == [2, 1]
                assert r["replies"][0].startswith("I think") and r["answer"] == r["correct"]
                assert r["verdict"] == "correct" and not r["flagged"]
            elif script == "timeout-then-right":
                assert (r["tries"], r["http_attempts"], r["verdict"]) == (1, [2], "correct")
            elif script == "wrong":
                assert (r["tries"], r["verdict"], r["flagged"]) == (1, "wrong", False)
                assert r["answer"] in r["acceptable"] and r["answer"] != r["correct"]
            else:  # never acceptable: asked max_tries times, flagged, wrong
                assert (r["tries"], r["verdict"], r["flagged"], r["answer"]) == (MAX_TRIES, "wrong", True, None)
        # summary: 4 of the 6 scripts are right
        expect_right = sum(s in SCRIPTS[:4] for s in scripts.values())
        assert out["overall"]["correct"] == expect_right
        assert out["overall"]["flagged"] == sum(s == "never" for s in scripts.values())
        for cell in out["cells"]:
            lo, hi = wilson(cell["correct"], cell["n"])
            assert cell["ci_low"] == pytest.approx(lo) and cell["ci_high"] == pytest.approx(hi)
            assert cell["chance"] == pytest.approx(0.25 if cell["formulation"] == "equations" else 1 / 16)
        assert {(c["formulation"], c["depth"]) for c in out["cells"]} == {
            ("equations", 2), ("equations", 3), ("relatives", None)}  # fmt: skip
        assert Path(out["figure"]).is_file() and Path(out["figure"]).stat().st_size > 1000
        # first tries greedy, re-samples at temperature 1; Retry-After respected, 5xx backed off
        temps: dict[str, list[float]] = {}
        for e in server.log:
            temps.setdefault(e["prompt"], []).append(e["temperature"])
        by_script = {scripts[k]: temps[r["prompt"]] for k, r in records.items()}
        assert by_script["never"] == [0.0, 1.0, 1.0]
        assert by_script["500-offlist-then-right"] == [0.0, 0.0, 1.0]  # an HTTP retry repeats its try
        assert by_script["429-then-right"] == [0.0, 0.0]
        assert 2.0 in sleeps  # the 429's Retry-After: 2
        backoffs = [s for s in sleeps if s != 2.0]
        assert backoffs and all(0.5 <= s <= 1.0 for s in backoffs)  # first retry: 1 s × jitter in [0.5, 1]

        # a rerun with the same arguments asks nothing
        before = len(server.log)
        again = CliRunner().invoke(app, _bench_args(server, store_root, n))
        assert again.exit_code == 0, again.output
        second = json.loads(again.stdout)
        assert (second["asked"], second["resumed"], second["run_id"]) == (0, total, out["run_id"])
        assert second["overall"] == out["overall"]
        assert len(server.log) == before

        # the human table
        human = CliRunner().invoke(app, _bench_args(server, store_root, n)[:-1])
        assert human.exit_code == 0 and "equations" in human.stdout and "relatives" in human.stdout
        _no_key_anywhere(store_root, key, result.output, again.output, human.output)
    finally:
        server.close()


def test_failure_mid_run_then_resume_without_asking_again(app, key, sleeps, tmp_path: Path) -> None:
    n = 20
    server, _ = _server(key, ["equations"], [2], n)
    store_root = tmp_path / "store"
    args = ["llm-bench", "--endpoint", server.url, "--model-name", MODEL, "--api-key-env", KEY_ENV,
            "--formulation", "equations", "--depth", "2", "-n", str(n), "--concurrency", "2",
            "--timeout", TIMEOUT, "--retries", "1", "--store", str(store_root), "--json"]  # fmt: skip
    try:
        original = server.handle

        def flaky(h: BaseHTTPRequestHandler) -> None:  # the server goes down after 20 answered requests
            if sum(e["status"] == 200 for e in server.log) >= 20:
                server.down = True
            original(h)

        server.handle = flaky  # type: ignore[method-assign]
        failed = CliRunner().invoke(app, args)
        assert isinstance(failed.exception, EndpointError)
        message = str(failed.exception)
        assert "503" in message and "resume" in message and key not in message
        assert failed.stdout == ""
        with Store(store_root) as store:
            (run,) = store.find_runs(task="llm-bench")
            assert run["status"] == "failed" and "503" in run["error"] and key not in run["error"]
            answered = store.records(run["id"])
        assert 0 < len(answered) < n
        answered_prompts = {r["prompt"] for r in answered.values()}

        server.handle = original  # type: ignore[method-assign]
        server.down = False
        start = len(server.log)
        resumed = CliRunner().invoke(app, args)
        assert resumed.exit_code == 0, resumed.output
        out = json.loads(resumed.stdout)
        assert out["resumed"] == len(answered) and out["asked"] == n - len(answered)
        asked_now = {e["prompt"] for e in server.log[start:]}
        assert not asked_now & answered_prompts  # nothing already answered was asked again
        with Store(store_root) as store:
            assert store.get_run(out["run_id"])["status"] == "done"
            assert len(store.records(out["run_id"])) == n
        _no_key_anywhere(store_root, key, failed.output, resumed.output, message)
    finally:
        server.close()


def test_refused_requests_are_not_retried_and_hide_the_key(key, sleeps) -> None:
    server = ChatServer("another-key", {})
    try:
        runner = EndpointRunner(server.url, MODEL, api_key_env=KEY_ENV, retries=3)
        with pytest.raises(EndpointError) as info:
            runner.generate([Request("hello", 0.0, 0)])
        message = str(info.value)
        assert "401" in message and KEY_ENV in message and key not in message
        assert len(server.log) == 1 and sleeps == []  # a 401 is final
        assert key not in repr(runner) and key not in json.dumps(runner.describe())
        runner.close()
    finally:
        server.close()


def test_unreachable_endpoint_gives_up_after_the_retries(key, sleeps) -> None:
    runner = EndpointRunner("http://127.0.0.1:9/v1", MODEL, api_key_env=KEY_ENV, retries=2, timeout=0.5)
    with pytest.raises(EndpointError, match="after 3 attempts"):
        runner.complete(Request("hello", 0.0, 0))
    assert len(sleeps) == 2 and 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0  # exponential
    runner.close()


def test_helpers() -> None:
    assert chat_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_url("https://h/v1/chat/completions") == "https://h/v1/chat/completions"
    with pytest.raises(UserError, match="--endpoint"):
        chat_url("ftp://h")
    with pytest.raises(UserError, match="--api-key-env"):
        chat_url("http://user:secret@h/v1")
    assert _retry_after({"Retry-After": "3"}) == (3.0, "Retry-After: 3")
    assert _retry_after({"retry-after-ms": "250"}) == (0.25, "retry-after-ms: 250")
    assert 8 <= _retry_after({"Retry-After": formatdate(time.time() + 10, usegmt=True)})[0] <= 10
    assert _retry_after({}) == (None, "")
    assert match_answer(" **Berlin**.\n", ["Amsterdam", "Berlin"]) == "Berlin"
    assert match_answer("<think>maybe 2</think>3", ["2", "3"]) == "3"
    assert match_answer("The answer is 3", ["2", "3"]) is None
    assert match_answer("berlin", ["Berlin"]) == "Berlin"
    assert parse_depths("1-3,5") == [1, 2, 3, 5] and parse_depths("4") == [4]
    with pytest.raises(UserError, match="--depth"):
        parse_depths("3-1")
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and 0.27 < hi < 0.29
    assert all(wilson(n, n)[1] == 1.0 for n in range(1, 50))  # the interval holds p despite rounding (figure bars)


def test_cli_option_errors(app, key) -> None:
    cases = [
        (["llm-bench"], "--model or --endpoint"),
        (["llm-bench", "--model", "m", "--endpoint", "http://h/v1"], "--model, --endpoint"),
        (["llm-bench", "--endpoint", "http://h/v1"], "--model-name"),
        (["llm-bench", "--endpoint", "http://h/v1", "--model-name", "m", "--formulation", "sums"], "--formulation"),
        (["llm-bench", "--endpoint", "http://h/v1", "--model-name", "m", "--depth", "x"], "--depth"),
    ]
    for args, option in cases:
        result = CliRunner().invoke(app, [*args, "--json"])
        assert isinstance(result.exception, UserError), (args, result.output)
        assert option in str(result.exception) and "\n" not in str(result.exception)
        assert result.stdout == ""


def test_a_question_the_endpoint_refuses_is_recorded_as_failed_and_the_rest_are_asked(app, key, sleeps,
                                                                                    tmp_path: Path) -> None:
    """Issue 21: one HTTP 400 stopped the whole benchmark."""
    n = 10
    items = dict(_cells(["equations"], [2], n))
    scripts = {k: {3: "refused", 6: "offlist-then-refused"}.get(int(k.rsplit("/", 1)[1]), "right") for k in items}
    server = ChatServer(key, {p.prompt: (p.correct, list(p.acceptable), scripts[k]) for k, p in items.items()})
    store_root = tmp_path / "store"
    args = ["llm-bench", "--endpoint", server.url, "--model-name", MODEL, "--api-key-env", KEY_ENV,
            "--formulation", "equations", "--depth", "2", "-n", str(n), "--max-tries", "3", "--concurrency", "4",
            "--retries", "2", "--store", str(store_root), "--json"]  # fmt: skip
    try:
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert out["overall"]["failed"] == 2 and out["overall"]["n"] == n - 2 and out["overall"]["correct"] == n - 2
        assert out["cells"][0]["failed"] == 2
        assert sleeps == []  # a refusal is never retried
        with Store(store_root) as store:
            assert store.get_run(out["run_id"])["status"] == "done"
            records = store.records(out["run_id"])
        failed = {k: r for k, r in records.items() if r["verdict"] == "failed"}
        assert {scripts[k] for k in failed} == {"refused", "offlist-then-refused"}
        for record in failed.values():
            assert record["error"]["status"] == 400 and not record["flagged"] and record["answer"] is None
            assert "answered HTTP 400" in record["error"]["message"] and "prompt too long" in record["error"]["message"]
            assert "\n" not in record["error"]["message"] and key not in record["error"]["message"]
        assert [len(r["replies"]) for r in failed.values()] == [0, 1]  # the second had one off-list reply first

        server.refuse = False  # a rerun asks the failed questions again, and only them
        start = len(server.log)
        again = CliRunner().invoke(app, args)
        assert again.exit_code == 0, again.output
        second = json.loads(again.stdout)
        assert (second["asked"], second["resumed"], second["overall"]["failed"]) == (2, n - 2, 0)
        assert {e["prompt"] for e in server.log[start:]} == {items[k].prompt for k in failed}
        _no_key_anywhere(store_root, key, result.output, again.output)
    finally:
        server.close()
