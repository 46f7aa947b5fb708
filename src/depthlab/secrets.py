"""Secrets (API keys) that never leave the process: checked without being echoed, and redacted in every form.

A key is checked before it is used (:func:`check_key`): printable ASCII without spaces, as an HTTP header value
and the Bearer scheme (RFC 6750's ``b64token`` is a subset) allow. A key that fails is refused naming the variable
and the position of the first bad character, never the key. A key in use is registered (:func:`register`), and
:func:`redact` replaces it with ``***`` in any form a library or a server may have put it in a message: raw, as
Python's ``repr`` escapes it (h11's ``Illegal header value b'Bearer sk-abc\\r\\n…'``), JSON-escaped,
percent-encoded (any of its bytes, hex digits in either case, ``+`` for a space) and base64 (standard and
URL-safe, at each of the three alignments it can take inside a longer encoded text). The CLI's error boundary
passes everything it writes to stderr, and the traceback file, through it; what is stored in a run's ``error``
goes through it first.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse

MIN_FRAGMENT = 8  # characters of a base64 fragment redacted at least: shorter ones are too common to mean the key

_SECRETS: set[str] = set()
_PATTERN: re.Pattern[str] | None = None


def check_key(key: str, source: str) -> None:
    """A ValueError naming ``source`` (``$OPENAI_API_KEY``) when ``key`` is not printable ASCII without spaces;
    the message gives the position and kind of the first bad character, never the key."""
    for i, char in enumerate(key):
        if not "!" <= char <= "~":
            kind = ("a line break" if char in "\r\n" else "a space" if char.isspace() else
                    "a control character" if ord(char) < 32 or ord(char) == 127 else "a non-ASCII character")
            raise ValueError(f"{source}: the API key has {kind} at character {i + 1} of {len(key)}; a key is "
                             f"printable ASCII without spaces or line breaks (the key is not shown)")


def register(secret: str | None) -> None:
    """Redact ``secret`` from now on in everything :func:`redact` is given."""
    global _PATTERN
    if secret:
        _SECRETS.add(secret)
        patterns = {_pattern(form) for s in _SECRETS for form in forms(s)} | {_percent(s) for s in _SECRETS}
        _PATTERN = re.compile("|".join(sorted(patterns, key=len, reverse=True)))


def _pattern(form: str) -> str:
    """``form`` as a regular expression in which each percent-escape's hex digits match either case."""
    either = lambda m: "%" + "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in m[1])  # noqa: E731
    return re.sub(r"%([0-9A-F]{2})", either, re.escape(form))


def _percent(secret: str) -> str:
    """A regular expression of ``secret`` with any of its bytes percent-encoded or not, hex digits in either case
    (a server may encode even the characters URLs leave as they are: ``sk%2Dabc`` is ``sk-abc``)."""
    def byte(value: int) -> str:
        hex_digits = "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in f"{value:02X}")
        return f"(?:{re.escape(chr(value))}|%{hex_digits})" if value < 128 else f"%{hex_digits}"

    return "".join(byte(value) for value in secret.encode("utf-8", "surrogatepass"))


def forms(secret: str) -> set[str]:
    """Every text ``secret`` may appear as in a message (empty forms left out)."""
    raw = secret.encode("utf-8", "surrogatepass")
    out = {secret, repr(secret)[1:-1], repr(raw)[2:-1], json.dumps(secret)[1:-1],
           json.dumps(secret, ensure_ascii=False)[1:-1]}
    out |= {urllib.parse.quote(raw, safe=""), urllib.parse.quote(raw), urllib.parse.quote_plus(raw),
            "".join(f"%{value:02X}" for value in raw)}  # every byte encoded (:func:`_percent` matches any mix)
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        out.add(encode(raw).decode())
        for shift in range(3):  # the secret after `shift` other bytes: only whole 4-character groups are its own
            text = encode(b"\0" * shift + raw).decode().rstrip("=")
            start = 4 if shift else 0
            end = len(text) - len(text) % 4  # a last group of 2 or 3 characters mixes in what follows
            if end - start >= MIN_FRAGMENT:
                out.add(text[start:end])
    return {form for form in out if form}


def redact(text: str) -> str:
    """``text`` with every registered secret, in every form of :func:`forms`, replaced by ``***``."""
    return text if _PATTERN is None else _PATTERN.sub("***", text)
