"""Ask a language model: a local Hugging Face causal LM, or any OpenAI-compatible chat-completions server.

Both runners take a list of :class:`Request` (prompt text, temperature, seed) and return one :class:`Reply`
per request, in order. ``temperature == 0`` means greedy decoding.

:class:`HFRunner` loads a model folder or a name already in the Hugging Face cache, offline
(``local_files_only=True``; nothing is downloaded). When the tokenizer has a chat template the prompt is
sent as one user message through it (``add_generation_prompt=True``); otherwise the model completes
``prompt + "\\n"`` and the reply is the first line of what it writes (the stop-at-newline habit of
evaluation harnesses for base models). Sampling is pure temperature sampling (``top_k=0``, ``top_p=1``,
as an API samples by default), seeded per batch with ``torch.manual_seed`` (exactly per question when
``batch_size`` is 1). ``transformers`` is imported only when a local model is loaded.

:class:`EndpointRunner` posts to ``<base URL>/chat/completions`` with ``httpx`` (one pooled client shared by its
threads; proxies from the environment as usual). The API key is read from the environment variable whose *name*
is given (default ``OPENAI_API_KEY``); it is checked first (printable ASCII without spaces: a line break in it
would otherwise be refused by h11 in a message that quotes it), sent in the ``Authorization`` header and never
part of :meth:`EndpointRunner.describe`, ``repr`` or a message (``depthlab.secrets`` redacts it in every form).
An answer is read as untrusted input: at most :data:`MAX_BODY_BYTES` of it (counted while it streams in, and
asked for uncompressed, so a small compressed answer cannot unpack into gigabytes), nesting at most 64 levels
(``depthlab.bounded``), and the whole request (connecting, the headers, the body) within ``timeout`` seconds: a
server that trickles its answer has its connection shut at the deadline (each request opens its own connection,
so the deadline can close it). 429, 5xx, connection errors, timeouts and malformed answers are retried up to
``retries`` times
with exponential backoff and jitter, waiting what a ``Retry-After`` (or ``retry-after-ms``) header asks for when
there is one and it fits the request's deadline (``timeout``; a longer or endless wait fails the request, naming the
header); any other answer that is not 200 fails the request at once with :class:`RequestRefused` (its
``status`` says which, so a caller can tell a question the server refuses from a server that is down); at most
``concurrency`` requests are in flight (a thread pool). The retry loop is ours, not the client's, because the
protocol counts each question's HTTP attempts.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import json
import math
import os
import random
import socket
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from depthlab.bounded import BoundError, parse_json
from depthlab.errors import UserError
from depthlab.secrets import check_key, redact, register

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
DEFAULT_LOCAL_MAX_NEW_TOKENS = 16
MAX_RETRY_AFTER_S = 300.0  # the longest wait a Retry-After may ask for, whatever --timeout is
MAX_TIMEOUT_S = 3600.0  # --timeout at most: a request of an hour is a server that will not answer
MAX_BODY_BYTES = 4 << 20  # an answer of a few hundred tokens is a few KB
RETRYABLE = frozenset({429, *range(500, 600)})
_sleep = time.sleep  # the wait between retries (tests replace it)


@dataclass(frozen=True)
class Request:
    prompt: str
    temperature: float
    seed: int


@dataclass(frozen=True)
class Reply:
    text: str
    attempts: int = 1  # HTTP attempts it took (1 without retries; always 1 for a local model)


class Runner(Protocol):
    parallelism: int  # how many requests it works on at once (batch size or concurrency)

    def describe(self) -> dict[str, Any]: ...

    def generate(self, requests: list[Request]) -> list[Reply]: ...

    def close(self) -> None: ...


class EndpointError(UserError):
    """The endpoint failed for good (refused the request, or kept failing after every retry).

    ``status``: the HTTP status of a refused request; None when the endpoint could not be reached or kept failing.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class DeadlineExceeded(Exception):
    """A request that took longer than the runner's timeout in all (retried like any timeout)."""


class UnsafeAnswer(Exception):
    """An answer past MAX_BODY_BYTES, or compressed though it was asked for uncompressed (retried)."""


class RequestRefused(EndpointError):
    """The endpoint answered a request with a status that retrying does not change (400, 401, 404, …)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message, status)


# ------------------------------------------------------------------------------------------- local


class HFRunner:
    """A causal LM and its tokenizer loaded offline with ``transformers`` from a folder or the HF cache."""

    def __init__(
        self,
        model: str,
        max_new_tokens: int | None = None,
        batch_size: int = 1,
        device: str | None = None,
        dtype: str = "auto",
        trust_remote_code: bool = False,
        quiet: bool = False,
    ) -> None:
        try:
            import torch
            import transformers
        except ImportError:
            raise UserError(
                "--model: a local model needs the transformers package: pip install 'depthlab[llm]'"
            ) from None
        if batch_size < 1:
            raise UserError(f"--batch-size: must be at least 1 (got {batch_size})")
        self._torch = torch
        if quiet:  # no loading bars or advice on stderr (process-wide: meant for the CLI)
            transformers.utils.logging.disable_progress_bar()
            transformers.utils.logging.set_verbosity_error()
        path = Path(model).expanduser()
        self.model_ref = str(path.absolute()) if path.exists() else model
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(
                self.model_ref, local_files_only=True, trust_remote_code=trust_remote_code
            )
            lm = transformers.AutoModelForCausalLM.from_pretrained(
                self.model_ref, local_files_only=True, dtype=dtype, trust_remote_code=trust_remote_code
            )
        except (OSError, ValueError, KeyError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(
                f"--model: cannot load {model!r} offline (a model folder, or a name already in the Hugging "
                f"Face cache): {first}"
            ) from None
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            lm.to(self.device)
        except (RuntimeError, AssertionError) as e:
            raise UserError(f"--device: cannot use {self.device!r}: {str(e).splitlines()[0]}") from None
        lm.eval()
        self.lm = lm
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        self.chat = bool(getattr(tokenizer, "chat_template", None))
        self.max_new_tokens = int(max_new_tokens or DEFAULT_LOCAL_MAX_NEW_TOKENS)
        self.parallelism = int(batch_size)
        gen = lm.generation_config
        self._eos = gen.eos_token_id if gen.eos_token_id is not None else tokenizer.eos_token_id
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id
            if tokenizer.eos_token is not None:
                tokenizer.pad_token = tokenizer.eos_token
        if pad is None:
            pad = self._eos[0] if isinstance(self._eos, list) and self._eos else self._eos
        self._pad = 0 if pad is None else pad
        self._transformers = transformers

    def describe(self) -> dict[str, Any]:
        return {
            "type": "hf",
            "model": self.model_ref,
            "chat_template": self.chat,
            "max_new_tokens": self.max_new_tokens,
        }

    def text_for(self, prompt: str) -> str:
        """What the model is fed for ``prompt``: the chat template's rendering, or ``prompt + "\\n"``."""
        if self.chat:
            messages = [{"role": "user", "content": prompt}]
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return prompt + "\n"

    def _generation_config(self, temperature: float) -> Any:
        sample = temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "do_sample": sample,
            "pad_token_id": self._pad,
            "eos_token_id": self._eos,
        }
        if sample:
            kwargs.update(temperature=float(temperature), top_k=0, top_p=1.0)
        return self._transformers.GenerationConfig(**kwargs)

    def generate(self, requests: list[Request]) -> list[Reply]:
        torch = self._torch
        replies: list[Reply] = []
        for start in range(0, len(requests), self.parallelism):
            batch = requests[start : start + self.parallelism]
            temps = {r.temperature for r in batch}
            groups = [batch] if len(temps) == 1 else [[r] for r in batch]
            for group in groups:
                texts = [self.text_for(r.prompt) for r in group]
                enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not self.chat).to(
                    self.device
                )
                enc.pop("token_type_ids", None)
                torch.manual_seed(group[0].seed)
                with torch.inference_mode():
                    out = self.lm.generate(**enc, generation_config=self._generation_config(group[0].temperature))
                new = out[:, enc["input_ids"].shape[1] :]
                for row in self.tokenizer.batch_decode(new, skip_special_tokens=True):
                    text = row if self.chat else (row.lstrip().split("\n", 1)[0] if row.strip() else "")
                    replies.append(Reply(text))
        return replies

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------- endpoint


def chat_url(base_url: str) -> str:
    """``<base URL>/chat/completions`` (a URL that already ends so is kept); rejects credentials in it."""
    try:
        parts = urllib.parse.urlsplit(base_url.strip())
        hostname, _ = parts.hostname, parts.port
    except ValueError as e:  # an unclosed [IPv6 address, a port that is not a number
        raise UserError(f"--endpoint: not a URL ({e}): expected one such as http://localhost:8000/v1 "
                        f"(got {base_url!r})") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise UserError(f"--endpoint: expected an http(s) URL such as http://localhost:8000/v1 (got {base_url!r})")
    if parts.username or parts.password:
        raise UserError(
            "--endpoint: put the API key in the environment variable named by --api-key-env, not in the URL"
        )
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path += "/chat/completions"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _retry_after(headers: Any) -> tuple[float | None, str]:
    """The wait a 429/5xx answer asks for, in seconds, and the header that asked: ``retry-after-ms``, else
    ``Retry-After`` in seconds or as an HTTP date; (None, "") when it asks for none that can be read. A value that
    is not finite (``inf``, ``nan``) is returned as such: :meth:`EndpointRunner._delay` refuses it."""
    if headers is None:
        return None, ""
    ms, value = headers.get("retry-after-ms"), headers.get("Retry-After")
    with contextlib.suppress(ValueError):
        if ms is not None:
            return _not_negative(float(ms) / 1000.0), f"retry-after-ms: {ms.strip()[:40]}"
    if value is None:
        return None, ""
    shown = f"Retry-After: {value.strip()[:40]}"
    try:
        return _not_negative(float(value)), shown
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):
        return None, ""
    return max(0.0, when.timestamp() - time.time()), shown


def _not_negative(seconds: float) -> float:
    return seconds if math.isnan(seconds) else max(0.0, seconds)


@functools.cache
def _tls_context() -> Any:
    """httpx's default TLS context (certifi's bundle, or $SSL_CERT_FILE / $SSL_CERT_DIR), built once per process:
    loading the bundle takes 0.1 to 0.2 s, which every runner paid, also for http:// endpoints."""
    import httpx

    return httpx.create_ssl_context()


class EndpointRunner:
    """An OpenAI-compatible chat-completions endpoint (httpx, thread-pool concurrency)."""

    def __init__(
        self,
        base_url: str,
        model_name: str,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        timeout: float = 60.0,
        retries: int = 5,
        concurrency: int = 4,
        max_new_tokens: int | None = None,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
    ) -> None:
        if not model_name:
            raise UserError("--model-name: required with --endpoint (the model the server should answer with)")
        if concurrency < 1:
            raise UserError(f"--concurrency: must be at least 1 (got {concurrency})")
        if not 0 < timeout <= MAX_TIMEOUT_S:  # also refuses nan; inf killed the deadline's timer thread
            raise UserError(f"--timeout: must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:,.0f} "
                            f"(got {timeout})")
        if retries < 0:
            raise UserError(f"--retries: must be 0 or more (got {retries})")
        if not api_key_env or "=" in api_key_env:
            raise UserError(f"--api-key-env: the NAME of an environment variable (got {api_key_env!r})")
        self.url = chat_url(base_url)
        self.model_name = model_name
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.parallelism = int(concurrency)
        self.max_new_tokens = max_new_tokens
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        key = os.environ.get(api_key_env, "").strip()
        try:
            check_key(key, f"${api_key_env}")
        except ValueError as e:
            raise UserError(str(e)) from None
        register(key)  # from here on, every message depthlab writes has it redacted, in any form
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        import httpx

        self._pool = ThreadPoolExecutor(max_workers=self.parallelism, thread_name_prefix="depthlab-llm")
        self._client = httpx.Client(headers={**self._headers, "Accept-Encoding": "identity"}, timeout=self.timeout,
                                    verify=_tls_context(),
                                    limits=httpx.Limits(max_connections=self.parallelism, max_keepalive_connections=0))
        self._transport_errors = (httpx.TransportError, httpx.DecodingError)
        self._lock = threading.Lock()
        self.http_requests = 0  # every HTTP attempt made (retries included)
        self.http_retries = 0  # attempts that failed and were retried

    def __repr__(self) -> str:
        return f"EndpointRunner(url={self.url!r}, model_name={self.model_name!r})"

    def describe(self) -> dict[str, Any]:
        """The endpoint without the key and without the URL's query (stored with the run)."""
        parts = urllib.parse.urlsplit(self.url)
        url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        return {
            "type": "endpoint",
            "url": url,
            "model": self.model_name,
            "max_new_tokens": self.max_new_tokens,
        }

    @staticmethod
    def redact(text: str) -> str:
        """``text`` with the API key, in any form (``depthlab.secrets``), replaced by ``***``."""
        return redact(text)

    def _payload(self, request: Request) -> bytes:
        body: dict[str, Any] = {
            "model": self.model_name,
            "messages": [{"role": "user", "content": request.prompt}],
            "temperature": float(request.temperature),
            "stream": False,
        }
        if self.max_new_tokens is not None:
            body["max_tokens"] = int(self.max_new_tokens)
        return json.dumps(body).encode("utf-8")

    def _post(self, data: bytes) -> tuple[int, Any, bytes]:
        """(status, headers, body) of one POST, within ``timeout`` seconds in all and MAX_BODY_BYTES of body;
        a request past its deadline raises :class:`DeadlineExceeded`, a body too big :class:`UnsafeAnswer`."""
        sockets: list[socket.socket] = []

        def trace(event: str, info: dict[str, Any]) -> None:  # httpcore's hook: the new connection's socket
            if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
                sockets.append(info["return_value"].get_extra_info("socket"))

        def shut() -> None:  # wakes a read blocked on a trickling server, from the timer's thread
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        started = time.monotonic()
        timer = threading.Timer(self.timeout, shut)
        timer.daemon = True
        timer.start()
        try:
            with self._client.stream("POST", self.url, content=data, extensions={"trace": trace}) as response:
                encoding = response.headers.get("content-encoding", "identity").lower()
                if encoding != "identity":
                    raise UnsafeAnswer(f"{self.url} answered with Content-Encoding {encoding[:20]}, though an "
                                       f"uncompressed answer was asked for")
                body = bytearray()
                for chunk in response.iter_raw():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        raise UnsafeAnswer(f"{self.url} answered with more than {MAX_BODY_BYTES:,} bytes")
                return response.status_code, response.headers, bytes(body)
        except self._transport_errors:
            if time.monotonic() - started >= self.timeout:
                raise DeadlineExceeded(f"{self.url} did not answer within --timeout {self.timeout:g} s") from None
            raise
        finally:
            timer.cancel()

    @staticmethod
    def _content(body: bytes) -> str:
        """The first choice's message content (raises ValueError/KeyError/… on a malformed answer)."""
        data = parse_json(body, "answer")  # nesting bounded: 200,000 [ is refused, not a RecursionError
        message = data["choices"][0]["message"]
        content = message.get("content")
        if content is None:
            return ""
        if isinstance(content, list):  # content parts
            return "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise ValueError("content is not text")
        return content

    def _delay(self, attempt: int, retry_after: float | None, header: str) -> float:
        """The wait before the next attempt: what the server asked for, if it fits the request's deadline
        (``--timeout``, at most MAX_RETRY_AFTER_S; a longer, endless or unreadable wait is refused naming the
        header, never slept), else exponential backoff with jitter."""
        if retry_after is not None:
            limit = min(self.timeout, MAX_RETRY_AFTER_S)
            if not retry_after <= limit:
                raise EndpointError(f"{self.url} asks to wait before a retry ({header}), longer than the "
                                    f"{limit:g} s --timeout allows; rerun later, or raise --timeout")
            return retry_after
        base = min(self.max_backoff, self.backoff * (2**attempt))
        return base * (0.5 + 0.5 * random.random())  # exponential backoff with jitter

    def complete(self, request: Request) -> Reply:
        """One request, retried on 429/5xx/connection errors/malformed answers; raises EndpointError."""
        data = self._payload(request)
        attempt = 0
        while True:
            retry_after: float | None = None
            header = ""
            with self._lock:
                self.http_requests += 1
            try:
                status, headers, body = self._post(data)
            except (DeadlineExceeded, UnsafeAnswer) as e:
                problem = str(e)
            except self._transport_errors as e:  # refused, reset, timed out, a broken answer
                problem = f"could not reach {self.url} ({type(e).__name__}: {e})"
            else:
                if status == 200:
                    try:
                        # a server echoing the key back does not get it into the store
                        return Reply(redact(self._content(body)), attempts=attempt + 1)
                    except (ValueError, KeyError, IndexError, TypeError, AttributeError, UnicodeDecodeError) as e:
                        why = f" ({e.detail})" if isinstance(e, BoundError) else ""
                        problem = f"malformed chat-completions answer from {self.url}{why}"
                elif status in RETRYABLE:
                    retry_after, header = _retry_after(headers)
                    problem = f"{self.url} answered HTTP {status}"
                else:
                    excerpt = " ".join(body[:300].decode("utf-8", "replace").split())
                    hint = f" (is ${self.api_key_env} set?)" if status in (401, 403) else ""
                    raise RequestRefused(status, self.redact(f"{self.url} answered HTTP {status}{hint}: {excerpt}"))
            if attempt >= self.retries:
                raise EndpointError(
                    self.redact(f"{problem}, after {attempt + 1} attempts; rerun the same command to resume")
                )
            with self._lock:
                self.http_retries += 1
            _sleep(self._delay(attempt, retry_after, header))
            attempt += 1

    def generate(self, requests: list[Request]) -> list[Reply]:
        return list(self._pool.map(self.complete, requests))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()
