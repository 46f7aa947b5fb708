"""A chat-completions server on 127.0.0.1 that answers whatever a test tells it to: any status, headers and body,
sent in chunks with a pause between them (a server that trickles). No network beyond this machine."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    """What the server sends: ``chunks`` written one after the other, ``pause`` seconds apart; with ``length`` the
    Content-Length header (None: no length, the body ends when the connection closes)."""

    status: int = 200
    chunks: list[bytes] = field(default_factory=lambda: [b""])
    pause: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    length: int | None = -1  # -1: the true length of the chunks

    @classmethod
    def chat(cls, content: Any = "1") -> Answer:
        """A well-formed chat-completions answer with ``content``."""
        return cls(chunks=[json.dumps({"choices": [{"message": {"content": content}}]}).encode()])


class HostileServer:
    """``with HostileServer() as server: server.answer = Answer(...); … server.url``."""

    def __init__(self) -> None:
        self.answer = Answer.chat()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                answer = server.answer
                try:
                    self.send_response(answer.status)
                    for key, value in answer.headers.items():
                        self.send_header(key, value)
                    length = sum(map(len, answer.chunks)) if answer.length == -1 else answer.length
                    if length is not None:
                        self.send_header("Content-Length", str(length))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for i, chunk in enumerate(answer.chunks):
                        if i and answer.pause:
                            time.sleep(answer.pause)
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except OSError:  # the client hung up (its deadline, or its size cap): what the tests want
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
