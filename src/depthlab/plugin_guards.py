"""The process guards that keep a plugin's code from breaking a depthlab command (``depthlab.plugins`` installs them
when it loads the first plugin): what plugin code prints goes to stderr (``--json`` stays one line), ``os._exit`` and
``os.fork`` called by plugin code are refused with a :class:`PluginError`, a thread it starts is a daemon that runs as
that plugin's code, and file descriptor 1 points at stderr while a plugin file is imported."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

from .errors import UserError

_RUNNING = threading.local()  # .label: the plugin code this thread is running (see running_plugin)
_REAL_EXIT = os._exit
_REAL_FORK = getattr(os, "fork", None)
_REAL_START = threading.Thread.start


class PluginError(UserError, ValueError):
    """Plugin code that failed or returned what a task may not: the message names the file, the task, the method."""


class PluginInterrupt(KeyboardInterrupt):
    """A KeyboardInterrupt raised while plugin code ran: still an interruption (exit 130), its message names the
    plugin file, the task and the method (and :func:`interruption` gives it to the CLI, which Typer's exit code
    130 leaves without the exception)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        _INTERRUPTED.append(message)


_INTERRUPTED: list[str] = []


def interruption() -> str | None:
    """Where plugin code was interrupted (the last :class:`PluginInterrupt` since the last call), or None."""
    last = _INTERRUPTED[-1] if _INTERRUPTED else None
    _INTERRUPTED.clear()
    return last


def _exit_guard(code: int) -> None:
    """``os._exit`` while plugins are loaded: refused in a thread running plugin code, the real one elsewhere."""
    label = getattr(_RUNNING, "label", None)
    if label is not None:
        raise PluginError(f"{label}: called os._exit({code}), which would end depthlab without a word; raise an "
                          f"exception instead")
    _REAL_EXIT(code)


class _PluginStdout:
    """stdout while plugins are loaded: what a thread running plugin code writes goes to stderr instead (everything
    else, ``isatty``, ``fileno``, ``buffer`` included, is the real stdout's)."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def write(self, text: str) -> int:
        return (sys.stderr if getattr(_RUNNING, "label", None) else self.out).write(text)

    def flush(self) -> None:
        self.out.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.out, name)


def _fork_guard() -> int:
    """``os.fork`` while plugins are loaded: refused in a thread running plugin code (a second depthlab process
    would write a second answer to stdout), the real one elsewhere."""
    label = getattr(_RUNNING, "label", None)
    if label is not None:
        raise PluginError(f"{label}: called os.fork(), which would run the rest of depthlab twice; start "
                          f"processes with subprocess instead")
    assert _REAL_FORK is not None
    return _REAL_FORK()


def _start_guard(thread: threading.Thread) -> None:
    """``Thread.start`` while plugins are loaded: a thread that plugin code starts is made a daemon, so it cannot
    keep depthlab alive once the command's result is out (a non-daemon one did, for as long as it ran), and it
    runs as that plugin's code (its prints go to stderr)."""
    label = getattr(_RUNNING, "label", None)
    if label is not None:
        thread.daemon = True
        run = thread.run

        def run_as_plugin() -> None:
            with running_plugin(label):
                run()

        thread.run = run_as_plugin  # type: ignore[method-assign]
    _REAL_START(thread)


def install_guards() -> None:
    """Replace os._exit, os.fork, Thread.start and sys.stdout by their guarded forms (idempotent)."""
    os._exit = _exit_guard
    if _REAL_FORK is not None:
        os.fork = _fork_guard
    threading.Thread.start = _start_guard  # type: ignore[method-assign]
    if not isinstance(sys.stdout, _PluginStdout) and sys.stdout is not None:
        sys.stdout = _PluginStdout(sys.stdout)


@contextlib.contextmanager
def stdout_descriptor_to_stderr() -> Iterator[None]:
    """File descriptor 1 pointed at stderr while a plugin file is imported: what it writes with ``os.write(1, …)``
    (past ``sys.stdout``) cannot reach ``--json``'s one line."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def running_plugin(label: str) -> Iterator[None]:
    """Mark this thread as running the plugin code ``label`` names (its prints go to stderr, os._exit is refused)."""
    outer = getattr(_RUNNING, "label", None)
    _RUNNING.label = label
    try:
        yield
    finally:
        _RUNNING.label = outer
