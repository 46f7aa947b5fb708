"""Issue 47 item 2: an API key never leaves the process.

An API key holding ``\\r\\n`` was refused by h11 in a message quoting it (``Illegal header value b'Bearer
sk-abc\\r\\nX-Evil: …'``), which went to stderr and into the store's ``runs.error``: the redaction looked for the
raw key only. A key is now checked before use without being echoed, and every form of it (raw, escaped,
JSON-escaped, percent-encoded, base64 at each alignment) is redacted from stderr, the traceback file, the
store's errors and the replies it keeps. Commands run in this process (``conftest.run_depthlab``) against a
server on 127.0.0.1 (``hostile_http``).
"""

from __future__ import annotations

import base64
import json
import sqlite3
import urllib.parse
from pathlib import Path

import pytest

from conftest import run_depthlab
from depthlab import secrets
from hostile_http import Answer, HostileServer

KEY = 'sk-a/b+c=d"e\\f_0123456789'  # characters that each form writes differently


def leaks(text: str, key: str = KEY) -> list[str]:
    """The forms of ``key`` found in ``text``, in any case (base64 fragments of 8 characters and more counted),
    and the key itself in ``text`` percent-decoded (however many of its characters were encoded)."""
    found = sorted(form for form in secrets.forms(key) if form.lower() in text.lower())
    return found + ["percent-decoded"] * (key in urllib.parse.unquote(text))


def every_form(key: str) -> dict[str, str]:
    raw = key.encode()
    quoted = urllib.parse.quote(raw, safe="")
    out = {"raw": key, "repr of bytes (h11)": repr(b"Bearer " + raw + b"\r\nX-Evil: 1"), "repr": repr(key),
           "JSON": json.dumps({"key": key}), "percent": quoted, "percent, lower-case hex": quoted.replace("%2F", "%2f"),
           "percent, plus": urllib.parse.quote_plus("Bearer " + key),
           "percent, every byte": "".join(f"%{b:02x}" for b in raw),
           "percent, unreserved ones too": quoted.replace("-", "%2D").replace("_", "%5f")}
    for name, encode in (("base64", base64.b64encode), ("base64url", base64.urlsafe_b64encode)):
        for prefix in (b"", b"B", b"Be", b"Bearer "):
            out[f"{name} after {len(prefix)} bytes"] = encode(prefix + raw + b"\x00tail").decode()
    return out


@pytest.mark.parametrize("form", list(every_form(KEY)))
def test_each_form_of_a_key_is_redacted(form):
    secrets.register(KEY)
    text = f"error: the server said {every_form(KEY)[form]} and more"
    assert leaks(text), "the test's text must hold the key in some form"
    redacted = secrets.redact(text)
    assert "***" in redacted and not leaks(redacted), redacted
    assert redacted.startswith("error: the server said ") and redacted.endswith(" and more")


def test_a_key_with_a_line_break_or_non_ascii_is_refused_without_echoing_it(tmp_path, monkeypatch):
    """Today: h11's refusal, quoting the key's escaped form, on stderr and in the store's runs.error."""
    for key, kind in (("sk-abc\r\nX-Evil: 1", "a line break at character 7"),
                      ("sk-clé-9", "a non-ASCII character at character 6"), ("sk abc", "a space")):
        monkeypatch.setenv("HOSTILE_KEY", key)
        code, out, err = run_depthlab("llm-bench", "--endpoint", "http://127.0.0.1:9/v1", "--model-name", "m",
                                      "--api-key-env", "HOSTILE_KEY", "-n", "1", "--formulation", "functions",
                                      "--store", str(tmp_path / "s"))
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "$HOSTILE_KEY: the API key has " + kind in err and "sk" not in err.replace("tasks", ""), err
        assert not leaks(err, key)


def test_a_server_echoing_the_key_in_every_form_reaches_neither_stderr_nor_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTILE_KEY", KEY)
    echo = " | ".join(every_form(KEY).values()).encode()
    bench = ["llm-bench", "--endpoint", "", "--model-name", "m", "--api-key-env", "HOSTILE_KEY", "-n", "1",
             "--formulation", "functions", "--max-tries", "1", "--retries", "0", "--store", str(tmp_path / "s")]
    with HostileServer() as server:
        bench[2] = server.url
        server.answer = Answer(status=401, chunks=[echo])  # refused: the run fails, its error stored
        first = run_depthlab(*bench)
        server.answer = Answer(status=500, chunks=[echo], headers={"X-Echo": urllib.parse.quote(KEY)})
        second = run_depthlab(*bench)  # fails for good after its retries
        server.answer = Answer.chat(f"the key is {KEY}")  # a reply kept in the store
        third = run_depthlab(*bench, "--seed", "1", "--json")
    assert first[0] == 2 and second[0] == 2 and third[0] == 0, (first, second, third)
    assert "HTTP 401" in first[2] and "HTTP 500" in second[2]
    for _, out, err in (first, second, third):
        assert not leaks(out + err), (out, err)
    with sqlite3.connect(tmp_path / "s" / "depthlab.sqlite") as conn:
        stored = "\n".join(str(value) for table in ("runs", "records", "metrics")
                           for row in conn.execute(f"SELECT * FROM {table}") for value in row)
    assert "***" in stored and not leaks(stored), stored[:500]


def test_the_traceback_file_of_an_internal_error_is_redacted():
    from depthlab.cli.app import _internal_error

    secrets.register(KEY)
    line = _internal_error(RuntimeError(f"boom {KEY!r}"))  # the line itself is redacted as main prints it
    path = Path(line.split("the traceback is in ")[1].split(";")[0])
    try:
        assert "RuntimeError: boom '***'" in path.read_text() and not leaks(path.read_text())
    finally:
        path.unlink()
